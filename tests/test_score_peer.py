"""`tern score` against its peers, in the same process: sacreBLEU 2.6 (BLEU, chrF, chrF++, paired
bootstrap) and NLTK (GNMT's GLEU). Every expected number below is computed here by the peer.

Tolerance: scores and precisions within 1e-9 (absolute, in 0..100 units) of sacreBLEU's; n-gram
counts, lengths and p-values equal. (In practice tern prints the same double: the max |diff| is
0; `tern score --json` prints 17 significant digits.)

The binary is $TERN_BIN when set, else build/tern; shared data through $TERN_DATA (conftest)."""
import json
import os
import random
import subprocess

import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern")
TOL = 1e-9
TOKENIZERS = ["13a", "intl", "char", "none"]


@pytest.fixture(scope="module")
def tern():
    assert os.path.exists(TERN), f"{TERN} is missing: run make (or set TERN_BIN)"
    return TERN


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(l + "\n" for l in lines))
    return str(path)


def run(args, input=None, check=True):
    r = subprocess.run(args, capture_output=True, input=input, timeout=120)
    if check:
        assert r.returncode == 0, f"{args} failed ({r.returncode}): {r.stderr.decode(errors='replace')}"
    return r


def tern_json(tern, hyp_path, ref_paths, *opts):
    args = [tern, "score", "--json", hyp_path, *opts]
    for r in ref_paths:
        args += ["-r", r]
    out = run(args).stdout.decode()
    return json.loads(out)


def as_cli(lines):
    """What sacrebleu's CLI hands to the metric: lines read with newline='\\n', rstrip()-ed."""
    return [l.rstrip() for l in lines]


# ---------------------------------------------------------------------------------------------
# The hand-made hypothesis/reference sets: (hypotheses, [reference stream, ...]).

def _fuzz_set(seed, n, nref):
    rng = random.Random(seed)
    alphabet = list("abcAB .,-'&;:!?\"()0123 ") + [
        "&amp;", "&quot;", "&lt;", "&gt;", "<skipped>", "1,000", "3.14", "ü", "ß", "İ", "Σ",
        "ΑΣ", "é", "\u00a0", "\u3000", "\u2009", "\u2028", "\x85", "\t", "—", "€", "«", "»",
        "…", "٣", "²", "\u0301", "ǅ", "ﬁ", "\r", "\x0b", "\x1c", "\u200b", "😀"]

    def line():
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25)))

    def mutate(s):
        l = list(s)
        for _ in range(rng.randint(0, 4)):
            if l and rng.random() < 0.5:
                del l[rng.randrange(len(l))]
            else:
                l.insert(rng.randint(0, len(l)), rng.choice(alphabet))
        return "".join(l)

    refs = [[line() for _ in range(n)] for _ in range(nref)]
    hyps = [mutate(refs[0][i]) if rng.random() < 0.8 else line() for i in range(n)]
    return hyps, refs


