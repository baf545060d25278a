"""`tern shrink`: unfolding a GRU ensemble into one model, and shrinking it data-free.

Random-weight rnn-gru members (tests/test_rnn_gru_family.py's make_gru; each member's decoding is
tied to PyTorch there), K = 3 of one shape, tied and untied:
- the unfolded model's force-decoding scores (`tern rescore`) equal the ensemble's with
  `--ensemble-mode logit-mean` (the combination an unfolded network computes: softmax of the
  members' mean logits) within 1e-4 per token on 120 pairs; greedy and beam-4 outputs identical
  (measured: max |diff| ~1e-6, every output identical); greedy also equals logprob-mean's (the
  two differ per step by a constant of the row only);
- the unfolded tensors, read back with numpy, hold each member's tensors as blocks (block-diagonal
  GRU/attention/deep-output matrices, concatenated embeddings, projection = [W_1 .. W_K] / K) and
  zeros elsewhere: what `--size 1` writes is the unfolded model unchanged;
- `--size 0.5` halves every shrunk width (He, Hd, A per head, O) and the model still scores every
  pair (finite log-probs, one line per pair);
- bad input: a Transformer member, different vocabularies, different shapes, a layer-normalized
  member, a size outside (0, 1]: exit status 1 or 2 with a message naming the problem, no output.
"""
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
from test_rnn_gru_family import SPECIALS, make_gru  # noqa: E402

TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
K = 3
N = 120
TOL = 1e-4

SHAPES = {
    "tied": dict(E=16, He=12, Hd=20, A=10, O=16, vs=40, vt=40, tied=True, eos=0.6),
    "untied": dict(E=8, He=16, Hd=12, A=14, O=10, vs=45, vt=35, tied=False, eos=0.9),
}


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, env=ENV)


def ok(*args):
    r = run(*args)
    assert r.returncode == 0, f"{args[:2]} failed ({r.returncode}):\n{r.stderr[-3000:]}"
    return r


