"""Tern's training step against PyTorch, on the same weights and batches (dropout off).

* One step (tests/tools/train_driver.c `step` vs tests/tools/train_torch_ref.py `step`, which is
  built from PyTorch's own nn.TransformerEncoderLayer / nn.TransformerDecoderLayer and
  F.cross_entropy(label_smoothing=...)): the loss and nll sums within 1e-5 relative, and EVERY
  parameter gradient within 1e-4 relative, where the error of a tensor is
      max |g_tern - g_torch| / max |g_torch|      (over the tensor's elements).
  Four configurations cover pre-/post-norm, ReLU / GELU (erf) / GELU (tanh), shared / tied /
  separate embeddings, sinusoidal / learned positions, projection bias, label smoothing 0 / 0.1
  and padded sources and targets.
* One step on a batch of very uneven target lengths (seven sentences of 1-3 target tokens beside
  one of 16), where Tern's decoder computes only the target groups' rows (src/train/model.c: 31
  rows instead of 8 x 16 = 128): the same tolerances, in two configurations.
* A 200-update trajectory of a tiny model on a learnable toy task with AdamW (decoupled weight
  decay), fairseq's inverse_sqrt schedule with warm-up from 1e-7, and clipping at norm 1: the
  per-update mean losses stay within TRAJ_TOL (relative) of PyTorch's at every update, and the
  loss falls below half its start.

PyTorch is Debian's python3-torch, run under /usr/bin/python3 (TERN_TORCH_PYTHON overrides),
because the test virtual environment has no torch; scripts/setup.sh installs it.
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))
from torch_check import (check_trajectory, compare_grads, driver_fixture,  # noqa: E402
                         run_driver_and_ref, run_step, tool, torch_python_fixture, train_options)
from train_batches import toy_batches  # noqa: E402  (numpy only)

REF = tool("train_torch_ref.py")

GRAD_TOL = 1e-4   # max|diff| / max|ref| per gradient tensor
LOSS_TOL = 1e-5   # relative, loss and nll sums of one step
TRAJ_TOL = 1e-4   # relative, per-update loss over 200 updates (measured: 3e-6)


torch_python = torch_python_fixture(REF, "PyTorch {torch} ({blas_info}), BLAS libraries mapped: {blas_libraries}")
driver = driver_fixture("train_driver")


def tensor_shapes(c):
    """The parameters of Tern's training model (src/train/model.c), canonical names only."""
    C, F, Vs, Vt, P = c["d"], c["ff"], c["src_vocab"], c["tgt_vocab"], c["max_pos"]
    out = {"encoder/embeddings_0/weight": (Vs, C)}
    if not c["share_emb"]:
        out["decoder/embeddings/weight"] = (Vt, C)
    if c["learned_pos"]:
        out["encoder/position_encodings/encodings"] = (P, C)
        out["decoder/position_encodings/encodings"] = (P, C)
    ffn = {"ffn/layer_norm/gamma": (C,), "ffn/layer_norm/beta": (C,), "ffn/linear_0/weight": (F, C),
           "ffn/linear_0/bias": (F,), "ffn/linear_1/weight": (C, F), "ffn/linear_1/bias": (C,)}
    sa = {"self_attention/layer_norm/gamma": (C,), "self_attention/layer_norm/beta": (C,),
          "self_attention/linear_0/weight": (3 * C, C), "self_attention/linear_0/bias": (3 * C,),
          "self_attention/linear_1/weight": (C, C), "self_attention/linear_1/bias": (C,)}
    ca = {"attention/layer_norm/gamma": (C,), "attention/layer_norm/beta": (C,),
          "attention/linear_0/weight": (C, C), "attention/linear_0/bias": (C,),
          "attention/linear_1/weight": (2 * C, C), "attention/linear_1/bias": (2 * C,),
          "attention/linear_2/weight": (C, C), "attention/linear_2/bias": (C,)}
    for l in range(c["enc_layers"]):
        for k, s in {**sa, **ffn}.items():
            out[f"encoder/layer_{l}/{k}"] = s
    for l in range(c["dec_layers"]):
        for k, s in {**sa, **ca, **ffn}.items():
            out[f"decoder/layer_{l}/{k}"] = s
    if c["pre_norm"]:
        for side in ("encoder", "decoder"):
            out[f"{side}/layer_norm/gamma"] = (C,)
            out[f"{side}/layer_norm/beta"] = (C,)
    if not c["tie_proj"]:
        out["decoder/projection/weight"] = (Vt, C)
    if c["proj_bias"]:
        out["decoder/projection/bias"] = (Vt,)
    return out


