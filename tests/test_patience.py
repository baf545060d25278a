"""Beam search patience (tern_search_params_t.patience, `tern translate --patience`, Python's
translate_batch(patience=)) against ctranslate2's on the same random-weight CTranslate2 models
(tests/peer/make_models.py): CTranslate2 stops a sentence with a length or coverage penalty once
round(beam_size * patience) hypotheses finished (Kasai et al. 2022).

Bars: beam 4, length penalty 1, 2 hypotheses, patience 1, 2 and 3: every hypothesis the same
tokens as ctranslate2's for >= 97 % of the inputs and scores within 1e-4 where they are; patience
changes the output (more tokens at 2 than at 1, in both engines); without penalties (length
penalty 0) patience changes nothing; the CLI flag gives the Python API's output; bad values fail.
"""
import os
import random
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peer"))
ctranslate2 = pytest.importorskip("ctranslate2")
import make_models  # noqa: E402

N = 60
MAX_LEN = 40
TERN = os.environ.get("TERN_BIN", os.path.join(os.path.dirname(HERE), "build", "tern"))


@pytest.fixture(scope="module", params=["pre-shared-tied", "post-gelu-shared-all"])
def model(request, tmp_path_factory):
    d = str(tmp_path_factory.mktemp(request.param))
    make_models.make_model(request.param, d)
    vocab = [t for t in make_models.read_vocabulary(d, "source") if t not in ("<unk>", "<s>", "</s>", "<blank>", "<pad>")]
    rng = random.Random(5)
    inputs = [[rng.choice(vocab) for _ in range(rng.randint(1, 15))] for _ in range(N)]
    return d, inputs, ctranslate2.Translator(d, device="cpu", compute_type="float32", intra_threads=1)


def test_patience_matches_ctranslate2(tern_python, model):
    d, inputs, ct2 = model
    tr = tern_python.Translator(d, intra_threads=1)
    lengths = {}
    for patience in (1, 2, 3):
        kw = dict(beam_size=4, length_penalty=1, num_hypotheses=2, return_scores=True, patience=patience,
                  max_decoding_length=MAX_LEN)
        ours, theirs = tr.translate_batch(inputs, **kw), ct2.translate_batch(inputs, **kw)
        same = 0
        worst = 0.0
        for o, t in zip(ours, theirs):
            if o.hypotheses == t.hypotheses:
                same += 1
                worst = max([worst] + [abs(a - b) for a, b in zip(o.scores, t.scores)])
        lengths[patience] = (sum(len(r.hypotheses[0]) for r in ours), sum(len(r.hypotheses[0]) for r in theirs))
        print(f"patience {patience}: same n-best lists {same}/{len(inputs)}, largest score difference {worst:.1e}, "
              f"output tokens tern/ctranslate2 {lengths[patience]}")
        assert same >= 0.97 * len(inputs)
        assert worst <= 1e-4
    assert lengths[2][0] > lengths[1][0] and lengths[2][1] > lengths[1][1]


def test_patience_without_penalties_changes_nothing(tern_python, model):
    d, inputs, _ = model
    tr = tern_python.Translator(d, intra_threads=1)
    kw = dict(beam_size=4, length_penalty=0, num_hypotheses=2, max_decoding_length=MAX_LEN)
    assert [r.hypotheses for r in tr.translate_batch(inputs, patience=1, **kw)] == \
        [r.hypotheses for r in tr.translate_batch(inputs, patience=3, **kw)]


def test_cli_patience_as_python(tern_python, model, tmp_path):
    d, inputs, _ = model
    src = tmp_path / "src.txt"
    src.write_text("".join(" ".join(s) + "\n" for s in inputs), encoding="utf-8")
    r = subprocess.run([TERN, "translate", "-m", d, "--pretokenized", "-q", "--beam-size", "4", "--length-penalty", "1",
                        "--patience", "2", "--max-decoding-length", str(MAX_LEN), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    tr = tern_python.Translator(d, intra_threads=1)
    want = tr.translate_batch(inputs, beam_size=4, length_penalty=1, patience=2, max_decoding_length=MAX_LEN)
    assert r.stdout.splitlines() == [" ".join(x.hypotheses[0]) for x in want]
    for bad in ("0", "-1", "x"):
        r = subprocess.run([TERN, "translate", "-m", d, "--pretokenized", "-q", "--patience", bad, str(src)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "--patience" in r.stderr, (bad, r.stderr)
    with pytest.raises(ValueError, match="patience"):
        tr.translate_batch(inputs[:1], patience=0)
