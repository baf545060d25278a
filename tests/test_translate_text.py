"""`tern translate` on raw text, its formats, its streaming and its handling of bad input.

The peer is the pipeline an engineer runs today: Python SentencePiece to encode, ctranslate2 to
translate, SentencePiece to decode, on a random-weight model whose vocabulary is a SentencePiece
model trained here on Multi30k. Tern must produce the very same strings.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peer"))
sys.path.insert(0, os.path.join(HERE, "tools"))
ctranslate2 = pytest.importorskip("ctranslate2")
spm = pytest.importorskip("sentencepiece")
import make_models  # noqa: E402
from testutil import stderr_on_pty  # noqa: E402

TERN = os.environ.get("TERN_BIN", os.path.join(os.path.dirname(HERE), "build", "tern"))


def run(args, stdin=None, check=True):
    r = subprocess.run([TERN] + args, input=stdin, capture_output=True, timeout=600)
    if check:
        assert r.returncode == 0, f"tern {' '.join(args)} failed:\n{r.stderr.decode(errors='replace')}"
    return r


@pytest.fixture(scope="module")
def sources(data_dir):
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f][:200]
    # Edge cases SentencePiece must see as the peer does: leading/trailing/multiple spaces, tabs,
    # non-ASCII letters, characters outside the vocabulary.
    lines += ["  A  man   in a  hat. ", "\tZwei Männer ", "Ünïcödé — “quotes” 日本語", "a"]
    return lines


def peer_translate(m, lines, **kw):
    toks = [m["sp"].encode(s, out_type=str) for s in lines]
    keep = [i for i, t in enumerate(toks) if t]
    res = m["ct2"].translate_batch([toks[i] for i in keep], max_batch_size=32, **kw)
    out = [""] * len(lines)
    for i, r in zip(keep, res):
        out[i] = m["sp"].decode(r.hypotheses[0])
    return out


@pytest.mark.parametrize("beam", [1, 4])
def test_raw_text_matches_sentencepiece_plus_ctranslate2(spm_model, sources, beam, tmp_path):
    src = tmp_path / "src.txt"
    src.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    ours = run(["translate", "-m", spm_model["dir"], "-b", str(beam), "-q", str(src)]).stdout.decode()
    ours = ours.split("\n")[:-1]
    want = peer_translate(spm_model, sources, beam_size=beam, length_penalty=0)
    assert len(ours) == len(sources)
    same = sum(a == b for a, b in zip(ours, want))
    print(f"\nraw text, beam {beam}: {same}/{len(sources)} identical")
    assert same == len(sources), [(s, a, b) for s, a, b in zip(sources, ours, want) if a != b][:3]


def test_one_line_out_per_line_in_with_bad_input(spm_model, sources, tmp_path):
    """Empty lines, invalid UTF-8, a NUL byte, CRLF endings and an over-long line: one output line
    each, in order, no crash, a warning naming the truncated line."""
    good = sources[:5]
    raw = b"".join(s.encode() + b"\n" for s in good[:2])
    raw += b"\n"                                    # line 3: empty
    raw += b"caf\xc3 \xff\xfe broken utf-8\n"        # line 4: invalid UTF-8
    raw += good[2].encode() + b"\r\n"               # line 5: CRLF
    raw += ("dog " * 3000).encode() + b"\n"         # line 6: over-long
    raw += b"\n\n"                                  # lines 7, 8: empty
    raw += good[3].encode()                         # line 9: no final newline
    src = tmp_path / "bad.txt"
    src.write_bytes(raw)
    r = run(["translate", "-m", spm_model["dir"], "-b", "2", "--max-input-length", "64", str(src)])
    out = r.stdout.decode("utf-8").split("\n")
    assert out[-1] == "" and len(out) - 1 == 9
    out = out[:-1]
    want = peer_translate(spm_model, [good[0], good[1], good[2], good[3]], beam_size=2, length_penalty=0)
    assert out[0] == want[0] and out[1] == want[1]
    assert out[2] == "" and out[6] == "" and out[7] == ""
    assert out[4] == want[2]          # CRLF stripped like LF
    assert out[8] == want[3]
    assert out[3] != ""               # invalid UTF-8 still translated (bytes replaced), not dropped
    err = r.stderr.decode()
    assert "line 6" in err and "truncated" in err
    # the truncated line translates as its first 64 pieces do
    pieces = spm_model["sp"].encode("dog " * 3000, out_type=str)[:64]
    res = spm_model["ct2"].translate_batch([pieces], beam_size=2, length_penalty=0)
    assert out[5] == spm_model["sp"].decode(res[0].hypotheses[0])


def test_nbest_format_and_scores(spm_model, sources, tmp_path):
    lines = sources[:30] + [""]
    src = tmp_path / "src.txt"
    src.write_text("".join(s + "\n" for s in lines), encoding="utf-8")
    out = run(["translate", "-m", spm_model["dir"], "-b", "4", "-n", "3", "-q", str(src)]).stdout.decode()
    rows = [r.split(" ||| ") for r in out.split("\n")[:-1]]
    assert len(rows) == 3 * len(lines)
    toks = [spm_model["sp"].encode(s, out_type=str) for s in lines[:30]]
    ref = spm_model["ct2"].translate_batch(toks, beam_size=4, num_hypotheses=3, length_penalty=0,
                                           return_scores=True)
    for i in range(len(lines)):
        group = rows[3 * i:3 * i + 3]
        assert [int(g[0]) for g in group] == [i, i, i]
        scores = [float(g[2]) for g in group]
        assert scores == sorted(scores, reverse=True)
        if i < 30:
            assert [g[1] for g in group] == [spm_model["sp"].decode(h) for h in ref[i].hypotheses]
            np.testing.assert_allclose(scores, ref[i].scores, atol=1e-4)
        else:
            assert [g[1] for g in group] == ["", "", ""]


def test_streaming_workers_and_batching_keep_order(spm_model, sources, tmp_path):
    """stdin -> stdout with tiny batches and read-ahead, two workers, gives exactly the output of
    one worker with default batching."""
    text = "".join(s + "\n" for s in sources * 3)
    base = run(["translate", "-m", spm_model["dir"], "-b", "2", "-q"], stdin=text.encode()).stdout
    alt = run(["translate", "-m", spm_model["dir"], "-b", "2", "-q", "-w", "2", "-t", "1",
               "--max-batch-tokens", "40", "--read-ahead", "1"], stdin=text.encode()).stdout
    assert base.count(b"\n") == len(sources) * 3
    assert alt == base


def test_tern_format_roundtrip(spm_model, sources, tmp_path):
    """`tern convert` writes Tern's safetensors format; it translates exactly as the CTranslate2
    directory it came from (float32), and int8/float16 conversions load and translate."""
    out_dir = tmp_path / "tern"
    run(["convert", "--from-ct2", spm_model["dir"], "-o", str(out_dir)])
    assert (out_dir / "model.safetensors").exists()
    info = run(["info", "-m", str(out_dir)]).stdout.decode()
    assert "format: tern" in info and "sentencepiece: yes" in info
    src = tmp_path / "src.txt"
    src.write_text("".join(s + "\n" for s in sources[:60]), encoding="utf-8")
    a = run(["translate", "-m", spm_model["dir"], "-b", "4", "-q", str(src)]).stdout
    b = run(["translate", "-m", str(out_dir), "-b", "4", "-q", str(src)]).stdout
    assert a == b
    want = peer_translate(spm_model, sources[:60], beam_size=1, length_penalty=0)
    for q, min_agree in (("int8", 0.9), ("float16", 0.97)):
        qdir = tmp_path / q
        run(["convert", "--from-ct2", spm_model["dir"], "-o", str(qdir), "--quantize", q])
        got = run(["translate", "-m", str(qdir), "-b", "1", "-q", str(src)]).stdout.decode().split("\n")[:-1]
        rate = sum(x == y for x, y in zip(got, want)) / len(want)
        print(f"\n{q} Tern-format greedy agreement with float32 CT2: {rate:.3f}")
        assert len(got) == 60 and rate >= min_agree
    # a Tern directory converts too (e.g. quantizing a checkpoint): same tensors as from CT2
    q2 = tmp_path / "int8-from-tern"
    run(["convert", "--from", str(out_dir), "-o", str(q2), "--quantize", "int8"])
    a = run(["translate", "-m", str(q2), "-b", "4", "--scores", "-q", str(src)]).stdout
    b = run(["translate", "-m", str(tmp_path / "int8"), "-b", "4", "--scores", "-q", str(src)]).stdout
    assert a == b and a.count(b"\n") == 60


def test_errors_name_the_file(spm_model, tmp_path):
    r = run(["translate", "-m", str(tmp_path / "nope"), "-q"], stdin=b"a\n", check=False)
    assert r.returncode == 1 and str(tmp_path / "nope") in r.stderr.decode()
    bad = tmp_path / "trunc"
    bad.mkdir()
    for f in os.listdir(spm_model["dir"]):
        data = open(os.path.join(spm_model["dir"], f), "rb").read()
        if f == "model.bin":
            data = data[: len(data) // 2]
        (bad / f).write_bytes(data)
    r = run(["translate", "-m", str(bad), "-q"], stdin=b"a\n", check=False)
    err = r.stderr.decode()
    assert r.returncode == 1 and "model.bin" in err, err
    r = run(["translate", "-m", spm_model["dir"], "-b", "0"], stdin=b"a\n", check=False)
    assert r.returncode == 2 and "--beam-size" in r.stderr.decode()
    r = run(["translate", "-m", spm_model["dir"], str(tmp_path / "missing.txt")], check=False)
    assert r.returncode == 1 and "missing.txt" in r.stderr.decode()


def test_progress_on_a_terminal_only(spm_model, sources, tmp_path):
    """Translating a file shows progress (sentences, tokens/s) when stderr is a terminal, and
    nothing when it is not."""
    src = tmp_path / "src.txt"
    src.write_text("".join(s + "\n" for s in sources[:50]), encoding="utf-8")
    out = tmp_path / "out.txt"
    rc, shown = stderr_on_pty([TERN, "translate", "-m", spm_model["dir"], "-b", "1", src, out])
    assert rc == 0
    assert "50 sentences" in shown and "tokens/s" in shown, shown
    assert len(out.read_text(encoding="utf-8").split("\n")) == 51
    quiet = run(["translate", "-m", spm_model["dir"], "-b", "1", str(src), str(out)])
    assert b"tokens/s" not in quiet.stderr
