"""LMBR decoding (src/search/lmbr.c) against a brute-force Python reference.

tests/tools/search_driver runs Tern's greedy/beam search with the LMBR processor over a mock model
whose logits are a hash of (seed, sentence, target prefix) -- recomputed here bit for bit in numpy
float32 -- and random evidence (n-best lists of 1 to 3 "systems" with random scores and weights).
The reference computes, for each returned token sequence y, independently of lmbr.c:
  p_s(e) = softmax(alpha * score) within system s;  p(e) = sum_s w_s p_s(e) / sum_s w_s (systems with
  evidence for the sentence);  P(u) = sum_{e contains u} p(e), n = 1..4 (presence);
  theta_0 = -1, theta_n = 1 / (4 p r^(n-1));
  raw(y) = sum_t lambda * log P_NMT(y_t | y_<t) + [y_t != EOS] (theta_0 + sum_n theta_n P(y_{t-n+1..t}))
with log P_NMT from a float64 log-softmax (EOS masked before it while t < min length), and the
score = raw / length^lp (length counting EOS). Assertions:
  every returned hypothesis: |score - reference| <= 1e-5 and |raw - reference raw| <= 1e-5;
  lambda = 1e5: the output equals plain beam search's (tokens, every sentence of every case);
  LMBR at lambda 0.5 changes some outputs (the check is not vacuous).
"""
import os
import random
import subprocess

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.environ.get("SEARCH_DRIVER", os.path.join(os.path.dirname(HERE), "build", "tests", "tools", "search_driver"))
M64 = (1 << 64) - 1


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def mock_logits(seed, n, prefix, V, eos):
    h = mix64((seed * 0xD1B54A32D192ED03 + (n + 1) * 0x8CB92BA72F3D8DD7) & M64)
    for t in prefix:
        h = mix64((h + (t + 1) * 0xA24BAED4963EE407) & M64)
    out = np.array([2.0 * (2.0 * ((mix64(h ^ (0x1000 + v)) >> 11) * 2.0 ** -53) - 1.0) for v in range(V)],
                   dtype=np.float32)
    out[eos] = out[eos] + np.float32(-1.0 + 0.4 * len(prefix))
    return out


def log_softmax(x):
    x = x.astype(np.float64)
    m = np.max(x)
    return x - m - np.log(np.sum(np.exp(x - m)))


def ngram_posteriors(evidence, weights, alpha):
    """evidence: {system: [(score, tokens)]} for one sentence."""
    present = [s for s in evidence if evidence[s]]
    wsum = sum(weights[s] for s in present)
    post = {}
    for s in present:
        scores = np.array([alpha * sc for sc, _ in evidence[s]], dtype=np.float64)
        p = np.exp(scores - scores.max())
        p /= p.sum()
        for pe, (_, toks) in zip(p, evidence[s]):
            grams = {tuple(toks[i:i + n]) for n in range(1, 5) for i in range(len(toks) - n + 1)}
            for g in grams:
                post[g] = post.get(g, 0.0) + weights[s] / wsum * pe
    return post


def ref_score(c, n, y, ended, post, lmbr=True, clip=False, sum_gain=False):
    """clip: an n-gram earns theta_n P(u) only at its first occurrence in y. sum_gain: the length
    penalty divides only lambda * sum log P_NMT; the gain (the theta terms) is added undivided."""
    theta = [-1.0] + [1.0 / (4 * c["p"] * c["r"] ** (k - 1)) for k in range(1, 5)]
    raw = 0.0
    gain = 0.0
    seen = set()
    for t in range(len(y) + ended):
        tok = y[t] if t < len(y) else c["eos"]
        x = mock_logits(c["seed"], n, y[:t], c["V"], c["eos"])
        if t < c["minlen"]:
            x[c["eos"]] = -np.inf
        lp = log_softmax(x)[tok]
        if not lmbr:
            raw += lp
            continue
        raw += c["lambda"] * lp
        if tok != c["eos"]:
            raw += theta[0]
            gain += theta[0]
            for k in range(1, 5):
                if t >= k - 1:
                    u = tuple(y[t - k + 1:t + 1])
                    if clip and u in seen:
                        continue
                    seen.add(u)
                    raw += theta[k] * post.get(u, 0.0)
                    gain += theta[k] * post.get(u, 0.0)
    L = len(y) + ended
    div = L ** c["lp"] if c["lp"] else 1.0
    if sum_gain:
        return (raw - gain) / div + gain, raw
    return raw / div, raw


