"""Ensembles (`tern translate/rescore -m A -m B ...`) against CTranslate2 on the same models.

Three random-weight CTranslate2 Transformers of different shapes (layers, widths, heads, norms,
activations, position tables) and different source vocabularies (40, 70 and 55 pieces: a source
piece of the larger ones is <unk> in the smaller, so each member encodes the source itself) share
one target vocabulary (tests/peer/make_models.py builds them).

- Force decoding: each token's score from `tern rescore` with several models equals the
  combination of the members' per-token log-probs from ctranslate2's score_batch (each conditioned
  on the same source and target prefix, so the per-token combination is exact): weighted mean
  (logprob-mean) and numpy's log of the weighted mean of exp (prob-mean), within 1e-4.
- Greedy decoding: the ensemble's output = the argmax path of the combination of the members'
  full next-token distributions, each from CT2's score_batch of every token after the prefix
  (exact tokens; a step whose top two are within 1e-4 ends the comparison of that sentence;
  min length 6, as these random models otherwise end after a token or two).
- Mismatched target vocabularies: the named error (first differing piece, both files).
- An ensemble of one model (any weight) translates exactly as the model alone, and so does the
  same model twice with logprob-mean (0.5 lp + 0.5 lp = lp in float); on the shipped model too.
"""
import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peer"))
os.environ.setdefault("CT2_USE_MKL", "1")
ctranslate2 = pytest.importorskip("ctranslate2")
import make_models  # noqa: E402

ROOT = os.path.dirname(HERE)
TERN = os.environ.get("TERN_BIN", os.path.join(ROOT, "build", "tern"))

BASE = dict(share_embeddings=False, shared_vocab=False, tgt_vocab=60, eps=None)
MEMBERS = [
    dict(BASE, name="ens-a-post", enc_layers=1, dec_layers=1, heads=2, d=16, ff=48, pre_norm=False,
         activation="relu", src_vocab=40, tie_output=False, learned_pos=False, scale_embeddings=True),
    dict(BASE, name="ens-b-pre-gelu", enc_layers=2, dec_layers=1, heads=4, d=32, ff=32, pre_norm=True,
         activation="gelu", src_vocab=70, tie_output=False, learned_pos=True, scale_embeddings=False),
    dict(BASE, name="ens-c-pre", enc_layers=1, dec_layers=2, heads=2, d=24, ff=40, pre_norm=True,
         activation="relu", src_vocab=55, tie_output=False, learned_pos=False, scale_embeddings=True),
]
WEIGHTS = [0.5, 0.3, 0.2]


def tern(args, check=True):
    r = subprocess.run([TERN] + args, capture_output=True, text=True, timeout=600)
    if check:
        assert r.returncode == 0, f"tern {' '.join(args)} failed:\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    out = []
    for i, shape in enumerate(MEMBERS):
        d = str(tmp_path_factory.mktemp(shape["name"]))
        make_models.make_model(shape, d, seed=100 + i)
        out.append({"dir": d, "ct2": ctranslate2.Translator(d, device="cpu", compute_type="float32", intra_threads=1)})
    tv = [make_models.read_vocabulary(m["dir"], "target") for m in out]
    assert tv[0] == tv[1] == tv[2]
    return out


def inputs_and_targets(members, n, seed):
    rng = random.Random(seed)
    src = [t for t in make_models.read_vocabulary(members[1]["dir"], "source") if t not in ("<unk>", "<s>", "</s>")]
    tgt = [t for t in make_models.read_vocabulary(members[0]["dir"], "target") if t not in ("<unk>", "<s>", "</s>")]
    inputs = [[rng.choice(src) for _ in range(rng.randint(1, 20))] for _ in range(n)]
    targets = [[rng.choice(tgt) for _ in range(rng.randint(1, 15))] for _ in range(n)]
    return inputs, targets


def write_lines(path, rows):
    path.write_text("".join(" ".join(r) + "\n" for r in rows))
    return str(path)


def combine(lps, weights, mode):
    """lps: (K, ...) member log-probs; weights normalized to sum 1."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    lps = np.asarray(lps, dtype=np.float64)
    if mode == "logprob-mean":
        return np.tensordot(w, lps, axes=1)
    return np.log(np.tensordot(w, np.exp(lps), axes=1))


@pytest.mark.parametrize("mode", ["logprob-mean", "prob-mean"])
@pytest.mark.parametrize("k", [2, 3])
def test_force_decoding_equals_combined_ct2_scores(members, mode, k, tmp_path):
    inputs, targets = inputs_and_targets(members, 80, seed=11 + k)
    # sources mix pieces every member knows with pieces only the larger source vocabularies have
    assert any(t not in make_models.read_vocabulary(members[0]["dir"], "source") for s in inputs for t in s)
    per_member = [m["ct2"].score_batch(inputs, targets, max_batch_size=32) for m in members[:k]]
    weights = WEIGHTS[:k]
    src = write_lines(tmp_path / "src.txt", inputs)
    tgt = write_lines(tmp_path / "tgt.txt", targets)
    args = ["rescore", "--pretokenized", "-s", src, "--target", tgt, "--ensemble-mode", mode,
            "--ensemble-weights", ",".join(map(str, weights))]
    for m in members[:k]:
        args += ["-m", m["dir"]]
    out = tern(args).stdout.split("\n")[:-1]
    assert len(out) == len(inputs)
    worst = 0.0
    for i, line in enumerate(out):
        ours = np.array([float(x) for x in line.split(" ||| ")[0].split()])
        want = combine([r[i].log_probs for r in per_member], weights, mode)
        assert ours.shape == want.shape == (len(targets[i]) + 1,)
        worst = max(worst, float(np.max(np.abs(ours - want))))
        assert abs(float(line.split(" ||| ")[1]) - float(want.sum())) <= 1e-4 * len(want)
    print(f"\n{k} members {mode}: force decoding max |diff| {worst:.2e}")
    assert worst <= 1e-4


def ct2_next_logprobs(ct2, src, prefix, vocab):
    """log p(v | src, prefix) for every target token v, from CT2's own scorer."""
    res = ct2.score_batch([src] * len(vocab), [prefix + [v] for v in vocab])
    return np.array([r.log_probs[len(prefix)] for r in res])


