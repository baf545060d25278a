#!/usr/bin/env python3
"""Tern against CTranslate2 on a Transformer-base-shaped model: target tokens/s and peak memory.

    .venv/bin/python bench/bench_translate.py [--workdir /tmp] [--tern build/tern]
        [--lines N | --longest N] [--configs greedy-float32-1t,beam4-float32-2t,...] [--repeat R]

What it builds once (cached under WORKDIR/tern-bench/, reused by later runs):
  * spm.model: a SentencePiece unigram model of 32,000 pieces trained with Debian's `spm_train`
    on Multi30k train (en+de) and the WMT22 en-de source and reference (fixed seed, one thread).
    Its pieces, in order (<unk> <s> </s> first), are the model's shared 32k vocabulary.
  * src.tok: the 2,037 WMT22 English source lines (../shared/data/wmt22) as pieces (`spm_encode`),
    about 22 pieces per line: the lengths of real news sentences for a 32k-vocabulary model.
    Both engines read these same pieces, so they get the same token ids.
  * model/: a random-weight CTranslate2 Transformer-base (6+6 layers, d 512, ff 2048, 8 heads,
    pre-norm, ReLU, learned positions, shared embeddings, separate output layer) built with ctranslate2's spec
    API (tests/peer/make_models.py). Random weights alone give a </s> that comes either at once
    or never (a bias calibrated on the mean gave 73% one-token outputs and 18% of 256 tokens), so
    a few weights are set by hand (make_spec) to make </s> depend on the step and the source
    length: each output is about as long as its source (checked with CTranslate2 on a sample:
    mean within 3%, slope within 5% of 1). Every GEMM keeps its full shape: the cost per token is
    that of a Transformer-base; only the lengths are steered.

What it runs: each configuration (greedy / beam 4 x float32 / int8 x 1 / 2 threads) for both
engines, each in a fresh process under /usr/bin/time (peak RSS of that process), interleaved
(Tern then CTranslate2, the order alternating from one configuration to the next). Both engines
get the same input, the same batches (the whole input sorted by length and cut into batches of
--batch-size sentences: CTranslate2's translate_batch(max_batch_size=B, batch_type="examples")
sorts its whole input; Tern gets --max-batch-size B with a token budget and read-ahead that cover
the whole file), the same --max-decoding-length, length penalty and beam size, one translator
with T intra-op threads. Time: from the input being read to the output being written, model
loading excluded (Tern's --progress report; a timer around read + translate_batch + write in the
CTranslate2 process). Target tokens are counted in each engine's output file (pieces, EOS not
counted). The agreement of the two outputs (identical lines) is reported for float32 configs.
"""
import argparse
import fnmatch
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.environ.get("TERN_DATA", os.path.join(ROOT, "..", "shared", "data"))
SRC_FILE = "wmt22/generaltest2022.en-de.src.en"
SPM_CORPUS = ["multi30k/train.en", "multi30k/train.de", "wmt22/generaltest2022.en-de.src.en",
              "wmt22/generaltest2022.en-de.ref.A.de"]
VOCAB = 32000
SHAPE = dict(name="transformer-base-bench", enc_layers=6, dec_layers=6, heads=8, d=512, ff=2048,
             pre_norm=True, activation="relu", src_vocab=VOCAB, tgt_vocab=VOCAB, shared_vocab=True,
             tie_output=False, share_embeddings=True, learned_pos=True, scale_embeddings=True,
             eps=None)
SEED = 1234
CALIB_LINES = 128          # sample of the source lines the </s> bias is calibrated on
CACHE_VERSION = 3          # bump when what is cached changes

CONFIGS = [f"{s}-{c}-{t}t" for s in ("greedy", "beam4") for c in ("float32", "int8") for t in (1, 2)]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- data and model (cached)