def run_driver(c, use_lmbr, lam, evfile, clip=False, sum_gain=False):
    args = [DRIVER] + [str(v) for v in (c["seed"], c["V"], c["bos"], c["eos"], c["B"], c["nhyp"], c["N"],
                                        c["maxlen"], c["minlen"], c["lp"], c["early"], int(use_lmbr), lam,
                                        c["p"], c["r"], c["alpha"], evfile, int(clip), int(sum_gain))]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        head, toks = line.split("|")
        n, k, score, raw = head.split()
        out.setdefault(int(n), []).append((float(score), float(raw), [int(t) for t in toks.split()]))
    return out


def make_case(seed, tmp_path):
    rng = random.Random(seed)
    V = rng.randint(5, 9)
    bos = rng.randrange(V)
    eos = rng.choice([v for v in range(V) if v != bos])
    B = rng.choice([1, 2, 3, 4, 6])
    c = {"seed": seed * 7919 + 1, "V": V, "bos": bos, "eos": eos, "B": B, "nhyp": rng.randint(1, B),
         "N": rng.randint(1, 4), "maxlen": rng.randint(2, 8), "minlen": rng.randint(0, 2),
         "lp": rng.choice([0.0, 0.0, 1.0]), "early": rng.randint(0, 1), "lambda": rng.choice([0.5, 0.25, 1.0]),
         "p": rng.uniform(0.3, 0.9), "r": rng.uniform(0.4, 0.9), "alpha": rng.choice([0.5, 1.0, 3.0])}
    S = rng.randint(1, 3)
    weights = [round(rng.uniform(0.2, 2.0), 3) for _ in range(S)]
    words = [v for v in range(V) if v not in (eos, bos)] + [bos]  # the start token may occur as a word
    evidence = {}
    lines = ["W " + " ".join(str(w) for w in weights)]
    for n in range(c["N"]):
        evidence[n] = {}
        for s in range(S):
            K = 0 if rng.random() < 0.15 else rng.randint(1, 8)
            evidence[n][s] = []
            for _ in range(K):
                toks = [rng.choice(words) for _ in range(rng.randint(0, 7))]
                score = round(rng.uniform(-12, 0), 4)
                evidence[n][s].append((score, toks))
                lines.append(f"{n} {s} {score} " + " ".join(map(str, toks)))
    ev = tmp_path / f"ev{seed}.txt"
    ev.write_text("\n".join(lines) + "\n")
    return c, evidence, weights, str(ev)


@pytest.fixture(scope="module")
def driver():
    if not os.path.exists(DRIVER):
        pytest.fail(f"{DRIVER} is not built (run make)")
    return DRIVER


def test_lmbr_scores_equal_reference(driver, tmp_path):
    checked = changed = 0
    for seed in range(150):
        c, evidence, weights, ev = make_case(seed, tmp_path)
        got = run_driver(c, True, c["lambda"], ev)
        plain = run_driver(c, False, 1.0, ev)
        for n in range(c["N"]):
            post = ngram_posteriors(evidence[n], weights, c["alpha"])
            assert n in got and got[n], f"seed {seed} sentence {n}: no hypothesis"
            for score, raw, y in got[n]:
                ended = int(len(y) < c["maxlen"])
                rs, rr = ref_score(c, n, y, ended, post)
                assert abs(score - rs) <= 1e-5 and abs(raw - rr) <= 1e-5, \
                    f"seed {seed} case {c} sentence {n} hyp {y}: score {score} raw {raw}, reference {rs} {rr}"
                checked += 1
            changed += got[n][0][2] != plain[n][0][2]
    print(f"\n{checked} hypotheses checked; LMBR changed the best output of {changed} sentences")
    assert checked > 300
    assert changed > 10


