"""Marian's own models (model.npz + decoder.yml + vocabularies) read as they are, against Marian itself.

pymarian (PyPI, Marian 1.12; scripts/setup.sh installs it into .venv) trains two tiny transformers
for 100 updates on 2000 Multi30k en-de lines (../shared/data/multi30k, or $TERN_MULTI30K):
* "postnorm-tied-all-swish-spm": post-norm ('' / 'dan'), --tied-embeddings-all, swish, one joint
  SentencePiece vocabulary (vocab.spm) that Marian trains itself;
* "prenorm-tied-relu-yml": pre-norm ('n' / 'da' / top 'n'), --tied-embeddings (target and output
  only), relu, --transformer-dim-ffn 48, --transformer-depth-scaling, separate YAML vocabularies
  (vocab.src.yml, vocab.trg.yml: whitespace tokens, so `tern --pretokenized`).
Its Translator decodes 100 test lines (normalize 0); Tern reads the directory Marian wrote:
* greedy (`-b 1 --max-length-a 3 --min-length 0`, Marian's length limit) is identical on >= 99 %
  and each difference is a near-tie (<= 0.01 under Tern's scores);
* force decoding (`tern rescore` of Marian's greedy outputs) gives Marian's word scores (printed
  with 5 decimals) within 1e-4, the end token's included;
* beam 4 (`--eos-policy marian --no-early-stop --length-penalty 0`) is identical on >= 97 %;
* `tern convert --from DIR` (Tern) gives the same greedy output; `--to ct2`, run by ctranslate2,
  too on the lines it finishes within Marian's length limit (the post-norm model: a pre-norm one is
  refused, since Marian decodes it with the decoder self-attention's keys and values of steps >= 1
  taken before the layer norm, which Tern reproduces and CTranslate2 cannot);
* Marian's binary model.bin (the post-norm shape saved as .bin): Marian's greedy output on 100/100;
* bad files: a truncated model.npz or model.bin, a missing array, an option Tern does not support (an
  activation, an RNN decoder layer with a GRU cell), SSRU options over a self-attention model's
  arrays, a vocabulary shorter than the embedding: errors naming the file and the array, option or
  id (the SSRU decoder itself: tests/test_marian_ssru.py).
"""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

pymarian = pytest.importorskip("pymarian", reason="pymarian not installed (scripts/setup.sh installs it)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern")
DATA = os.environ.get("TERN_MULTI30K") or os.path.join(ROOT, "..", "shared", "data", "multi30k")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
N_TRAIN, N_TEST = 2000, 100

SHAPES = {
    "postnorm-tied-all-swish-spm": dict(vocabs=["vocab.spm", "vocab.spm"], dim_vocabs=[300, 300],
                                        tied_embeddings_all=True, transformer_ffn_activation="swish",
                                        transformer_dim_ffn=64),
    "prenorm-tied-relu-yml": dict(vocabs=["vocab.src.yml", "vocab.trg.yml"], dim_vocabs=[400, 400],
                                  tied_embeddings=True, transformer_preprocess="n", transformer_postprocess="da",
                                  transformer_postprocess_top="n", transformer_ffn_activation="relu",
                                  transformer_dim_ffn=48, transformer_depth_scaling=True),
}

sys.path.insert(0, os.path.join(ROOT, "tests", "peer"))
from marian_peer import BEAM4, DECODE, GREEDY, TRAIN  # noqa: E402  (tests/peer: Marian's training and decoding scripts)
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
from train_torch_ref import st_read, st_write  # noqa: E402  (safetensors as NumPy arrays)


