#!/usr/bin/env python3
"""Decode speed of each model family beside the Transformer (issue 10, point 5).

    .venv/bin/python bench/bench_families.py --model transformer=DIR --model gru=DIR \\
        [--model gnmt=DIR ...] [--int8-model LABEL=DIR] [--input FILE] [--limit N] \\
        [--compute float32,int8] [--threads 1,2] [--search greedy,beam5] [--rounds 2] \\
        [--baseline transformer] [--workdir /tmp] [--tern build/tern] [--json FILE]

Each --model is LABEL=DIR: a float32 model directory that `tern translate -m` accepts (any family;
the label names the row, `tern info` gives the family). The int8 rows run the same directory with
`--compute-type int8` (weights quantized per output row at load), unless --int8-model LABEL=DIR
gives a directory with int8 weights stored (run as stored). On models/en-de (the shipped int8 of
/work/runs/seed2/avg) and /work/runs/gru1/int8 (of gru1/averaged) both ways translate
identically (checked on 50 lines of test_2016_flickr, beam 5, one thread).

What it runs: the input (default the 1,000 lines of Multi30k test_2016_flickr.en; --limit N: the
first N) is cut into SentencePiece pieces with each model's own sentencepiece.model (`spm_encode`,
cached under WORKDIR/tern-bench-families/), and every model x compute type x threads x search
(greedy = beam 1, beamN) runs as one `tern translate --pretokenized -b B -t T -w 1 --progress`
process under /usr/bin/time (peak RSS of that process), with tern's default batching (4,096-token
batches, read-ahead 16). Each round runs every configuration for every model, the models of a
configuration one after the other, their order reversed from one configuration and one round to
the next, so a shared machine's load falls on all alike; --rounds R (default 2) repeats that and
the table gives medians. Time: tern's --progress report (from the input being read to the output
being written; model loading excluded). Target tokens: the pieces of the output file (whitespace-
separated, end of sentence not counted), as bench/bench_translate.py counts them; the run fails
unless that count equals tern's own report and the output has one line per input line. The ratio
is the family's target tokens/s over the baseline's (--baseline, default the first --model) in the
same configuration and the same round; the table gives the median over rounds. Families write
outputs of different lengths: sentences/s is beside tokens/s for that reason.

Also printed, per model: the parameters (floating-point values stored in model.safetensors, a tied
or shared tensor counted once), the weight bytes as run (`tern info --compute-type C`, which counts
a tensor used twice twice, packed copies included) and, as a profile-free account of the cost of a
decoder step, the multiply-adds of the decoder's weight matrices per target token (every 2-D
decoder tensor applied at each step, the output projection included; not the embedding lookups,
not the matrices applied once per batch to the encoder output, not the attention over the source
or the previous tokens, whose cost grows with their lengths).
"""
import argparse
import hashlib
import json
import math
import os
import platform
import re
import statistics
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.environ.get("TERN_DATA", os.path.join(ROOT, "..", "shared", "data"))
DEFAULT_INPUT = os.path.join(DATA, "multi30k", "test_2016_flickr.en")
FLAGS_SHOWN = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "avx512_bf16",
               "amx_tile", "amx_int8"]

