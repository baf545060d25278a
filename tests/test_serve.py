"""`tern serve`: every endpoint, every error status, LibreTranslate's request and response shapes,
translations identical to `tern translate` (and n-best/scores to `tern translate -n`, force
decoding to `tern rescore`), batching across requests seen in the batch counts, bounded queue
(503), API keys and rate limits, SIGTERM with requests in flight, SIGHUP reload, slow and
disconnecting clients (the latter under ASan: no leak).

Each test starts the server on a free loopback port (127.0.0.1, port 0: the server prints the
one it got) with the shipped model models/en-de, and stops it with SIGTERM (exit 0 asserted).
Only the standard library talks HTTP here (http.client, socket): no third-party client.

LibreTranslate's API, as its documentation and its Flask app (libretranslate/app.py) define it:
POST /translate takes q (string or list of strings), source, target, format ("text"|"html"),
api_key, as JSON or as form fields; it answers {"translatedText": string or list} and errors as
{"error": message} with 400 (missing parameter: "Invalid request: missing q parameter",
unsupported language "xx is not supported", limits "Invalid request: request (N) exceeds text
limit (L)"), 403 ("Invalid API key"), 429 ("Slowdown: ..."), 500 ("Cannot translate text: ...").
GET /languages answers [{"code", "name", "targets"}].
"""
import concurrent.futures
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tools"))
from serve_util import MODEL, TERN, TERN_SAN, Server, cli_translate, wait_until  # noqa: E402

# A decode that takes a while: at least 250 output tokens per sentence with beam 16 (seconds on
# this model), used to keep the worker busy while other requests queue up behind it.
SLOW = {"beam_size": 16, "min_length": 250, "max_decoding_length": 256}


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path)
    yield s
    assert s.stop() == 0, s.stderr()


@pytest.fixture(scope="module")
def flickr(data_dir):
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f][:120]


# ------------------------------------------------------------------------------------ shapes


def test_libretranslate_shapes(server):
    """Request and response shapes of LibreTranslate's /translate and /languages."""
    st, j, h = server.json("POST", "/translate", {"q": "A man is riding a bicycle.", "source": "en", "target": "de"})
    assert st == 200 and list(j) == ["translatedText"] and isinstance(j["translatedText"], str)
    assert h["Content-Type"] == "application/json" and h["Access-Control-Allow-Origin"] == "*"
    st, j2, _ = server.json("POST", "/translate", {"q": ["A man is riding a bicycle.", "Two dogs play."],
                                                     "source": "en", "target": "de", "format": "text",
                                                     "api_key": ""})
    assert st == 200 and list(j2) == ["translatedText"] and len(j2["translatedText"]) == 2
    assert j2["translatedText"][0] == j["translatedText"]
    # form-encoded body, as LibreTranslate's own web page and curl -d send it
    body = urllib.parse.urlencode({"q": "A man is riding a bicycle.", "source": "en", "target": "de"}).encode()
    st, h, data = server.request("POST", "/translate", body,
                                 {"Content-Type": "application/x-www-form-urlencoded"})
    assert st == 200 and json.loads(data) == j
    # multipart/form-data too (Flask's request.values reads both)
    b = "----ternboundary"
    mp = (f"--{b}\r\nContent-Disposition: form-data; name=\"q\"\r\n\r\nA man is riding a bicycle.\r\n"
          f"--{b}\r\nContent-Disposition: form-data; name=\"source\"\r\n\r\nen\r\n"
          f"--{b}\r\nContent-Disposition: form-data; name=\"target\"\r\n\r\nde\r\n--{b}--\r\n").encode()
    st, h, data = server.request("POST", "/translate", mp, {"Content-Type": f"multipart/form-data; boundary={b}"})
    assert st == 200 and json.loads(data) == j
    # no body, the values in the query string (Flask's request.values reads them too)
    st, h, data = server.request("POST", "/translate?" + urllib.parse.urlencode(
        {"q": "A man is riding a bicycle.", "source": "en", "target": "de"}))
    assert st == 200 and json.loads(data) == j
    # alternatives (LibreTranslate >= 1.6): n-best beyond the best
    st, j3, _ = server.json("POST", "/translate", {"q": "A man is riding a bicycle.", "source": "en", "target": "de",
                                                    "alternatives": 2})
    assert st == 200 and j3["translatedText"] == j["translatedText"] and len(j3["alternatives"]) == 2
    st, langs, _ = server.json("GET", "/languages")
    assert st == 200
    assert langs == [{"code": "en", "name": "English", "targets": ["de"]},
                     {"code": "de", "name": "German", "targets": []}]
    st, fs, _ = server.json("GET", "/frontend/settings")
    assert st == 200 and fs["charLimit"] == 20000 and fs["apiKeys"] is False and fs["keyRequired"] is False
    assert fs["language"] == {"source": {"code": "en", "name": "English"}, "target": {"code": "de", "name": "German"}}
    # source "auto": detected by CLD2 (tests/test_langid.py checks it against pycld2, as
    # LibreTranslate detects); detectedLanguage as LibreTranslate: CLD2's percentage of the text
    st, j4, _ = server.json("POST", "/translate", {"q": "A man is riding a bicycle.", "source": "auto", "target": "de"})
    assert st == 200 and j4["translatedText"] == j["translatedText"]
    assert j4["detectedLanguage"] == {"confidence": 96, "language": "en"}


