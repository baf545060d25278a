"""PyTorch reference for Tern's GNMT training step (tests/test_gnmt_train_torch.py runs it).

    python3 gnmt_train_torch_ref.py step  IN.safetensors OUT.npz
    python3 gnmt_train_torch_ref.py train IN.safetensors OUT.npz
    python3 gnmt_train_torch_ref.py info                       # torch version and BLAS, as JSON

IN is the input of build/tests/tools/family_train_driver (architecture "gnmt"): the parameters
under their checkpoint names (src/model/gnmt_desc.h; aliases absent), int32 batches batch/src,
batch/tgt_in, batch/tgt_out of shape (NB, B, L), the configuration as metadata (hidden att
enc_layers dec_layers share_emb tie_proj pad_id label_smoothing; for train the optimizer's).
OUT (.npz): step: "grad/NAME" for every parameter, loss_sum, nll_sum, ntokens (one forward and
backward of batch 0 with grad_scale 1/ntokens, no dropout); train: losses, nlls, grad_norms, lrs
and "param/NAME" after `updates` updates of torch's Adam(W) with fairseq's inverse_sqrt schedule
and clip_grad_norm_ (tests/tools/train_torch_ref.py's loop, imported).

The model is tests/tools/gnmt_torch_ref.py's decode-time GNMT (torch.nn.LSTMCell per layer,
GNMT's attention written out, float64), imported and run teacher-forced one sentence at a time:
each source is cut at its padding before it is encoded (so padding never enters either
direction, nor the attention), the decoder is fed tgt_in up to the sentence's last target, and the
loss is F.cross_entropy(label_smoothing=eps, ignore_index=pad) over the log-probabilities (the
log_softmax of log-probabilities is themselves), padded targets ignored. Gradients by autograd.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gnmt_torch_ref import GNMT  # noqa: E402  (sets float64 as torch's default dtype)
from train_torch_ref import main  # noqa: E402

LSTM_PARTS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


class TrainGNMT(GNMT):
    """gnmt_torch_ref.GNMT over trainable tensors: the LSTM weights are the nn.LSTMCell modules'
    parameters, the embeddings, attention and projection leaf tensors; the shared / tied names
    are the same tensor (their gradients add up)."""

    def __init__(self, meta, weights):
        g = lambda k: int(meta[k])
        self.H, self.Le, self.Ld = g("hidden"), g("enc_layers"), g("dec_layers")
        self.A = g("att") if g("att") > 0 else self.H
        self.pad = g("pad_id")
        self.eps = float(meta.get("label_smoothing", 0.1))
        self.delta = float(meta.get("clip_delta", 0.0))   # GNMT's clips (gnmt_torch_ref.GNMT.lstm)
        self.gamma = float(meta.get("clip_gamma", 0.0))
        self.t = {k: torch.tensor(v.astype(np.float64), requires_grad=True)
                  for k, v in weights.items() if not k.startswith("batch/")}
        self.enc_emb = self.t["encoder/embeddings/weight"]
        self.dec_emb = self.enc_emb if g("share_emb") else self.t["decoder/embeddings/weight"]
        self.proj = self.dec_emb if g("tie_proj") else self.t["decoder/projection/weight"]
        self.params = {}  # stored name -> the tensor that carries its gradient
        prefixes = [f"encoder/layer_{l}" for l in range(self.Le)] + ["encoder/layer_0_reverse"] + \
                   [f"decoder/layer_{l}" for l in range(self.Ld)]
        cells = {}
        for p in prefixes:
            cells[p] = c = self.cell(p)  # copies the weights into a fresh nn.LSTMCell
            for part in LSTM_PARTS:
                self.params[f"{p}/{part}"] = getattr(c, part)
                del self.t[f"{p}/{part}"]
        self.params.update(self.t)
        self.enc = [cells[f"encoder/layer_{l}"] for l in range(self.Le)]
        self.enc_rev = cells["encoder/layer_0_reverse"]
        self.dec = [cells[f"decoder/layer_{l}"] for l in range(self.Ld)]

    def loss(self, src, tin, tout):
        """Label-smoothed loss sum, nll sum, non-padding targets of one batch (B, S), (B, T)."""
        pad, lps, targets = self.pad, [], []
        for b in range(src.shape[0]):
            s = [int(x) for x in src[b] if x != pad]
            n = int(np.nonzero(tout[b] != pad)[0].max()) + 1  # up to the last real target
            self.encode(s)
            for t in range(n):
                lp, _ = self.step(int(tin[b, t]))
                lps.append(lp)
                targets.append(int(tout[b, t]))
        lps, targets = torch.stack(lps), torch.tensor(targets)
        loss = F.cross_entropy(lps, targets, ignore_index=pad, label_smoothing=self.eps, reduction="sum")
        nll = F.cross_entropy(lps, targets, ignore_index=pad, reduction="sum")
        return loss, nll, int((targets != pad).sum())

    def unique_params(self):
        seen, out = set(), []
        for p in self.params.values():
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
        return out

    def grads(self):
        return {k: p.grad.detach().numpy().astype(np.float32) for k, p in self.params.items()}

    def values(self):
        return {k: p.detach().numpy().astype(np.float32) for k, p in self.params.items()}


def make_model(tensors, meta):
    if meta.get("architecture", "gnmt") != "gnmt":
        sys.exit(f"gnmt_train_torch_ref: architecture {meta['architecture']}, not gnmt")
    return TrainGNMT(meta, tensors)


if __name__ == "__main__":
    main(make_model, __doc__)