SETS = {
    "punctuation": (
        ["Hello, world! (Really?) \"Quoted\" {braces} [x] a/b; c:d @home #tag $5 %6 ^ _ ` ~ | \\",
         "Wait... what?! Yes: no; maybe.", "It's John's book, isn't it?"],
        [["Hello world! (really?) \"quoted\" {braces} [y] a/b; c:d @home #tag $5 %6 ^ _ ` ~ | \\",
          "Wait ... what ?! Yes : no ; maybe .", "It is John's book, is it not?"]]),
    "numbers_with_separators": (
        ["It cost 1,000,000 dollars and 3.14 euros in 2023.", "Between 12-15 years, 1.000,50 €",
         "Call 555-1234 or +49 (0)30 123 456.", "Version 2.0.1, 10.5% and 1,5 %"],
        [["It cost 1,000,000 dollars and 3.15 euros in 2023.", "Between 12 - 15 years, 1.000,50 €",
          "Call 555-1234 or +49 30 123456.", "Version 2.0.1, 10.5 % and 1,5%"]]),
    "entities": (
        ["Tom &amp; Jerry &quot;run&quot; &lt;fast&gt; &apos;here&apos; &#39;x&#39; &amp;amp;",
         "AT&T and R&D &", "no entity here"],
        [["Tom & Jerry \"run\" <fast> 'here' 'x' &amp;", "AT&amp;T and R&amp;D &amp;",
          "no entity here"]]),
    "hyphens_and_dashes": (
        ["A state-of-the-art, well-known system (1990-2000) -- not bad - really – en — em.",
         "co-operate e-mail -5 5- -x- x-"],
        [["A state of the art, well known system (1990 - 2000) - not bad -- really — em – en.",
          "cooperate email -5 5 - -x - x -"]]),
    "non_ascii_letters": (
        ["Die Straße führt über Köln nach Zürich.", "Ελληνικά ΟΔΟΣ ΣΑΣ Σ", "İstanbul İİ ǅemal",
         "Příliš žluťoučký kůň úpěl ďábelské ódy.", "Съешь же ещё этих мягких французских булок",
         "日本語のテキスト、中文。", "naïve café ﬁne ﬂow"],
        [["Die Strasse führt über Köln nach Zurich.", "ελληνικά οδος σας σ", "istanbul ii ǆemal",
          "Příliš žluťoučký kůň úpěl ďábelské ódy!", "Съешь ещё этих мягких французских булок",
          "日本語 の テキスト 、 中文 。", "naive cafe fine flow"]]),
    "unicode_whitespace": (
        ["a\u00a0b\u3000c\u2009d\u202fe", "tab\tsep\x0bvt\x0cff", "x\x85y\u2028z\u2029w",
         "  leading and trailing \u3000 ", "fs\x1cgs\x1drs\x1eus\x1f", "zero\u200bwidth"],
        [["a b c d e", "tab sep vt ff", "x y z w", "leading and trailing", "fs gs rs us",
          "zero width"]]),
    "empty_lines": (
        ["", "something here", "", "last"],
        [["", "", "nothing", "last"]]),
    "single_words": (
        ["Yes", "no", "Maybe.", "A", "word"],
        [["Yes", "No", "maybe", "a", "words"]]),
    "two_references": (
        ["The cat sat on the mat.", "A quick brown fox jumps.", "It is raining today."],
        [["The cat is on the mat.", "The quick brown fox jumped.", "Today it rains."],
         ["There is a cat on the mat.", "A fast brown fox jumps.", "It is raining today ."]]),
    "three_references_length_ties": (
        ["one two three four", "a b c d e f", "x"],
        [["one two three", "a b c d e", "x y"],
         ["one two three four five", "a b c d e f g", "x y z"],
         ["uno dos tres cuatro", "a b c", ""]]),
    "repeated_words_clipping": (
        ["the the the the the the the", "of of of the of", "la la la la"],
        [["the cat is on the mat", "of the of", "la"]]),
    "no_match_at_all": (
        ["alpha beta gamma", "delta"],
        [["one two three", "four five"]]),
    "short_hypothesis_brevity": (
        ["the cat", "a"],
        [["the cat sat on the mat today", "a b c d e f g h"]]),
    "skipped_and_markup": (
        ["<skipped> text <b>bold</b> <skipped>", "a <skipped>b", "&lt;skipped&gt;"],
        [["text <b>bold</b>", "a b", "<skipped>"]]),
    "symbols_intl": (
        ["$5 + 3 = 8 ©®™ €10 ½ ² ∑ ≤ ≥ → ★", "50°C ±2 µm", "email@example.com #1 100%"],
        [["$ 5 + 3 = 8 © ® ™ € 10 ½ ² ∑ ≤ ≥ → ★", "50 °C ± 2 µm", "email @ example.com # 1 100 %"]]),
    "apostrophes_quotes": (
        ["don't l'homme 'quoted' “smart” ‘single’ «guillemets» „low“", "rock 'n' roll's"],
        [["do not l' homme ' quoted ' \"smart\" 'single' « guillemets » \"low\"", "rock'n'roll's"]]),
    "emoji_and_combining": (
        ["I ❤ NY 😀😀 e\u0301te\u0301", "flags 🇩🇪 🇫🇷 family 👨‍👩‍👧"],
        [["I ❤️ NY 😀 été", "flags 🇩🇪🇫🇷 family 👨‍👩‍👧"]]),
    "carriage_returns_inside": (
        ["one\rtwo three", "mid\r\rline"],
        [["one two three", "mid line"]]),
    "final_sigma_lowercase": (
        ["ΟΔΟΣ ΟΔΟΣ. ΣΑΣ ΑΣ' ΌΣΟΣ-ΤΟΣΟΣ", "Σ ΑΣ ΑΣΑ"],
        [["οδος οδος. σας ας' όσος-τοσος", "σ ας ασα"]]),
    "long_line": (
        [" ".join(f"w{i % 37}" for i in range(600)) + " ."],
        [[" ".join(f"w{(i * 7) % 37}" for i in range(580)) + " ."]]),
    "dots_and_commas_edge": (
        ["a.b,c 1.b a.1 .5 5. ,x x, ...", "U.S.A. e.g. i.e., etc.", "3.14,15 .,.,"],
        [["a . b , c 1 . b a . 1 .5 5 . , x x , ...", "U.S.A. e.g. i.e. etc.", "3.14 , 15 . , . ,"]]),
    "mixed_case": (
        ["The QUICK Brown fox", "iPhone and IPHONE", "ÄÖÜ äöü"],
        [["the quick brown FOX", "iphone and iPhone", "äöü ÄÖÜ"]]),
}
for _seed in range(10):
    SETS[f"fuzz_{_seed}"] = _fuzz_set(_seed, 40 + 7 * _seed, 1 + _seed % 3)