def run(*args, input=None, check=True):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=ENV, input=input, timeout=600)
    if check:
        assert r.returncode == 0, f"{args[:4]}: {r.stderr[-2000:]}"
    return r


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    if not os.path.exists(TERN):
        pytest.skip(f"{TERN} not built")
    if not os.path.exists(os.path.join(DATA, "train.en")):
        pytest.skip(f"Multi30k not found at {DATA} (set TERN_MULTI30K)")
    d = tmp_path_factory.mktemp("m30k")
    for lang in ("en", "de"):
        with open(os.path.join(DATA, f"train.{lang}"), encoding="utf-8") as f:
            (d / f"train.{lang}").write_text("".join(f.readline() for _ in range(N_TRAIN)), encoding="utf-8")
    with open(os.path.join(DATA, "test_2016_flickr.en"), encoding="utf-8") as f:
        (d / "test.en").write_text("".join(f.readline() for _ in range(N_TEST)), encoding="utf-8")
    return d


@pytest.fixture(scope="module", params=sorted(SHAPES))
def case(request, corpus, tmp_path_factory):
    import json
    name = request.param
    kw = SHAPES[name]
    d = tmp_path_factory.mktemp(name)
    run(sys.executable, "-c", TRAIN, d, corpus / "train", json.dumps(kw))
    pretok = kw["vocabs"][0].endswith(".yml")
    ref = {}
    for beam in (1, 4):
        r = run(sys.executable, "-c", DECODE, d, json.dumps(kw["vocabs"]), beam, corpus / "test.en")
        ref[beam] = json.loads(r.stdout)
    return dict(name=name, dir=d, pretok=["--pretokenized"] if pretok else [], ref=ref, src=corpus / "test.en")


def tern_translate(case, model, opts):
    r = run(TERN, "translate", "-m", model, "-t", "1", *opts, *case["pretok"], input=case["src"].read_text())
    return r.stdout.splitlines()


def rescore(case, model, targets, tmp_path, pieces=False):
    src = case["src"].read_text(encoding="utf-8").splitlines()
    (tmp_path / "s").write_text("\n".join(src[i] for i, _ in targets) + "\n", encoding="utf-8")
    (tmp_path / "t").write_text("\n".join(t for _, t in targets) + "\n", encoding="utf-8")
    if pieces and not case["pretok"]:  # the source as SentencePiece pieces too
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=str(case["dir"] / "vocab.spm"))
        (tmp_path / "s").write_text("\n".join(" ".join(sp.encode(src[i], out_type=str)) for i, _ in targets) + "\n",
                                    encoding="utf-8")
    pre = ["--pretokenized"] if pieces else case["pretok"]
    r = run(TERN, "rescore", "-m", model, "-s", tmp_path / "s", "--target", tmp_path / "t", "-t", "1", *pre)
    return [[float(x) for x in line.split("|||")[0].split()] for line in r.stdout.splitlines()]


def test_greedy_and_force_decoding(case, tmp_path):
    ref = case["ref"][1]
    out = tern_translate(case, case["dir"], GREEDY)
    assert len(out) == N_TEST and len(set(out)) > 20
    diff = [i for i in range(N_TEST) if out[i] != ref[i][0]]
    print(f"\n{case['name']}: greedy identical on {N_TEST - len(diff)}/{N_TEST}")
    assert N_TEST - len(diff) >= 0.99 * N_TEST
    # every difference: a near-tie at the first differing token under Tern's scores
    if diff:
        a = rescore(case, case["dir"], [(i, ref[i][0]) for i in diff], tmp_path)
        b = rescore(case, case["dir"], [(i, out[i]) for i in diff], tmp_path)
        for x, y in zip(a, b):
            k = next(k for k in range(min(len(x), len(y))) if x[k] != y[k])
            assert abs(x[k] - y[k]) <= 0.01, (x[k], y[k])
    # force decoding: Marian's word scores (the end token's last) within 1e-4
    lps = rescore(case, case["dir"], [(i, ref[i][2]) for i in range(N_TEST)], tmp_path, pieces=True)
    worst = max(abs(a - b) for lp, r in zip(lps, ref) for a, b in zip(lp, r[1]))
    # a hypothesis Marian cut at its length limit has no end token: rescore adds one
    cut = sum(len(lp) == len(r[1]) + 1 for lp, r in zip(lps, ref))
    assert all(len(lp) in (len(r[1]), len(r[1]) + 1) for lp, r in zip(lps, ref)) and cut < N_TEST // 2
    print(f"{case['name']}: force decoding, largest difference from Marian's word scores {worst:.2e} "
          f"({sum(map(len, lps))} tokens; {cut} hypotheses cut at the length limit)")
    assert worst <= 1e-4


