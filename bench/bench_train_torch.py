"""PyTorch's side of bench/bench_train.py (run under /usr/bin/python3: Debian's python3-torch, or under
.venv-torch-pypi/bin/python: PyPI's torch, bench/setup_torch_pypi.sh).

    python3 bench_train_torch.py info
    python3 bench_train_torch.py loss IN.safetensors
    python3 bench_train_torch.py run IN.safetensors --threads T --warmup W --updates N --dropout P
                                    [--precision float32|bfloat16]
    python3 bench_train_torch.py peak - --threads T [--rows M] [--shapes NxK,...] [--seconds S]

IN is the file bench/bench_train.c `prepare` wrote (the initial parameters and the batches). The
model is tests/tools/train_torch_ref.py's RefModel: PyTorch's own nn.TransformerEncoderLayer /
nn.TransformerDecoderLayer with Tern's parameters, F.cross_entropy with label smoothing. An update
is what a PyTorch user's training loop does: zero_grad, forward, loss / ntokens backward,
clip_grad_norm_(1.0), AdamW step at fairseq's inverse_sqrt rate (lr 5e-4, 4000 warm-up updates
from 1e-7, decay 1e-4), as Tern's side. bfloat16: the forward under
torch.autocast("cpu", dtype=torch.bfloat16) (parameters and optimizer in float32).
Every mode prints one line of JSON.
"""
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "tools"))
from train_torch_ref import RefModel, _cfg, inverse_sqrt, st_read  # noqa: E402


def blas_info():
    """torch's build BLAS (torch.__config__.show()) and the BLAS/LAPACK/MKL/oneDNN/OpenMP shared libraries
    this process mapped (real paths). Debian's torch calls the system libblas.so.3 (OpenBLAS or the reference
    BLAS); PyPI's has MKL and oneDNN linked into libtorch_cpu.so (no separate library: the build lines say it)."""
    import torch
    cfg = torch.__config__.show()
    m = re.search(r"BLAS_INFO=(\w+)", cfg)
    libs, runtime = set(), set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            base = os.path.basename(path)
            if ".so" not in path:
                continue
            if re.search(r"blas|lapack|mkl|dnnl", base, re.I):
                libs.add(os.path.realpath(path))
            elif re.search(r"^lib(g|i)omp|^libomp", base):
                runtime.add(os.path.realpath(path))
    libs, runtime = sorted(libs), sorted(runtime)
    openblas = any("openblas" in p for p in libs)
    reference = any(re.search(r"/blas/libblas\.so", p) for p in libs)
    core = "?"
    for p in libs:
        if "openblas" in os.path.basename(p):
            import ctypes
            try:
                f = ctypes.CDLL(p).openblas_get_corename
                f.restype = ctypes.c_char_p
                core = f().decode()
            except (OSError, AttributeError):
                pass
    build = [ln.strip() for ln in cfg.splitlines()
             if re.search(r"Math Kernel|oneAPI|MKL-DNN|oneDNN|LAPACK is enabled|OpenMP", ln)]
    try:
        cap = torch.backends.cpu.get_cpu_capability()
    except AttributeError:
        cap = "?"
    return {"torch": torch.__version__, "openblas_core": core, "mkldnn": torch.backends.mkldnn.is_available(),
            "mkl": torch.backends.mkl.is_available(), "blas_info": "BLAS_INFO=" + (m.group(1) if m else "?"),
            "build": build, "cpu_capability": cap, "blas_libraries": libs, "openmp_libraries": runtime,
            "openblas": openblas and not reference, "torch_threads_default": torch.get_num_threads()}


def load(path, dropout):
    import torch
    tensors, meta = st_read(path)
    cfg = _cfg(meta)
    model = RefModel(cfg, tensors, dropout=dropout)
    K = int(meta["batches"])
    batches = []
    for k in range(K):
        b = [tensors[f"batch/{k}/{w}"] for w in ("src", "tgt_in", "tgt_out")]
        batches.append(b)
    return model, batches


