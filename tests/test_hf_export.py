"""`tern convert --to hf`: a Tern Transformer written as a Hugging Face MarianMT checkpoint, which
transformers' MarianMTModel.from_pretrained loads and runs as Tern runs the original.

Three post-norm models of different shapes (tests/peer/make_models.py, ctranslate2's spec API with random
weights, layer-norm epsilon 1e-5 and add_source_eos, as MarianMT's tokenizer gives sources): separate
vocabularies with an untied projection and sinusoidal positions; shared embeddings tied to the projection
with GELU; separate vocabularies with a tied projection and learned position tables. 200 random inputs each
(pieces, --pretokenized), decoded by `tern translate` on the original and by transformers 4.40.2 (float32,
tests/tools/hf_export_ref.py, run by /usr/bin/python3 with Debian's torch) on the export:
* greedy (`-b 1` against generate(num_beams=1)): identical on >= 99.5 % of the inputs;
* beam 4 (`-b 4 --length-penalty 0 --no-early-stop` against num_beams=4, length_penalty=0,
  early_stopping=False, as tests/test_hf_marian.py): identical on >= 97 %;
* force decoding (`tern rescore` of Tern's greedy outputs on the original against log_softmax of
  transformers' logits on the export): every token within 1e-4;
* from_pretrained leaves no parameter at its random init (no missing key but tied ones);
* Tern reads the export back (`tern translate -m EXPORT`): byte-identical output, greedy and beam 4;
* an int8 copy (`tern convert --quantize int8`) is exported dequantized: transformers on it equals
  `tern translate --compute-type float32` of the int8 copy (>= 99.5 %);
* raw text: a model over the shipped en-de SentencePiece model's pieces (source.spm/target.spm copied into
  the export): MarianTokenizer + generate + batch_decode on the export gives `tern translate`'s text on the
  original for >= 95 % of 40 Multi30k sentences;
* a model trained by `tern train --post-norm --layer-norm-eps 1e-5` (20 updates on 2,000 Multi30k pairs,
  the shipped SentencePiece model; its vocabulary's own <pad> becomes the pad token): raw text through
  MarianTokenizer + generate (greedy) + batch_decode on the export = `tern translate` on the checkpoint
  (>= 95 % of 40 lines), and Tern on the export gives the checkpoint's output byte for byte;
* refused, with the reason and no directory written: a pre-norm model, a model with layer-norm
  epsilon 1e-6 (CTranslate2's default), a model without add_source_eos, the shipped en-de (pre-norm),
  an existing non-empty output directory.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peer"))
TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern")
TORCH_PY = os.environ.get("TERN_TORCH_PYTHON", "/usr/bin/python3")
REF = os.path.join(HERE, "tools", "hf_export_ref.py")
MARIAN_REF = os.path.join(HERE, "tools", "hf_marian_ref.py")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
N_INPUTS, MAX_LEN = 200, 30

# (label, make_models shape, overrides): post-norm, epsilon 1e-5
SHAPES = [
    ("separate-untied-relu", "post-separate-untied", {}),
    ("shared-tied-gelu", "post-gelu-shared-all", {}),
    ("separate-tied-learnedpos", "post-big-vocab", {"learned_pos": True}),
]


def run(*args, input=None, check=True):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=ENV, input=input, timeout=900)
    if check:
        assert r.returncode == 0, f"{args[:3]}: {r.stderr[-2000:]}"
    return r


def make(shape_name, out, add_source_eos=True, **over):
    make_models = pytest.importorskip("make_models")
    shape = dict(make_models.SHAPES_BY_NAME[shape_name], eps=1e-5)
    shape.update(over)
    spec = make_models.make_spec(shape)
    spec.config.add_source_eos = add_source_eos
    spec.optimize()
    os.makedirs(out, exist_ok=True)
    spec.save(str(out))
    return make_models.vocabularies(shape)


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    if not os.path.exists(TERN):
        pytest.skip(f"{TERN} not built")
    pytest.importorskip("ctranslate2")
    r = subprocess.run([TORCH_PY, MARIAN_REF, "info"], capture_output=True, text=True)
    if r.returncode != 0:
        msg = f"transformers/torch not available under {TORCH_PY} (run scripts/setup.sh): {r.stderr[-300:]}"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    top = tmp_path_factory.mktemp("hfx")
    rng = np.random.default_rng(5)
    res, reqs = {}, []
    for label, shape, over in SHAPES:
        d = top / label
        src_vocab, tgt_vocab = make(shape, d / "model", **over)
        srcs = [[int(i) for i in rng.integers(3, len(src_vocab), size=int(rng.integers(1, 16)))]
                for _ in range(N_INPUTS)]
        (d / "src.txt").write_text("".join(" ".join(src_vocab[i] for i in s) + "\n" for s in srcs))
        greedy = translate(d / "model", d / "src.txt", "-b", 1)
        beam = translate(d / "model", d / "src.txt", "-b", 4, "--length-penalty", 0, "--no-early-stop")
        (d / "tgt.txt").write_text("".join(" ".join(h) + "\n" for h in greedy))
        lps = rescore(d / "model", d / "src.txt", d / "tgt.txt")
        conv = run(TERN, "convert", "-m", d / "model", "--to", "hf", "-o", d / "hf")
        tid = {p: i for i, p in enumerate(tgt_vocab)}
        reqs.append({"dir": str(d / "hf"), "inputs": srcs, "max_len": MAX_LEN, "beam": 4,
                     "force": [[tid[p] for p in h] for h in greedy]})
        res[label] = {"dir": d, "tgt_vocab": tgt_vocab, "greedy": greedy, "beam": beam, "lps": lps,
                      "convert": conv.stderr, "srcs": srcs}
    (top / "req.json").write_text(json.dumps({"cases": reqs}))
    r = subprocess.run([TORCH_PY, REF, str(top / "req.json"), str(top / "ref.json")], capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    for (label, _, _), ref in zip(SHAPES, json.loads((top / "ref.json").read_text())["cases"]):
        res[label]["ref"] = ref
    return res


def translate(model, src, *extra):
    out = run(TERN, "translate", "-m", model, "--pretokenized", "-t", 1, "--max-decoding-length", MAX_LEN,
              "--min-length", 1, *extra, input=open(src).read()).stdout
    return [line.split() for line in out.split("\n")[:N_INPUTS]]


def rescore(model, src, tgt):
    out = run(TERN, "rescore", "-m", model, "-s", src, "--target", tgt, "--pretokenized", "-t", 1).stdout
    return [[float(x) for x in line.split("|||")[0].split()] for line in out.strip("\n").split("\n")]


@pytest.fixture(params=[s[0] for s in SHAPES])
def case(request, cases):
    return request.param, cases[request.param]


def pieces(c, ids_list):
    return [[c["tgt_vocab"][i] for i in ids] for ids in ids_list]


def test_transformers_loads_everything(case):
    label, c = case
    ref = c["ref"]
    # tied weights (the shared embedding's other names, a tied lm_head) are the only keys not in the file
    assert all(k.endswith(("embed_tokens.weight", "lm_head.weight")) for k in ref["missing"]), ref["missing"]
    assert ref["unexpected"] == [], ref["unexpected"]
    cfg = ref["config"]
    print(f"\n{label}: transformers' config {cfg}")
    assert cfg["pad_token_id"] == len(c["tgt_vocab"])  # the appended pad row
    assert cfg["decoder_start_token_id"] == c["tgt_vocab"].index("<s>")
    assert cfg["eos_token_id"] == c["tgt_vocab"].index("</s>")


def test_greedy_and_force_decoding(case):
    label, c = case
    ref = c["ref"]
    same = sum(a == b for a, b in zip(c["greedy"], pieces(c, ref["greedy"]))) / N_INPUTS
    assert len(c["lps"]) == N_INPUTS and all(len(x) == len(y) for x, y in zip(c["lps"], ref["force"]))
    diff = max(max(abs(a - b) for a, b in zip(x, y)) for x, y in zip(c["lps"], ref["force"]))
    lengths = [len(h) for h in c["greedy"]]
    print(f"\n{label}: transformers greedy on the export identical to tern translate on {same:.1%} of {N_INPUTS} "
          f"(lengths {min(lengths)}-{max(lengths)}); force decoding max |log-prob difference| {diff:.2e}")
    assert len(set(lengths)) > 5
    assert same >= 0.995
    assert diff <= 1e-4


def test_beam4(case):
    label, c = case
    ref = c["ref"]
    same = sum(a == b for a, b in zip(c["beam"], pieces(c, ref["beam"]))) / N_INPUTS
    differs = sum(a != b for a, b in zip(c["beam"], c["greedy"]))
    print(f"\n{label}: transformers beam 4 on the export identical to tern on {same:.1%} of {N_INPUTS} "
          f"(beam differs from greedy on {differs})")
    assert differs > 0
    assert same >= 0.97


def test_tern_reads_export_back(case):
    label, c = case
    d = c["dir"]
    for extra in (("-b", 1), ("-b", 4, "--length-penalty", 0, "--no-early-stop")):
        a = run(TERN, "translate", "-m", d / "model", "--pretokenized", "-t", 1, "--max-decoding-length", MAX_LEN,
                *extra, input=(d / "src.txt").read_text()).stdout
        b = run(TERN, "translate", "-m", d / "hf", "--pretokenized", "-t", 1, "--max-decoding-length", MAX_LEN,
                *extra, input=(d / "src.txt").read_text()).stdout
        assert a == b, f"{label} {extra}: Tern on the export differs from Tern on the original"


def test_int8_dequantized(cases, tmp_path):
    label, c = SHAPES[0][0], cases[SHAPES[0][0]]
    d = c["dir"]
    run(TERN, "convert", "--from", d / "model", "-o", tmp_path / "q", "--quantize", "int8")
    r = run(TERN, "convert", "--from", tmp_path / "q", "-o", tmp_path / "hf", "--to", "hf")
    assert "dequantized" in r.stderr, r.stderr
    assert "dequantized" not in c["convert"]
    want = translate(tmp_path / "q", d / "src.txt", "-b", 1, "--compute-type", "float32")
    req = {"cases": [{"dir": str(tmp_path / "hf"), "inputs": c["srcs"], "max_len": MAX_LEN, "beam": 1,
                      "force": [[0]] * N_INPUTS}]}
    (tmp_path / "req.json").write_text(json.dumps(req))
    run(TORCH_PY, REF, tmp_path / "req.json", tmp_path / "ref.json")
    ref = json.loads((tmp_path / "ref.json").read_text())["cases"][0]
    same = sum(a == b for a, b in zip(want, pieces(c, ref["greedy"]))) / N_INPUTS
    print(f"\n{label} int8: transformers greedy on the dequantized export identical to tern --compute-type float32 "
          f"on the int8 model on {same:.1%}")
    assert same >= 0.995


def test_raw_text_through_spm(data_dir, cases, tmp_path):
    import make_models
    spm_path = os.path.join(ROOT, "models", "en-de", "sentencepiece.model")
    pieces_ = json.load(open(os.path.join(ROOT, "models", "en-de", "shared_vocabulary.json")))
    tokens = make_models.SPECIALS + [p for p in pieces_ if p not in make_models.SPECIALS and p != "<pad>"]
    make("post-gelu-shared-all", tmp_path / "m", tokens=tokens, name="post-gelu-shared-spm")
    shutil.copy(spm_path, tmp_path / "m" / "sentencepiece.model")
    run(TERN, "convert", "-m", tmp_path / "m", "--to", "hf", "-o", tmp_path / "hf")
    assert (tmp_path / "hf" / "source.spm").read_bytes() == open(spm_path, "rb").read()
    lines = open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8").read().split("\n")[:40]
    out = run(TERN, "translate", "-m", tmp_path / "m", "-t", 1, "-b", 1, "--max-decoding-length", MAX_LEN,
              "--min-length", 1, input="".join(l + "\n" for l in lines)).stdout.split("\n")[:len(lines)]
    req = {"cases": [{"dir": str(tmp_path / "hf"), "inputs": [[5]], "max_len": MAX_LEN, "beam": 1, "force": [[5]],
                      "texts": lines}]}
    (tmp_path / "req.json").write_text(json.dumps(req))
    run(TORCH_PY, REF, tmp_path / "req.json", tmp_path / "ref.json")
    ref = json.loads((tmp_path / "ref.json").read_text())["cases"][0]["text"]["text"]
    same = sum(a.strip() == b.strip() for a, b in zip(out, ref)) / len(lines)
    print(f"\nraw text: MarianTokenizer + generate + batch_decode on the export = tern translate on the original "
          f"on {same:.1%} of {len(lines)} lines")
    assert same >= 0.95 and sum(bool(x.strip()) for x in ref) > 30


def test_tern_trained_model(data_dir, cases, tmp_path):
    mk = os.path.join(data_dir, "multi30k")
    for side in ("en", "de"):
        lines = open(os.path.join(mk, f"train.{side}"), encoding="utf-8").read().split("\n")[:2000]
        (tmp_path / f"t.{side}").write_text("".join(l + "\n" for l in lines), encoding="utf-8")
    run(TERN, "train", "--spm", os.path.join(ROOT, "models", "en-de", "sentencepiece.model"), "--train-src",
        tmp_path / "t.en", "--train-tgt", tmp_path / "t.de", "--save-dir", tmp_path / "run", "--post-norm",
        "--layer-norm-eps", "1e-5", "--layers", 2, "--d-model", 32, "--ff", 64, "--heads", 4, "--max-updates", 20,
        "--max-tokens", 2000, "--no-bleu", "--no-plot", "-q", "-t", 1, "--seed", 1, "--lr", "1e-3", "--warmup", 5)
    ckpt = tmp_path / "run" / sorted(p for p in os.listdir(tmp_path / "run") if p.startswith("checkpoint-"))[-1]
    run(TERN, "convert", "-m", ckpt, "--to", "hf", "-o", tmp_path / "hf")
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    vocab = json.loads((tmp_path / "hf" / "vocab.json").read_text())
    assert cfg["pad_token_id"] == vocab["<pad>"] == 0 and cfg["vocab_size"] == len(vocab)
    lines = open(os.path.join(mk, "test_2016_flickr.en"), encoding="utf-8").read().split("\n")[:40]
    text = "".join(l + "\n" for l in lines)
    args = ("-t", 1, "-b", 1, "--max-decoding-length", MAX_LEN, "--min-length", 1)
    out = run(TERN, "translate", "-m", ckpt, *args, input=text).stdout
    assert run(TERN, "translate", "-m", tmp_path / "hf", *args, input=text).stdout == out
    req = {"cases": [{"dir": str(tmp_path / "hf"), "inputs": [[5]], "max_len": MAX_LEN, "beam": 1, "force": [[5]],
                      "texts": lines}]}
    (tmp_path / "req.json").write_text(json.dumps(req))
    run(TORCH_PY, REF, tmp_path / "req.json", tmp_path / "ref.json")
    ref = json.loads((tmp_path / "ref.json").read_text())["cases"][0]["text"]["text"]
    same = sum(a.strip() == b.strip() for a, b in zip(out.split("\n"), ref)) / len(lines)
    print(f"\ntern train post-norm checkpoint: transformers on the export = tern translate on {same:.1%} of "
          f"{len(lines)} lines")
    assert same >= 0.95


def test_refusals(cases, tmp_path):
    def refused(model, out, *words):
        r = run(TERN, "convert", "-m", model, "--to", "hf", "-o", out, check=False)
        assert r.returncode != 0, r.stderr
        for w in words:
            assert w in r.stderr, (w, r.stderr)
        return r.stderr

    make("pre-shared-tied", tmp_path / "pre")
    refused(tmp_path / "pre", tmp_path / "o1", "pre-norm", "--post-norm")
    assert not (tmp_path / "o1").exists()
    make("post-separate-untied", tmp_path / "eps", eps=None)
    refused(tmp_path / "eps", tmp_path / "o2", "epsilon", "1e-06", "1e-5", "--layer-norm-eps 1e-5")
    assert not (tmp_path / "o2").exists()
    make("post-separate-untied", tmp_path / "noeos", add_source_eos=False)
    refused(tmp_path / "noeos", tmp_path / "o3", "add_source_eos", "MarianTokenizer")
    refused(os.path.join(ROOT, "models", "en-de"), tmp_path / "o4", "pre-norm")
    # an existing non-empty output directory is not written into
    (tmp_path / "o5").mkdir()
    (tmp_path / "o5" / "keep.txt").write_text("x")
    refused(cases[SHAPES[0][0]]["dir"] / "model", tmp_path / "o5", "not empty")
    assert os.listdir(tmp_path / "o5") == ["keep.txt"]
    # --quantize does not apply
    r = run(TERN, "convert", "-m", tmp_path / "pre", "--to", "hf", "-o", tmp_path / "o6", "--quantize", "int8",
            check=False)
    assert r.returncode == 2 and "--quantize" in r.stderr
