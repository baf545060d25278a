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


# ------------------------------------------------------------------------ translating with a map

def _run(args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, timeout=600, **kw)
    assert r.returncode == 0, r.stderr
    return r


def _test_lines(data_dir, n):
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        return [next(f) for _ in range(n)]


@pytest.mark.parametrize("beam", [1, 5])
@pytest.mark.parametrize("ctype", ["float32", "int8"])
def test_full_map_changes_nothing(tern_bin, data_dir, tmp_path, beam, ctype):
    """A map whose always-candidates are every piece gives the very same translations."""
    with open(os.path.join(MODEL, "shared_vocabulary.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    full = tmp_path / "full.txt"
    full.write_text("\t" + " ".join(vocab) + "\n", encoding="utf-8")
    src = tmp_path / "src.en"
    src.write_text("".join(_test_lines(data_dir, 120)) + "\n\xff bad bytes\n", encoding="utf-8",
                   errors="surrogateescape")
    base = [tern_bin, "translate", "-q", "-m", MODEL, "-b", str(beam), "--compute-type", ctype, str(src)]
    plain = _run(base).stdout
    mapped = _run(base + ["--vmap", str(full)]).stdout
    assert plain.count("\n") == 122
    assert mapped == plain


def _candidates(rules, always, pieces, max_n=3):
    c = set(always)
    for n in range(1, max_n + 1):
        for i in range(len(pieces) - n + 1):
            c |= set(rules.get(" ".join(pieces[i:i + n]), ()))
    return c


def _read_map(path):
    rules = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            k, v = line.rstrip("\n").split("\t")
            rules[k] = v.split()
    return rules, rules.pop("")


@pytest.fixture(scope="module")
def shipped_map(tern_bin, data_dir, tmp_path_factory):
    """A small map of the shipped model built once from Multi30k train (top-k 20, top-n 5, 8,000
    pairs): (path, rules, always, SentencePiece processor)."""
    spm = pytest.importorskip("sentencepiece")
    sp = spm.SentencePieceProcessor(model_file=os.path.join(MODEL, "sentencepiece.model"))
    D = os.path.join(data_dir, "multi30k")
    vm = tmp_path_factory.mktemp("shipped_map") / "vmap.txt"
    _run([tern_bin, "vmap", "-q", "-m", MODEL, "--source", os.path.join(D, "train.en"), "--target",
          os.path.join(D, "train.de"), "-o", str(vm), "--top-k", "20", "--top-n", "5", "--max-pairs", "8000"])
    rules, always = _read_map(vm)
    return vm, rules, always, sp


def _piece_file(sp, lines, path):
    """The lines as the shipped model's pieces, one sentence a line, written to path: the pieces."""
    pieces = [sp.encode(l.rstrip("\n"), out_type=str) for l in lines]
    path.write_text("".join(" ".join(p) + "\n" for p in pieces), encoding="utf-8")
    return pieces


@pytest.mark.parametrize("beam", [1, 4])
def test_output_only_uses_candidates(tern_bin, data_dir, tmp_path, shipped_map, beam):
    """Each sentence alone in its batch: every output piece is a candidate of its own source."""
    vm, rules, always, sp = shipped_map
    lines = _test_lines(data_dir, 150)
    src = tmp_path / "src.pieces"
    pieces = _piece_file(sp, lines, src)
    out = _run([tern_bin, "translate", "-q", "-m", MODEL, "--pretokenized", "-b", str(beam), "--max-batch-size",
                "1", "--vmap", str(vm), str(src)]).stdout.split("\n")[:-1]
    plain = _run([tern_bin, "translate", "-q", "-m", MODEL, "--pretokenized", "-b", str(beam), "--max-batch-size",
                  "1", str(src)]).stdout.split("\n")[:-1]
    assert len(out) == len(lines)
    specials = {"<unk>", "<s>", "</s>"}
    outside_plain = 0
    for p, o, q in zip(pieces, out, plain):
        cand = _candidates(rules, always, p) | specials
        assert set(o.split()) <= cand, (p, o)
        outside_plain += not set(q.split()) <= cand
    # the map is small enough to matter: without it, some outputs leave the candidates
    assert outside_plain > 0


def test_same_as_ctranslate2_use_vmap(tern_bin, spm_model, data_dir, tmp_path):
    """CTranslate2 reads the map Tern writes (vmap.txt in its model directory, use_vmap=True) and
    both engines decode over the same candidates: greedy outputs identical, sentence by sentence."""
    import shutil
    ctranslate2 = pytest.importorskip("ctranslate2")
    model = tmp_path / "model"
    shutil.copytree(spm_model["dir"], model)
    D = os.path.join(data_dir, "multi30k")
    _run([tern_bin, "vmap", "-q", "-m", str(model), "--source", os.path.join(D, "train.en"), "--target",
          os.path.join(D, "train.de"), "-o", str(model / "vmap.txt"), "--top-k", "30", "--top-n", "8",
          "--max-pairs", "5000"])
    lines = [l.rstrip("\n") for l in _test_lines(data_dir, 60)]
    sp = spm_model["sp"]
    ct2 = ctranslate2.Translator(str(model), device="cpu", intra_threads=1)
    want = []
    for line in lines:
        r = ct2.translate_batch([sp.encode(line, out_type=str)], beam_size=1, use_vmap=True,
                                max_decoding_length=64)
        want.append(sp.decode(r[0].hypotheses[0]))
    free = []
    for line in lines[:10]:
        r = ct2.translate_batch([sp.encode(line, out_type=str)], beam_size=1, max_decoding_length=64)
        free.append(sp.decode(r[0].hypotheses[0]))
    src = tmp_path / "src.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    got = _run([tern_bin, "translate", "-q", "-m", str(model), "--use-vmap", "-b", "1", "--max-batch-size", "1",
                "--max-decoding-length", "64", str(src)]).stdout.split("\n")[:-1]
    assert got == want
    assert want[:10] != free  # the map changed CTranslate2's outputs too