DIFFS = {"bleu": 0.0, "chrf": 0.0, "configs": 0}


def test_sets_cover_the_issue():
    assert len(SETS) >= 30, len(SETS)
    assert any(len(r) == 2 for _, r in SETS.values()) and any(len(r) == 3 for _, r in SETS.values())
    # every hypothesis/reference stream of a set has the same number of lines
    for name, (h, refs) in SETS.items():
        assert all(len(r) == len(h) for r in refs), name


@pytest.mark.parametrize("name", list(SETS))
def test_corpus_bleu_chrf_equal_sacrebleu(tern, tmp_path, name):
    hyps, refs = SETS[name]
    hp = write_lines(tmp_path / "hyp.txt", hyps)
    rps = [write_lines(tmp_path / f"ref{i}.txt", r) for i, r in enumerate(refs)]
    H, Rs = as_cli(hyps), [as_cli(r) for r in refs]
    for tok in TOKENIZERS:
        for lc in (False, True):
            opts = ["-m", "bleu,chrf", "-tok", tok] + (["-lc"] if lc else [])
            got_bleu, got_chrf = tern_json(tern, hp, rps, *opts)
            exp = BLEU(tokenize=tok, lowercase=lc).corpus_score(H, Rs)
            assert got_bleu["counts"] == exp.counts and got_bleu["totals"] == exp.totals, (tok, lc)
            assert (got_bleu["hyp_len"], got_bleu["ref_len"]) == (exp.sys_len, exp.ref_len), (tok, lc)
            assert abs(got_bleu["score"] - exp.score) <= TOL, (tok, lc, got_bleu["score"], exp.score)
            assert abs(got_bleu["bp"] - exp.bp) <= TOL and abs(got_bleu["ratio"] - exp.ratio) <= TOL
            for g, e in zip(got_bleu["precisions"], exp.precisions):
                assert abs(g - e) <= TOL, (tok, lc, got_bleu["precisions"], exp.precisions)
            assert got_bleu["tok"] == tok and got_bleu["case"] == ("lc" if lc else "mixed")
            DIFFS["bleu"] = max(DIFFS["bleu"], abs(got_bleu["score"] - exp.score))
            if tok == "13a":  # chrF does not tokenize
                ec = CHRF(lowercase=lc).corpus_score(H, Rs)
                assert got_chrf["name"] == "chrF2"
                assert abs(got_chrf["score"] - ec.score) <= TOL, (lc, got_chrf["score"], ec.score)
                DIFFS["chrf"] = max(DIFFS["chrf"], abs(got_chrf["score"] - ec.score))
            DIFFS["configs"] += 1
    for lc in (False, True):
        got = tern_json(tern, hp, rps, "-m", "chrf", "--chrf-word-order", "2", *(["-lc"] if lc else []))
        exp = CHRF(word_order=2, lowercase=lc).corpus_score(H, Rs)
        assert got["name"] == "chrF2++"
        assert abs(got["score"] - exp.score) <= TOL, (lc, got["score"], exp.score)
        DIFFS["chrf"] = max(DIFFS["chrf"], abs(got["score"] - exp.score))


