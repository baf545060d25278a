#!/usr/bin/env python3
"""The CTranslate2 paper's Tables 5 and 6 on this machine: a ladder of cumulative optimizations
(single-core greedy tokens/s and BLEU at each rung) and the end-to-end time of the whole test set,
Tern beside ctranslate2 on the same converted models in the same run.

    .venv/bin/python bench/bench_ladder.py --teacher DIR [--student NAME=DIR ...] [--vmap FILE]
        [--lines N] [--repeat R] [--batch-size B] [--table 5,6,2,s] [--ensemble DIR ...] [--json OUT]
        [--workdir DIR]

Models: --teacher is the teacher-sized model (float32 Tern directory: the averaged checkpoint of
the default model), each --student a student (float32 Tern directory), in the order of the
ladder (e.g. 4:3, 4:2, 4:1 decoders). Each is converted once with `tern convert --to ct2` into
WORKDIR/ct2-NAME: ctranslate2 reads that model.bin; Tern reads the Tern directory (the same
float32 tensors); both quantize to int8 at load for the int8 rungs (Tern: 127/row max with
half-to-even rounding; ctranslate2: its own int8 path). The vocabulary map (--vmap, default
WORKDIR/vmap.txt built by `tern vmap` on Multi30k train) is CTranslate2's format: Tern reads it
with --vmap, ctranslate2 with use_vmap=True and a copy as vmap.txt in its model directory.

Table 5 (the ladder): Multi30k test_2016_flickr (the first --lines lines), SentencePiece pieces
given to both engines (tokenization outside the timing), greedy, one thread, batches of
--batch-size sentences sorted by length (both engines sort the whole input), model loading
excluded (Tern's --progress report; a timer around translate_batch in the ctranslate2 process).
Rungs, each adding to the one before: float32 teacher, int8, + vmap, then each student (int8 +
vmap). Per rung and engine: target tokens/s (median of --repeat fresh processes, interleaved
Tern / ctranslate2, the order alternating), the speed-up over the engine's own first rung, BLEU
(sacreBLEU on the detokenized output against the reference), and Tern/ctranslate2.

Table 6 (end to end): the whole test set from raw text to detokenized text in one process, timed
from start to exit (loading, SentencePiece, translation, writing): the baseline (float32 teacher,
beam 4) and the optimized system (the last student, int8, vmap; beam 4 and greedy). Tern is
`tern translate` on the raw file; ctranslate2 is a Python process (import, SentencePiece encode
with the model's sentencepiece.model, translate_batch, decode) as a user of ctranslate2 runs it.

SDL Table 2 (--table 2, Tern only: ctranslate2 has no ensembles): the research system (the
--ensemble members, float32, beam 12) against accelerated ones (the teacher-sized distilled model
and each student: int8, beam 4, GNMT pruning with width 5), end to end on one thread: BLEU and
source words per minute.

Students' speed (--table s, Tern only): each model's target tokens/s and its ratio to the
teacher-sized model's, int8, one thread, greedy and beam 4 (length penalty 1.0), without and with
the vocabulary map (issue 27's bar: a shallow student at >= 1.5x the shipped model's tokens/s).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_translate as bt  # noqa: E402  (timed, clean_env, machine)

DATA = os.path.join(os.environ.get("TERN_DATA", os.path.join(ROOT, "..", "shared", "data")), "multi30k")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return r


def ct2_dir(args, name, model):
    out = os.path.join(args.workdir, "ct2-" + name)
    if not os.path.exists(os.path.join(out, "model.bin")):
        if os.path.exists(out):
            shutil.rmtree(out)
        run([args.tern, "convert", "--from", model, "--to", "ct2", "-o", out])
    vm = os.path.join(out, "vmap.txt")
    if not os.path.exists(vm):
        shutil.copyfile(args.vmap, vm)
    return out


def detok_bleu(spm_model, pieces_file, ref_lines):
    import sacrebleu
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=spm_model)
    with open(pieces_file, encoding="utf-8") as f:
        hyp = [sp.decode(l.split()) for l in f.read().split("\n")[:-1]]
    return sacrebleu.corpus_bleu(hyp, [ref_lines]).score


def tern_greedy(args, model, vmap, compute, inp, out, beam=1):
    cmd = [args.tern, "translate", "-m", model, "--pretokenized", "-b", str(beam), "-w", "1", "-t", "1",
           "--compute-type", compute, "--max-batch-size", str(args.batch_size), "--max-batch-tokens", str(1 << 24),
           "--read-ahead", "1", "--length-penalty", "0" if beam == 1 else "1.0", "--progress", inp, out]
    if vmap:
        cmd[4:4] = ["--vmap", args.vmap]
    r, _ = bt.timed(cmd, os.path.join(args.workdir, "rss"), bt.clean_env())
    rep = re.findall(r"(\d+) sentences, (\d+) target tokens, ([\d.]+) tokens/s", r.stderr)
    if not rep:
        raise RuntimeError("no progress report from tern:\n" + r.stderr[-2000:])
    return float(rep[-1][2])


def ct2_greedy(args, model, vmap, compute, inp, out):
    cmd = [sys.executable, os.path.abspath(__file__), "--ct2-worker", model, inp, out, compute, str(args.batch_size),
           "1" if vmap else "0"]
    r, _ = bt.timed(cmd, os.path.join(args.workdir, "rss"), bt.clean_env())
    d = json.loads(r.stdout.strip().split("\n")[-1])
    return d["tokens"] / d["seconds"]


def ct2_worker(argv):
    model, inp, out, compute, bs, vmap = argv
    import ctranslate2
    tr = ctranslate2.Translator(model, device="cpu", compute_type=compute, inter_threads=1, intra_threads=1)
    with open(inp, encoding="utf-8") as f:
        batch = [line.split() for line in f.read().split("\n")[:-1]]
    t0 = time.perf_counter()
    res = tr.translate_batch(batch, beam_size=1, max_batch_size=int(bs), batch_type="examples",
                             use_vmap=vmap == "1", return_scores=False)
    seconds = time.perf_counter() - t0
    toks = 0
    with open(out, "w", encoding="utf-8") as f:
        for r in res:
            toks += len(r.hypotheses[0])
            f.write(" ".join(r.hypotheses[0]) + "\n")
    print(json.dumps({"seconds": seconds, "tokens": toks}))


def e2e_worker(argv):
    """Table 6's ctranslate2 side: raw text in, detokenized text out, as a user would write it."""
    model, spm_model, inp, out, compute, beam, vmap = argv
    import ctranslate2
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=spm_model)
    tr = ctranslate2.Translator(model, device="cpu", compute_type=compute, inter_threads=1, intra_threads=1)
    with open(inp, encoding="utf-8") as f:
        src = [sp.encode(l, out_type=str) for l in f.read().split("\n")[:-1]]
    res = tr.translate_batch(src, beam_size=int(beam), max_batch_size=32, batch_type="examples",
                             use_vmap=vmap == "1", length_penalty=1.0, return_scores=False)
    with open(out, "w", encoding="utf-8") as f:
        for r in res:
            f.write(sp.decode(r.hypotheses[0]) + "\n")


