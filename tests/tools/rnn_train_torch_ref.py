"""PyTorch whole-model reference for the GRU family's training (tests/test_rnn_gru_train_torch.py).

    python3 rnn_train_torch_ref.py step  IN.safetensors OUT.npz
    python3 rnn_train_torch_ref.py train IN.safetensors OUT.npz
    python3 rnn_train_torch_ref.py info                       # torch version and BLAS, as JSON

It reads the input file of tests/tools/family_train_driver.c (architecture "rnn-gru": the
parameters under their checkpoint names, int32 batches batch/src, batch/tgt_in, batch/tgt_out
(NB, B, L) right-padded with pad_id, the configuration as metadata) and builds the model of the
SDL papers' FNMT in the Nematus/Marian s2s form from torch modules, float64:

    embeddings  x = E[tok] · (tok != pad)                    (padding embeds to zero)
    encoder     h_j = [GRU_f(x)_j ; GRU_b(x)_j]              torch.nn.GRUCell (or the LNGRUCell of
                                                             rnn_torch_ref.py with layer_norm),
                                                             zero initial states, each sentence run
                                                             over its own length only
    init        s_0 = tanh(W_init · mean_{j < len} h_j + b_init)
    decoder     the conditional GRU, teacher-forced over tgt_in:
                s'_t = GRU1(e_{t-1}, s_{t-1})
                c_t  = Bahdanau attention with query s'_t over h (keys past a sentence's length
                       masked): a = softmax_j(v · tanh(W_q s'_t + W_k h_j + b_k)), c = Σ a_j h_j
                s_t  = GRU2(c_t, s'_t)
                u_t  = tanh(W_s s_t + W_c c_t + W_e e_{t-1} + b)    (deep output)
                logits = W_o u_t + b_o   (W_o = the target embedding when tie_proj)
    loss        F.cross_entropy(label_smoothing = ls, ignore_index = pad, reduction "sum") over
                tgt_out; nll likewise with ls = 0

The sequence loop and the attention are rnn_torch_ref.py's (run_seq, attention: its own
definitions, checked layer by layer in tests/test_rnn_torch.py); the GRU cells and their leaves
come from its Ref. Gradients are autograd's. `step` and `train` are train_torch_ref.py's
step_result and train_result (imported): `train` is torch.optim.AdamW (decoupled decay; Adam when
decoupled = 0), fairseq's inverse_sqrt schedule and clip_grad_norm_, update u on batch u % NB.
Writes the loss sums, ntokens and "grad/<name>" (step) or losses, nlls, grad_norms, lrs and
"param/<name>" (train) as .npz, under the stored names (shared/tied names resolve to the tensor
they are stored as).

Needs torch and numpy (Debian's python3-torch under /usr/bin/python3).
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rnn_torch_ref import Ref, attention, run_seq  # noqa: E402
from train_torch_ref import main  # noqa: E402

torch.set_default_dtype(torch.float64)
F = torch.nn.functional


def config(meta):
    g = lambda k, d, f=int: f(meta[k]) if k in meta else d  # noqa: E731
    c = dict(src_vocab=g("src_vocab", 0), tgt_vocab=g("tgt_vocab", 0), pad_id=g("pad_id", 0), emb=g("emb", 256),
             enc_hidden=g("enc_hidden", 256), dec_hidden=g("dec_hidden", 256), att=g("att", 0), out=g("out", 0),
             share_emb=g("share_emb", -1), tie_proj=g("tie_proj", 1), layer_norm=g("layer_norm", 0),
             label_smoothing=g("label_smoothing", 0.1, float))
    if c["share_emb"] < 0:
        c["share_emb"] = g("joint_vocab", 0)
    return c


def loss_sums(logits, tout, pad, label_smoothing):
    """The step's sums from the per-step logits (a list of (B, V)) and the targets (B, T): the
    label-smoothed loss, the nll and the count of non-pad target tokens."""
    logits = torch.stack(logits, 1).reshape(-1, logits[0].shape[-1])
    target = tout.reshape(-1)
    loss = F.cross_entropy(logits, target, ignore_index=pad, label_smoothing=label_smoothing, reduction="sum")
    nll = F.cross_entropy(logits, target, ignore_index=pad, reduction="sum")
    return loss, nll, int((target != pad).sum())


class GruTrainModel:
    """The GRU family over whole padded batches, its parameters float64 leaves (one per stored
    tensor: a shared or tied name is the same leaf)."""

    def __init__(self, c, tensors):
        self.c = c
        # stored names -> the names rnn_torch_ref.Ref's cells read ("<cell>/ln_ih.gain")
        self.stored = {}
        self.alias = {}
        if c["share_emb"]:
            self.alias["decoder/embeddings/weight"] = "encoder/embeddings/weight"
        if c["tie_proj"]:
            self.alias["decoder/projection/weight"] = self.alias.get("decoder/embeddings/weight",
                                                                     "decoder/embeddings/weight")
        vals = {}
        for name, v in tensors.items():
            if v.dtype != np.float32 or name.startswith("batch/"):
                continue
            key = name.replace("/ln_ih/", "/ln_ih.").replace("/ln_hh/", "/ln_hh.")
            self.stored[key] = name
            vals[key] = v
        self.r = Ref(vals)
        r = self.r
        self.enc_f = r.cell("encoder/forward/", False)
        self.enc_b = r.cell("encoder/backward/", False)
        self.gru1 = r.cell("decoder/gru1/", False)
        self.gru2 = r.cell("decoder/gru2/", False)
        self.Es = r.t("encoder/embeddings/weight")
        self.Et = r.t(self.alias.get("decoder/embeddings/weight", "decoder/embeddings/weight"))
        self.Wo = r.t(self.alias.get("decoder/projection/weight", "decoder/projection/weight"))
        for k in ("decoder/init/weight", "decoder/init/bias", "decoder/attention/query/weight",
                  "decoder/attention/key/weight", "decoder/attention/key/bias", "decoder/attention/v",
                  "decoder/output/state/weight", "decoder/output/context/weight",
                  "decoder/output/embedding/weight", "decoder/output/bias", "decoder/projection/bias"):
            r.t(k)
        missing = set(vals) - set(r.leaves)
        if missing:
            raise SystemExit(f"rnn_train_torch_ref: tensors the model does not use: {sorted(missing)}")

    def unique_params(self):
        return list(self.r.leaves.values())

    def embed(self, tok, E):
        return E[tok] * (tok != self.c["pad_id"]).unsqueeze(-1).to(E.dtype)

    def loss(self, src, tin, tout):
        """(label-smoothed loss sum, nll sum, non-padding target tokens) of one batch."""
        c, r, pad = self.c, self.r, self.c["pad_id"]
        src, tin, tout = (torch.tensor(np.asarray(a), dtype=torch.long) for a in (src, tin, tout))
        B, S = src.shape
        T = tin.shape[1]
        slen = (src != pad).long().cumprod(1).sum(1)  # up to the first padding token
        x = self.embed(src, self.Es)
        h = torch.cat([run_seq(self.enc_f, x, slen, False, False), run_seq(self.enc_b, x, slen, True, False)], -1)
        valid = (torch.arange(S)[None, :] < slen[:, None]).to(h.dtype)
        mean = (h * valid[:, :, None]).sum(1) / slen[:, None].to(h.dtype)
        s = torch.tanh(mean @ r.t("decoder/init/weight").T + r.t("decoder/init/bias"))
        e_all = self.embed(tin, self.Et)
        rows = torch.arange(B)
        logits = []
        for t in range(T):
            e = e_all[:, t]
            s1 = self.gru1(e, s)
            ctx = attention(s1, h, r.t("decoder/attention/query/weight"), r.t("decoder/attention/key/weight"),
                            r.t("decoder/attention/key/bias"), r.t("decoder/attention/v"), slen, rows)
            s = self.gru2(ctx, s1)
            u = torch.tanh(s @ r.t("decoder/output/state/weight").T + ctx @ r.t("decoder/output/context/weight").T
                           + e @ r.t("decoder/output/embedding/weight").T + r.t("decoder/output/bias"))
            logits.append(u @ self.Wo.T + r.t("decoder/projection/bias"))
        return loss_sums(logits, tout, pad, c["label_smoothing"])

    def named(self, what):
        out = {}
        for key, leaf in self.r.leaves.items():
            v = leaf.grad if what == "grad" else leaf.detach()
            out[self.stored[key]] = np.zeros(leaf.shape) if v is None else v.detach().numpy().copy()
        return out

    def grads(self):  # float64, as computed
        return self.named("grad")

    def values(self):
        return self.named("param")


def make_model(tensors, meta):
    if meta.get("architecture") != "rnn-gru":
        raise SystemExit("rnn_train_torch_ref: architecture must be rnn-gru")
    return GruTrainModel(config(meta), tensors)


if __name__ == "__main__":
    main(make_model, __doc__)
