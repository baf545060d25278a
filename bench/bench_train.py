"""Training speed, Tern vs PyTorch: the same Transformer, the same initial weights, the same batches.

    .venv/bin/python bench/bench_train.py                       # both models, 1 and 2 threads
    .venv/bin/python bench/bench_train.py --configs recipe --threads 2 --reps 5

What it does, in one run:
1. Tern's own data pipeline (build/bench/bench_train prepare: src/train/data.c over Multi30k's
   train set with models/en-de's SentencePiece vocabulary of 8,000 pieces, token-budget batches
   shuffled with seed 1) cuts the first K batches and fairseq's initialization draws the
   parameters; both go into ONE file that both engines read.
2. PyTorch's side (bench/bench_train_torch.py, under Debian's python3-torch) reports its BLAS:
   torch.__config__.show()'s BLAS_INFO and the BLAS libraries the process actually mapped
   (/proc/self/maps); the bench FAILS unless that is OpenBLAS (Debian's torch on the reference
   BLAS runs about 13 times slower). OpenBLAS 0.3.21 does not know every recent CPU and then
   runs its generic "Prescott" (SSE3) kernels, 2-4 times slower than its AVX-512 ones: when the
   core it detects is not one with the CPU's widest vector unit, OPENBLAS_CORETYPE is set for
   the PyTorch side (SkylakeX, or Cooperlake where the CPU has AVX512-BF16), and printed.
3. The same computation: the first batch's loss sum without dropout, from each engine, printed,
   must agree within 1e-4 relative.
4. Timing: for each configuration and thread count, REPS rounds of tern float32, torch float32,
   tern bfloat16, torch bfloat16 (interleaved: load on the machine hits both alike), each a fresh
   process doing W warm-up updates (not timed) then N timed updates: forward + backward +
   clipping at norm 1 + AdamW at fairseq's inverse_sqrt rate, dropout 0.1 (embeddings, sublayer
   outputs, attention weights, activations: PyTorch's layers' own dropout sites). Tokens/s =
   non-padding target tokens of the timed updates / their wall time; the table shows the median
   over the rounds and the ratio tern / torch. Threads: torch.set_num_threads(t) and
   OPENBLAS_NUM_THREADS=t on the PyTorch side, kernels_set_num_threads(t) on Tern's.
   Both processes run with GOMP_SPINCOUNT=3000 (Tern's CLI default; libgomp's spinning waits
   collapse on cores shared with other work) unless the environment sets OMP_WAIT_POLICY or
   GOMP_SPINCOUNT.

Configurations: "recipe" is recipes/multi30k-en-de.sh's model (4+4 layers, d 128, ff 512, 4 heads,
pre-norm, ReLU, shared+tied embeddings over the joint 8,000-piece vocabulary, max-tokens 4096);
"big" is Transformer-base's shape (6+6 layers, d 512, ff 2048, 8 heads, same vocabulary,
max-tokens 2048).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = {
    "recipe": dict(layers=4, d=128, ff=512, heads=4, max_tokens=4096, batches=12, warmup=2, updates=10),
    "big": dict(layers=6, d=512, ff=2048, heads=8, max_tokens=2048, batches=6, warmup=1, updates=3),
}


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def torch_env(base, threads=None, coretype=None):
    env = dict(base)
    if threads is not None:
        env["OPENBLAS_NUM_THREADS"] = str(threads)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    return env


def run_json(cmd, env, timeout=1800):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    line = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    if r.returncode != 0 and not line.startswith("{"):
        sys.exit(f"bench_train: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return json.loads(line), r.returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="recipe,big")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--no-bf16", action="store_true", help="float32 only")
    ap.add_argument("--updates", type=int, default=0, help="timed updates per run (0: the configuration's)")
    ap.add_argument("--work", default="/tmp/tern-bench-train")
    ap.add_argument("--build", default=os.environ.get("TERN_BUILD", "build"))
    ap.add_argument("--torch-python", default=os.environ.get("TERN_TORCH_PYTHON", "/usr/bin/python3"))
    ap.add_argument("--data", default=os.path.join(os.environ.get("TERN_DATA", os.path.join(ROOT, "..", "shared",
                                                                                         "data")), "multi30k"))
    ap.add_argument("--json", default="", help="also write the results here")
    a = ap.parse_args()
    drv = os.path.join(ROOT, a.build, "bench", "bench_train")
    tpy = [a.torch_python, os.path.join(ROOT, "bench", "bench_train_torch.py")]
    if not os.path.exists(drv):
        sys.exit(f"bench_train: {drv} is missing: run make")
    os.makedirs(a.work, exist_ok=True)
    env = dict(os.environ)
    if "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env:
        env["GOMP_SPINCOUNT"] = "3000"

    # PyTorch's BLAS
    info, _ = run_json(tpy + ["info"], torch_env(env, 1))
    flags = cpu_flags()
    best = "Cooperlake" if "avx512_bf16" in flags else "SkylakeX" if "avx512f" in flags else \
        "Haswell" if "avx2" in flags else None
    coretype = os.environ.get("OPENBLAS_CORETYPE")
    if not info["openblas"]:
        sys.exit("bench_train: PyTorch is NOT on OpenBLAS (BLAS libraries mapped: "
                 f"{info['blas_libraries']}); install libopenblas0-pthread (scripts/setup.sh): the reference "
                 "BLAS makes any ratio meaningless")
    detected = info.get("openblas_core", "?")
    if not coretype and best and detected in ("Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
                                                "Sandybridge", "Haswell", "Zen", "SkylakeX") and detected != best:
        coretype = best
    if coretype:
        info, _ = run_json(tpy + ["info"], torch_env(env, 1, coretype))
    print(f"PyTorch {info['torch']}, {info['blas_info']}, BLAS libraries mapped: {', '.join(info['blas_libraries'])}")
    print(f"OpenBLAS core: detected {detected}" + (f", set OPENBLAS_CORETYPE={coretype} -> {info['openblas_core']}"
                                                    if coretype else ""))
    print(f"threads: torch.set_num_threads(t) + OPENBLAS_NUM_THREADS=t / Tern kernels_set_num_threads(t); "
          f"GOMP_SPINCOUNT={env.get('GOMP_SPINCOUNT', '(unset)')} OMP_WAIT_POLICY={env.get('OMP_WAIT_POLICY', '(unset)')}")
    print(f"CPU: {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at the start")

    results = []
    for name in a.configs.split(","):
        c = CONFIGS[name]
        path = os.path.join(a.work, f"{name}.safetensors")
        if not os.path.exists(path):
            out, _ = run_json([drv, "prepare", "--vocab", os.path.join(ROOT, "models", "en-de"),
                               "--src", os.path.join(a.data, "train.en"), "--tgt", os.path.join(a.data, "train.de"),
                               "--cache", os.path.join(a.work, "train.cache"), "--max-tokens", str(c["max_tokens"]),
                               "--batches", str(c["batches"]), "--layers", str(c["layers"]), "--d-model", str(c["d"]),
                               "--ff", str(c["ff"]), "--heads", str(c["heads"]), path], env)
        lt, _ = run_json([drv, "loss", path], env)
        lp, _ = run_json(tpy + ["loss", path], torch_env(env, 1, coretype))
        rel = abs(lt["loss_sum"] - lp["loss_sum"]) / abs(lp["loss_sum"])
        print(f"\n[{name}] {c['layers']}+{c['layers']} layers, d {c['d']}, ff {c['ff']}, {c['heads']} heads, "
              f"max-tokens {c['max_tokens']}, {c['batches']} batches; first batch ({lt['ntokens']} target tokens), "
              f"dropout off: loss sum tern {lt['loss_sum']:.6f}, torch {lp['loss_sum']:.6f} (rel diff {rel:.1e})")
        if rel > 1e-4 or lt["ntokens"] != lp["ntokens"]:
            sys.exit("bench_train: the engines do not compute the same loss: the comparison would be meaningless")
        upd = a.updates or c["updates"]
        for t in [int(x) for x in a.threads.split(",")]:
            runs = {}
            precs = ["float32"] if a.no_bf16 else ["float32", "bfloat16"]
            for rep in range(a.reps):
                for prec in precs:
                    for eng in ("tern", "torch"):
                        args = ["run", path, "--threads", str(t), "--warmup", str(c["warmup"]), "--updates", str(upd),
                                "--dropout", str(a.dropout), "--precision", prec]
                        if eng == "tern":
                            r, rc = run_json([drv] + args, env)
                        else:
                            r, rc = run_json(tpy + args, torch_env(env, t, coretype))
                        key = (eng, prec)
                        if "error" in r:
                            runs[key] = None
                            continue
                        runs.setdefault(key, []).append(r["tok_per_s"])
                        print(f"  {name} t={t} rep {rep + 1}: {eng} {prec} {r['tok_per_s']:.0f} tok/s "
                              f"({r['tokens']} tokens in {r['seconds']:.2f} s)", flush=True)
            row = dict(config=name, threads=t)
            for prec in precs:
                for eng in ("tern", "torch"):
                    v = runs.get((eng, prec))
                    row[f"{eng}_{prec}"] = statistics.median(v) if v else None
                    row[f"{eng}_{prec}_all"] = v
            results.append(row)

    print(f"\nTraining tokens/s (target tokens, median of {a.reps} interleaved runs; ratio = tern / torch); "
          f"load average {os.getloadavg()[0]:.2f} at the end")
    print("| model | threads | Tern f32 | PyTorch f32 | ratio f32 | ratio per round | Tern bf16 | PyTorch bf16 | ratio bf16 |")
    print("|---|---|---|---|---|---|---|---|---|")
    fmt = lambda v: "not built" if v is None else f"{v:.0f}"
    for r in results:
        rf = r["tern_float32"] / r["torch_float32"]
        tb, pb = r.get("tern_bfloat16"), r.get("torch_bfloat16")
        rb = f"{tb / pb:.2f}" if tb and pb else "-"
        pairs = [f"{x / y:.2f}" for x, y in zip(r["tern_float32_all"], r["torch_float32_all"])]
        print(f"| {r['config']} | {r['threads']} | {r['tern_float32']:.0f} | {r['torch_float32']:.0f} | {rf:.2f} | "
              f"{' '.join(pairs)} | "
              f"{fmt(tb) if 'tern_bfloat16' in r else '-'} | {fmt(pb) if 'torch_bfloat16' in r else '-'} | {rb} |")
    if any(r.get("tern_bfloat16", 0) is None for r in results):
        print("tern bf16: not built (this binary has no TERN_HAVE_BF16_TRAIN)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"blas": info, "coretype": coretype, "results": results, "time": time.time()}, f, indent=1)


if __name__ == "__main__":
    main()
