#!/usr/bin/env python3
"""Tern against CTranslate2 and Marian on the shapes of the models people run: target tokens/s and
peak memory (issue 26 point 6).

    .venv/bin/python bench/bench_zoo.py --shape marian|nllb [--workdir /tmp] [--lines 400]
        [--configs greedy-float32-1t,...] [--repeat 3] [--engines tern,ct2,marian]

--shape marian: OPUS-MT's transformer-base (6+6, d 512, 8 heads, ffn 2048, post-norm, swish, tied
embeddings, sinusoidal positions, 58,101-row vocabulary) as a Hugging Face MarianMT checkpoint that
Tern reads as it is, converted by CTranslate2's own TransformersConverter, and as Marian's
model.npz (the same weights) for pymarian (Marian 1.12). --shape nllb: NLLB-200-600M's shape
(12+12, d 1024, 16 heads, ffn 4096, pre-norm, relu, 256,206 rows) as an M2M100 checkpoint, Tern
against CTranslate2 (Marian does not run it). bench/zoo_model.py builds them (random weights with a
length mechanism: outputs about as long as their sources; its docstring says how), calibrated here
with Tern on 128 source lines (NLLB: 48) (mean output length within 4 % of the mean source length; the slope
of output on source length is reported), cached under WORKDIR/tern-bench-zoo/SHAPE.

Input: the first --lines WMT22 en-de source lines as the pieces of bench_translate.py's 32k
SentencePiece model (shared cache WORKDIR/tern-bench), so every engine decodes the same token ids:
CTranslate2 gets the pieces and </s>, Tern and Marian the pieces (they append </s>, as
MarianTokenizer does); NLLB: CTranslate2 gets eng_Latn first and deu_Latn as the target prefix of
every output (left out of its outputs before counting), Tern --source-lang eng_Latn --target-lang
deu_Latn (the code forced as the first output token and left out of the output).
Each configuration (greedy / beam 4 x float32 / int8 x 1 / 2 threads) runs every engine in a fresh
process under /usr/bin/time (peak RSS), engines interleaved (the order rotating), --repeat times;
the median tokens/s counts and the largest peak RSS. Same batches: the input sorted by length in
batches of --batch-size sentences (Tern: --max-batch-size with a token budget and read-ahead over
the whole file; CTranslate2: translate_batch(max_batch_size, batch_type="examples"); Marian:
mini_batch with maxi_batch covering the input, sorted by source length); length penalty 0 (Marian:
normalize 0); max decoding length 256 (Marian: its --max-length-factor 3). Threads: Tern -w 1 -t T,
CTranslate2 intra_threads T, Marian cpu_threads T (Marian's threads are workers, each decoding its
own batches: its only way to use T cores). Time: input read to output written, model loading
excluded. int8: Tern and CTranslate2 quantize the float32 weights at load (--compute-type int8,
compute_type="int8"); Marian 1.12 from PyPI has no on-the-fly int8 for a float32 .npz (its intgemm
types need a model converted by marian-conv, which pymarian does not ship), so Marian runs float32
only. Target tokens are counted in each engine's output (end token not counted); the agreement of
Tern's outputs with each peer's (identical lines) is reported.
"""
import argparse
import fnmatch
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_translate as bt  # noqa: E402  (data, timing and the CTranslate2 worker are shared)

TORCH_PY = os.environ.get("TERN_TORCH_PYTHON", "/usr/bin/python3")
CALIB_LINES = {"marian": 128, "nllb": 48}
KNOBS = {"marian": dict(g=20.0, w=2.5, b=0.0), "nllb": dict(g=20.0, w=2.5, b=0.0)}
CACHE_VERSION = 1
ENGINES = {"marian": ["tern", "ct2", "marian"], "nllb": ["tern", "ct2"]}


def torch_env():
    """/usr/bin/python3 (torch, transformers) with the venv's ctranslate2 alone on its path."""
    import ctranslate2
    d = os.path.join(os.path.dirname(os.path.dirname(ctranslate2.__file__)))
    shim = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tern-bench-zoo-pypath-{os.getuid()}")
    os.makedirs(shim, exist_ok=True)
    for n in ("ctranslate2", "ctranslate2.libs"):
        if os.path.exists(os.path.join(d, n)) and not os.path.lexists(os.path.join(shim, n)):
            os.symlink(os.path.join(d, n), os.path.join(shim, n))
    return dict(os.environ, PYTHONPATH=shim, OMP_NUM_THREADS="2")


