"""The Python package (python/, issue 12 point 6) against independent references.

The package is built from python/ into a temporary folder (`setup.py build`, against build/libtern.so
as `make` left it) and imported from there. Checks:
  - outputs identical to the CLI's (`tern translate`) on the first 300 lines of Multi30k
    test_2016_flickr with models/en-de, greedy and beam 5, through translate_batch (strings),
    translate_file and translate_iterable;
  - CTranslate2 parity through the Python API on the peer models (tests/peer/make_models.py):
    greedy outputs identical to ctranslate2.Translator.translate_batch on token lists (with and
    without a target prefix), score_batch log-probs within 1e-4 of CTranslate2's;
  - two Python threads on one Translator (inter_threads=2) give exactly the single-thread results
    (the speed-up is measured by bench/bench_python_threads.py, not asserted here);
  - no memory growth over 10,000 small calls: RSS after them minus RSS after 1,000 warm-up calls
    below 1 MiB (a leak of 100 bytes per call would show);
  - tern.score equals sacrebleu's corpus_bleu / corpus_chrf within 1e-9 on several sets and options;
  - the token callback's deltas concatenate to the greedy output; a callback returning True stops
    the call with tern.CancelledError;
  - `pip wheel ./python` builds a wheel (no build isolation: setuptools and wheel of the test venv).
"""
import glob
import os
import re
import random
import subprocess
import sys
import threading
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.dirname(os.environ.get("TERN_BIN", os.path.join(ROOT, "build", "tern")))
TERN = os.path.join(BUILD, "tern")
MODEL = os.path.join(ROOT, "models", "en-de")
N_LINES = 1000  # the whole of Multi30k test_2016_flickr


@pytest.fixture(scope="module")
def tern(tern_python):
    return tern_python  # tests/conftest.py: built once per session


@pytest.fixture(scope="module")
def flickr(data_dir):
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        src = [next(f).rstrip("\n") for _ in range(N_LINES)]
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.de"), encoding="utf-8") as f:
        ref = [next(f).rstrip("\n") for _ in range(N_LINES)]
    return src, ref


@pytest.fixture(scope="module")
def en_de(tern):
    # one thread: on this shared 2-core machine, OpenMP teams wait for busy cores (slower, not faster)
    return tern.Translator(MODEL, inter_threads=1, intra_threads=1)


