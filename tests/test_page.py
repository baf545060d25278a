"""The web page of `tern serve` (src/serve/page.html) in a real browser: Debian's headless Chromium
driven by Selenium (chromedriver from Debian too), against a server with en-de and de-en (the
shipped model under both names, so that swapping has a route).

What is checked, each against the server's own API answering the same request (or `tern translate`):
typing translates (debounced) and shows exactly what POST /translate returns; typing again while a
request is in flight cancels it (AbortController) and a late stale answer never wins; "detect"
shows the detected language; swap exchanges the languages and moves the translation into the
input; copy (Clipboard API, and the selection fallback); alternatives (shown on click, picking one
replaces the translation); a .txt and an .html file round trip through the file input and the
download; errors (the server's JSON "error"); the confidence display (its renderer called with a
fixture: the server has no confidence yet); n-best with scores (vs `tern translate -n`); a
375x740 window (no horizontal scroll, every control visible); keyboard only (Tab reaches every
control in order; the shortcuts work). TERN_SCREENSHOT=1 rewrites docs/img/page-desktop.png and
docs/img/page-phone.png.
"""
import json
import math
import os
import re
import shutil
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tools"))
from serve_util import MODEL, ROOT, Server, cli_translate  # noqa: E402

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (tests/requirements.txt)")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                reason="Debian's chromium and chromium-driver are not installed (scripts/setup.sh)")

SHOTS = os.environ.get("TERN_SCREENSHOT") == "1"
ALTS = 3  # the page's default "alternatives"
CONTROLS = ["source", "swap", "target", "input", "clear", "go", "output", "copy", "alt", "file", "more-summary",
            "keys-summary"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("page"), "-m", f"de-en={MODEL}")
    yield s
    assert s.stop() == 0, s.stderr()


def lt(server, q, source="en", target="de", **kw):
    st, j, _ = server.json("POST", "/translate", {"q": q, "source": source, "target": target, **kw})
    assert st == 200, j
    return j


def make_browser(tmp_path, size=(1100, 860)):
    dl = tmp_path / "downloads"
    dl.mkdir(exist_ok=True)
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
              f"--window-size={size[0]},{size[1]}", f"--user-data-dir={tmp_path / 'chrome'}"):
        opts.add_argument(a)
    opts.add_experimental_option("prefs", {"download.default_directory": str(dl),
                                           "download.prompt_for_download": False})
    drv = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=opts)
    drv.set_page_load_timeout(60)
    drv.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(dl)})
    drv.download_dir = dl
    return drv


@pytest.fixture
def browser(tmp_path):
    drv = make_browser(tmp_path)
    yield drv
    drv.quit()


def open_page(drv, server, source="en", target="de"):
    drv.get(f"http://127.0.0.1:{server.port}/")
    drv.execute_script("localStorage.clear()")
    drv.get(f"http://127.0.0.1:{server.port}/")
    wait = WebDriverWait(drv, 90)
    wait.until(lambda d: len(Select(d.find_element(By.ID, "source")).options) == 3)  # auto, en, de
    Select(drv.find_element(By.ID, "source")).select_by_value(source)
    Select(drv.find_element(By.ID, "target")).select_by_value(target)
    wait.until(lambda d: not d.execute_script("return tern.ctrl"))
    return wait


def output(drv):
    return drv.execute_script("return document.getElementById('output').textContent")


def settle(drv, wait):
    """Waits until no request is in flight and no typing is pending."""
    wait.until(lambda d: d.execute_script("return !tern.ctrl && !tern.timerPending"))


def type_text(drv, text):
    box = drv.find_element(By.ID, "input")
    box.clear()
    box.send_keys(text)
    return box


def test_languages_and_settings(server, browser):
    """The pickers are built from /languages ("detect" first), the counter from /frontend/settings."""
    open_page(browser, server)
    _, langs, _ = server.json("GET", "/languages")
    _, settings, _ = server.json("GET", "/frontend/settings")
    src = [(o.get_attribute("value"), o.text) for o in Select(browser.find_element(By.ID, "source")).options]
    assert src == [("auto", "Detect language")] + [(lg["code"], lg["name"]) for lg in langs]
    Select(browser.find_element(By.ID, "source")).select_by_value("de")
    tgt = [o.get_attribute("value") for o in Select(browser.find_element(By.ID, "target")).options]
    assert tgt == next(lg["targets"] for lg in langs if lg["code"] == "de")
    assert browser.find_element(By.ID, "counter").text == f"0 / {settings['charLimit']}"


