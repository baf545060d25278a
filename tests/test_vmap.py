"""`tern vmap` (target vocabulary reduction, CTranslate2 paper section 3.7) against a Python
re-implementation of the same aligner and map: IBM Model 2 with fast_align's diagonal prior,
trained by EM in float64 (the same arithmetic, in the same order, so the map is equal byte for
byte), Viterbi links, then per source n-gram the top-N aligned target pieces and the top-K most
frequent target pieces. Pieces come from Python's sentencepiece on the shipped model's
SentencePiece model."""
import json
import math
import os
import subprocess
from collections import Counter

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "en-de")


def ref_align(src, tgt, iterations, p0, lam):
    """Returns t as a dict {(e, f): prob} (e = -1 for NULL), EM as align.c does it."""
    index = {}
    for s, t in zip(src, tgt):
        if not s or not t:
            continue
        for f in t:
            for i in range(len(s) + 1):
                key = (s[i - 1] if i else -1, f)
                if key not in index:
                    index[key] = len(index)
    keys = list(index)
    prob = [1.0] * len(keys)
    for _ in range(iterations):
        cnt = [0.0] * len(keys)
        for s, t in zip(src, tgt):
            m, n = len(s), len(t)
            if not m or not n:
                continue
            for j, f in enumerate(t):
                ids = [index[(s[i - 1] if i else -1, f)] for i in range(m + 1)]
                w = [0.0] * (m + 1)
                z = 0.0
                for i in range(1, m + 1):
                    w[i] = math.exp(-lam * abs(i / m - (j + 1) / n))
                    z += w[i]
                w[0] = p0 * prob[ids[0]]
                total = w[0]
                for i in range(1, m + 1):
                    w[i] = (1 - p0) * w[i] / z * prob[ids[i]]
                    total += w[i]
                if not total > 0:
                    continue
                for i in range(m + 1):
                    cnt[ids[i]] += w[i] / total
        tot = {}
        for k, (e, _) in enumerate(keys):
            tot[e] = tot.get(e, 0.0) + cnt[k]
        prob = [cnt[k] / tot[e] if tot[e] > 0 else 0.0 for k, (e, _) in enumerate(keys)]
    return {k: prob[i] for k, i in index.items()}


def ref_viterbi(t, s, tg, p0, lam):
    m, n = len(s), len(tg)
    out = []
    for j, f in enumerate(tg):
        a = -1
        if m:
            z = 0.0
            for i in range(1, m + 1):
                z += math.exp(-lam * abs(i / m - (j + 1) / n))
            best = p0 * t.get((-1, f), 0.0)
            for i in range(1, m + 1):
                v = (1 - p0) * math.exp(-lam * abs(i / m - (j + 1) / n)) / z * t.get((s[i - 1], f), 0.0)
                if v > best:
                    best, a = v, i - 1
        out.append(a)
    return out


def ref_vmap(src, tgt, vocab, max_n=3, top_n=20, top_k=200, min_count=2, iterations=5, p0=0.08, lam=4.0):
    t = ref_align(src, tgt, iterations, p0, lam)
    freq = Counter(f for tg in tgt for f in tg)
    links, pairs = Counter(), Counter()
    for s, tg in zip(src, tgt):
        if not s or not tg:
            continue
        a = ref_viterbi(t, s, tg, p0, lam)
        for n in range(1, max_n + 1):
            seen = set()
            for i in range(len(s) - n + 1):
                g = tuple(s[i:i + n])
                if g not in seen:
                    seen.add(g)
                    pairs[g] += 1
                for j, f in enumerate(tg):
                    if i <= a[j] < i + n:
                        links[(g, f)] += 1
    always = sorted(freq, key=lambda f: (-freq[f], f))[:top_k]
    lines = ["\t" + " ".join(vocab[f] for f in always)]
    by_gram = {}
    for (g, f), c in links.items():
        by_gram.setdefault(g, []).append((-c, f))
    for g in sorted(by_gram, key=lambda g: (len(g), g)):
        if len(g) > 1 and pairs[g] < min_count:
            continue
        tops = [f for _, f in sorted(by_gram[g])[:top_n]]
        lines.append(" ".join(vocab[e] for e in g) + "\t" + " ".join(vocab[f] for f in tops))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def corpus(data_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("vmap")
    n = 600
    out = {}
    for lang in ("en", "de"):
        with open(os.path.join(data_dir, "multi30k", f"train.{lang}"), encoding="utf-8") as f:
            lines = [next(f) for _ in range(n)]
        lines[5] = "\n"  # an empty source / target line takes no part in the alignment
        p = d / f"train.{lang}"
        p.write_text("".join(lines), encoding="utf-8")
        out[lang] = str(p)
    out["dir"] = d
    return out


@pytest.mark.parametrize("opts", [
    {},
    {"top_n": 3, "top_k": 50, "min_count": 1, "lam": 0.0},
    {"max_n": 1, "iterations": 2, "top_k": 0},
])
def test_vmap_equals_reference(tern_bin, corpus, opts):
    spm = pytest.importorskip("sentencepiece")
    sp = spm.SentencePieceProcessor(model_file=os.path.join(MODEL, "sentencepiece.model"))
    with open(os.path.join(MODEL, "shared_vocabulary.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    ids = {p: i for i, p in enumerate(vocab)}

    def enc(path):
        with open(path, encoding="utf-8") as f:
            return [[ids.get(p, ids["<unk>"]) for p in sp.encode(line.rstrip("\n"), out_type=str)] for line in f]

    src, tgt = enc(corpus["en"]), enc(corpus["de"])
    args = {"max_n": "--max-ngram", "top_n": "--top-n", "top_k": "--top-k", "min_count": "--min-count",
            "iterations": "--iterations", "lam": "--tension"}
    out = str(corpus["dir"] / "vmap.txt")
    cmd = [tern_bin, "vmap", "-m", MODEL, "--source", corpus["en"], "--target", corpus["de"], "-o", out]
    for k, v in opts.items():
        cmd += [args[k], str(v)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "599 pairs aligned" in r.stderr, r.stderr
    with open(out, encoding="utf-8") as f:
        got = f.read()
    want = ref_vmap(src, tgt, vocab, **opts)
    assert got.count("\n") == want.count("\n")
    assert got == want


def test_vmap_errors(tern_bin, corpus, tmp_path):
    short = tmp_path / "short.de"
    short.write_text("ein Hund\n", encoding="utf-8")
    r = subprocess.run([tern_bin, "vmap", "-m", MODEL, "--source", corpus["en"], "--target", str(short), "-o",
                        str(tmp_path / "v.txt")], capture_output=True, text=True)
    assert r.returncode == 1
    assert "line counts differ" in r.stderr and str(short) in r.stderr
    assert not (tmp_path / "v.txt").exists()
    r = subprocess.run([tern_bin, "vmap", "-m", MODEL, "--source", corpus["en"]], capture_output=True, text=True)
    assert r.returncode == 2 and "needs -m MODEL" in r.stderr
    r = subprocess.run([tern_bin, "vmap", "-m", MODEL, "--source", corpus["en"], "--target", corpus["de"],
                        "-o", str(tmp_path / "v.txt"), "--top-n", "0"], capture_output=True, text=True)
    assert r.returncode == 2 and "--top-n" in r.stderr
