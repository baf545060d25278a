"""Vocabularies, the training data cache and checkpoints, end to end (docs/training-data.md).

* `tern vocab` on a Multi30k slice (joint unigram; per-side BPE): Python's sentencepiece loads the
  models, the JSON vocabularies are their pieces in id order, the training is deterministic, and
  the token ids that Tern's data pipeline stores in its cache (read here with an independent numpy
  reader of the documented format) equal Python's `encode` for every line.
* The skipped-pair counts and the number of batches per epoch equal a Python re-computation of
  the documented rules (fairseq's greedy cut by `(B + 1) * max(S, T) > max_tokens`).
* A checkpoint written after training a tiny model (tests/tools/train_data_driver.c) loads in
  `tern translate` and `tern rescore`, and rescore's log-probabilities equal the training model's
  (relative 1e-5); its trainer state holds the moments and the scalars.
* `tern average` of two converted random models (tests/peer/make_models.py + `tern convert`) and
  of the last two checkpoints equals the float64 mean of the inputs, bit for bit, and loads in
  `tern translate`; averaging a model with itself translates exactly as the model.

Binaries: $TERN_BIN (default build/tern) and train_data_driver beside it in tests/tools/.
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
from train_torch_ref import st_read  # noqa: E402  (numpy-only safetensors reader)

TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern")
DRIVER = os.path.join(os.path.dirname(TERN), "tests", "tools", "train_data_driver")
spm = pytest.importorskip("sentencepiece")
N_TRAIN = 3000


# One OpenMP thread: the tiny models gain nothing from more, and libgomp's spinning threads slow a
# busy 2-core machine down by an order of magnitude.
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def run(*args, **kw):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, env=ENV, **kw)
    return r


def ok(*args, **kw):
    r = run(*args, **kw)
    assert r.returncode == 0, f"{args[:2]} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r


def read_cache(path):
    """The documented cache format: header, index of (first token, source length, target length),
    int32 tokens. Returns (header dict, [(src ids, tgt ids)])."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"TERNDATA"
    version, hbytes = struct.unpack_from("<II", data, 8)
    (h, n, io, to, nt, size, su, tu) = struct.unpack_from("<8Q", data, 16)
    assert (version, hbytes, io, to, size) == (1, 128, 128, 128 + 16 * n, len(data))
    assert len(data) == to + 4 * nt
    index = np.frombuffer(data, dtype=np.dtype([("first", "<u8"), ("ns", "<u4"), ("nt", "<u4")]), count=n,
                          offset=io)
    tokens = np.frombuffer(data, dtype="<i4", count=nt, offset=to)
    pairs = []
    for first, ns, ntk in index.tolist():
        pairs.append((tokens[first:first + ns].tolist(), tokens[first + ns:first + ns + ntk].tolist()))
    return {"pairs": n, "tokens": nt, "src_unk": su, "tgt_unk": tu}, pairs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, data_dir):
    d = tmp_path_factory.mktemp("traindata")
    files = {}
    for split, name, n in (("train", "train", N_TRAIN), ("val", "valid", 200)):
        for lang in ("en", "de"):
            with open(os.path.join(data_dir, "multi30k", f"{split}.{lang}"), encoding="utf-8") as f:
                lines = [next(f) for _ in range(n)]
            p = d / f"{name}.{lang}"
            p.write_text("".join(lines), encoding="utf-8")
            files[f"{name}.{lang}"] = p
    return d, files


@pytest.fixture(scope="module")
def joint(corpus):
    d, f = corpus
    vdir = d / "vocab-joint"
    ok(TERN, "vocab", "--model-dir", vdir, "--source", f["train.en"], "--target", f["train.de"],
       "--vocab-size", 800, "--threads", 1)
    return vdir


def lines_of(path):
    with open(path, encoding="utf-8") as f:
        return [l.rstrip("\r\n") for l in f]


