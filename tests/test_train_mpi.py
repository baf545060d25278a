"""Data-parallel `tern train` over MPI (docs/training.md, "Data-parallel training (MPI)").

`mpirun -np 2 tern train --update-freq 1` against one process with `--update-freq 2`: the same
total batch (2 batches per update, the same shuffled order), dropout on (0.1, attention 0.1),
a tiny Transformer (2+2 layers, d 64) on 2,000 Multi30k pairs, 40 updates across an epoch end.

* Gradients: with a learning rate of 1e-12 (the parameters stay put, to float32's resolution),
  every update compares the forward and the summed gradient alone: the per-update loss is the
  same (the same forward, dropout keyed by the global micro-batch index; tolerance 1e-9 relative,
  measured 0) and the gradient norm agrees to float rounding (tolerance 1e-6 relative, measured
  1.4e-8): the two ranks' all-reduced gradient is the single process's accumulated gradient.
* Training (Adam, lr 1e-3 after 20 warm-up updates, an epoch end with validation and BLEU at
  update 31): per-update loss and nll within 1e-6 relative (measured 2.7e-9), gradient norm within
  1e-5 (2.6e-8), final parameters within 5e-4 of the largest parameter (max|diff| / max|ref| over
  the whole model; measured 4.2e-5), the epoch-end validation loss within 1e-6. The two runs add
  the same gradients in a different order (g0 + g1 over the ranks vs. the second batch
  accumulated into the first inside the GEMMs), so they differ in the last bits; at a high
  learning rate Adam turns such differences of near-zero gradient entries into steps of up to lr
  and the training amplifies them (lr 5e-3: loss gaps up to 8e-5 after 40 updates).
* Overlap: the log's all-reduce line says how many buckets were started during the backward pass:
  every update, all buckets but those that wait for the last stage (the shared embedding), > 0;
  with --no-comm-overlap none, and the run is bit for bit the same (same buckets, same reductions).
* Files: rank 0 alone writes: one train.log, one curve row per update, the same checkpoint names
  as the single process; the checkpoint translates with `tern translate`.
* Resume under mpirun (both ranks load the checkpoint) continues bit for bit; SIGTERM to one rank
  stops both after the same update with a checkpoint; an error on the ranks aborts the job.

mpirun must be installed (Debian openmpi-bin, scripts/setup.sh): the tests skip without it unless
env CI is set, where they fail. Binary: $TERN_BIN (default build/tern); one thread per rank.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
from train_torch_ref import st_read  # noqa: E402  (numpy-only safetensors reader)
from testutil import head  # noqa: E402

TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive",
           OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2"]
N_UPDATES = 40


def run(args, timeout=120):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=ENV)


def ok(args, timeout=120):
    r = run(args, timeout=timeout)
    assert r.returncode == 0, f"{args[:4]} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def work(tmp_path_factory, data_dir):
    if not shutil.which("mpirun"):
        msg = "mpirun not found: install openmpi-bin libopenmpi-dev (scripts/setup.sh) and rebuild"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg + " (skipped because env CI is unset)")
    if not os.path.exists(TERN):
        pytest.fail(f"{TERN} not built")
    d = tmp_path_factory.mktemp("train_mpi")
    m = os.path.join(data_dir, "multi30k")
    for lang in ("en", "de"):
        head(os.path.join(m, f"train.{lang}"), d / f"train.{lang}", 2000)
        head(os.path.join(m, f"val.{lang}"), d / f"valid.{lang}", 60)
    ok([TERN, "vocab", "--model-dir", d / "vocab", "--source", d / "train.en", "--target", d / "train.de",
        "--vocab-size", 1000, "-t", 1])
    return d


def base_args(work, save, *extra):
    return ["train", "--vocab", work / "vocab", "--cache-dir", work / "cache", "--save-dir", save,
            "--train-src", work / "train.en", "--train-tgt", work / "train.de",
            "--layers", 2, "--d-model", 64, "--ff", 128, "--heads", 4, "-t", 1, "--no-plot", "-q",
            "--max-tokens", 1000, "--dropout", 0.1, "--attention-dropout", 0.1, "--bucket-mb", 0.1,
            "--seed", 3, *extra]


TRAIN = ["--lr", "1e-3", "--warmup", 20, "--max-updates", N_UPDATES,
         "--valid-src", "VALID.en", "--valid-tgt", "VALID.de", "--bleu-beam", 1, "--log-interval", 10]


def train_args(work):
    return [str(work / "valid.en") if a == "VALID.en" else str(work / "valid.de") if a == "VALID.de" else a
            for a in TRAIN]


def single(work, save, *extra):
    return ok([TERN, *base_args(work, save, "--update-freq", 2, *extra)])


def mpi(work, save, *extra):
    return ok(MPIRUN + [TERN, *base_args(work, save, "--update-freq", 1, *extra)])


def curve(path):
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f if not line.startswith("#")]


def params(save, n):
    p, _ = st_read(save / f"checkpoint-{n:08d}" / "model.safetensors")
    return {k: v for k, v in p.items() if v.dtype == np.float32}


def rel_gaps(a, b):
    """Worst relative gaps of the per-update loss, nll and gradient norm of two runs."""
    ra, rb = curve(a / "train_curve.tsv"), curve(b / "train_curve.tsv")
    assert len(ra) == len(rb) == N_UPDATES
    loss = norm = 0.0
    for x, y in zip(ra, rb):
        assert x[0] == y[0] and x[1] == y[1] and x[5] == y[5] and x[7] == y[7]  # update, epoch, lr, tokens
        loss = max(loss, abs(float(x[2]) - float(y[2])) / float(y[2]), abs(float(x[3]) - float(y[3])) / float(y[3]))
        norm = max(norm, abs(float(x[6]) - float(y[6])) / float(y[6]))
    return loss, norm


def allreduce_line(save):
    lines = [ln for ln in (save / "train.log").read_text().splitlines() if "all-reduce:" in ln]
    assert len(lines) == 1, lines
    m = re.search(r"all-reduce: (\d+) updates, (\d+) buckets of ~[\d.]+ MB each \((\d+) wait for the last stage\); "
                  r"buckets started during the backward pass (\d+), of which complete when it returned (\d+)", lines[0])
    assert m, lines[0]
    return [int(g) for g in m.groups()]


# ------------------------------------------------------------------ gradients and training


def test_gradients_equal_single_process(work):
    args = ["--lr-scheduler", "constant", "--lr", "1e-12", "--max-updates", N_UPDATES, "--no-bleu"]
    single(work, work / "g1", *args)
    mpi(work, work / "g2", *args)
    loss, norm = rel_gaps(work / "g1", work / "g2")
    print(f"\ngradients (lr 1e-12): per-update loss/nll relative gap {loss:.3g}, gradient norm {norm:.3g}")
    assert loss <= 1e-9 and norm <= 1e-6, (loss, norm)


@pytest.fixture(scope="module")
def runs(work):
    t0 = time.time()
    single(work, work / "ref", *train_args(work))
    t1 = time.time()
    mpi(work, work / "dp", *train_args(work))
    t2 = time.time()
    mpi(work, work / "dpn", *train_args(work), "--no-comm-overlap")
    print(f"\n1 process: {t1 - t0:.1f} s, mpirun -np 2: {t2 - t1:.1f} s")
    return work / "ref", work / "dp", work / "dpn"


def test_training_equals_single_process(runs):
    ref, dp, _ = runs
    loss, norm = rel_gaps(ref, dp)
    pa, pb = params(ref, N_UPDATES), params(dp, N_UPDATES)
    assert pa.keys() == pb.keys()
    diff = max(float(np.abs(pa[k].astype(np.float64) - pb[k]).max()) for k in pa)
    scale = max(float(np.abs(pa[k]).max()) for k in pa)
    print(f"\ntraining: per-update loss/nll gap {loss:.3g}, gnorm {norm:.3g}, parameters max|diff|/max|ref| "
          f"{diff / scale:.3g}")
    assert loss <= 1e-6 and norm <= 1e-5, (loss, norm)
    assert diff / scale <= 5e-4, diff / scale
    # one validation per epoch end, at the same updates
    va, vb = curve(ref / "valid_curve.tsv"), curve(dp / "valid_curve.tsv")
    assert [r[0] for r in va] == [r[0] for r in vb] and len(va) >= 1
    assert abs(float(va[0][2]) - float(vb[0][2])) <= 1e-6 * float(va[0][2])


def test_overlap_happens_and_no_overlap_is_identical(runs):
    _, dp, dpn = runs
    updates, buckets, last, started, _ = allreduce_line(dp)
    print(f"\noverlap: {buckets} buckets ({last} wait for the last stage), started during the backward pass "
          f"{started} over {updates} updates")
    assert updates == N_UPDATES and buckets > last >= 1
    # rank 0 holds a batch in every update (it takes the first of each pair)
    assert started == updates * (buckets - last) > 0
    u2, b2, l2, s2, d2 = allreduce_line(dpn)
    assert (u2, b2, l2, s2, d2) == (N_UPDATES, buckets, last, 0, 0)
    assert (dp / "train_curve.tsv").read_text().split("\n")[1:] != []
    strip = lambda rows: [r[:8] for r in rows]  # noqa: E731  (drop the elapsed time)
    assert strip(curve(dp / "train_curve.tsv")) == strip(curve(dpn / "train_curve.tsv"))
    pa, pb = params(dp, N_UPDATES), params(dpn, N_UPDATES)
    assert all(np.array_equal(pa[k], pb[k]) for k in pa)


def test_files_written_once_and_checkpoint_translates(work, runs):
    ref, dp, _ = runs
    names = lambda d: sorted(p for p in os.listdir(d) if not p.endswith(".cache"))  # noqa: E731
    assert names(dp) == names(ref)
    log = (dp / "train.log").read_text()
    assert log.count(" done (max updates) at update 40 ") == 1
    assert log.count("data-parallel: 2 processes (MPI), 1 thread(s) each") == 1
    assert len(re.findall(r"\] bleu  \| epoch", log)) == len(curve(dp / "valid_curve.tsv"))
    assert [r[0] for r in curve(dp / "train_curve.tsv")] == [str(i) for i in range(1, N_UPDATES + 1)]
    out = work / "dp_hyp.de"
    ok([TERN, "translate", "-m", dp / f"checkpoint-{N_UPDATES:08d}", "-b", 2, "-t", 1, "-q", work / "valid.en",
        out])
    assert len(out.read_text().splitlines()) == len((work / "valid.en").read_text().splitlines())


def test_resume_under_mpirun_is_exact(work, runs):
    _, dp, _ = runs
    save = work / "dpr"
    args = [a if a != N_UPDATES else 20 for a in train_args(work)]
    mpi(work, save, *args)
    mpi(work, save, *train_args(work), "--resume")
    strip = lambda rows: [r[:8] for r in rows]  # noqa: E731
    assert strip(curve(save / "train_curve.tsv")) == strip(curve(dp / "train_curve.tsv"))
    pa, pb = params(save, N_UPDATES), params(dp, N_UPDATES)
    assert all(np.array_equal(pa[k], pb[k]) for k in pa)


def test_sigterm_to_one_rank_stops_both(work):
    save = work / "dps"
    args = MPIRUN + [TERN, *base_args(work, save, "--update-freq", 1, "--lr", "5e-3", "--max-updates", 100000,
                                      "--no-bleu", "--log-interval", 5)]
    p = subprocess.Popen([str(a) for a in args], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            if (save / "train.log").exists() and "update 10 |" in (save / "train.log").read_text():
                break
            time.sleep(0.2)
        ranks = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
        assert len(ranks) == 2, ranks
        os.kill(int(ranks[-1]), signal.SIGTERM)  # one rank only
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err[-2000:]
    log = (save / "train.log").read_text()
    m = re.search(r" done \(interrupted\) at update (\d+) ", log)
    assert m, log[-2000:]
    n = int(m.group(1))
    assert (save / f"checkpoint-{n:08d}").is_dir()
    assert len(curve(save / "train_curve.tsv")) == n


def test_error_on_the_ranks_aborts_the_job(work, tmp_path):
    r = run(MPIRUN + [TERN, *base_args(work, tmp_path / "bad", "--lr-scheduler", "constant", "--lr", 0)], timeout=60)
    assert r.returncode != 0
    assert "learning rate must be > 0" in r.stderr and "aborting the data-parallel job" in r.stderr