@pytest.mark.parametrize("name", ["unicode_whitespace", "two_references", "fuzz_3"])
def test_chrf_variants_equal_sacrebleu(tern, tmp_path, name):
    """Non-default chrF options: whitespace kept, epsilon smoothing, other orders and beta."""
    hyps, refs = SETS[name]
    hp = write_lines(tmp_path / "hyp.txt", hyps)
    rps = [write_lines(tmp_path / f"ref{i}.txt", r) for i, r in enumerate(refs)]
    H, Rs = as_cli(hyps), [as_cli(r) for r in refs]
    variants = [
        (["--chrf-whitespace"], dict(whitespace=True)),
        (["--chrf-eps-smoothing"], dict(eps_smoothing=True)),
        (["--chrf-char-order", "4", "--chrf-word-order", "1", "--chrf-beta", "3"],
         dict(char_order=4, word_order=1, beta=3)),
        (["--chrf-word-order", "2", "--chrf-eps-smoothing", "-lc"],
         dict(word_order=2, eps_smoothing=True, lowercase=True)),
    ]
    for opts, kw in variants:
        got = tern_json(tern, hp, rps, "-m", "chrf", *opts)
        exp = CHRF(**kw).corpus_score(H, Rs)
        assert abs(got["score"] - exp.score) <= TOL, (opts, got["score"], exp.score)


@pytest.mark.parametrize("smooth,value", [("none", None), ("floor", None), ("floor", 0.3),
                                          ("add-k", None), ("add-k", 2), ("exp", None)])
def test_bleu_smoothing_and_order_equal_sacrebleu(tern, tmp_path, smooth, value):
    hyps, refs = SETS["fuzz_5"]
    hp = write_lines(tmp_path / "hyp.txt", hyps)
    rps = [write_lines(tmp_path / f"ref{i}.txt", r) for i, r in enumerate(refs)]
    for order in (2, 4):
        opts = ["--smooth", smooth, "--max-order", str(order)]
        if value is not None:
            opts += ["--smooth-value", str(value)]
        got = tern_json(tern, hp, rps, *opts)
        exp = BLEU(smooth_method=smooth, smooth_value=value, max_ngram_order=order).corpus_score(
            as_cli(hyps), [as_cli(r) for r in refs])
        assert abs(got["score"] - exp.score) <= TOL, (opts, got["score"], exp.score)
        k = (1 if value is None else value) if smooth == "add-k" else 0  # sacreBLEU adds k in place
        assert got["counts"] == [c - (k if n else 0) for n, c in enumerate(exp.counts[:order])]


def _sentence_pairs(data_dir=None):
    """200 single-reference sentence pairs from the hand-made sets and, cycling, the fuzz sets."""
    pairs = []
    for name, (h, refs) in SETS.items():
        pairs += [(a, b) for a, b in zip(h, refs[0])]
    return pairs[:200]


def test_sentence_bleu_chrf_equal_sacrebleu(tern, tmp_path):
    pairs = _sentence_pairs()
    assert len(pairs) == 200
    hyps, refs = [p[0] for p in pairs], [p[1] for p in pairs]
    hp = write_lines(tmp_path / "hyp.txt", hyps)
    rp = write_lines(tmp_path / "ref.txt", refs)
    H, R = as_cli(hyps), as_cli(refs)
    worst = 0.0
    for tok, lc in [("13a", False), ("13a", True), ("intl", False), ("char", False), ("none", True)]:
        out = run([tern, "score", "--sentence", "--json", "-r", rp, hp, "-tok", tok]
                  + (["-lc"] if lc else [])).stdout.decode().splitlines()
        assert len(out) == 200
        metric = BLEU(tokenize=tok, lowercase=lc, effective_order=True)
        for i, line in enumerate(out):
            got = json.loads(line)
            exp = metric.sentence_score(H[i], [R[i]])
            assert got["eff"] == "yes"
            assert got["counts"] == exp.counts and got["totals"] == exp.totals, (i, tok, H[i], R[i])
            assert got["ref_len"] == exp.ref_len and got["hyp_len"] == exp.sys_len
            assert abs(got["score"] - exp.score) <= TOL, (i, tok, got["score"], exp.score)
            for g, e in zip(got["precisions"], exp.precisions):
                assert abs(g - e) <= TOL
            worst = max(worst, abs(got["score"] - exp.score))
    for wo in (0, 2):
        out = run([tern, "score", "--sentence", "--json", "-m", "chrf", "--chrf-word-order", str(wo),
                   "-r", rp, hp]).stdout.decode().splitlines()
        metric = CHRF(word_order=wo)
        for i, line in enumerate(out):
            exp = metric.sentence_score(H[i], [R[i]])
            assert abs(json.loads(line)["score"] - exp.score) <= TOL, (i, wo)
    print(f"sentence BLEU/chrF: 200 sentences x 7 configurations, max |diff| = {worst:g}")


