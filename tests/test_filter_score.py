"""`tern filter --score-model` (rule 10): keep the pairs whose length-normalized log-probability
under a model is above a threshold, or the best P % (docs/filter.md).

Reference: `tern rescore` on the same pairs (force decoding through tern_score, the path
CTranslate2's score_batch is checked against in tests/test_score_peer.py): a pair's score is the
sum of the per-token log-probabilities it prints (target tokens and the final end of sentence)
divided by their count.

* --scores: every pair that rules 1-9 keep is scored, and its score equals the one rebuilt from
  rescore's output within 1e-5 (rescore prints 6 decimals; batches differ, padding aside the
  numbers are the same).
* --min-score X: the kept pairs (files and order) are exactly those that rules 1-9 keep (checked
  by a run without the score rule) and whose rescore score is > X, for thresholds between the
  quartiles (each at least 1e-4 from every score, so the rounding of printed scores cannot decide).
* --keep-best P: exactly round(P/100 x scored) pairs, the highest rescore scores with ties broken
  by line (the test checks no score within 1e-4 of the cut, so the order is decided by the numbers).
* Rules 1-9 come first: an empty pair and a duplicate are removed as before and never scored.
* Bad arguments exit 2: a rule without --score-model, --score-model without a rule or with both,
  --keep-best 0 / 101 / x, --min-score x, --score-batch 0; an unloadable model exits 1 naming it.

Model: models/en-de (the shipped Transformer); data: 300 Multi30k validation pairs, 60 of them with
the target of another pair (low scores).
"""
import math
import os
import random
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern")
MODEL = os.path.join(ROOT, "models", "en-de")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")


def run(*args, timeout=300):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=ENV)


def ok(*args):
    r = run(*args)
    assert r.returncode == 0, f"{args[:2]} failed ({r.returncode}):\n{r.stderr[-3000:]}"
    return r


