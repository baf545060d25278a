"""Search processors under a vocabulary map (--vmap with --suppress, --target-prefix, --restrict-to,
--constraints, --lmbr-evidence), on a random-weight peer model of tests/peer/make_models.py
(post-big-vocab: 150 target pieces).

The batch's candidates are the map's (source n-grams, always-candidates, <unk> <s> </s>) plus what
the processors need: prefix tokens, restrict-to hypotheses' tokens, constraint tokens and LMBR
evidence tokens (a suppressed sequence with a non-candidate piece can never be completed).
  full map      (every piece always a candidate): every processor's output, greedy and beam 4, is
                byte-identical to the run without a map;
  real map      (random rules, 4 target pieces per source piece, 5 always-candidates; one sentence a
                batch, so the candidates are the sentence's):
    prefix      reproduced (random pieces, most outside the map's candidates), the rest of the
                output within the candidates, its score (beam 4) equal to the reference below for
                the free part (1e-4) (CTranslate2 4.8.5's target_prefix with use_vmap=True raises
                IndexError when a prefix piece is not a candidate);
    suppress    single pieces: tokens equal CTranslate2's use_vmap=True output on the same map
                without those pieces (its suppress_sequences under use_vmap still outputs a
                suppressed piece); a 2-piece sequence: never output;
    restrict-to every output is a given hypothesis; its score equals the reference: the sum over its
                tokens (and EOS) of log P(y_t) - log sum_{v in C} P(v), P from CTranslate2's
                vocabulary logits of a forced decoding of y (translate_batch with y as target
                prefix, return_logits_vocab), C the candidates computed here (1e-4);
    constraints every phrase appears (random pieces, most of them outside the map's candidates);
    LMBR        every output's score equals lambda * (the reference restricted log-probability, as
                above, C with the evidence tokens) + Tromble's linear-BLEU terms of the reference
                posteriors (tests/test_lmbr.py), 1e-4 + 2e-5 relative (a degenerate output of 256
                pieces scores 105).
"""
import json
import math
import os
import random
import shutil
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peer"))
sys.path.insert(0, HERE)
os.environ.setdefault("CT2_USE_MKL", "1")
ctranslate2 = pytest.importorskip("ctranslate2")
import make_models  # noqa: E402
from test_lmbr import ngram_posteriors  # noqa: E402

TERN = os.environ.get("TERN_BIN", os.path.join(os.path.dirname(HERE), "build", "tern"))
SPECIALS = ("<unk>", "<s>", "</s>", "<blank>", "<pad>")
SHAPE = "post-big-vocab"


