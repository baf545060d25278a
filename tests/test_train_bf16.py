"""`tern train --precision bfloat16` (docs/training.md, "bfloat16 training").

* Loss curves: a tiny Transformer (2+2 layers, d 64, ff 128, 4 heads, ReLU) trained for 300
  updates on 3,000 Multi30k pairs (1,000-piece vocabulary), same seed and batches, in float32 and
  in bfloat16: the bfloat16 training loss tracks float32's — mean |relative gap| over the last 100
  updates <= 2% (measured 0.046%, max 0.22%) — and the final validation loss is within 2%
  (measured 0.005%); the first update, on the same initial weights, differs by < 0.1% (6e-6).
  About 40 s of CPU (two 300-update runs).
* Refusal: where the CPU (or oneDNN, limited with ONEDNN_MAX_CPU_ISA=AVX512_CORE) has no
  AVX512_BF16, `--precision bfloat16` exits with status 1 and an error naming AVX512_BF16 — never
  a crash. On a CPU without AVX512_BF16 (read from /proc/cpuinfo) the loss-curve test checks that
  refusal instead of training: bfloat16 compute cannot run there.
* A bad --precision value is a usage error.
* The recurrent families (`--architecture rnn-gru` with --layer-norm, and `gnmt` 2+2): the same
  comparison over RNN_UPDATES updates (E = H = 64), every GEMM of their layers in bfloat16: the
  mean |relative gap| of the training loss over the last 50 updates <= 2% and the final validation
  loss within 2%; the first update (same initial weights) within 0.1%. The refusal under
  ONEDNN_MAX_CPU_ISA=AVX512_CORE is the same clean one.

Binary: $TERN_BIN (default build/tern). One thread (OMP_NUM_THREADS=1, -t 1).
"""
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
from testutil import head  # noqa: E402
TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
UPDATES = 300
MAX_TRAIN_GAP = 0.02   # mean |rel gap| of the per-update training loss over the last 100 updates
MAX_VALID_GAP = 0.02   # relative gap of the final validation loss


CAP_LEVELS = ["AVX2", "AVX512_CORE", "AVX512_CORE_VNNI", "AVX512_CORE_BF16", "AVX512_CORE_AMX"]


def cpu_has_bf16():
    """AVX512_BF16 in /proc/cpuinfo and not capped away: under TERN_MAX_CPU_ISA or ONEDNN_MAX_CPU_ISA
    below AVX512_CORE_BF16 (how an AVX-512 machine runs the suite as an AVX2-only one would) the
    trainer refuses bfloat16 as it does on a CPU without it, and that is what is checked."""
    for var in ("TERN_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA"):
        cap = os.environ.get(var, "").upper()
        if cap in CAP_LEVELS and CAP_LEVELS.index(cap) < CAP_LEVELS.index("AVX512_CORE_BF16"):
            return False
    with open("/proc/cpuinfo") as f:
        return any(line.startswith("flags") and " avx512_bf16" in line for line in f)


def run(*args, env=ENV, timeout=300):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def work(tmp_path_factory, data_dir):
    assert os.path.exists(TERN), f"{TERN} not built (run make)"
    d = tmp_path_factory.mktemp("train_bf16")
    m = os.path.join(data_dir, "multi30k")
    for lang in ("en", "de"):
        head(os.path.join(m, f"train.{lang}"), d / f"train.{lang}", 3000)
        head(os.path.join(m, f"val.{lang}"), d / f"valid.{lang}", 200)
    r = run(TERN, "vocab", "--model-dir", d / "vocab", "--source", d / "train.en", "--target", d / "train.de",
            "--vocab-size", 1000, "-t", 1)
    assert r.returncode == 0, r.stderr
    return d


def train(work, save, precision, env=ENV, updates=UPDATES):
    return run(TERN, "train", "--vocab", work / "vocab", "--cache-dir", work / "cache", "--save-dir", save,
               "--layers", 2, "--d-model", 64, "--ff", 128, "--heads", 4, "-t", 1, "--no-plot", "-q",
               "--train-src", work / "train.en", "--train-tgt", work / "train.de",
               "--valid-src", work / "valid.en", "--valid-tgt", work / "valid.de", "--no-bleu",
               "--max-tokens", 1500, "--lr", "5e-3", "--warmup", 100, "--dropout", 0.1, "--seed", 3,
               "--max-updates", updates, "--valid-interval-updates", updates, "--precision", precision, env=env)


def curve(path):
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f if not line.startswith("#")]


def check_refused(r):
    assert r.returncode == 1, f"expected a clean failure (status 1), got {r.returncode}:\n{r.stderr[-2000:]}"
    assert "AVX512_BF16" in r.stderr and "--precision float32" in r.stderr, r.stderr