def lines(p):
    with open(p, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


@pytest.fixture(scope="module")
def work(tmp_path_factory, data_dir):
    if not os.path.exists(TERN) or not os.path.isdir(MODEL):
        pytest.skip("build/tern or models/en-de missing")
    d = tmp_path_factory.mktemp("filter_score")
    m = os.path.join(data_dir, "multi30k")
    en = lines(os.path.join(m, "val.en"))[:300]
    de = lines(os.path.join(m, "val.de"))[:300]
    rnd = random.Random(4)
    for i in rnd.sample(range(300), 60):  # mismatched pairs
        de[i] = de[(i + 7) % 300]
    en[10], de[10] = "", ""          # rule 2 (empty)
    en[20], de[20] = en[5], de[5]    # rule 9 (duplicate of line 6)
    (d / "in.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    (d / "in.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    # the reference: rescore of every pair with a non-empty source
    r = ok(TERN, "rescore", "-m", MODEL, "-s", d / "in.en", "--target", d / "in.de", "-t", 1)
    ref = {}
    for i, row in enumerate(r.stdout.split("\n")[:-1]):
        toks = row.split("|||")[0].split()
        if toks:
            ref[i + 1] = sum(float(x) for x in toks) / len(toks)
    # rules 1-9 alone
    ok(TERN, "filter", d / "in.en", d / "in.de", d / "base.en", d / "base.de", "--removed", d / "base.removed",
       "--report", d / "base.report")
    removed = {int(x.split("\t")[0]) for x in lines(d / "base.removed")}
    survivors = [i for i in range(1, 301) if i not in removed]
    assert 11 in removed and 21 in removed and len(survivors) == 298
    return d, en, de, ref, survivors


def filt(d, tag, *extra):
    out = d / tag
    r = ok(TERN, "filter", d / "in.en", d / "in.de", f"{out}.en", f"{out}.de", "--score-model", MODEL, "-t", 1,
           "--removed", f"{out}.removed", "--scores", f"{out}.scores", "--report", f"{out}.report", *extra)
    kept_en, kept_de = lines(f"{out}.en"), lines(f"{out}.de")
    scores = {int(a): float(b) for a, b in (x.split("\t") for x in lines(f"{out}.scores"))}
    return kept_en, kept_de, scores, (d / f"{tag}.report").read_text()


def expect_files(en, de, keep):
    return [en[i - 1] for i in keep], [de[i - 1] for i in keep]


def test_scores_equal_rescore(work):
    d, en, de, ref, surv = work
    _, _, scores, _ = filt(d, "all", "--keep-best", 100)
    assert sorted(scores) == surv  # rules 1-9 first: the empty pair and the duplicate are not scored
    worst = max(abs(scores[i] - ref[i]) for i in surv)
    print(f"\n{len(surv)} scores vs rescore's: max |diff| {worst:.2e}")
    assert worst <= 1e-5


@pytest.mark.parametrize("q", [0.25, 0.5, 0.75])
def test_min_score_matches_rescore(work, q):
    d, en, de, ref, surv = work
    vals = sorted(ref[i] for i in surv)
    j = int(q * len(vals))
    while vals[j + 1] - vals[j] < 2e-4:  # a threshold well clear of every score
        j += 1
    x = round((vals[j] + vals[j + 1]) / 2, 6)
    assert min(abs(v - x) for v in vals) >= 1e-4
    keep = [i for i in surv if ref[i] > x]
    ke, kd, _, report = filt(d, f"min{q}", "--min-score", repr(x))
    print(f"\n--min-score {x}: {len(keep)} of {len(surv)} kept, as rescore's scores say")
    assert (ke, kd) == expect_files(en, de, keep)
    assert f"score           {len(surv) - len(keep)}" in report


@pytest.mark.parametrize("p", [10, 50, 90.5])
def test_keep_best_matches_rescore(work, p):
    d, en, de, ref, surv = work
    order = sorted(surv, key=lambda i: (-ref[i], i))
    k = math.floor(p / 100 * len(surv) + 0.5)
    if 0 < k < len(order):
        gap = ref[order[k - 1]] - ref[order[k]]
        if gap < 1e-4:
            pytest.fail(f"P={p}: scores within {gap:.1e} at the cut; choose another P")
    keep = sorted(order[:k])
    ke, kd, _, report = filt(d, f"best{p}", "--keep-best", p)
    print(f"\n--keep-best {p}: {len(keep)} of {len(surv)} kept, as rescore's scores say")
    assert (ke, kd) == expect_files(en, de, keep)
    assert f"({k} of {len(surv)} scored kept)" in report


@pytest.mark.parametrize("args,msg", [
    (["--min-score", "-1"], "need --score-model"),
    (["--keep-best", "50"], "need --score-model"),
    (["--scores", "x.tsv"], "need --score-model"),
    (["--score-model", MODEL], "needs one of --min-score X or --keep-best P"),
    (["--score-model", MODEL, "--min-score", "-1", "--keep-best", "5"], "needs one of"),
    (["--score-model", MODEL, "--keep-best", "0"], "(0, 100]"),
    (["--score-model", MODEL, "--keep-best", "101"], "--keep-best needs a number in 0..100"),
    (["--score-model", MODEL, "--keep-best", "x"], "--keep-best needs a number"),
    (["--score-model", MODEL, "--min-score", "x"], "--min-score needs a number"),
    (["--score-model", MODEL, "--min-score", "-1", "--score-batch", "0"], "--score-batch needs"),
])
def test_bad_arguments(work, args, msg):
    d = work[0]
    r = run(TERN, "filter", d / "in.en", d / "in.de", d / "bad.en", d / "bad.de", *args)
    print(f"\n{r.stderr.strip()}", end="")
    assert r.returncode == 2 and msg in r.stderr


def test_unloadable_model(work):
    d = work[0]
    r = run(TERN, "filter", d / "in.en", d / "in.de", d / "bad.en", d / "bad.de", "--score-model", d / "nope",
            "--min-score", "-1")
    assert r.returncode == 1 and f"--score-model {d / 'nope'}" in r.stderr
    assert not (d / "bad.en").exists()