def build_spm(work):
    model = os.path.join(work, "spm.model")
    if os.path.exists(model):
        return model
    corpus = os.path.join(work, "spm-corpus.txt")
    with open(corpus, "w", encoding="utf-8") as out:
        for rel in SPM_CORPUS:
            with open(os.path.join(DATA, rel), encoding="utf-8") as f:
                out.write(f.read())
    log(f"training SentencePiece ({VOCAB} pieces) on {', '.join(SPM_CORPUS)} ...")
    subprocess.run(["spm_train", f"--input={corpus}", f"--model_prefix={os.path.join(work, 'spm')}",
                    f"--vocab_size={VOCAB}", "--model_type=unigram", "--character_coverage=1.0",
                    "--hard_vocab_limit=false", "--num_threads=1", "--random_seed=1",
                    "--minloglevel=1"], check=True, stdout=subprocess.DEVNULL)
    os.remove(corpus)
    return model


def read_pieces(work):
    """The model vocabulary: the SentencePiece pieces in id order, padded to VOCAB."""
    with open(os.path.join(work, "spm.vocab"), encoding="utf-8") as f:
        pieces = [line.split("\t")[0] for line in f]
    assert pieces[:3] == ["<unk>", "<s>", "</s>"], pieces[:3]
    i = 0
    while len(pieces) < VOCAB:  # the soft vocabulary limit may leave a few ids over
        pieces.append(f"<extra_{i}>")
        i += 1
    return pieces[:VOCAB]


def build_tokens(work, spm_model):
    path = os.path.join(work, "src.tok")
    if not os.path.exists(path):
        with open(os.path.join(DATA, SRC_FILE), encoding="utf-8") as f, open(path + ".tmp", "w") as out:
            subprocess.run(["spm_encode", f"--model={spm_model}", "--output_format=piece"], stdin=f,
                           stdout=out, check=True)
        os.replace(path + ".tmp", path)
    with open(path, encoding="utf-8") as f:
        return [line.split() for line in f.read().split("\n")[:-1]]


# Coordinates of the residual stream that carry the length signal (any two distinct ones).
K_DEC, M_ENC = 7, 11


