#!/usr/bin/env bash
# scripts/gpu_check.sh — issue 29's device check, the one script a lent GPU runs (the `run` tool of
# the workplace: `bash scripts/gpu_check.sh`, with build/tests/cuda and build/libtern-cuda.a carried
# from the CPU machine, where `make CUDA=1 cuda` built them; nvcc is not needed on the device
# machine when they are there). Everything it finds goes to one results file,
# $OUT/gpu_check.txt (OUT: the run tool's folder that comes back; /tmp/gpu_check elsewhere), step
# by step, so that a run cut short still says how far it got. Exit status: 0 when every step
# passed.
#
# Steps (each bounded by `timeout`; the whole under 8 minutes):
#   1. the device: nvidia-smi, the driver's CUDA version
#   2. the build: `make CUDA=1 cuda` where nvcc is (else the carried binaries)
#   3. the kernels against their host emulation (tests/cuda/test_cuda_kernels.cu): bit-identical
#      layer norm, top-k, gathers, embeddings, int8 epilogue; softmax and attention within 1e-6
#      relative; cuBLASLt products (float32, float16, bfloat16, int8) against double/int64 ones
# Later steps (the Transformer on the GPU against the CPU path, training, the bench against
# ctranslate2's CUDA build) are appended here as they are written.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
R=$OUT/gpu_check.txt
: > "$R"
status=0
step() { echo "== $*" | tee -a "$R"; }
run_step() { # name, timeout seconds, command...
  local name=$1 t=$2; shift 2
  step "$name"
  local t0=$SECONDS
  timeout "$t" "$@" >> "$R" 2>&1
  local rc=$?
  echo "-- $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$R"
  [ "$rc" -eq 0 ] || status=1
  return "$rc"
}
run_step "device" 60 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
# Build there when the toolkit is there (the lent GPU's image has nvcc 13 and the CUDA libraries),
# else run what was carried from the CPU machine.
export PATH=$PATH:/usr/local/cuda/bin
if command -v nvcc > /dev/null; then
  run_step "build (make CUDA=1 cuda)" 300 make -j"$(nproc)" CUDA=1 cuda
elif [ ! -x build/tests/cuda/test_cuda_kernels ]; then
  step "no nvcc and no carried build/tests/cuda/test_cuda_kernels: nothing to run"; status=1
fi
run_step "kernels vs host emulation" 120 build/tests/cuda/test_cuda_kernels
step "done: status $status"
exit "$status"