def zoo(*argv):
    r = subprocess.run([TORCH_PY, os.path.join(HERE, "zoo_model.py"), *map(str, argv)], capture_output=True,
                       text=True, env=torch_env())
    if r.returncode != 0:
        raise RuntimeError(f"zoo_model.py {argv[0]} failed:\n{r.stderr[-3000:]}")
    bt.log(r.stderr.strip()[-400:])
    return json.loads(r.stdout.strip().split("\n")[-1])


def inputs(shape, lines, path):
    """One input file per engine (pieces as each takes them)."""
    files = {}
    for eng in ("tern", "ct2", "marian"):
        f = f"{path}.{eng}"
        with open(f, "w", encoding="utf-8") as out:
            for l in lines:
                toks = (["eng_Latn"] if shape == "nllb" and eng == "ct2" else []) + l + (["</s>"] if eng == "ct2" else [])
                out.write(" ".join(toks) + "\n")
        files[eng] = f
    return files


def tern_extra(shape, n, work):
    return ["--source-lang", "eng_Latn", "--target-lang", "deu_Latn"] if shape == "nllb" else []


def strip_prefix(path):
    """CTranslate2's NLLB hypotheses start with the target prefix: left out, as Tern leaves it out."""
    with open(path, encoding="utf-8") as f:
        lines = [l.split(" ", 1)[1] if l.startswith("deu_Latn ") else ("" if l == "deu_Latn" else l)
                 for l in f.read().split("\n")[:-1]]
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(l + "\n" for l in lines))