def make_spec(pieces, knobs):
    """The benchmark's TransformerSpec: make_models' random weights (pre-norm, learned positions)
    plus a hand-set length mechanism, so that output lengths follow source lengths:
      * encoder: coordinate M_ENC of the residual stream holds beta * position (its position
        column; embeddings and every sublayer write nothing there), so the encoder output at
        source position j carries j (through the final layer norm);
      * the last decoder layer's cross-attention has a zero query (uniform attention over the
        source) and one value row reading coordinate M_ENC: its context holds the mean source
        position, about (L - 1) / 2; its output row K_DEC subtracts w times it;
      * decoder: coordinate K_DEC holds alpha * step (position column) minus that;
      * the output row of </s> reads only K_DEC (gain g), plus the </s> bias b.
    So the </s> logit rises by about g * alpha / sigma per step and crosses the other logits near
    step rho * L + c, where w sets rho and b sets c (calibrated by build_model)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "peer"))
    import make_models
    import numpy as np
    shape = dict(SHAPE, tokens=pieces)
    if make_models.vocabularies(shape)[0] is not pieces:  # older make_models: no "tokens" key
        make_models.vocabularies = lambda s: (s["tokens"], s["tokens"])
    spec = make_models.make_spec(shape, seed=SEED, eos_bias=knobs["b"])
    enc, dec = spec.encoder, spec.decoder
    a, beta, g, w = knobs["alpha"], knobs["beta"], knobs["g"], knobs["w"]
    k, m, d = K_DEC, M_ENC, SHAPE["d"]

    def A(v):  # the numpy array of a spec variable (modified in place: tied weights stay tied)
        return v.numpy() if hasattr(v, "numpy") else v

    emb = A(enc.embeddings[0].weight)  # shared with the decoder embeddings
    emb[:, [k, m]] = 0.0
    proj = A(dec.projection.weight)  # not tied: tied, a pre-norm decoder repeats its input token
    proj[:, [k, m]] = 0.0
    proj[2, :] = 0.0
    proj[2, k] = g
    epos, dpos = A(enc.position_encodings.encodings), A(dec.position_encodings.encodings)
    epos[:, m] = beta * np.arange(epos.shape[0], dtype=np.float32)
    epos[:, k] = 0.0
    dpos[:, k] = a * np.arange(dpos.shape[0], dtype=np.float32)
    dpos[:, m] = 0.0

    def silence(lin, rows):
        A(lin.weight)[rows, :] = 0.0
        A(lin.bias)[rows] = 0.0

    for L in enc.layer:
        silence(L.self_attention.linear[1], [k, m])
        silence(L.ffn.linear_1, [k, m])
    A(enc.layer_norm.gamma)[m], A(enc.layer_norm.beta)[m] = 1.0, 0.0
    for L in dec.layer:
        silence(L.self_attention.linear[1], [k, m])
        silence(L.attention.linear[2], [k, m])
        silence(L.ffn.linear_1, [k, m])
    last = dec.layer[-1].attention
    A(last.linear[0].weight)[:] = 0.0  # query 0: uniform attention over the source
    A(last.linear[0].bias)[:] = 0.0
    kv_w, kv_b = A(last.linear[1].weight), A(last.linear[1].bias)
    kv_w[d + m, :] = 0.0  # value coordinate m reads the encoder output's coordinate m
    kv_w[d + m, m] = 1.0
    kv_b[d + m] = 0.0
    A(last.linear[2].weight)[k, m] = -w
    A(dec.layer_norm.gamma)[k], A(dec.layer_norm.beta)[k] = 1.0, 0.0
    return spec


def save_model(pieces, knobs, out_dir):
    spec = make_spec(pieces, knobs)
    spec.optimize(quantization=None)  # aliases the tied weights
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        os.remove(os.path.join(out_dir, f))
    spec.save(out_dir)


# Starting knobs of the length mechanism (see make_spec); build_model checks them with
# CTranslate2 and corrects w (slope) and b (offset) when they miss.
KNOBS = dict(alpha=0.1, beta=0.05, g=20.0, w=10.5, b=14.3)
STEPS_PER_BIAS = 1.6  # output tokens gained per unit less </s> bias, measured


def build_model(work, pieces, lines):
    """Builds model/ with output lengths calibrated on a sample of the source lines: mean output
    length within 3% of the mean source length, slope of output on source length within 5% of 1.
    Returns the metadata dict."""
    meta_path = os.path.join(work, "model.json")
    model_dir = os.path.join(work, "model")
    if os.path.exists(meta_path) and os.path.exists(os.path.join(model_dir, "model.bin")):
        with open(meta_path) as f:
            meta = json.load(f)
        if meta.get("version") == CACHE_VERSION:
            return meta
    import ctranslate2
    import numpy as np
    step = max(1, len(lines) // CALIB_LINES)
    sample = [l for l in lines[::step] if l][:CALIB_LINES]
    src = np.array([len(l) for l in sample], dtype=np.float64)
    log(f"calibrating output lengths on {len(sample)} lines (mean source length {src.mean():.2f})")
    knobs = dict(KNOBS)
    tmp = model_dir + ".calib"
    for it in range(8):
        save_model(pieces, knobs, tmp)
        tr = ctranslate2.Translator(tmp, device="cpu", compute_type="float32", intra_threads=2)
        res = tr.translate_batch(sample, beam_size=1, max_batch_size=32, max_decoding_length=256)
        del tr
        out = np.array([len(r.hypotheses[0]) for r in res], dtype=np.float64)
        slope = float(np.polyfit(src, out, 1)[0])
        corr = float(np.corrcoef(src, out)[0, 1])
        log(f"  w {knobs['w']:.3f} b {knobs['b']:.3f}: mean output {out.mean():.2f}, slope {slope:.3f}, "
            f"correlation {corr:.3f}")
        if abs(out.mean() - src.mean()) <= 0.03 * src.mean() and abs(slope - 1.0) <= 0.05:
            break
        knobs["w"] /= max(slope, 0.2)
        knobs["b"] -= (src.mean() - out.mean()) / STEPS_PER_BIAS
    shutil.rmtree(tmp)
    save_model(pieces, knobs, model_dir)
    meta = dict(version=CACHE_VERSION, knobs=knobs, calib_mean_out=float(out.mean()),
                calib_mean_src=float(src.mean()), calib_slope=slope, calib_corr=corr,
                shape=dict(SHAPE), seed=SEED)
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    return meta


# ---------------------------------------------------------------- runs

def parse_config(name):
    m = re.fullmatch(r"(greedy|beam(\d+))-(float32|int8)-(\d+)t", name)
    if not m:
        raise SystemExit(f"bad configuration '{name}' (e.g. greedy-float32-1t, beam4-int8-2t)")
    return dict(name=name, beam=int(m.group(2)) if m.group(2) else 1, compute=m.group(3),
                threads=int(m.group(4)))


def timed(cmd, rss_file, env):
    """Runs cmd under /usr/bin/time; returns (completed process, peak RSS in MB)."""
    r = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file] + cmd, capture_output=True,
                       text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    with open(rss_file) as f:
        kb = int(f.read().split()[-1])
    return r, kb / 1024.0


def count_tokens(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")[:-1]
    return lines, sum(len(l.split()) for l in lines)


ISA_CAP = None  # --isa-cap


def cap_env(cap):
    """The variables that cap every library of both engines at one instruction set (docs/kernels.md):
    Tern's own dispatch, oneDNN's (both engines), MKL's and CTranslate2's own kernels."""
    mkl = {"AVX2": "AVX2", "AVX512_CORE": "AVX512"}.get(cap)
    env = {"TERN_MAX_CPU_ISA": cap, "ONEDNN_MAX_CPU_ISA": cap, "CT2_FORCE_CPU_ISA": "AVX2" if cap == "AVX2" else "AVX512"}
    if mkl:
        env["MKL_ENABLE_INSTRUCTIONS"] = mkl
    return env


def clean_env():
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CT2_USE_EXPERIMENTAL_PACKED_GEMM"):
        env.pop(k, None)
    if ISA_CAP:
        env.update(cap_env(ISA_CAP))
    return env


def run_tern(args, cfg, model_dir, inp, out, rss_file, extra=()):
    cmd = [args.tern, "translate", "-m", model_dir, "--pretokenized", "-b", str(cfg["beam"]),
           "-w", "1", "-t", str(cfg["threads"]), "--compute-type", cfg["compute"],
           "--max-batch-size", str(args.batch_size), "--max-batch-tokens", str(1 << 24),
           "--read-ahead", "1", "--max-decoding-length", str(args.max_decoding_length),
           "--length-penalty", str(args.length_penalty), "--progress", *extra, inp, out]
    r, mb = timed(cmd, rss_file, clean_env())
    reports = re.findall(r"(\d+) sentences, (\d+) target tokens, ([\d.]+) tokens/s", r.stderr)
    if not reports:
        raise RuntimeError(f"no progress report from tern:\n{r.stderr[-2000:]}")
    _, toks, tps = reports[-1]
    seconds = int(toks) / float(tps) if float(tps) > 0 else float("nan")
    return seconds, mb


def run_ct2(args, cfg, model_dir, inp, out, rss_file, prefix=""):
    """prefix: a target token every output starts with (CTranslate2's target_prefix), or none."""
    cmd = [sys.executable, os.path.abspath(__file__), "--ct2-worker", model_dir, inp, out,
           str(cfg["beam"]), str(cfg["threads"]), cfg["compute"], str(args.batch_size),
           str(args.max_decoding_length), str(args.length_penalty), prefix]
    r, mb = timed(cmd, rss_file, clean_env())
    return json.loads(r.stdout.strip().split("\n")[-1])["seconds"], mb


def ct2_worker(argv):
    model_dir, inp, out, beam, threads, compute, bs, maxlen, lp = argv[:9]
    prefix = argv[9] if len(argv) > 9 else ""
    import ctranslate2
    tr = ctranslate2.Translator(model_dir, device="cpu", compute_type=compute, inter_threads=1,
                                intra_threads=int(threads))
    t0 = time.perf_counter()
    with open(inp, encoding="utf-8") as f:
        batch = [line.split() for line in f.read().split("\n")[:-1]]
    res = tr.translate_batch(batch, beam_size=int(beam), max_batch_size=int(bs), batch_type="examples",
                             max_decoding_length=int(maxlen), length_penalty=float(lp),
                             return_scores=False, target_prefix=[[prefix]] * len(batch) if prefix else None)
    with open(out, "w", encoding="utf-8") as f:
        for r in res:
            f.write(" ".join(r.hypotheses[0]) + "\n")
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds}))


