"""Sentence splitting (issue 31, point 1): `tern translate --split-sentences` and `tern serve`
(on by default, as LibreTranslate) translate each sentence of a line apart, cut by ICU's sentence
break iterator (src/text/sentences.c; its boundaries on tricky cases are tests/c/test_sentences.c's),
and join the translations with the line's own white space.

Expected structure, stated here: the sentences of each paragraph are written out by hand; the
output must be, exactly, each sentence's translation by plain `tern translate` (one sentence a
line, no splitting) joined by the paragraph's separators; one output line per input line."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tools"))
from serve_util import MODEL, TERN, Server, cli_translate  # noqa: E402

# (paragraph, its sentences, the separators between them: before the first, between, after the last)
CASES = [
    ("A man rides a bicycle down the street. A dog runs through the park. Two children play football on the grass.",
     ["A man rides a bicycle down the street.", "A dog runs through the park.",
      "Two children play football on the grass."], ["", " ", " ", ""]),
    ("  Mr. Smith is cooking dinner.   Is the dog sleeping?! Yes.  ",
     ["Mr. Smith is cooking dinner.", "Is the dog sleeping?!", "Yes."], ["  ", "   ", " ", "  "]),
    ("A woman sells 3.5 kilos of apples.", ["A woman sells 3.5 kilos of apples."], ["", ""]),
]


def expected(sentences, seps, plain):
    out = seps[0]
    for i, s in enumerate(sentences):
        out += (seps[i] if i else "") + plain[s]
    return out + seps[-1]


@pytest.fixture(scope="module")
def plain():
    sents = sorted({s for _, ss, _ in CASES for s in ss} | {CASES[0][0]})
    return dict(zip(sents, cli_translate(sents)))


def test_cli_split_sentences(plain, tmp_path):
    lines = [c[0] for c in CASES]
    src = tmp_path / "in.txt"
    # an empty line and a line of spaces stay lines of their own
    src.write_text(lines[0] + "\n\n" + "\n".join(lines[1:]) + "\n   \n", encoding="utf-8")
    r = subprocess.run([TERN, "translate", "-m", MODEL, "-q", "-t", "2", "--split-sentences=en", str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    got = r.stdout.split("\n")[:-1]
    # a one-sentence line is translated whole, as without splitting (leading spaces included)
    want = [expected(CASES[0][1], CASES[0][2], plain), ""] + \
        [expected(ss, seps, plain) if len(ss) > 1 else plain[ss[0]] for _, ss, seps in CASES[1:]] + [""]
    assert got == want
    # the paragraph whole is the run-on translation, different from the three sentences
    assert plain[CASES[0][0]] != want[0]


def test_cli_split_sentences_refuses_nbest(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("A man. A dog.\n", encoding="utf-8")
    r = subprocess.run([TERN, "translate", "-m", MODEL, "-q", "--split-sentences", "-n", "2", str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "--split-sentences gives one translation per line" in r.stderr


def test_serve_splits_by_default(plain, tmp_path):
    s = Server(tmp_path)
    try:
        para, ss, seps = CASES[0]
        want = expected(ss, seps, plain)
        st, j, _ = s.json("POST", "/translate", {"q": para, "source": "en", "target": "de"})
        assert st == 200 and j["translatedText"] == want
        # lines of one text, and HTML text runs (white space collapsed: one space between sentences)
        p2, ss2, seps2 = CASES[1]
        st, j, _ = s.json("POST", "/translate", {"q": para + "\n" + p2, "source": "en", "target": "de"})
        assert st == 200 and j["translatedText"] == want + "\n" + expected(ss2, seps2, plain)
        st, j, _ = s.json("POST", "/translate", {"q": f"<p>{para}</p><p>{p2}</p>", "source": "en", "target": "de",
                                                 "format": "html"})
        assert st == 200
        html_seps = [seps2[0]] + [" "] * (len(ss2) - 1) + [seps2[-1]]  # a run's edges kept, inside collapsed
        assert j["translatedText"] == f"<p>{want}</p><p>{expected(ss2, html_seps, plain)}</p>"
        m = s.metrics()
        assert m['tern_segments_total{model="en-de"}'] == 3 + 6 + 6
    finally:
        assert s.stop() == 0, s.stderr()


def test_serve_no_split_sentences(plain, tmp_path):
    s = Server(tmp_path, "--no-split-sentences")
    try:
        st, j, _ = s.json("POST", "/translate", {"q": CASES[0][0], "source": "en", "target": "de"})
        assert st == 200 and j["translatedText"] == plain[CASES[0][0]]
    finally:
        assert s.stop() == 0, s.stderr()