def random_weights(c, rng):
    w = {}
    for name, shape in tensor_shapes(c).items():
        if name.endswith("gamma"):
            v = 1.0 + 0.1 * rng.standard_normal(shape)
        elif len(shape) == 1:
            v = 0.1 * rng.standard_normal(shape)
        elif "embeddings" in name or "position" in name or "projection" in name:
            v = rng.standard_normal(shape) / np.sqrt(c["d"])
        else:
            v = rng.standard_normal(shape) / np.sqrt(shape[1])
        w[name] = v.astype(np.float32)
    return w


def base_config(**kw):
    c = dict(src_vocab=37, tgt_vocab=37, d=32, heads=4, ff=64, enc_layers=2, dec_layers=2, max_pos=16,
             pre_norm=1, act=0, eps=1e-6, learned_pos=0, scale_emb=1, share_emb=1, tie_proj=1, proj_bias=0,
             pad_id=0, label_smoothing=0.1)
    c.update(kw)
    return c


def run_both(mode, tmp_path, driver, torch_python, c, weights, batch, extra=None):
    return run_driver_and_ref(mode, tmp_path, driver, torch_python, REF, c, weights, batch, extra, ref_timeout=300)


STEP_CONFIGS = {
    "prenorm-relu-shared-tied-sinusoid": base_config(),
    "postnorm-gelu-untied-learned-bias": base_config(pre_norm=0, act=3, share_emb=0, tie_proj=0, learned_pos=1,
                                                     proj_bias=1, scale_emb=0, tgt_vocab=41, pad_id=1),
    "prenorm-gelutanh-tiedonly-learned": base_config(act=1, share_emb=0, tie_proj=1, learned_pos=1,
                                                     src_vocab=29, tgt_vocab=43, eps=1e-5),
    "postnorm-relu-shared-untied-ls0": base_config(pre_norm=0, share_emb=1, tie_proj=0, label_smoothing=0.0,
                                                   enc_layers=1, dec_layers=3),
    # the decoder started from the pad token (MarianMT's decoder_start_token_id, Marian models
    # imported with a zero pad row): its row and position 0, no gradient to the row
    "postnorm-gelu-padstart-shared-learned": base_config(pre_norm=0, act=3, share_emb=1, tie_proj=1, learned_pos=1,
                                                   proj_bias=1, start_pad=1, pad_id=2),
}


@pytest.mark.parametrize("name", list(STEP_CONFIGS))
def test_one_step_matches_pytorch(name, tmp_path, driver, torch_python):
    c = STEP_CONFIGS[name]
    tern, meta, ref = run_step(name, tmp_path, driver, torch_python, REF, c, lambda rng: random_weights(c, rng),
                               LOSS_TOL, ref_timeout=300)
    names = tensor_shapes(c)
    assert set(tern) == set(names), "the driver wrote other tensors than the layout"
    compare_grads(name, tern, meta, ref, names, GRAD_TOL)


UNEVEN = dict(S=9, T=16, lens_src=[3, 9, 5, 2, 7, 1, 4, 6], lens_tgt=[2, 1, 3, 16, 1, 2, 3, 1])
UNEVEN_CONFIGS = {
    "uneven-prenorm-relu-shared-tied-sinusoid": base_config(),
    "uneven-postnorm-gelu-untied-learned-bias": STEP_CONFIGS["postnorm-gelu-untied-learned-bias"],
}


@pytest.mark.parametrize("name", list(UNEVEN_CONFIGS))
def test_uneven_targets_match_pytorch(name, tmp_path, driver, torch_python):
    """Padded target positions are not computed (target groups): loss and every gradient still
    PyTorch's, which computes the padded 8 x 16 batch."""
    c = UNEVEN_CONFIGS[name]
    tern, meta, ref = run_step(name, tmp_path, driver, torch_python, REF, c, lambda rng: random_weights(c, rng),
                               LOSS_TOL, ref_timeout=300, lengths=UNEVEN)
    print(f"{name}: Tern's decoder computed {int(meta['decoder_rows'])} rows of the padded 8 x 16")
    assert int(meta["decoder_rows"]) < 8 * 16 // 2, meta["decoder_rows"]
    names = tensor_shapes(c)
    assert set(tern) == set(names), "the driver wrote other tensors than the layout"
    compare_grads(name, tern, meta, ref, names, GRAD_TOL)


def test_trajectory_matches_pytorch(tmp_path, driver, torch_python):
    c = base_config(src_vocab=24, tgt_vocab=24, max_pos=12)
    rng = np.random.default_rng(2024)
    weights = random_weights(c, rng)
    batch = toy_batches(c, rng, NB=8, B=8, S=9, T=10)
    opt = train_options(lr=3e-3, warmup=40)
    tern, _, ref = run_both("train", tmp_path, driver, torch_python, c, weights, batch, opt)
    check_trajectory(tern, ref, TRAJ_TOL)
