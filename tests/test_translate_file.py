"""LibreTranslate's POST /translate_file and GET /download_file (issue 31 point 3; src/serve/docfile.h
states the rules). The peers: python-docx and odfpy build the documents and read the translated
ones back; the server's own POST /translate (format "text" or "html") is the reference for every
text. (libretranslatepy, LibreTranslate's Python client, has no file call: translate, detect and
languages only.)

- .txt and .html: the downloaded file is byte for byte /translate's translatedText of the whole
  file (format text: one output line per input line; format html), a byte order mark kept.
- .docx: each paragraph's text (python-docx's paragraph.text, body and table cells) equals
  /translate (format html) of the paragraph written as HTML from its runs (the main formatting
  bare, a bold run <b>, italic <i>, any other <span>), tags removed; and the formatting comes
  back where /translate put the tags: the translated paragraph's runs, merged by formatting, are
  exactly /translate's output cut at its tags ("A man rides a <b>red</b> bicycle." gives a bold run
  holding the words /translate's <b> holds). Every other zip member is byte-identical, with its
  compression method.
- .odt: the same with odfpy: text:p and text:h, text:span's style names as the inline tags;
  mimetype first and stored, every other member but content.xml byte-identical.
- every bad input gets its 400/413 and its message (file, line), and the server keeps serving.
- downloads: Content-Type and Content-Disposition, at most --max-files kept, the directory
  removed at shutdown.
"""
import html
import io
import json
import os
import re
import subprocess
import sys
import urllib.parse
import zipfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tools"))
from serve_util import MODEL, TERN, Server  # noqa: E402

docx = pytest.importorskip("docx", reason="python-docx (tests/requirements.txt) is not installed")
odf_opendocument = pytest.importorskip("odf.opendocument", reason="odfpy (tests/requirements.txt) is not installed")
from odf import style as odf_style, teletype, text as odf_text  # noqa: E402
from odf.namespaces import TEXTNS  # noqa: E402

BOUNDARY = "----ternfile"
SENTENCES = ["A man rides a red bicycle.", "Two dogs play in the snow.", "A woman is reading a book in the park.",
             "A child is eating an apple.", "Three people are walking on the beach."]


def multipart(fields, filename=None, data=b"", boundary=BOUNDARY):
    out = b""
    for k, v in fields.items():
        out += f"--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n".encode()
    if filename is not None:
        out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n"
                "Content-Type: application/octet-stream\r\n\r\n").encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