def test_typing_translates(server, browser):
    wait = open_page(browser, server)
    text = "A man is riding a bicycle. Two dogs play in the snow.\nA woman sings."
    type_text(browser, text)
    ref = lt(server, text, alternatives=ALTS)
    wait.until(lambda d: output(d) == ref["translatedText"])
    settle(browser, wait)
    assert output(browser) == ref["translatedText"]
    # the page's alternatives do not change the best translation
    assert lt(server, text)["translatedText"] == ref["translatedText"]
    assert browser.find_element(By.ID, "counter").text == f"{len(text)} / 20000"
    # typing fires one request after the pause, not one per key
    n = browser.execute_script("return performance.getEntriesByType('resource')"
                               ".filter(e => e.name.endsWith('/translate')).length")
    assert n == 1, n


FETCH_HOOK = """
window.hook = {calls: []};
const orig = window.fetch;
window.fetch = async function (url, opts) {
  const call = {url: String(url), body: opts && opts.body, aborted: false, done: false};
  window.hook.calls.push(call);
  if (opts && opts.signal) opts.signal.addEventListener('abort', () => { call.aborted = true; });
  const r = await orig(url, opts);
  // the first /translate answer comes late, whatever its signal says: only the page's own check can
  // keep it from overwriting the newer one
  if (call.url.endsWith('/translate') && window.hook.calls.filter(c => c.url.endsWith('/translate')).indexOf(call) === 0)
    await new Promise(res => setTimeout(res, 2500));
  call.done = true;
  return r;
};
"""


def test_no_stale_result(server, browser):
    """Type, wait past the debounce (a request leaves), type more: the first request is aborted, its
    answer (held back 2.5 s by a wrapper around fetch) never replaces the newer one."""
    wait = open_page(browser, server)
    browser.execute_script(FETCH_HOOK)
    box = type_text(browser, "A man is riding a bicycle.")
    wait.until(lambda d: d.execute_script("return window.hook.calls.length") == 1)
    box.send_keys(" Two dogs play in the snow.")
    final = box.get_attribute("value")
    ref = lt(server, final, alternatives=ALTS)["translatedText"]
    wait.until(lambda d: output(d) == ref)
    calls = browser.execute_script("return window.hook.calls")
    qs = [json.loads(c["body"])["q"] for c in calls]
    # two requests (more only if the machine stalls the typing for 400 ms): the first of the first
    # text, the last of the final text; every one but the last aborted
    assert qs[0] == "A man is riding a bicycle." and qs[-1] == final and len(qs) >= 2, qs
    assert all(c["aborted"] for c in calls[:-1]) and not calls[-1]["aborted"]
    time.sleep(3)  # past the stale answer's release
    assert output(browser) == ref
    assert browser.find_element(By.ID, "error").text == ""


def test_detect_and_swap(server, browser):
    wait = open_page(browser, server, source="auto", target="de")
    text = "A little girl is climbing a tree in the park."
    type_text(browser, text)
    ref = lt(server, text, source="auto", alternatives=ALTS)
    assert ref["detectedLanguage"]["language"] == "en"
    wait.until(lambda d: output(d) == ref["translatedText"])
    sel = Select(browser.find_element(By.ID, "source"))
    assert sel.first_selected_option.text == "Detect language (English)"
    conf = round(ref["detectedLanguage"]["confidence"])
    assert f"detected English ({conf} % confidence)" in browser.find_element(By.ID, "status").text
    # swap: de -> en, the translation becomes the text
    browser.find_element(By.ID, "swap").click()
    assert sel.first_selected_option.get_attribute("value") == "de"
    assert Select(browser.find_element(By.ID, "target")).first_selected_option.get_attribute("value") == "en"
    assert browser.find_element(By.ID, "input").get_attribute("value") == ref["translatedText"]
    back = lt(server, ref["translatedText"], source="de", target="en", alternatives=ALTS)["translatedText"]
    wait.until(lambda d: output(d) == back)
    # the pair is remembered across a reload
    browser.refresh()
    wait.until(lambda d: len(Select(d.find_element(By.ID, "source")).options) == 3)
    assert Select(browser.find_element(By.ID, "source")).first_selected_option.get_attribute("value") == "de"


