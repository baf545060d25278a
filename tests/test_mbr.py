"""`tern mbr` (src/search/mbr.c, tools/cmd_mbr.c) against a brute-force Python reference built on
sacreBLEU's sentence_bleu / sentence_chrf.

N-best lists are Multi30k German sentences with random edits (dropped, repeated, swapped and
recased words, punctuation), with random scores, in Tern's and Moses' formats, one or two files with
weights. The reference computes posteriors p(e) = sum_f w_f softmax(alpha * score)_f(e) / sum_f w_f
(identical texts merged) and E[U(h)] = sum_e p(e) U(h, e) with sacrebleu.sentence_bleu(h, [e]) or
sentence_chrf(h, [e]); Tern's choice must have the reference's highest expected utility (1e-9, ties
aside) and its printed utility must equal the reference's (1e-5: scores are read as float32).
Speed: 100-best lists of 1,000 lines reranked in seconds (printed; bar 60 s on a shared machine).
"""
import math
import os
import random
import subprocess
import time

import pytest

sacrebleu = pytest.importorskip("sacrebleu")
from sacrebleu.metrics import BLEU, CHRF  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERN = os.environ.get("TERN_BIN", os.path.join(ROOT, "build", "tern"))


def perturb(rng, s):
    w = s.split()
    for _ in range(rng.randint(0, 4)):
        op = rng.randrange(5)
        if not w:
            break
        i = rng.randrange(len(w))
        if op == 0 and len(w) > 1:
            del w[i]
        elif op == 1:
            w.insert(i, w[i])
        elif op == 2 and len(w) > 1:
            j = rng.randrange(len(w))
            w[i], w[j] = w[j], w[i]
        elif op == 3:
            w[i] = w[i].upper() if rng.random() < 0.5 else w[i].lower()
        else:
            w[i] = w[i] + rng.choice([",", ".", "!", " -", "s"])
    return " ".join(w)


def make_lists(data_dir, n, K, seed, files=1):
    rng = random.Random(seed)
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.de"), encoding="utf-8") as f:
        sents = [next(f).strip() for _ in range(n)]
    lists = []
    for f in range(files):
        per = []
        for i, s in enumerate(sents):
            k = 0 if (files > 1 and f == 1 and i % 7 == 3) else rng.randint(1, K)
            per.append([(perturb(rng, s), round(rng.uniform(-8, 0), 4)) for _ in range(k)])
        lists.append(per)
    return lists


def write_lists(tmp_path, lists):
    paths = []
    for f, per in enumerate(lists):
        p = tmp_path / f"sys{f}.nbest"
        lines = []
        for i, hyps in enumerate(per):
            for h, s in hyps:
                lines.append(f"{i} ||| {h} ||| {s}" if f == 0 else f"{i} ||| {h} ||| F0= 1.5 -2 ||| {s}")
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(str(p))
    return paths


def reference(lists, weights, alpha, metric):
    bleu = BLEU(effective_order=True)
    chrf = CHRF()
    out = []
    for i in range(len(lists[0])):
        present = [f for f in range(len(lists)) if lists[f][i]]
        wsum = sum(weights[f] for f in present)
        post = {}
        order = []
        for f in present:
            sc = [alpha * s for _, s in lists[f][i]]
            m = max(sc)
            z = sum(math.exp(x - m) for x in sc)
            for (h, _), x in zip(lists[f][i], sc):
                if h not in post:
                    post[h] = 0.0
                    order.append(h)
                post[h] += weights[f] / wsum * math.exp(x - m) / z
        utils = []
        for h in order:
            u = 0.0
            for e in order:
                if metric == "bleu":
                    u += post[e] * bleu.sentence_score(h, [e]).score
                else:
                    u += post[e] * chrf.sentence_score(h, [e]).score
            utils.append(u)
        out.append((order, utils))
    return out


@pytest.mark.parametrize("metric,files", [("bleu", 1), ("chrf", 1), ("bleu", 2), ("chrf", 2)])
def test_mbr_equals_sacrebleu_reference(data_dir, tmp_path, metric, files):
    lists = make_lists(data_dir, 60, 12, seed=hash((metric, files)) % 1000, files=files)
    weights = [1.0, 0.4][:files]
    alpha = 0.7
    args = [TERN, "mbr", "--metric", metric, "--alpha", str(alpha), "--scores"]
    if files > 1:
        args += ["--weights", ",".join(map(str, weights))]
    r = subprocess.run(args + write_lists(tmp_path, lists), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = [line.split(" ||| ") for line in r.stdout.split("\n")[:-1]]
    ref = reference(lists, weights, alpha, metric)
    assert len(rows) == len(ref)
    for (i, hyp, u), (order, utils) in zip(rows, ref):
        best = max(utils)
        assert hyp in order, f"sentence {i}: '{hyp}' is not in the n-best list"
        got = utils[order.index(hyp)]
        assert got >= best - 1e-9, f"sentence {i}: chose utility {got}, the best is {best}"
        assert abs(float(u) - got) <= 1e-5, f"sentence {i}: printed utility {u}, reference {got}"
    if files > 1:
        assert "sys1.nbest: no hypothesis for sentence 3" in r.stderr


def test_mbr_missing_lines_keep_one_line_per_sentence(data_dir, tmp_path):
    lists = make_lists(data_dir, 10, 4, seed=3)
    lists[0][4] = []
    r = subprocess.run([TERN, "mbr", "--lines", "12"] + write_lists(tmp_path, lists), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    out = r.stdout.split("\n")[:-1]
    assert len(out) == 12 and out[4] == "" and out[10] == "" and out[11] == ""
    assert "sys0.nbest: no hypothesis for sentence 4" in r.stderr
    assert "no hypothesis for sentence 11" in r.stderr


def test_mbr_speed_100best_1000_lines(data_dir, tmp_path):
    lists = make_lists(data_dir, 1000, 100, seed=5)
    for per in lists:
        for hyps in per:
            while len(hyps) < 100:
                hyps.append(hyps[len(hyps) % max(1, len(hyps))])
    paths = write_lists(tmp_path, lists)
    for metric in ("bleu", "chrf"):
        t0 = time.time()
        r = subprocess.run([TERN, "mbr", "--metric", metric] + paths, capture_output=True, text=True, timeout=600)
        dt = time.time() - t0
        assert r.returncode == 0, r.stderr
        assert len(r.stdout.split("\n")[:-1]) == 1000
        print(f"\ntern mbr --metric {metric}: 1000 lines x 100-best in {dt:.2f} s")
        assert dt < 60


def test_malformed_nbest_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.nbest"
    bad.write_text("0 ||| ein Haus ||| -1.5\nx ||| ein Hund ||| -2\n")
    r = subprocess.run([TERN, "mbr", str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "bad.nbest line 2: the sentence index 'x' is not a number" in r.stderr
    bad.write_text("0 ||| ein Haus ||| -1.5\n1 ||| ein Hund ||| zwei\n")
    r = subprocess.run([TERN, "mbr", str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "bad.nbest line 2: the score 'zwei' is not a number" in r.stderr
    bad.write_text("0 ||| ein Haus\n")
    r = subprocess.run([TERN, "mbr", str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "bad.nbest line 1: expected" in r.stderr
