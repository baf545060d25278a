#!/usr/bin/env python3
"""Speed of two Tern builds, before (A) and after (B) a change, in one run: ratios B / A.

    .venv/bin/python bench/ab.py --a /path/to/old/build --b build [--lines 300] [--rounds 3]

Translation: bench/bench_translate.py's model and input (WORKDIR/tern-bench: the Transformer-base
of 6+6 layers, d 512, ff 2048, 32k vocabulary, and WMT22's en-de source lines as pieces; run
bench_translate.py once first to build them), the first --lines lines, through each build's
`tern translate --pretokenized`, in bench_translate.py's eight configurations (greedy and beam 4,
float32 and int8, 1 and 2 threads). Training: each build's `bench/bench_train run` on
bench_train.py's "recipe" model and batches (WORK/recipe.safetensors; made by bench_train.py or
by `bench_train prepare` here), float32, 1 and 2 threads.

The two builds alternate, A then B, --rounds times per configuration (load on the machine hits both
alike); each side's best (shortest) round counts. Translation ratio = A's seconds / B's seconds
(> 1: B faster), and the two builds' outputs must be identical (compared byte for byte);
training ratio = B's tokens/s / A's.
"""
import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.environ.get("TERN_DATA", os.path.join(ROOT, "..", "shared", "data"))
CONFIGS = [(b, ct, t) for b in (1, 4) for ct in ("float32", "int8") for t in (1, 2)]


def translate(build, model, inp, out, beam, ct, threads):
    cmd = [os.path.join(build, "tern"), "translate", "-m", model, "--pretokenized", "-b", str(beam),
           "--compute-type", ct, "-t", str(threads), "--max-decoding-length", "256", inp, out]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"ab: {' '.join(cmd)} failed:\n{r.stderr[-1500:]}")
    return time.perf_counter() - t0


def train(build, path, threads, updates):
    cmd = [os.path.join(build, "bench", "bench_train"), "run", path, "--threads", str(threads), "--warmup", "2",
           "--updates", str(updates), "--dropout", "0.1", "--precision", "float32"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, GOMP_SPINCOUNT="3000"))
    if r.returncode:
        sys.exit(f"ab: {' '.join(cmd)} failed:\n{r.stderr[-1500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])["tok_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="build folder before (with tern and bench/bench_train)")
    ap.add_argument("--b", required=True, help="build folder after")
    ap.add_argument("--lines", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp", help="bench_translate.py's WORKDIR (default /tmp)")
    ap.add_argument("--train-work", default="/tmp/tern-bench-train", help="bench_train.py's --work")
    ap.add_argument("--updates", type=int, default=10)
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--only", default="", help="run only the translation configurations whose name contains this "
                    "(e.g. int8, 'beam4 float32'); implies --skip-train")
    a = ap.parse_args()
    A, B = os.path.abspath(a.a), os.path.abspath(a.b)
    bench = os.path.join(a.workdir, "tern-bench")
    model, src = os.path.join(bench, "model"), os.path.join(bench, "src.tok")
    if not os.path.isdir(model) or not os.path.exists(src):
        sys.exit(f"ab: {bench} has no model or src.tok: run bench/bench_translate.py once first")
    tmp = tempfile.mkdtemp(prefix="tern-ab-")
    inp = os.path.join(tmp, "in.txt")
    with open(src, encoding="utf-8") as f, open(inp, "w", encoding="utf-8") as g:
        for i, line in enumerate(f):
            if i >= a.lines:
                break
            g.write(line)
    print(f"A = {A}\nB = {B}\n{a.lines} lines, {a.rounds} rounds, best of each; ratio = A seconds / B seconds")
    worst = None
    for beam, ct, t in CONFIGS:
        if a.only and a.only not in f"{'greedy' if beam == 1 else 'beam4'} {ct} {t}t":
            continue
        best = {"A": 1e9, "B": 1e9}
        for _ in range(a.rounds):
            for side, build in (("A", A), ("B", B)):
                best[side] = min(best[side], translate(build, model, inp, os.path.join(tmp, side), beam, ct, t))
        same = filecmp.cmp(os.path.join(tmp, "A"), os.path.join(tmp, "B"), shallow=False)
        ratio = best["A"] / best["B"]
        worst = ratio if worst is None else min(worst, ratio)
        name = f"{'greedy' if beam == 1 else 'beam4'} {ct} {t}t"
        print(f"translate {name:<20} A {best['A']:7.2f} s  B {best['B']:7.2f} s  ratio {ratio:.3f}  "
              f"outputs {'identical' if same else 'DIFFER'}", flush=True)
        if not same:
            sys.exit("ab: the two builds' outputs differ")
    if not a.skip_train and not a.only:
        path = os.path.join(a.train_work, "recipe.safetensors")
        if not os.path.exists(path):
            os.makedirs(a.train_work, exist_ok=True)
            m30k = os.path.join(DATA, "multi30k")
            subprocess.run([os.path.join(B, "bench", "bench_train"), "prepare", "--vocab",
                            os.path.join(ROOT, "models", "en-de"), "--src", os.path.join(m30k, "train.en"), "--tgt",
                            os.path.join(m30k, "train.de"), "--cache", os.path.join(a.train_work, "train.cache"),
                            "--max-tokens", "4096", "--batches", "12", "--layers", "4", "--d-model", "128", "--ff",
                            "512", "--heads", "4", path], check=True, capture_output=True)
        for t in (1, 2):
            best = {"A": 0.0, "B": 0.0}
            for _ in range(a.rounds):
                for side, build in (("A", A), ("B", B)):
                    best[side] = max(best[side], train(build, path, t, a.updates))
            ratio = best["B"] / best["A"]
            worst = min(worst, ratio)
            print(f"train recipe float32 {t}t   A {best['A']:7.0f} tok/s  B {best['B']:7.0f} tok/s  ratio {ratio:.3f}",
                  flush=True)
    print(f"lowest ratio: {worst:.3f}")


if __name__ == "__main__":
    main()
