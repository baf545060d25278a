"""Shared pytest fixtures: paths to the repository, the tern binary and the shared data."""
import glob
import os
import subprocess
import sys

import pytest

# CTranslate2 picks its int8 GEMM when it is first imported: with CT2_USE_MKL=1, Intel MKL's on any
# CPU, exact like Tern's (oneDNN's u8*s8 GEMM saturates on AVX2-only CPUs; tests/test_translate_peer.py
# says more). Set here, before any test module imports ctranslate2, so that the order in which a
# pytest process (or an xdist worker) imports the test files does not change the reference.
os.environ.setdefault("CT2_USE_MKL", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERN = os.environ.get("TERN_BIN", os.path.join(ROOT, "build", "tern"))
sys.path.insert(0, os.path.join(ROOT, "tests", "peer"))
DATA = os.environ.get("TERN_DATA", os.path.join(ROOT, "..", "shared", "data"))


@pytest.fixture(scope="session")
def tern_bin():
    assert os.path.exists(TERN), "build/tern is missing: run make"
    return TERN


@pytest.fixture(scope="session")
def tern_python(tmp_path_factory):
    """The Python package (python/) built once per session against build/libtern.so and imported:
    one build, so every test module gets the same `tern` module (a second build imported in the
    same process would find the first one in sys.modules)."""
    build = os.path.dirname(TERN)
    assert os.path.exists(os.path.join(build, "libtern.so")), "build/libtern.so is missing: run make"
    base = tmp_path_factory.mktemp("pybuild")
    env = dict(os.environ, TERN_NO_MAKE="1", TERN_BUILD_DIR=build)
    r = subprocess.run([sys.executable, "setup.py", "-q", "build", "--build-base", str(base)],
                       cwd=os.path.join(ROOT, "python"), env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lib = glob.glob(str(base / "lib*"))
    assert len(lib) == 1, lib
    sys.path.insert(0, lib[0])
    try:
        import tern as t
    finally:
        sys.path.remove(lib[0])
    assert t.__file__.startswith(lib[0]), t.__file__
    return t


@pytest.fixture(scope="session")
def data_dir():
    if not os.path.isdir(DATA):
        pytest.skip(f"shared data not found at {DATA} (set TERN_DATA)")
    return DATA


@pytest.fixture(scope="session")
def spm_model(tmp_path_factory, data_dir):
    """A SentencePiece unigram model (600 pieces) trained on Multi30k en+de, and a random-weight
    CTranslate2 Transformer whose shared vocabulary is its pieces (sentencepiece.model beside it)."""
    make_models = pytest.importorskip("make_models")
    spm = pytest.importorskip("sentencepiece")
    ctranslate2 = pytest.importorskip("ctranslate2")
    d = tmp_path_factory.mktemp("spm")
    text = d / "train.txt"
    lines = []
    for lang in ("en", "de"):
        with open(os.path.join(data_dir, "multi30k", f"train.{lang}"), encoding="utf-8") as f:
            lines += [next(f) for _ in range(3000)]
    text.write_text("".join(lines), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(d / "sp"), vocab_size=600,
                                   model_type="unigram", character_coverage=1.0, num_threads=1,
                                   minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(d / "sp.model"))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    assert pieces[:3] == ["<unk>", "<s>", "</s>"]
    shape = dict(name="spm-shared", enc_layers=2, dec_layers=2, heads=4, d=32, ff=64, pre_norm=True,
                 activation="relu", src_vocab=len(pieces), tgt_vocab=len(pieces), shared_vocab=True,
                 tie_output=True, share_embeddings=False, learned_pos=False, scale_embeddings=True,
                 eps=None, tokens=pieces)
    model_dir = str(d / "model")
    make_models.make_model(shape, model_dir)
    with open(d / "sp.model", "rb") as f, open(os.path.join(model_dir, "sentencepiece.model"), "wb") as g:
        g.write(f.read())
    ct2 = ctranslate2.Translator(model_dir, device="cpu", intra_threads=1)
    return {"dir": model_dir, "sp": sp, "ct2": ct2, "tmp": d}