def test_vocab_joint_model_dir(corpus, joint):
    d, f = corpus
    sp = spm.SentencePieceProcessor(model_file=str(joint / "sentencepiece.model"))
    assert sp.get_piece_size() == 800
    pieces = [sp.id_to_piece(i) for i in range(800)]
    assert pieces[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2, 3)
    assert json.loads((joint / "shared_vocabulary.json").read_text(encoding="utf-8")) == pieces
    cfg = json.loads((joint / "config.json").read_text())
    assert (cfg["unk_token"], cfg["bos_token"], cfg["eos_token"], cfg["decoder_start_token"], cfg["pad_token"]) == \
        ("<unk>", "<s>", "</s>", "<s>", "<pad>")
    assert cfg["add_source_eos"] is True and cfg["add_source_bos"] is False and cfg["format"] == "tern"

    # Tern's encoding (the ids stored in the cache) equals Python's, line for line
    cache = d / "joint.cache"
    st = json.loads(ok(DRIVER, "stats", joint, f["train.en"], f["train.de"], cache).stdout)
    assert st["rebuilt"] == 1 and st["pairs"] == N_TRAIN
    hdr, pairs = read_cache(cache)
    src, tgt = lines_of(f["train.en"]), lines_of(f["train.de"])
    mism = [i for i in range(N_TRAIN) if pairs[i] != (sp.encode(src[i]), sp.encode(tgt[i]))]
    assert not mism, f"{len(mism)} lines differ, first {mism[0]}: {pairs[mism[0]]} vs {sp.encode(src[mism[0]])}"
    assert st["cache_bytes"] == os.path.getsize(cache) == 128 + 16 * N_TRAIN + 4 * hdr["tokens"]
    assert hdr["src_unk"] == st["src_unk"] == 0  # character coverage 1.0: nothing unknown
    st2 = json.loads(ok(DRIVER, "stats", joint, f["train.en"], f["train.de"], cache).stdout)
    assert st2["rebuilt"] == 0 and st2["batches"] == st["batches"]


def py_filter_and_batches(pairs, max_len, ratio, max_tokens):
    """The documented rules: S = source + 1 (</s>), T = target + 1; empty, too long, ratio, in order;
    batches cut from (S, T)-sorted pairs when (B + 1) * max(S, T) would pass max_tokens."""
    c = dict(empty=0, too_long=0, bad_ratio=0, kept=0, src_tokens=0, tgt_tokens=0)
    shapes = []
    for s, t in pairs:
        ns, nt = len(s), len(t)
        S, T = ns + 1, nt + 1
        if ns == 0 or nt == 0:
            c["empty"] += 1
        elif S > max_len or T > max_len:
            c["too_long"] += 1
        elif ratio > 0 and max(ns, nt) > np.float32(ratio) * min(ns, nt):
            c["bad_ratio"] += 1
        else:
            c["kept"] += 1
            c["src_tokens"] += S
            c["tgt_tokens"] += T
            shapes.append((S, T))
    shapes.sort()
    batches, B, mS, mT, maxB = 0, 0, 0, 0, 0
    for S, T in shapes:
        nS, nT = max(mS, S), max(mT, T)
        if B > 0 and (B + 1) * max(nS, nT) > max_tokens:
            batches += 1
            maxB = max(maxB, B)
            B, mS, mT = 1, S, T
        else:
            B, mS, mT = B + 1, nS, nT
    batches += 1
    maxB = max(maxB, B)
    return c, batches, maxB