def test_html_format(server):
    """format "html" (LibreTranslate's, as Mastodon sends it): the text between tags is translated
    as `tern translate` translates it (references decoded, white space collapsed), tags, comments
    and <script> kept, the translation escaped in place."""
    runs = ["A man is riding a bicycle.", "Two dogs play in the snow.", "Tom & Jerry < 3 \u263a"]
    ref = cli_translate(runs)
    esc = [t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") for t in ref]
    q = ("<p>A man is riding\n a bicycle.</p>\n<p class=\"x\"> Two dogs play in the snow. </p>"
         "<!-- A note. --><script>if (a < b) x();</script>Tom &amp; Jerry &lt; 3 &#x263A;<br/>")
    st, j, _ = server.json("POST", "/translate", {"q": q, "source": "en", "target": "de", "format": "html"})
    assert st == 200
    assert j["translatedText"] == (f"<p>{esc[0]}</p>\n<p class=\"x\"> {esc[1]} </p>"
                                   f"<!-- A note. --><script>if (a < b) x();</script>{esc[2]}<br/>")
    st, j, _ = server.json("POST", "/translate", {"q": ["<b>A man is riding a bicycle.</b>", "<i></i>"],
                                                   "source": "en", "target": "de", "format": "html"})
    assert st == 200 and j["translatedText"] == [f"<b>{esc[0]}</b>", "<i></i>"]


def test_translations_match_cli(server, flickr):
    """Lines sent in 1- to 10-line requests from 8 threads at once (so batches mix requests) come
    back exactly as `tern translate` prints them, through all three ways of asking."""
    ref = cli_translate(flickr)
    assert len(ref) == len(flickr)
    chunks, i, k = [], 0, 0
    while i < len(flickr):
        n = 1 + (k * 7) % 10
        chunks.append((i, flickr[i:i + n], k % 3))
        i += n
        k += 1

    def ask(chunk):
        start, lines, how = chunk
        if how == 0:
            st, j, _ = server.json("POST", "/translate", {"q": lines, "source": "en", "target": "de"})
            assert st == 200, j
            return start, j["translatedText"]
        if how == 1:  # one text of several lines: translated line by line, joined by \n
            st, j, _ = server.json("POST", "/translate", {"q": "\n".join(lines), "source": "en", "target": "de"})
            assert st == 200, j
            return start, j["translatedText"].split("\n")
        st, j, _ = server.json("POST", "/v1/translate", {"model": "en-de", "q": lines})
        assert st == 200, j
        return start, [t["hypotheses"][0] for t in j["translations"]]

    got = [None] * len(flickr)
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        for start, outs in ex.map(ask, chunks):
            got[start:start + len(outs)] = outs
    assert got == ref
    m = server.metrics()
    assert m['tern_segments_total{model="en-de"}'] == len(flickr)


def test_v1_nbest_and_options_match_cli(server, flickr):
    """/v1/translate per-call options give what `tern translate` gives with the same options:
    beam 5, 3-best with scores (scores within 1e-4), then a length penalty and a length cap."""
    lines = flickr[:12]
    out = cli_translate(lines, "-b", "5", "-n", "3")
    ref = {}
    for line in out:
        i, hyp, score = line.split(" ||| ")
        ref.setdefault(int(i), []).append((hyp, float(score)))
    st, j, _ = server.json("POST", "/v1/translate", {"q": lines, "beam_size": 5, "num_hypotheses": 3})
    assert st == 200 and j["model"] == "en-de"
    for i, t in enumerate(j["translations"]):
        assert t["hypotheses"] == [h for h, _ in ref[i]]
        assert t["scores"] == pytest.approx([s for _, s in ref[i]], abs=1e-4)
    ref2 = cli_translate(lines, "-b", "3", "--length-penalty", "1.0", "--max-decoding-length", "6")
    st, j, _ = server.json("POST", "/v1/translate", {"q": lines, "beam_size": 3, "length_penalty": 1.0,
                                                      "max_decoding_length": 6, "return_scores": False})
    assert st == 200
    assert [t["hypotheses"][0] for t in j["translations"]] == ref2
    assert all("scores" not in t for t in j["translations"])


def test_v1_score_matches_rescore(server, flickr, tmp_path, data_dir):
    """/v1/score gives `tern rescore`'s token log-probabilities (within 1e-4) and their sum."""
    src = flickr[:6]
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.de"), encoding="utf-8") as f:
        tgt = [next(f).rstrip("\n") for _ in range(6)]
    (tmp_path / "s.txt").write_text("\n".join(src) + "\n")
    (tmp_path / "t.txt").write_text("\n".join(tgt) + "\n")
    r = subprocess.run([TERN, "rescore", "-m", MODEL, "-s", str(tmp_path / "s.txt"), "--target",
                        str(tmp_path / "t.txt"), "-t", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    st, j, _ = server.json("POST", "/v1/score", {"q": src, "targets": tgt})
    assert st == 200 and len(j["scores"]) == 6
    for line, sc in zip(r.stdout.splitlines(), j["scores"]):
        lps, total = line.split(" ||| ")
        lps = [float(x) for x in lps.split()]
        assert sc["tokens"] == len(lps)
        assert sc["token_log_probs"] == pytest.approx(lps, abs=1e-4)
        assert sc["log_prob"] == pytest.approx(float(total), abs=1e-3)


def test_get_endpoints(server):
    st, j, _ = server.json("GET", "/health")
    assert st == 200 and j["status"] == "ok" and j["models"] == ["en-de"]
    st, j, _ = server.json("GET", "/v1/models")
    # the model's own decoding defaults (models/en-de/generation_config.json: beam 5, length penalty 1)
    want = {"beam_size": 5, "num_hypotheses": 1, "length_penalty": 1, "max_decoding_length": 256}
    assert st == 200 and j["models"] == [{"name": "en-de", "source": "en", "target": "de", "defaults": want}]
    assert j["defaults"] == want
    st, h, page = server.request("GET", "/")
    assert st == 200 and h["Content-Type"].startswith("text/html")
    html = page.decode()
    # the page is self-contained: no script, style or font from elsewhere (no CDN)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    # the page's parts and the endpoints it reads (tests/test_page.py drives it in a browser)
    for part in ('id="source"', 'id="target"', 'id="swap"', 'id="input"', 'id="output"', 'id="file"',
                 'id="model"', '"/languages"', '"/frontend/settings"', '"/translate"', '"/v1/translate"',
                 '"/v1/models"', 'aria-live="polite"'):
        assert part in html, part
    st, spec, _ = server.json("GET", "/openapi.json")
    assert st == 200 and spec["openapi"].startswith("3.")
    assert {"/translate", "/languages", "/v1/translate", "/v1/score", "/health", "/metrics"} <= set(spec["paths"])
    st, h, data = server.request("GET", "/metrics")
    assert st == 200 and h["Content-Type"].startswith("text/plain")
    text = data.decode()
    for name in ("tern_http_requests_total", "tern_http_request_duration_seconds_bucket", "tern_queue_depth",
                 "tern_batch_size_bucket", "tern_source_tokens_total", "tern_segments_total"):
        assert f"# TYPE {name.replace('_bucket', '')} " in text, name
    # CORS preflight, as browser extensions send it
    st, h, _ = server.request("OPTIONS", "/translate")
    assert st == 204 and h["Access-Control-Allow-Origin"] == "*"


def test_metrics_count_requests(server):
    before = server.metrics()
    for _ in range(3):
        assert server.json("POST", "/translate", {"q": "A dog.", "source": "en", "target": "de"})[0] == 200
    assert server.json("POST", "/translate", {"q": "", "source": "en", "target": "de"})[0] == 400
    m = server.metrics()
    key = 'tern_http_requests_total{route="/translate",code="200"}'
    assert m[key] - before.get(key, 0) == 3
    assert m['tern_http_requests_total{route="/translate",code="400"}'] - before.get(
        'tern_http_requests_total{route="/translate",code="400"}', 0) == 1
    assert m['tern_http_request_duration_seconds_count{route="/translate"}'] == \
        before.get('tern_http_request_duration_seconds_count{route="/translate"}', 0) + 4
    assert m['tern_http_request_duration_seconds_bucket{route="/translate",le="+Inf"}'] == \
        m['tern_http_request_duration_seconds_count{route="/translate"}']
    assert m['tern_queue_depth{model="en-de"}'] == 0
    assert m['tern_segments_total{model="en-de"}'] - before['tern_segments_total{model="en-de"}'] == 3


# ------------------------------------------------------------------------------------ errors


def test_errors(server):
    """Every refusal: status and LibreTranslate's {"error": ...} body."""
    def post(path, body, headers=None):
        st, h, data = server.request("POST", path, body, headers)
        j = json.loads(data)
        assert list(j) == ["error"] and isinstance(j["error"], str), j
        return st, j["error"]

    ok = {"source": "en", "target": "de"}
    jh = {"Content-Type": "application/json"}
    assert post("/translate", b'{"q": "A dog.", "source": ', jh) == (400, "Invalid JSON format")
    assert post("/translate", b'{"q": "A dog.", "source": "en", "target": "de"} x', jh)[0] == 400
    assert post("/translate", b'["q"]', jh) == (400, "Invalid JSON format")
    assert post("/translate", b"", jh) == (400, "Invalid JSON format")
    assert post("/translate", {"source": "en", "target": "de"}) == (400, "Invalid request: missing q parameter")
    assert post("/translate", {"q": "", **ok}) == (400, "Invalid request: missing q parameter")
    assert post("/translate", {"q": [], **ok}) == (400, "Invalid request: missing q parameter")
    assert post("/translate", {"q": "A dog.", "target": "de"}) == (400, "Invalid request: missing source parameter")
    assert post("/translate", {"q": "A dog.", "source": "en"}) == (400, "Invalid request: missing target parameter")
    assert post("/translate", {"q": 5, **ok})[0] == 400
    assert post("/translate", {"q": ["a", 5], **ok})[0] == 400
    assert post("/translate", {"q": "a", "source": 1, "target": "de"})[0] == 400
    assert post("/translate", {"q": "a", "source": "xx", "target": "de"}) == (400, "xx is not supported")
    assert post("/translate", {"q": "a", "source": "en", "target": "yy"}) == (400, "yy is not supported")
    assert post("/translate", {"q": "a", "source": "de", "target": "en"}) == \
        (400, "English (en) is not available as a target language from German (de)")
    assert post("/translate", {"q": "a", "format": "pdf", **ok}) == (400, "pdf format is not supported")
    assert post("/translate", {"q": "a", "alternatives": -1, **ok})[0] == 400
    # invalid UTF-8, raw and in a form
    assert post("/translate", b'{"q": "\xff\xfe", "source": "en", "target": "de"}', jh) == \
        (400, "Invalid request: q is not valid UTF-8")
    assert post("/translate", b"q=%C3%28&source=en&target=de",
                {"Content-Type": "application/x-www-form-urlencoded"}) == (400, "Invalid request: q is not valid UTF-8")
    assert post("/translate", b'{"q": ["ok", "\xc3\x28"], "source": "en", "target": "de"}', jh) == \
        (400, "Invalid request: q[1] is not valid UTF-8")
    # what the client sent, quoted in a message, stays valid UTF-8 (bad bytes as "?", a character
    # cut by the message's length limit too)
    st, _, data = server.request("POST", "/translate", b'{"q": "a", "source": "x\xffy", "target": "de"}', jh)
    assert st == 400 and json.loads(data.decode("utf-8")) == {"error": "x?y is not supported"}
    st, _, data = server.request("POST", "/translate", json.dumps({"q": "a", "source": "\u00e9" * 600,
                                                                   "target": "de"}).encode(), jh)
    assert st == 400 and json.loads(data.decode("utf-8"))["error"].startswith("\u00e9" * 500)
    # an unpaired surrogate escape is not text either
    assert post("/translate", b'{"q": "\\ud800", "source": "en", "target": "de"}', jh)[0] == 400
    # limits: characters (default 20000), list items (256), segments (512)
    assert post("/translate", {"q": "a" * 20001, **ok}) == \
        (400, "Invalid request: request (20001) exceeds text limit (20000)")
    assert post("/translate", {"q": ["a"] * 257, **ok}) == \
        (400, "Invalid request: request (257) exceeds text limit (256)")
    assert post("/translate", {"q": "a\n" * 513, **ok}) == \
        (400, "Invalid request: request (513 segments) exceeds segment limit (512)")
    # body over --max-body (1 MiB): 413, announced by Content-Length or sent chunked
    # (announced: answered at once, before the body, and the connection closed)
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 2000000\r\n\r\n" + b"{" * 1000)
    reply = b""
    while True:
        data = sock.recv(65536)
        if not data:
            break
        reply += data
    sock.close()
    assert reply.startswith(b"HTTP/1.1 413 ")
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1]) == {"error": "Request body too large (limit 1048576 bytes)"}

    def chunks():
        for _ in range(20):
            yield b"x" * 65536
    c = server.conn()
    c.request("POST", "/translate", body=chunks(), headers={**jh, "Transfer-Encoding": "chunked"},
              encode_chunked=True)
    r = c.getresponse()
    assert r.status == 413 and "error" in json.loads(r.read())
    c.close()
    # /v1 refusals
    assert post("/v1/translate", {"q": ["a"], "beam_size": 0})[0] == 400
    assert post("/v1/translate", {"q": ["a"], "beam_size": 17}) == \
        (400, "Invalid request: beam_size must be an integer in 1..16")
    assert post("/v1/translate", {"q": ["a"], "beam_size": 2, "num_hypotheses": 3}) == \
        (400, "Invalid request: num_hypotheses (3) exceeds beam_size (2)")
    assert post("/v1/translate", {"q": ["a"], "beam_size": 2.5})[0] == 400
    assert post("/v1/translate", {"q": ["a"], "length_penalty": -1})[0] == 400
    assert post("/v1/translate", {"q": ["a"], "length_norm": "x"})[0] == 400
    assert post("/v1/translate", {"q": ["a"], "return_scores": 1})[0] == 400
    assert post("/v1/translate", {"q": ["a"], "bogus": 1}) == (400, "Invalid request: unknown field bogus")
    assert post("/v1/translate", {"q": ["a"], "model": "fr-en"}) == (400, "Invalid request: no model named fr-en")
    assert post("/v1/translate", {"q": ["a\nb"]})[0] == 400
    assert post("/v1/score", {"q": ["a"]}) == (400, "Invalid request: missing targets parameter")
    assert post("/v1/score", {"q": ["a", "b"], "targets": ["x"]}) == (400, "Invalid request: 1 targets for 2 sources")
    # routes and methods
    st, _, data = server.request("GET", "/nope")
    assert st == 404 and "error" in json.loads(data)
    st, _, data = server.request("GET", "/translate")
    assert st == 405 and "error" in json.loads(data)
    st, _, data = server.request("POST", "/languages", b"")
    assert st == 405
    # still serving after all that
    st, j, _ = server.json("POST", "/translate", {"q": "A dog.", **ok})
    assert st == 200 and j["translatedText"]


def test_api_keys_and_rate_limit(tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("# key requests-per-minute\nfast-key\nslow-key 2\n")
    s = Server(tmp_path, "--api-keys", str(keys), "--require-api-key")
    try:
        body = {"q": "A dog.", "source": "en", "target": "de"}
        st, j, _ = s.json("POST", "/translate", body)
        assert (st, j) == (400, {"error": "Please contact the server operator to get an API key"})
        st, j, _ = s.json("POST", "/translate", {**body, "api_key": "wrong"})
        assert (st, j) == (403, {"error": "Invalid API key"})
        for _ in range(5):
            assert s.json("POST", "/translate", {**body, "api_key": "fast-key"})[0] == 200
        assert s.json("POST", "/translate", {**body, "api_key": "slow-key"})[0] == 200
        assert s.json("POST", "/v1/translate", {"q": "A dog.", "api_key": "slow-key"})[0] == 200
        st, j, h = s.json("POST", "/translate", {**body, "api_key": "slow-key"})
        assert (st, j) == (429, {"error": "Slowdown: 2 per 1 minute"}) and int(h["Retry-After"]) >= 1
        form = urllib.parse.urlencode({**body, "api_key": "wrong"}).encode()
        st, _, data = s.request("POST", "/translate", form, {"Content-Type": "application/x-www-form-urlencoded"})
        assert st == 403 and json.loads(data) == {"error": "Invalid API key"}
        assert s.json("GET", "/languages")[0] == 200  # no key needed to list languages
    finally:
        assert s.stop() == 0, s.stderr()


def test_req_limit_per_address(tmp_path):
    """--req-limit: requests without a valid key, per client address (LibreTranslate's flag);
    a key with its own rate is not held to it."""
    keys = tmp_path / "keys.txt"
    keys.write_text("unlimited-key\n")
    s = Server(tmp_path, "--api-keys", str(keys), "--req-limit", "2")
    try:
        body = {"q": "A dog.", "source": "en", "target": "de"}
        assert s.json("POST", "/translate", body)[0] == 200
        assert s.json("POST", "/v1/translate", {"q": "A dog."})[0] == 200
        st, j, h = s.json("POST", "/translate", body)
        assert (st, j) == (429, {"error": "Slowdown: 2 per 1 minute"}) and int(h["Retry-After"]) >= 1
        for _ in range(3):
            assert s.json("POST", "/translate", {**body, "api_key": "unlimited-key"})[0] == 200
        assert s.json("GET", "/languages")[0] == 200
    finally:
        assert s.stop() == 0, s.stderr()


# ------------------------------------------------------------------------------------ batching


def _busy(s, results, key):
    """Sends the slow request (one sentence decoded for >= 200 tokens) and stores its status."""
    st, j, _ = s.json("POST", "/v1/translate", {"q": ["A man."], **SLOW}, timeout=300)
    results[key] = (st, j)


@pytest.mark.parametrize("cross", [True, False])
def test_batching_across_requests(tmp_path, cross):
    """While one slow request occupies the single worker, two 3-line requests queue up: with
    batching across requests they are decoded in one batch of 6; with --no-cross-batching in two
    batches of 3. Their answers equal the CLI's either way."""
    s = Server(tmp_path, *([] if cross else ["--no-cross-batching"]))
    try:
        lines = ["A man is riding a bicycle.", "Two dogs play in the snow.", "A woman reads a book.",
                 "Children are playing soccer.", "A cat sleeps on a sofa.", "An old man sings."]
        ref = cli_translate(lines)
        results = {}
        t0 = threading.Thread(target=_busy, args=(s, results, "slow"))
        t0.start()
        wait_until(lambda: s.metrics()['tern_segments_running{model="en-de"}'] == 1, what="slow batch running")
        before = s.metrics()

        def ask(k):
            st, j, _ = s.json("POST", "/translate", {"q": lines[3 * k:3 * k + 3], "source": "en", "target": "de"})
            results[k] = (st, j)
        ts = [threading.Thread(target=ask, args=(k,)) for k in range(2)]
        for t in ts:
            t.start()
        wait_until(lambda: s.metrics()['tern_queue_depth{model="en-de"}'] == 6, what="6 segments queued")
        for t in ts + [t0]:
            t.join(300)
        assert results["slow"][0] == 200
        assert results[0] == (200, {"translatedText": ref[:3]}) and results[1] == (200, {"translatedText": ref[3:]})
        after = s.metrics()
        n_batches = after['tern_batch_size_count{model="en-de"}'] - before['tern_batch_size_count{model="en-de"}']
        n_segs = after['tern_batch_size_sum{model="en-de"}'] - before['tern_batch_size_sum{model="en-de"}']
        # the slow batch (1 segment) ends inside this window too
        assert n_segs == 7
        assert n_batches == (2 if cross else 3)
    finally:
        assert s.stop() == 0, s.stderr()


def test_queue_full_503(tmp_path):
    """Past --max-queue segments waiting, requests get 503 with Retry-After, and nothing waits
    beyond the bound; the requests already queued are answered."""
    s = Server(tmp_path, "--max-queue", "8")
    try:
        results = {}
        t0 = threading.Thread(target=_busy, args=(s, results, "slow"))
        t0.start()
        wait_until(lambda: s.metrics()['tern_segments_running{model="en-de"}'] == 1, what="slow batch running")

        def ask(k):
            results[k] = s.json("POST", "/translate", {"q": ["A dog runs."] * 4, "source": "en", "target": "de"})
        ts = [threading.Thread(target=ask, args=(k,)) for k in range(2)]
        for t in ts:
            t.start()
        wait_until(lambda: s.metrics()['tern_queue_depth{model="en-de"}'] == 8, what="queue full")
        st, j, h = s.json("POST", "/translate", {"q": "A dog runs.", "source": "en", "target": "de"})
        assert st == 503 and h["Retry-After"] == "1" and "queue" in j["error"]
        for t in ts + [t0]:
            t.join(300)
        assert results[0][0] == 200 and results[1][0] == 200 and results["slow"][0] == 200
        m = s.metrics()
        assert m["tern_rejected_total"] == 1
        assert m['tern_http_requests_total{route="/translate",code="503"}'] == 1
    finally:
        assert s.stop() == 0, s.stderr()


# ------------------------------------------------------------------------------------ faults


def test_sigterm_answers_requests_in_flight(tmp_path, flickr):
    """SIGTERM while 6 requests are queued or decoding: all 6 are answered in full (and right),
    the server stops accepting, then exits 0."""
    s = Server(tmp_path)
    ref = cli_translate(flickr[:24])
    results = {}

    def ask(k):
        try:
            results[k] = s.json("POST", "/translate", {"q": flickr[4 * k:4 * k + 4], "source": "en", "target": "de"},
                                timeout=300)
        except Exception as e:  # noqa: BLE001 -- recorded, asserted below
            results[k] = e
    slow = threading.Thread(target=_busy, args=(s, results, "slow"))
    slow.start()
    wait_until(lambda: s.metrics()['tern_segments_running{model="en-de"}'] == 1, what="slow batch running")
    ts = [threading.Thread(target=ask, args=(k,)) for k in range(6)]
    for t in ts:
        t.start()
    wait_until(lambda: s.metrics()['tern_queue_depth{model="en-de"}'] == 24, what="24 segments queued")
    s.term()
    # the listening socket closes at once
    wait_until(lambda: socket.socket().connect_ex(("127.0.0.1", s.port)) != 0, timeout=30, what="listener closed")
    for t in ts + [slow]:
        t.join(300)
    assert results["slow"][0] == 200
    for k in range(6):
        st, j, _ = results[k]
        assert st == 200 and j["translatedText"] == ref[4 * k:4 * k + 4]
    assert s.stop() == 0, s.stderr()


def test_sighup_reload_keeps_requests(tmp_path, flickr):
    """SIGHUP reloads the model while requests wait: none is dropped, answers unchanged."""
    s = Server(tmp_path)
    try:
        ref = cli_translate(flickr[:16])
        results = {}
        slow = threading.Thread(target=_busy, args=(s, results, "slow"))
        slow.start()
        wait_until(lambda: s.metrics()['tern_segments_running{model="en-de"}'] == 1, what="slow batch running")

        def ask(k):
            results[k] = s.json("POST", "/translate", {"q": flickr[4 * k:4 * k + 4], "source": "en", "target": "de"})
        ts = [threading.Thread(target=ask, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        s.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: s.metrics()['tern_reloads_total{model="en-de"}'] == 1, what="reload")
        for t in ts + [slow]:
            t.join(300)
        assert results["slow"][0] == 200
        for k in range(4):
            assert results[k][0] == 200 and results[k][1]["translatedText"] == ref[4 * k:4 * k + 4]
        assert s.json("POST", "/translate", {"q": flickr[:2], "source": "en", "target": "de"})[1] == \
            {"translatedText": ref[:2]}
    finally:
        assert s.stop() == 0, s.stderr()


def test_slow_client_times_out(tmp_path):
    """A client that sends half a request and stalls is cut off after --timeout; others are served."""
    s = Server(tmp_path, "--timeout", "1")
    try:
        stalled = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        stalled.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 100\r\n\r\n{\"q\": ")
        t0 = time.monotonic()
        assert s.json("POST", "/translate", {"q": "A dog.", "source": "en", "target": "de"})[0] == 200
        data = stalled.recv(4096)  # the server closes it: b"" (or an error status, then close)
        while data:
            data = stalled.recv(4096)
        assert time.monotonic() - t0 < 20
        stalled.close()
        assert s.json("GET", "/health")[0] == 200
    finally:
        assert s.stop() == 0, s.stderr()


@pytest.mark.skipif(not os.path.exists(TERN_SAN), reason="build-san/tern missing: make SAN=1 build-san/tern")
def test_disconnecting_client_under_asan(tmp_path):
    """Clients that hang up mid-request (mid-body, queued, decoding) are cancelled: the server goes on
    serving, counts them, and exits 0 under ASan/LSan (no leak, no use after free)."""
    s = Server(tmp_path, "--drain-timeout", "120", binary=TERN_SAN,
               env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=23"}, start_timeout=300)
    try:
        def send_and_drop(body):
            sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
            data = json.dumps(body).encode()
            sock.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                         f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
            return sock
        # one that hangs up halfway through its body
        half = socket.create_connection(("127.0.0.1", s.port), timeout=60)
        half.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"q\": \"A man")
        half.close()
        # one decoding when it hangs up, two still queued behind it
        a = send_and_drop({"q": ["A man."], **SLOW})
        wait_until(lambda: s.metrics()['tern_segments_running{model="en-de"}'] == 1, timeout=120, what="running")
        b = send_and_drop({"q": ["A dog.", "A cat."]})
        c = send_and_drop({"q": ["A bird."]})
        wait_until(lambda: s.metrics()['tern_queue_depth{model="en-de"}'] == 3, timeout=120, what="queued")
        for sock in (b, c, a):
            sock.close()
        wait_until(lambda: s.metrics().get('tern_http_client_disconnects_total{route="/v1/translate"}', 0) == 3,
                   timeout=300, what="3 disconnects seen")
        wait_until(lambda: s.metrics()['tern_segments_running{model="en-de"}'] == 0 and
                   s.metrics()['tern_queue_depth{model="en-de"}'] == 0, timeout=300, what="queue drained")
        st, j, _ = s.json("POST", "/translate", {"q": "A dog.", "source": "en", "target": "de"}, timeout=300)
        assert st == 200 and j["translatedText"] == cli_translate(["A dog."])[0]
    finally:
        rc = s.stop(timeout=300)
    err = s.stderr()
    assert "ERROR: AddressSanitizer" not in err and "ERROR: LeakSanitizer" not in err, err
    assert "runtime error" not in err, err
    assert rc == 0, err


def test_several_models_and_workers(tmp_path, flickr):
    """Two models at once (the shipped model under two names), two translators each: requests
    are routed by pair or by name, /languages lists both targets, and each answers as the CLI."""
    s = Server(tmp_path, "-m", f"en-fr={MODEL}", "-w", "2", "-t", "1")
    try:
        ref = cli_translate(flickr[:10])
        st, langs, _ = s.json("GET", "/languages")
        assert st == 200 and langs == [{"code": "en", "name": "English", "targets": ["de", "fr"]},
                                       {"code": "de", "name": "German", "targets": []},
                                       {"code": "fr", "name": "French", "targets": []}]
        for target in ("de", "fr"):
            st, j, _ = s.json("POST", "/translate", {"q": flickr[:10], "source": "en", "target": target})
            assert st == 200 and j["translatedText"] == ref
        st, j, _ = s.json("POST", "/v1/translate", {"q": flickr[:3], "model": "en-fr"})
        assert st == 200 and j["model"] == "en-fr" and [t["hypotheses"][0] for t in j["translations"]] == ref[:3]
        st, j, _ = s.json("POST", "/v1/translate", {"q": flickr[:3]})
        assert (st, j) == (400, {"error": "Invalid request: several models are loaded: give model (or source and target)"})
        st, j, _ = s.json("POST", "/translate", {"q": "A dog.", "source": "auto", "target": "de"})
        assert st == 200
        m = s.metrics()
        assert m['tern_segments_total{model="en-de"}'] == 11 and m['tern_segments_total{model="en-fr"}'] == 13
    finally:
        assert s.stop() == 0, s.stderr()


def test_default_layout(tmp_path, flickr):
    """Without -w, a translator per core with one intra-op thread each (at most 8 per model);
    -t or -w alone share the cores out as the help says. The layout is printed at start, and a
    server on the default layout answers as the CLI."""
    cores = os.cpu_count()

    def layout(*args):
        s = Server(tmp_path, *args, layout=())
        try:
            m = re.findall(r"model (\S+) from \S+ \((\d+) translators? x (\d+) threads?\)", s.stderr())
            if not args:
                st, j, _ = s.json("POST", "/translate", {"q": flickr[:6], "source": "en", "target": "de"})
                assert st == 200 and j["translatedText"] == cli_translate(flickr[:6])
        finally:
            assert s.stop() == 0, s.stderr()
        return [(name, int(w), int(t)) for name, w, t in m]

    assert layout() == [("en-de", min(8, cores), 1)]
    assert layout("-t", "2") == [("en-de", min(8, max(1, cores // 2)), 2)]
    assert layout("-w", "3") == [("en-de", 3, max(1, cores // 3))]
    w2 = min(8, max(1, cores // 2))
    assert layout("-m", f"en-fr={MODEL}") == [("en-de", w2, 1), ("en-fr", w2, 1)]


def test_sighup_reload_failure_keeps_old_model(tmp_path):
    """A reload that fails (the model file replaced by a truncated one) keeps the old model
    serving and is counted; once a whole file is back, SIGHUP reloads it. Files are replaced by
    rename, as a deployment must: the running weights are memory-mapped, and a file truncated in
    place would pull the pages from under them (SIGBUS)."""
    import shutil
    d = tmp_path / "model"
    shutil.copytree(MODEL, d)
    weights = d / "model.safetensors"
    good = weights.read_bytes()

    def replace(data):
        tmp = d / "model.safetensors.new"
        tmp.write_bytes(data)
        os.replace(tmp, weights)
    s = Server(tmp_path, "-m", f"en-fr={d}")
    try:
        ref = cli_translate(["A man is riding a bicycle."])
        replace(good[:1000])
        s.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: s.metrics()['tern_reload_failures_total{model="en-fr"}'] == 1, what="failed reload")
        m = s.metrics()
        assert m['tern_reloads_total{model="en-fr"}'] == 0
        st, j, _ = s.json("POST", "/translate", {"q": "A man is riding a bicycle.", "source": "en", "target": "fr"})
        assert (st, j) == (200, {"translatedText": ref[0]})
        replace(good)
        s.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: s.metrics()['tern_reloads_total{model="en-fr"}'] == 1, what="reload")
        st, j, _ = s.json("POST", "/translate", {"q": "A man is riding a bicycle.", "source": "en", "target": "fr"})
        assert (st, j) == (200, {"translatedText": ref[0]})
        assert "reload failed, the old models keep serving" in s.stderr()
    finally:
        assert s.stop() == 0, s.stderr()