def test_vmap_load_errors(tern_bin, tmp_path, data_dir):
    src = tmp_path / "s.en"
    src.write_text("A dog .\n", encoding="utf-8")
    bad = tmp_path / "bad.txt"
    bad.write_text("\t▁Ein\n▁dog ▁Hund\n", encoding="utf-8")
    r = subprocess.run([tern_bin, "translate", "-q", "-m", MODEL, "--vmap", str(bad), str(src)], capture_output=True,
                       text=True)
    assert r.returncode == 1 and f"{bad}: line 2: no TAB" in r.stderr
    r = subprocess.run([tern_bin, "translate", "-q", "-m", MODEL, "--use-vmap", str(src)], capture_output=True,
                       text=True)
    assert r.returncode == 1 and "vmap.txt: vocabulary map not found" in r.stderr
    odd = tmp_path / "odd.txt"
    odd.write_text("\t▁Ein nosuchpiece\n▁nosuch\t▁Hund\n▁dog\t▁Hund\n", encoding="utf-8")
    r = subprocess.run([tern_bin, "translate", "-m", MODEL, "--vmap", str(odd), str(src)], capture_output=True,
                       text=True)
    assert r.returncode == 0 and r.stdout.count("\n") == 1
    assert "1 rule(s) with source pieces not in the model's vocabulary" in r.stderr
    assert "1 target piece(s) not in the target vocabulary" in r.stderr


def test_search_processors_with_maps_on_shipped_model(tern_bin, data_dir, tmp_path, shipped_map):
    """Search processors under a map (beam 4, the first 40 lines of test_2016_flickr, pieces): a full
    map gives byte-identical output for a target prefix (the reference's first two pieces),
    constraints (the reference's longest piece sequence of a capitalized word missing from the plain
    output) and restrict-to (the plain 3-best); a map from `tern vmap` (one sentence a batch)
    reproduces every prefix, has every constraint, returns only given hypotheses, and outputs
    nothing outside the sentence's candidates plus the processors' pieces (tests/test_vmap_procs.py
    checks scores on a peer model)."""
    vm, rules, always, sp = shipped_map
    with open(os.path.join(MODEL, "shared_vocabulary.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    full = tmp_path / "full.txt"
    full.write_text("\t" + " ".join(vocab) + "\n", encoding="utf-8")
    lines = _test_lines(data_dir, 40)
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.de"), encoding="utf-8") as f:
        refs = [next(f).rstrip("\n") for _ in range(40)]
    src = tmp_path / "src.pieces"
    pieces = _piece_file(sp, lines, src)
    base = [tern_bin, "translate", "-q", "-m", MODEL, "--pretokenized", "-b", "4"]
    nbest = _run(base + ["-n", "3", str(src)]).stdout.splitlines()
    plain = [h for i, h, _ in (r.split(" ||| ") for r in nbest[::3])]
    prefix = [sp.encode(r, out_type=str)[:2] for r in refs]
    cons = []
    for r, p in zip(refs, plain):
        words = [w.strip(".,") for w in r.split() if w[:1].isupper() and w.strip(".,") not in sp.decode(p.split())]
        cons.append([" ".join(sp.encode(max(words, key=len), out_type=str))] if words else [])
    (tmp_path / "prefix.txt").write_text("".join(" ".join(p) + "\n" for p in prefix), encoding="utf-8")
    (tmp_path / "cons.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cons), encoding="utf-8")
    (tmp_path / "restrict.txt").write_text("".join(r.rsplit(" ||| ", 1)[0] + " ||| 0\n" for r in nbest),
                                           encoding="utf-8")
    given = {}
    for r in nbest:
        i, h, _ = r.split(" ||| ")
        given.setdefault(int(i), set()).add(h)
    procs = {"prefix": ["--target-prefix", str(tmp_path / "prefix.txt")],
             "constraints": ["--constraints", str(tmp_path / "cons.jsonl")],
             "restrict": ["--restrict-to", str(tmp_path / "restrict.txt"), "-n", "2", "--no-early-stop"]}
    specials = {"<unk>", "<s>", "</s>"}
    outside = {k: 0 for k in procs}
    for kind, args in procs.items():
        free = _run(base + args + [str(src)]).stdout
        assert _run(base + args + ["--vmap", str(full), str(src)]).stdout == free, kind
        out = _run(base + args + ["--max-batch-size", "1", "--vmap", str(vm), str(src)]).stdout.splitlines()
        for k, o in enumerate(out):
            if kind == "restrict":
                i, h, _ = o.split(" ||| ")
                i = int(i)
                assert h in given[i], f"line {i}: '{h}' is not a given hypothesis"
                need = {t for g in given[i] for t in g.split()}
            else:
                i, h = k, o
                need = set(prefix[i]) if kind == "prefix" else {t for c in cons[i] for t in c.split()}
            cand = _candidates(rules, always, pieces[i]) | specials
            assert set(h.split()) <= cand | need, (kind, i, h)
            outside[kind] += not need <= cand
            if kind == "prefix":
                assert h.split()[:2] == prefix[i], f"line {i}: prefix {prefix[i]} not reproduced: {h}"
            if kind == "constraints":
                for c in cons[i]:
                    assert f" {c} " in f" {h} ", f"line {i}: constraint '{c}' missing from '{h}'"
        assert len(out) == (80 if kind == "restrict" else 40)
    # the processors' pieces are often outside the map's candidates (the check is not vacuous)
    print(f"\nsentences whose processor pieces leave the map's candidates: {outside}")
    assert min(outside.values()) >= 5
