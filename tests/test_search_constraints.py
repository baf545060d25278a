"""Constraints by masking (issue 11) on the random-weight peer models of tests/peer/make_models.py.

  --target-prefix   tokens and scores equal CTranslate2's translate_batch(target_prefix=...) (greedy and
                    beam 4: every output identical; scores within 1e-4 + 2e-5 relative (float sums over up to 256 steps));
  --suppress        equal to CTranslate2's suppress_sequences (single pieces and 2-piece sequences);
  --restrict-to     every output is one of the given hypotheses, its score equals the sum of
                    `tern rescore`'s log-probs (1e-4), and the best one is the best of the set by rescore;
  --prune-width     an infinite width (1e30) gives byte-identical output to no pruning;
  bad input         a prefix file with fewer/more lines than the input, unknown pieces: a warning that
                    names the file and the line, and still one output line per input line.
"""
import os
import random
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peer"))
os.environ.setdefault("CT2_USE_MKL", "1")
ctranslate2 = pytest.importorskip("ctranslate2")
import make_models  # noqa: E402

TERN = os.environ.get("TERN_BIN", os.path.join(os.path.dirname(HERE), "build", "tern"))
SPECIALS = ("<unk>", "<s>", "</s>", "<blank>", "<pad>")
SHAPES = list(make_models.SHAPES_BY_NAME)[:2]


def tern(args, check=True):
    r = subprocess.run([TERN] + args, capture_output=True, text=True, timeout=600)
    if check:
        assert r.returncode == 0, f"tern {' '.join(args)} failed:\n{r.stderr}"
    return r


def write(path, lines):
    path.write_text("".join(" ".join(s) + "\n" if isinstance(s, list) else s + "\n" for s in lines))
    return str(path)


@pytest.fixture(scope="module", params=SHAPES)
def model(request, tmp_path_factory):
    d = str(tmp_path_factory.mktemp(request.param))
    make_models.make_model(request.param, d)
    rng = random.Random(sum(map(ord, request.param)))
    src = [t for t in make_models.read_vocabulary(d, "source") if t not in SPECIALS]
    tgt = [t for t in make_models.read_vocabulary(d, "target") if t not in SPECIALS]
    inputs = [[rng.choice(src) for _ in range(rng.randint(1, 20))] for _ in range(150)]
    return {"dir": d, "ct2": ctranslate2.Translator(d, device="cpu", intra_threads=1), "inputs": inputs,
            "tgt": tgt, "rng": rng}


def parse_scored(out):
    rows = []
    for line in out.splitlines():
        i, h, s = line.split(" ||| ")
        rows.append((int(i), h.split(), float(s)))
    return rows


@pytest.mark.parametrize("beam", [1, 4])
def test_target_prefix_equals_ctranslate2(model, tmp_path, beam):
    rng = random.Random(beam)
    prefixes = [[rng.choice(model["tgt"]) for _ in range(rng.randint(0, 5))] for _ in model["inputs"]]
    ref = model["ct2"].translate_batch(model["inputs"], target_prefix=[p or None for p in prefixes], beam_size=beam,
                                       length_penalty=0, return_scores=True, max_batch_size=32)
    out = tern(["translate", "-m", model["dir"], "--pretokenized", "-b", str(beam), "--scores", "-q",
                "--target-prefix", write(tmp_path / "prefix.txt", prefixes),
                write(tmp_path / "in.txt", model["inputs"])]).stdout
    rows = parse_scored(out)
    assert len(rows) == len(model["inputs"])
    for (i, hyp, score), r, p in zip(rows, ref, prefixes):
        assert hyp[:len(p)] == p, f"line {i}: the prefix is not reproduced"
        assert hyp == r.hypotheses[0], f"line {i}: {hyp} != CTranslate2's {r.hypotheses[0]}"
        assert abs(score - r.scores[0]) <= 1e-4 + 2e-5 * abs(r.scores[0]), f"line {i}: score {score} != {r.scores[0]}"