def test_bf16_loss_tracks_float32(work):
    if not cpu_has_bf16():
        # bfloat16 compute cannot run on this CPU: what must hold here is the clear refusal.
        check_refused(train(work, work / "nobf16", "bfloat16", updates=1))
        print("\nno AVX512_BF16 on this CPU: checked the refusal; the loss curves need a CPU with it")
        return
    r32 = train(work, work / "f32", "float32")
    assert r32.returncode == 0, r32.stderr[-3000:]
    r16 = train(work, work / "bf16", "bfloat16")
    assert r16.returncode == 0, r16.stderr[-3000:]
    with open(work / "bf16" / "train.log") as f:
        assert "precision: bfloat16 linear layers" in f.read()
    with open(work / "f32" / "train.log") as f:
        assert "precision:" not in f.read()
    a, b = curve(work / "f32" / "train_curve.tsv"), curve(work / "bf16" / "train_curve.tsv")
    assert [int(x[0]) for x in a] == list(range(1, UPDATES + 1)) == [int(x[0]) for x in b]
    assert [x[7] for x in a] == [x[7] for x in b]  # the same batches (target tokens per update)
    la, lb = np.array([float(x[2]) for x in a]), np.array([float(x[2]) for x in b])
    first = abs(lb[0] - la[0]) / la[0]
    gap = np.abs(lb - la) / la
    last = gap[-100:].mean()
    va, vb = curve(work / "f32" / "valid_curve.tsv")[-1], curve(work / "bf16" / "valid_curve.tsv")[-1]
    assert va[0] == vb[0] == str(UPDATES)
    vgap = abs(float(vb[2]) - float(va[2])) / float(va[2])
    print(f"\nbfloat16 vs float32, {UPDATES} updates: first-update loss gap {first:.2e}; training loss "
          f"{la[-100:].mean():.4f} vs {lb[-100:].mean():.4f} (mean of the last 100), mean |rel gap| {last:.2e}, "
          f"max {gap[-100:].max():.2e}; validation loss {va[2]} vs {vb[2]} (rel gap {vgap:.2e})")
    assert first < 1e-3
    assert last <= MAX_TRAIN_GAP
    assert vgap <= MAX_VALID_GAP
    assert la[-100:].mean() < la[0] - 1.5  # it learned


def test_refused_without_avx512_bf16(work):
    # oneDNN limited below avx512_core_bf16: the same clean refusal as on a CPU without the ISA
    env = dict(ENV, ONEDNN_MAX_CPU_ISA="AVX512_CORE")
    check_refused(train(work, work / "limited", "bfloat16", env=env, updates=1))
    assert not os.path.exists(work / "limited" / "checkpoint-00000001")


def test_bad_precision_value(work):
    r = train(work, work / "bad", "float16", updates=1)
    assert r.returncode == 2, r.returncode  # a usage error
    assert "--precision must be float32 or bfloat16" in r.stderr


RNN_UPDATES = 150
RNN_ARGS = {
    "rnn-gru": ["--architecture", "rnn-gru", "--layer-norm", "--emb-dim", 64, "--rnn-dim", 64],
    "gnmt": ["--architecture", "gnmt", "--layers", 2, "--hidden", 64],
}


def train_rnn(work, family, save, precision, env=ENV, updates=RNN_UPDATES):
    return run(TERN, "train", *RNN_ARGS[family], "--vocab", work / "vocab", "--cache-dir", work / "cache",
               "--save-dir", save, "-t", 1, "--no-plot", "-q", "--train-src", work / "train.en",
               "--train-tgt", work / "train.de", "--valid-src", work / "valid.en", "--valid-tgt", work / "valid.de",
               "--no-bleu", "--max-tokens", 1500, "--lr", "5e-3", "--warmup", 50, "--dropout", 0.1, "--seed", 3,
               "--clip-norm", 5, "--max-updates", updates, "--valid-interval-updates", updates, "--precision",
               precision, env=env)


@pytest.mark.parametrize("family", sorted(RNN_ARGS))
def test_recurrent_bf16_tracks_float32(work, family):
    if not cpu_has_bf16():
        check_refused(train_rnn(work, family, work / f"{family}-nobf16", "bfloat16", updates=1))
        print(f"\n{family}: no AVX512_BF16 on this CPU: checked the refusal")
        return
    r32 = train_rnn(work, family, work / f"{family}-f32", "float32")
    assert r32.returncode == 0, r32.stderr[-3000:]
    r16 = train_rnn(work, family, work / f"{family}-bf16", "bfloat16")
    assert r16.returncode == 0, r16.stderr[-3000:]
    with open(work / f"{family}-bf16" / "train.log") as f:
        assert "bfloat16 GEMMs" in f.read()
    a, b = curve(work / f"{family}-f32" / "train_curve.tsv"), curve(work / f"{family}-bf16" / "train_curve.tsv")
    assert [x[7] for x in a] == [x[7] for x in b]  # the same batches
    la, lb = np.array([float(x[2]) for x in a]), np.array([float(x[2]) for x in b])
    first = abs(lb[0] - la[0]) / la[0]
    gap = np.abs(lb - la) / la
    last = gap[-50:].mean()
    va = curve(work / f"{family}-f32" / "valid_curve.tsv")[-1]
    vb = curve(work / f"{family}-bf16" / "valid_curve.tsv")[-1]
    vgap = abs(float(vb[2]) - float(va[2])) / float(va[2])
    print(f"\n{family} bfloat16 vs float32, {RNN_UPDATES} updates: first-update loss gap {first:.2e}; training "
          f"loss {la[-50:].mean():.4f} vs {lb[-50:].mean():.4f} (mean of the last 50), mean |rel gap| {last:.2e}, "
          f"max {gap[-50:].max():.2e}; validation loss {va[2]} vs {vb[2]} (rel gap {vgap:.2e})")
    assert first < 1e-3
    assert last <= MAX_TRAIN_GAP
    assert vgap <= MAX_VALID_GAP
    assert la[-50:].mean() < la[0] - 1.0  # it learned


@pytest.mark.parametrize("family", sorted(RNN_ARGS))
def test_recurrent_refused_without_avx512_bf16(work, family):
    env = dict(ENV, ONEDNN_MAX_CPU_ISA="AVX512_CORE")
    check_refused(train_rnn(work, family, work / f"{family}-limited", "bfloat16", env=env, updates=1))
