#!/usr/bin/env python3
"""Batched beam search: the SDL paper's figures (Iglesias et al., "Accelerating NMT decoding with
batched beam search", Figures 2-3) on Tern: words per minute for beam B x N sentences per batch,
sorted against unsorted batches.

    .venv/bin/python bench/bench_sdl.py [--tern build/tern] [--model models/en-de]
        [--lines 1000] [--beams 4,8,12] [--batch-sizes 1,3,5,7] [--repeat 3]
        [--compute-type int8,float32] [--modes sorted,fixed,unsorted,beams-apart] [--json OUT]

Input: the first --lines lines of Multi30k test_2016_flickr.en (../shared/data/multi30k, all 1,000
by default), reference test_2016_flickr.de. Each configuration is one `tern translate` process, 1
thread (-t 1), `-b B --max-batch-size N` and a token budget and read-ahead that cover the whole
input (--max-batch-tokens 100000: N alone cuts the batches; the whole input is read, and sorted,
at once). N = 1 is "one sentence at a time": its beam is its whole batch. Modes:
  sorted    the default: the input sorted by length, with continuous batching (finished
            sentences' rows refilled by the next ones: docs/benchmarks.md, "Continuous batching")
  fixed     sorted, fixed batches (TERN_CONTINUOUS=0): the paper's sorted batches
  unsorted  --no-sort: batches of N consecutive lines in the input's order (fixed batches)
  beams-apart  sorted (as "sorted"), with --batch-beams off: the decoder step runs each row (each
            hypothesis of each beam) alone, a GEMM of one row per row: the paper's unbatched
            baseline at N = 1 (Transformer models only)
The model's own decoding defaults otherwise (models/en-de: length penalty 1).

Time: from the input being read to the output being written, model loading excluded (tern
translate --progress's last report: target tokens and tokens/s). Words: whitespace tokens of the
detokenized output; words per minute = words / time x 60; target tokens/s as Tern reports them
(pieces, EOS not counted). Configurations are interleaved (all of them once, then again, --repeat
times; each in a fresh process) and each figure is the median of its runs. BLEU (tern score,
sacreBLEU's 13a) of each configuration's output: the outputs of one beam and compute type are
byte-identical across N and modes (checked, and reported), so one BLEU per beam.

Prints one markdown table per compute type (words/min and tokens/s per mode), then the speed-ups
per beam: batched (N = the largest of --batch-sizes) over N = 1 in each mode, sorted (and fixed)
over unsorted at that N, and the batched beams over the beams apart ("sorted" over "beams-apart")
at the smallest and largest N.
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.environ.get("TERN_DATA", os.path.join(ROOT, "..", "shared", "data"))
PROGRESS = re.compile(r"(\d+) sentences, (\d+) target tokens, ([0-9.]+) tokens/s")
MODES = ("sorted", "fixed", "unsorted", "beams-apart")


def int_list(s, name):
    try:
        v = [int(x) for x in s.split(",") if x]
    except ValueError:
        sys.exit(f"bench_sdl: {name} is a comma-separated list of integers, got '{s}'")
    if not v or min(v) < 1:
        sys.exit(f"bench_sdl: {name} needs integers >= 1, got '{s}'")
    return v


def run_one(args, src, out, beam, n, ct, mode):
    """One fresh process: (seconds, target tokens, output bytes)."""
    cmd = [args.tern, "translate", "-m", args.model, "-t", "1", "-b", str(beam), "--compute-type", ct,
           "--max-batch-size", str(n), "--max-batch-tokens", "100000", "--read-ahead", "16", "--progress",
           src, out]
    env = dict(os.environ)
    env.pop("TERN_BATCH_LOG", None)
    if mode == "unsorted":
        cmd.insert(2, "--no-sort")
    if mode == "beams-apart":
        cmd[2:2] = ["--batch-beams", "off"]
    env["TERN_CONTINUOUS"] = "0" if mode == "fixed" else "1"
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if r.returncode:
        sys.exit(f"bench_sdl: {' '.join(cmd)} failed:\n{r.stderr[-1500:]}")
    reports = PROGRESS.findall(r.stderr)
    if not reports:
        sys.exit(f"bench_sdl: no --progress report from {' '.join(cmd)}:\n{r.stderr[-1500:]}")
    _, tokens, tps = reports[-1]
    tokens, tps = int(tokens), float(tps)
    secs = tokens / tps if tps > 0 else wall
    with open(out, "rb") as f:
        return secs, tokens, f.read()


def bleu(args, hyp, ref):
    r = subprocess.run([args.tern, "score", "-r", ref, "-b", hyp], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"bench_sdl: tern score failed:\n{r.stderr[-800:]}")
    return float(r.stdout.split()[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tern", default=os.path.join(ROOT, "build", "tern"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "en-de"))
    ap.add_argument("--lines", type=int, default=1000, help="first lines of test_2016_flickr (default all 1,000)")
    ap.add_argument("--beams", default="4,8,12")
    ap.add_argument("--batch-sizes", default="1,3,5,7", help="sentences per batch N (1: one at a time)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each configuration, interleaved; medians")
    ap.add_argument("--compute-type", default="int8,float32")
    ap.add_argument("--modes", default=",".join(MODES), help="among " + ", ".join(MODES))
    ap.add_argument("--json", metavar="OUT", help="write every run and the medians here")
    args = ap.parse_args()
    beams = int_list(args.beams, "--beams")
    sizes = int_list(args.batch_sizes, "--batch-sizes")
    cts = [c for c in args.compute_type.split(",") if c]
    modes = [m for m in args.modes.split(",") if m]
    if not cts or any(c not in ("int8", "float32") for c in cts):
        sys.exit(f"bench_sdl: --compute-type is a list of int8 and float32, got '{args.compute_type}'")
    if not modes or any(m not in MODES for m in modes):
        sys.exit(f"bench_sdl: --modes is a list among {', '.join(MODES)}, got '{args.modes}'")
    if args.repeat < 1 or args.lines < 1:
        sys.exit("bench_sdl: --repeat and --lines must be >= 1")
    if not os.path.exists(args.tern):
        sys.exit(f"bench_sdl: {args.tern} not found: run make")
    src_path = os.path.join(DATA, "multi30k", "test_2016_flickr.en")
    ref_path = os.path.join(DATA, "multi30k", "test_2016_flickr.de")
    with open(src_path, encoding="utf-8") as f:
        src_lines = f.read().split("\n")[:args.lines]
    with open(ref_path, encoding="utf-8") as f:
        ref_lines = f.read().split("\n")[:args.lines]
    if len(src_lines) < args.lines:
        sys.exit(f"bench_sdl: {src_path} has {len(src_lines)} lines, fewer than --lines {args.lines}")

    configs = [(ct, b, n, m) for ct in cts for b in beams for n in sizes for m in modes]
    runs = {c: [] for c in configs}
    outputs = {}
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src.en")
        ref = os.path.join(tmp, "ref.de")
        with open(src, "w", encoding="utf-8") as f:
            f.write("\n".join(src_lines) + "\n")
        with open(ref, "w", encoding="utf-8") as f:
            f.write("\n".join(ref_lines) + "\n")
        out = os.path.join(tmp, "out.de")
        t_start = time.time()
        for r in range(args.repeat):
            for c in configs:
                secs, tokens, text = run_one(args, src, out, c[1], c[2], c[0], c[3])
                words = len(text.decode("utf-8").split())
                runs[c].append({"seconds": secs, "tokens": tokens, "words": words})
                if c not in outputs:
                    outputs[c] = text
                elif outputs[c] != text:
                    sys.exit(f"bench_sdl: {c}: the output changed between runs")
            print(f"bench_sdl: round {r + 1}/{args.repeat} done ({time.time() - t_start:.0f} s)", file=sys.stderr)
        scores = {}
        same = {}
        for ct in cts:
            for b in beams:
                group = [outputs[c] for c in configs if c[0] == ct and c[1] == b]
                same[(ct, b)] = all(g == group[0] for g in group)
                hyp = os.path.join(tmp, "hyp.de")
                with open(hyp, "wb") as f:
                    f.write(group[0])
                scores[(ct, b)] = bleu(args, hyp, ref)
                if not same[(ct, b)]:  # each configuration's own BLEU then
                    for c in configs:
                        if c[0] == ct and c[1] == b:
                            with open(hyp, "wb") as f:
                                f.write(outputs[c])
                            scores[c] = bleu(args, hyp, ref)

    med = {}
    for c, rs in runs.items():
        secs = statistics.median(x["seconds"] for x in rs)
        med[c] = {"seconds": secs, "words": rs[0]["words"], "tokens": rs[0]["tokens"],
                  "wpm": rs[0]["words"] / secs * 60, "tps": rs[0]["tokens"] / secs}

    print(f"\n{args.lines} lines of Multi30k test_2016_flickr, {os.path.basename(args.model.rstrip('/'))}, 1 thread, "
          f"median of {args.repeat}; {platform.node()}, {time.strftime('%Y-%m-%d %H:%M')}\n")
    for ct in cts:
        print(f"**{ct}** (words/min, target tokens/s)\n")
        head = "| beam | N | " + " | ".join(f"{m} wpm | {m} tok/s" for m in modes) + " | BLEU |"
        print(head)
        print("|" + "---:|" * (2 + 2 * len(modes) + 1))
        for b in beams:
            for n in sizes:
                cells = []
                for m in modes:
                    x = med[(ct, b, n, m)]
                    cells += [f"{x['wpm']:,.0f}", f"{x['tps']:,.0f}"]
                sc = scores.get((ct, b, n, modes[0]), scores[(ct, b)]) if not same[(ct, b)] else scores[(ct, b)]
                print(f"| {b} | {n} | " + " | ".join(cells) + f" | {sc:.2f} |")
        print()
        print("outputs byte-identical across N and modes: " +
              ", ".join(f"beam {b} {'yes' if same[(ct, b)] else 'NO'}" for b in beams) + "\n")
        nb = max(sizes)
        cols, cells_of = [], []
        if 1 in sizes and nb > 1:
            for m in modes:
                cols.append(f"{m}: N={nb} / N=1")
                cells_of.append(lambda b, m=m: med[(ct, b, nb, m)]["wpm"] / med[(ct, b, 1, m)]["wpm"])
        for a in ("sorted", "fixed"):
            if a in modes and "unsorted" in modes and nb > 1:
                cols.append(f"{a} / unsorted, N={nb}")
                cells_of.append(lambda b, a=a: med[(ct, b, nb, a)]["wpm"] / med[(ct, b, nb, "unsorted")]["wpm"])
        if "sorted" in modes and "beams-apart" in modes:
            for n in sorted({min(sizes), nb}):
                cols.append(f"batched / apart beams, N={n}")
                cells_of.append(lambda b, n=n: med[(ct, b, n, "sorted")]["wpm"] / med[(ct, b, n, "beams-apart")]["wpm"])
        if cols:
            print(f"speed-ups ({ct}, words/min ratios)\n")
            print("| beam | " + " | ".join(cols) + " |")
            print("|---:|" + "---:|" * len(cols))
            for b in beams:
                print(f"| {b} | " + " | ".join(f"{f(b):.2f}×" for f in cells_of) + " |")
            print()

    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"lines": args.lines, "repeat": args.repeat, "host": platform.node(),
                       "configs": [{"compute_type": c[0], "beam": c[1], "batch_size": c[2], "mode": c[3],
                                    "runs": runs[c], **med[c]} for c in configs],
                       "bleu": [{"compute_type": ct, "beam": b, "bleu": scores[(ct, b)], "identical": same[(ct, b)]}
                                for ct in cts for b in beams]}, f, indent=1)


if __name__ == "__main__":
    main()
