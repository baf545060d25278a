"""Hugging Face M2M-100 and NLLB checkpoints loaded as they are (`tern translate -m HF_DIR --source-lang
--target-lang`), against transformers.

tests/tools/hf_m2m100_ref.py (run by /usr/bin/python3, which has Debian's torch and transformers from
scripts/setup.sh) builds random-weight M2M100ForConditionalGeneration checkpoints of two shapes (below)
with transformers' own tokenizers saved beside them: NllbTokenizer (sentencepiece.bpe.model alone,
fairseq's id offset, 202 language codes such as deu_Latn at the ids of tokenizer_config.json's
added_tokens_decoder, two spare embedding rows as NLLB's) and M2M100Tokenizer (vocab.json +
sentencepiece.bpe.model, the 100 codes __de__ after vocab.json's ids). The SentencePiece BPE model is
trained on 3,000 Multi30k English sentences (the shared data); 100 random piece sequences and 40 real
Multi30k test sentences are the inputs:
* greedy (`-b 1`): the same tokens as generate(num_beams=1, forced_bos_token_id=target code) on >= 99 %
  (near-ties between the two top tokens may flip in float32);
* beam 4 (`-b 4 --length-penalty 0 --no-early-stop`): the same as generate(num_beams=4, length_penalty=0,
  early_stopping=False) on >= 97 %;
* force decoding (`tern rescore --source-lang --target-lang`): every token's log-probability (the end
  token's included) within 1e-4 + 1e-5 x |value| (numpy.isclose's rule) of log_softmax of transformers'
  logits for the decoder input [</s>, code, greedy output];
* raw text: Tern's tokenization ([code] pieces </s>, `tern translate` without --pretokenized) gives the
  same text as the tokenizer + generate + batch_decode on >= 95 % of the real sentences, and the source
  ids the tokenizer gives equal Tern's (checked through --pretokenized input of the tokenizer's pieces
  translating like raw text);
* languages: `tern info` lists the codes; an unknown code, a missing --target-lang on raw text and a
  code given to a bilingual model are errors naming the flag's value.
Binary: $TERN_BIN (default build/tern).
"""
import json
import os
import random
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern")
TORCH_PY = os.environ.get("TERN_TORCH_PYTHON", "/usr/bin/python3")
REF = os.path.join(ROOT, "tests", "tools", "hf_m2m100_ref.py")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
N_INPUTS, MAX_LEN, N_TEXTS = 100, 30, 40

# (label, tokenizer, source and target language as the tokenizer takes them, Tern's codes,
#  M2M100Config keywords, spare embedding rows)
SHAPES = [
    ("nllb-d32-h4-2x2-relu", "nllb", "eng_Latn", "deu_Latn", "eng_Latn", "deu_Latn",
     dict(d_model=32, encoder_attention_heads=4, decoder_attention_heads=4, encoder_layers=2, decoder_layers=2,
          encoder_ffn_dim=64, decoder_ffn_dim=64, activation_function="relu", scale_embedding=True,
          max_position_embeddings=64), 2),
    ("m2m100-d48-h6-1x3-gelu-unscaled", "m2m100", "en", "fr", "__en__", "__fr__",
     dict(d_model=48, encoder_attention_heads=6, decoder_attention_heads=6, encoder_layers=1, decoder_layers=3,
          encoder_ffn_dim=40, decoder_ffn_dim=40, activation_function="gelu", scale_embedding=False,
          max_position_embeddings=100), 0),
]


