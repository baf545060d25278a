"""Marian's lexical shortlists (text lex.s2t and marian-conv's binary format) against Marian itself.

pymarian (Marian 1.12) trains a tiny transformer for 100 updates on 2,000 Multi30k en-de lines
(joint SentencePiece vocabulary, the shape "postnorm-tied-all-swish-spm" of test_marian_native.py).
The lexical table is derived here from the training data: p(t | s) = the share of the sentence
pairs holding source piece s that also hold target piece t (co-occurrence), written as Marian's
text shortlist ("target source probability" lines; pieces SentencePiece leaves outside the
vocabulary are among them, which Marian and Tern read as <unk>) and converted to Marian's binary
format by Marian (`pymarian convert --shortlist lex.s2t 50 10 0 --dump-shortlist OUT -V VOCABS`).

Marian's Translator and `tern translate` decode 200 test_2016_flickr lines one sentence a batch
(the candidate set is the union over a batch: Marian `--mini-batch 1`, Tern `--max-batch-size 1`):
* text shortlist (first 50, best 10, threshold 0.01), one vocabulary file for both sides (Marian
  then adds the source words themselves): greedy identical on >= 99.5 %, beam 4 on >= 97 %;
* the same with two vocabulary files (no source words added): greedy >= 99.5 %;
* the binary shortlist: greedy >= 99.5 % against Marian on the same file, and Tern's outputs on
  the binary file equal Tern's on the text file it came from (greedy and beam 4, 200/200: the
  binary reader gives the text reader's lists);
* the shortlist matters: Tern without it differs from Marian's shortlisted output on >= 20 lines;
* decoder.yml's `shortlist:` key is used without the option, `--shortlist none` drops it;
* bad files: a line without three fields, a bad probability, a truncated binary file, a corrupt
  one (checksum), one naming a target id outside the vocabulary, a bad option value: errors
  naming the file and the line or entry, never a crash (TERN_BIN=build-san/tern runs them under
  ASan/UBSan).
"""
import collections
import json
import os
import shutil
import struct
import subprocess
import sys

import pytest

pytest.importorskip("pymarian", reason="pymarian not installed (scripts/setup.sh installs it)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern")
DATA = os.environ.get("TERN_MULTI30K") or os.path.join(ROOT, "..", "shared", "data", "multi30k")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
N_TRAIN, N_TEST = 2000, 200
FIRST, BEST, THRESHOLD = 50, 10, 0.01
GREEDY = ["-b", "1", "--max-length-a", "3", "--min-length", "0", "--max-batch-size", "1"]
BEAM4 = ["-b", "4", "--eos-policy", "marian", "--no-early-stop", "--length-penalty", "0", "--max-length-a", "3",
         "--min-length", "0", "--max-batch-size", "1"]

TRAIN = r"""
import sys, pymarian
out, data = sys.argv[1], sys.argv[2]
pymarian.Trainer(type="transformer", model=out + "/model.npz", train_sets=[data + ".en", data + ".de"],
                 vocabs=[out + "/vocab.spm", out + "/vocab.spm"], dim_vocabs=[300, 300], tied_embeddings_all=True,
                 transformer_ffn_activation="swish", transformer_dim_ffn=64, dim_emb=32, transformer_heads=2,
                 enc_depth=2, dec_depth=2, after="100u", mini_batch=32, maxi_batch=10, cpu_threads=1, seed=1,
                 quiet=True, learn_rate=0.003, lr_warmup=0).train()
"""

# runs: [name, model dir, vocabs (file names), beam, shortlist values]; prints {name: [text]}
DECODE = r"""
import json, sys, pymarian
runs, inp = json.loads(sys.argv[1]), sys.argv[2]
lines = open(inp, encoding="utf-8").read().splitlines()
out = {}
for name, d, vocabs, beam, sl in runs:
    tr = pymarian.Translator(models=d + "/model.npz", vocabs=[d + "/" + v for v in vocabs], beam_size=beam,
                             normalize=0, cpu_threads=1, mini_batch=1, maxi_batch=1, quiet=True, shortlist=sl)
    out[name] = tr.translate(lines)
print(json.dumps(out))
"""


