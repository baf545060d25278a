"""What the tests that compare Tern with PyTorch share (numpy and pytest only; torch runs in a child
process): tests/test_train_torch.py, test_rnn_gru_train_torch.py, test_gnmt_train_torch.py,
test_rnn_torch.py and test_bench_train.py.

* TORCH_PY: the Python that has torch — Debian's python3-torch under /usr/bin/python3
  (TERN_TORCH_PYTHON overrides), because the test virtual environment has no torch.
* tool(name): tests/tools/NAME; built_driver(name): BUILD/tests/tools/NAME (BUILD: TERN_BUILD or
  build), asserted to exist; st_read, st_write: train_torch_ref.py's safetensors helpers.
* torch_python_or_skip(*args): runs TORCH_PY with args (a probe such as `REF info`); without a
  working PyTorch the test fails under CI and is skipped otherwise.
* torch_python_fixture(probe), driver_fixture(name): those two fixtures of a test module.
* train_options(**kw): the optimizer metadata of a `train` run.
* family_layout(...): family_train_driver's parameter names, shapes and aliases for a configuration.
* run_driver_and_ref(...): one comparison's two runs: writes the input safetensors (weights, batch,
  configuration as metadata), runs the C driver and the PyTorch reference on it, reads both outputs.
* run_step(...): a one-step comparison's weights, batch and runs; check_step_loss(...): its
  ntokens, loss and nll sums.
* compare_grads(...): the per-tensor gradient error max |g_tern - g_torch| / max |g_torch|, with
  the zero-gradient guard; prints and returns the worst error and its tensor.
* check_trajectory(...): a training run's learning rates and per-update losses.
"""
import json
import os
import subprocess
import zlib

import numpy as np
import pytest

from train_batches import random_batch  # numpy only
from train_torch_ref import st_read, st_write  # numpy-only helpers, for the tests too

TORCH_PY = os.environ.get("TERN_TORCH_PYTHON", "/usr/bin/python3")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("TERN_BUILD", "build")


def tool(name):
    """tests/tools/NAME (a reference script)."""
    return os.path.join(ROOT, "tests", "tools", name)


def built_driver(name):
    """BUILD/tests/tools/NAME, a test driver program, which must have been built."""
    path = os.path.join(ROOT, BUILD, "tests", "tools", name)
    assert os.path.exists(path), f"{path} is missing: run make"
    return path


def torch_python_or_skip(*args, timeout=120, tail=500):
    """The finished `TORCH_PY args` (subprocess.CompletedProcess, text output); when it cannot run
    or fails: pytest.fail under CI (the environment variable CI set), pytest.skip otherwise, with
    the last `tail` characters of its stderr."""
    try:
        r = subprocess.run([TORCH_PY, *args], capture_output=True, text=True, timeout=timeout)
    except OSError as e:
        r, err = None, str(e)
    if r is None or r.returncode != 0:
        msg = f"PyTorch not available through {TORCH_PY} (run scripts/setup.sh): " + \
              (err if r is None else r.stderr[-tail:])
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return r


def torch_python_fixture(probe, report=None):
    """The module-scoped fixture `torch_python` of a test module (assign it to that name): TORCH_PY,
    once `TORCH_PY probe info` has run (else torch_python_or_skip's fail or skip); with report, a
    format string over the probe's JSON answer (keys torch, blas_info, blas_libraries), it prints that."""
    @pytest.fixture(scope="module", name="torch_python")
    def torch_python():
        r = torch_python_or_skip(probe, "info")
        if report:
            print(report.format(**json.loads(r.stdout)))
        return TORCH_PY
    return torch_python


def driver_fixture(name):
    """The module-scoped fixture `driver` of a test module (assign it to that name): built_driver(name)."""
    @pytest.fixture(scope="module", name="driver")
    def driver():
        return built_driver(name)
    return driver


def train_options(**kw):
    """A `train` run's optimizer metadata: 200 updates of AdamW (decoupled weight decay 1e-4, betas
    0.9, 0.98, eps 1e-8), inverse_sqrt from 1e-7, clip at norm 1; kw: lr, warmup and any changes."""
    opt = dict(updates=200, warmup_init_lr=1e-7, beta1=0.9, beta2=0.98, adam_eps=1e-8, weight_decay=1e-4,
               decoupled=1, clip_norm=1.0)
    opt.update(kw)
    return opt