def interleaved(i, repeat, run):
    """run(engine) -> a figure, for Tern and ctranslate2 alternately, repeat times; the order flips
    from one configuration (i) and one repetition to the next, so a shared machine's load falls on
    both alike. Returns {engine: [figures]}."""
    got = {"tern": [], "ct2": []}
    for rep in range(repeat):
        for e in (["tern", "ct2"] if (i + rep) % 2 == 0 else ["ct2", "tern"]):
            got[e].append(run(e))
    return got


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def table5(args, models, refs, spm_model, pieces):
    t_name = models[0][0]
    rungs = [("float32", t_name, "float32", False), ("int8", t_name, "int8", False), ("+ vmap", t_name, "int8", True)]
    rungs += [(f"student {n}", n, "int8", True) for n, _ in models[1:]]
    dirs = dict(models)
    rows = []
    for i, (label, name, compute, vmap) in enumerate(rungs):
        ct2 = ct2_dir(args, name, dirs[name])
        outs = {e: os.path.join(args.workdir, f"t5-{i}-{e}.txt") for e in ("tern", "ct2")}
        tps = interleaved(i, args.repeat, lambda e: tern_greedy(args, dirs[name], vmap, compute, pieces, outs[e])
                          if e == "tern" else ct2_greedy(args, ct2, vmap, compute, pieces, outs[e]))
        with open(outs["tern"], encoding="utf-8") as a, open(outs["ct2"], encoding="utf-8") as b:
            la, lb = a.read().split("\n"), b.read().split("\n")
        same = sum(x == y for x, y in zip(la[:-1], lb[:-1]))
        row = dict(rung=label, model=name, compute=compute, vmap=vmap,
                   tern_tps=median(tps["tern"]), ct2_tps=median(tps["ct2"]), tern_runs=tps["tern"],
                   ct2_runs=tps["ct2"], tern_bleu=detok_bleu(spm_model, outs["tern"], refs),
                   ct2_bleu=detok_bleu(spm_model, outs["ct2"], refs), identical=same, lines=len(la) - 1)
        rows.append(row)
        log(json.dumps(row))
    print("\n### Table 5 analogue: greedy, 1 thread, batches of %d, %d lines of test_2016_flickr\n"
          % (args.batch_size, rows[0]["lines"]))
    print("| rung | Tern tokens/s | speed-up | BLEU | ctranslate2 tokens/s | speed-up | BLEU | Tern / ct2 | identical lines |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['rung']} | {r['tern_tps']:.0f} | {r['tern_tps'] / rows[0]['tern_tps']:.2f}× | {r['tern_bleu']:.2f} | "
              f"{r['ct2_tps']:.0f} | {r['ct2_tps'] / rows[0]['ct2_tps']:.2f}× | {r['ct2_bleu']:.2f} | "
              f"{r['tern_tps'] / r['ct2_tps']:.2f} | {r['identical']}/{r['lines']} |")
    return rows


