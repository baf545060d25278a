"""`tern train --train SRC,TGT[:W]`: several corpora mixed by weight (docs/training.md, "Several
corpora").

* Counts: two Multi30k slices at weights 0.5 and 2.5 (and 1 and 3): the pairs drawn from each corpus
  in every epoch, as the training log reports them, are within 1 % of W x kept (they are exact by
  construction: floor(W) copies plus round(frac(W) x kept) distinct pairs).
* Independent check of what the training loop consumed: at integer weights 1 and 3 the target
  tokens summed over the first epoch's updates in train_curve.tsv equal 1 x (corpus a's target
  tokens) + 3 x (corpus b's), each corpus's token count as the cache reports it.
* The draw is seeded (two runs: identical curves) and a resumed mixed run is exact (every logged
  loss, gradient norm and rate equal to a run without a stop, across epoch ends).
* Bad input exits 2 with a message naming the argument: weights 0, -1, x, empty; a missing
  comma; unequal line counts (both files and counts named); an empty corpus; --train together
  with --train-src.
(tests/c/test_train_data.c checks the drawn batches themselves: every pair of an integer weight
exactly W times, fractional draws distinct and new every epoch, restores replaying the draw.)

Binary: $TERN_BIN (default build/tern). One thread (OMP_NUM_THREADS=1, -t 1).
"""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
from testutil import head  # noqa: E402

TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
TINY = ["--layers", 1, "--d-model", 32, "--ff", 64, "--heads", 2, "-t", 1, "--no-plot", "-q", "--no-bleu",
        "--max-tokens", 800, "--lr", "1e-3", "--warmup", 10, "--dropout", 0.1]


def run(*args, timeout=300):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=ENV)


def ok(*args, timeout=300):
    r = run(*args, timeout=timeout)
    assert r.returncode == 0, f"{args[:2]} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def work(tmp_path_factory, data_dir):
    if not os.path.exists(TERN):
        pytest.skip(f"{TERN} not built")
    d = tmp_path_factory.mktemp("train_mix")
    m = os.path.join(data_dir, "multi30k")
    for lang in ("en", "de"):
        with open(os.path.join(m, f"train.{lang}"), encoding="utf-8") as f:
            lines = [next(f) for _ in range(1300)]
        (d / f"a.{lang}").write_text("".join(lines[:1000]), encoding="utf-8")
        (d / f"b.{lang}").write_text("".join(lines[1000:]), encoding="utf-8")
    head(os.path.join(m, "train.en"), d / "short.en", 10)
    head(os.path.join(m, "train.de"), d / "short.de", 9)
    (d / "empty.en").write_text("")
    (d / "empty.de").write_text("")
    ok(TERN, "vocab", "--model-dir", d / "vocab", "--source", d / "a.en", "--target", d / "a.de",
       "--vocab-size", 500, "-t", 1)
    return d


def train(work, save, *extra):
    return ok(TERN, "train", "--vocab", work / "vocab", "--cache-dir", work / "cache", "--save-dir", save, *TINY,
              *extra)


def mix_args(work, wa, wb):
    return ["--train", f"{work / 'a.en'},{work / 'a.de'}:{wa}", "--train", f"{work / 'b.en'},{work / 'b.de'}:{wb}"]


def log_info(save):
    """kept pairs and target tokens of each corpus; the mix lines {epoch: [(drawn, weight, kept)]}."""
    log = (save / "train.log").read_text()
    corp = {}
    for m in re.finditer(r"train \[(\d+)\]: \d+ pairs, (\d+) kept .*?, \d+ source \+ (\d+) target tokens", log):
        corp[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
    mix = {}
    for m in re.finditer(r"mix: epoch (\d+) corpus (\d+) \(.*?\): (\d+) pairs drawn, weight (\S+) x (\d+) kept", log):
        mix.setdefault(int(m.group(1)), []).append((int(m.group(3)), float(m.group(4)), int(m.group(5))))
    return corp, mix, log


def curve(path):
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f if not line.startswith("#")]