def run(*args, input=None, check=True):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=ENV, input=input, timeout=600)
    if check:
        assert r.returncode == 0, f"{args[:4]}: {r.stderr[-2000:]}"
    return r


def lex_table(d, src_lines, tgt_lines):
    """Co-occurrence p(t | s) over SentencePiece pieces, in Marian's text format."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(d / "vocab.spm"))
    n_s, n_st = collections.Counter(), collections.Counter()
    for e, g in zip(src_lines, tgt_lines):
        s, t = set(sp.encode(e, out_type=str)), set(sp.encode(g, out_type=str))
        for a in s:
            n_s[a] += 1
            for b in t:
                n_st[a, b] += 1
    return "".join(f"{b} {a} {c / n_s[a]:.6f}\n" for (a, b), c in sorted(n_st.items()))


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    if not os.path.exists(TERN):
        pytest.skip(f"{TERN} not built")
    if not os.path.exists(os.path.join(DATA, "train.en")):
        pytest.skip(f"Multi30k not found at {DATA} (set TERN_MULTI30K)")
    d = tmp_path_factory.mktemp("shortlist")
    lines = {}
    for lang in ("en", "de"):
        with open(os.path.join(DATA, f"train.{lang}"), encoding="utf-8") as f:
            lines[lang] = [f.readline().rstrip("\n") for _ in range(N_TRAIN)]
        (d / f"train.{lang}").write_text("".join(x + "\n" for x in lines[lang]), encoding="utf-8")
    with open(os.path.join(DATA, "test_2016_flickr.en"), encoding="utf-8") as f:
        (d / "test.en").write_text("".join(f.readline() for _ in range(N_TEST)), encoding="utf-8")
    model = d / "model"
    model.mkdir()
    run(sys.executable, "-c", TRAIN, model, d / "train")
    (d / "lex.s2t").write_text(lex_table(model, lines["en"], lines["de"]), encoding="utf-8")
    # Marian's binary format, written by Marian (its marian-conv); its threshold 0 keeps every pair
    # (a positive one compares target ids in Marian's import), as the text reader's 0 keeps them
    run(sys.executable, "-m", "pymarian", "convert", "--shortlist", d / "lex.s2t", FIRST, BEST, 0,
        "--dump-shortlist", d / "lex.s2t.blob", "-V", model / "vocab.spm", model / "vocab.spm")
    assert (d / "lex.s2t.blob").read_bytes()[:8] == struct.pack("<Q", 0xF11A48D5013417F5)
    # the same model with two vocabulary files (Marian adds source words only for one shared file)
    two = d / "two"
    two.mkdir()
    os.symlink(model / "model.npz", two / "model.npz")
    shutil.copy(model / "vocab.spm", two / "vocab.src.spm")
    shutil.copy(model / "vocab.spm", two / "vocab.trg.spm")
    (two / "decoder.yml").write_text("models:\n  - model.npz\nvocabs:\n  - vocab.src.spm\n  - vocab.trg.spm\n")
    text = [str(d / "lex.s2t"), FIRST, BEST, THRESHOLD]
    runs = [["text1", str(model), ["vocab.spm", "vocab.spm"], 1, text],
            ["text4", str(model), ["vocab.spm", "vocab.spm"], 4, text],
            ["two1", str(two), ["vocab.src.spm", "vocab.trg.spm"], 1, text],
            ["bin1", str(model), ["vocab.spm", "vocab.spm"], 1, [str(d / "lex.s2t.blob"), 0]]]
    # (Marian's check flag 0 above: its own check refuses a file whose last source words have
    # empty lists, which its converter writes; Tern checks the checksum and every offset)
    ref = json.loads(run(sys.executable, "-c", DECODE, json.dumps(runs), d / "test.en").stdout)
    return dict(dir=d, model=model, two=two, ref=ref, src=(d / "test.en").read_text(encoding="utf-8"))


def tern(model, opts, src, *extra):
    r = run(TERN, "translate", "-m", model, "-t", "1", *opts, *extra, input=src)
    out = r.stdout.splitlines()
    assert len(out) == N_TEST
    return out, r.stderr


def agree(a, b):
    return sum(x == y for x, y in zip(a, b))


def spec(m, *vals):
    return ",".join(str(v) for v in (m["dir"] / "lex.s2t", *vals))


def test_text_shortlist_greedy_and_beam(m):
    sl = spec(m, FIRST, BEST, THRESHOLD)
    g, err = tern(m["model"], GREEDY, m["src"], "--shortlist", sl)
    b, _ = tern(m["model"], BEAM4, m["src"], "--shortlist", sl)
    full, _ = tern(m["model"], GREEDY, m["src"])
    # words SentencePiece leaves outside the 300-piece vocabulary: <unk>, as Marian reads them
    assert "read as <unk>" in err and "lex.s2t" in err, err
    ng, nb, nf = agree(g, m["ref"]["text1"]), agree(b, m["ref"]["text4"]), agree(full, m["ref"]["text1"])
    print(f"\ntext shortlist {FIRST} {BEST} {THRESHOLD}, one vocabulary file: greedy = Marian on {ng}/{N_TEST}, "
          f"beam 4 on {nb}/{N_TEST}; without the shortlist Tern = Marian's shortlisted output on {nf}/{N_TEST}")
    assert ng >= 0.995 * N_TEST and nb >= 0.97 * N_TEST
    assert N_TEST - nf >= 20  # the shortlist changes the output


def test_two_vocabulary_files(m):
    g, _ = tern(m["two"], GREEDY, m["src"], "--shortlist", spec(m, FIRST, BEST, THRESHOLD))
    one, _ = tern(m["model"], GREEDY, m["src"], "--shortlist", spec(m, FIRST, BEST, THRESHOLD))
    n = agree(g, m["ref"]["two1"])
    print(f"\ntext shortlist, two vocabulary files: greedy = Marian on {n}/{N_TEST} "
          f"({N_TEST - agree(g, one)} lines differ from the one-file run)")
    assert n >= 0.995 * N_TEST


def test_binary_shortlist(m):
    blob = str(m["dir"] / "lex.s2t.blob")
    g, _ = tern(m["model"], GREEDY, m["src"], "--shortlist", blob)
    n = agree(g, m["ref"]["bin1"])
    print(f"\nbinary shortlist (Marian-written): greedy = Marian on {n}/{N_TEST}")
    assert n >= 0.995 * N_TEST
    # the binary reader gives the text reader's lists: same outputs as the text file it came from
    for opts in (GREEDY, BEAM4):
        a, _ = tern(m["model"], opts, m["src"], "--shortlist", blob)
        b, _ = tern(m["model"], opts, m["src"], "--shortlist", spec(m, FIRST, BEST, 0))
        assert a == b


def test_decoder_yml_shortlist(m, tmp_path):
    d = tmp_path / "yml"
    d.mkdir()
    for f in ("model.npz", "vocab.spm"):
        os.symlink(m["model"] / f, d / f)
    shutil.copy(m["dir"] / "lex.s2t", d / "lex.s2t")
    (d / "decoder.yml").write_text(f"models:\n  - model.npz\nvocabs:\n  - vocab.spm\n  - vocab.spm\n"
                                   f"shortlist:\n  - lex.s2t\n  - {FIRST}\n  - {BEST}\n  - {THRESHOLD}\n")
    a, _ = tern(d, GREEDY, m["src"])
    assert agree(a, m["ref"]["text1"]) >= 0.995 * N_TEST
    b, _ = tern(d, GREEDY, m["src"], "--shortlist", "none")
    full, _ = tern(m["model"], GREEDY, m["src"])
    assert b == full


def binary(first, best, offsets, ids):
    body = struct.pack("<4Q", first, best, len(offsets), len(ids)) + struct.pack(f"<{len(offsets)}Q", *offsets) + \
        struct.pack(f"<{len(ids)}I", *ids)
    seed, mask = 0, (1 << 64) - 1
    for (w,) in struct.iter_unpack("<Q", body[: len(body) // 8 * 8]):
        seed ^= (w + 0x9E3779B9 + ((seed << 6) & mask) + (seed >> 2)) & mask
    return struct.pack("<2Q", 0xF11A48D5013417F5, seed) + body


def test_bad_files(m, tmp_path):
    def err(sl):
        r = run(TERN, "translate", "-m", m["model"], "--shortlist", sl, input="A man .\n", check=False)
        assert r.returncode == 1 and "Sanitizer" not in r.stderr, r.stderr
        return r.stderr

    t = tmp_path / "two_fields.s2t"
    t.write_text("der the 0.5\nMann man\n")
    e = err(str(t))
    assert "two_fields.s2t" in e and "line 2" in e and "field" in e, e
    t = tmp_path / "prob.s2t"
    t.write_text("der the 0.5\nMann man x1\n")
    e = err(str(t))
    assert "prob.s2t" in e and "line 2" in e and "'x1'" in e, e
    e = err(spec(m, "many"))
    assert "first" in e and "'many'" in e, e
    blob = (m["dir"] / "lex.s2t.blob").read_bytes()
    b = tmp_path / "trunc.bin"
    b.write_bytes(blob[:-10])
    e = err(str(b))
    assert "trunc.bin" in e and "truncated" in e, e
    b = tmp_path / "corrupt.bin"
    b.write_bytes(blob[:100] + bytes([blob[100] ^ 1]) + blob[101:])
    e = err(str(b))
    assert "corrupt.bin" in e and "checksum" in e, e
    b = tmp_path / "outside.bin"  # a valid file whose entry 1 names target id 5000 (vocabulary: 300)
    b.write_bytes(binary(10, 2, [0, 2, 2], [3, 5000]))
    e = err(str(b))
    assert "outside.bin" in e and "entry 1" in e and "5000" in e, e
    b = tmp_path / "order.bin"  # offsets going backwards
    b.write_bytes(binary(10, 2, [0, 2, 1, 2], [3, 4]))
    e = err(str(b))
    assert "order.bin" in e and "offset" in e, e
    b = tmp_path / "header.bin"
    b.write_bytes(blob[:30])
    e = err(str(b))
    assert "header.bin" in e and "truncated" in e, e
    # a hand-written valid file: read (source id 5, "▁A"... whatever it is, proposes ids 3 and 4)
    b = tmp_path / "ok.bin"
    b.write_bytes(binary(10, 2, [0] * 6 + [2], [3, 4]))
    r = run(TERN, "translate", "-m", m["model"], "--shortlist", str(b), input="A man .\n")
    assert r.stdout.strip(), r.stderr


def test_python_option(m, tern_python):
    """Translator(shortlist=...) restricts the output as `tern translate --shortlist` does."""
    sl = spec(m, FIRST, BEST, THRESHOLD)
    opts = ["-b", "1", "--max-batch-size", "1", "--min-length", "0", "--max-decoding-length", "256"]
    cli, _ = tern(m["model"], opts, m["src"], "--shortlist", sl)
    full, _ = tern(m["model"], opts, m["src"])
    t = tern_python.Translator(str(m["model"]), intra_threads=1, shortlist=sl)
    res = t.translate_batch(m["src"].splitlines(), beam_size=1, max_batch_size=1, max_decoding_length=256,
                            min_decoding_length=0)
    out = [r.hypotheses[0] for r in res]
    print(f"\nPython Translator(shortlist=...) = tern translate --shortlist on {agree(out, cli)}/{N_TEST} "
          f"(= the unrestricted CLI on {agree(out, full)})")
    assert out == cli and agree(out, full) < N_TEST - 20
