"""Training speed, Tern vs PyTorch: the same Transformer, the same initial weights, the same batches.

    .venv/bin/python bench/bench_train.py                       # both models, 1 and 2 threads
    bench/setup_torch_pypi.sh && .venv/bin/python bench/bench_train.py --torch both --no-bf16
    .venv/bin/python bench/bench_train.py --configs recipe --threads 2 --reps 5

What it does, in one run:
1. Tern's own data pipeline (build/bench/bench_train prepare: src/train/data.c over Multi30k's
   train set with models/en-de's SentencePiece vocabulary of 8,000 pieces, token-budget batches
   shuffled with seed 1) cuts the first K batches and fairseq's initialization draws the
   parameters; both go into ONE file that both engines read.
2. PyTorch's side (bench/bench_train_torch.py), one or two of them (--torch pypi|debian|both):
   "torch-pypi" is PyPI's torch, what `pip install torch` gives its users (MKL and oneDNN linked in;
   bench/setup_torch_pypi.sh installs a pinned version into .venv-torch-pypi, git-ignored, never
   needed by the build, the tests or CI); "torch-debian" is Debian's python3-torch under
   /usr/bin/python3. Each side reports what it computes with: torch.__config__.show()'s BLAS_INFO
   and MKL / oneDNN / OpenMP lines, and the BLAS/MKL/oneDNN/OpenMP libraries the process actually
   mapped (/proc/self/maps). The Debian side must be on OpenBLAS (Debian's torch on the reference
   BLAS runs about 13 times slower: the bench FAILS then). OpenBLAS 0.3.21 does not know every
   recent CPU and then runs its generic "Prescott" (SSE3) kernels, 2-4 times slower than its
   AVX-512 ones: when the core it detects is not one with the CPU's widest vector unit,
   OPENBLAS_CORETYPE is set for the Debian side (SkylakeX, or Cooperlake where the CPU has
   AVX512-BF16), and printed.
3. The same computation: the first batch's loss sum without dropout, from Tern and from each torch
   side, printed, must agree within 1e-4 relative.
4. Timing: for each configuration and thread count, REPS rounds of tern float32, each torch side
   float32, then the same in bfloat16 (interleaved: load on the machine hits both alike), each a fresh
   process doing W warm-up updates (not timed) then N timed updates: forward + backward +
   clipping at norm 1 + AdamW at fairseq's inverse_sqrt rate, dropout 0.1 (embeddings, sublayer
   outputs, attention weights, activations: PyTorch's layers' own dropout sites). Tokens/s =
   non-padding target tokens of the timed updates / their wall time; the table shows the median
   over the rounds and the ratios tern / torch-pypi and tern / torch-debian. Threads: torch.set_num_threads(t) and
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


def describe(label, info):
    """What a torch side computes with: its build's BLAS/MKL/oneDNN lines and the libraries it mapped."""
    print(f"[{label}] PyTorch {info['torch']}, {info['blas_info']}, MKL {'yes' if info.get('mkl') else 'no'}, "
          f"oneDNN {'yes' if info.get('mkldnn') else 'no'}, CPU capability {info.get('cpu_capability', '?')}")
    for ln in info.get("build", []):
        print(f"[{label}]   build: {ln.lstrip('- ')}")
    print(f"[{label}]   BLAS/MKL/oneDNN libraries mapped: {', '.join(info['blas_libraries']) or '(none: linked into libtorch_cpu)'}")
    print(f"[{label}]   OpenMP runtime mapped: {', '.join(info.get('openmp_libraries', [])) or '(none)'}")


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
    ap.add_argument("--torch", choices=("pypi", "debian", "both"), default=None,
                    help="which PyTorch: PyPI's (MKL + oneDNN, in .venv-torch-pypi: bench/setup_torch_pypi.sh), "
                         "Debian's python3-torch (OpenBLAS), or both (default: both when the PyPI venv exists, "
                         "else debian)")
    ap.add_argument("--torch-python", default=os.environ.get("TERN_TORCH_PYTHON", "/usr/bin/python3"),
                    help="the Python with Debian's torch")
    ap.add_argument("--torch-pypi-python", default=os.environ.get(
        "TERN_TORCH_PYPI_PYTHON", os.path.join(ROOT, ".venv-torch-pypi", "bin", "python")),
        help="the Python with PyPI's torch")
    ap.add_argument("--data", default=os.path.join(os.environ.get("TERN_DATA", os.path.join(ROOT, "..", "shared",
                                                                                         "data")), "multi30k"))
    ap.add_argument("--json", default="", help="also write the results here")
    ap.add_argument("--isa-cap", choices=("AVX2", "AVX512_CORE"),
                    help="cap every side at this instruction set (the paths of a smaller CPU on this one)")
    ap.add_argument("--peak", action="store_true",
                    help="also measure each library's float32 GEMM peak (bench_train peak) and print the GEMM work table")
    a = ap.parse_args()
    drv = os.path.join(ROOT, a.build, "bench", "bench_train")
    script = os.path.join(ROOT, "bench", "bench_train_torch.py")
    if not os.path.exists(drv):
        sys.exit(f"bench_train: {drv} is missing: run make")
    have_pypi = os.path.exists(a.torch_pypi_python)
    which = a.torch
    if which is None:
        which = "both" if have_pypi else "debian"
        if not have_pypi:
            print(f"bench_train: no PyPI torch ({a.torch_pypi_python} is missing): comparing with Debian's torch only; "
                  "bench/setup_torch_pypi.sh installs PyPI's (several GB of wheels) for --torch both|pypi")
    if which in ("pypi", "both") and not have_pypi:
        sys.exit(f"bench_train: --torch {which}: {a.torch_pypi_python} is missing: run bench/setup_torch_pypi.sh")
    os.makedirs(a.work, exist_ok=True)
    env = dict(os.environ)
    if "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env:
        env["GOMP_SPINCOUNT"] = "3000"
    if a.isa_cap:
        # every library of every side at one instruction set: Tern's dispatch and oneDNN (Tern, both torch
        # sides), MKL and ATen's own kernels (PyPI's torch), OpenBLAS's core (Debian's torch, below)
        env.update({"TERN_MAX_CPU_ISA": a.isa_cap, "ONEDNN_MAX_CPU_ISA": a.isa_cap,
                    "MKL_ENABLE_INSTRUCTIONS": "AVX2" if a.isa_cap == "AVX2" else "AVX512",
                    "ATEN_CPU_CAPABILITY": "avx2" if a.isa_cap == "AVX2" else "avx512"})
        print("capped at " + a.isa_cap + ": " + " ".join(f"{k}={env[k]}" for k in (
            "TERN_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")) +
            (" OPENBLAS_CORETYPE=Haswell" if a.isa_cap == "AVX2" else ""))

    # the torch sides: (label, command prefix, OpenBLAS core type to set)
    sides, infos = [], {}
    if which in ("pypi", "both"):
        tpy = [a.torch_pypi_python, script]
        info, _ = run_json(tpy + ["info"], torch_env(env, 1))
        describe("torch-pypi", info)
        sides.append(("torch-pypi", tpy, None))
        infos["torch-pypi"] = info
    if which in ("debian", "both"):
        tpy = [a.torch_python, script]
        info, _ = run_json(tpy + ["info"], torch_env(env, 1))
        flags = cpu_flags()
        best = "Cooperlake" if "avx512_bf16" in flags else "SkylakeX" if "avx512f" in flags else \
            "Haswell" if "avx2" in flags else None
        coretype = os.environ.get("OPENBLAS_CORETYPE") or ("Haswell" if a.isa_cap == "AVX2" else None)
        if not info["openblas"]:
            sys.exit("bench_train: Debian's PyTorch is NOT on OpenBLAS (BLAS libraries mapped: "
                     f"{info['blas_libraries']}); install libopenblas0-pthread (scripts/setup.sh): the reference "
                     "BLAS makes any ratio meaningless")
        detected = info.get("openblas_core", "?")
        if not coretype and best and detected in ("Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
                                                    "Sandybridge", "Haswell", "Zen", "SkylakeX") and detected != best:
            coretype = best
        if coretype:
            info, _ = run_json(tpy + ["info"], torch_env(env, 1, coretype))
        describe("torch-debian", info)
        print(f"[torch-debian]   OpenBLAS core: detected {detected}" +
              (f", set OPENBLAS_CORETYPE={coretype} -> {info['openblas_core']}" if coretype else ""))
        sides.append(("torch-debian", tpy, coretype))
        infos["torch-debian"] = info
    labels = [s[0] for s in sides]
    print(f"threads: torch.set_num_threads(t) + OPENBLAS_NUM_THREADS=t / Tern kernels_set_num_threads(t); "
          f"GOMP_SPINCOUNT={env.get('GOMP_SPINCOUNT', '(unset)')} OMP_WAIT_POLICY={env.get('OMP_WAIT_POLICY', '(unset)')}")
    print(f"CPU: {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at the start")

    results = []
    precs = ["float32"] if a.no_bf16 else ["float32", "bfloat16"]
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
        print(f"\n[{name}] {c['layers']}+{c['layers']} layers, d {c['d']}, ff {c['ff']}, {c['heads']} heads, "
              f"max-tokens {c['max_tokens']}, {c['batches']} batches; first batch ({lt['ntokens']} target tokens), "
              f"dropout off: loss sum tern {lt['loss_sum']:.6f}")
        for label, tpy, coretype in sides:
            lp, _ = run_json(tpy + ["loss", path], torch_env(env, 1, coretype))
            rel = abs(lt["loss_sum"] - lp["loss_sum"]) / abs(lp["loss_sum"])
            print(f"[{name}]   {label} {lp['loss_sum']:.6f} (rel diff {rel:.1e})")
            if rel > 1e-4 or lt["ntokens"] != lp["ntokens"]:
                sys.exit(f"bench_train: Tern and {label} do not compute the same loss: the comparison would be "
                         "meaningless")
        upd = a.updates or c["updates"]
        for t in [int(x) for x in a.threads.split(",")]:
            runs = {}
            for rep in range(a.reps):
                for prec in precs:
                    for eng, tpy, coretype in [("tern", None, None)] + sides:
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
                        runs.setdefault(key + ("cpu",), []).append(r.get("tok_per_cpu_s"))
                        if r.get("gemm_gflop"):
                            runs.setdefault(("gemm_per_tok", prec), []).append(r["gemm_gflop"] / r["tokens"])
                        print(f"  {name} t={t} rep {rep + 1}: {eng} {prec} {r['tok_per_s']:.0f} tok/s "
                              f"({r['tokens']} tokens in {r['seconds']:.2f} s; {r.get('tok_per_cpu_s', 0):.0f} tok per "
                              f"CPU s)", flush=True)
            row = dict(config=name, threads=t)
            g = runs.get(("gemm_per_tok", "float32"))
            row["gemm_gflop_per_tok"] = statistics.median(g) if g else None
            if a.peak:
                row["peak"] = {"tern": run_json([drv, "peak", "--threads", str(t), "--seconds", "0.5"], env)[0]}
                for label, tpy, coretype in sides:
                    row["peak"][label] = run_json(tpy + ["peak", "-", "--threads", str(t), "--seconds", "0.5"],
                                                  torch_env(env, t, coretype))[0]
            for prec in precs:
                for eng in ["tern"] + labels:
                    v = runs.get((eng, prec))
                    row[f"{eng}_{prec}"] = statistics.median(v) if v else None
                    row[f"{eng}_{prec}_all"] = v
                    vc = runs.get((eng, prec, "cpu"))
                    row[f"{eng}_{prec}_cpu"] = statistics.median(vc) if vc and None not in vc else None
            results.append(row)

    fmt = lambda v: "not built" if v is None else f"{v:.0f}"
    ratio = lambda x, y: f"{x / y:.2f}" if x and y else "-"
    for prec in precs:
        print(f"\nTraining tokens/s, {prec} (target tokens, median of {a.reps} interleaved runs; ratio = tern / torch, "
              f"per round in brackets); load average {os.getloadavg()[0]:.2f} at the end")
        print("| model | threads | Tern | " + " | ".join(f"{lb} | tern / {lb} (per round)" for lb in labels) + " |")
        print("|---|---|---|" + "---|---|" * len(labels))
        for r in results:
            cells = []
            for lb in labels:
                tv, pv = r[f"tern_{prec}"], r[f"{lb}_{prec}"]
                per = " ".join(ratio(x, y) for x, y in zip(r[f"tern_{prec}_all"] or [], r[f"{lb}_{prec}_all"] or []))
                cells += [fmt(pv), f"**{ratio(tv, pv)}** ({per})"]
            print(f"| {r['config']} | {r['threads']} | {fmt(r[f'tern_{prec}'])} | " + " | ".join(cells) + " |")
        print(f"\nThe same, by CPU time: target tokens per CPU second of the timed updates (all of a process's threads; "
              f"median): the work each engine does, whatever share of the cores it got on a busy machine")
        print("| model | threads | Tern | " + " | ".join(f"{lb} | tern / {lb}" for lb in labels) + " |")
        print("|---|---|---|" + "---|---|" * len(labels))
        for r in results:
            tv = r[f"tern_{prec}_cpu"]
            cells = []
            for lb in labels:
                pv = r[f"{lb}_{prec}_cpu"]
                cells += [fmt(pv), ratio(tv, pv)]
            print(f"| {r['config']} | {r['threads']} | {fmt(tv)} | " + " | ".join(cells) + " |")
    if a.peak and "float32" in precs:
        print("\nGEMM work (float32): the GEMM floating-point operations of Tern's timed updates (every gemm_f32 "
              "product, 2·M·N·K) per target token, times each engine's target tokens per CPU second = the GEMM "
              "GFLOP each engine does per CPU second (the same model and batches: the same products), beside the "
              "float32 GEMM peak of each engine's library measured in the same run (`bench_train peak`: a linear "
              "layer's three training products at 2,048 rows, d 512 / ff 2048 / V 8000, best GFLOP per CPU second). "
              "'bound' = the best library peak / the torch side's GEMM GFLOP per CPU second: the tern / torch ratio an "
              "engine would reach if it ran every GEMM at that peak and did nothing else.")
        print("| model | threads | GEMM GFLOP / target token | Tern GFLOP per CPU s | oneDNN peak | share | " +
              " | ".join(f"{lb} GFLOP per CPU s | {lb} peak | share | bound tern / {lb}" for lb in labels) + " |")
        print("|---|---|---|---|---|---|" + "---|---|---|---|" * len(labels))
        for r in results:
            gpt, pk = r.get("gemm_gflop_per_tok"), r.get("peak", {})
            if not gpt or not pk:
                continue
            tp = pk["tern"]["best_gflops_cpu"]
            tg = gpt * r["tern_float32_cpu"]
            best = max([tp] + [pk[lb]["best_gflops_cpu"] for lb in labels])
            cells = [f"{gpt:.3f}", f"{tg:.1f}", f"{tp:.1f}", f"{tg / tp:.0%}"]
            for lb in labels:
                v = r.get(f"{lb}_float32_cpu")
                pg = gpt * v if v else None
                pp = pk[lb]["best_gflops_cpu"]
                cells += [f"{pg:.1f}" if pg else "-", f"{pp:.1f} ({pk[lb]['library']})", f"{pg / pp:.0%}" if pg else "-",
                          f"{best / pg:.2f}" if pg else "-"]
            print(f"| {r['config']} | {r['threads']} | " + " | ".join(cells) + " |")
    if any(r.get("tern_bfloat16", 0) is None for r in results):
        print("tern bf16: not built (this binary has no TERN_HAVE_BF16_TRAIN)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": infos, "results": results, "time": time.time()}, f, indent=1)


if __name__ == "__main__":
    main()
