"""Hugging Face MarianMT checkpoints loaded as they are (`tern translate -m HF_DIR`), against transformers.

tests/tools/hf_marian_ref.py (run by /usr/bin/python3, which has Debian's torch and transformers
from scripts/setup.sh) builds random-weight MarianMTModel checkpoints of three shapes (below) with
MarianConfig, save_pretrained(safe_serialization=True) and a vocab.json, and decodes 200 random
inputs of each with generate(); Tern reads the directory as transformers wrote it:
* greedy (`tern translate -b 1`): the same tokens as generate(num_beams=1) on >= 99.5 % of the
  inputs (near-ties between the two top tokens may flip in float32);
* beam 4 (`-b 4 --length-penalty 0 --no-early-stop`): the same as generate(num_beams=4,
  length_penalty=0, early_stopping=False) on >= 97 %;
* force decoding (`tern rescore`): every token's log-probability (the end token's included) within
  1e-4 of log_softmax of transformers' logits (targets: transformers' greedy outputs);
* int8 (`--compute-type int8`): agreement reported, loosely bounded (INT8_* below);
* raw text through source.spm/target.spm: `tern translate` without --pretokenized gives
  MarianTokenizer + generate + batch_decode's text;
* bad checkpoints: an unknown model_type, a missing tokenizer file, a vocab.json that does not match
  the embedding rows, a truncated or incomplete model.safetensors: errors naming the file and the
  key or tensor.
The second shape's file holds the whole state dict, the position tables included (as older
checkpoints do; the others, as save_pretrained writes them, leave them to be computed). The pad
token's final_logits_bias is raised (+1.5): it would often be the argmax, and both sides
must never output it (transformers: bad_words_ids; Tern: the pad token suppressed, renormalized,
which generate's renormalize_logits=True matches). Binary: $TERN_BIN (default build/tern).
"""
import json
import os
import random
import shutil
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern")
TORCH_PY = os.environ.get("TERN_TORCH_PYTHON", "/usr/bin/python3")
REF = os.path.join(ROOT, "tests", "tools", "hf_marian_ref.py")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
N_INPUTS, MAX_LEN = 200, 30
INT8_MIN_SAME, INT8_MAX_DIFF = 0.40, 3.0  # measured 52-79 % and 0.49-1.98 (docs/models.md)

# (label, MarianConfig keywords, std of the embeddings: without scale_embedding they need more to
# weigh against the positions): post-norm always (MarianMTModel has no other).
SHAPES = [
    ("d32-h4-2x2-swish-tied", dict(d_model=32, encoder_attention_heads=4, decoder_attention_heads=4, encoder_layers=2,
                                   decoder_layers=2, encoder_ffn_dim=64, decoder_ffn_dim=64, activation_function="swish",
                                   scale_embedding=True, share_encoder_decoder_embeddings=True,
                                   tie_word_embeddings=True, max_position_embeddings=64), 0.15),
    ("d48-h6-1x3-relu-separate-untied", dict(d_model=48, encoder_attention_heads=6, decoder_attention_heads=6,
                                             encoder_layers=1, decoder_layers=3, encoder_ffn_dim=40,
                                             decoder_ffn_dim=40, activation_function="relu", scale_embedding=False,
                                             share_encoder_decoder_embeddings=False, tie_word_embeddings=False,
                                             max_position_embeddings=128), 1.0),
    ("d64-h2-3x1-gelu", dict(d_model=64, encoder_attention_heads=2, decoder_attention_heads=2, encoder_layers=3,
                             decoder_layers=1, encoder_ffn_dim=96, decoder_ffn_dim=96, activation_function="gelu",
                             scale_embedding=True, share_encoder_decoder_embeddings=True, tie_word_embeddings=False,
                             max_position_embeddings=100), 0.15),
]


def run(*args, input=None, check=True):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=ENV, input=input, timeout=600)
    if check:
        assert r.returncode == 0, f"{args[:3]}: {r.stderr[-2000:]}"
    return r