def test_lmbr_clip_scores_equal_reference(driver, tmp_path):
    """--lmbr-clip: every returned hypothesis scores as the reference in which each n-gram earns
    theta_n P(u) at its first occurrence only (1e-5); some outputs differ from unclipped LMBR, and
    the hypotheses with a repeated evidence n-gram score differently from the unclipped reference."""
    checked = changed = repeated = 0
    for seed in range(300, 420):
        c, evidence, weights, ev = make_case(seed, tmp_path)
        got = run_driver(c, True, c["lambda"], ev, clip=True)
        plain = run_driver(c, True, c["lambda"], ev, clip=False)
        for n in range(c["N"]):
            post = ngram_posteriors(evidence[n], weights, c["alpha"])
            assert n in got and got[n], f"seed {seed} sentence {n}: no hypothesis"
            for score, raw, y in got[n]:
                ended = int(len(y) < c["maxlen"])
                rs, rr = ref_score(c, n, y, ended, post, clip=True)
                assert abs(score - rs) <= 1e-5 and abs(raw - rr) <= 1e-5, \
                    f"seed {seed} case {c} sentence {n} hyp {y}: score {score} raw {raw}, reference {rs} {rr}"
                checked += 1
                repeated += abs(rr - ref_score(c, n, y, ended, post, clip=False)[1]) > 1e-6
            changed += got[n][0][2] != plain[n][0][2]
    print(f"\n{checked} hypotheses checked ({repeated} with a repeated evidence n-gram); clipping changed "
          f"the best output of {changed} sentences")
    assert checked > 300 and repeated > 20 and changed > 5


def test_lmbr_sum_gain_scores_equal_reference(driver, tmp_path):
    """--lmbr-sum-gain: every returned hypothesis scores (raw - gain) / length^lp + gain, the gain
    (the theta terms) kept out of the length penalty, as the reference (1e-5), with and without
    clipping; with length penalty 1 some outputs differ from the plain LMBR search (the check is not
    vacuous), with length penalty 0 none do (same tokens, scores within 1e-5)."""
    checked = changed = same0 = total0 = 0
    for seed in range(500, 620):
        c, evidence, weights, ev = make_case(seed, tmp_path)
        if seed % 3 == 0:
            c["lp"] = 0.0
        elif c["lp"] == 0.0:
            c["lp"] = 1.0
        clip = seed % 2 == 1
        got = run_driver(c, True, c["lambda"], ev, clip=clip, sum_gain=True)
        base = run_driver(c, True, c["lambda"], ev, clip=clip, sum_gain=False)
        for n in range(c["N"]):
            post = ngram_posteriors(evidence[n], weights, c["alpha"])
            assert n in got and got[n], f"seed {seed} sentence {n}: no hypothesis"
            for score, raw, y in got[n]:
                ended = int(len(y) < c["maxlen"])
                rs, rr = ref_score(c, n, y, ended, post, clip=clip, sum_gain=True)
                assert abs(score - rs) <= 1e-5 and abs(raw - rr) <= 1e-5, \
                    f"seed {seed} case {c} sentence {n} hyp {y}: score {score} raw {raw}, reference {rs} {rr}"
                checked += 1
            if c["lp"] == 0.0:
                total0 += 1
                same0 += [h[2] for h in got[n]] == [h[2] for h in base[n]] and \
                    all(abs(a[0] - b[0]) <= 1e-5 for a, b in zip(got[n], base[n]))
            else:
                changed += got[n][0][2] != base[n][0][2]
    print(f"\n{checked} hypotheses checked; the sum gain changed the best output of {changed} sentences "
          f"(length penalty 1); {same0} of {total0} identical at length penalty 0")
    assert checked > 300 and changed > 5 and same0 == total0