def read_st(path):
    """safetensors -> {name: array}, metadata (numpy only)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        hdr = json.loads(f.read(n))
        data = f.read()
    dt = {"F32": np.float32, "I32": np.int32}
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[a:b], dtype=dt[v["dtype"]]).reshape(v["shape"])
    return out, hdr.get("__metadata__", {})


@pytest.fixture(scope="module", params=sorted(SHAPES))
def ens(request, tmp_path_factory):
    sh = SHAPES[request.param]
    d = tmp_path_factory.mktemp("shrink-" + request.param)
    src = SPECIALS + [f"s{i}" for i in range(sh["vs"] - 3)]
    tgt = src if sh["tied"] else SPECIALS + [f"t{i}" for i in range(sh["vt"] - 3)]
    members, ws = [], []
    for k in range(K):
        md = d / f"m{k}"
        ws.append(make_gru(str(md), 100 + 7 * k, sh["E"], sh["He"], sh["Hd"], sh["A"], sh["O"], src, tgt,
                           sh["tied"], sh["eos"]))
        members.append(md)
    rng = random.Random(5)
    inp = d / "in.txt"
    ref = d / "ref.txt"
    inp.write_text("".join(" ".join(rng.choice(src[3:]) for _ in range(rng.randint(1, 20))) + "\n" for _ in range(N)))
    ref.write_text("".join(" ".join(rng.choice(tgt[3:]) for _ in range(rng.randint(1, 15))) + "\n" for _ in range(N)))
    margs = [a for m in members for a in ("-m", m)]
    ok(TERN, "shrink", *margs, "-o", d / "unfolded")
    return dict(name=request.param, sh=sh, dir=d, members=members, margs=margs, w=ws, inp=inp, ref=ref, src=src,
                tgt=tgt)


def scores(path):
    return [np.array([float(x) for x in line.split("|||")[0].split()]) for line in open(path)]


def rescore(e, margs, out, *extra):
    ok(TERN, "rescore", *margs, "--pretokenized", "-t", 1, "-s", e["inp"], "--target", e["ref"], *extra, out)
    return scores(out)


def translate(e, margs, *extra):
    return ok(TERN, "translate", *margs, "--pretokenized", "-t", 1, "-q", "--max-decoding-length", 30, *extra,
              e["inp"]).stdout.split("\n")[:-1]


def test_unfolded_scores_equal_the_ensemble(ens, tmp_path):
    e = ens
    a = rescore(e, e["margs"], tmp_path / "ens.txt", "--ensemble-mode", "logit-mean")
    b = rescore(e, ["-m", e["dir"] / "unfolded"], tmp_path / "unf.txt")
    assert len(a) == len(b) == N
    diff = max(np.abs(x - y).max() for x, y in zip(a, b))
    print(f"\n{e['name']}: unfolded vs logit-mean ensemble, {sum(len(x) for x in a)} tokens: max |diff| {diff:.2e}")
    assert all(len(x) == len(y) for x, y in zip(a, b)) and diff <= TOL
    # logprob-mean differs from logit-mean: a constant per step, so the scores are not equal
    c = rescore(e, e["margs"], tmp_path / "lpm.txt")
    assert max(np.abs(x - y).max() for x, y in zip(a, c)) > 1e-3


def test_unfolded_outputs_equal_the_ensemble(ens):
    e = ens
    unf = ["-m", e["dir"] / "unfolded"]
    for extra in (("-b", 1), ("-b", 4)):
        x = translate(e, e["margs"], "--ensemble-mode", "logit-mean", *extra)
        y = translate(e, unf, *extra)
        same = sum(p == q for p, q in zip(x, y))
        print(f"\n{e['name']} {extra}: identical {same}/{N}")
        assert len(x) == len(y) == N and same == N
    # greedy argmax is the same under logprob-mean (each step's scores differ by a constant)
    assert translate(e, e["margs"], "-b", 1) == translate(e, unf, "-b", 1)


def test_size_one_is_the_block_unfolding(ens, tmp_path):
    e, sh = ens, ens["sh"]
    ok(TERN, "shrink", *e["margs"], "--size", "1", "-o", tmp_path / "s1")
    u, meta = read_st(tmp_path / "s1" / "model.safetensors")
    u0, _ = read_st(e["dir"] / "unfolded" / "model.safetensors")
    assert sorted(u) == sorted(u0) and all(np.array_equal(u[k], u0[k]) for k in u)
    assert int(u["rnn/attention_heads"]) == K and meta.get("unfolded_models") == str(K)
    E, He, Hd, A, O = (sh[k] for k in ("E", "He", "Hd", "A", "O"))
    checked = 0
    for k, w in enumerate(e["w"]):
        def rows(name, H, g=1):  # member k's rows of a (g·H)-row layer
            return np.concatenate([np.arange(i * K * H + k * H, i * K * H + (k + 1) * H) for i in range(g)])
        dv = np.concatenate([np.arange(k * He, (k + 1) * He), K * He + np.arange(k * He, (k + 1) * He)])
        ce, chd = np.arange(k * E, (k + 1) * E), np.arange(k * Hd, (k + 1) * Hd)
        che = np.arange(k * He, (k + 1) * He)
        blocks = {"encoder/embeddings/weight": (slice(None), ce),
                  "encoder/forward/w_ih": (rows(0, He, 3), ce), "encoder/forward/w_hh": (rows(0, He, 3), che),
                  "encoder/backward/w_ih": (rows(0, He, 3), ce), "encoder/backward/w_hh": (rows(0, He, 3), che),
                  "decoder/init/weight": (rows(0, Hd), dv), "decoder/gru1/w_ih": (rows(0, Hd, 3), ce),
                  "decoder/gru1/w_hh": (rows(0, Hd, 3), chd), "decoder/gru2/w_ih": (rows(0, Hd, 3), dv),
                  "decoder/gru2/w_hh": (rows(0, Hd, 3), chd), "decoder/attention/query/weight": (rows(0, A), chd),
                  "decoder/attention/key/weight": (rows(0, A), dv), "decoder/output/state/weight": (rows(0, O), chd),
                  "decoder/output/context/weight": (rows(0, O), dv), "decoder/output/embedding/weight": (rows(0, O), ce)}
        for name, (r, c) in blocks.items():
            assert np.array_equal(u[name][r][:, c], w[name]), (name, k)
            checked += 1
        for name, H, g in (("encoder/forward/b_ih", He, 3), ("decoder/gru2/b_hh", Hd, 3), ("decoder/attention/v", A, 1),
                           ("decoder/output/bias", O, 1), ("decoder/init/bias", Hd, 1)):
            assert np.array_equal(u[name][rows(0, H, g)], w[name]), (name, k)
        proj = u["decoder/projection/weight"][:, k * O:(k + 1) * O]
        np.testing.assert_allclose(proj, w["decoder/projection/weight"] / K, rtol=1e-6)
    # zeros outside the members' blocks: the blocks hold every nonzero entry (block-diagonal)
    for n in ("decoder/gru1/w_hh", "decoder/gru2/w_ih", "decoder/attention/key/weight", "encoder/forward/w_hh",
              "decoder/output/context/weight"):
        assert np.count_nonzero(u[n]) == sum(np.count_nonzero(w[n]) for w in e["w"]), n
    assert checked == K * 15
    np.testing.assert_allclose(u["decoder/projection/bias"], sum(w["decoder/projection/bias"] for w in e["w"]) / K,
                               rtol=1e-5, atol=1e-6)


def test_half_size_halves_the_widths(ens, tmp_path):
    e, sh = ens, ens["sh"]
    r = ok(TERN, "shrink", *e["margs"], "--size", "50%", "-o", tmp_path / "half")
    u, _ = read_st(tmp_path / "half" / "model.safetensors")
    want = {"rnn/encoder_hidden_size": K * sh["He"] // 2, "rnn/decoder_hidden_size": K * sh["Hd"] // 2,
            "rnn/attention_size": K * sh["A"] // 2, "rnn/output_size": K * sh["O"] // 2,
            "rnn/embedding_size": K * sh["E"], "rnn/attention_heads": K}
    assert {k: int(u[k]) for k in want} == want, r.stderr
    assert u["decoder/gru1/w_hh"].shape == (3 * want["rnn/decoder_hidden_size"], want["rnn/decoder_hidden_size"])
    assert u["decoder/projection/weight"].shape[1] == want["rnn/output_size"]
    s = rescore(e, ["-m", tmp_path / "half"], tmp_path / "half.txt")
    full = rescore(e, ["-m", e["dir"] / "unfolded"], tmp_path / "unf.txt")
    assert len(s) == N and all(np.isfinite(x).all() and len(x) == len(y) for x, y in zip(s, full))
    print(f"\n{e['name']}: mean total log-prob unfolded {np.mean([x.sum() for x in full]):.2f}, "
          f"half {np.mean([x.sum() for x in s]):.2f}")


def test_bad_inputs(ens, tmp_path):
    e, sh = ens, ens["sh"]
    m0 = e["members"][0]

    def fails(args, words, code=(1, 2)):
        out = tmp_path / "out"
        r = run(TERN, "shrink", *args, "-o", out)
        assert r.returncode in code and any(w in r.stderr for w in words), r.stderr
        assert not (out / "model.safetensors").exists()

    fails(["-m", m0, "-m", os.path.join(ROOT, "models", "en-de")], ["not an rnn-gru model"])
    other = tmp_path / "othervocab"
    make_gru(str(other), 3, sh["E"], sh["He"], sh["Hd"], sh["A"], sh["O"], e["src"][:-1] + ["zz"],
             e["tgt"][:-1] + ["zz"] if not sh["tied"] else e["src"][:-1] + ["zz"], sh["tied"], sh["eos"])
    fails(["-m", m0, "-m", other], ["must share their vocabularies"])
    wide = tmp_path / "wide"
    make_gru(str(wide), 4, sh["E"], sh["He"] + 2, sh["Hd"], sh["A"], sh["O"], e["src"], e["tgt"], sh["tied"], sh["eos"])
    fails(["-m", m0, "-m", wide], ["must have one shape"])
    ln = tmp_path / "ln"
    make_gru(str(ln), 5, sh["E"], sh["He"], sh["Hd"], sh["A"], sh["O"], e["src"], e["tgt"], sh["tied"], sh["eos"], ln=True)
    fails(["-m", m0, "-m", ln], ["layer-normalized"])
    fails(["-m", m0, "-m", e["members"][1], "--size", "1.5"], ["--size"])
    fails(["-m", m0, "-m", e["members"][1], "--size", "0"], ["--size"])
    fails(["-m", m0, "-m", e["dir"] / "unfolded"], ["already has"])