def have_reference():
    if not os.path.exists(TORCH_PY):
        return False, f"{TORCH_PY} not found"
    r = subprocess.run([TORCH_PY, REF, "info"], capture_output=True, text=True)
    return r.returncode == 0, r.stderr[-300:]


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    """A small unigram SentencePiece model on synthetic sentences, and MarianMT's vocabulary over
    its pieces: </s> 0, <unk> 1, two language codes, the pieces, <pad> last (as OPUS-MT's)."""
    if not os.path.exists(TERN):
        pytest.skip(f"{TERN} not built")
    ok, why = have_reference()
    if not ok:
        msg = f"transformers/torch not available under {TORCH_PY} (run scripts/setup.sh): {why}"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    sp_mod = pytest.importorskip("sentencepiece")
    d = tmp_path_factory.mktemp("hf_spm")
    rng = random.Random(7)
    words = ["".join(rng.choice("aeioulmnrstkdp") for _ in range(rng.randint(2, 7))) for _ in range(60)]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 10))) for _ in range(2000)]
    (d / "train.txt").write_text("\n".join(lines) + "\n")
    sp_mod.SentencePieceTrainer.train(input=str(d / "train.txt"), model_prefix=str(d / "sp"), vocab_size=70,
                                      model_type="unigram", character_coverage=1.0, num_threads=1, minloglevel=2)
    sp = sp_mod.SentencePieceProcessor(model_file=str(d / "sp.model"))
    pieces = [sp.id_to_piece(i) for i in range(3, sp.get_piece_size())]
    vocab = ["</s>", "<unk>", ">>fra<<", ">>deu<<"] + pieces + ["<pad>"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 9))) for _ in range(40)]
    # target-language codes as multilingual OPUS-MT models take them (MarianTokenizer keeps a leading
    # ">>...<<" whole and cuts such a span out of the text wherever it is); >>xyz<< is unknown
    for i, code in enumerate([">>fra<< ", ">>deu<<", ">>xyz<< ", ">>fra<<  "]):
        texts[i] = code + texts[i]
    texts[4] = texts[4] + " >>deu<< " + texts[5]
    return {"model": d / "sp.model", "vocab": vocab, "texts": texts}


