"""tern translate --no-sort (tern_request_t.no_sort; docs/translate.md): batches cut from consecutive
input lines in the input's order instead of from the lines sorted by length, under the same
--max-batch-size and --max-batch-tokens (a batch's padded width its longest line), no continuous
batching; the output is the same, byte for byte (each sentence's rows are computed independently of
the others: tests/test_continuous.py). Inputs: 300 Multi30k lines (test_2016_flickr) with an empty
line, one-token lines and long joined lines among them.

The batches are observed through TERN_BATCH_LOG=1 (src/batch/stream.c: each batch as cut, "tern:
batch: lines L1,L2,... width W" on stderr): unsorted, they are consecutive runs of lines, each as
long as the cap and the budget allow (recomputed here from each line's length); sorted (with
TERN_CONTINUOUS=0, fixed batches), widths never grow. The C API's no_sort (the order of the result
callbacks, tern_translate()'s path) is tested in tests/c/test_api_callbacks.c; Python's no_sort here.
--batch-beams off (each hypothesis its own forward: bench/bench_sdl.py's unbatched baseline) gives
the same output too."""
import os
import re
import resource
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "en-de")
TERN = os.environ.get("TERN_BIN", os.path.join(ROOT, "build", "tern"))
BATCH = re.compile(r"^tern: batch: lines ([0-9,]+) width (\d+)$", re.M)


@pytest.fixture(scope="module")
def src(tmp_path_factory, data_dir):
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        lines = [next(f).rstrip("\n") for _ in range(300)]
    out = []
    for i, s in enumerate(lines):
        if i == 40:
            out.append("")  # empty: no decoding, an empty line out
        if i % 37 == 3:
            out.append("Hello")  # one token (and the end token)
        if i % 11 == 0 and i + 2 < len(lines):
            s = " ".join(lines[i:i + 3])  # long lines among short ones
        out.append(s)
    p = tmp_path_factory.mktemp("nosort") / "src.en"
    p.write_text("\n".join(out) + "\n", encoding="utf-8")
    return p


