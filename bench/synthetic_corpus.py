#!/usr/bin/env python3
"""A synthetic parallel corpus of N pairs for the streaming measurements of docs/training.md
("Streaming: corpora larger than memory"): Multi30k's training pairs sampled with replacement and
perturbed so that few lines repeat — on each side independently, every word dropped with
probability 0.1 and each adjacent pair of words swapped with probability 0.1 (a line keeps at
least one word). Seeded; written to OUT.en and OUT.de (keep them out of the repository: /tmp).

usage: python bench/synthetic_corpus.py N OUT [--data DIR] [--seed S]
  e.g. python bench/synthetic_corpus.py 20000000 /tmp/syn20M
"""
import argparse
import os
import random


def perturb(words, rnd):
    out = [w for w in words if rnd.random() >= 0.1] or words[:1]
    i = 0
    while i + 1 < len(out):
        if rnd.random() < 0.1:
            out[i], out[i + 1] = out[i + 1], out[i]
            i += 2
        else:
            i += 1
    return " ".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("n", type=int)
    ap.add_argument("out")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--data", default=os.environ.get("TERN_DATA") or os.path.join(root, "..", "shared", "data"))
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.n < 1:
        ap.error("N must be >= 1")
    m = os.path.join(a.data, "multi30k")
    with open(os.path.join(m, "train.en"), encoding="utf-8") as f:
        en = [line.split() for line in f]
    with open(os.path.join(m, "train.de"), encoding="utf-8") as f:
        de = [line.split() for line in f]
    assert len(en) == len(de)
    pairs = [(e, d) for e, d in zip(en, de) if e and d]
    rnd = random.Random(a.seed)
    with open(a.out + ".en", "w", encoding="utf-8") as fe, open(a.out + ".de", "w", encoding="utf-8") as fd:
        be, bd = [], []
        for i in range(a.n):
            e, d = pairs[rnd.randrange(len(pairs))]
            be.append(perturb(e, rnd))
            bd.append(perturb(d, rnd))
            if len(be) == 65536:
                fe.write("\n".join(be) + "\n")
                fd.write("\n".join(bd) + "\n")
                be, bd = [], []
        if be:
            fe.write("\n".join(be) + "\n")
            fd.write("\n".join(bd) + "\n")


if __name__ == "__main__":
    main()