def test_sentence_bleu_multi_reference(tern, tmp_path):
    hyps, refs = SETS["fuzz_2"]  # three references
    hp = write_lines(tmp_path / "hyp.txt", hyps)
    args = [tern, "score", "--sentence", "--json", hp]
    for i, r in enumerate(refs):
        args += ["-r", write_lines(tmp_path / f"r{i}.txt", r)]
    out = run(args).stdout.decode().splitlines()
    metric = BLEU(effective_order=True)
    for i, line in enumerate(out):
        exp = metric.sentence_score(hyps[i].rstrip(), [r[i].rstrip() for r in refs])
        got = json.loads(line)
        assert got["counts"] == exp.counts and got["ref_len"] == exp.ref_len
        assert abs(got["score"] - exp.score) <= TOL


def test_text_output_matches_sacrebleu_format(tern, tmp_path):
    hyps, refs = SETS["two_references"]
    hp = write_lines(tmp_path / "hyp.txt", hyps)
    rps = [write_lines(tmp_path / f"ref{i}.txt", r) for i, r in enumerate(refs)]
    args = [tern, "score", hp, "-m", "bleu,chrf", "--chrf-word-order", "2", "-w", "3"]
    for r in rps:
        args += ["-r", r]
    got = run(args).stdout.decode().replace("version:tern-", "version:X-").splitlines()
    b, c = BLEU(), CHRF(word_order=2)
    eb = b.corpus_score(hyps, refs)
    ec = c.corpus_score(hyps, refs)
    want = [eb.format(width=3, signature=str(b.get_signature())),
            ec.format(width=3, signature=str(c.get_signature()))]
    import sacrebleu
    want = [w.replace(f"version:{sacrebleu.__version__}", "version:X-0.1.0") for w in want]
    assert [g.replace("version:X-" + g.split("version:X-")[1].split(" ")[0], "version:X-0.1.0")
            for g in got] == want


# ---------------------------------------------------------------------------------------------
# WMT22 (shared data): BLEU and chrF of whole files equal sacreBLEU's.

def _read(path):
    with open(path, encoding="utf-8", newline="\n") as f:
        return [l.rstrip() for l in f]


def _perturb(lines, seed):
    rng = random.Random(seed)
    out = []
    for s in lines:
        words = s.split()
        new = []
        for w in words:
            r = rng.random()
            if r < 0.08:
                continue
            if r < 0.14:
                new.append(w.lower())
            elif r < 0.18 and new:
                new[-1], w = w, new[-1]
                new.append(w)
            else:
                new.append(w)
        out.append(" ".join(new))
    return out


@pytest.mark.parametrize("pair,tgt", [("en-de", "de"), ("de-en", "en")])
def test_wmt22_equal_sacrebleu(tern, tmp_path, data_dir, pair, tgt):
    src_lang = pair.split("-")[0]
    ref_path = os.path.join(data_dir, "wmt22", f"generaltest2022.{pair}.ref.A.{tgt}")
    src_path = os.path.join(data_dir, "wmt22", f"generaltest2022.{pair}.src.{src_lang}")
    ref = _read(ref_path)
    assert len(ref) == {"en-de": 2037, "de-en": 1984}[pair]
    pert = write_lines(tmp_path / "pert.txt", _perturb(ref, 1))
    for hyp_path in (pert, src_path) if pair == "en-de" else (pert,):
        hyp = _read(hyp_path)
        got = tern_json(tern, hyp_path, [ref_path], "-m", "bleu,chrf")
        exp_b = BLEU().corpus_score(hyp, [ref])
        exp_c = CHRF().corpus_score(hyp, [ref])
        assert got[0]["counts"] == exp_b.counts and got[0]["ref_len"] == exp_b.ref_len
        assert abs(got[0]["score"] - exp_b.score) <= TOL, (hyp_path, got[0]["score"], exp_b.score)
        assert abs(got[1]["score"] - exp_c.score) <= TOL, (hyp_path, got[1]["score"], exp_c.score)
        if hyp_path != pert:
            continue
        got = tern_json(tern, hyp_path, [ref_path], "-m", "bleu,chrf", "-tok", "intl", "-lc",
                        "--chrf-word-order", "2")
        exp_b = BLEU(tokenize="intl", lowercase=True).corpus_score(hyp, [ref])
        exp_c = CHRF(word_order=2, lowercase=True).corpus_score(hyp, [ref])
        assert abs(got[0]["score"] - exp_b.score) <= TOL
        assert abs(got[1]["score"] - exp_c.score) <= TOL


