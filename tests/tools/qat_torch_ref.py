"""PyTorch reference of fake-quantization training (`tern train --qat int8`, src/train/qat.h), for
tests/test_qat_torch.py.

    python3 qat_torch_ref.py step IN.safetensors OUT.npz
    python3 qat_torch_ref.py info

IN is tests/tools/family_train_driver.c's input (architecture "transformer" or "rnn-gru"). The
objective is the family's training loss L(fq(W)) where, for each weight matrix W that CTranslate2-
style int8 inference stores per row (written here from that rule, not read from Tern: the
Transformer's every matrix but the position tables; the GRU's every matrix but the embeddings),

    scale_r = float32(127) / max_k |W[r, k]|,    fq(W)[r, k] = round_half_even(W[r, k] * scale_r) / scale_r

in float32 (torch.round rounds half to even), every other tensor as it is. The gradient is the
straight-through estimator's: written in PyTorch as W + (fq(W) - W).detach(), whose value is fq(W)
and whose derivative with respect to W is the identity, so that dL/dW = dL/dV at V = fq(W). This
script computes exactly that: it builds the family's own reference model (train_torch_ref.py's
RefModel, rnn_train_torch_ref.py's GruTrainModel, float64, checked elsewhere against PyTorch's
layers) with its leaves V at fq(W) (the float32 values above) and takes autograd's gradients of
the leaves.
`step` writes train_torch_ref.py's step result (loss_sum, nll_sum, ntokens, grad/NAME).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_torch_ref  # noqa: E402  (rnn_train_torch_ref is imported for the GRU only: it makes
#                                     torch's default dtype float64, where RefModel runs float32)


def quantized(arch, name, shape):
    """Whether int8 inference stores this tensor per row (the rule above)."""
    if len(shape) != 2:
        return False
    if arch == "transformer":
        return "position_encodings" not in name
    if arch == "rnn-gru":
        return "embeddings" not in name
    raise SystemExit(f"qat_torch_ref: no rule for architecture {arch!r}")


def fake_quant(w):
    """fq(W) of a float32 (R, K) matrix, in torch float32."""
    import torch
    t = torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32))
    amax = t.abs().amax(dim=1, keepdim=True)
    amax = torch.where(amax == 0, torch.full_like(amax, 127.0), amax)
    scale = torch.tensor(127.0, dtype=torch.float32) / amax
    q = torch.round(t * scale).clamp(-127, 127)
    return (q / scale).numpy()


def fake_quant_act(x):
    """int8-act: the input rows of a linear layer as int8 inference rounds them (u8 = round(x * s +
    128) clamped to [0, 255] with s = float32(127) / max|x| per row, each step in float32, then
    (u8 - 128) / s), with the straight-through gradient: x + (fq(x) - x).detach()."""
    import torch
    with torch.no_grad():
        amax = x.abs().amax(dim=-1, keepdim=True)
        s = torch.where(amax == 0, torch.ones_like(amax), torch.tensor(127.0, dtype=x.dtype) / amax)
        r = torch.round(x * s + 128.0).clamp(0, 255)
        fq = (r - 128.0) / s
    return x + (fq - x).detach()


class ActFqModel:
    """A Transformer RefModel whose every linear layer (torch.nn.functional.linear: the attention's
    packed and split in-projections, its out-projection, the feed-forward layers and the output
    projection, all int8 in inference) multiplies fake-quantized input rows during loss()."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, name):
        return getattr(self.model, name)

    def loss(self, *a, **kw):
        import torch.nn.functional as F
        orig = F.linear
        F.linear = lambda x, w, b=None: orig(fake_quant_act(x), w, b)
        try:
            return self.model.loss(*a, **kw)
        finally:
            F.linear = orig


def make_model(tensors, meta):
    arch = meta.get("architecture", "transformer")
    qat = meta.get("qat", "none")
    if qat not in ("int8", "int8-act", "none"):
        raise SystemExit(f"qat_torch_ref: qat must be int8, int8-act or none, got {qat!r}")
    if qat in ("int8", "int8-act"):
        tensors = {k: (fake_quant(v) if not k.startswith("batch/") and quantized(arch, k, v.shape) else v)
                   for k, v in tensors.items()}
    if qat == "int8-act" and arch != "transformer":
        raise SystemExit("qat_torch_ref: int8-act is the Transformer's")
    if arch == "transformer":
        m = train_torch_ref.RefModel(train_torch_ref._cfg(meta), tensors)
        return ActFqModel(m) if qat == "int8-act" else m
    import rnn_train_torch_ref
    return rnn_train_torch_ref.make_model(tensors, meta)


if __name__ == "__main__":
    train_torch_ref.main(make_model, __doc__)