def cli(beam, text):
    r = subprocess.run([TERN, "translate", "-m", MODEL, "-b", str(beam), "--length-penalty", "0", "-q", "-t", "1"],
                       input=text,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\n")[:-1]


@pytest.mark.parametrize("beam", [1, 5])
def test_outputs_identical_to_cli(tern, en_de, flickr, tmp_path, beam):
    src, _ = flickr
    want = cli(beam, "".join(s + "\n" for s in src))
    assert len(want) == N_LINES
    got = [r.hypotheses[0] for r in en_de.translate_batch(src, beam_size=beam, length_penalty=0)]
    diff = [i for i in range(N_LINES) if got[i] != want[i]]
    assert not diff, f"{len(diff)} lines differ from the CLI, first {diff[0]}: {got[diff[0]]!r} vs {want[diff[0]]!r}"
    if beam == 1:
        inp, out = tmp_path / "in.txt", tmp_path / "out.txt"
        inp.write_text("".join(s + "\n" for s in src), encoding="utf-8")
        stats = en_de.translate_file(inp, out, beam_size=beam, length_penalty=0, raw_text=True)
        assert out.read_text(encoding="utf-8").split("\n")[:-1] == want
        assert stats.num_examples == N_LINES and stats.num_tokens > N_LINES
        it = [r.hypotheses[0] for r in en_de.translate_iterable(iter(src[:64]), max_batch_size=10, beam_size=1)]
        assert it == want[:64]


def test_token_callback_and_cancel(tern, en_de, flickr):
    src, _ = flickr
    src = src[:30]
    events = {}
    res = en_de.translate_batch(src, beam_size=1, callback=lambda s: events.setdefault(s.batch_id, []).append(s))
    for i, r in enumerate(res):
        ev = events[i]
        assert "".join(e.delta for e in ev) == r.hypotheses[0]
        assert [e.step for e in ev] == list(range(len(ev))) and ev[-1].is_last and not any(e.is_last for e in ev[:-1])
    # beam: the last event gives the final best hypothesis
    events.clear()
    res = en_de.translate_batch(src, beam_size=4, callback=lambda s: events.setdefault(s.batch_id, []).append(s))
    assert all(events[i][-1].is_last and events[i][-1].text == r.hypotheses[0] for i, r in enumerate(res))
    with pytest.raises(tern.CancelledError):
        en_de.translate_batch(src, beam_size=1, callback=lambda s: s.step >= 2)

    def boom(s):
        raise KeyError("from the callback")
    with pytest.raises(KeyError, match="from the callback"):
        en_de.translate_batch(src, beam_size=1, callback=boom)
    # still usable, same output
    assert en_de.translate_batch(src[:3], beam_size=1) == en_de.translate_batch(src[:3], beam_size=1)


def test_errors(tern, en_de, tmp_path):
    with pytest.raises(ValueError, match="num_hypotheses"):
        en_de.translate_batch(["A man."], beam_size=2, num_hypotheses=3)
    with pytest.raises(ValueError, match="device"):
        tern.Translator(MODEL, device="cuda")
    with pytest.raises(OSError, match=str(tmp_path)):
        tern.Translator(str(tmp_path))
    with pytest.raises(TypeError):
        en_de.translate_batch([1, 2])
    assert en_de.translate_batch([]) == []


# ------------------------------------------------------------------ CTranslate2 parity

@pytest.fixture(scope="module", params=["pre-shared-tied", "post-separate-untied", "pre-gelu-learnedpos"])
def peer(request, tmp_path_factory, tern):
    os.environ.setdefault("CT2_USE_MKL", "1")
    ctranslate2 = pytest.importorskip("ctranslate2")
    sys.path.insert(0, os.path.join(ROOT, "tests", "peer"))
    import make_models
    from test_translate_peer import make_inputs
    d = str(tmp_path_factory.mktemp(request.param))
    make_models.make_model(request.param, d)
    return {"ct2": ctranslate2.Translator(d, device="cpu", intra_threads=1),
            "tern": tern.Translator(d, intra_threads=1), "inputs": make_inputs(d, seed=7, n=120)}


def test_ctranslate2_parity(peer):
    ct2, tr, inputs = peer["ct2"], peer["tern"], peer["inputs"]
    want = [r.hypotheses[0] for r in ct2.translate_batch(inputs, beam_size=1, max_decoding_length=40)]
    got = [r.hypotheses[0] for r in tr.translate_batch(inputs, beam_size=1, max_decoding_length=40)]
    diff = [i for i in range(len(inputs)) if got[i] != want[i]]
    assert not diff, f"{len(diff)} greedy outputs differ, first {diff[0]}: {got[diff[0]]} vs {want[diff[0]]}"
    # with a forced target prefix: CTranslate2's target_prefix
    prefixes = [w[:2] for w in want[:40]]
    want_p = [r.hypotheses[0] for r in ct2.translate_batch(inputs[:40], target_prefix=prefixes, beam_size=1,
                                                           max_decoding_length=40)]
    got_p = [r.hypotheses[0] for r in tr.translate_batch(inputs[:40], target_prefix=prefixes, beam_size=1,
                                                         max_decoding_length=40)]
    assert got_p == want_p
    # force decoding
    targets = [w if w else ["x"] for w in want]
    targets = [t if all(x in t for x in []) else t for t in targets]
    cs = ct2.score_batch(inputs, targets)
    ts = tr.score_batch(inputs, targets)
    worst = 0.0
    for c, t in zip(cs, ts):
        assert t.tokens == c.tokens
        assert len(t.log_probs) == len(c.log_probs)
        worst = max([worst] + [abs(a - b) for a, b in zip(t.log_probs, c.log_probs)])
    print(f"score_batch: max |tern - ct2| = {worst:.2e}")
    assert worst <= 1e-4


# ------------------------------------------------------------------ threads, memory

def test_two_threads_give_the_single_thread_results(tern, flickr):
    src, _ = flickr
    tr = tern.Translator(MODEL, inter_threads=2, intra_threads=1)
    halves = [src[:150], src[150:]]
    want = [[r.hypotheses[0] for r in tr.translate_batch(h, beam_size=2)] for h in halves]
    got = [None, None]

    def work(k):
        got[k] = [r.hypotheses[0] for r in tr.translate_batch(halves[k], beam_size=2)]
    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == want


# Run in a fresh interpreter: a pytest process (an xdist worker) that ran other test files first has
# other libraries' threads and heaps around, whose RSS moves by a few MiB on its own.
MEMORY_SCRIPT = r"""
import os, sys
import tern

def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

en_de = tern.Translator(sys.argv[1], inter_threads=1, intra_threads=1)
src, tgt = [["\u2581A", "\u2581man", "."]], [["\u2581Ein", "\u2581Mann", "."]]

def calls(n):
    for i in range(n):
        if i % 2:
            en_de.score_batch(src, tgt)
        else:
            en_de.translate_batch(src, beam_size=1, max_decoding_length=4, return_scores=True)

calls(1000)
before = rss_bytes()
calls(10000)
print(before, rss_bytes())
"""


def test_no_memory_growth_over_10000_calls(tern):
    pkg = os.path.dirname(os.path.dirname(tern.__file__))  # the build's lib directory
    env = dict(os.environ, PYTHONPATH=pkg, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, MODEL], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    before, after = map(int, r.stdout.split())
    print(f"RSS after warm-up {before / 2**20:.1f} MiB, after 10,000 calls {after / 2**20:.1f} MiB")
    assert after - before < 2**20


# ------------------------------------------------------------------ scores

def test_score_equals_sacrebleu(tern, en_de, flickr):
    sacrebleu = pytest.importorskip("sacrebleu")
    from sacrebleu.metrics import BLEU, CHRF
    src, ref = flickr
    hyp = [r.hypotheses[0] for r in en_de.translate_batch(src[:200], beam_size=1)]
    ref = ref[:200]
    rng = random.Random(3)
    ref2 = [" ".join(rng.sample(r.split(), len(r.split()))) for r in ref]   # a second reference stream
    sets = [(hyp, [ref]), (hyp, [ref, ref2]), ([h.lower() for h in hyp[:50]], [ref[:50]]),
            (["", "Ein Hund.", "Zwei Männer — lachen!"], [["", "Ein Hund rennt.", "Zwei Männer lachen!"]])]
    n = 0
    for h, r in sets:
        for kw in [{}, {"lowercase": True}, {"tokenize": "intl"}, {"tokenize": "char"}, {"tokenize": "none"},
                   {"smooth_method": "floor", "smooth_value": 0.2}, {"smooth_method": "add-k"},
                   {"max_ngram_order": 2}, {"smooth_method": "none"}]:
            want = BLEU(**kw).corpus_score(h, r)
            got = tern.score.corpus_bleu(h, r, **kw)
            assert abs(got.score - want.score) <= 1e-9, (kw, got, want)
            assert got.sys_len == want.sys_len and got.ref_len == want.ref_len
            assert all(abs(a - b) <= 1e-9 for a, b in zip(got.precisions, want.precisions))
            n += 1
        for kw in [{}, {"word_order": 2}, {"lowercase": True}, {"whitespace": True}, {"char_order": 4, "beta": 1},
                   {"eps_smoothing": True}]:
            want = CHRF(**kw).corpus_score(h, r)
            got = tern.score.corpus_chrf(h, r, **kw)
            assert abs(got.score - want.score) <= 1e-9, (kw, got, want)
            n += 1
    want = sacrebleu.sentence_bleu(hyp[0], [ref[0]])
    assert abs(tern.score.sentence_bleu(hyp[0], [ref[0]]).score - want.score) <= 1e-9
    print(f"{n + 1} scores equal to sacrebleu's")


# ------------------------------------------------------------------ wheel

def test_pip_wheel_builds(tmp_path):
    env = dict(os.environ, TERN_NO_MAKE="1", TERN_BUILD_DIR=BUILD)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                        "-w", str(tmp_path), os.path.join(ROOT, "python")], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    wheels = glob.glob(str(tmp_path / "tern_nmt-*.whl"))
    assert len(wheels) == 1, os.listdir(tmp_path)
    names = zipfile.ZipFile(wheels[0]).namelist()
    # the wheel's version is TERN_VERSION (include/tern.h), as libtern's; libtern is in it under
    # its SONAME, libtern.so.MAJOR
    with open(os.path.join(ROOT, "include", "tern.h"), encoding="utf-8") as f:
        version = re.search(r'^#define TERN_VERSION "([0-9.]+)"$', f.read(), re.M).group(1)
    soname = "libtern.so." + version.split(".")[0]
    for f in ("tern/__init__.py", "tern/__init__.pyi", "tern/score.py", f"tern/{soname}", "tern/py.typed"):
        assert f in names, (f, names)
    assert os.path.basename(wheels[0]).startswith(f"tern_nmt-{version}-"), wheels
    assert any(n.startswith("tern/_tern.") and n.endswith(".so") for n in names)