def peak(torch, threads, M, budget, shapes):
    """torch.mm's float32 GFLOP/s (per CPU second and per wall second) on a linear layer's three training
    products at M rows, as bench_train.c's peak mode: forward x @ W.T, input gradient dy @ W, weight
    gradient dy.T @ x, for each N x K."""
    cases, best_cpu, best_wall = [], 0.0, 0.0
    for shape in shapes.split(","):
        N, K = (int(v) for v in shape.split("x"))
        g = torch.Generator().manual_seed(1)
        x, dy = torch.rand(M, K, generator=g) - 0.5, torch.rand(M, N, generator=g) - 0.5
        w = torch.rand(N, K, generator=g) - 0.5
        ops = {"NT": lambda: torch.mm(x, w.t()), "NN": lambda: torch.mm(dy, w), "TN": lambda: torch.mm(dy.t(), x)}
        for name, f in ops.items():
            f()  # warm-up
            reps, t0, c0 = 0, time.perf_counter(), time.process_time()
            while True:
                f()
                reps += 1
                if time.perf_counter() - t0 >= budget:
                    break
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            flop = 2.0 * M * N * K * reps
            gc, gw = flop / cpu * 1e-9, flop / wall * 1e-9
            best_cpu, best_wall = max(best_cpu, gc), max(best_wall, gw)
            cases.append({"N": N, "K": K, "op": name, "gflops_cpu": round(gc, 2), "gflops_wall": round(gw, 2)})
    return {"engine": "torch", "library": torch.__config__.show().split("BLAS_INFO=")[-1].split(",")[0],
            "threads": threads, "rows": M, "cases": cases, "best_gflops_cpu": round(best_cpu, 2),
            "best_gflops_wall": round(best_wall, 2)}


def main():
    import torch
    mode = sys.argv[1]
    if mode == "info":
        print(json.dumps(blas_info()))
        return
    args = dict(zip(sys.argv[3::2], sys.argv[4::2]))
    if mode == "loss":
        model, batches = load(sys.argv[2], 0.0)
        with torch.no_grad():
            loss, nll, ntok = model.loss(*batches[0])
        print(json.dumps({"loss_sum": loss.item(), "nll_sum": nll.item(), "ntokens": ntok}))
        return
    threads = int(args.get("--threads", 1))
    torch.set_num_threads(threads)
    if mode == "peak":
        print(json.dumps(peak(torch, threads, int(args.get("--rows", 2048)), float(args.get("--seconds", 1.0)),
                              args.get("--shapes", "2048x512,512x2048,1536x512,8000x512"))))
        return
    warmup, updates = int(args.get("--warmup", 2)), int(args.get("--updates", 10))
    dropout = float(args.get("--dropout", 0.1))
    prec = args.get("--precision", "float32")
    model, batches = load(sys.argv[2], dropout)
    params = model.unique_params()
    opt = torch.optim.AdamW(params, lr=1e-7, betas=(0.9, 0.98), eps=1e-8, weight_decay=1e-4)
    K = len(batches)
    tokens, t0, first = 0, 0.0, None
    for u in range(warmup + updates):
        if u == warmup:
            t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=False)
        if prec == "bfloat16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss, _, ntok = model.loss(*batches[u % K], with_nll=False)
        else:
            loss, _, ntok = model.loss(*batches[u % K], with_nll=False)
        (loss / ntok).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        for g in opt.param_groups:
            g["lr"] = inverse_sqrt(u, 5e-4, 4000, 1e-7)
        opt.step()
        lv = loss.item()
        if first is None:
            first = lv / ntok
        if u >= warmup:
            tokens += ntok
    sec, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"engine": "torch", "precision": prec, "threads": torch.get_num_threads(), "tokens": tokens,
                      "seconds": sec, "tok_per_s": tokens / sec, "cpu_seconds": cpu, "tok_per_cpu_s": tokens / cpu,
                      "first_loss": first}))


if __name__ == "__main__":
    main()