@pytest.mark.parametrize("mode", ["logprob-mean", "prob-mean"])
def test_greedy_equals_argmax_of_combined_ct2_distributions(members, mode, tmp_path):
    inputs, _ = inputs_and_targets(members, 16, seed=29)
    min_len = 6  # random models end early: at least 6 tokens, so that many steps are compared
    vocab = make_models.read_vocabulary(members[0]["dir"], "target")
    ok_vocab = [v for v in vocab if v not in ("<s>",)]  # CT2 scores the start token as any other
    eos = "</s>"
    src = write_lines(tmp_path / "src.txt", inputs)
    args = ["translate", "--pretokenized", "-b", "1", "-q", "--max-decoding-length", "30", "--min-length", str(min_len),
            "--ensemble-mode", mode,
            "--ensemble-weights", ",".join(map(str, WEIGHTS)), src]
    for m in members:
        args += ["-m", m["dir"]]
    ours = tern(args).stdout.split("\n")[:-1]
    compared = 0
    for s, got in zip(inputs, ours):
        prefix, ended = [], False
        while len(prefix) < 30:
            lps = [ct2_next_logprobs(m["ct2"], s, prefix, ok_vocab) for m in members]
            c = combine(lps, WEIGHTS, mode)
            if len(prefix) < min_len:
                c[ok_vocab.index(eos)] = -np.inf  # no EOS before min length
            order = np.argsort(-c)
            if c[order[0]] - c[order[1]] <= 1e-4:
                break  # a near-tie: the rest may fork
            best = ok_vocab[order[0]]
            compared += 1
            if best == eos:
                ended = True
                break
            prefix.append(best)
        got = got.split()
        if ended or len(prefix) == 30:
            assert got == prefix, f"source {s}: tern {got}, reference {prefix}"
        else:
            assert got[:len(prefix)] == prefix
    print(f"\ngreedy {mode}: {compared} steps compared")
    assert compared >= 100


def test_mismatched_target_vocabularies_are_named(members, tmp_path):
    a = members[0]["dir"]
    b = str(tmp_path / "b")
    shutil.copytree(members[1]["dir"], b)
    path = os.path.join(b, "target_vocabulary.json")
    with open(path, encoding="utf-8") as f:
        voc = json.load(f)
    voc[17] = "ZZZ"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(voc, f)
    src = tmp_path / "in.txt"
    src.write_text("a b\n")
    for cmd in (["translate", "--pretokenized", str(src)],
                ["rescore", "--pretokenized", "-s", str(src), "--target", str(src)]):
        r = tern(cmd + ["-m", a, "-m", b], check=False)
        assert r.returncode == 1, r.stderr
        want_a = os.path.join(a, "target_vocabulary.json")
        orig = make_models.read_vocabulary(a, "target")[17]
        assert f"differ at piece 17: '{orig}' in {want_a}" in r.stderr, r.stderr
        assert f"but 'ZZZ' in {path}" in r.stderr, r.stderr
    # a shorter vocabulary (and embedding) is named at its first missing piece
    c = str(tmp_path / "c")
    shape = dict(MEMBERS[0], name="ens-short", tgt_vocab=50)
    make_models.make_model(shape, c, seed=5)
    r = tern(["translate", "--pretokenized", "-m", a, "-m", c, str(src)], check=False)
    assert r.returncode == 1
    assert "differ at piece 50:" in r.stderr and "none in " + os.path.join(c, "target_vocabulary.json") in r.stderr, r.stderr


@pytest.mark.parametrize("opts", [["-b", "1"], ["-b", "4"], ["-b", "4", "-n", "3"],
                                  ["-b", "5", "--length-penalty", "1", "--coverage-penalty", "0.2", "--eos-policy", "paper"]])
def test_ensemble_of_one_is_the_model(members, opts, tmp_path):
    inputs, _ = inputs_and_targets(members, 60, seed=3)
    src = write_lines(tmp_path / "src.txt", inputs)
    base = ["translate", "--pretokenized", "-q", "-m", members[1]["dir"]] + opts + [src]
    alone = tern(base).stdout
    for extra in (["--ensemble-weights", "3"], ["--ensemble-mode", "prob-mean"], ["-m", members[1]["dir"]]):
        assert tern(base + extra).stdout == alone, extra


def test_shipped_model_ensemble_of_one_and_of_itself(data_dir, tmp_path):
    model = os.path.join(ROOT, "models", "en-de")
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        lines = [next(f) for _ in range(40)]
    src = tmp_path / "in.en"
    src.write_text("".join(lines), encoding="utf-8")
    base = ["translate", "-q", "-b", "5", "-m", model, str(src)]
    alone = tern(base).stdout
    assert alone.count("\n") == 40
    assert tern(base + ["--ensemble-weights", "1"]).stdout == alone
    assert tern(base + ["-m", model]).stdout == alone
    info = tern(["info", "-m", model, "-m", model, "--ensemble-mode", "prob-mean"]).stdout
    assert "family: ensemble" in info and "members: 2" in info and "ensemble_mode: prob-mean" in info
    one = tern(["info", "-m", model]).stdout
    size = int(one.split("weight_bytes: ")[1].split()[0])
    assert f"weight_bytes: {2 * size}" in info