def test_beam4(case):
    ref = case["ref"][4]
    out = tern_translate(case, case["dir"], BEAM4)
    same = sum(o == r[0] for o, r in zip(out, ref))
    greedy = case["ref"][1]
    print(f"\n{case['name']}: beam 4 identical on {same}/{N_TEST} ({sum(r[0] != g[0] for r, g in zip(ref, greedy))} "
          f"differ from greedy)")
    assert any(r[0] != g[0] for r, g in zip(ref, greedy))  # beam search is not greedy here
    assert same >= 0.97 * N_TEST


def test_convert(case, tmp_path):
    direct = tern_translate(case, case["dir"], GREEDY)
    run(TERN, "convert", "--from", case["dir"], "-o", tmp_path / "tern")
    assert tern_translate(case, tmp_path / "tern", GREEDY) == direct
    if case["name"].startswith("prenorm"):
        # Marian decodes pre-norm models with the self-attention's keys and values of steps >= 1
        # taken before the norm (Tern does the same); CTranslate2 cannot: refused, saying why
        r = run(TERN, "convert", "--from", case["dir"], "-o", tmp_path / "ct2", "--to", "ct2", check=False)
        assert r.returncode != 0 and "pre-norm" in r.stderr and "CTranslate2" in r.stderr, r.stderr
        return
    run(TERN, "convert", "--from", case["dir"], "-o", tmp_path / "ct2", "--to", "ct2")
    ct2 = pytest.importorskip("ctranslate2")
    if case["pretok"]:
        src = [line.split() for line in case["src"].read_text(encoding="utf-8").splitlines()]
    else:
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "ct2" / "source.spm"))
        src = [sp.encode(line, out_type=str) for line in case["src"].read_text(encoding="utf-8").splitlines()]
    tr = ct2.Translator(str(tmp_path / "ct2"), intra_threads=1)
    res = tr.translate_batch(src, beam_size=1, max_decoding_length=256, min_decoding_length=0,
                             suppress_sequences=[["<unk>"]])
    # CTranslate2's own greedy search (no Marian length limit): compare the lines that ended
    ends = [i for i, s in enumerate(src) if len(res[i].hypotheses[0]) + 1 < 3 * (len(s) + 1)]
    if case["pretok"]:
        hyp = [" ".join(r.hypotheses[0]) for r in res]
    else:
        tp = spm.SentencePieceProcessor(model_file=str(tmp_path / "ct2" / "target.spm"))
        hyp = [tp.decode(r.hypotheses[0]) for r in res]
    same = sum(hyp[i] == direct[i] for i in ends)
    print(f"\n{case['name']}: ctranslate2 on the converted model = Tern on {same}/{len(ends)} finished lines")
    assert len(ends) > N_TEST // 2 and same >= 0.98 * len(ends)


