"""bench/bench_train.py's "same computation" claim, without timing anything (speed is measured in
bench/, not here).

The bench's file (build/bench/bench_train prepare: the recipe's model, 4+4 layers d 128 ff 512,
initialized by Tern, and the first batches of Tern's own Multi30k pipeline with models/en-de's
vocabulary, max-tokens 4096) is read by both engines; the first batch's loss without dropout
(label-smoothed sum and nll sum, the first update's loss) must agree within 1e-4 relative
between Tern (bench_train loss) and PyTorch (bench/bench_train_torch.py loss: PyTorch's own
Transformer layers), over the same number of target tokens. Measured: 6e-8.
And the PyTorch side must map OpenBLAS (the bench refuses to compare otherwise).

PyTorch is Debian's python3-torch under /usr/bin/python3 (TERN_TORCH_PYTHON overrides); without
it the tests skip, except under CI, where they fail.
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
from torch_check import torch_python_or_skip  # noqa: E402
BUILD = os.environ.get("TERN_BUILD", "build")
DRIVER = os.path.join(ROOT, BUILD, "bench", "bench_train")
TORCH_SIDE = os.path.join(ROOT, "bench", "bench_train_torch.py")
LOSS_TOL = 1e-4


def torch_run(*args):
    r = torch_python_or_skip(TORCH_SIDE, *args, timeout=300, tail=800)
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def bench_file(tmp_path_factory, data_dir):
    assert os.path.exists(DRIVER), f"{DRIVER} is missing: run make"
    d = tmp_path_factory.mktemp("bench_train")
    m = os.path.join(data_dir, "multi30k")
    out = str(d / "recipe.safetensors")
    r = subprocess.run([DRIVER, "prepare", "--vocab", os.path.join(ROOT, "models", "en-de"),
                        "--src", os.path.join(m, "train.en"), "--tgt", os.path.join(m, "train.de"),
                        "--cache", str(d / "train.cache"), "--max-tokens", "4096", "--batches", "2",
                        "--layers", "4", "--d-model", "128", "--ff", "512", "--heads", "4", out],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["batches"] == 2 and info["params"] == 2875904, info
    return out


def test_first_update_loss_matches_pytorch(bench_file):
    r = subprocess.run([DRIVER, "loss", bench_file], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    tern = json.loads(r.stdout)
    ref = torch_run("loss", bench_file)
    assert tern["ntokens"] == ref["ntokens"] > 3000, (tern, ref)
    for key in ("loss_sum", "nll_sum"):
        rel = abs(tern[key] - ref[key]) / abs(ref[key])
        print(f"{key}: tern {tern[key]:.6f}, torch {ref[key]:.6f}, rel diff {rel:.1e}")
        assert rel <= LOSS_TOL, f"{key}: tern {tern[key]} vs torch {ref[key]}"
    # an untrained model over 8,000 pieces: the per-token loss is near log(8000) = 8.99
    assert 8.0 < tern["nll_sum"] / tern["ntokens"] < 11.0


def test_pytorch_side_maps_openblas():
    info = torch_run("info")
    print(info)
    assert info["openblas"], f"PyTorch's BLAS is not OpenBLAS: {info['blas_libraries']}"