def build_model(shape, work, spm_dir, lines, tern):
    meta_path = os.path.join(work, "model.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        if meta.get("version") == CACHE_VERSION and os.path.exists(os.path.join(work, "ct2", "model.bin")):
            return meta
    import numpy as np
    step = max(1, len(lines) // CALIB_LINES[shape])
    sample = [l for l in lines[::step] if l][:CALIB_LINES[shape]]
    files = inputs(shape, sample, os.path.join(work, "calib"))
    src = np.array([len(l) + 1 for l in sample], dtype=np.float64)  # with </s>
    knobs = dict(KNOBS[shape])
    bt.log(f"calibrating output lengths on {len(sample)} lines (mean source length {src.mean():.2f} with </s>)")
    for it in range(8):
        info = zoo("build", shape, spm_dir, work, json.dumps(knobs))
        out = os.path.join(work, "calib.out")
        cmd = [tern, "translate", "-m", os.path.join(work, "hf"), "--pretokenized", "-b", "1", "-t", "2",
               "--max-decoding-length", "256", *tern_extra(shape, len(sample), work), files["tern"], out]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(r.stderr[-2000:])
        got = np.array([len(l.split()) + 1 for l in open(out, encoding="utf-8")],
                       dtype=np.float64)
        slope = float(np.polyfit(src, got, 1)[0])
        corr = float(np.corrcoef(src, got)[0, 1])
        bt.log(f"  {knobs}: mean output {got.mean():.2f} (with </s>), slope {slope:.3f}, correlation {corr:.3f}, "
               f"at 256: {int((got > 256).sum())}")
        if abs(got.mean() - src.mean()) <= 0.04 * src.mean():
            break
        # b stays below the other logits at step 0 (no end token at once); w sets the lengths: f is
        # about quadratic in t, so t grows as about w^(1/2)
        knobs["w"] *= (src.mean() / max(got.mean(), 1.0)) ** 1.5
    zoo("convert", work)
    meta = dict(version=CACHE_VERSION, shape=shape, knobs=knobs, build=info, calib_mean_out=float(got.mean()),
                calib_mean_src=float(src.mean()), calib_slope=slope, calib_corr=corr)
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    return meta


def marian_worker(argv):
    model_dir, inp, out, beam, threads, bs, maxi = argv
    import pymarian
    npz, vocab = os.path.join(model_dir, "model.npz"), os.path.join(model_dir, "vocab.json")
    tr = pymarian.Translator(models=npz, vocabs=[vocab, vocab], beam_size=int(beam), normalize=0,
                             cpu_threads=int(threads), mini_batch=int(bs), maxi_batch=int(maxi),
                             maxi_batch_sort="src", quiet=True, max_length_factor=3)
    t0 = time.perf_counter()
    with open(inp, encoding="utf-8") as f:
        lines = f.read().split("\n")[:-1]
    res = tr.translate(lines)
    with open(out, "w", encoding="utf-8") as f:
        for r in res:
            f.write(r.strip() + "\n")
    print(json.dumps({"seconds": time.perf_counter() - t0}))


def run_marian(args, cfg, model_dir, inp, out, rss_file):
    maxi = max(1, -(-args.n_lines // args.batch_size))
    cmd = [sys.executable, os.path.abspath(__file__), "--marian-worker", model_dir, inp, out, str(cfg["beam"]),
           str(cfg["threads"]), str(args.batch_size), str(maxi)]
    r, mb = bt.timed(cmd, rss_file, bt.clean_env())
    return json.loads(r.stdout.strip().split("\n")[-1])["seconds"], mb


def normalize(line, spare_base):
    """CTranslate2 names NLLB's spare rows madeupwordN, Tern <unused_ID>: compare them as ids."""
    if spare_base is None or "madeupword" not in line:
        return line
    return " ".join(f"<unused_{spare_base + int(t[10:])}>" if t.startswith("madeupword") else t for t in line.split())


def table(rows, engines, head):
    """The Markdown table: median tok/s and its ratios, the best run's ratios beside (on a loaded
    machine the fastest of the runs is the least disturbed), peak RSS, tokens, agreement."""
    print(head)
    print()
    peers = [e for e in engines if e != "tern"]
    label = dict(ct2="CT2", marian="Marian")
    cols = ["config", "Tern tok/s"]
    for e in peers:
        cols += [f"{label[e]} tok/s", f"Tern/{label[e]} (best runs)"]
    cols += ["peak MB Tern / " + " / ".join(label[e] for e in peers), "tokens Tern / " + " / ".join(label[e] for e in peers),
             "identical " + ", ".join(f"Tern–{label[e]}" for e in peers)]
    print("| " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * (len(cols) - 1))
    for r in rows:
        cells = [r["config"], f"{r['tern']['tps']:.1f}"]
        for e in peers:
            if e in r:
                best = max(r["tern"]["all_tps"]) / max(r[e]["all_tps"])
                cells += [f"{r[e]['tps']:.1f}", f"**{r[e]['ratio']:.2f}** ({best:.2f})"]
            else:
                cells += ["–", "–"]
        cells.append(" / ".join(f"{r[e]['mb']:.0f}" if e in r else "–" for e in ["tern"] + peers))
        cells.append(" / ".join(str(r[e]["tokens"]) if e in r else "–" for e in ["tern"] + peers))
        cells.append(", ".join(f"{r[e]['agree']}/{r['lines']}" if e in r else "–" for e in peers))
        print("| " + " | ".join(cells) + " |")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--table":  # the table again from a --json file
        with open(sys.argv[2]) as f:
            j = json.load(f)
        a = j["args"]
        engines = a["engines"].split(",") if a["engines"] else ENGINES[a["shape"]]
        return table(j["rows"], engines, f"Machine: {j['machine']}\nShape {a['shape']}; {a['n_lines']} lines; "
                     f"median of {a['repeat']} runs")
    if len(sys.argv) > 1 and sys.argv[1] == "--ct2-worker":
        return bt.ct2_worker(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "--marian-worker":
        return marian_worker(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=("marian", "nllb"), required=True)
    ap.add_argument("--workdir", default="/tmp")
    ap.add_argument("--tern", default=os.path.join(bt.ROOT, "build", "tern"))
    ap.add_argument("--lines", type=int, default=400, help="the first N WMT22 en-de source lines (default 400)")
    ap.add_argument("--configs", default="all", help=f"comma-separated configurations or patterns among "
                    f"{', '.join(bt.CONFIGS)}; default all")
    ap.add_argument("--engines", default="", help="comma-separated among tern, ct2, marian (default: all the "
                    "shape's)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each engine per configuration; the median "
                    "counts (default 3)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-decoding-length", type=int, default=256)
    ap.add_argument("--length-penalty", type=float, default=0.0)
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--isa-cap", choices=("AVX2", "AVX512_CORE", "AVX512_CORE_VNNI"),
                    help="cap Tern and CTranslate2 at this instruction set (bench_translate.py's --isa-cap; "
                         "Marian is not capped)")
    args = ap.parse_args()
    args.tern = os.path.abspath(args.tern)
    bt.ISA_CAP = args.isa_cap
    shared = os.path.join(args.workdir, "tern-bench")
    os.makedirs(shared, exist_ok=True)
    spm_model = bt.build_spm(shared)
    lines = bt.build_tokens(shared, spm_model)
    work = os.path.join(args.workdir, "tern-bench-zoo", args.shape)
    os.makedirs(work, exist_ok=True)
    meta = build_model(args.shape, work, shared, lines, args.tern)
    lines = lines[:args.lines]
    args.n_lines = len(lines)
    files = inputs(args.shape, lines, os.path.join(work, f"input-{len(lines)}"))
    extra = tern_extra(args.shape, len(lines), work)
    src_tokens = sum(len(l) for l in lines)
    pats = [p.strip() for p in args.configs.split(",") if p.strip()]
    names = bt.CONFIGS if args.configs == "all" else [c for c in bt.CONFIGS if any(fnmatch.fnmatch(c, p) for p in pats)]
    engines = [e for e in (args.engines.split(",") if args.engines else ENGINES[args.shape])]
    spare = meta["build"]["tokens"] if args.shape == "nllb" else None
    bt.log(f"{len(lines)} lines, {src_tokens} source pieces; knobs {meta['knobs']}; configurations: {', '.join(names)}")
    dirs = dict(tern=os.path.join(work, "hf"), ct2=os.path.join(work, "ct2"), marian=os.path.join(work, "marian"))
    rows = []
    outdir = os.path.join(work, "out")
    os.makedirs(outdir, exist_ok=True)
    for ci, name in enumerate(names):
        cfg = bt.parse_config(name)
        engs = [e for e in engines if not (e == "marian" and cfg["compute"] == "int8")]
        runs = {e: [] for e in engs}
        outs = {}
        for rep in range(args.repeat):
            k = (ci + rep) % len(engs)
            for eng in engs[k:] + engs[:k]:
                out = os.path.join(outdir, f"{name}.{eng}.txt")
                rss = os.path.join(outdir, f"{name}.{eng}.rss")
                if eng == "tern":
                    secs, mb = bt.run_tern(args, cfg, dirs[eng], files[eng], out, rss, extra)
                elif eng == "ct2":
                    secs, mb = bt.run_ct2(args, cfg, dirs[eng], files[eng], out, rss,
                                          "deu_Latn" if args.shape == "nllb" else "")
                    if args.shape == "nllb":
                        strip_prefix(out)
                else:
                    secs, mb = run_marian(args, cfg, dirs[eng], files[eng], out, rss)
                o, toks = bt.count_tokens(out)
                assert len(o) == len(lines), f"{eng}: {len(o)} output lines for {len(lines)} inputs"
                runs[eng].append(dict(tps=toks / secs, mb=mb, tokens=toks, seconds=secs))
                outs[eng] = [normalize(x, spare) for x in o]
                bt.log(f"  {name:18s} {eng:6s} run {rep + 1}: {toks} tokens in {secs:.2f} s = {toks / secs:.1f} tok/s, "
                       f"peak {mb:.0f} MB")
        row = dict(config=name, lines=len(lines))
        for e in engs:
            row[e] = dict(tps=statistics.median(r["tps"] for r in runs[e]), mb=max(r["mb"] for r in runs[e]),
                          tokens=runs[e][-1]["tokens"], all_tps=[r["tps"] for r in runs[e]])
            if e != "tern":
                row[e]["ratio"] = row["tern"]["tps"] / row[e]["tps"]
                row[e]["agree"] = sum(a == b for a, b in zip(outs["tern"], outs[e]))
        rows.append(row)
        bt.log("  " + name + ": " + ", ".join(f"Tern/{e} {row[e]['ratio']:.2f} (identical {row[e]['agree']}/{len(lines)})"
                                               for e in engs if e != "tern"))
    import ctranslate2
    vers = [f"ctranslate2 {ctranslate2.__version__}"]
    if "marian" in engines:
        import pymarian
        vers.append(f"pymarian {pymarian.__version__}")
    rev = subprocess.run(["git", "-C", bt.ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    head = (f"Machine: {bt.machine()}; {'; '.join(vers)}; tern {rev}\n"
            f"Shape {args.shape}; input: {len(lines)} WMT22 en-de source lines, {src_tokens} source pieces; batches of "
            f"{args.batch_size}; median of {args.repeat} runs" +
            (f"; Tern and CTranslate2 capped at {args.isa_cap}" if args.isa_cap else ""))
    table(rows, engines, head)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(machine=bt.machine(), rows=rows, meta=meta, args=vars(args)), f, indent=1)


if __name__ == "__main__":
    main()
