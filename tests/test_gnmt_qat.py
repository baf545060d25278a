"""GNMT's quantizable model (Wu et al. 2016, section 6) in training and inference, against PyTorch
(docs/training.md, "Quantization-aware training").

The clips: every LSTM step reads its predecessor's cell state as c_{t-1} = clip(c'_{t-1}, delta)
(m_t = o * tanh(c'_t)); a residual layer's output is x_t = clip(m_t + x_{t-1}, delta); the logits
are clip(W y + b, gamma). The gradient through each clip is torch.clamp's (the subgradient:
identity inside [-bound, bound], zero outside).

* One training step (tests/tools/family_train_driver, the training table's forward and backward)
  with the clips against tests/tools/gnmt_train_torch_ref.py (float64 autograd through
  torch.clamp): the loss and nll sums within LOSS_TOL relative and every parameter gradient within
  GRAD_TOL (max |g_tern - g_torch| / max |g_torch| per tensor), the tolerances of
  tests/test_gnmt_train_torch.py. Configurations: delta alone, gamma alone, both; residual layers
  in the encoder and the decoder. Weights are drawn large (matrices 2.5x the fan-in scale) so that
  the clips act: the test checks that Tern's clipped loss differs from its unclipped loss by more
  than 1 % (measured in the printout).
* Inference (`tern rescore`, float32) of a model whose files carry gnmt/clip_delta and
  gnmt/clip_gamma gives every forced token's log-probability within 1e-4 of the reference
  (tests/tools/gnmt_torch_ref.py, the decode-time model with the same clips) and differs from the
  same weights without the clip keys (the clips act at inference); with --compute-type int8 the
  clipped model stays within INT8_TOL of the reference and the unclipped one does not.
* `tern train --architecture gnmt --gnmt-clip-delta 1 --gnmt-clip-gamma 25` (annealed from 8 over
  the run) writes the keys into its checkpoint; that checkpoint's `tern rescore` equals the reference
  on the checkpoint's own weights within 1e-4 (the training forward's clips are inference's).
* Bad options: --gnmt-clip-delta below 1, an anneal without a delta, a start below the target are
  usage errors naming the option; a model file with a negative or NaN gnmt/clip_delta is refused
  naming the file and the key.
PyTorch: Debian's python3-torch under /usr/bin/python3 (TERN_TORCH_PYTHON overrides).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
from torch_check import (compare_grads, driver_fixture, family_layout, random_batch,  # noqa: E402
                         run_step, tool, torch_python_fixture, STEP_LENGTHS)
from train_torch_ref import st_read, st_write  # noqa: E402
from test_gnmt_train_torch import expected_shapes, gnmt_config, random_weights  # noqa: E402
import test_gnmt_torch as gt  # noqa: E402

REF = tool("gnmt_train_torch_ref.py")
DEC_REF = tool("gnmt_torch_ref.py")
GRAD_TOL = 1e-4
LOSS_TOL = 1e-5
LP_TOL = 1e-4
INT8_TOL = 0.3  # int8 (per-row weights and activations) vs the float64 reference, measured 0.153: test_gnmt_torch's
                # 0.15 is for weights 3x smaller than clip_model's recurrent ones; unclipped int8 is 2.98 away
SCALE = 2.5  # the matrices' scale over N(0, 1/fan-in): cell states beyond 1 (the clips act)

torch_python = torch_python_fixture(REF, "PyTorch {torch} ({blas_info})")
driver = driver_fixture("family_train_driver")

STEP_CONFIGS = {
    "delta1-le4-ld3": gnmt_config(enc_layers=4, dec_layers=3, hidden=16, att=8, src_vocab=31, tgt_vocab=41,
                                  share_emb=0, tie_proj=0, clip_delta=1.0),
    "gamma2-le2-ld2": gnmt_config(enc_layers=2, dec_layers=2, hidden=12, att=10, clip_gamma=2.0),
    "delta1.5-gamma3-le3-ld3-pad1": gnmt_config(enc_layers=3, dec_layers=3, hidden=16, att=16, src_vocab=45,
                                                tgt_vocab=45, pad_id=1, clip_delta=1.5, clip_gamma=3.0),
}


def big_weights(shapes, rng):
    w = random_weights(shapes, rng)
    for k, v in w.items():
        if k == "decoder/projection/weight":
            w[k] = (v * 4 * SCALE).astype(np.float32)  # logits beyond gamma
        elif v.ndim == 2 and "embeddings" not in k and "attention" not in k:
            w[k] = (v * SCALE).astype(np.float32)
        elif "embeddings" in k:
            w[k] = (v * 3.0).astype(np.float32)
    return w


def driver_loss(tmp_path, driver, c, weights, batch):
    """Tern's loss sum of one step (the driver alone)."""
    inp, out = str(tmp_path / "u_in.safetensors"), str(tmp_path / "u_out.safetensors")
    src, tin, tout = batch
    st_write(inp, {**weights, "batch/src": src, "batch/tgt_in": tin, "batch/tgt_out": tout}, c)
    r = subprocess.run([driver, "step", inp, out], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return float(st_read(out)[1]["loss_sum"])


@pytest.mark.parametrize("name", list(STEP_CONFIGS))
def test_clipped_step_matches_pytorch(name, tmp_path, driver, torch_python):
    c = STEP_CONFIGS[name]
    shapes, _ = family_layout(tmp_path, driver, c)
    assert shapes == expected_shapes(c)
    tern, meta, ref = run_step(name, tmp_path, driver, torch_python, REF, c, lambda rng: big_weights(shapes, rng),
                               LOSS_TOL)
    _, _, errs = compare_grads(name, tern, meta, ref, shapes)
    bad = [f"{n}: {e:.3e}" for e, n in errs if not e <= GRAD_TOL]
    assert not bad, f"gradient rel err > {GRAD_TOL}: " + ", ".join(bad)
    # the clips act: the same step without them is another loss
    import zlib
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    weights = big_weights(shapes, rng)
    batch = random_batch(c, rng, B=len(STEP_LENGTHS["lens_src"]), **STEP_LENGTHS)
    plain = {k: v for k, v in c.items() if not k.startswith("clip_")}
    clipped, unclipped = driver_loss(tmp_path, driver, c, weights, batch), driver_loss(tmp_path, driver, plain,
                                                                                     weights, batch)
    rel = abs(clipped - unclipped) / abs(unclipped)
    print(f"{name}: clipped loss {clipped:.4f}, unclipped {unclipped:.4f} ({rel:.1%} apart)")
    assert abs(clipped - float(meta["loss_sum"])) <= 1e-6 * abs(clipped)
    assert rel > 0.01, "the clips hardly act: a weak check"


# ------------------------------------------------------------------ inference

def clip_model(d, delta, gamma, seed=11):
    """test_gnmt_torch's random model (h16, 3+3 layers) with the clip keys added (None: absent)."""
    gt.write_model(d, 16, 12, 3, 3, False, 0.0, seed)
    p = os.path.join(d, "model.safetensors")
    t, meta = st_read(p)
    for k in ("encoder/layer_1/weight_hh", "encoder/layer_2/weight_hh", "decoder/layer_1/weight_hh",
              "decoder/layer_2/weight_hh", "decoder/layer_0/weight_hh"):
        t[k] = (t[k] * 3.0).astype(np.float32)  # long cell memories: states beyond delta
    if delta is not None:
        t["gnmt/clip_delta"] = np.array(delta, dtype=np.float32)
    if gamma is not None:
        t["gnmt/clip_gamma"] = np.array(gamma, dtype=np.float32)
    st_write(p, t, meta)


def force_ref(model_dir, srcs, tgts, tmp, eos=gt.EOS, start=gt.START):
    req = {"eos": eos, "start": start,
           "force": [[[int(i) for i in s] + [eos], [int(i) for i in h]] for s, h in zip(srcs, tgts)]}
    (tmp / "req.json").write_text(json.dumps(req))
    subprocess.run([gt.TORCH_PY, DEC_REF, str(model_dir), str(tmp / "req.json"), str(tmp / "ref.json")], check=True,
                   timeout=600)
    return json.loads((tmp / "ref.json").read_text())["force"]


def tern_rescore(model_dir, srcs, tgts, tmp, pieces, *extra):
    (tmp / "s.txt").write_text("".join(" ".join(pieces[i] for i in s) + "\n" for s in srcs))
    (tmp / "t.txt").write_text("".join(" ".join(pieces[i] for i in h) + "\n" for h in tgts))
    out = gt.run(gt.TERN, "rescore", "-m", model_dir, "-s", tmp / "s.txt", "--target", tmp / "t.txt",
                 "--pretokenized", "-t", 1, *extra)
    return [[float(x) for x in line.split("|||")[0].split()] for line in out.strip("\n").split("\n")]


def max_gap(a, b):
    assert len(a) == len(b) and all(len(x) == len(y) for x, y in zip(a, b))
    return max(max(abs(p - q) for p, q in zip(x, y)) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def torch_ok():
    if not os.path.exists(gt.TERN):
        pytest.skip(f"{gt.TERN} not built")
    if not gt.have_torch():
        pytest.skip(f"PyTorch not available under {gt.TORCH_PY} (Debian python3-torch)")


def test_inference_applies_the_clips(tmp_path, torch_ok):
    rng = np.random.default_rng(3)
    srcs = [list(rng.integers(4, gt.V, size=int(rng.integers(1, 14)))) for _ in range(40)]
    tgts = [list(rng.integers(4, gt.V, size=int(rng.integers(1, 14)))) for _ in range(40)]
    clipped, plain = tmp_path / "clipped", tmp_path / "plain"
    clip_model(clipped, 1.0, 2.0)
    clip_model(plain, None, None)
    want = force_ref(clipped, srcs, tgts, tmp_path)
    got = tern_rescore(clipped, srcs, tgts, tmp_path, gt.PIECES)
    unclipped = tern_rescore(plain, srcs, tgts, tmp_path, gt.PIECES)
    gap, moved = max_gap(got, want), max_gap(unclipped, want)
    print(f"\nclipped model: tern rescore vs PyTorch max |log-prob gap| {gap:.2e}; the same weights "
          f"unclipped are {moved:.3f} away")
    assert gap <= LP_TOL
    assert moved > 0.05, "the clips hardly act at inference: a weak check"
    # int8 (every matrix per row, as test_gnmt_torch's int8 check): the clips act there too
    g8 = max_gap(tern_rescore(clipped, srcs, tgts, tmp_path, gt.PIECES, "--compute-type", "int8"), want)
    u8 = max_gap(tern_rescore(plain, srcs, tgts, tmp_path, gt.PIECES, "--compute-type", "int8"), want)
    print(f"int8: clipped model vs the reference {g8:.3f} (tolerance {INT8_TOL}); unclipped {u8:.3f}")
    assert g8 <= INT8_TOL and u8 > 4 * INT8_TOL


@pytest.mark.parametrize("key,value", [("gnmt/clip_delta", -1.0), ("gnmt/clip_delta", float("nan")),
                                       ("gnmt/clip_delta", 0.5), ("gnmt/clip_gamma", -2.0)])
def test_bad_clip_key_is_refused(tmp_path, key, value, torch_ok):
    d = tmp_path / "m"
    clip_model(d, None, None)
    p = d / "model.safetensors"
    t, meta = st_read(str(p))
    t[key] = np.array(value, dtype=np.float32)
    st_write(str(p), t, meta)
    r = subprocess.run([gt.TERN, "translate", "-m", d, "--pretokenized"], input="w5 w6\n", capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0
    assert key in r.stderr and "model.safetensors" in r.stderr, r.stderr


def test_convert_stores_the_clips_post_training(tmp_path, torch_ok):
    """tern convert --gnmt-clip-delta/--gnmt-clip-gamma writes the keys a clipped model carries: the
    converted model computes what a model trained with them does (here: the same weights with the keys
    written by hand), in float32 and on the int8 16-bit-state path; the keys are replaced, not doubled."""
    rng = np.random.default_rng(5)
    srcs = [list(rng.integers(4, gt.V, size=int(rng.integers(1, 14)))) for _ in range(30)]
    tgts = [list(rng.integers(4, gt.V, size=int(rng.integers(1, 14)))) for _ in range(30)]
    plain, byhand, stamped = tmp_path / "plain", tmp_path / "byhand", tmp_path / "stamped"
    clip_model(plain, None, None)
    clip_model(byhand, 1.0, 2.0)
    gt.run(gt.TERN, "convert", "--from", plain, "-o", stamped, "--gnmt-clip-delta", "1", "--gnmt-clip-gamma", "2")
    t, _ = st_read(str(stamped / "model.safetensors"))
    assert float(t["gnmt/clip_delta"]) == 1.0 and float(t["gnmt/clip_gamma"]) == 2.0
    for extra in ([], ["--compute-type", "int8"]):
        want = tern_rescore(byhand, srcs, tgts, tmp_path, gt.PIECES, *extra)
        got = tern_rescore(stamped, srcs, tgts, tmp_path, gt.PIECES, *extra)
        moved = max_gap(tern_rescore(plain, srcs, tgts, tmp_path, gt.PIECES, *extra), want)
        print(f"\n{extra or 'float32'}: stamped = by hand exactly; plain is {moved:.3f} away")
        assert got == want and moved > 0.05
    again = tmp_path / "again"
    gt.run(gt.TERN, "convert", "--from", stamped, "-o", again, "--gnmt-clip-delta", "4", "--quantize", "int8")
    t, _ = st_read(str(again / "model.safetensors"))
    assert float(t["gnmt/clip_delta"]) == 4.0 and float(t["gnmt/clip_gamma"]) == 2.0
    assert sum(k == "gnmt/clip_delta" for k in t) == 1


@pytest.mark.parametrize("extra,code,msg", [
    (["--gnmt-clip-delta", "0.5"], 2, "--gnmt-clip-delta must be a number in [1, 1e6] (got '0.5')"),
    (["--gnmt-clip-gamma", "abc"], 2, "--gnmt-clip-gamma must be a number"),
    (["--gnmt-clip-delta", "1", "--to", "ct2"], 2, "apply to a GNMT model written in Tern's format"),
])
def test_convert_clip_options_refused(tmp_path, torch_ok, extra, code, msg):
    clip_model(tmp_path / "m", None, None)
    r = subprocess.run([str(a) for a in [gt.TERN, "convert", "--from", tmp_path / "m", "-o", tmp_path / "o", *extra]],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == code and msg in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


def test_convert_clips_refused_on_a_transformer(tmp_path, torch_ok):
    r = subprocess.run([str(a) for a in [gt.TERN, "convert", "--from", os.path.join(gt.ROOT, "models", "en-de"), "-o",
                                         tmp_path / "o", "--gnmt-clip-delta", "1"]],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "apply to a GNMT model (this one is a transformer model)" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ tern train

WORDS = ["ein", "mann", "hund", "katze", "rot", "blau", "geht", "sitzt", "auf", "dem", "tisch", "haus", "kind"]


@pytest.fixture(scope="module")
def data(tmp_path_factory, torch_ok):
    d = tmp_path_factory.mktemp("gnmt_qat_train")
    rng = np.random.default_rng(7)
    src = [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 7)))) for _ in range(200)]
    (d / "train.src").write_text("".join(s + "\n" for s in src))
    (d / "train.tgt").write_text("".join(" ".join(reversed(s.split())) + "\n" for s in src))
    r = subprocess.run([str(a) for a in [gt.TERN, "vocab", "--model-dir", d / "vocab", "--source", d / "train.src", "--target",
                        d / "train.tgt", "--vocab-size", 36, "-t", 1]], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return d


def train(d, save, *extra):
    return subprocess.run([str(a) for a in [gt.TERN, "train", "--architecture", "gnmt", "--vocab", d / "vocab", "--cache-dir",
                           d / "cache", "--save-dir", save, "--train-src", d / "train.src", "--train-tgt",
                           d / "train.tgt", "--layers", 3, "--hidden", 16, "--init-uniform", 0.3, "--max-updates", 12,
                           "--max-tokens", 300, "--lr", "1e-2", "-t", 1, "--no-plot", "--dropout", 0,
                           "--keep-last", 1, *extra]], capture_output=True, text=True, timeout=300, env=gt.ENV)


def test_trained_checkpoint_carries_the_clips(data, tmp_path):
    save = tmp_path / "save"
    r = train(data, save, "--gnmt-clip-delta", 1, "--gnmt-clip-gamma", 3, "--gnmt-clip-anneal", 8)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "clip delta 1 annealed from 8 over 8 micro-batches; logit clip gamma 3" in r.stdout + r.stderr
    ck = sorted(save.glob("checkpoint-*"))[-1]
    t, _ = st_read(str(ck / "model.safetensors"))
    assert float(t["gnmt/clip_delta"]) == 1.0 and float(t["gnmt/clip_gamma"]) == 3.0
    pieces = json.loads(next(iter(ck.glob("*vocabulary*.json"))).read_text())
    rng = np.random.default_rng(4)
    V = len(pieces)
    srcs = [list(rng.integers(4, V, size=int(rng.integers(1, 10)))) for _ in range(30)]
    tgts = [list(rng.integers(4, V, size=int(rng.integers(1, 10)))) for _ in range(30)]
    eos, start = pieces.index("</s>"), pieces.index("<s>")
    assert max(eos, start) < 4
    want = force_ref(ck, srcs, tgts, tmp_path, eos, start)
    got = tern_rescore(ck, srcs, tgts, tmp_path, pieces)
    gap = max_gap(got, want)
    print(f"\ntrained with --gnmt-clip-delta 1 --gnmt-clip-gamma 3: tern rescore vs PyTorch on its weights "
          f"max |log-prob gap| {gap:.2e}")
    assert gap <= LP_TOL


@pytest.mark.parametrize("extra,msg", [
    (["--gnmt-clip-delta", "0.5"], "--gnmt-clip-delta must be 0 (off) or >= 1"),
    (["--gnmt-clip-anneal", "10"], "--gnmt-clip-anneal needs --gnmt-clip-delta"),
    (["--gnmt-clip-delta", "4", "--gnmt-clip-delta-start", "2", "--gnmt-clip-anneal", "10"],
     "--gnmt-clip-delta-start must be >= --gnmt-clip-delta"),
    (["--gnmt-clip-gamma", "-1"], "gnmt-clip-gamma"),
])
def test_bad_clip_options(data, tmp_path, extra, msg):
    r = train(data, tmp_path / "save", *extra)
    assert r.returncode != 0
    assert msg in r.stderr, r.stderr[-1000:]


# ------------------------------------------------------------------ GNMT's quantized inference

Q16_REF = tool("gnmt_q16_ref.py")
Q16_TOL = 1e-4  # per forced token log-prob, Tern's int8 path vs the NumPy integer reference (measured 9.0e-7)


@pytest.mark.parametrize("delta", [1.0, 300.0])
def test_quantized_path_matches_numpy_reference(tmp_path, torch_ok, delta):
    """An int8 model carrying gnmt/clip_delta runs GNMT's quantized inference: int8 products and the
    LSTM states and layer outputs in 16-bit fixed point over [-delta, delta]. Against
    tests/tools/gnmt_q16_ref.py (the same integer arithmetic in NumPy, written from its definition):
    every forced token's log-probability within Q16_TOL; the reference without the 16-bit states
    (--no-q16) is far (measured 0.070 at delta 1, 0.210 at delta 300, where the grid is coarse)."""
    rng = np.random.default_rng(3)
    srcs = [list(rng.integers(4, gt.V, size=int(rng.integers(1, 14)))) for _ in range(20)]
    tgts = [list(rng.integers(4, gt.V, size=int(rng.integers(1, 14)))) for _ in range(20)]
    d = tmp_path / "m"
    clip_model(d, delta, 2.0)
    req = {"eos": gt.EOS, "start": gt.START,
           "force": [[[int(i) for i in s] + [gt.EOS], [int(i) for i in h]] for s, h in zip(srcs, tgts)]}
    (tmp_path / "req.json").write_text(json.dumps(req))
    ref = {}
    for flag in ([], ["--no-q16"]):
        r = subprocess.run([sys.executable, Q16_REF, str(d), str(tmp_path / "req.json"), str(tmp_path / "o.json"),
                            *flag], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        ref[bool(flag)] = json.loads((tmp_path / "o.json").read_text())["force"]
    got = tern_rescore(d, srcs, tgts, tmp_path, gt.PIECES, "--compute-type", "int8")
    gap, without = max_gap(got, ref[False]), max_gap(got, ref[True])
    print(f"\ndelta {delta}: int8 + 16-bit states vs the NumPy reference {gap:.2e}; vs the reference without "
          f"16-bit states {without:.3f}")
    assert gap <= Q16_TOL
    assert without > 100 * Q16_TOL, "the 16-bit states change nothing: a weak check"
