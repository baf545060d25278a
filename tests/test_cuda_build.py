"""The CUDA backend builds here (issue 29: `make CUDA=1` and a compile-only test in CI): nvcc compiles
the device kernels (src/kernels/cuda/*.cu, -Werror) into build/libtern-cuda.a with every entry point
kernels_cuda.h and gemm_cuda.h declare (the row kernels and the cuBLASLt products), and their GPU
test (tests/cuda/test_cuda_kernels.cu) links with cudart static and cuBLASLt. Run on a machine without a GPU, the test says so and exits 77; on one with a GPU (the lent
machine, scripts/gpu_check.sh) it must pass. The arithmetic those kernels run is tested on this CPU
by build/tests/test_cuda_host (tests/c/test_cuda_host.c, in test_c_units)."""
import os
import re
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")


def test_make_cuda_builds_kernels_and_their_gpu_test():
    assert shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc"), \
        "nvcc not found: the CUDA toolkit is part of this machine kind (scripts/setup.sh)"
    env = dict(os.environ, PATH=os.environ.get("PATH", "") + ":/usr/local/cuda/bin")
    r = subprocess.run(["make", "-s", "CUDA=1", "cuda"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    declared = set()
    for h in ("kernels_cuda.h", "gemm_cuda.h"):
        with open(os.path.join(ROOT, "src", "kernels", "cuda", h), encoding="utf-8") as f:
            declared |= set(re.findall(r"\b(tern_cuda_[a-z0-9_]+)\s*\(", re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)))
    nm = subprocess.run(["nm", "--defined-only", os.path.join(BUILD, "libtern-cuda.a")], capture_output=True,
                        text=True, timeout=60).stdout
    defined = set(re.findall(r" T (tern_cuda_[a-z0-9_]+)$", nm, re.M))
    assert len(declared) >= 14 and declared == defined, (sorted(declared - defined), sorted(defined - declared))
    test = os.path.join(BUILD, "tests", "cuda", "test_cuda_kernels")
    ldd = subprocess.run(["ldd", test], capture_output=True, text=True, timeout=60).stdout
    assert "libcudart" not in ldd, ldd  # runs where only a driver is installed
    run = subprocess.run([test], capture_output=True, text=True, timeout=600)
    gpu = os.path.exists("/dev/nvidia0")
    if gpu:
        assert run.returncode == 0 and ", 0 failed" in run.stdout, run.stdout + run.stderr
    else:
        assert run.returncode == 77 and run.stdout == "no CUDA device\n", (run.returncode, run.stdout, run.stderr)
