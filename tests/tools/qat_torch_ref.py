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

int8-act (`tern train --qat int8-act`): int8 inference also rounds, at run time, the input rows of
each of those products (per row u8 = round(x * s + 128) clamped to [0, 255], s = float32(127) /
max|x|, back as (u8 - 128) / s, in float32), so the objective multiplies those rounded rows too,
with the straight-through gradient x + (fq(x) - x).detach(): the Transformer's every
F.linear (ActFqModel), the GRU's every product of an input with a matrix (GruActFqModel: the
encoder GRUs' input and recurrent products, the attention's key and query projections, the
initial state's projection of the encoder mean, the decoder GRUs' input and recurrent products,
the deep output's three and the output layer), written out here from the GRU's equations.
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
        xf = x.to(torch.float32)  # the rule's float32 steps (a float64 reference model's rows too)
        amax = xf.abs().amax(dim=-1, keepdim=True)
        s = torch.where(amax == 0, torch.ones_like(amax), torch.tensor(127.0, dtype=torch.float32) / amax)
        r = torch.round(xf * s + 128.0).clamp(0, 255)
        fq = ((r - 128.0) / s).to(x.dtype)
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


def gru_act_fq_model(tensors, meta):
    """The GRU family's reference (rnn_train_torch_ref.py's GruTrainModel: its leaves, embeddings,
    masks and loss) with every product of an input and a matrix taking the input's fake-quantized
    rows (fake_quant_act); the attention's weighted sum of the encoder states, the gates, the layer
    normalization and the embeddings as they are."""
    import torch
    import rnn_train_torch_ref as R
    from rnn_torch_ref import run_seq
    F = torch.nn.functional
    q = fake_quant_act

    class Cell:
        """torch.nn.GRUCell's (or rnn_torch_ref.LNGRUCell's) equations on the same leaves, the
        products' input rows fake-quantized."""

        def __init__(self, r, prefix):
            lv = r.leaves
            self.w_ih, self.w_hh = lv[prefix + "w_ih"], lv[prefix + "w_hh"]
            self.b_ih, self.b_hh = lv.get(prefix + "b_ih", 0), lv.get(prefix + "b_hh", 0)
            self.ln = [lv[prefix + k] for k in ("ln_ih.gain", "ln_ih.bias", "ln_hh.gain", "ln_hh.bias")] \
                if prefix + "ln_ih.gain" in lv else None
            self.hidden_size = self.w_hh.shape[1]

        def __call__(self, x, h):
            H = self.hidden_size
            gi, gh = q(x) @ self.w_ih.T, q(h) @ self.w_hh.T
            if self.ln:
                norm = lambda a, g, b: torch.cat([F.layer_norm(a[:, :2 * H], (2 * H,), eps=1e-5),  # noqa: E731
                                                  F.layer_norm(a[:, 2 * H:], (H,), eps=1e-5)], -1) * g + b
                gi, gh = norm(gi, self.ln[0], self.ln[1]), norm(gh, self.ln[2], self.ln[3])
            gi, gh = gi + self.b_ih, gh + self.b_hh
            r = torch.sigmoid(gi[:, :H] + gh[:, :H])
            z = torch.sigmoid(gi[:, H:2 * H] + gh[:, H:2 * H])
            n = torch.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
            return (1 - z) * n + z * h

    class GruActFqModel(R.GruTrainModel):
        def __init__(self, c, tensors):
            super().__init__(c, tensors)
            r = self.r
            self.cells = {p: Cell(r, p) for p in ("encoder/forward/", "encoder/backward/", "decoder/gru1/",
                                                  "decoder/gru2/")}

        def loss(self, src, tin, tout):
            c, r, pad = self.c, self.r, self.c["pad_id"]
            src, tin, tout = (torch.tensor(np.asarray(a), dtype=torch.long) for a in (src, tin, tout))
            B, S = src.shape
            T = tin.shape[1]
            slen = (src != pad).long().cumprod(1).sum(1)
            x = self.embed(src, self.Es)
            h = torch.cat([run_seq(self.cells["encoder/forward/"], x, slen, False, False),
                           run_seq(self.cells["encoder/backward/"], x, slen, True, False)], -1)
            valid = (torch.arange(S)[None, :] < slen[:, None]).to(h.dtype)
            mean = (h * valid[:, :, None]).sum(1) / slen[:, None].to(h.dtype)
            s = torch.tanh(q(mean) @ r.t("decoder/init/weight").T + r.t("decoder/init/bias"))
            kp = q(h) @ r.t("decoder/attention/key/weight").T + r.t("decoder/attention/key/bias")  # (B, S, A)
            mask = torch.arange(S)[None, :] < slen[:, None]
            e_all = self.embed(tin, self.Et)
            logits = []
            for t in range(T):
                e = e_all[:, t]
                s1 = self.cells["decoder/gru1/"](e, s)
                qp = q(s1) @ r.t("decoder/attention/query/weight").T
                sc = torch.tanh(qp[:, None, :] + kp) @ r.t("decoder/attention/v")
                alpha = torch.softmax(sc.masked_fill(~mask, float("-inf")), dim=-1)
                ctx = (alpha[:, :, None] * h).sum(1)
                s = self.cells["decoder/gru2/"](ctx, s1)
                u = torch.tanh(q(s) @ r.t("decoder/output/state/weight").T
                               + q(ctx) @ r.t("decoder/output/context/weight").T
                               + q(e) @ r.t("decoder/output/embedding/weight").T + r.t("decoder/output/bias"))
                logits.append(q(u) @ self.Wo.T + r.t("decoder/projection/bias"))
            return R.loss_sums(logits, tout, pad, c["label_smoothing"])

    return GruActFqModel(R.config(meta), tensors)


def make_model(tensors, meta):
    arch = meta.get("architecture", "transformer")
    qat = meta.get("qat", "none")
    if qat not in ("int8", "int8-act", "none"):
        raise SystemExit(f"qat_torch_ref: qat must be int8, int8-act or none, got {qat!r}")
    if qat in ("int8", "int8-act"):
        tensors = {k: (fake_quant(v) if not k.startswith("batch/") and quantized(arch, k, v.shape) else v)
                   for k, v in tensors.items()}
    if qat == "int8-act" and arch not in ("transformer", "rnn-gru"):
        raise SystemExit(f"qat_torch_ref: no int8-act rule for architecture {arch!r}")
    if arch == "transformer":
        m = train_torch_ref.RefModel(train_torch_ref._cfg(meta), tensors)
        return ActFqModel(m) if qat == "int8-act" else m
    if qat == "int8-act":
        return gru_act_fq_model(tensors, meta)
    import rnn_train_torch_ref
    return rnn_train_torch_ref.make_model(tensors, meta)


if __name__ == "__main__":
    train_torch_ref.main(make_model, __doc__)
