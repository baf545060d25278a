"""`tern train --init-from MODEL_DIR`: fine-tuning a model Tern loads, here the shipped models/en-de
(int8, trained on Multi30k captions) on 200 lines of another domain (WMT22 news, en-de): the run
takes the model's family, shape, vocabulary and SentencePiece model and starts from its parameters
(int8 read divided by its scales); afterwards the mean token log-prob of the new data (force
decoding, `tern rescore`) is higher by more than 0.2 (measured -5.29 -> -4.75 on 300 lines), the
translations of it changed (most lines) without a lower BLEU, and the checkpoint loads and
translates. `--freeze encoder` keeps every
encoder tensor at the model's (dequantized) values, bit for bit, while the decoder moves. Errors: a
model of another family than --architecture, a directory without a model. One thread, fixed seed."""
import os
import struct
import subprocess
import json

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "en-de")
TERN = os.environ.get("TERN_BIN", os.path.join(ROOT, "build", "tern"))
N = 200


def run(*args, ok=True):
    r = subprocess.run([TERN, *map(str, args)], capture_output=True, text=True, timeout=900)
    if ok:
        assert r.returncode == 0, f"tern {' '.join(map(str, args[:2]))}:\n{r.stderr[-3000:]}"
    return r


def read_st(path):
    """{name: numpy array} of a safetensors file (F32, I8)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        dt = {"F32": np.float32, "I8": np.int8, "I16": np.int16, "I32": np.int32}[v["dtype"]]
        out[k] = np.frombuffer(data[a:b], dtype=dt).reshape(v["shape"])
    return out


@pytest.fixture(scope="module")
def news(data_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("news")
    for side, f in (("en", "generaltest2022.en-de.src.en"), ("de", "generaltest2022.en-de.ref.A.de")):
        lines = open(os.path.join(data_dir, "wmt22", f), encoding="utf-8").read().split("\n")[:N]
        (d / f"ft.{side}").write_text("".join(l + "\n" for l in lines), encoding="utf-8")
    return d


def train(news, save, *extra):
    run("train", "--init-from", MODEL, "--train-src", news / "ft.en", "--train-tgt", news / "ft.de", "--save-dir",
        save, "--lr", "5e-4", "--warmup", "5", "--no-bleu", "--no-plot", "-q", "-t", "1", "--seed", "1",
        "--max-tokens", "2000", *extra)
    return save / sorted(p for p in os.listdir(save) if p.startswith("checkpoint-"))[-1]


def mean_logprob(model, news):
    out = run("rescore", "-m", model, "-s", news / "ft.en", "--target", news / "ft.de", "-t", "1").stdout
    lps = [float(x) for line in out.strip("\n").split("\n") for x in line.split("|||")[0].split()]
    return sum(lps) / len(lps)


def translate(model, news, tmp_path):
    hyp = run("translate", "-m", model, "-t", "1", "-q", "-b", "2", news / "ft.en").stdout
    assert hyp.count("\n") == N
    p = tmp_path / "hyp.de"
    p.write_text(hyp, encoding="utf-8")
    line = run("score", "-r", news / "ft.de", p).stdout.split("\n")[0]
    return hyp.split("\n")[:-1], float(line.split("= ")[1].split()[0])


def test_finetune_moves_towards_the_new_data(news, tmp_path):
    ck = train(news, tmp_path / "run", "--max-updates", "24")
    before, after = mean_logprob(MODEL, news), mean_logprob(ck, news)
    (h0, b0), (h1, b1) = translate(MODEL, news, tmp_path), translate(ck, news, tmp_path)
    changed = sum(a != b for a, b in zip(h0, h1))
    print(f"\nnews, {N} lines: mean token log-prob {before:.4f} -> {after:.4f}; BLEU {b0:.2f} -> {b1:.2f}; "
          f"{changed} translations changed")
    assert after > before + 0.2
    assert changed >= N // 2 and b1 >= b0
    # the run started from the model: its first update's loss is the model's, far below a fresh
    # model's ln(8000) = 9.0
    curve = (tmp_path / "run" / "train_curve.tsv").read_text().split("\n")
    first_nll = float(curve[1].split("\t")[3])
    assert first_nll < 7.0


def test_freeze_encoder_keeps_it_bit_for_bit(news, tmp_path):
    ck = train(news, tmp_path / "run", "--max-updates", "6", "--freeze", "encoder")
    init, got = read_st(os.path.join(MODEL, "model.safetensors")), read_st(ck / "model.safetensors")
    enc = [k for k in got if k.startswith("encoder/") and got[k].ndim >= 1]
    assert len(enc) > 20
    for k in enc:
        want = init[k]
        if want.dtype == np.int8:  # the int8 model, as Tern reads it: q / scale per row, in float32
            want = want.astype(np.float32) / init[k + "_scale"][:, None]
        assert np.array_equal(got[k], want), k
    dec = [k for k in got if k.startswith("decoder/layer_0/ffn/linear_0/weight")]
    q = init[dec[0]].astype(np.float32) / init[dec[0] + "_scale"][:, None]
    assert not np.array_equal(got[dec[0]], q)  # the decoder moved


def test_init_from_errors(news, tmp_path):
    gru = tmp_path / "gru"
    gru.mkdir()
    (gru / "config.json").write_text('{"architecture": "rnn-gru"}')
    r = run("train", "--init-from", gru, "--architecture", "transformer", "--vocab", MODEL, "--train-src",
            news / "ft.en", "--train-tgt", news / "ft.de", "--save-dir", tmp_path / "s1", "-q", ok=False)
    assert r.returncode != 0 and "a rnn-gru model, but this run trains a transformer" in r.stderr, r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run("train", "--init-from", empty, "--vocab", MODEL, "--train-src", news / "ft.en", "--train-tgt",
            news / "ft.de", "--save-dir", tmp_path / "s2", "-q", ok=False)
    assert r.returncode != 0 and "no model.safetensors or model.bin" in r.stderr and str(empty) in r.stderr
    r = run("train", "--init-from", MODEL, "--freeze", "decoder", "--train-src", news / "ft.en", "--train-tgt",
            news / "ft.de", "--save-dir", tmp_path / "s3", "-q", ok=False)
    assert r.returncode == 2 and "--freeze must be embeddings or encoder" in r.stderr


def test_init_layers_keep_the_chosen_layers(news, tmp_path):
    """--init-encoder-layers 1,2,3 --init-decoder-layers 3,0: a 3+2 model whose encoder layers 0..2 are
    the model's 1..3 and whose decoder layers 0 and 1 are its 3 and 0 (a shallow student started from
    its teacher); embeddings and final norms the model's. One update at lr 1e-12 moves no value by more
    than 1e-9 (Adam's step is about lr), so each tensor must equal its source, dequantized."""
    ck = train(news, tmp_path / "run", "--max-updates", "1", "--lr-scheduler", "constant", "--lr", "1e-12",
               "--init-encoder-layers", "1,2,3", "--init-decoder-layers", "3,0")
    init, got = read_st(os.path.join(MODEL, "model.safetensors")), read_st(ck / "model.safetensors")
    layers = lambda side: sorted({k.split("/")[1] for k in got if k.startswith(side + "/layer_") and k.split("/")[1][6:].isdigit()})
    assert layers("encoder") == ["layer_0", "layer_1", "layer_2"] and layers("decoder") == ["layer_0", "layer_1"]
    src = {"encoder": {0: 1, 1: 2, 2: 3}, "decoder": {0: 3, 1: 0}}
    checked = 0
    for k, v in got.items():
        if v.ndim < 1 or v.dtype != np.float32:
            continue
        parts = k.split("/")
        if parts[1].startswith("layer_") and parts[1][6:].isdigit():
            parts[1] = "layer_%d" % src[parts[0]][int(parts[1][6:])]
        want = init["/".join(parts)]
        if want.dtype == np.int8:
            want = want.astype(np.float32) / init["/".join(parts) + "_scale"][:, None]
        assert np.abs(got[k] - want).max() <= 1e-9, k
        checked += 1
    assert checked > 50
    hyp = run("translate", "-m", ck, "-t", "1", "-q", "-b", "2", news / "ft.en").stdout
    assert hyp.count("\n") == N
    base = ["train", "--init-from", MODEL, "--train-src", news / "ft.en", "--train-tgt", news / "ft.de", "-q"]
    for opt, val, msg in (("--init-decoder-layers", "0,7", "no layer decoder/layer_7"),
                          ("--init-decoder-layers", "1,1", "layer decoder/layer_1 kept twice"),
                          ("--init-encoder-layers", "0;1", "--init-encoder-layers '0;1': a comma-separated list")):
        r = run(*base, "--save-dir", tmp_path / ("e" + val), opt, val, ok=False)
        assert r.returncode != 0 and msg in r.stderr, r.stderr
    r = run("train", "--vocab", MODEL, "--train-src", news / "ft.en", "--train-tgt", news / "ft.de", "--save-dir",
            tmp_path / "e", "--init-decoder-layers", "0", "-q", ok=False)
    assert r.returncode == 2 and "give it" in r.stderr, r.stderr
