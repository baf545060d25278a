"""`tern distill` (tools/cmd_distill.c; docs/training-data.md, "Sequence-level distillation") and
recipes/distill-en-de.sh, on Multi30k train's first 60 lines with the shipped models/en-de:

* PREFIX.tgt is what `tern translate` gives with the same options, line for line (greedy, beam 4,
  an n-best list's first hypothesis, an ensemble, int8), and PREFIX.src the input's lines;
* --select bleu / chrf keeps, on every line, the hypothesis of `tern translate -n 4`'s list that
  sacreBLEU's sentence_bleu / sentence_chrf (PyPI sacrebleu) score best against the reference (the
  first on ties);
* killed (SIGKILL) at several points, half a chunk written or right after a commit, and killed
  from outside at a random moment, then run again: the output equals an uninterrupted run's;
* a resume with another beam, another corpus or another reference is refused naming what changed;
  --restart starts over; a finished run does nothing when run again;
* bad input: corpora of unequal length, an empty corpus, a missing or unreadable file, a
  non-UTF-8 line, bad option values: clear errors and exit codes;
* the recipe with tiny knobs.
"""
import os
import re
import signal
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern")
MODEL = os.path.join(ROOT, "models", "en-de")
RECIPE = os.path.join(ROOT, "recipes", "distill-en-de.sh")
N = 60
ENV = dict(os.environ, OMP_NUM_THREADS="1")
# small batches and chunks: the run commits many times, so that a kill lands mid-corpus
SMALL = ["--chunk", "4", "--read-ahead", "1", "--max-batch-tokens", "64", "-t", "1"]


def lines(p):
    with open(p, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def run(args, **kw):
    return subprocess.run([TERN] + args, capture_output=True, text=True, env=kw.pop("env", ENV), timeout=300, **kw)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, data_dir):
    if not os.path.exists(TERN):
        pytest.skip(f"{TERN} not built")
    d = tmp_path_factory.mktemp("distill")
    m = os.path.join(data_dir, "multi30k")
    for s in ("en", "de"):
        (d / f"train.{s}").write_text("\n".join(lines(os.path.join(m, f"train.{s}"))[:N]) + "\n", encoding="utf-8")
    return d


def translate(corpus, opts, out):
    r = run(["translate", "-m", MODEL, *opts, "-t", "1", str(corpus / "train.en"), str(out)])
    assert r.returncode == 0, r.stderr
    return lines(out)


def distill(corpus, prefix, opts, extra=(), env=ENV, ref=True):
    args = ["distill", "-m", MODEL, *opts, "--src", str(corpus / "train.en"), "-o", str(prefix), *extra]
    if ref:
        args += ["--ref", str(corpus / "train.de")]
    return run(args, env=env)


