"""PyTorch's side of bench/bench_train.py (run under /usr/bin/python3: Debian's python3-torch).

    python3 bench_train_torch.py info
    python3 bench_train_torch.py loss IN.safetensors
    python3 bench_train_torch.py run IN.safetensors --threads T --warmup W --updates N --dropout P
                                    [--precision float32|bfloat16]

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
    """torch's build BLAS and the BLAS/LAPACK shared libraries this process mapped (real paths)."""
    import torch
    cfg = torch.__config__.show()
    m = re.search(r"BLAS_INFO=(\w+)", cfg)
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if ".so" in path and re.search(r"blas|lapack", os.path.basename(path), re.I):
                libs.add(os.path.realpath(path))
    libs = sorted(libs)
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
    return {"torch": torch.__version__, "openblas_core": core, "mkldnn": torch.backends.mkldnn.is_available(), "blas_info": "BLAS_INFO=" + (m.group(1) if m else "?"),
            "blas_libraries": libs, "openblas": openblas and not reference,
            "torch_threads_default": torch.get_num_threads()}


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
            t0 = time.perf_counter()
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
    sec = time.perf_counter() - t0
    print(json.dumps({"engine": "torch", "precision": prec, "threads": torch.get_num_threads(), "tokens": tokens,
                      "seconds": sec, "tok_per_s": tokens / sec, "first_loss": first}))


if __name__ == "__main__":
    main()