def tern(args):
    r = subprocess.run([TERN] + args, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"tern {' '.join(args)} failed:\n{r.stderr}"
    return r


def write(path, lines):
    path.write_text("".join(" ".join(s) + "\n" if isinstance(s, list) else s + "\n" for s in lines))
    return str(path)


def parse_scored(out):
    rows = []
    for line in out.splitlines():
        i, h, s = line.split(" ||| ")
        rows.append((int(i), h, float(s)))
    return rows


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("vmprocs")
    mdir = str(d / "model")
    make_models.make_model(SHAPE, mdir)
    rng = random.Random(29)
    src = [t for t in make_models.read_vocabulary(mdir, "source") if t not in SPECIALS]
    tgt_all = make_models.read_vocabulary(mdir, "target")
    tgt = [t for t in tgt_all if t not in SPECIALS]
    inputs = [[rng.choice(src) for _ in range(rng.randint(1, 10))] for _ in range(40)]
    # the full map: every target piece always a candidate
    full = d / "full.txt"
    full.write_text("\t" + " ".join(tgt_all) + "\n")
    # a real map: 4 random targets per source piece, 5 always-candidates (CTranslate2's format)
    rules = {s: rng.sample(tgt, 4) for s in src}
    always = rng.sample(tgt, 5)
    vm = d / "vmap.txt"
    vm.write_text("\t" + " ".join(always) + "\n" + "".join(f"{s}\t{' '.join(t)}\n" for s, t in rules.items()))
    # CTranslate2 with the same map (use_vmap reads vmap.txt in the model directory)
    mdir_vm = str(d / "model_vm")
    shutil.copytree(mdir, mdir_vm)
    shutil.copy(vm, os.path.join(mdir_vm, "vmap.txt"))
    ct2 = ctranslate2.Translator(mdir_vm, device="cpu", intra_threads=1)
    plain = ct2.translate_batch(inputs, beam_size=4, num_hypotheses=4, length_penalty=0, return_scores=True)
    return {"d": d, "model": mdir, "ct2": ct2, "inputs": inputs, "tgt": tgt, "tgt_all": tgt_all,
            "full": str(full), "vmap": str(vm), "rules": rules, "always": always, "plain": plain,
            "in": write(d / "in.txt", inputs),
            "tgt_index": {v: k for k, v in enumerate(tgt_all)}}


def map_candidates(s, i):
    c = set(s["always"]) | {"<unk>", "<s>", "</s>"}
    for p in s["inputs"][i]:
        c |= set(s["rules"].get(p, ()))
    return c


def proc_args(s, tmp, kind, beam):
    """The options and files of one processor, from the unrestricted n-best lists."""
    rng = random.Random(sum(map(ord, kind)) + beam)
    inputs, plain = s["inputs"], s["plain"]
    if kind == "suppress":
        counts = {}
        for r in plain:
            for t in r.hypotheses[0]:
                counts[t] = counts.get(t, 0) + 1
        top = sorted(counts, key=lambda t: (-counts[t], t))
        seqs = [[top[0]], [top[1], top[2]]]
        return ["--suppress", write(tmp / "sup.txt", seqs)], seqs
    if kind == "prefix":
        pre = [[rng.choice(s["tgt"]) for _ in range(rng.randint(0, 3))] for _ in inputs]
        return ["--target-prefix", write(tmp / "prefix.txt", pre)], pre
    if kind == "restrict":
        lines, given = [], {}
        for i, r in enumerate(plain):
            hyps = [list(h) for h in r.hypotheses[:3]]
            hyps.append([rng.choice(s["tgt"]) for _ in range(rng.randint(1, 5))])
            for h in hyps:
                if h and " ".join(h) not in given.setdefault(i, []):
                    given[i].append(" ".join(h))
                    lines.append(f"{i} ||| {' '.join(h)} ||| 0")
        return ["--restrict-to", write(tmp / "restrict.txt", lines), "-n", str(min(3, beam)), "--no-early-stop"], given
    if kind == "constraints":
        cons = [[" ".join(rng.choice(s["tgt"]) for _ in range(rng.randint(1, 2))) for _ in range(rng.randint(0, 2))]
                for _ in inputs]
        (tmp / "cons.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cons))
        return ["--constraints", str(tmp / "cons.jsonl")], cons
    if kind == "lmbr":
        ev = tmp / "ev.nbest"
        ev.write_text("".join(f"{i} ||| {' '.join(h)} ||| {sc:.6f}\n" for i, r in enumerate(plain)
                              for h, sc in zip(r.hypotheses, r.scores)))
        return ["--lmbr-evidence", str(ev), "--lmbr-lambda", "0.6", "--lmbr-p", "0.6", "--lmbr-r", "0.8",
                "-n", str(min(2, beam))], None
    raise ValueError(kind)


KINDS = ["suppress", "prefix", "restrict", "constraints", "lmbr"]


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("kind", KINDS)
def test_full_map_changes_nothing(setup, tmp_path, kind, beam):
    """A map whose always-candidates are every piece: the very same output, byte for byte."""
    args, _ = proc_args(setup, tmp_path, kind, beam)
    base = ["translate", "-q", "-m", setup["model"], "--pretokenized", "-b", str(beam)] + args
    plain = tern(base + [setup["in"]]).stdout
    mapped = tern(base + ["--vmap", setup["full"], setup["in"]]).stdout
    assert plain.count("\n") >= len(setup["inputs"])
    assert mapped == plain


def run_vmap(s, args, beam):
    return tern(["translate", "-q", "-m", s["model"], "--pretokenized", "-b", str(beam), "--max-batch-size", "1",
                 "--vmap", s["vmap"]] + args + [s["in"]]).stdout


def test_real_map_is_restrictive(setup):
    """Sanity of the fixture: without the map, many outputs leave their sentence's candidates."""
    outside = sum(not set(r.hypotheses[0]) <= map_candidates(setup, i) for i, r in enumerate(setup["plain"]))
    assert outside >= len(setup["inputs"]) // 2


@pytest.mark.parametrize("beam", [1, 4])
def test_prefix_reproduced_scores_equal_reference(setup, tmp_path, beam):
    """(CTranslate2 4.8.5 cannot be the reference: translate_batch(target_prefix=..., use_vmap=True)
    raises IndexError when a prefix piece is not a map candidate.)"""
    args, pre = proc_args(setup, tmp_path, "prefix", beam)
    rows = parse_scored(run_vmap(setup, args + ["--scores"], beam))
    assert len(rows) == len(setup["inputs"])
    outside = 0
    for (i, g, sc), p in zip(rows, pre):
        y = g.split()
        cand = map_candidates(setup, i) | set(p)
        assert y[:len(p)] == p, f"line {i}: prefix {p} not reproduced: {g}"
        assert set(y) <= cand, f"line {i}: '{g}' leaves the candidates"
        outside += any(t not in map_candidates(setup, i) for t in p)
        if beam > 1:  # greedy search computes no scores
            ref = restricted_logprob(setup, i, y, cand, start=len(p), min_length=1)
            assert abs(sc - ref) <= 1e-4, f"line {i} '{g}': score {sc}, reference {ref}"
    assert outside >= 10  # the prefixes need pieces the map would not propose


@pytest.mark.parametrize("beam", [1, 4])
def test_suppress_equals_ctranslate2_use_vmap(setup, tmp_path, beam):
    """Suppressed single pieces under a map: CTranslate2 with use_vmap on the same map without those
    pieces (a piece removed before the softmax is a piece that is no candidate; CTranslate2's own
    suppress_sequences under use_vmap suppresses other pieces). A 2-piece sequence: never output."""
    args, seqs = proc_args(setup, tmp_path, "suppress", beam)
    single = {q[0] for q in seqs if len(q) == 1}
    mdir = tmp_path / "model_sup"
    shutil.copytree(setup["model"], mdir)
    with open(setup["vmap"]) as f, open(mdir / "vmap.txt", "w") as g:
        for line in f:
            k, v = line.rstrip("\n").split("\t")
            g.write(k + "\t" + " ".join(t for t in v.split() if t not in single) + "\n")
    ct2 = ctranslate2.Translator(str(mdir), device="cpu", intra_threads=1)
    got = run_vmap(setup, args, beam).split("\n")[:-1]
    got1 = run_vmap(setup, ["--suppress", write(tmp_path / "sup1.txt", [[t] for t in sorted(single)])], beam)
    ref = [r.hypotheses[0] for r in
           (ct2.translate_batch([x], beam_size=beam, length_penalty=0, use_vmap=True)[0] for x in setup["inputs"])]
    free = run_vmap(setup, [], beam).split("\n")[:-1]
    changed = 0
    for i, (g, g1, r, pl) in enumerate(zip(got, got1.split("\n")[:-1], ref, free)):
        h = g.split()
        assert not single & set(h)
        assert all(h[k:k + 2] != seqs[1] for k in range(len(h) - 1))
        assert g1.split() == r, f"line {i}: {g1} != CTranslate2's {' '.join(r)}"
        changed += bool(single & set(pl.split()))
    assert changed >= 3


def restricted_logprob(s, i, hyp, cand, start=0, min_length=0, ended=True):
    """log P(hyp[start:] + EOS | hyp[:start]) under the softmax restricted to cand: per step,
    CTranslate2's logit of the token minus the log-sum-exp of the candidates' logits (the softmax
    over the candidates of the full-vocabulary log-probabilities is that of the logits: the full
    normalizer cancels); EOS is no candidate before min_length. ended=False: a hypothesis cut at
    the maximum length (no EOS). The logits of every step come from one forced decoding of hyp
    (translate_batch with hyp as target prefix and return_logits_vocab: a row per prefix step,
    then the row after hyp; min_decoding_length=0 so that no step's EOS logit is masked), which
    equals score_batch's log-probabilities after normalization (checked when this replaced a
    score_batch of every prefix + candidate, ~C x L^2 / 2 decoder steps a hypothesis: 190 s)."""
    index = s["tgt_index"]
    r = s["ct2"].translate_batch([s["inputs"][i]], target_prefix=[hyp], beam_size=1, min_decoding_length=0,
                                 max_decoding_length=len(hyp) + 1, return_logits_vocab=True)
    rows = r[0].logits[0]
    assert len(rows) >= len(hyp) + (1 if ended else 0), (len(rows), len(hyp))
    total = 0.0
    for t in range(start, len(hyp) + 1):
        if t == len(hyp) and not ended:
            break
        row = np.asarray(rows[t])  # a StorageView of the vocabulary's logits
        # <s> too: the start token is a candidate (the softmax runs over it)
        lp = {v: float(row[index[v]]) for v in cand if v != "</s>"}
        if t >= min_length:
            lp["</s>"] = float(row[index["</s>"]])
        mx = max(lp.values())
        lse = mx + math.log(sum(math.exp(x - mx) for x in lp.values()))
        y = hyp[t] if t < len(hyp) else "</s>"
        total += lp[y] - lse
    return total


def test_restrict_to_scores_equal_reference(setup, tmp_path):
    args, given = proc_args(setup, tmp_path, "restrict", 8)
    rows = parse_scored(run_vmap(setup, args, 8))
    n = 0
    for i in range(len(setup["inputs"])):
        mine = [(h, sc) for j, h, sc in rows if j == i]
        assert mine, f"line {i}: no output"
        cand = map_candidates(setup, i) | {t for h in given[i] for t in h.split()}
        for h, sc in mine:
            assert h in given[i], f"line {i}: '{h}' is not a given hypothesis"
            ref = restricted_logprob(setup, i, h.split(), cand)
            assert abs(sc - ref) <= 1e-4, f"line {i} '{h}': score {sc}, reference {ref}"
            n += 1
    assert n >= 2 * len(setup["inputs"])


@pytest.mark.parametrize("beam", [1, 4])
def test_constraints_all_present(setup, tmp_path, beam):
    args, cons = proc_args(setup, tmp_path, "constraints", beam)
    out = run_vmap(setup, args, beam).split("\n")[:-1]
    assert len(out) == len(setup["inputs"])
    total = outside = 0
    for i, (o, c) in enumerate(zip(out, cons)):
        cand = map_candidates(setup, i) | {t for p in c for t in p.split()}
        assert set(o.split()) <= cand, f"line {i}: '{o}' leaves the candidates"
        for p in c:
            total += 1
            outside += any(t not in map_candidates(setup, i) for t in p.split())
            assert f" {p} " in f" {o} ", f"line {i}: constraint '{p}' missing from '{o}'"
    assert total >= 30 and outside >= 20


def test_lmbr_scores_equal_reference(setup, tmp_path):
    args, _ = proc_args(setup, tmp_path, "lmbr", 4)
    rows = parse_scored(run_vmap(setup, args, 4))
    assert len(rows) == 2 * len(setup["inputs"])
    lam, p, r = 0.6, 0.6, 0.8
    theta = [-1.0] + [1.0 / (4 * p * r ** (k - 1)) for k in range(1, 5)]
    for i, hyp, score in rows:
        nb = setup["plain"][i]
        ev = [(sc, list(h)) for h, sc in zip(nb.hypotheses, nb.scores)]
        post = ngram_posteriors({0: ev}, {0: 1.0}, 1.0)
        cand = map_candidates(setup, i) | {t for _, h in ev for t in h}
        y = hyp.split()
        assert set(y) <= cand
        ref = lam * restricted_logprob(setup, i, y, cand, min_length=1, ended=len(y) < 256)
        for t in range(len(y)):
            ref += theta[0] + sum(theta[k] * post.get(tuple(y[t - k + 1:t + 1]), 0.0) for k in range(1, 5)
                                  if t >= k - 1)
        # float sums over up to 256 steps: 1e-4 + 2e-5 relative (as tests/test_search_constraints.py)
        assert abs(score - ref) <= 1e-4 + 2e-5 * abs(ref), f"line {i} '{hyp}': score {score}, reference {ref}"