CASES = {
    "greedy": (["-b", "1"], ["-b", "1"]),
    "beam4": (["-b", "4"], ["-b", "4"]),
    "beam4-lp": (["-b", "4", "--length-penalty", "0.6", "--max-decoding-length", "40"],
                 ["-b", "4", "--length-penalty", "0.6", "--max-decoding-length", "40"]),
    "beam4-int8": (["-b", "4", "--compute-type", "int8"], ["-b", "4", "--compute-type", "int8"]),
    "ensemble-beam2": (["-b", "2", "-m", MODEL, "--ensemble-weights", "0.7,0.3"],
                       ["-b", "2", "-m", MODEL, "--ensemble-weights", "0.7,0.3"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_tgt_equals_tern_translate(corpus, tmp_path, case):
    dopts, topts = CASES[case]
    r = distill(corpus, tmp_path / "d", dopts, SMALL if case == "beam4" else ["-t", "1"])
    assert r.returncode == 0, r.stderr
    ref = translate(corpus, topts, tmp_path / "t.de")
    got = lines(tmp_path / "d.tgt")
    assert len(got) == N and got == ref
    assert lines(tmp_path / "d.src") == lines(corpus / "train.en")
    assert f"{N} / {N} lines (100.0%)" in r.stderr and "lines/s" in r.stderr


def nbest(path, n):
    out = [[] for _ in range(n)]
    for ln in lines(path):
        i, hyp, _ = ln.split(" ||| ")
        out[int(i)].append(hyp)
    return out


def test_select_score_is_the_nbest_lists_first(corpus, tmp_path):
    r = distill(corpus, tmp_path / "d", ["-b", "4", "-n", "3"], ["-t", "1"])
    assert r.returncode == 0, r.stderr
    translate(corpus, ["-b", "4", "-n", "3"], tmp_path / "nb")
    assert lines(tmp_path / "d.tgt") == [h[0] for h in nbest(tmp_path / "nb", N)]


@pytest.mark.parametrize("metric", ["bleu", "chrf"])
def test_select_by_sentence_metric(corpus, tmp_path, metric):
    sacrebleu = pytest.importorskip("sacrebleu")
    fn = sacrebleu.sentence_bleu if metric == "bleu" else sacrebleu.sentence_chrf
    r = distill(corpus, tmp_path / "d", ["-b", "4", "-n", "4", "--select", metric], ["-t", "1"])
    assert r.returncode == 0, r.stderr
    translate(corpus, ["-b", "4", "-n", "4"], tmp_path / "nb")
    lists, refs, got = nbest(tmp_path / "nb", N), lines(corpus / "train.de"), lines(tmp_path / "d.tgt")
    changed = 0
    for i, (hyps, ref) in enumerate(zip(lists, refs)):
        scores = [fn(h, [ref]).score for h in hyps]
        best = max(range(len(hyps)), key=lambda k: (scores[k], -k))  # the first of the best
        assert got[i] == hyps[best], (i, got[i], hyps, scores)
        changed += best != 0
    print(f"\n--select {metric}: {changed} of {N} lines keep another hypothesis than the model's best")
    assert changed >= 5  # the selection does something on this corpus


@pytest.fixture(scope="module")
def uninterrupted(corpus, tmp_path_factory):
    d = tmp_path_factory.mktemp("full")
    r = distill(corpus, d / "d", ["-b", "4", "-n", "2", "--select", "chrf"], SMALL)
    assert r.returncode == 0, r.stderr
    return lines(d / "d.src"), lines(d / "d.tgt"), (d / "d.tgt").read_bytes()


OPTS = ["-b", "4", "-n", "2", "--select", "chrf"]


def state_done(prefix):
    return int(re.search(r"lines_done\t(\d+)", open(f"{prefix}.state").read()).group(1))


@pytest.mark.parametrize("kills", [["1:data"], ["3:state"], ["2:data", "4:data", "1:state"], ["15:data"]])
def test_killed_runs_resume_identically(corpus, tmp_path, uninterrupted, kills):
    p = tmp_path / "d"
    for k in kills:
        r = distill(corpus, p, OPTS, SMALL, env=dict(ENV, TERN_DISTILL_KILL=k))
        assert r.returncode == -signal.SIGKILL, (k, r.returncode, r.stderr)
        done = state_done(p)
        assert done < N and done % 4 == 0
        # what the files hold beyond the state (half a chunk on a :data kill) is cut on resume
        assert len(lines(p.with_suffix(".tgt"))) >= done
    r = distill(corpus, p, OPTS, SMALL)
    assert r.returncode == 0, r.stderr
    assert re.search(r"resuming '.*' at line \d+ of 60", r.stderr)
    assert (lines(p.with_suffix(".src")), lines(p.with_suffix(".tgt"))) == uninterrupted[:2]
    assert p.with_suffix(".tgt").read_bytes() == uninterrupted[2]
    # run again: complete, nothing to do, nothing changed
    r = distill(corpus, p, OPTS, ["-t", "1"])
    assert r.returncode == 0 and "complete (60 lines): nothing to do" in r.stderr
    assert p.with_suffix(".tgt").read_bytes() == uninterrupted[2]


def test_killed_from_outside_at_random_moments(corpus, tmp_path, uninterrupted):
    """SIGKILL from another process while it runs (after 1, 5 and 9 progress lines), then resume."""
    p = tmp_path / "d"
    args = [TERN, "distill", "-m", MODEL, *OPTS, "--src", str(corpus / "train.en"), "--ref",
            str(corpus / "train.de"), "-o", str(p), *SMALL]
    kills = 0
    for after in (1, 5, 9):
        proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, env=ENV)
        seen = 0
        for ln in proc.stderr:
            seen += "lines/s" in ln
            if seen >= after:
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait(timeout=60)
        kills += proc.returncode == -signal.SIGKILL
    assert kills >= 1, "the runs all finished before a kill"
    r = subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr
    assert p.with_suffix(".tgt").read_bytes() == uninterrupted[2]
    assert lines(p.with_suffix(".src")) == uninterrupted[0]


def test_changed_inputs_or_options_refused(corpus, tmp_path, uninterrupted):
    p = tmp_path / "d"
    r = distill(corpus, p, OPTS, SMALL, env=dict(ENV, TERN_DISTILL_KILL="3:state"))
    assert r.returncode == -signal.SIGKILL
    before = p.with_suffix(".tgt").read_bytes()
    r = distill(corpus, p, ["-b", "2", "-n", "2", "--select", "chrf"], SMALL)
    assert r.returncode == 1
    assert "not resumed" in r.stderr and "--beam-size: was 4, now 2" in r.stderr and "--restart" in r.stderr
    r = distill(corpus, p, ["-b", "4", "-n", "2", "--select", "bleu"], SMALL)
    assert r.returncode == 1 and "--select: was chrf, now bleu" in r.stderr
    # the same path, other content
    src = lines(corpus / "train.en")
    other = tmp_path / "c"
    other.mkdir()
    (other / "train.en").write_text("\n".join(src[:10] + ["A different line."] + src[11:]) + "\n", encoding="utf-8")
    (other / "train.de").write_bytes((corpus / "train.de").read_bytes())
    r = distill(other, p, OPTS, SMALL)
    assert r.returncode == 1 and re.search(r"--src: was .*, now .*", r.stderr), r.stderr
    assert p.with_suffix(".tgt").read_bytes() == before  # refused: untouched
    # another model
    r = run(["distill", "-m", MODEL, "-m", MODEL, *OPTS, "--src", str(corpus / "train.en"), "--ref",
             str(corpus / "train.de"), "-o", str(p)])
    assert r.returncode == 1 and "-m count: was 1, now 2" in r.stderr
    # --restart starts over; the same command then resumes nothing
    r = distill(corpus, p, OPTS, SMALL + ["--restart"])
    assert r.returncode == 0, r.stderr
    assert p.with_suffix(".tgt").read_bytes() == uninterrupted[2]


def test_existing_output_without_state_refused(corpus, tmp_path):
    (tmp_path / "d.tgt").write_text("precious\n")
    r = distill(corpus, tmp_path / "d", ["-b", "1"])
    assert r.returncode == 1 and "not the output of an earlier run" in r.stderr
    assert (tmp_path / "d.tgt").read_text() == "precious\n"


def test_bad_inputs(corpus, tmp_path):
    src, ref = str(corpus / "train.en"), str(corpus / "train.de")
    short = tmp_path / "short.de"
    short.write_text("\n".join(lines(ref)[:59]) + "\n", encoding="utf-8")
    r = run(["distill", "-m", MODEL, "--src", src, "--ref", str(short), "-o", str(tmp_path / "o")])
    assert r.returncode == 1
    assert f"--src '{src}' has 60 lines, --ref '{short}' has 59" in r.stderr
    empty = tmp_path / "empty.en"
    empty.write_text("")
    r = run(["distill", "-m", MODEL, "--src", str(empty), "-o", str(tmp_path / "o")])
    assert r.returncode == 1 and f"'{empty}' is empty" in r.stderr
    r = run(["distill", "-m", MODEL, "--src", str(tmp_path / "missing.en"), "-o", str(tmp_path / "o")])
    assert r.returncode == 1 and "missing.en" in r.stderr and "No such file" in r.stderr
    r = run(["distill", "-m", MODEL, "--src", str(tmp_path), "-o", str(tmp_path / "o")])
    assert r.returncode == 1 and "is a directory" in r.stderr
    bad = tmp_path / "bad.en"
    bad.write_bytes(b"A dog.\nA cat.\nA caf\xe9 in Latin-1.\nA bird.\n")
    r = run(["distill", "-m", MODEL, "--src", str(bad), "-o", str(tmp_path / "o")])
    assert r.returncode == 1 and f"{bad} line 3: not valid UTF-8 (byte 6 of the line)" in r.stderr
    bad_ref = tmp_path / "bad.de"
    bad_ref.write_bytes(b"Ein Hund.\n\xff\n")
    good2 = tmp_path / "two.en"
    good2.write_text("A dog.\nA cat.\n")
    r = run(["distill", "-m", MODEL, "--src", str(good2), "--ref", str(bad_ref), "-o", str(tmp_path / "o")])
    assert r.returncode == 1 and "--ref" in r.stderr and "line 2: not valid UTF-8" in r.stderr
    for args, msg in [
        (["--select", "meteor"], "--select is score, bleu or chrf, got 'meteor'"),
        (["--chunk", "0"], "--chunk expects an integer in 1.."),
        (["-b", "abc"], "--beam-size expects an integer"),
        (["--length-penalty", "-1"], "--length-penalty expects a number"),
        (["--ensemble-weights", "1,-2"], "--ensemble-weights expects positive numbers"),
        (["--ensemble-weights", "0"], "--ensemble-weights expects positive numbers"),
        (["--ensemble-weights", "1,x"], "--ensemble-weights expects positive numbers"),
        (["-m", MODEL, "--ensemble-weights", "1"], "--ensemble-weights gives 1 weights for 2 models"),
        (["--extra-file"], "unrecognized option"),
    ]:
        r = run(["distill", "-m", MODEL, "--src", src, "-o", str(tmp_path / "o"), *args])
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)
    r = run(["distill", "-m", MODEL, "--src", src, "-o", str(tmp_path / "o"), "--select", "bleu", "-n", "2"])
    assert r.returncode == 2 and "--select bleu compares with the reference: give --ref FILE" in r.stderr
    r = run(["distill", "-m", MODEL, "--src", src, "-o", str(tmp_path / "o"), "-b", "2", "-n", "3"])
    assert r.returncode == 2 and "--num-hypotheses (3) cannot exceed the beam size (2)" in r.stderr
    r = run(["distill", "-m", MODEL, "-o", str(tmp_path / "o")])
    assert r.returncode == 2 and "no corpus (--src FILE)" in r.stderr
    r = run(["distill", "--src", src, "-o", str(tmp_path / "o")])
    assert r.returncode == 2 and "no teacher (-m DIR)" in r.stderr
    r = run(["distill", "-m", MODEL, "--src", src])
    assert r.returncode == 2 and "no output (-o PREFIX)" in r.stderr
    r = run(["distill", "-m", str(tmp_path / "nomodel"), "--src", src, "-o", str(tmp_path / "o")])
    assert r.returncode in (1, 2) and "nomodel" in r.stderr
    assert not os.path.exists(tmp_path / "o.tgt")


def test_recipe_smoke(tmp_path, data_dir):
    """recipes/distill-en-de.sh with tiny knobs: 200 lines distilled with -n 2 --select bleu, a
    1-layer student for 20 updates on the distilled pairs plus the original ones at weight 0.5."""
    if not os.path.exists(TERN):
        pytest.skip(f"{TERN} not built")
    work = tmp_path / "rec"
    env = dict(ENV, TERN_BIN=TERN, TERN_DATA=data_dir, WORK=str(work), N_TRAIN="200", N_TEST="50", UPDATES="20",
               LAYERS="1", DMODEL="32", FF="64", HEADS="2", VOCAB="300", THREADS="1", BEAM="2", NBEST="2",
               SELECT="bleu", ORIG_WEIGHT="0.5")
    r = subprocess.run(["bash", RECIPE], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    m = os.path.join(data_dir, "multi30k")
    assert lines(work / "distilled.src") == lines(os.path.join(m, "train.en"))[:200]
    # the distilled German is `tern distill`'s with the recipe's options (run again here)
    r2 = run(["distill", "-m", MODEL, "-b", "2", "-n", "2", "--select", "bleu", "--src", str(work / "orig.en"),
              "--ref", str(work / "orig.de"), "-o", str(tmp_path / "again"), "-t", "1"])
    assert r2.returncode == 0, r2.stderr
    assert lines(work / "distilled.tgt") == lines(tmp_path / "again.tgt")
    log = (work / "student" / "train.log").read_text()
    mix = re.findall(r"mix: epoch 1 corpus (\d+) \((.*?)\): (\d+) pairs drawn, weight (\S+) x (\d+) kept", log)
    assert [x[1] for x in mix] == [str(work / "distilled.src"), str(work / "orig.en")]
    assert float(mix[0][3]) == 1 and float(mix[1][3]) == 0.5 and int(mix[1][2]) == int(0.5 * int(mix[1][4]) + 0.5)
    res = (work / "RESULTS.txt").read_text()
    print("\n" + res)
    assert "distilled: 200" in res and "student BLEU: BLEU" in res and "teacher BLEU: BLEU" in res
    # the recipe again: the distillation is complete, nothing is redone
    r = subprocess.run(["bash", RECIPE], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and "nothing to do" in r.stderr, r.stderr[-2000:]
