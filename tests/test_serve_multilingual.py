"""A multilingual model (M2M-100) in `tern serve`, beside the shipped en-de pair model.

The random-weight M2M-100 checkpoint of tests/test_hf_m2m100.py (built by transformers 4.40.2 with its own
M2M100Tokenizer files, tests/tools/hf_m2m100_ref.py: 100 language codes, d 48, 1+3 layers) is served as
`--model m2m=DIR`; `tern translate -m DIR --source-lang S --target-lang T` (the CLI, which
tests/test_hf_m2m100.py checks against transformers) is the reference:
* /languages lists every language of the model (LibreTranslate's code, name, targets: each of the
  model's languages reaches every other one), besides en and de of the pair model;
* LibreTranslate /translate with source/target a pair only the multilingual model has (en->fr, fr->de,
  de->es): the same text as `tern translate` for each of 40 Multi30k sentences (100 %); en->de still
  goes to the pair model;
* /v1/translate with source_lang/target_lang (beam 1 and beam 4): the same as `tern translate -b 1/4`;
* concurrent requests of different target languages (cross-request batching on): each gets its own
  language's output (batches group only requests with equal languages);
* unknown language -> 400 naming it; source_lang given to the pair model, a multilingual model
  without languages -> 400.
"""
import json
import os
import subprocess
import sys
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "tools"))
from serve_util import Server  # noqa: E402

TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern")
TORCH_PY = os.environ.get("TERN_TORCH_PYTHON", "/usr/bin/python3")
REF = os.path.join(HERE, "tools", "hf_m2m100_ref.py")
MAX_LEN, N_TEXTS = 30, 40