def test_target_prefix_c_api_equals_ctranslate2(model, tmp_path):
    """tern_translate() with target prefixes (the C API, via tests/tools/prefix_api_driver) gives CTranslate2's
    target_prefix output too (beam 4)."""
    driver = os.environ.get("PREFIX_API_DRIVER", os.path.join(os.path.dirname(HERE), "build", "tests", "tools",
                                                             "prefix_api_driver"))
    rng = random.Random(99)
    inputs = model["inputs"][:60]
    prefixes = [[rng.choice(model["tgt"]) for _ in range(rng.randint(0, 4))] for _ in inputs]
    ref = model["ct2"].translate_batch(inputs, target_prefix=[p or None for p in prefixes], beam_size=4,
                                       length_penalty=0, return_scores=True)
    r = subprocess.run([driver, model["dir"], "4", write(tmp_path / "in.txt", inputs),
                        write(tmp_path / "p.txt", prefixes)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = [line.split(" ||| ") for line in r.stdout.splitlines()]
    assert len(rows) == len(inputs)
    for i, ((hyp, score), rr) in enumerate(zip(rows, ref)):
        assert hyp.split() == rr.hypotheses[0], f"line {i}"
        assert abs(float(score) - rr.scores[0]) <= 1e-4 + 2e-5 * abs(rr.scores[0]), f"line {i}"


@pytest.mark.parametrize("beam", [1, 4])
def test_suppress_equals_ctranslate2(model, tmp_path, beam):
    inputs = model["inputs"]
    plain = model["ct2"].translate_batch(inputs, beam_size=beam, length_penalty=0, max_batch_size=32)
    # suppress the pieces the model likes most, and a 2-piece sequence it produces
    counts = {}
    for r in plain:
        for t in r.hypotheses[0]:
            counts[t] = counts.get(t, 0) + 1
    top = sorted(counts, key=lambda t: -counts[t])
    seqs = [[top[0]]]
    for r in plain:
        h = r.hypotheses[0]
        if len(h) >= 2 and h[0] != top[0] and h[1] != top[0]:
            seqs.append(h[:2])
            break
    ref = model["ct2"].translate_batch(inputs, beam_size=beam, length_penalty=0, max_batch_size=32,
                                       suppress_sequences=seqs)
    out = tern(["translate", "-m", model["dir"], "--pretokenized", "-b", str(beam), "-q", "--suppress",
                write(tmp_path / "sup.txt", seqs), write(tmp_path / "in.txt", inputs)]).stdout.split("\n")[:-1]
    assert len(out) == len(inputs)
    same = sum(o.split() == r.hypotheses[0] for o, r in zip(out, ref))
    for o in out:
        h = o.split()
        assert top[0] not in h
        assert all(h[k:k + 2] != seqs[1] for k in range(len(h) - 1)) if len(seqs) > 1 else True
    print(f"\nsuppress {seqs}: {same}/{len(inputs)} identical to CTranslate2")
    assert same == len(inputs)


def test_restrict_to_scores_equal_rescore(model, tmp_path):
    inputs = model["inputs"][:60]
    rng = random.Random(5)
    nb = model["ct2"].translate_batch(inputs, beam_size=4, num_hypotheses=3, length_penalty=0, max_batch_size=32)
    lines, pairs = [], []
    for i, r in enumerate(nb):
        hyps = [h for h in r.hypotheses]
        hyps.append([rng.choice(model["tgt"]) for _ in range(rng.randint(1, 6))])  # an unlikely one
        hyps.append(hyps[0][:-1] if len(hyps[0]) > 1 else hyps[0] + hyps[0])       # a prefix of another
        uniq = []
        for h in hyps:
            if h not in uniq:
                uniq.append(h)
        for h in uniq:
            lines.append(f"{i} ||| {' '.join(h)} ||| 0")
            pairs.append((i, h))
    restrict = tmp_path / "restrict.txt"
    restrict.write_text("\n".join(lines) + "\n")
    inp = write(tmp_path / "in.txt", inputs)
    out = tern(["translate", "-m", model["dir"], "--pretokenized", "-b", "8", "-n", "5", "--no-early-stop", "-q",
                "--restrict-to", str(restrict), inp]).stdout
    got = parse_scored(out)
    # force-decoded scores of every given hypothesis
    src = write(tmp_path / "rs_src.txt", [inputs[i] for i, _ in pairs])
    tgt = write(tmp_path / "rs_tgt.txt", [h for _, h in pairs])
    resc = tern(["rescore", "-m", model["dir"], "--pretokenized", "-s", src, "--target", tgt]).stdout.splitlines()
    total = {}
    for (i, h), line in zip(pairs, resc):
        total[(i, " ".join(h))] = float(line.split(" ||| ")[1])
    n_checked = 0
    for i in range(len(inputs)):
        mine = [(h, s) for j, h, s in got if j == i and h]
        given = {k[1]: v for k, v in total.items() if k[0] == i}
        assert mine, f"line {i}: no output"
        for h, s in mine:
            key = " ".join(h)
            assert key in given, f"line {i}: '{key}' is not one of the given hypotheses"
            assert abs(s - given[key]) <= 1e-4, f"line {i}: score {s} != rescore's {given[key]}"
            n_checked += 1
        best = max(given.values())
        assert abs(mine[0][1] - best) <= 1e-4, f"line {i}: the best given hypothesis scores {best}, got {mine[0][1]}"
    assert n_checked >= 3 * len(inputs)


def test_prune_width_infinite_is_identical(model, tmp_path):
    inp = write(tmp_path / "in.txt", model["inputs"])
    for b in ("4", "10"):
        plain = tern(["translate", "-m", model["dir"], "--pretokenized", "-b", b, "-n", "2", "-q", inp]).stdout
        inf = tern(["translate", "-m", model["dir"], "--pretokenized", "-b", b, "-n", "2", "-q", "--prune-width",
                    "1e30", inp]).stdout
        assert plain == inf


def test_bad_prefix_file_warns_and_keeps_lines(model, tmp_path):
    inputs = model["inputs"][:10]
    inp = write(tmp_path / "in.txt", inputs)
    short = write(tmp_path / "short.txt", [[model["tgt"][0]]] * 6)
    r = tern(["translate", "-m", model["dir"], "--pretokenized", "-b", "2", "--target-prefix", short, inp])
    assert len(r.stdout.split("\n")[:-1]) == len(inputs)
    assert "short.txt: 6 lines" in r.stderr and "input line 7" in r.stderr
    long_ = write(tmp_path / "long.txt", [[model["tgt"][0]]] * 12)
    r = tern(["translate", "-m", model["dir"], "--pretokenized", "-b", "2", "--target-prefix", long_, inp])
    assert len(r.stdout.split("\n")[:-1]) == len(inputs)
    assert "long.txt: more lines than the input's 10" in r.stderr
    unk = write(tmp_path / "unk.txt", [["no_such_piece"]] + [[]] * 9)
    r = tern(["translate", "-m", model["dir"], "--pretokenized", "-b", "2", "--target-prefix", unk, inp])
    assert len(r.stdout.split("\n")[:-1]) == len(inputs)
    assert "unk.txt line 1: unknown piece" in r.stderr


@pytest.mark.parametrize("beam", [1, 4, 8])
def test_terminology_constraints_all_present(model, tmp_path, beam):
    """--constraints: 0 to 3 random phrases of 1 to 3 pieces per line; every one appears in the output."""
    import json
    rng = random.Random(beam + 17)
    inputs = model["inputs"]
    cons = [[" ".join(rng.choice(model["tgt"]) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(0, 3))]
            for _ in inputs]
    cf = tmp_path / "cons.jsonl"
    cf.write_text("".join(json.dumps(c) + "\n" for c in cons))
    r = tern(["translate", "-m", model["dir"], "--pretokenized", "-b", str(beam), "-q", "--constraints", str(cf),
              write(tmp_path / "in.txt", inputs)])
    out = r.stdout.split("\n")[:-1]
    assert len(out) == len(inputs)
    total = 0
    for i, (o, c) in enumerate(zip(out, cons)):
        for p in c:
            total += 1
            assert f" {p} " in f" {o} ", f"line {i}: constraint '{p}' missing from '{o}'"
    assert total > 150


def test_constraints_bad_input_warns(model, tmp_path):
    inputs = model["inputs"][:6]
    t = model["tgt"]
    lines = ['["%s"]' % t[0], "not json", '["%s %s %s %s"]' % (t[1], t[2], t[3], t[4]), '["no_such_piece"]', "[]"]
    cf = tmp_path / "bad.jsonl"
    cf.write_text("\n".join(lines) + "\n")  # 5 lines for 6 inputs
    r = tern(["translate", "-m", model["dir"], "--pretokenized", "-b", "3", "--max-decoding-length", "4",
              "--constraints", str(cf), write(tmp_path / "in.txt", inputs)])
    out = r.stdout.split("\n")[:-1]
    assert len(out) == len(inputs)
    assert "bad.jsonl line 2: not a JSON list" in r.stderr
    assert "bad.jsonl line 3: constraint 1 (4 tokens) is longer than the maximum length (4)" in r.stderr
    assert "bad.jsonl line 4: unknown piece" in r.stderr
    assert "bad.jsonl: 5 lines, but the input has more: input line 6" in r.stderr
    assert t[0] in out[0].split()


def test_terminology_raises_bleu_on_shipped_model(data_dir, tmp_path):
    """The shipped en-de model on the first 200 lines of Multi30k test_2016_flickr: constraints are up to
    two capitalized reference words (>= 5 letters) missing from the unconstrained output; all appear
    (at a word start: the pieces of a phrase may go on into a compound),
    and sacreBLEU rises."""
    import json
    import re
    sacrebleu = pytest.importorskip("sacrebleu")
    mdir = os.path.join(os.path.dirname(HERE), "models", "en-de")
    if not os.path.isdir(mdir):
        pytest.skip("models/en-de is not there")
    src = [l for l in open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8")][:200]
    ref = [l.rstrip("\n") for l in open(os.path.join(data_dir, "multi30k", "test_2016_flickr.de"), encoding="utf-8")][:200]
    sp = tmp_path / "src.en"
    sp.write_text("".join(src), encoding="utf-8")
    base = tern(["translate", "-m", mdir, "-b", "4", "-t", "1", "-q", str(sp)]).stdout.split("\n")[:-1]
    cons = []
    for r_, b in zip(ref, base):
        have = set(re.findall(r"\w+", b))
        cons.append([w for w in re.findall(r"\w+", r_) if len(w) >= 5 and w[0].isupper() and w not in have][:2])
    cf = tmp_path / "terms.jsonl"
    cf.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cons), encoding="utf-8")
    out = tern(["translate", "-m", mdir, "-b", "4", "-t", "1", "-q", "--constraints", str(cf), str(sp)]).stdout
    out = out.split("\n")[:-1]
    n = sum(len(c) for c in cons)
    hit = sum(re.search(r"(?<!\w)" + re.escape(w), o) is not None for o, c in zip(out, cons) for w in c)
    b0 = sacrebleu.corpus_bleu(base, [ref]).score
    b1 = sacrebleu.corpus_bleu(out, [ref]).score
    print(f"\nterminology constraints: {hit}/{n} present; BLEU {b0:.2f} -> {b1:.2f}")
    assert n > 100 and hit == n
    assert b1 > b0 + 1.0


def test_per_sentence_data_follow_their_lines_across_workers(model, tmp_path):
    """Prefixes and constraints reach the right sentence whatever the batching: 2 workers and small
    batches (sentences sorted by length, batches taken in any order) give the output of 1 worker and
    one batch."""
    import json
    rng = random.Random(4)
    inputs = model["inputs"]
    prefixes = [[rng.choice(model["tgt"]) for _ in range(rng.randint(0, 2))] for _ in inputs]
    cons = [[rng.choice(model["tgt"])] if rng.random() < 0.5 else [] for _ in inputs]
    cf = tmp_path / "c.jsonl"
    cf.write_text("".join(json.dumps(c) + "\n" for c in cons))
    args = ["translate", "-m", model["dir"], "--pretokenized", "-b", "3", "-q", "--target-prefix",
            write(tmp_path / "p.txt", prefixes), "--constraints", str(cf), write(tmp_path / "in.txt", inputs)]
    one = tern(args + ["-w", "1", "-t", "1"]).stdout
    many = tern(args + ["-w", "2", "-t", "1", "--max-batch-tokens", "40", "--read-ahead", "2"]).stdout
    assert one == many
    for o, p, c in zip(one.split("\n"), prefixes, cons):
        assert o.split()[:len(p)] == p and all(x in o.split() for x in c)