@pytest.mark.parametrize("wa,wb", [("0.5", "2.5"), ("1", "3"), ("0.25", "1.7")])
def test_counts_follow_the_weights(work, wa, wb):
    save = work / f"counts_{wa}_{wb}"
    train(work, save, *mix_args(work, wa, wb), "--max-epochs", 2)
    corp, mix, _ = log_info(save)
    assert sorted(corp) == [0, 1] and sorted(mix) == [1, 2, 3]
    for ep, rows in sorted(mix.items()):
        assert len(rows) == 2
        for k, (drawn, w, kept) in enumerate(rows):
            assert kept == corp[k][0]
            expect = w * kept
            print(f"\nweights {wa}/{wb} epoch {ep} corpus {k}: {drawn} drawn, expected {expect:.1f} "
                  f"({100 * abs(drawn - expect) / expect:.3f} %)", end="")
            assert abs(drawn - expect) <= 0.01 * expect


def test_tokens_consumed_match_integer_weights(work):
    save = work / "tokens"
    train(work, save, *mix_args(work, 1, 3), "--max-epochs", 1, "--log-interval", 1)
    corp, _, log = log_info(save)
    rows = curve(save / "train_curve.tsv")
    assert all(int(r[1]) == 1 for r in rows)  # one epoch: every row of epoch 1
    consumed = sum(int(r[7]) for r in rows)
    expect = 1 * corp[0][1] + 3 * corp[1][1]
    print(f"\nepoch 1 at weights 1 and 3: {consumed} target tokens trained on, expected {expect}")
    assert consumed == expect


def test_seeded_and_resume_exact(work):
    a, b, r = work / "seed_a", work / "seed_b", work / "resumed"
    args = [*mix_args(work, "0.5", "2.5"), "--max-tokens", 2500, "--max-updates", 60, "--seed", 3]
    train(work, a, *args)
    train(work, b, *args)
    ca = curve(a / "train_curve.tsv")
    # the elapsed column (last) is a measurement; the rest must be equal
    assert [x[:-1] for x in ca] == [x[:-1] for x in curve(b / "train_curve.tsv")]
    nb = int(re.search(r"(\d+) batches per epoch", (a / "train.log").read_text()).group(1))
    assert nb < 30, "the resumed half must cross an epoch end"
    train(work, r, *mix_args(work, "0.5", "2.5"), "--max-tokens", 2500, "--max-updates", 30, "--seed", 3,
          "--save-interval-updates", 30)
    train(work, r, *args, "--resume")
    assert "resumed from" in (r / "train.log").read_text()
    cr = curve(r / "train_curve.tsv")
    assert len(cr) == 60
    assert [x[:-1] for x in ca] == [x[:-1] for x in cr]
    # other weights: the checkpoint's data state does not fit
    bad = run(TERN, "train", "--vocab", work / "vocab", "--cache-dir", work / "cache", "--save-dir", r, *TINY,
              *mix_args(work, "0.5", "2"), "--max-tokens", 2500, "--max-updates", 90, "--seed", 3, "--resume")
    assert bad.returncode != 0 and "weights" in bad.stderr


@pytest.mark.parametrize("spec,msg", [
    ("{a}.en,{a}.de:0", "weight must be positive"),
    ("{a}.en,{a}.de:-1", "weight must be positive"),
    ("{a}.en,{a}.de:x", "not a number"),
    ("{a}.en,{a}.de:", "weight after ':' is empty"),
    ("{a}.en,{a}.de:nan", "not a number"),
    ("{a}.en{a}.de", "no comma"),
    ("{s}.en,{s}.de", "has 10 lines but"),
    ("{e}.en,{e}.de", "is empty"),
    ("{a}.en,{work}/missing.de", "No such file"),
])
def test_bad_input(work, spec, msg):
    spec = spec.format(a=work / "a", s=work / "short", e=work / "empty", work=work)
    r = run(TERN, "train", "--vocab", work / "vocab", "--save-dir", work / "bad", *TINY, "--train", spec,
            "--max-updates", 1)
    first = r.stderr.splitlines()[0] if r.stderr else ""
    print(f"\n{first}", end="")
    assert r.returncode == 2
    assert msg in first and f"--train '{spec}'" in first
    if "10 lines" in msg:
        assert "short.de has 9" in first


def test_train_and_train_src_exclusive(work):
    r = run(TERN, "train", "--vocab", work / "vocab", "--save-dir", work / "bad2", *TINY,
            "--train", f"{work / 'a.en'},{work / 'a.de'}", "--train-src", work / "a.en", "--train-tgt", work / "a.de")
    assert r.returncode == 2 and "not both" in r.stderr
