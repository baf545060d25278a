"""Quality estimates (issue 31 point 5): tern_request_t.token_scores, `tern translate --quality`,
/v1/translate "quality": true and LibreTranslate /translate "quality": true.

Definitions (src/serve/quality.h, docs/decoding.md): a sentence's score is the mean of its best
hypothesis's token log-probabilities, the end token included (sum over the T output tokens and
</s>, divided by T + 1): the model's log-probabilities, not the search's length-normalized score.
A word is a run of target pieces from one that starts with "▁" up to the next (</s> excluded);
its score is the mean of its pieces' log-probabilities; start/end are its byte span in the
translation.

Peer: CTranslate2's force decoding (Translator.score_batch) of the same hypothesis pieces on
models/en-de exported with `tern convert --to ct2`, both engines in float32 (the shipped model's
int8 weights dequantized the same way): every token log-prob and every sentence mean within 1e-4.
The word scores and spans are recomputed here from the token log-probs and the pieces.
"""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "tools"))
from serve_util import MODEL, TERN, Server  # noqa: E402

TOL = 1e-4
N = 40
BOUNDARY = "\u2581"


def tern(*args, stdin=None, check=True):
    r = subprocess.run([TERN, *map(str, args)], input=stdin, capture_output=True, text=True, timeout=600)
    if check:
        assert r.returncode == 0, f"tern {' '.join(map(str, args[:3]))} failed:\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def flickr(data_dir):
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f][:N]


def words_from_pieces(tokens, lps):
    """Bergamot's grouping, recomputed: [(surface, mean log-prob)] for the tokens before </s>."""
    out = []
    for tok, lp in zip(tokens[:-1], lps[:-1]):
        if not out or tok.startswith(BOUNDARY):
            out.append([tok.replace(BOUNDARY, ""), [lp]])
        else:
            out[-1][0] += tok
            out[-1][1].append(lp)
    return [(w, sum(v) / len(v)) for w, v in out]


def check_quality(text, q):
    """The word scores and spans of one quality object, recomputed from its token log-probs."""
    toks, lps = q["tokens"], q["token_log_probs"]
    assert len(toks) == len(lps) and toks[-1] == "</s>"
    assert abs(q["score"] - sum(lps) / len(lps)) <= 1e-6
    want = words_from_pieces(toks, lps)
    assert len(q["words"]) == len(want)
    b = text.encode("utf-8")
    prev = 0
    for w, (surface, score) in zip(q["words"], want):
        assert abs(w["score"] - score) <= 1e-5, (w, score)
        assert prev <= w["start"] <= w["end"] <= len(b)
        assert b[w["start"]:w["end"]].decode("utf-8") == w["word"] == surface, (w, surface)
        prev = w["end"]


@pytest.fixture(scope="module")
def ct2_export(tmp_path_factory):
    ctranslate2 = pytest.importorskip("ctranslate2")
    out = tmp_path_factory.mktemp("ct2") / "en-de"
    tern("convert", "--from", MODEL, "-o", out, "--to", "ct2")
    return ctranslate2.Translator(str(out), device="cpu", compute_type="float32", intra_threads=1)


@pytest.mark.parametrize("beam", [1, 4])
def test_cli_quality_matches_ctranslate2_force_decoding(flickr, ct2_export, beam):
    spm = pytest.importorskip("sentencepiece")
    sp = spm.SentencePieceProcessor(model_file=os.path.join(MODEL, "sentencepiece.model"))
    r = tern("translate", "-m", MODEL, "--compute-type", "float32", "-b", beam, "-t", "1", "-q", "--quality=json",
             stdin="".join(l + "\n" for l in flickr))
    rows = [json.loads(l) for l in r.stdout.splitlines()]
    assert len(rows) == N
    # the translations are those of a plain run
    plain = tern("translate", "-m", MODEL, "--compute-type", "float32", "-b", beam, "-t", "1", "-q",
                 stdin="".join(l + "\n" for l in flickr)).stdout.splitlines()
    assert [row["translation"] for row in rows] == plain
    src = [sp.encode(l, out_type=str) for l in flickr]
    ref = ct2_export.score_batch(src, [row["tokens"][:-1] for row in rows], max_batch_size=16)
    worst_tok = worst_mean = 0.0
    for row, rr in zip(rows, ref):
        check_quality(row["translation"], row)
        assert rr.tokens == row["tokens"], (rr.tokens, row["tokens"])
        worst_tok = max(worst_tok, max(abs(a - b) for a, b in zip(row["token_log_probs"], rr.log_probs)))
        worst_mean = max(worst_mean, abs(row["score"] - sum(rr.log_probs) / len(rr.log_probs)))
    print(f"\nbeam {beam}: {N} sentences, largest token log-prob difference to ctranslate2's score_batch "
          f"{worst_tok:.2e}, largest sentence mean difference {worst_mean:.2e}")
    assert worst_tok <= TOL and worst_mean <= TOL
    # the TSV form: the same translations and scores
    tsv = tern("translate", "-m", MODEL, "--compute-type", "float32", "-b", beam, "-t", "1", "-q", "--quality",
               stdin="".join(l + "\n" for l in flickr)).stdout.splitlines()
    for line, row in zip(tsv, rows):
        text, score = line.rsplit("\t", 1)
        assert text == row["translation"] and abs(float(score) - row["score"]) <= 1e-6