# ---------------------------------------------------------------------------------------------
# Paired bootstrap resampling against sacreBLEU's PairedTest (same resamples, same arithmetic).

@pytest.fixture(scope="module")
def two_systems(data_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("bs")
    ref = _read(os.path.join(data_dir, "wmt22", "generaltest2022.en-de.ref.A.de"))[:400]
    a, b = _perturb(ref, 11), _perturb(_perturb(ref, 12), 13)
    return (ref, a, b, write_lines(d / "ref.txt", ref), write_lines(d / "a.txt", a),
            write_lines(d / "b.txt", b), d)


def _sacrebleu_paired(ref, a, b, word_order, seed, monkeypatch):
    monkeypatch.setenv("SACREBLEU_SEED", str(seed))
    metrics = {"BLEU": BLEU(), "chrF": CHRF(word_order=word_order)}
    _, scores = PairedTest([("a", a), ("b", b)], metrics, references=[ref], test_type="bs",
                           n_samples=1000)()
    return [v for k, v in scores.items() if k != "System"]


def _check_paired(got, exp):
    for g, (bl, sy) in zip(got, exp):
        assert g["baseline"]["score"] == bl.score and g["system"]["score"] == sy.score
        assert g["p_value"] == sy.p_value, (g["p_value"], sy.p_value)
        # numpy float32 or float64 values, reproduced bit for bit
        assert g["baseline"]["mean"] == float(bl.mean) and g["baseline"]["ci"] == float(bl.ci)
        assert g["system"]["mean"] == float(sy.mean) and g["system"]["ci"] == float(sy.ci)


@pytest.mark.parametrize("word_order", [0, 2])
def test_paired_bootstrap_given_indices_equal_sacrebleu(tern, two_systems, monkeypatch, word_order):
    ref, a, b, rp, ap, bp, d = two_systems
    seed = 777
    # sacreBLEU 2.6 draws its resamples as np.random.default_rng(SACREBLEU_SEED).choice(N, (S, N))
    idx = np.random.default_rng(seed).choice(len(a), size=(1000, len(a)), replace=True)
    ip = d / f"idx{word_order}.txt"
    np.savetxt(ip, idx, fmt="%d")
    got = json.loads(run([tern, "score", "-r", rp, "--paired-bs", ap, bp, "--json", "-m", "bleu,chrf",
                          "--chrf-word-order", str(word_order), "--bs-indices", str(ip)]).stdout)
    assert got[0]["signature"].startswith("nrefs:1|bs:1000|seed:given|")
    _check_paired(got, _sacrebleu_paired(ref, a, b, word_order, seed, monkeypatch))


@pytest.mark.parametrize("seed", [None, 2024])
def test_paired_bootstrap_seeded_default_equal_sacrebleu(tern, two_systems, monkeypatch, seed):
    """Without --bs-indices tern draws numpy's default_rng(seed) resamples itself (PCG64 and
    SeedSequence reimplemented in C): same p-value, means and intervals as sacrebleu --paired-bs."""
    ref, a, b, rp, ap, bp, d = two_systems
    args = [tern, "score", "-r", rp, "--paired-bs", ap, bp, "--json", "-m", "bleu,chrf"]
    if seed is not None:
        args += ["--seed", str(seed)]
    out1 = run(args).stdout
    out2 = run(args).stdout
    assert out1 == out2  # reproducible
    got = json.loads(out1)
    _check_paired(got, _sacrebleu_paired(ref, a, b, 0, 12345 if seed is None else seed, monkeypatch))


def test_paired_bootstrap_text_output(tern, two_systems):
    ref, a, b, rp, ap, bp, d = two_systems
    out = run([tern, "score", "-r", rp, "--paired-bs", ap, bp]).stdout.decode().splitlines()
    assert out[0].startswith("BLEU|nrefs:1|bs:1000|seed:12345|case:mixed|eff:no|tok:13a|smooth:exp|")
    assert out[1].split()[:2] == ["baseline", ap] and out[2].split()[:2] == ["system", bp]
    assert "(p = " in out[2]


def test_bs_indices_errors(tern, two_systems):
    ref, a, b, rp, ap, bp, d = two_systems
    bad = d / "bad.txt"
    bad.write_text("0 1 2\n")
    r = run([tern, "score", "-r", rp, "--paired-bs", ap, bp, "--bs-indices", str(bad)], check=False)
    assert r.returncode == 1
    assert r.stderr.decode() == f"tern score: {bad}: 3 indices is not a multiple of 400 lines\n"
    bad.write_text(" ".join(["400"] * 400) + "\n")
    r = run([tern, "score", "-r", rp, "--paired-bs", ap, bp, "--bs-indices", str(bad)], check=False)
    assert r.returncode == 1
    assert r.stderr.decode() == f"tern score: {bad}: bad index near byte 0 (must be 0..399)\n"


# ---------------------------------------------------------------------------------------------
# GLEU against NLTK (GNMT's GLEU): sentence values exactly; corpus = mean of sentence GLEU.

def test_gleu_equal_nltk(tern, tmp_path):
    from nltk.translate.gleu_score import corpus_gleu, sentence_gleu
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
    from sacrebleu.tokenizers.tokenizer_intl import TokenizerV14International
    n_sent = 0
    for name in ["punctuation", "two_references", "three_references_length_ties", "empty_lines",
                 "fuzz_0", "fuzz_1", "fuzz_2", "repeated_words_clipping"]:
        hyps, refs = SETS[name]
        hp = write_lines(tmp_path / "hyp.txt", hyps)
        rargs = []
        for i, r in enumerate(refs):
            rargs += ["-r", write_lines(tmp_path / f"r{i}.txt", r)]
        for tok, lc, T in [("13a", False, Tokenizer13a()), ("intl", True, TokenizerV14International())]:
            def prep(s):
                s = s.rstrip()
                return T((s.lower() if lc else s).rstrip()).split()
            H = [prep(h) for h in hyps]
            Rs = [[prep(r[i]) for r in refs] for i in range(len(hyps))]
            opts = ["-m", "gleu", "-tok", tok] + (["-lc"] if lc else [])
            out = run([tern, "score", "--sentence", "--json", hp, *rargs, *opts]).stdout.decode()
            sent = [json.loads(l) for l in out.splitlines()]
            exp = [sentence_gleu(Rs[i], H[i]) for i in range(len(H))]
            for g, e in zip(sent, exp):
                assert g["score"] == 100 * e, (name, tok, g, e)  # exact
            n_sent += len(sent)
            got = json.loads(run([tern, "score", "--json", hp, *rargs, *opts]).stdout)
            mean = 0.0
            for e in exp:
                mean += e
            assert abs(got["score"] - 100.0 * mean / len(exp)) <= TOL
            assert got["pooled"] == 100 * corpus_gleu(Rs, H)  # exact
    assert n_sent >= 100


# ---------------------------------------------------------------------------------------------
# Strict, safe reading.

def test_line_count_mismatch_is_an_error(tern, tmp_path):
    hp = write_lines(tmp_path / "hyp.txt", ["a", "b", "c"])
    r1 = write_lines(tmp_path / "ref1.txt", ["a", "b", "c"])
    r2 = write_lines(tmp_path / "ref2.txt", ["a", "b"])
    r = run([tern, "score", "-r", r1, "-r", r2, hp], check=False)
    assert r.returncode == 1 and r.stdout == b""
    assert r.stderr.decode() == (f"tern score: line counts differ: hypothesis {hp} has 3 lines, "
                                 f"reference {r2} has 2\n")
    # from standard input, and a final line without a newline still counts
    r = run([tern, "score", "-r", r2], input=b"a\nb\nc", check=False)
    assert r.returncode == 1
    assert r.stderr.decode() == (f"tern score: line counts differ: hypothesis <stdin> has 3 lines, "
                                 f"reference {r2} has 2\n")
    r = run([tern, "score", "-r", r2, "--json", "-b"], input=b"a\nb")
    assert json.loads(r.stdout)["score"] == BLEU().corpus_score(["a", "b"], [["a", "b"]]).score


def _bad_utf8_cases():
    """Byte strings and Python's strict verdict on them (sacreBLEU reads with the same decoder)."""
    cases = [b"ok \xff here", b"\xc0\x80 overlong", b"\xe0\x80\x80", b"surrogate \xed\xa0\x80",
             b"\xf4\x90\x80\x80 too big", b"truncated \xe2\x82", b"\x80 lone continuation",
             b"\xf8\x88\x80\x80\x80", b"fine \xe2\x82\xac euro", b"\xf0\x9f\x98\x80 emoji",
             b"caf\xc3", b"\xc3\xa9t\xc3\xa9"]
    out = []
    for c in cases:
        try:
            c.decode("utf-8")
            out.append((c, None))
        except UnicodeDecodeError as e:
            out.append((c, e.start))
    return out


@pytest.mark.parametrize("where", ["hyp", "ref"])
def test_invalid_utf8_reported_with_line(tern, tmp_path, where):
    checked = 0
    for bad, start in _bad_utf8_cases():
        good = tmp_path / "good.txt"
        good.write_bytes(b"line one\nline two\nline three\n")
        badf = tmp_path / "bad.txt"
        badf.write_bytes(b"line one\nline two\n" + bad + b"\n")
        hyp, ref = (badf, good) if where == "hyp" else (good, badf)
        r = run([tern, "score", "-r", str(ref), str(hyp)], check=False)
        if start is None:
            assert r.returncode == 0, bad
            continue
        assert r.returncode == 1 and r.stdout == b"", bad
        assert r.stderr.decode() == (f"tern score: {badf}: line 3: invalid UTF-8 (byte 0x{bad[start]:02x} "
                                     f"at byte {start + 1} of the line)\n"), bad
        checked += 1
    assert checked == 9


def test_random_bytes_never_crash(tern, tmp_path):
    rng = random.Random(5)
    ref = write_lines(tmp_path / "ref.txt", ["x y z"] * 20)
    for i in range(30):
        data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 400)))
        lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
        p = tmp_path / "junk.txt"
        p.write_bytes(data)
        for m in ("bleu", "chrf", "gleu"):
            r = run([tern, "score", "-r", ref, str(p), "-m", m], check=False)
            assert r.returncode in (0, 1), (r.returncode, r.stderr)  # never a signal
            if r.returncode == 1:
                err = r.stderr.decode(errors="replace")
                assert ("invalid UTF-8" in err or "NUL byte" in err or "line counts differ" in err
                        or "is empty" in err), err
            else:
                assert lines == 20