def machine():
    """The CPU model, core count and the vector flags that choose the kernels (avx2, fma, AVX-512, VNNI,
    BF16, AMX)."""
    cpu, flags = platform.processor(), []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and cpu == platform.processor():
                    cpu = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    flags = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
                                         "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16") if f in have]
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores; flags: {' '.join(flags)}"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--ct2-worker":
        return ct2_worker(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="/tmp", help="cache directory (data, model, outputs go to "
                    "WORKDIR/tern-bench; default /tmp)")
    ap.add_argument("--tern", default=os.path.join(ROOT, "build", "tern"), help="the tern binary")
    ap.add_argument("--lines", type=int, default=0, help="only the first N source lines (0: all 2,037)")
    ap.add_argument("--longest", type=int, default=0, help="only the N longest source lines (in pieces; "
                    "in their order): a quick memory check, as both engines' peak is set by the batch of "
                    "the longest sentences (--longest 64: the two longest batches of 32); tokens/s of "
                    "such a run are not the bench's")
    ap.add_argument("--configs", default="all", help="comma-separated configurations or patterns "
                    f"(fnmatch) among {', '.join(CONFIGS)}; default all")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each engine per configuration; "
                    "the fastest counts (default 1)")
    ap.add_argument("--batch-size", type=int, default=32, help="sentences per batch (default 32)")
    ap.add_argument("--max-decoding-length", type=int, default=256)
    ap.add_argument("--length-penalty", type=float, default=0.0)
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--isa-cap", choices=("AVX2", "AVX512_CORE", "AVX512_CORE_VNNI"),
                    help="cap both engines at this instruction set (TERN_MAX_CPU_ISA, ONEDNN_MAX_CPU_ISA, "
                         "MKL_ENABLE_INSTRUCTIONS, CT2_FORCE_CPU_ISA): the paths of a smaller CPU on this one")
    args = ap.parse_args()
    global ISA_CAP
    ISA_CAP = args.isa_cap
    args.tern = os.path.abspath(args.tern)

    work = os.path.join(args.workdir, "tern-bench")
    os.makedirs(work, exist_ok=True)
    spm_model = build_spm(work)
    pieces = read_pieces(work)
    lines = build_tokens(work, spm_model)
    meta = build_model(work, pieces, lines)
    model_dir = os.path.join(work, "model")
    if args.lines:
        lines = lines[:args.lines]
    tag = str(len(lines))
    if args.longest:
        keep = set(sorted(range(len(lines)), key=lambda i: (len(lines[i]), i))[-args.longest:])
        lines = [l for i, l in enumerate(lines) if i in keep]
        tag = f"longest-{len(lines)}"
    inp = os.path.join(work, f"input-{tag}.tok")
    with open(inp, "w", encoding="utf-8") as f:
        f.write("".join(" ".join(l) + "\n" for l in lines))
    src_tokens = sum(len(l) for l in lines)

    pats = [p.strip() for p in args.configs.split(",") if p.strip()]
    names = CONFIGS if args.configs == "all" else [c for c in CONFIGS if any(fnmatch.fnmatch(c, p) for p in pats)]
    extra = [p for p in pats if p not in CONFIGS and not any(ch in p for ch in "*?[") and p != "all"]
    names += [p for p in extra if parse_config(p)]
    if not names:
        raise SystemExit(f"no configuration matches {args.configs}")
    log(f"{len(lines)} lines, {src_tokens} source tokens; length knobs {meta['knobs']}; "
        f"configurations: {', '.join(names)}")

    rows = []
    outdir = os.path.join(work, "out")
    os.makedirs(outdir, exist_ok=True)
    for ci, name in enumerate(names):
        cfg = parse_config(name)
        best = {}
        for rep in range(args.repeat):
            order = ["tern", "ct2"] if (ci + rep) % 2 == 0 else ["ct2", "tern"]
            for eng in order:
                out = os.path.join(outdir, f"{name}.{eng}.txt")
                rss = os.path.join(outdir, f"{name}.{eng}.rss")
                fn = run_tern if eng == "tern" else run_ct2
                secs, mb = fn(args, cfg, model_dir, inp, out, rss)
                outs, toks = count_tokens(out)
                assert len(outs) == len(lines), f"{eng}: {len(outs)} output lines for {len(lines)} inputs"
                tps = toks / secs
                log(f"  {name:18s} {eng:4s} run {rep + 1}: {toks} tokens in {secs:.2f} s = {tps:.1f} tok/s, "
                    f"peak {mb:.0f} MB")
                b = best.get(eng)
                if b is None or tps > b["tps"]:
                    best[eng] = dict(tps=tps, seconds=secs, tokens=toks, mb=mb, outs=outs)
                else:
                    b["mb"] = max(b["mb"], mb)
        t, c = best["tern"], best["ct2"]
        same = sum(a == b for a, b in zip(t["outs"], c["outs"]))
        rows.append(dict(config=name, tern_tps=t["tps"], ct2_tps=c["tps"], ratio=t["tps"] / c["tps"],
                         tern_mb=t["mb"], ct2_mb=c["mb"], tern_tokens=t["tokens"], ct2_tokens=c["tokens"],
                         tern_seconds=t["seconds"], ct2_seconds=c["seconds"], agree=same, lines=len(lines)))
        log(f"  {name}: ratio {rows[-1]['ratio']:.3f}, identical outputs {same}/{len(lines)}")

    import ctranslate2
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    print(f"Machine: {machine()}; ctranslate2 {ctranslate2.__version__}; tern {rev}" +
          (f"; both engines capped at {args.isa_cap} ({' '.join(f'{k}={v}' for k, v in cap_env(args.isa_cap).items())})"
           if args.isa_cap else ""))
    which = f"the {len(lines)} longest" if args.longest else str(len(lines))
    print(f"Input: {which} WMT22 en-de source lines, {src_tokens} source tokens; batches of "
          f"{args.batch_size} sentences; max decoding length {args.max_decoding_length}; "
          f"length penalty {args.length_penalty:g}")
    print()
    print("| config | Tern tok/s | CT2 tok/s | ratio | Tern peak MB | CT2 peak MB | tokens Tern / CT2 | identical outputs |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['config']} | {r['tern_tps']:.1f} | {r['ct2_tps']:.1f} | {r['ratio']:.2f} | "
              f"{r['tern_mb']:.0f} | {r['ct2_mb']:.0f} | {r['tern_tokens']} / {r['ct2_tokens']} | "
              f"{r['agree']}/{r['lines']} ({100.0 * r['agree'] / r['lines']:.2f}%) |")
    f32 = [r for r in rows if "float32" in r["config"]]
    if f32:
        print()
        print(f"float32: min ratio {min(r['ratio'] for r in f32):.3f} "
              f"(geometric mean {statistics.geometric_mean([r['ratio'] for r in f32]):.3f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(machine=machine(), rows=rows, meta=meta, args=vars(args)), f, indent=1)


if __name__ == "__main__":
    main()