def test_finetune(case, corpus, tmp_path):
    """`tern train --init-from` a Marian directory (issue 26 point 4). Marian's vocabularies have no
    padding token and its decoder starts from a zero embedding: the import (`tern convert
    --add-pad`) appends a "<pad>" token with zero rows and starts the decoder from it.
    * lossless: the --add-pad form's force-decoding log-probs of Marian's greedy outputs equal the
      Marian directory's (Tern's reading, checked against Marian above) within 1e-6, and its greedy
      output is the same; one update at lr 1e-12 keeps them within 1e-4, and the trainer's own
      validation nll (its forward, the pad start included) equals the checkpoint's force decoding
      within 1e-5 relative;
    * it learns: 60 updates on 400 other Multi30k pairs lower the training loss and raise the
      held-out pairs' log-prob; the result translates without "<pad>";
    * a pre-norm Marian model trains as Marian trains it: Marian's decoder takes the self-attention's
      keys and values of steps >= 1 before the layer norm (Tern decodes the Marian directory so), but
      its training takes them after the norm, as every pre-norm Transformer; the checkpoints are that
      plain pre-norm Transformer (the log says so), so the one-update check compares with the
      imported model without Marian's decoding key, and the fine-tuned model also converts to
      CTranslate2 (`--to ct2`), which then translates as Tern does."""
    prenorm = case["name"].startswith("prenorm")
    run(TERN, "convert", "--from", case["dir"], "-o", tmp_path / "padded", "--add-pad")
    for bad in (["--to", "ct2"], ["--to", "hf"], ["--quantize", "int8"]):  # Tern's float32 form only
        r = run(TERN, "convert", "--from", case["dir"], "-o", tmp_path / "bad", "--add-pad", *bad, check=False)
        assert r.returncode == 2 and "--add-pad applies to a Marian model directory" in r.stderr, r.stderr
    assert tern_translate(case, tmp_path / "padded", GREEDY) == tern_translate(case, case["dir"], GREEDY)
    ref = case["ref"][1]
    pairs = [(i, ref[i][0]) for i in range(N_TEST)]
    base = rescore(case, case["dir"], pairs, tmp_path)
    worst = max(abs(a - b) for x, y in zip(base, rescore(case, tmp_path / "padded", pairs, tmp_path)) for a, b in zip(x, y))
    print(f"\n--add-pad: largest force-decoding difference {worst:.1e}")
    assert worst <= 1e-6
    # data: 400 pairs of Multi30k train after the 2000 Marian saw; 60 held out from val
    lines = {}
    for lang in ("en", "de"):
        with open(os.path.join(DATA, f"train.{lang}"), encoding="utf-8") as f:
            lines[lang] = f.read().splitlines()[N_TRAIN:N_TRAIN + 400]
        with open(os.path.join(DATA, f"val.{lang}"), encoding="utf-8") as f:
            (tmp_path / f"held.{lang}").write_text("\n".join(f.read().splitlines()[:60]) + "\n", encoding="utf-8")
        (tmp_path / f"new.{lang}").write_text("\n".join(lines[lang]) + "\n", encoding="utf-8")

    def train(save, updates, lr):
        run(TERN, "train", "--init-from", case["dir"], "--train", f"{tmp_path / 'new.en'},{tmp_path / 'new.de'}",
            "--valid-src", tmp_path / "held.en", "--valid-tgt", tmp_path / "held.de", "--no-bleu", "--no-plot",
            "--valid-interval-updates", updates, "--save-dir", save, "--max-updates", updates, "--lr", lr,
            "--lr-scheduler", "constant", "--label-smoothing", 0, "--dropout", 0, "--max-tokens", 1500, "-t", 1,
            "--seed", 3, "-q")
        return save / sorted(p for p in os.listdir(save) if p.startswith("checkpoint-"))[-1]

    def held_nll(model):
        r = run(TERN, "rescore", "-m", model, "-s", tmp_path / "held.en", "--target", tmp_path / "held.de", "-t", 1)
        lp = [[float(x) for x in line.split("|||")[0].split()] for line in r.stdout.splitlines()]
        return -sum(map(sum, lp)) / sum(map(len, lp))

    if prenorm:  # the function Marian trains: the imported model without Marian's decoding key
        t, meta = st_read(str(tmp_path / "padded" / "model.safetensors"))
        assert int(t.pop("decoder/marian_raw_self_kv")) == 1
        shutil.copytree(tmp_path / "padded", tmp_path / "trained-form")
        st_write(str(tmp_path / "trained-form" / "model.safetensors"), t, meta)
        trained_form = rescore(case, tmp_path / "trained-form", pairs, tmp_path)
        moved = max(abs(a - b) for x, y in zip(base, trained_form) for a, b in zip(x, y))
        print(f"\npre-norm: Marian's decoding (keys and values before the norm) vs its training form: {moved:.3f}")
        assert moved > 1e-3, "the two forms hardly differ: a weak check"
        base = trained_form
    same = train(tmp_path / "same", 1, 1e-12)
    if prenorm:
        log = (tmp_path / "same" / "train.log").read_text()
        assert "a pre-norm Marian model" in log and "trains it as Marian trains" in log, log[-2000:]
    worst = max(abs(a - b) for x, y in zip(base, rescore(case, same, pairs, tmp_path)) for a, b in zip(x, y))
    valid = float((tmp_path / "same" / "valid_curve.tsv").read_text().splitlines()[-1].split("\t")[3])
    n0 = held_nll(same)
    print(f"one update at lr 1e-12: largest force-decoding difference {worst:.1e}; validation nll {valid:.7f}, "
          f"force decoding {n0:.7f}")
    assert worst <= 1e-4 and abs(valid - n0) <= 1e-5 * n0
    ft = train(tmp_path / "ft", 60, 1e-3)
    loss = [float(r.split("\t")[2]) for r in (tmp_path / "ft" / "train_curve.tsv").read_text().splitlines()[1:]]
    n1 = held_nll(ft)
    print(f"60 updates: training loss {loss[0]:.3f} -> {np.mean(loss[-5:]):.3f}; held-out nll {n0:.3f} -> {n1:.3f}")
    assert np.mean(loss[-5:]) < loss[0] - 0.3 and n1 < n0 - 0.1
    out = tern_translate(case, ft, GREEDY)
    # never "<pad>" or "<unused_N>"; never "<unk>" either (" ⁇ " once SentencePiece decodes it): Marian's
    # rule, which the checkpoints carry (decoder/marian_never_unk)
    assert len(out) == N_TEST and not any(u in o for o in out for u in ("<pad>", "<unused", "<unk>", "\u2047"))
    t, _ = st_read(str(ft / "model.safetensors"))
    assert int(t["decoder/marian_never_unk"]) == 1
    if prenorm and case["pretok"]:  # a plain pre-norm Transformer now: CTranslate2 runs it as Tern does
        run(TERN, "convert", "--from", ft, "-o", tmp_path / "ft-ct2", "--to", "ct2")
        ct2 = pytest.importorskip("ctranslate2")
        src = [line.split() for line in case["src"].read_text(encoding="utf-8").splitlines()]
        res = ct2.Translator(str(tmp_path / "ft-ct2"), intra_threads=1).translate_batch(
            src, beam_size=1, max_decoding_length=256, min_decoding_length=0, suppress_sequences=[["<unk>"]])
        ends = [i for i, s in enumerate(src) if len(res[i].hypotheses[0]) + 1 < 3 * (len(s) + 1)]
        same_lines = sum(" ".join(res[i].hypotheses[0]) == out[i] for i in ends)
        print(f"fine-tuned pre-norm model in CTranslate2: = Tern on {same_lines}/{len(ends)} finished lines")
        assert len(ends) > N_TEST // 2 and same_lines >= 0.98 * len(ends)