def test_lmbr_large_lambda_equals_plain_search(driver, tmp_path):
    same = total = 0
    for seed in range(150, 230):
        c, evidence, weights, ev = make_case(seed, tmp_path)
        big = run_driver(c, True, 1e5, ev)
        plain = run_driver(c, False, 1.0, ev)
        for n in range(c["N"]):
            total += 1
            a, b = [h[2] for h in big[n]], [h[2] for h in plain[n]]
            assert a[0] == b[0], f"seed {seed} sentence {n}: lambda 1e5 gives {a[0]}, plain search {b[0]}"
            same += a == b
    print(f"\n{total} sentences: best output identical; whole n-best identical in {same}")


def peer_setup(tmp_path):
    """A random-weight peer model, 40 random inputs, and its CTranslate2 n-best lists (6-best and
    3-best with length penalty 1) as the evidence of two systems."""
    import sys
    sys.path.insert(0, os.path.join(HERE, "peer"))
    os.environ.setdefault("CT2_USE_MKL", "1")
    ctranslate2 = pytest.importorskip("ctranslate2")
    import make_models
    shape = list(make_models.SHAPES_BY_NAME)[0]
    d = str(tmp_path / "model")
    make_models.make_model(shape, d)
    ct2 = ctranslate2.Translator(d, device="cpu", intra_threads=1)
    rng = random.Random(11)
    specials = ("<unk>", "<s>", "</s>", "<blank>", "<pad>")
    src = [t for t in make_models.read_vocabulary(d, "source") if t not in specials]
    inputs = [[rng.choice(src) for _ in range(rng.randint(1, 12))] for _ in range(40)]
    nb = ct2.translate_batch(inputs, beam_size=6, num_hypotheses=6, length_penalty=0, return_scores=True)
    nb2 = ct2.translate_batch(inputs, beam_size=3, num_hypotheses=3, length_penalty=1, return_scores=True)
    (tmp_path / "in.txt").write_text("".join(" ".join(s) + "\n" for s in inputs))
    return d, inputs, nb, nb2


def check_lmbr_scores(tern_bin, d, tmp_path, rows, c, evidence_of, weights):
    """Every output row (i, hypothesis, score) scores c["lambda"] * log P_NMT + the LMBR terms of
    the reference posteriors (1e-4); log P_NMT from Tern's restricted decoding, whose scores equal
    force decoding (tests/test_search_constraints.py), under the same minimum length (1)."""
    (tmp_path / "outs.txt").write_text("".join(f"{i} ||| {h} ||| 0\n" for i, h, _ in rows))
    rr = subprocess.run([tern_bin, "translate", "-m", d, "--pretokenized", "-b", "12", "-n", "3", "--no-early-stop",
                         "--min-length", "1", "--restrict-to", str(tmp_path / "outs.txt"), str(tmp_path / "in.txt")],
                        capture_output=True, text=True, timeout=300)
    assert rr.returncode == 0, rr.stderr
    nmt = {}
    for line in rr.stdout.splitlines():
        i, h, sc = line.split(" ||| ")
        nmt[(int(i), h)] = float(sc)
    theta = [-1.0] + [1.0 / (4 * c["p"] * c["r"] ** (k - 1)) for k in range(1, 5)]
    for i_s, hyp, score in rows:
        i, y = int(i_s), hyp.split()
        post = ngram_posteriors(evidence_of(i), weights, c["alpha"])
        ref = c["lambda"] * nmt[(i, hyp)]
        for t, tok in enumerate(y):
            ref += theta[0] + sum(theta[k] * post.get(tuple(y[t - k + 1:t + 1]), 0.0) for k in range(1, 5) if t >= k - 1)
        assert abs(float(score) - ref) <= 1e-4, f"line {i} '{hyp}': score {score}, reference {ref}"
    return len(rows)