@pytest.fixture(scope="module")
def m2m(tmp_path_factory, data_dir):
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
    top = tmp_path_factory.mktemp("serve_m2m")
    with open(os.path.join(data_dir, "multi30k", "train.en"), encoding="utf-8") as f:
        train = [next(f) for _ in range(3000)]
    (top / "train.txt").write_text("".join(train), encoding="utf-8")
    sp_mod.SentencePieceTrainer.train(input=str(top / "train.txt"), model_prefix=str(top / "sp"), vocab_size=300,
                                      model_type="bpe", character_coverage=0.9995, num_threads=1, minloglevel=2)
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        texts = [line.rstrip("\n") for line in f][:N_TEXTS]
    d = top / "model"
    d.mkdir()
    case = {"dir": str(d), "seed": 7, "tokenizer": "m2m100", "spm": str(top / "sp.model"),
            "config": dict(d_model=48, encoder_attention_heads=6, decoder_attention_heads=6, encoder_layers=1,
                           decoder_layers=3, encoder_ffn_dim=40, decoder_ffn_dim=40, activation_function="gelu",
                           scale_embedding=False, max_position_embeddings=100, forced_eos_token_id=None),
            "spare_rows": 0, "src_lang": "en", "tgt_lang": "fr", "init_std": 0.15, "qk_std": 0.35, "cross_std": 0.5,
            "emb_std": 1.0, "max_len": MAX_LEN, "inputs": [["\u2581a", "\u2581man"]] * 20, "texts": texts[:2],
            "calibrate": {"lo": -20.0, "hi": 20.0, "iters": 6, "target": 10, "n": 20}}
    (top / "req.json").write_text(json.dumps({"cases": [case]}))
    r = subprocess.run([TORCH_PY, REF, str(top / "req.json"), str(top / "ref.json")], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    info = subprocess.run([TERN, "info", "-m", str(d)], capture_output=True, text=True, check=True).stdout
    return {"dir": d, "texts": texts, "info": info}


@pytest.fixture(scope="module")
def server(m2m, tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("srv"), "-m", f"m2m={m2m['dir']}", "--max-decoding-length", str(MAX_LEN),
               layout=("-t", "1", "-w", "2"))
    yield s
    assert s.stop() == 0, s.stderr()


def cli(m2m, src, tgt, *extra, texts=None):
    texts = texts or m2m["texts"]
    r = subprocess.run([TERN, "translate", "-m", m2m["dir"], "--source-lang", src, "--target-lang", tgt, "-t", "1",
                        "--max-decoding-length", str(MAX_LEN), *map(str, extra)],
                       input="".join(t + "\n" for t in texts), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\n")[:len(texts)]


def model_codes(m2m):
    line = next(l for l in m2m["info"].splitlines() if "languages" in l)
    return [c.strip("_") for c in line.split(":", 1)[1].split()[0:] if c.startswith("__")]


def test_languages(server, m2m):
    st, langs, _ = server.json("GET", "/languages")
    assert st == 200
    by = {l["code"]: l for l in langs}
    codes = model_codes(m2m)
    print(f"\n/languages: {len(langs)} languages ({len(codes)} of the multilingual model)")
    assert len(codes) == 100 and set(codes) <= set(by) and {"en", "de"} <= set(by)
    for c in codes:
        assert set(by[c]["targets"]) >= set(codes) - {c}, c
        assert c not in by[c]["targets"]
    assert by["fr"]["name"] == "French" and by["en"]["name"] == "English"


@pytest.mark.parametrize("src,tgt", [("en", "fr"), ("fr", "de"), ("de", "es")])
def test_translate_libretranslate(server, m2m, src, tgt):
    st, body, _ = server.json("POST", "/translate", {"q": m2m["texts"], "source": src, "target": tgt})
    assert st == 200, body
    want = cli(m2m, src, tgt)
    got = body["translatedText"]
    same = sum(a == b for a, b in zip(got, want)) / len(want)
    print(f"\n/translate {src}->{tgt}: identical to tern translate --source-lang {src} --target-lang {tgt} on "
          f"{same:.1%} of {len(want)}")
    assert same == 1.0


def test_pair_model_keeps_its_pair(server):
    st, body, _ = server.json("POST", "/translate", {"q": "A man is riding a bicycle .", "source": "en",
                                                      "target": "de"})
    assert st == 200, body
    r = subprocess.run([TERN, "translate", "-m", os.path.join(ROOT, "models", "en-de"), "-t", "1"],
                       input="A man is riding a bicycle .\n", capture_output=True, text=True, check=True)
    assert body["translatedText"] == r.stdout.strip()


@pytest.mark.parametrize("beam", [1, 4])
def test_v1_translate(server, m2m, beam):
    st, body, _ = server.json("POST", "/v1/translate", {"model": "m2m", "q": m2m["texts"], "source_lang": "en",
                                                         "target_lang": "fr", "beam_size": beam})
    assert st == 200, body
    got = [t["hypotheses"][0] for t in body["translations"]]
    want = cli(m2m, "en", "fr", "-b", beam)
    same = sum(a == b for a, b in zip(got, want)) / len(want)
    print(f"\n/v1/translate en->fr beam {beam}: identical to tern translate on {same:.1%}")
    assert same == 1.0
    # source/target name the languages when source_lang/target_lang are absent (and pick the model)
    st, body2, _ = server.json("POST", "/v1/translate", {"q": m2m["texts"][:5], "source": "en", "target": "fr",
                                                          "beam_size": beam})
    assert st == 200 and body2["model"] == "m2m", body2
    assert [t["hypotheses"][0] for t in body2["translations"]] == want[:5]


def test_concurrent_languages_batch_apart(server, m2m):
    """Requests of four target languages at once: each one's output is its own language's."""
    tgts = ["fr", "de", "es", "it"] * 2
    texts = m2m["texts"][:12]
    out = {}

    def go(i, tgt):
        out[i] = server.json("POST", "/v1/translate", {"model": "m2m", "q": texts, "source_lang": "en",
                                                        "target_lang": tgt, "beam_size": 1})

    th = [threading.Thread(target=go, args=(i, t)) for i, t in enumerate(tgts)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    want = {t: cli(m2m, "en", t, "-b", 1, texts=texts) for t in set(tgts)}
    for i, tgt in enumerate(tgts):
        st, body, _ = out[i]
        assert st == 200, body
        assert [t["hypotheses"][0] for t in body["translations"]] == want[tgt], tgt
    assert len({tuple(v) for v in want.values()}) == 4  # the languages' outputs differ


def test_unknown_languages(server):
    st, body, _ = server.json("POST", "/translate", {"q": "x", "source": "xx", "target": "fr"})
    assert st == 400 and "xx" in body["error"], body
    st, body, _ = server.json("POST", "/translate", {"q": "x", "source": "en", "target": "qq"})
    assert st == 400 and "qq" in body["error"], body
    st, body, _ = server.json("POST", "/v1/translate", {"model": "m2m", "q": "x", "source_lang": "en",
                                                         "target_lang": "zz_Zzzz"})
    assert st == 400 and "zz_Zzzz" in body["error"] and "target_lang" in body["error"], body
    st, body, _ = server.json("POST", "/v1/translate", {"model": "m2m", "q": "x", "source_lang": "yy",
                                                         "target_lang": "fr"})
    assert st == 400 and "yy" in body["error"] and "source_lang" in body["error"], body
    st, body, _ = server.json("POST", "/v1/translate", {"model": "m2m", "q": "x"})
    assert st == 400 and "source_lang" in body["error"], body
    st, body, _ = server.json("POST", "/v1/translate", {"model": "en-de", "q": "x", "source_lang": "en",
                                                         "target_lang": "de"})
    assert st == 400 and "not multilingual" in body["error"], body
    st, body, _ = server.json("POST", "/v1/translate", {"model": "m2m", "q": "x", "source_lang": 3,
                                                         "target_lang": "fr"})
    assert st == 400, body


def test_settings_with_a_multilingual_first_model(m2m, tmp_path):
    """/frontend/settings names the first model's pair; a multilingual first model: its first two languages."""
    import re
    import time
    err = tmp_path / "err"
    p = subprocess.Popen([TERN, "serve", "-m", f"m2m={m2m['dir']}", "-p", "0", "-t", "1", "-w", "1"],
                         stdout=subprocess.DEVNULL, stderr=open(err, "wb"))
    try:
        port = None
        for _ in range(600):
            m = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", err.read_bytes())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.1)
        assert port, err.read_text()
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("GET", "/frontend/settings")
        lang = json.loads(c.getresponse().read())["language"]
        codes = model_codes(m2m)
        assert lang["source"]["code"] == codes[0] and lang["target"]["code"] == codes[1], lang
    finally:
        p.terminate()
        assert p.wait(60) == 0


def test_pair_model_needs_pair_name(tmp_path):
    r = subprocess.run([TERN, "serve", "-m", f"ende={os.path.join(ROOT, 'models', 'en-de')}", "-p", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "SRC-TGT" in r.stderr, r.stderr
