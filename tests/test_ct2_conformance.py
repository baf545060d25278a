"""tern.Translator as a drop-in for ctranslate2.Translator (issue 31 point 6).

- Conformance: one script of ctranslate2 calls (tests/tools/ct2_calls.py: the constructor's
  arguments and compute-type resolution, translate_batch with every deterministic option,
  asynchronous results, the callback, return_alternatives (greedy, beam with length penalty 0,
  prefixes, min_alternative_expansion_prob), generate_tokens, translate_iterable, score_batch/_iterable,
  translate_file/score_file with their file formats, use_vmap, inter_threads=2) runs twice, with
  `ct = ctranslate2` and with `ct = tern`, on the same CTranslate2 model (a float32 spec-API model,
  tests/peer/make_models.py; CT2_USE_MKL=1 as in the other peer tests). The two runs give the same
  result types with the same fields and the same values: tokens, strings, ints and booleans
  exactly; floats (scores, log-probs, the numbers in the output files) within 1e-4 absolute
  (1e-2 for the int8 calls, where the engines' run-time activation quantization rounds apart).
- Sampling: draws are not CTranslate2's, so sampling_topk=1 is in the conformance script and here
  a seed reproduces its samples exactly, also when the call is split across 2 replicas, and
  another seed gives other samples.
- generate_tokens(use_vmap=True) steps through ctranslate2's translate_batch(use_vmap=True)
  tokens (ctranslate2 4.8's own generate_tokens gives reduced-vocabulary positions there).
- Asynchronous calls with max_queued_batches=1 on 2 replicas give the synchronous results.
- Options Tern cannot honour raise tern.NotAvailableError naming the option (never ignored); a
  tokenizer's bad output and files of different lengths are errors naming the file and line.
- `python -m tern translate` with sampling flags writes `tern translate`'s bytes.
"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peer"))
sys.path.insert(0, os.path.join(HERE, "tools"))
os.environ.setdefault("CT2_USE_MKL", "1")
ctranslate2 = pytest.importorskip("ctranslate2")
import ct2_calls  # noqa: E402
import make_models  # noqa: E402
from test_translate_peer import make_inputs  # noqa: E402

TOL = 1e-4       # float32: scores and log-probs
TOL_INT8 = 1e-2  # int8 (calls named "int8 ..."): activations quantized per row at run time round
                 # differently in the two engines (measured: at most 0.0041 on a score); tokens exact


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("ct2-conformance"))
    make_models.make_model(make_models.SHAPES[0], d)
    # a vocabulary map for use_vmap (CTranslate2's vmap.txt: n-gram<TAB>pieces; the empty n-gram's
    # pieces are candidates of every batch): a third of the vocabulary always, some more per token
    import json
    with open(os.path.join(d, "shared_vocabulary.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    words = vocab[3:]
    with open(os.path.join(d, "vmap.txt"), "w", encoding="utf-8") as f:
        f.write("\t" + " ".join(words[::3]) + "\n")
        for i, w in enumerate(words[:40]):
            f.write(f"{w}\t{words[(7 * i + 1) % len(words)]} {words[(5 * i + 2) % len(words)]}\n")
    return d


def _num(s):
    try:
        return float(s)
    except ValueError:
        return None


def compare(x, y, path, tol=TOL):
    """None when y (tern's) equals x (ctranslate2's), else where and how they differ."""
    if isinstance(x, float) or isinstance(y, float):
        ok = isinstance(x, (int, float)) and isinstance(y, (int, float)) and abs(x - y) <= tol
        return None if ok else f"{path}: {x!r} vs {y!r}"
    if type(x) is not type(y):
        return f"{path}: type {type(x).__name__} vs {type(y).__name__}: {x!r:.200} vs {y!r:.200}"
    if isinstance(x, (list, tuple)):
        if len(x) != len(y):
            return f"{path}: {len(x)} vs {len(y)} items: {x!r:.300} vs {y!r:.300}"
        for i, (u, v) in enumerate(zip(x, y)):
            if (r := compare(u, v, f"{path}[{i}]", tol)):
                return r
        return None
    if isinstance(x, dict):
        if x.keys() != y.keys():
            return f"{path}: fields {sorted(x)} vs {sorted(y)}"
        for k in x:
            if (r := compare(x[k], y[k], f"{path}.{k}", tol)):
                return r
        return None
    if isinstance(x, str) and x != y and " ||| " in x:  # a line of an output file: numbers within TOL
        a, b = x.split(" ||| "), y.split(" ||| ")
        if len(a) == len(b) and all(u == v or (_num(u) is not None and _num(v) is not None and abs(_num(u) - _num(v)) <= TOL)
                                    or (len(u.split()) == len(v.split()) and all(
                                        p == q or (_num(p) is not None and _num(q) is not None and abs(_num(p) - _num(q)) <= TOL)
                                        for p, q in zip(u.split(), v.split())))
                                    for u, v in zip(a, b)):
            return None
    return None if x == y else f"{path}: {x!r:.300} vs {y!r:.300}"


def test_same_script_same_results(tern_python, model, tmp_path):
    inputs = make_inputs(model, seed=7, n=60)
    (tmp_path / "ct2").mkdir()
    (tmp_path / "tern").mkdir()
    want = ct2_calls.run(ctranslate2, model, inputs, str(tmp_path / "ct2"))
    got = ct2_calls.run(tern_python, model, inputs, str(tmp_path / "tern"))
    assert list(got) == list(want)
    diffs = [r for k in want if (r := compare(want[k], got[k], k, TOL_INT8 if k.startswith("int8") else TOL))]
    print(f"{len(want)} calls compared, {len(diffs)} differ")
    assert not diffs, "\n".join(diffs)
    # the script really covered the options (not empty results compared with empty results)
    assert want["attributes"] == ("cpu", [0], "float32", 1)
    assert want["compute_type auto"] == "int8_float32" and want["compute_type float32"] == "float32"
    assert want["compute_type int8_float16"][0] == "ValueError"
    assert len(want["callback"]) > 8 and len(want["generate_tokens"]) >= 2
    assert want["default"] != want["max/min length"]
    assert want["inter_threads 2"][0] == 2
    assert want["use_vmap greedy"] != want["greedy scores"]  # the map changed outputs


def test_generate_tokens_with_vmap_gives_translate_batchs_tokens(tern_python, model):
    """generate_tokens(use_vmap=True) steps through the tokens that ctranslate2's translate_batch
    (use_vmap=True, greedy) outputs, with their vocabulary ids (ctranslate2 4.8's own
    generate_tokens gives positions in the reduced vocabulary there, so it is not the reference)."""
    inputs = make_inputs(model, seed=13, n=12)
    ct2 = ctranslate2.Translator(model, intra_threads=1)
    tr = tern_python.Translator(model, intra_threads=1)
    import json
    with open(os.path.join(model, "shared_vocabulary.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    for s, r in zip(inputs, ct2.translate_batch(inputs, beam_size=1, use_vmap=True, return_end_token=True)):
        steps = list(tr.generate_tokens(s, use_vmap=True))
        assert [e.token for e in steps] == r.hypotheses[0]
        assert [vocab[e.token_id] for e in steps] == r.hypotheses[0]


def test_sampling_seeds_reproduce(tern_python, model):
    inputs = make_inputs(model, seed=11, n=40)
    one = tern_python.Translator(model, intra_threads=1)
    two = tern_python.Translator(model, inter_threads=2, intra_threads=1)
    kw = dict(beam_size=1, sampling_topk=0, sampling_temperature=1.5, num_hypotheses=2, max_decoding_length=20)
    a = [r.hypotheses for r in one.translate_batch(inputs, seed=3, **kw)]
    assert a == [r.hypotheses for r in one.translate_batch(inputs, seed=3, **kw)]
    assert a == [r.hypotheses for r in two.translate_batch(inputs, seed=3, **kw)]  # split across 2 replicas
    b = [r.hypotheses for r in one.translate_batch(inputs, seed=4, **kw)]
    assert sum(x != y for x, y in zip(a, b)) >= 10


def test_options_tern_cannot_honour_are_refused(tern_python, model):
    tr = tern_python.Translator(model, intra_threads=1)
    src = make_inputs(model, seed=5, n=2)
    with pytest.raises(tern_python.NotAvailableError, match="return_alternatives with beam search and a length"):
        tr.translate_batch(src, return_alternatives=True)  # beam 2, length penalty 1
    for opt, value in [("return_logits_vocab", True),
                       ("end_token", "<s>")]:
        with pytest.raises(tern_python.NotAvailableError, match=opt):
            tr.translate_batch(src, **{opt: value})
    with pytest.raises(NotImplementedError, match="return_log_prob with sampling"):
        list(tr.generate_tokens(src[0], return_log_prob=True, sampling_topk=5))
    with pytest.raises(tern_python.NotAvailableError, match="int16"):
        tern_python.Translator(model, compute_type="int16")
    with pytest.raises(ValueError, match="device"):
        tern_python.Translator(model, device="cuda")
    with pytest.raises(ValueError, match="flash_attention"):
        tern_python.Translator(model, flash_attention=True)


def test_bad_tokenizer_output_names_the_line(tern_python, model, tmp_path):
    tr = tern_python.Translator(model, intra_threads=1)
    src = tmp_path / "in.txt"
    src.write_text("a b\nc d\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"in.txt:2: the tokenizer"):
        tr.translate_file(str(src), str(tmp_path / "out.txt"), source_tokenize_fn=lambda s: ["x y"] if s == "c d" else ["x"])
    tgt = tmp_path / "tgt.txt"
    tgt.write_text("a\n", encoding="utf-8")
    with pytest.raises(ValueError, match="tgt.txt: has 1 lines, fewer than"):
        tr.score_file(str(src), str(tgt), str(tmp_path / "out.txt"))


def test_python_m_tern_translate_samples_as_the_cli(tern_python, data_dir, tmp_path):
    """`python -m tern translate` with the sampling flags writes what `tern translate` writes with
    them (byte for byte: the draws depend on the seed and the input line, empty lines included)."""
    import subprocess
    root = os.path.dirname(HERE)
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        lines = [next(f) for _ in range(20)]
    lines[5] = "\n"
    src = tmp_path / "in.txt"
    src.write_text("".join(lines), encoding="utf-8")
    flags = ["-m", os.path.join(root, "models", "en-de"), "--sampling-topk", "0", "--sampling-temperature", "0.8",
             "--seed", "9", "--no-repeat-ngram-size", "3", "-q", "-t", "1"]
    cli = subprocess.run([os.environ.get("TERN_BIN", os.path.join(root, "build", "tern")), "translate", *flags],
                         stdin=open(src, "rb"), capture_output=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(tern_python.__file__)))
    py = subprocess.run([sys.executable, "-m", "tern", "translate", *flags, "--read-ahead", "7", str(src)],
                        capture_output=True, env=env, timeout=300)
    assert py.returncode == 0, py.stderr
    assert py.stdout == cli.stdout and len(cli.stdout.split(b"\n")) == 21


def test_asynchronous_calls_with_a_bounded_queue(tern_python, model):
    """Many asynchronous calls on 2 replicas with max_queued_batches=1 (the caller blocks while a
    call waits): every handle gives the synchronous result, and the counters come back to 0."""
    inputs = make_inputs(model, seed=17, n=48)
    tr = tern_python.Translator(model, inter_threads=2, intra_threads=1, max_queued_batches=1)
    want = tr.translate_batch(inputs, beam_size=2)
    handles = [tr.translate_batch(inputs[i:i + 8], beam_size=2, asynchronous=True) for i in range(0, 48, 8)]
    scores = tr.score_batch(inputs[:4], [w.hypotheses[0] or ["</s>"] for w in want[:4]], asynchronous=True)
    got = [h.result() for hs in handles for h in hs]
    assert got == want
    assert all(isinstance(h, tern_python.AsyncTranslationResult) and h.done() for hs in handles for h in hs)
    assert [s.result().log_probs for s in scores] == \
        [s.log_probs for s in tr.score_batch(inputs[:4], [w.hypotheses[0] or ["</s>"] for w in want[:4]])]
    import time
    for _ in range(100):
        if tr.num_active_batches == 0:
            break
        time.sleep(0.01)
    assert tr.num_active_batches == 0 and tr.num_queued_batches == 0