def test_bad_files(case, tmp_path):
    if case["name"] != "prenorm-tied-relu-yml":
        pytest.skip("run once")
    src = case["dir"]

    def copy(name):
        d = tmp_path / name
        d.mkdir()
        for f in ("model.npz", "model.npz.decoder.yml", "vocab.src.yml", "vocab.trg.yml"):
            shutil.copy(src / f, d / f)
        return d

    def err(d):
        r = run(TERN, "translate", "-m", d, "--pretokenized", input="a man\n", check=False)
        assert r.returncode != 0
        return r.stderr

    d = copy("trunc")
    data = (d / "model.npz").read_bytes()
    (d / "model.npz").write_bytes(data[: len(data) // 2])
    e = err(d)
    assert "model.npz" in e and ("truncated" in e or "zip" in e), e
    z = dict(np.load(src / "model.npz"))
    d = copy("missing")
    np.savez(d / "model.npz", **{k: v for k, v in z.items() if k != "decoder_l2_ffn_W2"})
    e = err(d)
    assert "model.npz" in e and "decoder_l2_ffn_W2" in e, e
    d = copy("option")
    yml = bytes(z["special:model.yml"].astype(np.uint8)).replace(b"transformer-ffn-activation: relu",
                                                                 b"transformer-ffn-activation: mish")
    np.savez(d / "model.npz", **dict(z, **{"special:model.yml": np.frombuffer(yml, dtype=np.int8)}))
    e = err(d)
    assert "special:model.yml" in e and "transformer-ffn-activation" in e and "'mish'" in e, e
    d = copy("rnn-gru")  # an RNN decoder layer with another cell than the SSRU: refused naming the option
    yml = bytes(z["special:model.yml"].astype(np.uint8)).replace(
        b"transformer-decoder-autoreg: self-attention", b"transformer-decoder-autoreg: rnn")
    np.savez(d / "model.npz", **dict(z, **{"special:model.yml": np.frombuffer(yml, dtype=np.int8)}))
    e = err(d)
    assert "transformer-decoder-autoreg" in e and "'rnn'" in e and "gru" in e, e
    d = copy("ssru")  # the options of an SSRU decoder over a self-attention model's arrays: the SSRU's missing
    yml = yml.replace(b"dec-cell: gru", b"dec-cell: ssru")
    np.savez(d / "model.npz", **dict(z, **{"special:model.yml": np.frombuffer(yml, dtype=np.int8)}))
    e = err(d)
    assert "model.npz" in e and "missing array 'decoder_l1_rnn_W'" in e, e
    d = copy("vocab")
    lines = (d / "vocab.src.yml").read_text(encoding="utf-8").splitlines()
    (d / "vocab.src.yml").write_text("\n".join(lines[:-5]) + "\n", encoding="utf-8")
    e = err(d)
    assert "vocab.src.yml" in e and "encoder_Wemb" in e and "rows" in e, e


def test_binary_model(corpus, tmp_path):
    """Marian's binary format (model.bin, as Marian writes it when the model's name ends in .bin):
    the same greedy outputs as Marian's Translator on it; a truncated one is an error naming it."""
    import json
    d = tmp_path / "bin"
    d.mkdir()
    kw = dict(SHAPES["postnorm-tied-all-swish-spm"])
    train = TRAIN.replace('model=out + "/model.npz"', 'model=out + "/model.bin"')
    run(sys.executable, "-c", train, d, corpus / "train", json.dumps(kw))
    assert (d / "model.bin").read_bytes()[:8] == b"\x01" + b"\x00" * 7  # Marian's binary version 1
    ref = json.loads(run(sys.executable, "-c", DECODE.replace('"/model.npz"', '"/model.bin"'), d,
                         json.dumps(kw["vocabs"]), 1, corpus / "test.en").stdout)
    case = dict(dir=d, pretok=[], src=corpus / "test.en")
    out = tern_translate(case, d, GREEDY)
    same = sum(o == r[0] for o, r in zip(out, ref))
    print(f"\nmodel.bin: greedy identical on {same}/{N_TEST}")
    assert same == N_TEST
    data = (d / "model.bin").read_bytes()
    (d / "model.bin").write_bytes(data[: len(data) - 5000])
    r = run(TERN, "translate", "-m", d, input="A man\n", check=False)
    assert r.returncode != 0 and "model.bin" in r.stderr and "truncated" in r.stderr, r.stderr