def family_layout(tmp_path, driver, c):
    """family_train_driver's `layout` of configuration c: the parameter tensors {name: shape} and
    the aliases {name: target}."""
    inp, out = str(tmp_path / "layout_in.safetensors"), str(tmp_path / "layout.safetensors")
    st_write(inp, {}, c)
    r = subprocess.run([driver, "layout", inp, out], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    t, meta = st_read(out)
    aliases = dict(a.split("=") for a in meta.get("aliases", "").split(";") if a)
    return {k: v.shape for k, v in t.items()}, aliases


def run_driver_and_ref(mode, tmp_path, driver, torch_python, ref_script, c, weights, batch, extra=None,
                       ref_timeout=600):
    """Writes tmp_path/in.safetensors (weights, batch/src, batch/tgt_in, batch/tgt_out from batch,
    metadata c updated by extra), runs `driver mode IN c.safetensors` and `torch_python ref_script
    mode IN t.npz`; returns (Tern's tensors, Tern's metadata, the reference's arrays)."""
    inp, out_c, out_t = (str(tmp_path / n) for n in ("in.safetensors", "c.safetensors", "t.npz"))
    src, tin, tout = batch
    tensors = dict(weights)
    tensors.update({"batch/src": src, "batch/tgt_in": tin, "batch/tgt_out": tout})
    st_write(inp, tensors, {**c, **(extra or {})})
    r = subprocess.run([driver, mode, inp, out_c], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([torch_python, ref_script, mode, inp, out_t], capture_output=True, text=True,
                       timeout=ref_timeout)
    assert r.returncode == 0, r.stderr
    tern, meta = st_read(out_c)
    return tern, meta, dict(np.load(out_t))


STEP_LENGTHS = dict(S=9, T=7, lens_src=[9, 5, 1, 7], lens_tgt=[7, 3, 6, 1])


def run_step(name, tmp_path, driver, torch_python, ref_script, c, make_weights, loss_tol, ref_timeout=600,
             lengths=None):
    """The one-step comparison of a named case: weights make_weights(rng) and a batch of padded
    sentences drawn with a generator seeded by crc32(name), of lengths (a dict S, T, lens_src,
    lens_tgt) or STEP_LENGTHS (4 sentences: sources 9, 5, 1, 7, targets 7, 3, 6, 1 tokens: 17);
    runs both engines' `step` and checks the loss sums (check_step_loss). Returns
    run_driver_and_ref's (Tern's tensors, Tern's metadata, the reference's arrays)."""
    lengths = lengths or STEP_LENGTHS
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    weights = make_weights(rng)
    batch = random_batch(c, rng, B=len(lengths["lens_src"]), **lengths)
    tern, meta, ref = run_driver_and_ref("step", tmp_path, driver, torch_python, ref_script, c, weights, batch,
                                         ref_timeout=ref_timeout)
    check_step_loss(meta, ref, sum(lengths["lens_tgt"]), loss_tol)
    return tern, meta, ref


def check_step_loss(meta, ref, ntokens, tol):
    """One step's target tokens: Tern's (metadata) == PyTorch's == ntokens; its loss_sum and nll_sum
    within tol relative of PyTorch's."""
    assert int(meta["ntokens"]) == int(ref["ntokens"]) == ntokens
    for key in ("loss_sum", "nll_sum"):
        a, b = float(meta[key]), float(ref[key])
        assert abs(a - b) <= tol * abs(b), f"{key}: tern {a} vs torch {b}"


def compare_grads(label, tern, meta, ref, names, tol=None):
    """For every name: Tern's gradient tern[name] against ref["grad/" + name] (same shape, the
    reference not all zero), error max |g - r| / max |r|; with tol, each error must be <= tol
    (asserted tensor by tensor, in order). Prints `label: loss ..., worst rel err ...` (Tern's loss
    from meta) and returns (worst error, its tensor, [(error, name)...])."""
    worst, worst_name, errs = 0.0, "", []
    for n in names:
        g, r = tern[n], ref["grad/" + n]
        assert g.shape == r.shape, n
        scale = np.abs(r).max()
        assert scale > 0, f"{n}: PyTorch gradient is all zero (test would be vacuous)"
        err = np.abs(g - r).max() / scale
        errs.append((err, n))
        if err > worst:
            worst, worst_name = err, n
        if tol is not None:
            assert err <= tol, f"{n}: gradient rel err {err:.3e} > {tol}"
    print(f"{label}: loss {float(meta['loss_sum']):.6f} (torch {float(ref['loss_sum']):.6f}), "
          f"{len(names)} gradient tensors, worst rel err {worst:.2e} ({worst_name})")
    return worst, worst_name, errs


def check_trajectory(tern, ref, tol, label="trajectory", mid=None, extra=""):
    """A `train` run's two outputs: the learning rates equal (1e-6 relative); prints the losses, the
    largest relative gap of the per-update losses (and the gap at update index mid, when given, and
    at the end) and that of the gradient norms, then `extra`; the gap must stay <= tol at every
    update and PyTorch's loss must fall below half its start (else the check would be weak)."""
    np.testing.assert_allclose(tern["lrs"], ref["lrs"], rtol=1e-6)
    lc, lt = tern["losses"].astype(np.float64), ref["losses"]
    rel = np.abs(lc - lt) / np.abs(lt)
    at = f"gap at {len(rel)}: {rel[-1]:.2e}" if mid is None else \
        f"gap at {mid}: {rel[mid]:.2e}, at {len(rel)}: {rel[-1]:.2e}"
    print(f"{label}: loss {lt[0]:.4f} -> {lt[-1]:.4f} (torch), {lc[-1]:.4f} (tern); "
          f"max rel gap {rel.max():.2e} at update {rel.argmax()}, {at}; "
          f"grad norm gap {np.abs(tern['grad_norms'] - ref['grad_norms']).max():.2e}{extra}")
    assert rel.max() <= tol, f"loss trajectory leaves PyTorch's: {rel.max():.3e} at update {rel.argmax()}"
    assert lt[-1] < 0.5 * lt[0], "the toy task was not learned: the trajectory check would be weak"