def ct2_keywords(fn):
    """The parameter names of a ctranslate2 method: its Python signature (the extensions written in
    Python), else its pybind11 signature line(s)."""
    import inspect
    try:
        params = list(inspect.signature(fn).parameters.values())[1:]  # the first is the translator
        return {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    except (TypeError, ValueError):
        pass
    names = set()
    for line in (fn.__doc__ or "").split("\n"):
        m = re.match(r"^(?:\d+\. )?\w+\((.*)\)( -> .*)?$", line)
        if m:
            names |= {n for n in re.findall(r"(?:^|, )\*?(\w+):", m.group(1)) if n != "self"}
    return names


def test_every_ctranslate2_argument(tern):
    """Issue 31 point 6: every argument ctranslate2.Translator's constructor and methods take is a
    parameter of tern.Translator's (named alike), and every attribute it has, tern has."""
    import inspect
    ctranslate2 = pytest.importorskip("ctranslate2")
    methods = ["__init__", "translate_batch", "score_batch", "translate_file", "score_file", "translate_iterable",
               "score_iterable", "generate_tokens", "unload_model", "load_model"]
    missing = {}
    for name in methods:
        want = ct2_keywords(getattr(ctranslate2.Translator, name))
        assert want or name in ("unload_model", "load_model"), f"no signature read for ctranslate2 {name}"
        have = set(inspect.signature(getattr(tern.Translator, name)).parameters) - {"self"}
        if want - have:
            missing[name] = sorted(want - have)
    assert not missing, f"ctranslate2 {ctranslate2.__version__} arguments tern.Translator lacks: {missing}"
    attrs = [a for a in dir(ctranslate2.Translator) if not a.startswith("_")]
    assert [a for a in attrs if not hasattr(tern.Translator, a)] == []
    print(f"\nctranslate2 {ctranslate2.__version__}: {sum(len(ct2_keywords(getattr(ctranslate2.Translator, m))) for m in methods)}"
          f" arguments over {len(methods)} methods, {len(attrs)} attributes: all in tern.Translator")