def table6(args, models, refs, spm_model, raw):
    dirs = dict(models)
    t_name, s_name = models[0][0], args.optimized or models[-1][0]
    if s_name not in dirs:
        raise SystemExit(f"--optimized {s_name}: not one of the students ({', '.join(n for n, _ in models[1:])})")
    systems = [("baseline: teacher float32, beam 4", t_name, "float32", 4, False),
               (f"optimized: student {s_name}, int8, vmap, beam 4", s_name, "int8", 4, True),
               (f"optimized: student {s_name}, int8, vmap, greedy", s_name, "int8", 1, True)]
    rows = []
    for i, (label, name, compute, beam, vmap) in enumerate(systems):
        ct2 = ct2_dir(args, name, dirs[name])
        outs = {e: os.path.join(args.workdir, f"t6-{i}-{e}.txt") for e in ("tern", "ct2")}

        def run(e):
            if e == "tern":
                cmd = [args.tern, "translate", "-m", dirs[name], "-b", str(beam), "--length-penalty", "1.0",
                       "-t", "1", "-w", "1", "--compute-type", compute, "--max-batch-size", "32", "-q", raw, outs[e]]
                if vmap:
                    cmd[4:4] = ["--vmap", args.vmap]
            else:
                cmd = [sys.executable, os.path.abspath(__file__), "--e2e-worker", ct2,
                       os.path.join(dirs[name], "sentencepiece.model"), raw, outs[e], compute, str(beam),
                       "1" if vmap else "0"]
            t0 = time.perf_counter()
            bt.timed(cmd, os.path.join(args.workdir, "rss"), bt.clean_env())
            return time.perf_counter() - t0
        secs = interleaved(i, args.repeat, run)
        import sacrebleu
        bleu = {}
        for e in outs:
            with open(outs[e], encoding="utf-8") as f:
                bleu[e] = sacrebleu.corpus_bleu(f.read().split("\n")[:-1], [refs]).score
        row = dict(system=label, tern_s=median(secs["tern"]), ct2_s=median(secs["ct2"]), tern_runs=secs["tern"],
                   ct2_runs=secs["ct2"], tern_bleu=bleu["tern"], ct2_bleu=bleu["ct2"])
        rows.append(row)
        log(json.dumps(row))
    print("\n### Table 6 analogue: end to end (load + SentencePiece + translate + write), 1 thread, %d lines\n"
          % len(refs))
    print("| system | Tern seconds | BLEU | ctranslate2 seconds | BLEU | ct2 / Tern |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['system']} | {r['tern_s']:.2f} | {r['tern_bleu']:.2f} | {r['ct2_s']:.2f} | {r['ct2_bleu']:.2f} | "
              f"{r['ct2_s'] / r['tern_s']:.2f} |")
    print(f"\nspeed-up of the optimized system (beam 4) over the baseline: Tern {rows[0]['tern_s'] / rows[1]['tern_s']:.2f}×,"
          f" ctranslate2 {rows[0]['ct2_s'] / rows[1]['ct2_s']:.2f}×")
    return rows