def test_lmbr_cli_on_peer_model(tmp_path):
    """`tern translate --lmbr-evidence` end to end on a random-weight peer model: the evidence is two
    n-best files (Tern's format and Moses' format, with per-system weights); every output's score
    equals the reference LMBR score of its pieces (1e-4), log P_NMT taken from restricted decoding."""
    tern_bin = os.environ.get("TERN_BIN", os.path.join(os.path.dirname(HERE), "build", "tern"))
    d, inputs, nb, nb2 = peer_setup(tmp_path)
    ev1, ev2 = tmp_path / "ev1.nbest", tmp_path / "ev2.moses"
    ev1.write_text("".join(f"{i} ||| {' '.join(h)} ||| {s:.6f}\n" for i, r in enumerate(nb)
                           for h, s in zip(r.hypotheses, r.scores)) + "45 ||| at ||| -1.0\n")  # beyond the input
    ev2.write_text("".join(f"{i} ||| {' '.join(h)} ||| LM0= -1.5 TM0= 2 ||| {s:.6f}\n" for i, r in enumerate(nb2)
                           for h, s in zip(r.hypotheses, r.scores) if i != 3))  # no evidence for line 3
    c = {"lambda": 0.7, "p": 0.6, "r": 0.8, "alpha": 0.8}
    r = subprocess.run([tern_bin, "translate", "-m", d, "--pretokenized", "-b", "4", "-n", "3", "--lmbr-evidence",
                        str(ev1), "--lmbr-evidence", str(ev2), "--lmbr-weights", "1,0.5", "--lmbr-lambda",
                        str(c["lambda"]), "--lmbr-p", str(c["p"]), "--lmbr-r", str(c["r"]), "--lmbr-alpha",
                        str(c["alpha"]), str(tmp_path / "in.txt")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "ev2.moses: no evidence for input line 4" in r.stderr
    assert f"ev1.nbest line {6 * len(inputs) + 1}: evidence for sentence 40 and beyond" in r.stderr
    rows = [line.split(" ||| ") for line in r.stdout.splitlines()]
    assert len(rows) == 3 * len(inputs)

    def evidence_of(i):
        return {0: [(s, h) for h, s in zip(nb[i].hypotheses, nb[i].scores)],
                1: [] if i == 3 else [(s, h) for h, s in zip(nb2[i].hypotheses, nb2[i].scores)]}

    assert check_lmbr_scores(tern_bin, d, tmp_path, rows, c, evidence_of, {0: 1.0, 1: 0.5}) == 3 * len(inputs)


def test_lmbr_default_lambda_is_half_over_models(tmp_path):
    """Without --lmbr-lambda, lambda is 0.5 divided by the number of models (the paper's setting):
    one -m scores as the reference with lambda 0.5, and an ensemble of the same model twice (whose
    mean log-probabilities equal the model's) as the reference with lambda 0.25 (1e-4); each output
    is byte-identical to the run with that lambda given explicitly, and the two defaults differ."""
    tern_bin = os.environ.get("TERN_BIN", os.path.join(os.path.dirname(HERE), "build", "tern"))
    d, inputs, nb, _ = peer_setup(tmp_path)
    ev = tmp_path / "ev.nbest"
    ev.write_text("".join(f"{i} ||| {' '.join(h)} ||| {s:.6f}\n" for i, r in enumerate(nb)
                          for h, s in zip(r.hypotheses, r.scores)))

    def run(models, extra):
        r = subprocess.run([tern_bin, "translate"] + [a for m in models for a in ("-m", m)] +
                           ["--pretokenized", "-b", "4", "-n", "3", "--lmbr-evidence", str(ev), "-q"] + extra +
                           [str(tmp_path / "in.txt")], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return r.stdout

    c = {"p": 0.85, "r": 0.7, "alpha": 1.0}  # the defaults of --lmbr-p, --lmbr-r, --lmbr-alpha
    outs = {}
    for models, lam in (([d], 0.5), ([d, d], 0.25)):
        default = run(models, [])
        assert default == run(models, ["--lmbr-lambda", str(lam)]), f"{len(models)} model(s): default != {lam}"
        rows = [line.split(" ||| ") for line in default.splitlines()]
        assert len(rows) == 3 * len(inputs)
        n = check_lmbr_scores(tern_bin, d, tmp_path, rows, dict(c, **{"lambda": lam}),
                              lambda i: {0: [(s, h) for h, s in zip(nb[i].hypotheses, nb[i].scores)]}, {0: 1.0})
        assert n == 3 * len(inputs)
        outs[len(models)] = default
    assert outs[1] != outs[2]


def test_lmbr_tune_reports_reproducible_best(tmp_path):
    """`tern lmbr-tune` with the shipped en-de model on 40 Multi30k val lines (evidence: its own 6-best
    and 3-best lists, their weights tuned too with --grid-weights): the best setting it prints is
    the highest BLEU of the settings it printed, and `tern translate` with those options gives that
    BLEU under sacreBLEU (as does the plain line)."""
    sacrebleu = pytest.importorskip("sacrebleu")
    root = os.path.dirname(HERE)
    tern_bin = os.environ.get("TERN_BIN", os.path.join(root, "build", "tern"))
    mdir = os.path.join(root, "models", "en-de")
    data = os.environ.get("TERN_DATA", os.path.join(root, "..", "shared", "data"))
    if not os.path.isdir(mdir) or not os.path.isdir(data):
        pytest.skip("models/en-de or the shared data is not there")
    src = open(os.path.join(data, "multi30k", "val.en"), encoding="utf-8").read().split("\n")[:40]
    refs = open(os.path.join(data, "multi30k", "val.de"), encoding="utf-8").read().split("\n")[:40]
    (tmp_path / "in.txt").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n", encoding="utf-8")
    nb = subprocess.run([tern_bin, "translate", "-m", mdir, "-b", "6", "-n", "6", "-q", "-t", "1",
                         str(tmp_path / "in.txt")], capture_output=True, text=True, timeout=300)
    assert nb.returncode == 0, nb.stderr
    (tmp_path / "ev.nbest").write_text(nb.stdout, encoding="utf-8")
    nb3 = subprocess.run([tern_bin, "translate", "-m", mdir, "-b", "3", "-n", "3", "-q", "-t", "1",
                          str(tmp_path / "in.txt")], capture_output=True, text=True, timeout=300)
    assert nb3.returncode == 0, nb3.stderr
    (tmp_path / "ev3.nbest").write_text(nb3.stdout, encoding="utf-8")
    r = subprocess.run([tern_bin, "lmbr-tune", "-m", mdir, "-s", str(tmp_path / "in.txt"), "-r",
                        str(tmp_path / "ref.txt"), "--lmbr-evidence", str(tmp_path / "ev.nbest"), "--lmbr-evidence",
                        str(tmp_path / "ev3.nbest"), "--grid-alpha", "0.5,2", "--grid-p", "0.7,0.9", "--grid-r",
                        "0.6,0.8", "--grid-lambda", "0.3,1,3", "--grid-weights", "0.3,3", "-b", "4", "-t", "1"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    tried = [float(l.rsplit("BLEU", 1)[1]) for l in lines if l.startswith("alpha ")]
    best_line = [l for l in lines if l.startswith("best: ")][0]
    plain_line = [l for l in lines if l.startswith("plain beam search")][0]
    opts = best_line.split("BLEU")[0].split()[1:]
    best_bleu = float(best_line.split("BLEU")[1].split()[0])
    print("\n" + r.stdout)
    assert len(tried) >= 10 and best_bleu == max(tried) and len(set(tried)) > 1
    assert opts[8] == "--lmbr-weights" and opts[9].startswith("1,") and "weights 1," in lines[1]

    def bleu_of(extra):
        out = subprocess.run([tern_bin, "translate", "-m", mdir, "-b", "4", "-q", "-t", "1", str(tmp_path / "in.txt")]
                             + extra, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return sacrebleu.corpus_bleu(out.stdout.split("\n")[:-1], [refs]).score

    ev = ["--lmbr-evidence", str(tmp_path / "ev.nbest"), "--lmbr-evidence", str(tmp_path / "ev3.nbest")]
    assert abs(bleu_of(ev + opts) - best_bleu) <= 0.005 + 1e-9
    assert abs(bleu_of([]) - float(plain_line.split("BLEU")[1])) <= 0.005 + 1e-9