def test_nul_byte_is_an_error(tern, tmp_path):
    p = tmp_path / "nul.txt"
    p.write_bytes(b"a\nb\x00c\n")
    ref = write_lines(tmp_path / "ref.txt", ["a", "b"])
    r = run([tern, "score", "-r", ref, str(p)], check=False)
    assert r.returncode == 1
    assert r.stderr.decode() == f"tern score: {p}: line 2: NUL byte in text\n"


def test_usage_errors(tern, tmp_path):
    ref = write_lines(tmp_path / "ref.txt", ["a"])
    for args, msg in [
        ([], "tern score: no reference (-r REF); see tern score --help\n"),
        (["-r", ref, "-tok", "zh"], "tern score: unknown tokenizer 'zh' (13a, intl, char, none)\n"),
        (["-r", ref, "-m", "ter"], "tern score: unknown metric 'ter' (bleu, chrf, gleu)\n"),
        (["-r", ref, "--paired-bs", ref], "tern score: --paired-bs needs two hypothesis files: BASELINE SYSTEM\n"),
    ]:
        r = run([tern, "score", *args], check=False)
        assert (r.returncode, r.stderr.decode()) == (2, msg)
    r = run([tern, "score", "-r", str(tmp_path / "missing.txt"), ref], check=False)
    assert r.returncode == 1
    assert r.stderr.decode() == f"tern score: cannot open {tmp_path / 'missing.txt'}: No such file or directory\n"


def test_summary():
    """Prints the figures of this file (run with -s to see them)."""
    print(f"corpus sets: {len(SETS)}, BLEU/chrF configurations compared: {DIFFS['configs']}, "
          f"max |diff| BLEU {DIFFS['bleu']:g}, chrF {DIFFS['chrf']:g}")