def translate(src, args, env=None):
    e = {**os.environ, "TERN_BATCH_LOG": "1", **(env or {})}
    r = subprocess.run([TERN, "translate", "-m", MODEL, "-q", "-t", "1", *args, str(src)], capture_output=True, env=e,
                       timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    batches = [([int(x) for x in lines.split(",")], int(w)) for lines, w in BATCH.findall(r.stderr.decode())]
    return r.stdout, batches


@pytest.fixture(scope="module")
def lengths(src):
    """Each line's source length (at least 1: the width an empty line counts for), from the
    one-line batches of --no-sort --max-batch-size 1."""
    _, batches = translate(src, ["-b", "1", "--max-batch-size", "1", "--no-sort", "--max-decoding-length", "1"])
    assert [b[0] for b in batches] == [[i + 1] for i in range(len(batches))]
    n = len(src.read_text(encoding="utf-8").split("\n")) - 1
    assert len(batches) == n == 310
    return [w for _, w in batches]


def expected_cut(lengths, mbs, mbt, read_ahead=16):
    """Consecutive runs of lines, each as long as the cap (mbs, 0: none) and the budget (mbt: lines x
    the run's longest line) allow, a line alone always a batch; batches do not cross the chunks
    read ahead (lines read until they hold read_ahead x mbt tokens)."""
    out, cur, w, chunk = [], [], 0, 0
    for i, n in enumerate(lengths, 1):
        if cur and ((mbs and len(cur) == mbs) or (len(cur) + 1) * max(w, n) > mbt or chunk == 0):
            out.append((cur, w))
            cur, w = [], 0
        cur.append(i)
        w = max(w, n)
        chunk += n
        if chunk >= read_ahead * mbt:
            chunk = 0
    return out + [(cur, w)]


@pytest.mark.parametrize("beam", [1, 4])
def test_no_sort_same_output(src, lengths, beam):
    ref, _ = translate(src, ["-b", str(beam)])  # sorted, continuous batching (the default)
    assert ref.count(b"\n") == len(lengths) and len(ref) > 10000
    for mbs, mbt in ((1, 4096), (3, 4096), (7, 4096), (0, 60)):
        out, batches = translate(src, ["-b", str(beam), "--no-sort", "--max-batch-size", str(mbs),
                                       "--max-batch-tokens", str(mbt)])
        assert out == ref, (beam, mbs, mbt)
        assert batches == expected_cut(lengths, mbs, mbt), (mbs, mbt)
        if mbs:
            assert len(batches) == {1: 310, 3: 104, 7: 45}[mbs]
        else:  # the budget alone cuts: batches of several lines and of one (a long line)
            assert {1, 2, 3} <= {len(b) for b, _ in batches}, batches


def test_sorted_batches_are_not_in_order(src, lengths):
    """The log tells the two apart: sorted fixed batches take the longest lines first."""
    out, batches = translate(src, ["-b", "1", "--max-batch-size", "7"], env={"TERN_CONTINUOUS": "0"})
    widths = [w for _, w in batches]
    assert widths == sorted(widths, reverse=True) and widths[0] == max(lengths)
    assert batches[0][0] != list(range(1, 8))
    assert sorted(i for b, _ in batches for i in b) == list(range(1, len(lengths) + 1))
    unsorted, _ = translate(src, ["-b", "1", "--max-batch-size", "7", "--no-sort"])
    assert out == unsorted


def test_no_sort_refuses_a_value():
    r = subprocess.run([TERN, "translate", "-m", MODEL, "--no-sort=1"], input=b"A man.\n", capture_output=True,
                       timeout=60)
    assert r.returncode == 2
    assert b"'--no-sort' doesn't allow an argument" in r.stderr and b"see tern translate --help" in r.stderr


@pytest.fixture(scope="module")
def tern(tern_python):
    return tern_python  # tests/conftest.py: built once per session


def test_python_no_sort(tern, src, lengths, tmp_path):
    """Translator.translate_batch(no_sort=True) (tern_translate()'s path) and translate_file(raw_text=True,
    no_sort=True) (the stream's): the same results (and with beams_apart=True); the greedy token callback's first event of each
    input, one input a batch, comes in the input's order (sorted: the longest input first)."""
    lines = src.read_text(encoding="utf-8").split("\n")[:120]
    tr = tern.Translator(MODEL, intra_threads=1)
    for beam in (1, 4):
        ref = [(r.hypotheses, r.scores) for r in tr.translate_batch(lines, beam_size=beam, max_batch_size=7,
                                                                    return_scores=True)]
        got = [(r.hypotheses, r.scores) for r in tr.translate_batch(lines, beam_size=beam, max_batch_size=7,
                                                                    return_scores=True, no_sort=True)]
        apart = [(r.hypotheses, r.scores) for r in tr.translate_batch(lines[:40], beam_size=beam, max_batch_size=7,
                                                                      return_scores=True, beams_apart=True)]
        assert got == ref and apart == ref[:40], beam
    first = {True: [], False: []}
    for no_sort in (True, False):
        seen = first[no_sort]
        tr.translate_batch(lines, beam_size=1, max_batch_size=1, no_sort=no_sort,
                           callback=lambda s: None if s.batch_id in seen else seen.append(s.batch_id))
    decoded = [i for i, s in enumerate(lines) if s.strip()]
    assert first[True] == decoded
    assert first[False] != decoded and sorted(first[False]) == decoded
    order = [lengths[i] for i in first[False]]  # sorted: source lengths never grow
    assert order == sorted(order, reverse=True) and order[0] == max(lengths[:120])
    with pytest.raises(TypeError, match="no_sort must be True or False"):
        tr.translate_batch(lines[:2], no_sort=2)
    with pytest.raises(TypeError, match="beams_apart must be True or False"):
        tr.translate_batch(lines[:2], beams_apart="yes")
    out_a, out_b = tmp_path / "a.de", tmp_path / "b.de"
    (tmp_path / "in.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    tr.translate_file(tmp_path / "in.en", out_a, raw_text=True, beam_size=4, max_batch_size=3)
    tr.translate_file(tmp_path / "in.en", out_b, raw_text=True, beam_size=4, max_batch_size=3, no_sort=True)
    assert out_a.read_bytes() == out_b.read_bytes() and out_a.read_bytes().count(b"\n") == 120


def cpu_seconds(args):
    """(stdout, stderr, child CPU seconds) of one tern translate."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([TERN, "translate", "-m", MODEL, "-t", "1", *args], capture_output=True, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout, r.stderr.decode(), after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


@pytest.mark.parametrize("ct", ["int8", "float32"])
def test_beams_apart_same_output(src, ct):
    """--batch-beams off (tern_request_t.beams_apart, model_family_t.set_rows_apart;
    bench/bench_sdl.py's "beams-apart", the SDL paper's unbatched baseline): the decoder step runs
    each row alone, one-row GEMMs; the same output byte for byte (n-best lists and scores; greedy:
    float32's screened projection), and it costs CPU time (measured at beam 8, one sentence a batch:
    1.85x int8, 2.9x float32; here at least 1.3x, a margin for a loaded machine)."""
    lines = str(src) + ".120"
    with open(src, encoding="utf-8") as f, open(lines, "w", encoding="utf-8") as g:
        g.write("".join(next(f) for _ in range(120)))
    for args in (["-b", "4", "-n", "2", "--scores", "--max-batch-size", "3"], ["-b", "1", "--max-batch-size", "5"]):
        args = ["--compute-type", ct, "-q", *args, lines]
        ref, _, _ = cpu_seconds(args)
        on, _, _ = cpu_seconds(["--batch-beams", "on", *args])
        got, _, _ = cpu_seconds(["--batch-beams", "off", *args])
        assert got == ref == on and len(ref) > 3000, (ct, args)
    args = ["--compute-type", ct, "-q", "-b", "8", "--max-batch-size", "1", lines]
    _, _, t1 = cpu_seconds(args)
    _, _, t0 = cpu_seconds(["--batch-beams", "off", *args])
    print(f"\n{ct} beam 8: {t1:.2f} s batched, {t0:.2f} s beams apart ({t0 / t1:.2f}x)")
    assert t0 > 1.3 * t1


def test_batch_beams_refused():
    """A bad value is a usage error (exit 2); an ensemble cannot run its rows apart (exit 1, named)."""
    r = subprocess.run([TERN, "translate", "-m", MODEL, "--batch-beams", "no"], input=b"A man.\n",
                       capture_output=True, timeout=60)
    assert r.returncode == 2 and b"--batch-beams is on or off, got 'no'" in r.stderr, r.stderr
    r = subprocess.run([TERN, "translate", "-m", MODEL, "-m", MODEL, "--batch-beams", "off"], input=b"A man.\n",
                       capture_output=True, timeout=60)
    assert r.returncode == 1 and r.stdout == b""
    assert b"beams_apart (--batch-beams off): the ensemble model family decodes its rows as one batch" in r.stderr
