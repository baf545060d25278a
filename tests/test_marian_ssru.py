"""Marian's SSRU decoder (--transformer-decoder-autoreg rnn --dec-cell ssru: the decoder of
Bergamot/Firefox students) read as Marian writes it, against Marian itself.

pymarian (PyPI, Marian 1.12) trains two tiny SSRU transformers for 100 updates on 2000 Multi30k
en-de lines (../shared/data/multi30k, or $TERN_MULTI30K), both at once (one core each):
* "ssru-postnorm-tied-all-swish-spm": post-norm ('' / 'dan': the SSRU's norm is
  decoder_lN_rnn_ffn_ln_*), --tied-embeddings-all, swish, a joint SentencePiece vocabulary;
* "ssru-prenorm-tied-relu-yml": pre-norm ('n' / 'da' / top 'n': decoder_lN_rnn_ln_*_pre),
  --tied-embeddings, relu, --transformer-dim-ffn 48, separate YAML vocabularies (`--pretokenized`).
Both 2 encoder / 2 decoder layers of width 32 (the students' 2-layer SSRU decoder; dim 32 keeps
the test short). Marian's Translator decodes 200 test lines (normalize 0, --mini-batch 1: batched,
Marian's own greedy output of the pre-norm SSRU model differs from its unbatched one on 23/200 lines,
where Tern's rows never depend on each other); Tern reads the directory:
* greedy (`-b 1 --max-length-a 3 --min-length 0`) identical on >= 99.5 %;
* force decoding (`tern rescore` of Marian's greedy pieces) gives Marian's word scores (5 decimals)
  within 1e-4, the end token's included;
* beam 4 (`--eos-policy marian --no-early-stop --length-penalty 0`) identical on >= 97 % (the SSRU
  states follow their hypotheses: beam search is not greedy here); other batch sizes give the same
  beam and greedy outputs;
* int8 (`--compute-type int8`: W and Wf quantized per row like every other matrix): greedy
  agreement with Marian's float32 output reported, and its force-decoding word scores within 0.1
  of float32's;
* `tern convert` (Tern's format) decodes the same; `--quantize int8` loads and decodes; `--to ct2`
  and `--to hf` are refused, naming the SSRU (neither CTranslate2 nor transformers has one);
* bad files: an SSRU model without one of its arrays (decoder_l2_rnn_Wf), with a wrong-shaped one,
  or with the cell's own layer norm (--layer-normalization): errors naming the file and the array
  or option.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

pymarian = pytest.importorskip("pymarian", reason="pymarian not installed (scripts/setup.sh installs it)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern")
DATA = os.environ.get("TERN_MULTI30K") or os.path.join(ROOT, "..", "shared", "data", "multi30k")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
N_TRAIN, N_TEST = 2000, 200

SHAPES = {
    "ssru-postnorm-tied-all-swish-spm": dict(vocabs=["vocab.spm", "vocab.spm"], dim_vocabs=[300, 300],
                                             tied_embeddings_all=True, transformer_ffn_activation="swish",
                                             transformer_dim_ffn=64),
    "ssru-prenorm-tied-relu-yml": dict(vocabs=["vocab.src.yml", "vocab.trg.yml"], dim_vocabs=[400, 400],
                                       tied_embeddings=True, transformer_preprocess="n", transformer_postprocess="da",
                                       transformer_postprocess_top="n", transformer_ffn_activation="relu",
                                       transformer_dim_ffn=48),
}

sys.path.insert(0, os.path.join(ROOT, "tests", "peer"))
from marian_peer import BEAM4, DECODE, GREEDY, TRAIN  # noqa: E402  (tests/peer: Marian's training and decoding scripts)


def run(*args, input=None, check=True):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=ENV, input=input, timeout=600)
    if check:
        assert r.returncode == 0, f"{args[:4]}: {r.stderr[-2000:]}"
    return r


def run_all(cmds):
    """The commands at once (two cores: the two models' trainings, then their four decodings)."""
    procs = [subprocess.Popen([str(a) for a in c], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
             for c in cmds]
    outs = []
    for c, p in zip(cmds, procs):
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, f"{c[:4]}: {err[-2000:]}"
        outs.append(out)
    return outs


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Both shapes trained and decoded by Marian (greedy and beam 4), once per session."""
    if not os.path.exists(TERN):
        pytest.skip(f"{TERN} not built")
    if not os.path.exists(os.path.join(DATA, "train.en")):
        pytest.skip(f"Multi30k not found at {DATA} (set TERN_MULTI30K)")
    d = tmp_path_factory.mktemp("m30k")
    for lang in ("en", "de"):
        with open(os.path.join(DATA, f"train.{lang}"), encoding="utf-8") as f:
            (d / f"train.{lang}").write_text("".join(f.readline() for _ in range(N_TRAIN)), encoding="utf-8")
    with open(os.path.join(DATA, "test_2016_flickr.en"), encoding="utf-8") as f:
        (d / "test.en").write_text("".join(f.readline() for _ in range(N_TEST)), encoding="utf-8")
    names = sorted(SHAPES)
    dirs = {n: tmp_path_factory.mktemp(n) for n in names}
    run_all([[sys.executable, "-c", TRAIN, dirs[n], d / "train",
              json.dumps(dict(SHAPES[n], transformer_decoder_autoreg="rnn", dec_cell="ssru"))] for n in names])
    jobs = [(n, beam) for n in names for beam in (1, 4)]
    outs = run_all([[sys.executable, "-c", DECODE, dirs[n], json.dumps(SHAPES[n]["vocabs"]), beam, d / "test.en"]
                    for n, beam in jobs])
    res = {}
    for (n, beam), out in zip(jobs, outs):
        pretok = SHAPES[n]["vocabs"][0].endswith(".yml")
        res.setdefault(n, dict(name=n, dir=dirs[n], pretok=["--pretokenized"] if pretok else [], ref={},
                               src=d / "test.en"))["ref"][beam] = json.loads(out)
    return res


@pytest.fixture(params=sorted(SHAPES))
def case(request, models):
    return models[request.param]


def tern_translate(case, model, opts):
    r = run(TERN, "translate", "-m", model, "-t", "1", *opts, *case["pretok"], input=case["src"].read_text())
    return r.stdout.splitlines()


def rescore(case, model, targets, tmp_path, opts=()):
    """Tern's word scores of the targets (Marian's pieces) of the sources at the given lines."""
    src = case["src"].read_text(encoding="utf-8").splitlines()
    if case["pretok"]:
        pieces = [src[i] for i, _ in targets]
    else:  # the source as SentencePiece pieces too
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=str(case["dir"] / "vocab.spm"))
        pieces = [" ".join(sp.encode(src[i], out_type=str)) for i, _ in targets]
    (tmp_path / "s").write_text("\n".join(pieces) + "\n", encoding="utf-8")
    (tmp_path / "t").write_text("\n".join(t for _, t in targets) + "\n", encoding="utf-8")
    r = run(TERN, "rescore", "-m", model, "-s", tmp_path / "s", "--target", tmp_path / "t", "-t", "1", "--pretokenized",
            *opts)
    return [[float(x) for x in line.split("|||")[0].split()] for line in r.stdout.splitlines()]


def test_greedy_and_force_decoding(case, tmp_path):
    ref = case["ref"][1]
    out = tern_translate(case, case["dir"], GREEDY)
    assert len(out) == N_TEST and len(set(out)) > 20
    same = sum(o == r[0] for o, r in zip(out, ref))
    print(f"\n{case['name']}: greedy identical on {same}/{N_TEST}")
    assert same >= 0.995 * N_TEST
    assert tern_translate(case, case["dir"], GREEDY + ["--max-batch-size", "1"]) == out  # one sentence a batch
    # force decoding: Marian's word scores (the end token's last) within 1e-4
    lps = rescore(case, case["dir"], [(i, ref[i][2]) for i in range(N_TEST)], tmp_path)
    # a hypothesis Marian cut at its length limit has no end token: rescore adds one
    cut = sum(len(lp) == len(r[1]) + 1 for lp, r in zip(lps, ref))
    assert all(len(lp) in (len(r[1]), len(r[1]) + 1) for lp, r in zip(lps, ref)) and cut < N_TEST // 2
    worst = max(abs(a - b) for lp, r in zip(lps, ref) for a, b in zip(lp, r[1]))
    print(f"{case['name']}: force decoding, largest difference from Marian's word scores {worst:.2e} "
          f"({sum(map(len, lps))} tokens; {cut} hypotheses cut at the length limit)")
    assert worst <= 1e-4


def test_beam4(case):
    ref = case["ref"][4]
    out = tern_translate(case, case["dir"], BEAM4)
    same = sum(o == r[0] for o, r in zip(out, ref))
    greedy = case["ref"][1]
    differ = sum(r[0] != g[0] for r, g in zip(ref, greedy))
    print(f"\n{case['name']}: beam 4 identical on {same}/{N_TEST} ({differ} of Marian's differ from its greedy)")
    assert differ > 0  # beam search is not greedy here: the SSRU states follow their hypotheses
    assert same >= 0.97 * N_TEST
    # other batches (3 sentences: rows of several sentences dropped and gathered): the same outputs
    assert tern_translate(case, case["dir"], BEAM4 + ["--max-batch-size", "3"]) == out


def test_int8(case, tmp_path):
    ref = case["ref"][1]
    out = tern_translate(case, case["dir"], GREEDY + ["--compute-type", "int8"])
    same = sum(o == r[0] for o, r in zip(out, ref))
    f32 = rescore(case, case["dir"], [(i, ref[i][2]) for i in range(N_TEST)], tmp_path)
    q8 = rescore(case, case["dir"], [(i, ref[i][2]) for i in range(N_TEST)], tmp_path, ["--compute-type", "int8"])
    diffs = [abs(a - b) for x, y in zip(f32, q8) for a, b in zip(x, y)]
    print(f"\n{case['name']}: int8 greedy identical to Marian's float32 on {same}/{N_TEST}; int8 force-decoding word "
          f"scores vs float32: mean difference {np.mean(diffs):.2e}, largest {max(diffs):.2e}")
    assert len(out) == N_TEST and max(diffs) > 0  # int8 computes (W and Wf too), close to float32
    assert max(diffs) <= 0.1


def test_convert(case, tmp_path):
    direct = tern_translate(case, case["dir"], GREEDY)
    run(TERN, "convert", "--from", case["dir"], "-o", tmp_path / "tern")
    assert tern_translate(case, tmp_path / "tern", GREEDY) == direct
    info = run(TERN, "info", "-m", tmp_path / "tern").stdout
    assert "decoder_self: ssru" in info, info
    run(TERN, "convert", "--from", case["dir"], "-o", tmp_path / "q8", "--quantize", "int8")
    q8 = tern_translate(case, tmp_path / "q8", GREEDY)
    same = sum(a == b for a, b in zip(q8, direct))
    print(f"\n{case['name']}: converted --quantize int8: greedy identical to float32 on {same}/{N_TEST}")
    assert len(q8) == N_TEST and same >= 0.5 * N_TEST
    for src in (case["dir"], tmp_path / "tern"):
        r = run(TERN, "convert", "--from", src, "-o", tmp_path / "ct2", "--to", "ct2", check=False)
        assert r.returncode != 0 and "SSRU" in r.stderr and "CTranslate2" in r.stderr, r.stderr
        assert not (tmp_path / "ct2" / "model.bin").exists()
    r = run(TERN, "convert", "--from", tmp_path / "tern", "-o", tmp_path / "hf", "--to", "hf", check=False)
    assert r.returncode != 0 and "SSRU" in r.stderr and "MarianMT" in r.stderr, r.stderr


def drop_tensor(path, name):
    """Rewrites a safetensors file without one tensor (its header: u64 length + JSON; data offsets kept)."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    hdr = json.loads(raw[8:8 + n])
    assert name in hdr, sorted(hdr)
    del hdr[name]
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(len(h).to_bytes(8, "little") + h + raw[8 + n:])


def test_bad_files(models, tmp_path):
    src = models["ssru-prenorm-tied-relu-yml"]["dir"]

    def copy(name):
        d = tmp_path / name
        shutil.copytree(src, d)
        return d

    def err(d):
        r = run(TERN, "translate", "-m", d, "--pretokenized", input="a man .\n", check=False)
        assert r.returncode != 0 and "Traceback" not in r.stderr and "Sanitizer" not in r.stderr, r.stderr
        return r.stderr

    z = dict(np.load(src / "model.npz"))
    assert "decoder_l2_rnn_Wf" in z and "decoder_l1_rnn_ln_scale_pre" in z and "decoder_l1_self_Wq" not in z
    d = copy("missing")
    np.savez(d / "model.npz", **{k: v for k, v in z.items() if k != "decoder_l2_rnn_Wf"})
    e = err(d)
    assert "model.npz" in e and "missing array 'decoder_l2_rnn_Wf'" in e, e
    d = copy("shape")
    np.savez(d / "model.npz", **dict(z, decoder_l1_rnn_bf=np.zeros((1, 31), dtype=np.float32)))
    e = err(d)
    assert "model.npz" in e and "decoder_l1_rnn_bf" in e and "[1, 31]" in e, e
    d = copy("cell-norm")
    yml = bytes(z["special:model.yml"].astype(np.uint8)).replace(b"layer-normalization: false",
                                                                 b"layer-normalization: true")
    np.savez(d / "model.npz", **dict(z, **{"special:model.yml": np.frombuffer(yml, dtype=np.int8)}))
    e = err(d)
    assert "special:model.yml" in e and "layer-normalization" in e, e
    # Tern's own format of an SSRU model without one of its tensors: named
    run(TERN, "convert", "--from", src, "-o", tmp_path / "tern")
    name = "decoder/layer_1/ssru/linear_0/weight"
    drop_tensor(tmp_path / "tern" / "model.safetensors", name)
    e = err(tmp_path / "tern")
    assert "model.safetensors" in e and name in e, e