@pytest.fixture(scope="module")
def checkpoints(spm, tmp_path_factory):
    """Every shape's checkpoint and transformers' outputs, from one reference process: {label: (dir,
    request, reference outputs)}."""
    vocab = spm["vocab"]
    V = len(vocab)
    top = tmp_path_factory.mktemp("hf")
    rng = np.random.default_rng(11)
    srcs = [[int(i) for i in rng.integers(2, V - 1, size=int(rng.integers(1, 16)))] for _ in range(N_INPUTS)]
    cases = []
    for label, kw, emb_std in SHAPES:
        model = top / label / "model"
        model.mkdir(parents=True)
        for name in ("source.spm", "target.spm"):
            shutil.copy(spm["model"], model / name)
        config = dict(kw, vocab_size=V, decoder_vocab_size=V, pad_token_id=V - 1, eos_token_id=0,
                      decoder_start_token_id=V - 1, forced_eos_token_id=None, bad_words_ids=[[V - 1]])
        cases.append({"dir": str(model), "seed": sum(map(ord, label)), "config": config, "vocab": vocab,
                      "init_std": 0.15, "qk_std": 0.35, "cross_std": 0.5, "emb_std": emb_std, "pad_bias": 1.5, "max_len": MAX_LEN, "inputs": srcs, "beam": 4,
                      "calibrate": {"lo": -3.0, "hi": 6.0, "iters": 6, "target": 10, "n": 20},
                      "texts": spm["texts"] if label == SHAPES[0][0] else [],
                      "store_positions": not kw["share_encoder_decoder_embeddings"]})
    (top / "req.json").write_text(json.dumps({"cases": cases}))
    r = subprocess.run([TORCH_PY, REF, str(top / "req.json"), str(top / "ref.json")], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    outs = json.loads((top / "ref.json").read_text())["cases"]
    res = {}
    for (label, _, _), req, ref in zip(SHAPES, cases, outs):
        d = top / label
        (d / "src.txt").write_text("".join(" ".join(vocab[i] for i in s) + "\n" for s in srcs))
        (d / "tgt.txt").write_text("".join(" ".join(vocab[i] for i in h) + "\n" for h in ref["greedy"]))
        res[label] = (d, req, ref)
    return res


@pytest.fixture(params=[s[0] for s in SHAPES])
def case(request, checkpoints, spm):
    d, req, ref = checkpoints[request.param]
    return request.param, d, spm["vocab"], ref


def translate(d, *extra):
    out = run(TERN, "translate", "-m", d / "model", "--pretokenized", "-t", 1, "--max-decoding-length", MAX_LEN,
              "--min-length", 1, *extra, input=(d / "src.txt").read_text()).stdout
    return [line.split() for line in out.split("\n")[:N_INPUTS]]


def rescore(d, *extra):
    out = run(TERN, "rescore", "-m", d / "model", "-s", d / "src.txt", "--target", d / "tgt.txt", "--pretokenized",
              "-t", 1, *extra).stdout
    return [[float(x) for x in line.split("|||")[0].split()] for line in out.strip("\n").split("\n")]


def agreement(hyps, ref, vocab):
    want = [[vocab[i] for i in h] for h in ref]
    return sum(h == w for h, w in zip(hyps, want)) / N_INPUTS


def test_greedy_and_force_decoding(case):
    label, d, vocab, ref = case
    same = agreement(translate(d, "-b", 1), ref["greedy"], vocab)
    lps = rescore(d)
    assert len(lps) == N_INPUTS and all(len(x) == len(y) for x, y in zip(lps, ref["force"]))
    diff = max(max(abs(a - b) for a, b in zip(x, y)) for x, y in zip(lps, ref["force"]))
    lengths = [len(h) for h in ref["greedy"]]
    print(f"\n{label}: greedy identical {same:.1%} of {N_INPUTS} (lengths {min(lengths)}-{max(lengths)}, mean "
          f"{np.mean(lengths):.1f}); force decoding max |log-prob difference| {diff:.2e}")
    assert len(set(lengths)) > 5
    assert same >= 0.995
    assert diff <= 1e-4


def test_beam4(case):
    label, d, vocab, ref = case
    same = agreement(translate(d, "-b", 4, "--length-penalty", 0, "--no-early-stop"), ref["beam"], vocab)
    differs = sum(b != g for b, g in zip(ref["beam"], ref["greedy"]))
    print(f"\n{label}: beam 4 identical {same:.1%} of {N_INPUTS} (transformers' beam differs from its greedy on "
          f"{differs})")
    assert differs > 0
    assert same >= 0.97


def test_int8(case):
    label, d, vocab, ref = case
    same = agreement(translate(d, "-b", 1, "--compute-type", "int8"), ref["greedy"], vocab)
    lps = rescore(d, "--compute-type", "int8")
    diff = max(max(abs(a - b) for a, b in zip(x, y)) for x, y in zip(lps, ref["force"]))
    print(f"\n{label}: int8 greedy identical {same:.1%}; force decoding max |log-prob difference| {diff:.3g}")
    assert same >= INT8_MIN_SAME
    assert diff <= INT8_MAX_DIFF


def test_raw_text_through_spm(case, spm):
    """Raw text: a leading language code kept whole, source.spm pieces, vocab.json ids, </s> appended
    (MarianTokenizer), the output decoded by target.spm (batch_decode): the same text as
    transformers gives."""
    label, d, vocab, ref = case
    if "text" not in ref:
        pytest.skip("raw text is checked on the first shape")
    texts = ref["text"]["text"]
    lines = [t + "\n" for t in spm["texts"]]
    out = run(TERN, "translate", "-m", d / "model", "-t", 1, "-b", 1, "--max-decoding-length", MAX_LEN,
              "--drop-unk", input="".join(lines)).stdout.split("\n")[:len(lines)]
    # batch_decode drops <unk> (a special token: --drop-unk) and strips the text's ends
    same = sum(a.strip() == b for a, b in zip(out, texts)) / len(texts)
    print(f"\n{label}: raw text identical on {same:.1%} of {len(texts)} lines")
    assert same >= 0.95 and any(texts)


def test_info(case):
    label, d, vocab, ref = case
    out = run(TERN, "info", "-m", d / "model").stdout
    assert "format: huggingface" in out, out


def broken(case, tmp_path, edit):
    label, d, vocab, ref = case
    m = tmp_path / "m"
    shutil.copytree(d / "model", m)
    edit(m)
    r = run(TERN, "translate", "-m", m, "--pretokenized", input="w\n", check=False)
    assert r.returncode != 0
    return r.stderr


def test_bad_checkpoints(case, tmp_path):
    label, d, vocab, ref = case
    if label != SHAPES[0][0]:
        pytest.skip("checked on the first shape")

    def config(m, **kw):
        c = json.loads((m / "config.json").read_text())
        c.update(kw)
        (m / "config.json").write_text(json.dumps(c))

    err = broken(case, tmp_path / "a", lambda m: config(m, model_type="t5"))
    assert "config.json" in err and "model_type" in err and "'t5'" in err, err
    err = broken(case, tmp_path / "b", lambda m: (m / "vocab.json").write_text(json.dumps({p: i for i, p in
                                                                                            enumerate(vocab[:-1])})))
    assert "vocab.json" in err and "shared.weight" in err and "rows" in err, err

    def truncate(m):
        p = m / "model.safetensors"
        p.write_bytes(p.read_bytes()[:-100])
    err = broken(case, tmp_path / "c", truncate)
    assert "model.safetensors" in err, err
    err = broken(case, tmp_path / "d", lambda m: config(m, encoder_layers=3))
    assert "model.safetensors" in err and "encoder.layers.2." in err, err
    err = broken(case, tmp_path / "e", lambda m: config(m, d_model=48))
    assert "shared.weight" in err and "expected shape" in err, err
    err = broken(case, tmp_path / "g", lambda m: config(m, activation_function="mish"))
    assert "config.json" in err and "activation_function" in err and "'mish'" in err, err
    err = broken(case, tmp_path / "h", lambda m: config(m, tie_word_embeddings=False))
    assert "lm_head.weight" in err and "tie_word_embeddings" in err, err
    err = broken(case, tmp_path / "i", lambda m: config(m, bad_words_ids=[[]]))
    assert "config.json" in err and "bad_words_ids" in err, err
    err = broken(case, tmp_path / "j", lambda m: (m / "vocab.json").write_text(json.dumps(
        {p: (1 if p == "</s>" else i) for i, p in enumerate(vocab)})))
    assert "vocab.json" in err and "'</s>'" in err and "same id 1" in err, err
    # tern convert does not write a broken Tern directory from it
    r = run(TERN, "convert", "--from", d / "model", "-o", tmp_path / "conv", check=False)
    assert r.returncode != 0 and "Hugging Face" in r.stderr and not (tmp_path / "conv").exists(), r.stderr
    # a missing tokenizer file: an error naming it when raw text is to be read
    m = tmp_path / "f"
    shutil.copytree(d / "model", m)
    os.remove(m / "target.spm")
    r = run(TERN, "translate", "-m", m, input="w\n", check=False)
    assert r.returncode != 0 and "target.spm" in r.stderr, r.stderr


def test_convert_ct2(case, tmp_path):
    """`tern convert --from HF_DIR --to ct2`: ctranslate2 (the peer) runs the written directory to
    transformers' greedy outputs (the pad token suppressed, as generate's bad_words_ids)."""
    ct2 = pytest.importorskip("ctranslate2")
    label, d, vocab, ref = case
    out = tmp_path / "ct2"
    run(TERN, "convert", "--from", d / "model", "-o", out, "--to", "ct2")
    src = [line.split() for line in (d / "src.txt").read_text().split("\n")[:N_INPUTS]]
    t = ct2.Translator(str(out), intra_threads=1)
    res = t.translate_batch(src, beam_size=1, max_decoding_length=MAX_LEN, min_decoding_length=1,
                            suppress_sequences=[["<pad>"]])
    same = agreement([r.hypotheses[0] for r in res], ref["greedy"], vocab)
    print(f"\n{label}: ctranslate2 {ct2.__version__} on the converted directory: greedy identical on {same:.1%}")
    assert same >= 0.99


def test_finetune_from_checkpoint(checkpoints, spm, tmp_path):
    """`tern train --init-from HF_DIR` (issue 26 point 4) on the first shape: the checkpoint is
    imported (converted into SAVE_DIR/imported-model: its CTranslate2 form, generation_config.json's
    bad_words_ids kept) and trained on new data, a copy task on 400 sentences of the tokenizer's
    text (target = source):
    * lossless: one update at lr 1e-12 gives a checkpoint whose force-decoding log-probs of 60
      held-out pairs equal the Hugging Face checkpoint's (transformers' own, checked above) within
      1e-4 per token, which keeps generation_config.json (the pad token never generated);
    * it learns: 120 updates at lr 3e-3 lower the training loss (mean of the last 5 updates below
      the first by > 1 nat), raise the held-out pairs' mean token log-prob by > 0.4 nat, and move the
      greedy translations towards the new targets (sacreBLEU's chrF against them up by > 5; BLEU
      stays near 0: a model of 0.05M parameters does not learn to copy random words in 120 updates);
    * the result loads: Tern translates the checkpoint (above), and reads it again after
      `tern convert --to hf` (the same greedy outputs)."""
    sacrebleu = pytest.importorskip("sacrebleu")
    d, _, _ = checkpoints[SHAPES[0][0]]
    model = d / "model"
    lines = [x for x in (spm["model"].parent / "train.txt").read_text().split("\n") if x][:460]
    for name, part in (("train", lines[:400]), ("held", lines[400:])):
        for side in ("src", "tgt"):
            (tmp_path / f"{name}.{side}").write_text("\n".join(part) + "\n")

    def logprobs(m):
        out = run(TERN, "rescore", "-m", m, "-s", tmp_path / "held.src", "--target", tmp_path / "held.tgt",
                  "-t", 1).stdout
        return [[float(x) for x in line.split("|||")[0].split()] for line in out.strip("\n").split("\n")]

    def greedy(m):
        return run(TERN, "translate", "-m", m, "-t", 1, "-b", 1, "--max-decoding-length", MAX_LEN,
                   input=(tmp_path / "held.src").read_text()).stdout.split("\n")[:60]

    def train(save, updates, lr, sched, *extra):
        run(TERN, "train", "--init-from", model, "--train-src", tmp_path / "train.src", "--train-tgt",
            tmp_path / "train.tgt", "--save-dir", save, "--max-updates", updates, "--lr", lr, "--lr-scheduler", sched,
            "--max-len", 64, "--dropout", 0, "-t", 1, "--seed", 3, "-q", *extra)
        ckpts = sorted(p for p in os.listdir(save) if p.startswith("checkpoint-"))
        return save / ckpts[-1]

    base = logprobs(model)
    same = train(tmp_path / "same", 1, 1e-12, "constant",  # no warm-up: its first rate would be 1e-7
                 "--valid-src", tmp_path / "held.src", "--valid-tgt", tmp_path / "held.tgt", "--no-bleu",
                 "--valid-interval-updates", 1,
                 "--label-smoothing", 0)
    assert (same / "generation_config.json").exists()
    # the trainer's forward is inference's: its validation nll (the decoder started from the pad
    # token's zero embedding plus position 0, as MarianMT does) = the force-decoding log-probs' mean
    valid_nll = float((tmp_path / "same" / "valid_curve.tsv").read_text().splitlines()[-1].split("\t")[3])
    lp_same = logprobs(same)
    infer_nll = -sum(map(sum, lp_same)) / sum(map(len, lp_same))
    print(f"\nvalidation nll {valid_nll:.7f}, force decoding {infer_nll:.7f}")
    assert abs(valid_nll - infer_nll) <= 1e-5 * infer_nll
    worst = max(abs(a - b) for x, y in zip(base, logprobs(same)) for a, b in zip(x, y))
    print(f"\nimported at lr 1e-12: max |log-prob difference| {worst:.2e} over {sum(map(len, base))} tokens")
    assert all(len(x) == len(y) for x, y in zip(base, logprobs(same))) and worst <= 1e-4
    assert not any("<pad>" in h for h in greedy(same))

    ft = train(tmp_path / "ft", 120, 3e-3, "constant")
    curve = [line.split("\t") for line in (tmp_path / "ft" / "train_curve.tsv").read_text().split("\n")[1:] if line]
    loss = [float(r[2]) for r in curve]
    after = logprobs(ft)
    mean = lambda rows: sum(map(sum, rows)) / sum(map(len, rows))
    refs = (tmp_path / "held.tgt").read_text().split("\n")[:60]
    b0 = sacrebleu.corpus_chrf(greedy(model), [refs]).score
    hyps = greedy(ft)
    b1 = sacrebleu.corpus_chrf(hyps, [refs]).score
    print(f"fine-tuned 120 updates: training loss {loss[0]:.3f} -> {np.mean(loss[-5:]):.3f}; held-out mean token "
          f"log-prob {mean(base):.3f} -> {mean(after):.3f}; chrF against the new targets {b0:.1f} -> {b1:.1f}")
    assert np.mean(loss[-5:]) < loss[0] - 1.0
    assert mean(after) > mean(base) + 0.4
    assert b1 > b0 + 5
    run(TERN, "convert", "--from", ft, "--to", "hf", "-o", tmp_path / "hf-out")
    assert greedy(tmp_path / "hf-out") == hyps