@pytest.mark.parametrize("max_len,ratio,max_tokens", [(256, 9.0, 4096), (16, 1.5, 300), (12, 0.0, 1000)])
def test_filters_and_batches_match_rules(corpus, joint, max_len, ratio, max_tokens):
    d, f = corpus
    cache = d / "joint.cache"
    st = json.loads(ok(DRIVER, "stats", joint, f["train.en"], f["train.de"], cache, max_len, ratio, max_tokens,
                       5).stdout)
    _, pairs = read_cache(cache)
    c, nb, maxB = py_filter_and_batches(pairs, max_len, ratio, max_tokens)
    for k, v in c.items():
        assert st[k] == v, (k, st[k], v)
    assert st["batches"] == nb and st["max_B"] == maxB
    assert st["max_src_tokens"] <= max_tokens and st["max_tgt_tokens"] <= max_tokens
    if max_len == 16:
        assert c["too_long"] > 0 and c["bad_ratio"] > 0
    # seeded: the same seed gives the same first batch, another seed another one
    again = json.loads(ok(DRIVER, "stats", joint, f["train.en"], f["train.de"], cache, max_len, ratio, max_tokens,
                          5).stdout)
    other = json.loads(ok(DRIVER, "stats", joint, f["train.en"], f["train.de"], cache, max_len, ratio, max_tokens,
                          6).stdout)
    assert again["first_batch"] == st["first_batch"] and other["first_batch"] != st["first_batch"]