def table_students(args, models, refs, spm_model, pieces):
    """Issue 27 point 2's speed bar: each student's target tokens/s over the teacher-sized model's,
    Tern, int8, one thread, greedy and beam 4 (length penalty 1.0), without and with the map."""
    rows = []
    for beam in (1, 4):
        for vmap in (False, True):
            tps = {n: [] for n, _ in models}
            outs = {n: os.path.join(args.workdir, f"ts-{n.replace(':', '-')}-{beam}-{int(vmap)}.txt") for n, _ in models}
            for rep in range(args.repeat):
                order = models if rep % 2 == 0 else models[::-1]
                for n, d in order:
                    tps[n].append(tern_greedy(args, d, vmap, "int8", pieces, outs[n], beam))
            base = median(tps[models[0][0]])
            for n, _ in models:
                row = dict(model=n, beam=beam, vmap=vmap, tps=median(tps[n]), runs=tps[n],
                           ratio=median(tps[n]) / base, bleu=detok_bleu(spm_model, outs[n], refs))
                rows.append(row)
                log(json.dumps(row))
    print("\n### Students' speed: Tern, int8, 1 thread, %d lines, batches of %d (median of %d)\n"
          % (len(refs), args.batch_size, args.repeat))
    print("| model | search | map | tokens/s | × teacher-sized | BLEU |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {'greedy' if r['beam'] == 1 else 'beam %d' % r['beam']} | {'vmap' if r['vmap'] else '—'} | "
              f"{r['tps']:.0f} | {r['ratio']:.2f}× | {r['bleu']:.2f} |")
    return rows