# Decoder matrices that are NOT applied once per target token: the embeddings (a lookup) and the
# projections of the encoder output computed once per batch (Transformer: each cross-attention's
# fused key/value linear_1; GRU: the attention keys and the initial state; GNMT: the keys).
PER_BATCH = [r"embeddings", r"^decoder/layer_\d+/attention/linear_1/", r"^decoder/attention/key/",
             r"^decoder/init/", r"^decoder/attention/linear_key/"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def die(msg):
    raise SystemExit(f"bench_families: {msg}")


# ---------------------------------------------------------------- models

def safetensors_header(model_dir):
    path = os.path.join(model_dir, "model.safetensors")
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def weight_stats(model_dir):
    """(parameters, decoder weight multiply-adds per target token, whether int8 weights are stored)
    from model.safetensors' header."""
    h = safetensors_header(model_dir)
    meta = h.pop("__metadata__", {}) or {}
    params = sum(math.prod(v["shape"]) for k, v in h.items() if v["dtype"] in ("F32", "F16", "BF16", "I8")
                 and len(v["shape"]) >= 1 and not k.endswith("_scale"))  # not config scalars, int8 scales
    shapes = {k: v["shape"] for k, v in h.items()}
    for k, v in meta.items():  # "alias:NAME": "TARGET" (a tied or shared tensor stored once)
        if k.startswith("alias:") and v in shapes:
            shapes[k[len("alias:"):]] = shapes[v]
    macs = 0
    for name, shape in shapes.items():
        if not name.startswith("decoder/") or len(shape) != 2 or name.endswith("_scale"):
            continue
        if any(re.search(p, name) for p in PER_BATCH):
            continue
        macs += shape[0] * shape[1]
    stored_int8 = any(v["dtype"] == "I8" and len(v["shape"]) >= 1 for v in h.values())
    return params, macs, stored_int8


def tern_info(tern, model_dir, compute):
    r = subprocess.run([tern, "info", "-m", model_dir, "--compute-type", compute], capture_output=True,
                       text=True)
    if r.returncode != 0:
        die(f"tern info -m {model_dir} failed:\n{r.stderr[-2000:]}")
    info = {}
    for line in r.stdout.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            info[k.strip()] = v.strip()
    for k in ("family", "weight_bytes", "compute"):
        if k not in info:
            die(f"tern info -m {model_dir}: no '{k}' line in:\n{r.stdout}")
    return info


def file_md5(path):
    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


def encode_input(work, model_dir, lines):
    """The input lines as the model's SentencePiece pieces (cached by model and input)."""
    spm = os.path.join(model_dir, "sentencepiece.model")
    if not os.path.exists(spm):
        die(f"{model_dir} has no sentencepiece.model (the bench feeds pieces: --pretokenized)")
    key = hashlib.md5((file_md5(spm) + "\n" + "\n".join(lines)).encode()).hexdigest()[:16]
    path = os.path.join(work, f"input-{key}.tok")
    if not os.path.exists(path):
        r = subprocess.run(["spm_encode", f"--model={spm}", "--output_format=piece"],
                           input="".join(l + "\n" for l in lines), capture_output=True, text=True)
        if r.returncode != 0:
            die(f"spm_encode --model={spm} failed:\n{r.stderr[-2000:]}")
        tok = r.stdout.split("\n")[:-1]
        if len(tok) != len(lines):
            die(f"spm_encode gave {len(tok)} lines for {len(lines)}")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write("".join(t + "\n" for t in tok))
        os.replace(path + ".tmp", path)
    return path


# ---------------------------------------------------------------- runs

def parse_search(name):
    if name == "greedy":
        return 1
    m = re.fullmatch(r"beam(\d+)", name)
    if not m or int(m.group(1)) < 1:
        die(f"bad search '{name}' (greedy, beam4, beam5, ...)")
    return int(m.group(1))


def clean_env():
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.pop(k, None)
    return env


def run_one(args, model_dir, compute, threads, search, inp, out, n_lines):
    """One tern translate process: dict(seconds, tokens, mb, wall, lines)."""
    rss = out + ".rss"
    cmd = [args.tern, "translate", "-m", model_dir, "--pretokenized", "-b", str(parse_search(search)),
           "-w", "1", "-t", str(threads), "--compute-type", compute, "--progress"] + args.tern_args + [inp, out]
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss] + cmd, capture_output=True, text=True,
                       env=clean_env())
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        die(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    with open(rss) as f:
        mb = int(f.read().split()[-1]) / 1024.0
    reports = re.findall(r"(\d+) sentences, (\d+) target tokens, ([\d.]+) tokens/s", r.stderr)
    if not reports:
        die(f"no progress report from {' '.join(cmd)}:\n{r.stderr[-2000:]}")
    sents, toks, tps = int(reports[-1][0]), int(reports[-1][1]), float(reports[-1][2])
    with open(out, encoding="utf-8") as f:
        text = f.read()
    outs = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
    if len(outs) != n_lines or sents != n_lines:
        die(f"{' '.join(cmd)}: {len(outs)} output lines (tern reports {sents} sentences) for {n_lines} "
            f"input lines")
    counted = sum(len(l.split()) for l in outs)
    if counted != toks:
        die(f"{' '.join(cmd)}: {counted} pieces in {out} but tern reports {toks} target tokens")
    if tps <= 0:
        die(f"{' '.join(cmd)}: tern reports {tps} tokens/s")
    return dict(seconds=toks / tps, tokens=toks, tps=tps, mb=mb, wall=wall, digest=hashlib.md5(text.encode()).hexdigest())


def machine():
    cpu, flags = platform.processor(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and cpu in ("", platform.processor()):
                    cpu = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    shown = " ".join(f for f in FLAGS_SHOWN if f in flags) or "none of " + " ".join(FLAGS_SHOWN)
    return f"{cpu}, {os.cpu_count()} cores; flags: {shown}"


def load_average():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def labelled(values, what):
    out = {}
    for v in values:
        if "=" not in v:
            die(f"{what} wants LABEL=DIR, got '{v}'")
        label, d = v.split("=", 1)
        if not label or label in out:
            die(f"{what}: empty or repeated label '{label}'")
        if not os.path.isdir(d):
            die(f"{what} {label}: no directory {d}")
        out[label] = d
    return out


def fmt_int(n):
    return f"{n:,}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", default=[], metavar="LABEL=DIR",
                    help="a float32 model directory and its label (repeat; the first is the baseline "
                    "unless --baseline says otherwise)")
    ap.add_argument("--int8-model", action="append", default=[], metavar="LABEL=DIR",
                    help="for LABEL's int8 rows, this directory with int8 weights stored instead of "
                    "--compute-type int8 on LABEL's float32 directory")
    ap.add_argument("--baseline", help="the label the ratios are taken against (default: the first --model)")
    ap.add_argument("--input", default=DEFAULT_INPUT, help="source text, one sentence a line (default: "
                    "Multi30k test_2016_flickr.en)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N input lines (0: all)")
    ap.add_argument("--compute", default="float32,int8", help="compute types (default float32,int8)")
    ap.add_argument("--threads", default="1,2", help="intra-op thread counts (default 1,2)")
    ap.add_argument("--search", default="greedy,beam5", help="searches: greedy, beamN (default greedy,beam5)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds over all configurations (default 2); "
                    "the table gives medians")
    ap.add_argument("--tern-args", default="", help="more `tern translate` options for every run, one "
                    "string (e.g. \"--length-penalty 1.0 --max-batch-tokens 2048\")")
    ap.add_argument("--workdir", default="/tmp", help="inputs and outputs go to WORKDIR/tern-bench-families "
                    "(default /tmp)")
    ap.add_argument("--tern", default=os.path.join(ROOT, "build", "tern"), help="the tern binary")
    ap.add_argument("--json", help="also write every run's figures to this file")
    args = ap.parse_args()
    args.tern = os.path.abspath(args.tern)
    args.tern_args = args.tern_args.split()
    models = labelled(args.model, "--model")
    int8_models = labelled(args.int8_model, "--int8-model")
    if not models:
        die("give at least one --model LABEL=DIR")
    for label in int8_models:
        if label not in models:
            die(f"--int8-model {label}: no --model {label}")
    baseline = args.baseline or next(iter(models))
    if baseline not in models:
        die(f"--baseline {baseline}: no --model {baseline}")
    if args.rounds < 1:
        die("--rounds must be at least 1")
    computes = [c.strip() for c in args.compute.split(",") if c.strip()]
    for c in computes:
        if c not in ("float32", "int8"):
            die(f"bad compute type '{c}' (float32, int8)")
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    searches = [s.strip() for s in args.search.split(",") if s.strip()]
    for s in searches:
        parse_search(s)
    configs = [(c, t, s) for c in computes for t in threads for s in searches]

    work = os.path.join(args.workdir, "tern-bench-families")
    os.makedirs(os.path.join(work, "out"), exist_ok=True)
    with open(args.input, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if args.limit:
        lines = lines[:args.limit]
    if not lines:
        die(f"{args.input}: no lines")

    # per model: its directory for each compute type, tern info, parameters, the input in its pieces
    fam = {}
    for label, d in models.items():
        dirs = {c: (int8_models[label] if c == "int8" and label in int8_models else d) for c in computes}
        infos = {c: tern_info(args.tern, dirs[c], "auto" if dirs[c] != d else c) for c in computes}
        families = {i["family"] for i in infos.values()}
        if len(families) != 1:
            die(f"{label}: the directories are of different families ({', '.join(sorted(families))})")
        for c, i in infos.items():
            if i["compute"] != c:
                die(f"{label}: {dirs[c]} runs as {i['compute']}, not {c} (give a float32 --model and an "
                    f"int8 --int8-model)")
        params, macs, stored_int8 = weight_stats(d)
        if stored_int8 and "float32" in computes:
            die(f"--model {label}={d} stores int8 weights: give its float32 directory (the int8 one may "
                f"go to --int8-model {label}=DIR)")
        inp = encode_input(work, d, lines)
        with open(inp, encoding="utf-8") as f:
            src_tokens = sum(len(l.split()) for l in f)
        fam[label] = dict(dir=d, dirs=dirs, info=infos, family=families.pop(), params=params, macs=macs,
                          input=inp, src_tokens=src_tokens)
        log(f"{label}: {fam[label]['family']}, {d}, {fmt_int(params)} parameters, {fmt_int(macs)} decoder "
            f"weight multiply-adds per target token; input {src_tokens} pieces")

    log(f"{len(lines)} lines; {len(configs)} configurations x {len(models)} models x {args.rounds} rounds; "
        f"load average {load_average()}")
    load_before = load_average()
    runs = {}  # (label, config) -> [run per round]
    labels = list(models)
    k = 0
    for rnd in range(args.rounds):
        for ci, (c, t, s) in enumerate(configs):
            order = labels if (rnd + ci) % 2 == 0 else labels[::-1]
            for label in order:
                m = fam[label]
                out = os.path.join(work, "out", f"{label}.{c}.{t}t.{s}.r{rnd + 1}.txt")
                r = run_one(args, m["dirs"][c], c, t, s, m["input"], out, len(lines))
                runs.setdefault((label, (c, t, s)), []).append(r)
                k += 1
                log(f"  [{k}/{len(configs) * len(labels) * args.rounds}] round {rnd + 1} {label:12s} {c:7s} "
                    f"{t}t {s:6s}: {r['tokens']} tokens in {r['seconds']:.2f} s = {r['tps']:.1f} tok/s, "
                    f"{len(lines) / r['seconds']:.1f} sent/s, peak {r['mb']:.0f} MB")
    load_after = load_average()

    rows = []
    for (c, t, s) in configs:
        for label in labels:
            rs = runs[(label, (c, t, s))]
            base = runs[(baseline, (c, t, s))]
            ratios = [a["tps"] / b["tps"] for a, b in zip(rs, base)]
            m = fam[label]
            rows.append(dict(label=label, family=m["family"], dir=m["dirs"][c], params=m["params"],
                             weight_mb=int(m["info"][c]["weight_bytes"]) / 1e6, compute=c, threads=t,
                             search=s, tps=statistics.median(r["tps"] for r in rs),
                             sps=statistics.median(len(lines) / r["seconds"] for r in rs),
                             mb=max(r["mb"] for r in rs), tokens=rs[0]["tokens"],
                             ratio=statistics.median(ratios), ratios=ratios,
                             same_output=len({r["digest"] for r in rs}) == 1, runs=rs))

    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    print(f"Machine: {machine()}; tern {rev}; load average {load_before} before, {load_after} after")
    print(f"Input: {len(lines)} lines of {os.path.basename(args.input)}; tern translate --pretokenized -w 1"
          f"{' ' + ' '.join(args.tern_args) if args.tern_args else ''} (default batching); "
          f"{args.rounds} round(s), medians; ratio: target tokens/s over {baseline}'s, same configuration "
          f"and round")
    print()
    print("| label | family | directory | parameters | decoder weight MACs / target token | source pieces |")
    print("|---|---|---|---:|---:|---:|")
    for label in labels:
        m = fam[label]
        where = m["dir"] + (f" (int8: {m['dirs']['int8']})" if m["dirs"].get("int8", m["dir"]) != m["dir"] else "")
        print(f"| {label} | {m['family']} | {where} | {fmt_int(m['params'])} | {fmt_int(m['macs'])} | "
              f"{m['src_tokens']} |")
    print()
    print(f"| family | parameters | weights MB | compute | threads | search | target tok/s | sentences/s | "
          f"peak RSS MB | target tokens | vs {baseline} |")
    print("|---|---:|---:|---|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        note = "" if r["same_output"] else " (outputs differ between rounds)"
        print(f"| {r['label']} | {r['params'] / 1e6:.2f} M | {r['weight_mb']:.1f} | {r['compute']} | "
              f"{r['threads']} | {r['search']} | {r['tps']:.1f} | {r['sps']:.1f} | {r['mb']:.0f} | "
              f"{r['tokens']} | {r['ratio']:.2f}{note} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(machine=machine(), rev=rev, load=[load_before, load_after], lines=len(lines),
                           input=args.input, args={k: v for k, v in vars(args).items()},
                           families={k: {kk: vv for kk, vv in v.items() if kk != "info"} | {"info": v["info"]}
                                     for k, v in fam.items()}, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