def test_vocab_separate_bpe_and_determinism(corpus):
    d, f = corpus
    vdir = d / "vocab-bpe"
    args = ["vocab", "--model-dir", vdir, "--separate", "--source", f["train.en"], "--target", f["train.de"],
            "--model-type", "bpe", "--vocab-size", 500, "--seed", 3]
    def pieces_scores():  # the model files also record the options, temporary prefix included
        out = {}
        for n in ("source.spm", "target.spm"):
            sp = spm.SentencePieceProcessor(model_file=str(vdir / n))
            out[n] = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
        return out
    ok(TERN, *args)
    first = pieces_scores()
    ok(TERN, *args)
    assert pieces_scores() == first  # deterministic
    sps = {}
    for side, lang in (("source", "en"), ("target", "de")):
        sp = spm.SentencePieceProcessor(model_file=str(vdir / f"{side}.spm"))
        pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        assert json.loads((vdir / f"{side}_vocabulary.json").read_text(encoding="utf-8")) == pieces
        assert len(pieces) == 500 and pieces[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
        sps[lang] = sp
    assert not (vdir / "shared_vocabulary.json").exists()
    cache = d / "bpe.cache"
    ok(DRIVER, "stats", vdir, f["train.en"], f["train.de"], cache)
    _, pairs = read_cache(cache)
    src, tgt = lines_of(f["train.en"]), lines_of(f["train.de"])
    assert all(pairs[i] == (sps["en"].encode(src[i]), sps["de"].encode(tgt[i])) for i in range(N_TRAIN))
    # --input-sentence-size: a sample drawn with --seed (same seed, same model; another, another)
    def sampled(seed, name):
        ok(TERN, "vocab", "-o", d / name, "--input-sentence-size", 400, "--seed", seed, "--vocab-size", 300,
           f["train.en"], f["train.de"])
        return (d / f"{name}.vocab").read_text(encoding="utf-8")
    assert sampled(1, "s1") == sampled(1, "s1b") != sampled(2, "s2")
    # -o PREFIX --json: the same pieces as a JSON list
    ok(TERN, "vocab", "-o", d / "one", "--json", d / "one.json", "--vocab-size", 300, f["valid.en"])
    sp = spm.SentencePieceProcessor(model_file=str(d / "one.model"))
    assert json.loads((d / "one.json").read_text(encoding="utf-8")) == \
        [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    assert (d / "one.vocab").exists() and not any(p.name.startswith("one.tmp") for p in d.iterdir())


def test_vocab_errors(corpus, tmp_path):
    d, f = corpus
    r = run(TERN, "vocab", "-o", tmp_path / "x", f["train.en"], tmp_path / "missing.txt")
    assert r.returncode == 1 and str(tmp_path / "missing.txt") in r.stderr
    r = run(TERN, "vocab", "--model-dir", tmp_path / "m", "--source", f["train.en"])
    assert r.returncode == 2 and "--target" in r.stderr
    r = run(TERN, "vocab", "--model-dir", tmp_path / "m", "--source", f["valid.en"], "--target", f["valid.de"],
            "--pad-id", "-1")
    assert r.returncode == 1 and "padding" in r.stderr and not (tmp_path / "m").exists()
    r = run(TERN, "vocab", "-o", tmp_path / "big", "--vocab-size", 100000, f["valid.en"])
    assert r.returncode == 1 and "Vocabulary size too high" in r.stderr and str(tmp_path / "big") in r.stderr
    assert not list(tmp_path.glob("big*"))
    h = ok(TERN, "vocab", "--help").stdout
    for opt in ("--output", "--model-dir", "--json", "--source", "--target", "--separate", "--vocab-size",
                "--model-type", "--character-coverage", "--input-sentence-size", "--seed", "--threads",
                "--pad-id", "--user-symbols", "--max-sentence-length", "--no-source-eos", "--source-bos"):
        assert opt in h, opt


def float_tensors(path):
    t, meta = st_read(path)
    return t, meta


def test_checkpoint_loads_and_scores_as_trained(corpus, joint):
    d, f = corpus
    save = d / "save"
    out = ok(DRIVER, "ckpt", joint, f["train.en"], f["train.de"], d / "ck-train.cache", f["valid.en"],
             f["valid.de"], d / "ck-valid.cache", save, 60).stdout
    nll = {r["line"]: r for r in map(json.loads, out.splitlines())}
    assert len(nll) >= 190
    names = sorted(os.listdir(save))
    assert names == ["checkpoint-00000030", "checkpoint-00000060"]
    ck = save / "checkpoint-00000060"
    assert sorted(os.listdir(ck)) == ["config.json", "model.safetensors", "sentencepiece.model",
                                      "shared_vocabulary.json", "trainer_state.safetensors"]
    assert (ck / "sentencepiece.model").read_bytes() == (joint / "sentencepiece.model").read_bytes()
    params, meta = st_read(ck / "model.safetensors")
    assert meta["alias:decoder/embeddings/weight"] == "encoder/embeddings_0/weight"
    assert int(params["encoder/num_heads"]) == 4 and params["encoder/embeddings_0/weight"].shape == (800, 32)
    state, smeta = st_read(ck / "trainer_state.safetensors")
    assert smeta["update"] == "60" and smeta["value:adam_t"] == "i:60" and smeta["data:seed"] == "1"
    assert set(state) == {p + n for p in ("adam_m/", "adam_v/") for n in params if params[n].dtype == np.float32}
    assert all(np.all(state["adam_v/" + n] >= 0) for n in params if params[n].dtype == np.float32)

    # tern rescore on the checkpoint: the same log-probabilities as the training model computed
    r = ok(TERN, "rescore", "-m", ck, "-s", f["valid.en"], "--target", f["valid.de"], "-t", 1)
    totals = [float(l.split("|||")[1]) for l in r.stdout.splitlines()]
    assert len(totals) == 200
    gaps = [abs(totals[i] + v["nll"]) / v["nll"] for i, v in nll.items()]
    assert max(gaps) < 1e-5, max(gaps)
    counts = [len(l.split("|||")[0].split()) for l in r.stdout.splitlines()]
    assert all(counts[i] == v["ntokens"] for i, v in nll.items())
    r = ok(TERN, "translate", "-m", ck, "-b", 2, "-t", 1, input="A man is riding a bike .\nTwo dogs .\n")
    assert len(r.stdout.splitlines()) == 2

    # tern average --last 2: the float64 mean, written as float32
    avg = d / "avg-last"
    ok(TERN, "average", "-o", avg, "--last", 2, save)
    a, ameta = st_read(avg / "model.safetensors")
    b, _ = st_read(save / "checkpoint-00000030" / "model.safetensors")
    assert set(a) == set(params) and ameta["averaged_models"] == "2"
    for n, x in params.items():
        if x.dtype == np.float32:
            want = ((x.astype(np.float64) + b[n].astype(np.float64)) / 2).astype(np.float32)
            assert np.array_equal(a[n], want), n
        else:
            assert np.array_equal(a[n], x), n
    ok(TERN, "translate", "-m", avg, "-t", 1, input="A dog .\n")
    r = run(TERN, "average", "-o", d / "avg-x", "--last", 3, save)
    assert r.returncode == 1 and "fewer than --last 3" in r.stderr


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    make_models = pytest.importorskip("make_models")
    d = tmp_path_factory.mktemp("average")
    out = []
    for seed in (11, 12):
        ct2 = d / f"ct2-{seed}"
        make_models.make_model("pre-shared-tied", str(ct2), seed=seed)
        ok(TERN, "convert", "--from-ct2", ct2, "-o", d / f"tern-{seed}")
        out.append(d / f"tern-{seed}")
    make_models.make_model("post-separate-untied", str(d / "ct2-other"))
    ok(TERN, "convert", "--from-ct2", d / "ct2-other", "-o", d / "tern-other")
    make_models.make_model("pre-shared-tied", str(d / "ct2-int8"), quantization="int8")
    ok(TERN, "convert", "--from-ct2", d / "ct2-int8", "-o", d / "tern-int8")
    return d, out


def test_average_converted_models(converted):
    d, (m1, m2) = converted
    ok(TERN, "average", "-o", d / "avg", m1, m2)
    a, ameta = st_read(d / "avg" / "model.safetensors")
    x, xmeta = st_read(m1 / "model.safetensors")
    y, _ = st_read(m2 / "model.safetensors")
    assert set(a) == set(x)
    n_float = 0
    for n in x:
        if x[n].dtype == np.float32:
            n_float += 1
            assert not np.array_equal(x[n], y[n]) or x[n].size <= 1 or np.all(x[n] == x[n].flat[0]), n
            assert np.array_equal(a[n], ((x[n].astype(np.float64) + y[n].astype(np.float64)) / 2).astype(np.float32)), n
        else:
            assert np.array_equal(a[n], x[n]), n
    assert n_float > 50
    assert {k: v for k, v in ameta.items() if k.startswith("alias:")} == \
        {k: v for k, v in xmeta.items() if k.startswith("alias:")}
    assert json.loads((d / "avg" / "config.json").read_text()) == json.loads((m1 / "config.json").read_text())
    inp = "".join("\u2581a b \u2581c d\n" if i % 2 else "\u2581e f \u2581g\n" for i in range(8))
    r = ok(TERN, "translate", "-m", d / "avg", "-t", 1, input=inp)
    assert len(r.stdout.splitlines()) == 8
    # a model averaged with itself is that model: same tensors, same translations
    ok(TERN, "average", "-o", d / "self", m1, m1)
    s, _ = st_read(d / "self" / "model.safetensors")
    assert all(np.array_equal(s[n], x[n]) for n in x)
    t1 = ok(TERN, "translate", "-m", m1, "-t", 1, input=inp).stdout
    t2 = ok(TERN, "translate", "-m", d / "self", "-t", 1, input=inp).stdout
    assert t1 == t2


def test_average_errors(converted):
    d, (m1, m2) = converted
    r = run(TERN, "average", "-o", d / "bad", m1, d / "tern-other")
    assert r.returncode == 1 and "tern-other" in r.stderr
    r = run(TERN, "average", "-o", d / "bad", m1, d / "tern-int8")
    assert r.returncode == 1 and "tern-int8" in r.stderr and "quantized" in r.stderr
    r = run(TERN, "average", "-o", d / "bad", m1, d / "missing")
    assert r.returncode == 1 and str(d / "missing") in r.stderr
    assert not (d / "bad").exists()
    h = ok(TERN, "average", "--help").stdout
    assert "--last" in h and "--output" in h
