"""Attention out of the C core (tern_request_t.attention, tern_attention_t) against CTranslate2's
return_attention=True on the same random-weight CTranslate2 models (tests/peer/make_models.py),
the same pre-tokenized inputs, through the public C API (build/tests/tools/attention_driver).

Semantics, as CTranslate2's: row t of a hypothesis is the cross-attention of the step that output
token t (no row for the end token), over the source tokens, taken from the decoder's alignment
layer (decoder/alignment_layer: the last) averaged over its first alignment_heads heads (1: head 0).

Bars: the best hypotheses the same tokens for >= 95% of the inputs; where a hypothesis is the same, every weight within 1e-5 of
CTranslate2's (float32, both engines: the softmax of the same scores, summed in another order);
every row sums to 1 within 1e-5. Length penalty 0 in both (Tern's default; CTranslate2's is 1). Greedy runs as one batch in both engines. Beam search (beam 4,
2 hypotheses) is compared with CTranslate2 translating one source at a time: CTranslate2 4.8.5's
batched beam search gives a hypothesis that ends at the first step another source's attention row
(seen here: 3 of 5 sources of a batch got the longest source's row), so its batched output is no
reference; Tern's batched beam search is compared with that.
"""
import os
import random
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peer"))
ctranslate2 = pytest.importorskip("ctranslate2")
import make_models  # noqa: E402

DRIVER = os.environ.get("TERN_ATTENTION_DRIVER", os.path.join(os.path.dirname(HERE), "build", "tests", "tools", "attention_driver"))
N = 40
MAX_LEN = 40  # the driver's max_decoding_length


@pytest.fixture(scope="module", params=["pre-shared-tied", "post-gelu-shared-all"])
def model(request, tmp_path_factory):
    d = str(tmp_path_factory.mktemp(request.param))
    make_models.make_model(request.param, d)
    vocab = [t for t in make_models.read_vocabulary(d, "source") if t not in ("<unk>", "<s>", "</s>", "<blank>", "<pad>")]
    rng = random.Random(7)
    inputs = [[rng.choice(vocab) for _ in range(rng.randint(1, 20))] for _ in range(N)]
    return d, inputs, ctranslate2.Translator(d, device="cpu", compute_type="float32", intra_threads=1)


def tern_attention(d, inputs, beam, nhyp):
    assert os.path.exists(DRIVER), f"{DRIVER} is missing: run make"
    r = subprocess.run([DRIVER, d, str(beam), str(nhyp)], input="".join(" ".join(s) + "\n" for s in inputs),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = []
    for line in r.stdout.splitlines():
        hyp, dims, w = line.split(" ||| ")
        T, S = map(int, dims.split())
        a = np.array([float(x) for x in w.split()], dtype=np.float64).reshape(T, S)
        out.append((hyp.split(), a))
    assert len(out) == len(inputs) * nhyp
    return [out[i * nhyp:(i + 1) * nhyp] for i in range(len(inputs))]


def compare(inputs, ours, theirs):
    same = checked = best_same = 0
    worst = 0.0
    for src, o, t in zip(inputs, ours, theirs):
        best_same += o[0][0] == t.hypotheses[0]
        for (hyp, a), (thyp, ta) in zip(o, zip(t.hypotheses, t.attention)):
            assert a.shape[0] == len(hyp) and a.shape[1] == len(src), (a.shape, len(hyp), len(src))
            if len(hyp):
                assert np.allclose(a.sum(axis=1), 1.0, atol=1e-5)
            checked += 1
            if hyp != thyp:
                continue
            same += 1
            ta = np.array(ta, dtype=np.float64).reshape(len(thyp), -1)
            assert ta.shape == a.shape
            if a.size:
                worst = max(worst, float(np.abs(a - ta).max()))
    print(f"same best hypotheses {best_same}/{len(inputs)}, same hypotheses {same}/{checked}, "
          f"largest attention difference {worst:.2e}")
    assert best_same >= 0.95 * len(inputs)
    assert worst <= 1e-5


def test_greedy_attention_matches_ctranslate2(model):
    d, inputs, ct2 = model
    ours = tern_attention(d, inputs, 1, 1)
    theirs = ct2.translate_batch(inputs, beam_size=1, return_attention=True, max_decoding_length=MAX_LEN)
    compare(inputs, ours, theirs)


def test_beam_attention_matches_ctranslate2(model):
    d, inputs, ct2 = model
    ours = tern_attention(d, inputs, 4, 2)
    theirs = [ct2.translate_batch([s], beam_size=4, num_hypotheses=2, return_attention=True, length_penalty=0,
                                  max_decoding_length=MAX_LEN)[0] for s in inputs]
    compare(inputs, ours, theirs)
