#!/usr/bin/env python3
"""Byte-identity of a refactor: what one `tern` binary outputs, to compare with another's.

    bench/identity.py --tern OLD/tern --out /tmp/id-old
    bench/identity.py --tern build/tern --out /tmp/id-new --compare /tmp/id-old

Records, under OUT (each file's SHA-256 in OUT/manifest.txt, less the clock's
fields: digest()):
  - translations of the first 300 lines of Multi30k test_2016_flickr.en by the shipped model
    (models/en-de), greedy and beam 4, as stored (int8) and in float32;
  - with --bench-model DIR (bench/bench_translate.py's Transformer-base, WORKDIR/tern-bench/model)
    the same on its first 100 token-id lines (WORKDIR/tern-bench/src.ids or the pieces file);
  - training: 50 updates of each family (Transformer 2+2 d 64, attention GRU 32/32, GNMT 2 layers
    32) from seed 1 on a 3,000-line Multi30k slice, one thread, the checkpoint files' bytes;
    then each checkpoint translates 100 validation lines greedy and beam 4 (float32 and int8).
The vocabulary (SentencePiece) and the training caches are built once, by the first binary run, in
OUT/../identity-shared, so that both runs train on the same bytes.
--compare DIR prints each file as same/DIFFERENT and exits 1 on any difference.
"""
import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.environ.get("TERN_DATA", os.path.join(ROOT, "..", "shared", "data"))


def run(cmd, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode:
        sys.exit(f"failed ({r.returncode}): {' '.join(map(str, cmd))}\n{r.stderr[-2000:]}")
    return r


def head(src, dst, n, skip=0):
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as g:
        for i, line in enumerate(f):
            if i >= skip + n:
                break
            if i >= skip:
                g.write(line)


def digest(path):
    """SHA-256 of a file's bytes, less what records the clock: a training curve's last column
    (elapsed seconds) and a safetensors file's __metadata__ (the trainer's wall time)."""
    data = open(path, "rb").read()
    if path.endswith(".tsv"):
        data = b"\n".join(l.rsplit(b"\t", 1)[0] for l in data.split(b"\n"))
    elif path.endswith(".safetensors"):
        n = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8:8 + n])
        header.pop("__metadata__", None)
        data = json.dumps(header, sort_keys=True).encode() + data[8 + n:]
    return hashlib.sha256(data).hexdigest()


def translate(tern, model, inp, out, extra):
    run([tern, "translate", "-m", model, "-t", 1, *extra, inp, out])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tern", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--bench-model", help="bench_translate.py's model directory (optional)")
    ap.add_argument("--bench-input", help="its input: token-id or piece lines (with --bench-model)")
    ap.add_argument("--compare", help="a previous OUT: report differences")
    a = ap.parse_args()
    tern, out = os.path.abspath(a.tern), os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    shared = os.path.join(os.path.dirname(out), "identity-shared")
    os.makedirs(shared, exist_ok=True)
    m30k = os.path.join(DATA, "multi30k")
    test_en = os.path.join(shared, "test300.en")
    head(os.path.join(m30k, "test_2016_flickr.en"), test_en, 300)
    files = []

    en_de = os.path.join(ROOT, "models", "en-de")
    for name, extra in (("greedy", ["-b", 1]), ("beam4", ["-b", 4])):
        for ct in ("auto", "float32"):
            f = os.path.join(out, f"en-de.{name}.{ct}.txt")
            # the length penalty given: the model's generation_config.json (1.0) came after the base
            translate(tern, en_de, test_en, f, [*extra, "--length-penalty", 0, "--compute-type", ct])
            files.append(f)
    if a.bench_model:
        inp = os.path.join(shared, "bench100.txt")
        head(a.bench_input, inp, 100)
        for name, extra in (("greedy", ["-b", 1]), ("beam4", ["-b", 4])):
            for ct in ("float32", "int8"):
                f = os.path.join(out, f"bench.{name}.{ct}.txt")
                translate(tern, a.bench_model, inp, f, [*extra, "--compute-type", ct, "--pretokenized"])
                files.append(f)

    # training data, vocabulary (built once)
    for side in ("en", "de"):
        head(os.path.join(m30k, f"train.{side}"), os.path.join(shared, f"train.{side}"), 3000)
        head(os.path.join(m30k, f"val.{side}"), os.path.join(shared, f"valid.{side}"), 100)
    vocab = os.path.join(shared, "vocab")
    if not os.path.exists(os.path.join(vocab, "config.json")) and not os.path.exists(os.path.join(vocab, "source.spm")):
        run([tern, "vocab", "--model-dir", vocab, "--source", os.path.join(shared, "train.en"), "--target",
             os.path.join(shared, "train.de"), "--vocab-size", 1000, "-t", 1])
    common = ["--vocab", vocab, "-t", 1, "--no-plot", "-q", "--seed", 1, "--train-src", os.path.join(shared, "train.en"),
              "--train-tgt", os.path.join(shared, "train.de"), "--max-tokens", 1500, "--max-updates", 50,
              "--no-bleu", "--dropout", 0.1, "--lr", "1e-3", "--warmup", 20]
    families = {
        "transformer": ["--layers", 2, "--d-model", 64, "--ff", 128, "--heads", 4],
        "rnn-gru": ["--architecture", "rnn-gru", "--emb-dim", 32, "--rnn-dim", 32],
        "gnmt": ["--architecture", "gnmt", "--layers", 2, "--hidden", 32, "--init-uniform", 0.1],
    }
    for fam, args in families.items():
        save = os.path.join(out, f"train-{fam}")
        shutil.rmtree(save, ignore_errors=True)
        cache = os.path.join(shared, f"cache-{fam}")
        run([tern, "train", *common, *args, "--cache-dir", cache, "--save-dir", save], timeout=1800)
        ck = os.path.join(save, sorted(d for d in os.listdir(save) if d.startswith("checkpoint-"))[-1])
        for fn in ("model.safetensors", "trainer_state.safetensors", "config.json"):
            files.append(os.path.join(ck, fn))
        files.append(os.path.join(save, "train_curve.tsv"))
        for name, extra in (("greedy", ["-b", 1]), ("beam4", ["-b", 4])):
            for ct in ("float32", "int8"):
                f = os.path.join(out, f"{fam}.{name}.{ct}.txt")
                translate(tern, ck, os.path.join(shared, "valid.en"), f, [*extra, "--compute-type", ct])
                files.append(f)

    with open(os.path.join(out, "manifest.txt"), "w") as g:
        for f in files:
            g.write(f"{digest(f)}  {os.path.relpath(f, out)}\n")
    print(f"{len(files)} files recorded in {out}/manifest.txt")
    if a.compare:
        old = dict(l.split("  ", 1)[::-1] for l in open(os.path.join(a.compare, "manifest.txt")).read().split("\n") if l)
        new = dict(l.split("  ", 1)[::-1] for l in open(os.path.join(out, "manifest.txt")).read().split("\n") if l)
        diff = 0
        for k in sorted(set(old) | set(new)):
            same = old.get(k) == new.get(k)
            diff += not same
            print(f"{'same     ' if same else 'DIFFERENT'} {k}")
        print(f"{len(new) - diff} of {len(set(old) | set(new))} identical")
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