def upload(server, filename, data, source="en", target="de", **extra):
    body = multipart({"source": source, "target": target, **extra}, filename, data)
    st, _, raw = server.request("POST", "/translate_file", body,
                                {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
    return st, json.loads(raw)


def translate_file(server, filename, data):
    st, j = upload(server, filename, data)
    assert st == 200, j
    url = urllib.parse.urlsplit(j["translatedFileUrl"])
    assert url.scheme == "http" and url.netloc == f"127.0.0.1:{server.port}", j
    m = re.fullmatch(r"/download_file/([0-9a-f]{32})\.(.+)", url.path)
    assert m, j
    st, hdrs, out = server.request("GET", url.path)
    assert st == 200, out
    assert hdrs["Content-Disposition"] == f'attachment; filename="{m.group(2)}"'
    return out, hdrs, m.group(2)


def lt(server, q, fmt):
    st, j, _ = server.json("POST", "/translate", {"q": q, "source": "en", "target": "de", "format": fmt})
    assert st == 200, j
    return j["translatedText"]


def chunks_of_html(s, base):
    """/translate's HTML output cut at its tags: [(text, format)], format the tag's id or base;
    adjacent chunks of one format merged, empty ones dropped."""
    out, stack = [], []
    for m in re.finditer(r"<(/?)(\w+)([^>]*)>|([^<]+)", s):
        if m.group(4) is not None:
            out.append((html.unescape(m.group(4)), stack[-1] if stack else base))
        elif m.group(1):
            stack.pop()
        else:
            stack.append(re.search(r'id="([^"]*)"', m.group(3)).group(1))
    return merge(out)


def merge(chunks):
    out = []
    for t, f in chunks:
        if not t:
            continue
        if out and out[-1][1] == f:
            out[-1] = (out[-1][0] + t, f)
        else:
            out.append((t, f))
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tf")
    s = Server(tmp, env={"TMPDIR": str(tmp)})
    yield s
    assert s.stop() == 0
    assert not [p for p in os.listdir(tmp) if p.startswith("tern-serve-")], "the files' directory was not removed"


def test_settings(server):
    st, j, _ = server.json("GET", "/frontend/settings")
    assert st == 200 and j["filesTranslation"] is True
    assert j["supportedFilesFormat"] == [".txt", ".html", ".docx", ".odt"]


def test_txt_and_html(server):
    text = "\n".join(SENTENCES[:2]) + "\n\n" + " ".join(SENTENCES[2:]) + "\n"
    out, hdrs, name = translate_file(server, "my notes.txt", text.encode())
    assert name == "my_notes.txt" and hdrs["Content-Type"] == "text/plain; charset=utf-8"
    assert out.decode() == lt(server, text, "text")
    assert out.decode().count("\n") == text.count("\n")
    st, j = upload(server, "auto.txt", text.encode(), source="auto")  # detected as /translate detects
    assert st == 200, j
    st, _, got = server.request("GET", urllib.parse.urlsplit(j["translatedFileUrl"]).path)
    st2, want, _ = server.json("POST", "/translate", {"q": text, "source": "auto", "target": "de"})
    assert st == st2 == 200 and want["detectedLanguage"]["language"] == "en" and got.decode() == want["translatedText"]
    out, _, _ = translate_file(server, "bom.txt", b"\xef\xbb\xbf" + text.encode())  # byte order mark kept
    assert out == b"\xef\xbb\xbf" + lt(server, text, "text").encode()
    page = (f"<!DOCTYPE html><html><head><title>{SENTENCES[0]}</title><style>p {{ x: 1 }}</style></head>"
            f"<body><h1>{SENTENCES[1]}</h1><p>A man rides a <b>red</b> bicycle. {SENTENCES[3]}</p>"
            f"<ul><li>{SENTENCES[4]}</li></ul></body></html>\n")
    out, hdrs, name = translate_file(server, "Page.HTML", page.encode())
    assert name == "Page.HTML" and hdrs["Content-Type"] == "text/html; charset=utf-8"
    assert out.decode() == lt(server, page, "html")


def run_format(r):
    f = r.font
    return (bool(r.bold), bool(r.italic), bool(r.underline), str(f.color.rgb) if f.color and f.color.type else None,
            f.size)


def docx_html(paragraph):
    """The paragraph as docfile.c writes it: the main formatting (most characters) bare, others
    as <b>/<i>/<span id=...>; the id is the formatting (for chunks_of_html)."""
    runs = [(r.text, run_format(r)) for r in paragraph.runs]
    count = {}
    for t, f in runs:
        count[f] = count.get(f, 0) + len(t)
    base = max(count, key=lambda f: count[f]) if count else None  # first of the largest (dicts keep order)
    out = ""
    for t, f in merge(runs):
        if f == base:
            out += html.escape(t, quote=False)
        else:
            tag = "b" if f == (True, False, False, None, None) else "i" if f == (False, True, False, None, None) \
                else "span"
            out += f'<{tag} id="{FORMATS.index(f)}">{html.escape(t, quote=False)}</{tag}>'
    return out, base


FORMATS = []


def fmt_id(f):
    if f not in FORMATS:
        FORMATS.append(f)
    return str(FORMATS.index(f))


def make_docx():
    d = docx.Document()
    d.add_heading(SENTENCES[4], level=1)
    p = d.add_paragraph("A man rides a ")
    p.add_run("red").bold = True
    p.add_run(" bicycle.")
    p = d.add_paragraph("Two dogs ")
    p.add_run("play in the snow").italic = True
    p.add_run(". A woman is ")
    r = p.add_run("reading a book")
    r.font.color.rgb = docx.shared.RGBColor(0xC0, 0, 0)
    r.font.size = docx.shared.Pt(14)
    p.add_run(" in the park.")
    d.add_paragraph("")
    d.add_paragraph(SENTENCES[3] + " " + SENTENCES[1])
    t = d.add_table(rows=1, cols=2)
    t.cell(0, 0).text = SENTENCES[2]
    t.cell(0, 1).text = SENTENCES[0]
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


def all_paragraphs(d):
    out = list(d.paragraphs)
    for t in d.tables:
        for row in t.rows:
            for c in row.cells:
                out.extend(c.paragraphs)
    return out


def same_members(a, b, translated):
    za, zb = zipfile.ZipFile(io.BytesIO(a)), zipfile.ZipFile(io.BytesIO(b))
    assert [i.filename for i in za.infolist()] == [i.filename for i in zb.infolist()]
    for ia, ib in zip(za.infolist(), zb.infolist()):
        assert ia.compress_type == ib.compress_type, ia.filename
        if ia.filename != translated:
            assert za.read(ia) == zb.read(ib), ia.filename
    return za, zb


def test_docx(server):
    src = make_docx()
    out, hdrs, name = translate_file(server, "report.docx", src)
    assert hdrs["Content-Type"] == "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    same_members(src, out, "word/document.xml")
    din, dout = docx.Document(io.BytesIO(src)), docx.Document(io.BytesIO(out))
    pin, pout = all_paragraphs(din), all_paragraphs(dout)
    assert len(pin) == len(pout) == 7
    bold_checked = 0
    for a, b in zip(pin, pout):
        assert a.style.name == b.style.name
        if not a.text.strip():
            assert b.text == a.text
            continue
        for r in a.runs:
            fmt_id(run_format(r))
        item, base = docx_html(a)
        want = lt(server, item, "html")
        assert b.text == html.unescape(re.sub(r"<[^>]+>", "", want)), (a.text, want)
        got = merge([(r.text, fmt_id(run_format(r))) for r in b.runs])
        assert got == chunks_of_html(want, fmt_id(base)), (item, want)
        if a.text == "A man rides a red bicycle." and any(r.bold for r in a.runs):
            assert [r.text for r in b.runs if r.bold] == [re.search(r"<b[^>]*>(.*?)</b>", want).group(1)]
            assert len([r for r in b.runs if r.bold]) == 1
            bold_checked += 1
    assert bold_checked == 1


def make_odt():
    doc = odf_opendocument.OpenDocumentText()
    bold = odf_style.Style(name="T1", family="text")
    bold.addElement(odf_style.TextProperties(fontweight="bold"))
    ital = odf_style.Style(name="T2", family="text")
    ital.addElement(odf_style.TextProperties(fontstyle="italic"))
    doc.automaticstyles.addElement(bold)
    doc.automaticstyles.addElement(ital)
    doc.text.addElement(odf_text.H(outlinelevel=1, text=SENTENCES[4]))
    p = odf_text.P(text="A man rides a ")
    p.addElement(odf_text.Span(stylename=bold, text="red"))
    p.addText(" bicycle.")
    doc.text.addElement(p)
    p = odf_text.P(text="Two dogs ")
    p.addElement(odf_text.Span(stylename=ital, text="play in the snow"))
    p.addText(". " + SENTENCES[2])
    doc.text.addElement(p)
    doc.text.addElement(odf_text.P(text=SENTENCES[3]))
    buf = io.BytesIO()
    doc.write(buf)
    return buf.getvalue()


def odt_chunks(p):
    """[(text, style name or None)] of a text:p/text:h with spans (odfpy)."""
    out = []

    def walk(node, style):
        for c in node.childNodes:
            if c.nodeType == c.TEXT_NODE:
                out.append((str(c.data), style))
            elif c.qname == (TEXTNS, "span"):
                walk(c, c.getAttribute("stylename"))
            else:
                out.append((teletype.extractText(c), style))
    walk(p, None)
    return merge(out)


def test_odt(server):
    src = make_odt()
    out, hdrs, _ = translate_file(server, "letter.odt", src)
    assert hdrs["Content-Type"] == "application/vnd.oasis.opendocument.text"
    _, zb = same_members(src, out, "content.xml")
    first = zb.infolist()[0]
    assert first.filename == "mimetype" and first.compress_type == zipfile.ZIP_STORED
    din, dout = odf_opendocument.load(io.BytesIO(src)), odf_opendocument.load(io.BytesIO(out))
    pin = din.text.getElementsByType(odf_text.P) + din.text.getElementsByType(odf_text.H)
    pout = dout.text.getElementsByType(odf_text.P) + dout.text.getElementsByType(odf_text.H)
    assert len(pin) == len(pout) == 4
    for a, b in zip(pin, pout):
        chunks = odt_chunks(a)
        count = {}
        for t, s in chunks:
            count[s] = count.get(s, 0) + len(t)
        base = max(count, key=lambda s: count[s])
        item = "".join(html.escape(t, quote=False) if s == base else f'<span id="{s}">{html.escape(t, quote=False)}</span>'
                       for t, s in chunks)
        want = lt(server, item, "html")
        assert teletype.extractText(b) == html.unescape(re.sub(r"<[^>]+>", "", want))
        assert odt_chunks(b) == chunks_of_html(want, base), (item, want)
        if teletype.extractText(a) == "A man rides a red bicycle." and len(odt_chunks(a)) == 3:
            assert [t for t, s in odt_chunks(b) if s == "T1"] == [re.search(r"<span[^>]*>(.*?)</span>", want).group(1)]


def zip_bytes(members, compression=zipfile.ZIP_DEFLATED):
    import warnings
    warnings.simplefilter("ignore", UserWarning)  # a duplicate name, on purpose
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as z:
        for name, data in members:
            z.writestr(name, data)
    return buf.getvalue()


W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def test_bad_inputs(server):
    good_doc = f'<?xml version="1.0" encoding="UTF-8"?>\n<w:document {W}>\n<w:body>\n'
    cases = [
        ("a.pdf", b"%PDF-1.4", 400, "a.pdf: unsupported file format (supported: .txt, .html, .docx, .odt)"),
        ("noext", b"x", 400, "noext: unsupported file format"),
        ("a.docx", b"this is not a zip", 400, "a.docx: not a zip archive"),
        ("a.docx", zip_bytes([("content.xml", b"<x/>")]), 400, "a.docx: no word/document.xml in the archive"),
        ("a.odt", zip_bytes([("word/document.xml", b"<x/>")]), 400, "a.odt: no content.xml in the archive"),
        ("a.docx", zip_bytes([("word/document.xml", (good_doc + "<w:p><w:r><w:t>x</w:t></w:r>\n</w:body>").encode())]),
         400, "a.docx: word/document.xml: malformed XML at line 5"),
        ("a.docx", zip_bytes([("word/document.xml", (good_doc + "<w:p><w:r><w:t>").encode() + b"caf\xe9</w:t>")]),
         400, "a.docx: word/document.xml: not valid UTF-8 text at line 4"),
        ("a.docx", zip_bytes([("word/document.xml", b"")]), 400, "a.docx: word/document.xml: malformed XML at line"),
        ("a.txt", b"One line.\nTwo.\nthr\xffee\n", 400, "a.txt: not valid UTF-8 at line 3 (byte 18)"),
        ("a.txt", b"One line.\n\x00", 400, "a.txt: a NUL byte at line 2 (byte 10)"),
        ("a.html", b"<p>\xc3</p>", 400, "a.html: not valid UTF-8 at line 1"),
        ("empty.txt", b"", 400, "empty.txt: the file is empty"),
        ("dup.docx", zip_bytes([("word/document.xml", b"<x/>"), ("word/document.xml", b"<y/>")]), 400,
         "dup.docx: the archive has two members named word/document.xml"),
    ]
    for name, data, status, msg in cases:
        st, j = upload(server, name, data)
        assert st == status and j["error"].startswith("Invalid request: " + msg), (name, j)
    st, j = upload(server, "a.txt", b"Hello.", target="xx")
    assert st == 400 and "xx" in j["error"]
    st, j = upload(server, "a.txt", b"Hello.", target="")
    assert st == 400 and j["error"] == "Invalid request: missing target parameter"
    st, _, raw = server.request("POST", "/translate_file", multipart({"source": "en", "target": "de"}),
                                {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
    assert st == 400 and json.loads(raw)["error"].startswith("Invalid request: missing file parameter")
    nameless = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"source\"\r\n\r\nen\r\n"
                f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"target\"\r\n\r\nde\r\n"
                f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nHello.\r\n--{BOUNDARY}--\r\n")
    st, _, raw = server.request("POST", "/translate_file", nameless.encode(),
                                {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
    assert st == 400 and json.loads(raw)["error"] == ("Invalid request: the file field has no file name (send it as "
                                                      "a file upload)")
    st, _, raw = server.request("GET", "/translate_file")
    assert st == 405
    st, _, raw = server.request("GET", "/download_file/" + "0" * 32 + ".a.txt")
    assert st == 404 and "no such translated file" in json.loads(raw)["error"]
    st, _, raw = server.request("GET", "/download_file/../../etc/passwd")
    assert st == 404
    st, _, _ = server.request("GET", "/health")
    assert st == 200


def test_limits(tmp_path):
    s = Server(tmp_path, "--max-file-size", "200000", "--max-unzipped", "1000000", "--max-zip-entries", "20",
               "--char-limit", "120", "--max-files", "2", env={"TMPDIR": str(tmp_path)})
    try:
        st, j = upload(s, "big.txt", b"a" * 250000)
        assert st == 413 and j["error"] == "File too large (limit 200000 bytes: --max-file-size)"
        bomb = zip_bytes([("word/document.xml", b"<x/>"), ("zeros.bin", b"\0" * 5_000_000)])
        assert len(bomb) < 200000
        st, j = upload(s, "bomb.docx", bomb)
        assert st == 413 and j["error"] == ("Invalid request: bomb.docx: zeros.bin: the archive's members hold more "
                                            "than 1000000 bytes once uncompressed"), j
        many = zip_bytes([(f"f{i}.xml", b"<x/>") for i in range(25)])
        st, j = upload(s, "many.odt", many)
        assert st == 413 and j["error"] == "Invalid request: many.odt: the archive has 25 entries, more than the limit of 20"
        st, j = upload(s, "long.txt", (" ".join(SENTENCES)).encode())
        assert st == 400 and j["error"] == (f"Invalid request: long.txt: its text ({len(' '.join(SENTENCES))} "
                                            "characters) exceeds text limit (120)")
        urls = []
        for i in range(3):
            st, j = upload(s, f"f{i}.txt", SENTENCES[i].encode())
            assert st == 200, j
            urls.append(urllib.parse.urlsplit(j["translatedFileUrl"]).path)
        assert [s.request("GET", u)[0] for u in urls] == [404, 200, 200]  # --max-files 2: the oldest went
        assert len([p for p in os.listdir(tmp_path) if p.startswith("tern-serve-")]) == 1
    finally:
        assert s.stop() == 0
    assert not [p for p in os.listdir(tmp_path) if p.startswith("tern-serve-")]


def test_cli_file_format(server, tmp_path):
    """`tern translate --file-format` runs the same code (docfile.c) with the same translations:
    each document byte for byte the server's (sentences split as the server splits them)."""
    docs = {"report.docx": make_docx(), "letter.odt": make_odt(),
            "notes.txt": ("\n".join(SENTENCES[:3]) + "\n\n" + " ".join(SENTENCES[3:]) + "\n").encode(),
            "page.html": f"<html><body><p>A man rides a <b>red</b> bicycle. {SENTENCES[1]}</p></body></html>".encode()}
    for name, data in docs.items():
        src = tmp_path / name
        src.write_bytes(data)
        out = tmp_path / ("out-" + name)
        fmt = name.rsplit(".", 1)[1] if name != "page.html" else "auto"
        r = subprocess.run([TERN, "translate", "-m", MODEL, "-q", "--split-sentences=en", "--file-format", fmt,
                            str(src), str(out)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        want, _, _ = translate_file(server, name, data)
        assert out.read_bytes() == want, name
    # errors name the file and what is wrong
    bad = tmp_path / "bad.docx"
    bad.write_bytes(b"not a zip")
    r = subprocess.run([TERN, "translate", "-m", MODEL, "-q", "--file-format", "docx", str(bad), str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and f"tern translate: {bad}: bad input: not a zip archive" in r.stderr, r.stderr
    r = subprocess.run([TERN, "translate", "-m", MODEL, "--file-format", "pdf", str(bad)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--file-format is txt, html, docx, odt or auto, got 'pdf'" in r.stderr
    r = subprocess.run([TERN, "translate", "-m", MODEL, "--file-format", "auto", str(tmp_path / "x.pdf")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "has no extension .txt, .html, .docx or .odt" in r.stderr


def test_docx_kept_parts(server):
    """What docfile.h says is kept: a tab inside a paragraph stays a tab between the translations of
    its two sides; a paragraph holding a hyperlink is copied unchanged; bookmarks stay."""
    import xml.etree.ElementTree as ET
    ns = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    body = ('<w:p><w:r><w:t>A man rides a red bicycle.</w:t><w:tab/><w:t>Two dogs play.</w:t></w:r></w:p>'
            '<w:p><w:hyperlink r:id="rId9"><w:r><w:t>A link stays as it is.</w:t></w:r></w:hyperlink></w:p>'
            '<w:p><w:bookmarkStart w:id="0" w:name="here"/><w:r><w:t>A child is eating an apple.</w:t></w:r>'
            '<w:bookmarkEnd w:id="0"/></w:p>')
    xml = (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document {W} '
           'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">'
           f'<w:body>{body}</w:body></w:document>')
    src = zip_bytes([("[Content_Types].xml", b"<Types/>"), ("word/document.xml", xml.encode())])
    out, _, _ = translate_file(server, "raw.docx", src)
    same_members(src, out, "word/document.xml")
    root = ET.fromstring(zipfile.ZipFile(io.BytesIO(out)).read("word/document.xml"))
    paras = root.findall(f".//{{{ns}}}p")

    def text(p):
        return "".join(e.text or "" if e.tag == f"{{{ns}}}t" else "\t" for e in p.iter()
                       if e.tag in (f"{{{ns}}}t", f"{{{ns}}}tab"))
    want = lt(server, "A man rides a red bicycle.<tab/>Two dogs play.", "html")
    assert "<tab/>" in want and text(paras[0]) == html.unescape(want.replace("<tab/>", "\t"))
    assert text(paras[1]) == "A link stays as it is." and paras[1].find(f"{{{ns}}}hyperlink") is not None
    assert text(paras[2]) == lt(server, "A child is eating an apple.", "html")
    assert [c.tag.split("}")[1] for c in paras[2]] == ["bookmarkStart", "r", "bookmarkEnd"]
