"""Biased decoding towards a target prefix (tern_search_params_t.prefix_bias_beta, `tern translate
--prefix-bias-beta`, Python's translate_batch(prefix_bias_beta=)), CTranslate2's option
(Arivazhagan et al. 2020): while a beam hypothesis follows its prefix, its next-token distribution
is (1 - beta) p + beta on the prefix's next token; a hypothesis that left the prefix decodes
freely. Random-weight CTranslate2 models (tests/peer/make_models.py), beam 4, 2 hypotheses with
scores, beta 0.3/0.5/0.8, length penalty 0 and 1, prefixes of 1-4 random target tokens (a third of
the inputs without one).

- Exact semantics, against an independent scorer: every returned hypothesis' score equals the
  biased score rebuilt from ctranslate2's force-decoding log-probs (score_batch) of that
  hypothesis (per token: log((1 - beta) p + beta [token is the prefix's]) while the hypothesis so
  far equals the prefix's start, log p after; normalized by length ** length_penalty) within 1e-4.
- Against ctranslate2's own translate_batch(prefix_bias_beta=): CTranslate2 keeps the "still
  following" flag per beam slot, not per hypothesis (a candidate that moves into a following slot
  is biased even when its own tokens left the prefix, and the prefix's own continuation loses the
  bias when it lands in another slot), so the outputs differ on some inputs; the agreement of the
  best hypotheses is printed and must stay >= 70 % in every configuration (measured 52-60/60).
- beta 0.8 follows the prefix more often than beta 0.3; forced prefixes (beta 0) always; the CLI
  gives the Python API's output; greedy search, beta outside [0, 1) are refused.
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
MAX_LEN = 30
TERN = os.environ.get("TERN_BIN", os.path.join(os.path.dirname(HERE), "build", "tern"))
SPECIAL = ("<unk>", "<s>", "</s>", "<blank>", "<pad>")


@pytest.fixture(scope="module", params=["pre-shared-tied", "post-gelu-shared-all"])
def model(request, tmp_path_factory):
    d = str(tmp_path_factory.mktemp(request.param))
    make_models.make_model(request.param, d)
    src_vocab = [t for t in make_models.read_vocabulary(d, "source") if t not in SPECIAL]
    tgt_vocab = [t for t in make_models.read_vocabulary(d, "target") if t not in SPECIAL]
    rng = random.Random(9)
    inputs = [[rng.choice(src_vocab) for _ in range(rng.randint(1, 15))] for _ in range(N)]
    prefixes = [None if i % 3 == 0 else [rng.choice(tgt_vocab) for _ in range(rng.randint(1, 4))] for i in range(N)]
    return d, inputs, prefixes, ctranslate2.Translator(d, device="cpu", compute_type="float32", intra_threads=1)


def follows(hyp, prefix):
    return prefix is not None and hyp[:len(prefix)] == prefix


def biased_score(logp, logz0, hyp, prefix, beta, lp, max_len):
    """The score of hyp under prefix_bias_beta, from the model's log-probs of its tokens then EOS;
    logz0: log of the first step's probability mass without EOS (the minimum length, 1, removes EOS
    there and renormalizes, as both engines do)."""
    import math
    total = 0.0
    steps = len(hyp) + (1 if len(hyp) < max_len else 0)
    for t in range(steps):
        tok = hyp[t] if t < len(hyp) else "</s>"
        following = prefix is not None and t < len(prefix) and hyp[:t] == prefix[:t]
        if t == 0:
            logp = [logp[0] - logz0] + list(logp[1:])
        p = math.exp(logp[t])
        total += math.log((1 - beta) * p + (beta if following and tok == prefix[t] else 0.0)) if following else logp[t]
    return total / (steps ** lp) if lp else total  # the length counts the end token (as both engines do)


def test_prefix_bias_scores_and_ctranslate2(tern_python, model):
    d, inputs, prefixes, ct2 = model
    tr = tern_python.Translator(d, intra_threads=1)
    import math
    vocab = [t for t in make_models.read_vocabulary(d, "target") if t != "</s>"]
    first = ct2.score_batch([s for s in inputs for _ in vocab], [[v] for _ in inputs for v in vocab])
    logz0 = [math.log(sum(math.exp(f.log_probs[0]) for f in first[i * len(vocab):(i + 1) * len(vocab)]))
             for i in range(len(inputs))]
    followed = {}
    for lp in (0, 1):
        for beta in (0.3, 0.5, 0.8):
            kw = dict(beam_size=4, num_hypotheses=2, return_scores=True, length_penalty=lp, prefix_bias_beta=beta,
                      max_decoding_length=MAX_LEN)
            ours = tr.translate_batch(inputs, target_prefix=prefixes, **kw)
            theirs = ct2.translate_batch(inputs, target_prefix=prefixes, **kw)
            pairs = [(i, h) for i, r in enumerate(ours) for h in r.hypotheses]
            forced = ct2.score_batch([inputs[i] for i, _ in pairs], [h for _, h in pairs])
            want = [biased_score(f.log_probs, logz0[i], h, prefixes[i], beta, lp, MAX_LEN)
                    for f, (i, h) in zip(forced, pairs)]
            got = [x for r in ours for x in r.scores]
            worst = max(abs(a - b) for a, b in zip(got, want))
            same = sum(o.hypotheses[0] == t.hypotheses[0] for o, t in zip(ours, theirs))
            followed[lp, beta] = sum(follows(r.hypotheses[0], p) for r, p in zip(ours, prefixes))
            print(f"length penalty {lp}, beta {beta}: scores vs rebuilt from ctranslate2's force decoding: largest "
                  f"difference {worst:.1e} over {len(got)} hypotheses; best hypothesis as ctranslate2's "
                  f"{same}/{len(inputs)}; follows its prefix {followed[lp, beta]}/{2 * N // 3}")
            assert worst <= 1e-4
            assert same >= 0.7 * len(inputs)
        assert followed[lp, 0.8] > followed[lp, 0.3]
    forced = tr.translate_batch(inputs, target_prefix=prefixes, beam_size=4, max_decoding_length=MAX_LEN)
    assert all(follows(r.hypotheses[0], p) for r, p in zip(forced, prefixes) if p)


def test_cli_prefix_bias_as_python(tern_python, model, tmp_path):
    d, inputs, prefixes, _ = model
    src, pre = tmp_path / "src.txt", tmp_path / "pre.txt"
    src.write_text("".join(" ".join(s) + "\n" for s in inputs), encoding="utf-8")
    pre.write_text("".join((" ".join(p) if p else "") + "\n" for p in prefixes), encoding="utf-8")
    base = [TERN, "translate", "-m", d, "--pretokenized", "-q", "--target-prefix", str(pre)]
    r = subprocess.run(base + ["--beam-size", "4", "--length-penalty", "1", "--prefix-bias-beta", "0.5",
                               "--max-decoding-length", str(MAX_LEN), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    tr = tern_python.Translator(d, intra_threads=1)
    want = tr.translate_batch(inputs, target_prefix=prefixes, beam_size=4, length_penalty=1, prefix_bias_beta=0.5,
                              max_decoding_length=MAX_LEN)
    assert r.stdout.splitlines() == [" ".join(x.hypotheses[0]) for x in want]
    for args, what in [(["--beam-size", "4", "--prefix-bias-beta", "1"], "--prefix-bias-beta"),
                       (["--beam-size", "4", "--prefix-bias-beta", "-0.1"], "--prefix-bias-beta"),
                       (["--beam-size", "1", "--prefix-bias-beta", "0.5"], "prefix_bias_beta needs beam search")]:
        r = subprocess.run(base + args + [str(src)], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and what in r.stderr, (args, r.stderr)
    with pytest.raises(ValueError, match="prefix_bias_beta"):
        tr.translate_batch(inputs[:1], target_prefix=prefixes[1:2], prefix_bias_beta=1.0)
    with pytest.raises(Exception, match="prefix_bias_beta needs beam search"):
        tr.translate_batch(inputs[:1], target_prefix=prefixes[1:2], beam_size=1, prefix_bias_beta=0.5)