def run(*args, input=None, check=True):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=ENV, input=input, timeout=600)
    if check:
        assert r.returncode == 0, f"{args[:3]}: {r.stderr[-2000:]}"
    return r


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, data_dir):
    if not os.path.exists(TERN):
        pytest.skip(f"{TERN} not built")
    r = subprocess.run([TORCH_PY, "-c", "import transformers, torch, sentencepiece"], capture_output=True, text=True) \
        if os.path.exists(TORCH_PY) else None
    if r is None or r.returncode != 0:
        msg = f"transformers/torch not available under {TORCH_PY} (run scripts/setup.sh)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    sp_mod = pytest.importorskip("sentencepiece")
    top = tmp_path_factory.mktemp("hf_m2m")
    with open(os.path.join(data_dir, "multi30k", "train.en"), encoding="utf-8") as f:
        train = [next(f) for _ in range(3000)]
    (top / "train.txt").write_text("".join(train), encoding="utf-8")
    sp_mod.SentencePieceTrainer.train(input=str(top / "train.txt"), model_prefix=str(top / "sp"), vocab_size=300,
                                      model_type="bpe", character_coverage=0.9995, num_threads=1, minloglevel=2)
    sp = sp_mod.SentencePieceProcessor(model_file=str(top / "sp.model"))
    pieces = [sp.id_to_piece(i) for i in range(3, sp.get_piece_size())]
    rng = random.Random(5)
    inputs = [[rng.choice(pieces) for _ in range(rng.randint(1, 15))] for _ in range(N_INPUTS)]
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        texts = [line.rstrip("\n") for line in f][:N_TEXTS]
    cases = []
    for label, tk, sl, tl, _, _, kw, spare in SHAPES:
        d = top / label / "model"
        d.mkdir(parents=True)
        cases.append({"dir": str(d), "seed": sum(map(ord, label)), "tokenizer": tk, "spm": str(top / "sp.model"),
                      "config": dict(kw, forced_eos_token_id=None), "spare_rows": spare, "src_lang": sl, "tgt_lang": tl,
                      "init_std": 0.15, "qk_std": 0.35, "cross_std": 0.5, "emb_std": 0.5 if kw["scale_embedding"] else 1.0,
                      "max_len": MAX_LEN, "inputs": inputs, "texts": texts,
                      "calibrate": {"lo": -20.0, "hi": 20.0, "iters": 6, "target": 10, "n": 20}})
    (top / "req.json").write_text(json.dumps({"cases": cases}))
    r = subprocess.run([TORCH_PY, REF, str(top / "req.json"), str(top / "ref.json")], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    outs = json.loads((top / "ref.json").read_text())["cases"]
    res = {}
    for shape, ref in zip(SHAPES, outs):
        d = top / shape[0]
        (d / "src.txt").write_text("".join(" ".join(s) + "\n" for s in inputs), encoding="utf-8")
        vocab = ref["vocab"]
        (d / "tgt.txt").write_text("".join(" ".join(vocab[i] for i in h) + "\n" for h in ref["greedy"]),
                                   encoding="utf-8")
        res[shape[0]] = (d, shape, ref, texts)
    return res


@pytest.fixture(params=[s[0] for s in SHAPES])
def case(request, checkpoints):
    return checkpoints[request.param]


def langs(shape):
    return ["--source-lang", shape[4], "--target-lang", shape[5]]


def translate(d, shape, *extra):
    out = run(TERN, "translate", "-m", d / "model", "--pretokenized", "-t", 1, "--max-decoding-length", MAX_LEN,
              "--min-length", 0, *langs(shape), *extra, input=(d / "src.txt").read_text(encoding="utf-8")).stdout
    return [line.split() for line in out.split("\n")[:N_INPUTS]]


def agreement(hyps, ref, vocab):
    want = [[vocab[i] for i in h] for h in ref]
    return sum(h == w for h, w in zip(hyps, want)) / len(want)


def test_greedy_and_force_decoding(case):
    d, shape, ref, _ = case
    same = agreement(translate(d, shape, "-b", 1), ref["greedy"], ref["vocab"])
    out = run(TERN, "rescore", "-m", d / "model", "-s", d / "src.txt", "--target", d / "tgt.txt", "--pretokenized",
              "-t", 1, *langs(shape)).stdout
    lps = [[float(x) for x in line.split("|||")[0].split()] for line in out.strip("\n").split("\n")]
    assert len(lps) == N_INPUTS and all(len(x) == len(y) for x, y in zip(lps, ref["force"]))
    diff = max(max(abs(a - b) for a, b in zip(x, y)) for x, y in zip(lps, ref["force"]))
    # numpy.isclose's rule: float32 logits of unlikely tokens (log-probs down to -56) carry relative errors
    worst = max(max(abs(a - b) - 1e-5 * abs(b) for a, b in zip(x, y)) for x, y in zip(lps, ref["force"]))
    lengths = [len(h) for h in ref["greedy"]]
    print(f"\n{shape[0]}: greedy identical {same:.1%} of {N_INPUTS} (lengths {min(lengths)}-{max(lengths)}, mean "
          f"{np.mean(lengths):.1f}); force decoding max |log-prob difference| {diff:.2e}")
    assert len(set(lengths)) > 5
    assert same >= 0.99
    assert worst <= 1e-4, diff


def test_beam4(case):
    d, shape, ref, _ = case
    same = agreement(translate(d, shape, "-b", 4, "--length-penalty", 0, "--no-early-stop"), ref["beam"], ref["vocab"])
    differs = sum(b != g for b, g in zip(ref["beam"], ref["greedy"]))
    print(f"\n{shape[0]}: beam 4 identical {same:.1%} of {N_INPUTS} (transformers' beam differs from its greedy on "
          f"{differs})")
    assert differs > 0
    assert same >= 0.97


def test_raw_text(case):
    """Real sentences through Tern's tokenizer ([code] pieces </s>) and back through SentencePiece: the
    same text as the HF tokenizer + generate + batch_decode; and the tokenizer's own ids, given as
    pieces, translate to the same text as the raw line (the same source ids)."""
    d, shape, ref, texts = case
    lines = "".join(t + "\n" for t in texts)
    out = run(TERN, "translate", "-m", d / "model", "-t", 1, "-b", 1, "--max-decoding-length", MAX_LEN,
              "--min-length", 0, "--drop-unk", *langs(shape), input=lines).stdout.split("\n")[:len(texts)]
    same = sum(a.strip() == b.strip() for a, b in zip(out, ref["text"])) / len(texts)
    vocab = ref["vocab"]
    # the tokenizer's ids without the leading code and the final </s> (Tern adds both)
    pieces = "".join(" ".join(vocab[i] for i in ids[1:-1]) + "\n" for ids in ref["text_ids"])
    assert all(ids[-1] == 2 and vocab[ids[0]] in (shape[4], shape[2]) for ids in ref["text_ids"])
    out2 = run(TERN, "translate", "-m", d / "model", "-t", 1, "-b", 1, "--max-decoding-length", MAX_LEN,
               "--min-length", 0, "--pretokenized", *langs(shape), input=pieces).stdout.split("\n")[:len(texts)]
    # the pieces joined as SentencePiece does (these pieces have no byte fallback): the same text as
    # Tern's raw-text translation, so Tern cut the lines into the tokenizer's ids
    skip = set(ref["special"]) | {"<unk>"}
    joined = ["".join(p for p in line.split() if p not in skip).replace("\u2581", " ").strip() for line in out2]
    same_ids = sum(a == b.strip() for a, b in zip(joined, out)) / len(texts)
    assert same_ids >= 0.95, same_ids
    print(f"\n{shape[0]}: raw text identical on {same:.1%} of {len(texts)} Multi30k sentences; the tokenizer's ids "
          f"translate as Tern's own tokenization on {same_ids:.1%}")
    assert same >= 0.95 and any(ref["text"])


def test_languages(case, tmp_path):
    d, shape, ref, _ = case
    info = run(TERN, "info", "-m", d / "model").stdout
    assert "format: huggingface" in info and "norm: pre" in info, info
    line = next(x for x in info.split("\n") if x.startswith("languages"))
    codes = line.split(":", 1)[1].split()
    assert shape[5] in codes and len(codes) == (202 if shape[1] == "nllb" else 100), line
    r = run(TERN, "translate", "-m", d / "model", "--source-lang", shape[4], "--target-lang", "xx_Nope",
            input="a man\n", check=False)
    assert r.returncode != 0 and "xx_Nope" in r.stderr and "target_lang" in r.stderr, r.stderr
    r = run(TERN, "translate", "-m", d / "model", "--source-lang", shape[4], input="a man\n", check=False)
    assert r.returncode != 0 and "multilingual" in r.stderr, r.stderr
    if shape[1] == "m2m100":  # M2M100Tokenizer's short codes ("fr") are the same languages
        a = run(TERN, "translate", "-m", d / "model", "-b", 1, *langs(shape), input="A dog runs.\n").stdout
        b = run(TERN, "translate", "-m", d / "model", "-b", 1, "--source-lang", "en", "--target-lang", "fr",
                input="A dog runs.\n").stdout
        assert a == b and a.strip(), (a, b)


def test_python(case, tern_python):
    """tern.Translator: source_lang/target_lang on raw text as the CLI; CTranslate2's NLLB form (the
    source's code and </s> among the tokens, the target's code as target_prefix, kept in the output)
    as transformers' greedy outputs; info()["languages"]."""
    d, shape, ref, texts = case
    t = tern_python.Translator(str(d / "model"), intra_threads=1)
    assert shape[5] in t.info["languages"]
    res = t.translate_batch(texts[:10], beam_size=1, max_decoding_length=MAX_LEN, min_decoding_length=0,
                            source_lang=shape[4], target_lang=shape[5])
    cli = run(TERN, "translate", "-m", d / "model", "-t", 1, "-b", 1, "--max-decoding-length", MAX_LEN,
              "--min-length", 0, *langs(shape), input="".join(x + "\n" for x in texts[:10])).stdout.split("\n")[:10]
    assert [r.hypotheses[0] for r in res] == cli
    vocab = ref["vocab"]
    toks = [[vocab[i] for i in ids] for ids in ref["ids"][:50]]  # [code] pieces </s>
    assert all(s[0] == shape[4] and s[-1] == "</s>" for s in toks)
    res = t.translate_batch(toks, target_prefix=[[shape[5]]] * len(toks), beam_size=1,
                            max_decoding_length=MAX_LEN, min_decoding_length=0)
    want = [[shape[5]] + [vocab[i] for i in h] for h in ref["greedy"][:50]]
    same = sum(r.hypotheses[0] == w for r, w in zip(res, want)) / len(want)
    print(f"\n{shape[0]}: Python, CTranslate2's token form: {same:.0%} identical to transformers")
    assert same >= 0.98
    with pytest.raises(Exception, match="xx_Nope"):
        t.translate_batch(["a"], source_lang=shape[4], target_lang="xx_Nope")


def test_convert_ct2(case, tmp_path):
    """`tern convert --from HF_DIR --to ct2`: ctranslate2 (the peer) loads the directory and gives
    transformers' greedy outputs (the source's code + pieces as tokens, </s> added by the written
    config's add_source_eos, the target's code as target_prefix, the pad token suppressed as
    generate's bad_words_ids); Tern reads the written directory back to the same outputs."""
    ct2 = pytest.importorskip("ctranslate2")
    d, shape, ref, _ = case
    out = tmp_path / "ct2"
    run(TERN, "convert", "--from", d / "model", "-o", out, "--to", "ct2")
    vocab = ref["vocab"]
    src = [[vocab[i] for i in ids[:-1]] for ids in ref["ids"]]
    t = ct2.Translator(str(out), intra_threads=1)
    res = t.translate_batch(src, target_prefix=[[shape[5]]] * len(src), beam_size=1, max_decoding_length=MAX_LEN,
                            min_decoding_length=0, suppress_sequences=[["<pad>"]])
    want = [[shape[5]] + [vocab[i] for i in h] for h in ref["greedy"]]
    same = sum(r.hypotheses[0] == w for r, w in zip(res, want)) / len(want)
    (tmp_path / "pad.txt").write_text("<pad>\n")
    (tmp_path / "prefix.txt").write_text((shape[5] + "\n") * len(src))
    back = run(TERN, "translate", "-m", out, "--pretokenized", "-t", 1, "-b", 1, "--max-decoding-length", MAX_LEN,
               "--min-length", 0, "--suppress", tmp_path / "pad.txt", "--target-prefix", tmp_path / "prefix.txt",
               input="".join(" ".join(s) + "\n" for s in src)).stdout.split("\n")
    same_back = sum(line.split() == w for line, w in zip(back, want)) / len(want)
    print(f"\n{shape[0]}: ctranslate2 {ct2.__version__} on the converted directory: greedy identical to "
          f"transformers on {same:.1%}; Tern on it: {same_back:.1%}")
    assert same >= 0.99 and same_back >= 0.99


def test_bad_checkpoints(case, tmp_path):
    """Broken tokenizer files and tensors: errors naming the file and the key, token or tensor."""
    import shutil
    d, shape, ref, _ = case
    if shape[1] != "nllb":
        pytest.skip("checked on the NLLB shape")

    def broken(name, edit, *extra):
        m = tmp_path / name
        shutil.copytree(d / "model", m)
        edit(m)
        r = run(TERN, "translate", "-m", m, "--pretokenized", *extra, input="a\n", check=False)
        assert r.returncode != 0
        return r.stderr

    def tok_config(m, f):
        c = json.loads((m / "tokenizer_config.json").read_text())
        f(c)
        (m / "tokenizer_config.json").write_text(json.dumps(c))

    err = broken("a", lambda m: os.remove(m / "sentencepiece.bpe.model"))
    assert "sentencepiece.bpe.model" in err and "missing" in err, err
    err = broken("b", lambda m: tok_config(m, lambda c: c["added_tokens_decoder"].update(
        {"99999": {"content": "zzz_Zzzz"}})))
    assert "tokenizer_config.json" in err and "zzz_Zzzz" in err and "99999" in err, err
    err = broken("c", lambda m: tok_config(m, lambda c: c["additional_special_tokens"].append("qqq_Qqqq")))
    assert "tokenizer_config.json" in err and "qqq_Qqqq" in err, err
    err = broken("d", lambda m: tok_config(m, lambda c: c.update(added_tokens_decoder={"x": {"content": "a"}})))
    assert "added_tokens_decoder" in err and "'x'" in err, err

    def drop_tensor(m):  # with the reference's Python, which has safetensors
        f = str(m / "model.safetensors")
        subprocess.run([TORCH_PY, "-c", "import sys; from safetensors.torch import load_file, save_file; "
                        "t = load_file(sys.argv[1]); del t['model.encoder.layer_norm.weight']; "
                        "save_file(t, sys.argv[1], metadata={'format': 'pt'})", f], check=True)
    err = broken("e", drop_tensor)
    assert "model.safetensors" in err and "encoder.layer_norm.weight" in err, err
    # the language of a bilingual model
    r = run(TERN, "translate", "-m", os.path.join(ROOT, "models", "en-de"), "--source-lang", "eng_Latn",
            "--target-lang", "deu_Latn", input="a\n", check=False)
    assert r.returncode != 0 and "not a multilingual model" in r.stderr, r.stderr