def table2(args, models, refs, raw):
    """The SDL paper's Table 2: the research system (an ensemble, beam 12) against the accelerated
    one (one distilled model, int8, beam 4, pruned), Tern only (ctranslate2 has no ensembles)."""
    dirs = dict(models)
    t_name = models[0][0]
    ens = []
    for m in args.ensemble:
        ens += ["-m", m]
    systems = [("research: ensemble of %d, float32, beam 12" % len(args.ensemble), ens, "float32", 12, []),
               ("accelerated: %s, int8, beam 4, prune width 5" % t_name, ["-m", dirs[t_name]], "int8", 4,
                ["--prune-width", "5"])]
    for n, d in models[1:]:
        systems.append(("accelerated: student %s, int8, beam 4, prune width 5" % n, ["-m", d], "int8", 4,
                        ["--prune-width", "5"]))
    words = sum(len(l.split()) for l in open(raw, encoding="utf-8").read().split("\n")[:-1])
    rows = []
    import sacrebleu
    for i, (label, margs, compute, beam, extra) in enumerate(systems):
        secs = []
        out = os.path.join(args.workdir, f"t2-{i}.txt")
        for rep in range(args.repeat):
            cmd = [args.tern, "translate", *margs, "-b", str(beam), "--length-penalty", "1.0", "-t", "1", "-w", "1",
                   "--compute-type", compute, "--max-batch-size", "32", "-q", *extra, raw, out]
            t0 = time.perf_counter()
            bt.timed(cmd, os.path.join(args.workdir, "rss"), bt.clean_env())
            secs.append(time.perf_counter() - t0)
        with open(out, encoding="utf-8") as f:
            bleu = sacrebleu.corpus_bleu(f.read().split("\n")[:-1], [refs]).score
        row = dict(system=label, seconds=median(secs), runs=secs, bleu=bleu, wpm=words / median(secs) * 60)
        rows.append(row)
        log(json.dumps(row))
    print("\n### SDL Table 2 analogue: research vs accelerated, 1 thread, %d lines (%d source words), end to end\n"
          % (len(refs), words))
    print("| system | BLEU | seconds | source words per minute | speed-up |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['system']} | {r['bleu']:.2f} | {r['seconds']:.2f} | {r['wpm']:,.0f} | "
              f"{rows[0]['seconds'] / r['seconds']:.1f}× |")
    return rows


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--ct2-worker":
        return ct2_worker(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "--e2e-worker":
        return e2e_worker(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--teacher", required=True, help="the teacher-sized model (float32 Tern directory)")
    ap.add_argument("--student", action="append", default=[], help="NAME=DIR, in ladder order")
    ap.add_argument("--ensemble", action="append", default=[], help="a member of the research system (table 2)")
    ap.add_argument("--optimized", help="the student of table 6's optimized system (default: the last)")
    ap.add_argument("--vmap", help="vocabulary map (default: WORKDIR/vmap.txt, built by tern vmap)")
    ap.add_argument("--lines", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--table", default="5,6")
    ap.add_argument("--json")
    ap.add_argument("--workdir", default="/tmp/tern-ladder")
    ap.add_argument("--tern", default=os.path.join(ROOT, "build", "tern"))
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    models = [("teacher", args.teacher)]
    for s in args.student:
        name, _, d = s.partition("=")
        if not d:
            raise SystemExit(f"--student {s}: NAME=DIR expected")
        models.append((name, d))
    spm_model = os.path.join(args.teacher, "sentencepiece.model")
    if not args.vmap:
        args.vmap = os.path.join(args.workdir, "vmap.txt")
        if not os.path.exists(args.vmap):
            run([args.tern, "vmap", "-m", args.teacher, "--source", os.path.join(DATA, "train.en"), "--target",
                 os.path.join(DATA, "train.de"), "-o", args.vmap])
    with open(os.path.join(DATA, "test_2016_flickr.en"), encoding="utf-8") as f:
        src = f.read().split("\n")[:args.lines]
    with open(os.path.join(DATA, "test_2016_flickr.de"), encoding="utf-8") as f:
        refs = f.read().split("\n")[:len(src)]
    raw = os.path.join(args.workdir, "test.en")
    with open(raw, "w", encoding="utf-8") as f:
        f.write("".join(l + "\n" for l in src))
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=spm_model)
    pieces = os.path.join(args.workdir, "test.pieces")
    with open(pieces, "w", encoding="utf-8") as f:
        f.write("".join(" ".join(sp.encode(l, out_type=str)) + "\n" for l in src))
    log("machine:", json.dumps(bt.machine()))
    out = {"machine": bt.machine(), "models": models}
    tables = args.table.split(",")
    if "5" in tables:
        out["table5"] = table5(args, models, refs, spm_model, pieces)
    if "6" in tables:
        out["table6"] = table6(args, models, refs, spm_model, raw)
    if "s" in tables:
        out["students"] = table_students(args, models, refs, spm_model, pieces)
    if "2" in tables:
        if not args.ensemble:
            raise SystemExit("--table 2 needs the research system's members (--ensemble DIR, twice or more)")
        out["table2"] = table2(args, models, refs, raw)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