def test_cli_quality_errors(tmp_path):
    r = tern("translate", "-m", MODEL, "--quality=xml", stdin="A dog.\n", check=False)
    assert r.returncode == 2 and "--quality is tsv or json, got 'xml'" in r.stderr
    r = tern("translate", "-m", MODEL, "--quality", "-n", "2", stdin="A dog.\n", check=False)
    assert r.returncode != 0 and "--num-hypotheses" in r.stderr
    r = tern("translate", "-m", MODEL, "--quality", "--split-sentences", stdin="A dog.\n", check=False)
    assert r.returncode == 2 and "--quality cannot go with" in r.stderr
    # empty lines, non-UTF-8 bytes: a line each, no crash
    r = subprocess.run([TERN, "translate", "-m", MODEL, "-q", "--quality=json"], input=b"\n\xff\xfe dog\n",
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(l) for l in r.stdout.decode("utf-8").splitlines()]
    assert len(rows) == 2 and rows[0] == {"translation": "", "score": 0, "words": [], "tokens": [],
                                          "token_log_probs": []}
    check_quality(rows[1]["translation"], rows[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("serve"))
    yield s
    assert s.stop() == 0, s.stderr()


def test_v1_quality(server, flickr):
    lines = flickr[:12]
    st, j, _ = server.json("POST", "/v1/translate", {"q": lines, "quality": True, "num_hypotheses": 2})
    assert st == 200, j
    cli = [json.loads(l) for l in tern("translate", "-m", MODEL, "-t", "1", "-q", "--quality=json",
                                       stdin="".join(l + "\n" for l in lines)).stdout.splitlines()]
    for item, c in zip(j["translations"], cli):
        q = item["quality"]
        assert item["hypotheses"][0] == c["translation"]
        check_quality(item["hypotheses"][0], q)
        assert q["tokens"] == c["tokens"]
        assert abs(q["score"] - c["score"]) <= TOL
    # without it: no quality key
    st, j, _ = server.json("POST", "/v1/translate", {"q": lines[:1]})
    assert st == 200 and "quality" not in j["translations"][0]
    st, j, _ = server.json("POST", "/v1/translate", {"q": lines[:1], "quality": "yes"})
    assert st == 400 and "quality must be true or false" in j["error"]


def test_libretranslate_quality(server):
    a, b = "A man is riding a bicycle.", "Two dogs play in the snow."
    st, v, _ = server.json("POST", "/v1/translate", {"q": [a, b], "quality": True})
    assert st == 200
    toks = [t["quality"]["token_log_probs"] for t in v["translations"]]
    # a text of two sentences: the mean over both sentences' tokens
    want = sum(map(sum, toks)) / sum(map(len, toks))
    st, j, _ = server.json("POST", "/translate", {"q": f"{a} {b}", "source": "en", "target": "de", "quality": True})
    assert st == 200, j
    assert set(j) == {"translatedText", "quality"}
    assert abs(j["quality"] - want) <= TOL
    st, j, _ = server.json("POST", "/translate", {"q": [a, "", b], "source": "en", "target": "de", "quality": True})
    assert st == 400 or (st == 200 and len(j["quality"]) == 3)
    st, j, _ = server.json("POST", "/translate", {"q": [a, b], "source": "en", "target": "de", "quality": True})
    assert st == 200 and len(j["quality"]) == 2
    assert abs(j["quality"][0] - sum(toks[0]) / len(toks[0])) <= TOL
    st, j, _ = server.json("POST", "/translate", {"q": a, "source": "en", "target": "de"})
    assert st == 200 and set(j) == {"translatedText"}
    st, j, _ = server.json("POST", "/translate", {"q": a, "source": "en", "target": "de", "quality": 1})
    assert st == 400 and "quality must be true or false" in j["error"]


def test_python_estimate_quality(tern_python, flickr):
    """Translator.estimate_quality: the same tokens and log-probs as `tern translate --quality`
    (token input, pretokenized), words recomputed; string input refused."""
    spm = pytest.importorskip("sentencepiece")
    sp = spm.SentencePieceProcessor(model_file=os.path.join(MODEL, "sentencepiece.model"))
    src = [sp.encode(l, out_type=str) for l in flickr[:10]]
    tr = tern_python.Translator(MODEL, compute_type="float32", intra_threads=1)
    got = tr.estimate_quality(src, beam_size=4, length_penalty=0)
    cli = [json.loads(l) for l in tern("translate", "-m", MODEL, "--compute-type", "float32", "--pretokenized",
                                       "-b", 4, "--length-penalty", 0, "-t", 1, "-q", "--quality=json",
                                       stdin="".join(" ".join(s) + "\n" for s in src)).stdout.splitlines()]
    for q, c in zip(got, cli):
        assert q.tokens == c["tokens"] and q.hypothesis == c["tokens"][:-1]
        assert max(abs(a - b) for a, b in zip(q.log_probs, c["token_log_probs"])) <= 1e-5
        assert abs(q.score - c["score"]) <= 1e-5
        want = words_from_pieces(q.tokens, q.log_probs)
        assert [(w, round(s, 6)) for w, _, _, s in q.words] == [(w, round(s, 6)) for w, s in want]
        assert all(q.hypothesis[a].startswith(BOUNDARY) or a == 0 for _, a, _, _ in q.words)
    with pytest.raises(TypeError, match="token lists"):
        tr.estimate_quality(["A dog."])