def test_copy(server, browser):
    wait = open_page(browser, server)
    type_text(browser, "Two dogs play in the snow.")
    ref = lt(server, "Two dogs play in the snow.", alternatives=ALTS)["translatedText"]
    wait.until(lambda d: output(d) == ref)
    origin = f"http://127.0.0.1:{server.port}"
    browser.execute_cdp_cmd("Browser.grantPermissions", {"origin": origin,
                                                         "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    browser.find_element(By.ID, "copy").click()
    wait.until(lambda d: d.find_element(By.ID, "status").text == "translation copied")
    got = browser.execute_async_script("navigator.clipboard.readText().then(arguments[0], e => arguments[0]('ERR ' + e))")
    assert got == ref
    # the fallback, where there is no Clipboard API: the translation is selected and copied
    browser.execute_script("Object.defineProperty(Navigator.prototype, 'clipboard', {get: () => undefined});"
                           "document.getElementById('status').textContent = '';")
    browser.find_element(By.ID, "copy").click()
    assert browser.execute_script("return window.getSelection().toString()") == ref
    assert browser.find_element(By.ID, "status").text in ("translation copied",
                                                           "the translation is selected: press Ctrl+C to copy it")


def test_alternatives(server, browser):
    wait = open_page(browser, server)
    text = "A man in a blue shirt is standing on a ladder."
    ref = lt(server, text, alternatives=ALTS)
    assert len(ref["alternatives"]) == ALTS
    type_text(browser, text)
    wait.until(lambda d: output(d) == ref["translatedText"])
    alt = browser.find_element(By.ID, "alt")
    assert alt.is_enabled() and alt.text == f"Alternatives ({ALTS})"
    browser.find_element(By.ID, "output").click()
    items = browser.find_elements(By.CSS_SELECTOR, "#alts button")
    assert [b.text for b in items] == ref["alternatives"]
    assert alt.get_attribute("aria-expanded") == "true"
    items[1].click()
    assert output(browser) == ref["alternatives"][1]
    assert browser.find_element(By.ID, "alts").get_attribute("hidden") is not None
    # the replaced translation is now among the alternatives; copy copies what is shown
    alt.click()
    shown = [b.text for b in browser.find_elements(By.CSS_SELECTOR, "#alts button")]
    assert shown == [ref["alternatives"][0], ref["translatedText"], ref["alternatives"][2]]
    assert browser.execute_script("return tern.output") == ref["alternatives"][1]


def wait_file(path, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and not list(path.parent.glob("*.crdownload")):
            return path.read_text(encoding="utf-8")
        time.sleep(0.1)
    raise AssertionError(f"{path} was not downloaded: {list(path.parent.iterdir())}")


def test_file_round_trip(server, browser, tmp_path):
    wait = open_page(browser, server)
    lines = ["A man is riding a bicycle.", "", "Two dogs play in the snow. A woman sings.", "Kids run."]
    src = tmp_path / "notes.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    browser.find_element(By.ID, "file").send_keys(str(src))
    link = browser.find_element(By.ID, "download")
    wait.until(lambda d: link.is_displayed())
    assert link.text == "Download notes.de.txt"
    link.click()
    got = wait_file(browser.download_dir / "notes.de.txt")
    want = [lt(server, ln)["translatedText"] if ln else "" for ln in lines] + [""]
    assert got.split("\n") == want
    # an HTML file goes as format "html": what /translate answers for the whole document
    doc = "<!DOCTYPE html>\n<html><body><h1>A dog runs.</h1>\n<p>A man is <b>riding</b> a bicycle.</p></body></html>\n"
    page = tmp_path / "page.html"
    page.write_text(doc, encoding="utf-8")
    browser.find_element(By.ID, "file").send_keys(str(page))
    wait.until(lambda d: link.text == "Download page.de.html")
    link.click()
    assert wait_file(browser.download_dir / "page.de.html") == lt(server, doc, format="html")["translatedText"]
    # a file that is not UTF-8: an error naming it, no download
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("Ein Bär.\n".encode("latin-1"))
    browser.find_element(By.ID, "file").send_keys(str(bad))
    wait.until(lambda d: d.find_element(By.ID, "error").text == "latin1.txt: not UTF-8 text")
    assert not link.is_displayed()
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n", encoding="utf-8")
    browser.find_element(By.ID, "file").send_keys(str(empty))
    wait.until(lambda d: d.find_element(By.ID, "error").text == "empty.txt: the file is empty")
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    browser.find_element(By.ID, "file").send_keys(str(pdf))
    wait.until(lambda d: d.find_element(By.ID, "error").text ==
               "report.pdf: only .txt, .html, .docx, .odt files can be translated here")
    assert not link.is_displayed()
    # the same file again, into English from German: a new download
    Select(browser.find_element(By.ID, "source")).select_by_value("de")
    Select(browser.find_element(By.ID, "target")).select_by_value("en")
    browser.find_element(By.ID, "file").send_keys(str(src))
    wait.until(lambda d: link.text == "Download notes.en.txt")
    link.click()
    got = wait_file(browser.download_dir / "notes.en.txt")
    assert got.split("\n") == [lt(server, ln, "de", "en")["translatedText"] if ln else "" for ln in lines] + [""]


def wait_bytes(path, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and not list(path.parent.glob("*.crdownload")):
            return path.read_bytes()
        time.sleep(0.1)
    raise AssertionError(f"{path} was not downloaded: {list(path.parent.iterdir())}")


def server_file(server, name, data, source="en", target="de"):
    """The server's own translation of a file: POST /translate_file, then its translatedFileUrl."""
    b = "----ternpage"
    body = b"".join(f"--{b}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n".encode()
                    for k, v in {"source": source, "target": target}.items())
    body += (f"--{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n\r\n".encode() + data +
             f"\r\n--{b}--\r\n".encode())
    st, _, raw = server.request("POST", "/translate_file", body, {"Content-Type": f"multipart/form-data; boundary={b}"})
    assert st == 200, raw
    url = json.loads(raw)["translatedFileUrl"]
    st, _, out = server.request("GET", url.split(str(server.port), 1)[1])
    assert st == 200
    return out


def test_file_via_server(server, browser, tmp_path):
    """With filesTranslation (tern serve has it), the page sends a .txt and a .docx to POST
    /translate_file and offers the file at translatedFileUrl: the download is byte for byte the
    server's own translation of the same file (python-docx builds the .docx)."""
    docx = pytest.importorskip("docx", reason="python-docx (tests/requirements.txt) is not installed")
    import io
    wait = open_page(browser, server)
    assert browser.find_element(By.ID, "file-formats").text == ".txt, .html, .docx, .odt"
    link = browser.find_element(By.ID, "download")
    src = tmp_path / "notes.txt"
    src.write_text("A man is riding a bicycle.\n\nTwo dogs play in the snow. A woman sings.\n", encoding="utf-8")
    browser.find_element(By.ID, "file").send_keys(str(src))
    wait.until(lambda d: link.is_displayed() and link.text == "Download notes.de.txt")
    link.click()
    assert wait_bytes(browser.download_dir / "notes.de.txt") == server_file(server, "notes.txt", src.read_bytes())
    d = docx.Document()
    p = d.add_paragraph("A man rides a ")
    p.add_run("red").bold = True
    p.add_run(" bicycle.")
    d.add_paragraph("Two dogs play in the snow.")
    buf = io.BytesIO()
    d.save(buf)
    rep = tmp_path / "report.docx"
    rep.write_bytes(buf.getvalue())
    browser.find_element(By.ID, "file").send_keys(str(rep))
    wait.until(lambda d: link.is_displayed() and link.text == "Download report.de.docx")
    link.click()
    got = wait_bytes(browser.download_dir / "report.de.docx")
    assert got == server_file(server, "report.docx", rep.read_bytes())
    out = docx.Document(io.BytesIO(got))
    want = lt(server, "A man rides a <b>red</b> bicycle.", format="html")["translatedText"]
    assert [r.text for r in out.paragraphs[0].runs if r.bold] == [re.search(r"<b>(.*)</b>", want).group(1)]
    n = browser.execute_script("return performance.getEntriesByType('resource')"
                               ".filter(e => e.name.endsWith('/translate_file')).length")
    assert n == 2, n


def test_file_longer_than_limit(tmp_path):
    """A text file over --char-limit goes in chunks of whole lines, each within the limit."""
    s = Server(tmp_path, "--char-limit", "60")
    drv = make_browser(tmp_path)
    try:
        wait = open_page_single(drv, s)
        lines = ["A man is riding a bicycle.", "Two dogs play in the snow.", "A woman sings.", "Kids run."]
        src = tmp_path / "long.txt"
        src.write_text("\n".join(lines), encoding="utf-8")
        drv.find_element(By.ID, "file").send_keys(str(src))
        wait.until(lambda d: d.find_element(By.ID, "download").is_displayed())
        drv.find_element(By.ID, "download").click()
        got = wait_file(drv.download_dir / "long.de.txt")
        assert got.split("\n") == [lt(s, ln)["translatedText"] for ln in lines]
        n = drv.execute_script("return performance.getEntriesByType('resource')"
                               ".filter(e => e.name.endsWith('/translate')).length")
        assert n == 2, n  # 27+27 characters, then 15+9
        # typing over the limit: the counter turns red, the page says so and sends nothing
        type_text(drv, "x" * 61)
        wait.until(lambda d: d.find_element(By.ID, "error").text ==
                   "The text is longer than the server's limit of 60 characters.")
        assert "over" in drv.find_element(By.ID, "counter").get_attribute("class")
        assert drv.find_element(By.ID, "counter").text == "61 / 60"
        # the server's own error, when the page lets it through: its JSON "error" is shown
        drv.execute_script("tern.settings.charLimit = -1; translateNow();")
        wait.until(lambda d: d.find_element(By.ID, "error").text ==
                   "Invalid request: request (61) exceeds text limit (60)")
    finally:
        drv.quit()
        assert s.stop() == 0, s.stderr()


def open_page_single(drv, server):
    drv.get(f"http://127.0.0.1:{server.port}/")
    wait = WebDriverWait(drv, 90)
    wait.until(lambda d: len(Select(d.find_element(By.ID, "target")).options) == 1)
    return wait


def test_confidence_display(server, browser):
    """The renderer and the response reader on fixtures of the shapes the page understands; the
    server's own answer in test_confidence_from_server."""
    open_page(browser, server)
    fixture = {"translatedText": "Ein Hund rennt. Eine Frau singt.\nKinder.",
               "quality": [{"text": "Ein Hund rennt.", "score": 0.91}, {"text": "Eine Frau singt.", "score": 0.62},
                           {"text": "Kinder.", "score": 0.2}]}
    browser.execute_script("showOutput(arguments[0].translatedText, qualityOf(arguments[0]))", fixture)
    spans = browser.find_elements(By.CSS_SELECTOR, "#output .sent")
    got = [(s.get_attribute("class"), s.get_attribute("title"), s.get_attribute("data-score")) for s in spans]
    assert got == [("sent q-hi", "confidence 91 %", "0.91"), ("sent q-mid", "confidence 62 %", "0.62"),
                   ("sent q-lo", "confidence 20 %", "0.2")]
    assert browser.execute_script("return tern.output") == fixture["translatedText"]
    # the text between the sentences is kept; screen readers hear each figure after its sentence
    assert output(browser) == ("Ein Hund rennt. (confidence 91 %) Eine Frau singt. (confidence 62 %)\n"
                               "Kinder. (confidence 20 %)")
    assert "confidence of the model" in browser.find_element(By.ID, "legend").text
    # /v1/translate's quality is a mean token log-probability: shown as its exponential
    v1 = {"translations": [{"hypotheses": ["Ein Hund rennt."], "quality": math.log(0.5)},
                           {"hypotheses": ["Kinder."], "quality": {"score": math.log(0.85), "words": []}}]}
    got = browser.execute_script("return qualityOf(arguments[0])", v1)
    assert [g["text"] for g in got] == ["Ein Hund rennt.", "Kinder."]
    assert [g["score"] for g in got] == pytest.approx([0.5, 0.85], abs=1e-12)
    assert browser.execute_script("return qualityOf(arguments[0])", {"translatedText": "x"}) is None
    # without a confidence the output is plain text and the legend is gone
    browser.execute_script("showOutput('Ein Hund.', null)")
    assert browser.find_elements(By.CSS_SELECTOR, "#output .sent") == [] and output(browser) == "Ein Hund."
    assert not browser.find_element(By.ID, "legend").is_displayed()
    # the page offers the option only when the server's /openapi.json has "quality" in /v1/translate
    _, api, _ = server.json("GET", "/openapi.json")
    ref = api["paths"]["/v1/translate"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    has = "quality" in api["components"]["schemas"][ref.split("/")[-1]]["properties"]
    browser.find_element(By.ID, "more-summary").click()
    assert browser.find_element(By.ID, "quality-box").is_displayed() == has


def test_confidence_from_server(server, browser):
    """"confidence per sentence": the page sends each sentence as an item of /v1/translate with
    "quality": true, and each underlined sentence carries exp(its quality score) as the server gives
    it for that sentence alone."""
    wait = open_page(browser, server)
    browser.find_element(By.ID, "more-summary").click()
    browser.find_element(By.ID, "quality").click()
    sents = ["A man is riding a bicycle.", "Two dogs play in the snow."]
    type_text(browser, " ".join(sents))
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#output .sent")) == 2)
    settle(browser, wait)
    st, j, _ = server.json("POST", "/v1/translate", {"q": sents, "quality": True, "source": "en", "target": "de"})
    assert st == 200, j
    spans = browser.find_elements(By.CSS_SELECTOR, "#output .sent")
    for span, t in zip(spans, j["translations"]):
        assert span.text.startswith(t["hypotheses"][0])
        assert float(span.get_attribute("data-score")) == pytest.approx(math.exp(t["quality"]["score"]), abs=1e-9)
        pct = round(math.exp(t["quality"]["score"]) * 100)
        assert span.get_attribute("title") == f"confidence {pct} %"
    assert output(browser).startswith(j["translations"][0]["hypotheses"][0])


def test_nbest_scores(server, browser):
    """The options panel: /v1/translate with beam 5 and a 3-best list with scores, as `tern translate
    -b 5 -n 3` prints them (scores to the 4 decimals shown)."""
    wait = open_page(browser, server)
    lines = ["A man is riding a bicycle.", "Two dogs play in the snow."]
    browser.find_element(By.ID, "more-summary").click()
    for id_, v in (("beam", "5"), ("nhyp", "3")):
        el = browser.find_element(By.ID, id_)
        el.clear()
        el.send_keys(v)
    browser.find_element(By.ID, "nbest").click()
    type_text(browser, "\n".join(lines))
    out = cli_translate(lines, "-b", "5", "-n", "3")
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#nbestbox table tr")) == 7)
    settle(browser, wait)
    rows = browser.find_elements(By.CSS_SELECTOR, "#nbestbox table tr")[1:]
    shown = [[c.text for c in r.find_elements(By.TAG_NAME, "td")] for r in rows]
    for k, line in enumerate(out):
        i, hyp, score = line.split(" ||| ")
        src, rank, h, sc = shown[k]
        assert int(i) == k // 3 and rank == str(k % 3 + 1) and h == hyp
        assert src == (lines[int(i)] if k % 3 == 0 else "")
        assert abs(float(sc) - float(score)) <= 0.00005 + 1e-4
    assert output(browser) == "\n".join(out[0].split(" ||| ")[1:2] + out[3].split(" ||| ")[1:2])
    # a chosen model: /v1/translate with "model", the best of beam 5
    Select(browser.find_element(By.ID, "model")).select_by_value("en-de")
    browser.find_element(By.ID, "nbest").click()
    best = cli_translate(lines, "-b", "5")
    wait.until(lambda d: output(d) == "\n".join(best) and not d.find_elements(By.CSS_SELECTOR, "#nbestbox table"))


def control_boxes(drv):
    return drv.execute_script("""
      const ids = arguments[0];
      return ids.map(id => { const e = document.getElementById(id); const r = e.getBoundingClientRect();
        return [id, r.left, r.right, r.width, r.height]; });""", CONTROLS)


def test_phone_width(server, tmp_path):
    drv = make_browser(tmp_path)
    try:
        # a phone's viewport (a headless window is at least 500 px wide)
        drv.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": 375, "height": 740, "deviceScaleFactor": 1, "mobile": True})
        wait = open_page(drv, server)
        assert drv.execute_script("return window.innerWidth") == 375
        type_text(drv, "A man is riding a bicycle. Two dogs play in the snow.")
        wait.until(lambda d: output(d) != "" and not d.execute_script("return tern.ctrl"))
        width = drv.execute_script("return document.documentElement.clientWidth")
        assert drv.execute_script("return document.documentElement.scrollWidth") <= width
        for id_, left, right, w, h in control_boxes(drv):
            assert w > 0 and h > 0 and left >= 0 and right <= width, (id_, left, right, width)
            # big enough to touch (WCAG 2.2's 24 px minimum target)
            if id_ not in ("output", "input", "file", "more-summary", "keys-summary"):
                assert w >= 24 and h >= 24, (id_, w, h)
        # the two panes are stacked: the translation below the text
        y_in, y_out = drv.execute_script("return ['input','output'].map(i => "
                                         "document.getElementById(i).getBoundingClientRect().top)")
        assert y_out > y_in
        if SHOTS:
            drv.execute_script("window.scrollTo(0, 0)")
            drv.save_screenshot(os.path.join(ROOT, "docs", "img", "page-phone.png"))
    finally:
        drv.quit()


def test_keyboard_only(server, browser):
    wait = open_page(browser, server)
    # Tab from the top reaches every control, in reading order
    browser.find_element(By.TAG_NAME, "h1").click()  # the starting point of Tab: the top
    seen = []
    for _ in range(40):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        a = browser.execute_script("const e = document.activeElement; return e.id || e.tagName + ':' + e.textContent")
        if a in seen:
            break
        seen.append(a)
    reached = [c for c in seen if c in CONTROLS]
    # copy and alternatives are disabled before the first translation; the rest is reached in order
    assert reached == [c for c in CONTROLS if c not in ("copy", "alt")], seen
    # Ctrl+Enter translates at once (the text is set without an input event: no debounce runs)
    text = "A girl is jumping into a lake."
    box = browser.find_element(By.ID, "input")
    browser.execute_script("arguments[0].value = arguments[1]", box, text)
    box.click()
    time.sleep(1)
    assert output(browser) == ""
    ActionChains(browser).key_down(Keys.CONTROL).send_keys(Keys.ENTER).key_up(Keys.CONTROL).perform()
    ref = lt(server, text, alternatives=ALTS)
    wait.until(lambda d: output(d) == ref["translatedText"])
    # Tab onwards: copy and alternatives are now reachable; Enter on the translation opens the
    # alternatives, arrows move, Enter picks, Esc closes
    box.click()
    seen = []
    for _ in range(6):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        seen.append(browser.execute_script("return document.activeElement.id"))
    assert seen == ["clear", "go", "output", "copy", "alt", "file"], seen
    browser.find_element(By.ID, "output").send_keys(Keys.ENTER)
    assert browser.execute_script("return document.activeElement.textContent") == ref["alternatives"][0]
    ActionChains(browser).send_keys(Keys.ARROW_DOWN).perform()
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    assert output(browser) == ref["alternatives"][1]
    assert browser.execute_script("return document.activeElement.id") == "output"
    ActionChains(browser).key_down(Keys.ALT).key_down(Keys.SHIFT).send_keys("a").key_up(Keys.SHIFT).key_up(Keys.ALT).perform()
    assert browser.find_element(By.ID, "alts").is_displayed()
    ActionChains(browser).send_keys(Keys.ESCAPE).perform()
    assert not browser.find_element(By.ID, "alts").is_displayed()
    # Alt+Shift+S swaps
    ActionChains(browser).key_down(Keys.ALT).key_down(Keys.SHIFT).send_keys("s").key_up(Keys.SHIFT).key_up(Keys.ALT).perform()
    assert Select(browser.find_element(By.ID, "source")).first_selected_option.get_attribute("value") == "de"
    assert box.get_attribute("value") == ref["alternatives"][1]
    # every control has an accessible name; the translation is a live region
    names = browser.execute_script("""
      return arguments[0].map(id => { const e = document.getElementById(id);
        const lab = e.labels && e.labels.length ? e.labels[0].textContent.trim() : '';
        const by = e.getAttribute('aria-labelledby');
        return [id, e.getAttribute('aria-label') || lab || (by && document.getElementById(by).textContent) ||
                    e.textContent.trim()]; });""", CONTROLS)
    assert all(n for _, n in names), names
    assert browser.find_element(By.ID, "output").get_attribute("aria-live") == "polite"


def test_desktop_screenshot(server, browser):
    """The desktop layout: two panes side by side; the screenshot in docs/serving.md."""
    wait = open_page(browser, server, source="auto")
    text = "A man is riding a bicycle down the street. A dog runs through the park."
    type_text(browser, text)
    ref = lt(server, text, source="auto", alternatives=ALTS)
    wait.until(lambda d: output(d) == ref["translatedText"])
    settle(browser, wait)
    y_in, y_out = browser.execute_script("return ['input','output'].map(i => "
                                         "document.getElementById(i).getBoundingClientRect().top)")
    assert y_in == y_out
    browser.find_element(By.ID, "output").click()
    if SHOTS:
        browser.save_screenshot(os.path.join(ROOT, "docs", "img", "page-desktop.png"))


CONTRAST_JS = """
function lum(c) {
  const m = c.match(/[\\d.]+/g).map(Number);
  const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  return [0.2126 * f(m[0]) + 0.7152 * f(m[1]) + 0.0722 * f(m[2]), m.length > 3 ? m[3] : 1];
}
function bg(e) {
  for (; e; e = e.parentElement) {
    const c = getComputedStyle(e).backgroundColor;
    if (lum(c)[1] > 0) return c;
  }
  return 'rgb(255, 255, 255)';
}
const out = [];
for (const e of document.querySelectorAll('body *')) {
  if (!e.offsetParent && e.tagName !== 'BODY') continue;
  if (e.disabled || e.closest('.sr-only')) continue;
  const own = Array.from(e.childNodes).some(n => n.nodeType === 3 && n.textContent.trim());
  if (!own && !['INPUT', 'SELECT', 'TEXTAREA'].includes(e.tagName)) continue;
  const s = getComputedStyle(e);
  const a = lum(s.color)[0], b = lum(bg(e))[0];
  const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  const large = parseFloat(s.fontSize) >= 24 || (parseFloat(s.fontSize) >= 18.66 && parseInt(s.fontWeight) >= 700);
  out.push([e.id || e.tagName + ':' + e.textContent.trim().slice(0, 30), ratio, large ? 3 : 4.5]);
}
return out;
"""


def test_contrast(server, browser):
    """An axe-like check of WCAG AA text contrast: every visible element with text (enabled
    controls, the translation, the alternatives, the options panel opened) against its background."""
    wait = open_page(browser, server)
    type_text(browser, "A man is riding a bicycle.")
    wait.until(lambda d: output(d) != "" and not d.execute_script("return tern.ctrl"))
    browser.find_element(By.ID, "alt").click()
    browser.find_element(By.ID, "more-summary").click()
    browser.find_element(By.ID, "keys-summary").click()
    rows = browser.execute_script(CONTRAST_JS)
    assert len(rows) > 30
    print("contrast: %d elements, lowest %.2f (%s)" % (len(rows), *min((r, w) for w, r, _ in rows)))
    low = [(what, round(r, 2), need) for what, r, need in rows if r < need]
    assert not low, low
