"""PyTorch reference for Tern's recurrent layers (tests/test_rnn_torch.py runs it).

    python3 rnn_torch_ref.py IN.safetensors OUT.npz

It reads the input file of tests/tools/rnn_driver.c (metadata "layer" and dimensions, float32
inputs and parameters, int32 "len", loss weights "R"), builds the layer from torch.nn.GRUCell /
torch.nn.LSTMCell (weights copied in: Tern's fused layout is PyTorch's) and explicit additive
attention, runs it in float64 step by step (a sentence's state is kept past its length with
torch.where), takes loss = sum(out * R), and writes "out" and "grad/<name>" for every float input
and parameter as .npz.

Needs torch and numpy (Debian's python3-torch under /usr/bin/python3).
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_torch_ref import st_read  # noqa: E402

torch.set_default_dtype(torch.float64)


class Ref:
    def __init__(self, tensors):
        self.np = tensors
        self.leaves = {}  # name -> leaf tensor whose .grad is reported

    def t(self, name):
        """The float input or parameter `name` as a float64 leaf that records its gradient."""
        if name not in self.leaves:
            self.leaves[name] = torch.tensor(self.np[name].astype(np.float64), requires_grad=True)
        return self.leaves[name]

    def has(self, name):
        return name in self.np

    def cell(self, prefix, lstm):
        """A torch.nn.GRUCell / LSTMCell holding the tensors prefix+{w_ih, w_hh, b_ih, b_hh}; a GRU
        with prefix+ln_ih.gain is the layer-normalized LNGRUCell."""
        if not lstm and self.has(prefix + "ln_ih.gain"):
            return LNGRUCell(self, prefix)
        w_ih = self.np[prefix + "w_ih"]
        H, K = w_ih.shape[0] // (4 if lstm else 3), w_ih.shape[1]
        bias = self.has(prefix + "b_ih")
        c = (torch.nn.LSTMCell if lstm else torch.nn.GRUCell)(K, H, bias=bias)
        names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if bias else [])
        ours = ["w_ih", "w_hh", "b_ih", "b_hh"]
        for pt, tn in zip(names, ours):
            p = torch.nn.Parameter(torch.tensor(self.np[prefix + tn].astype(np.float64)))
            setattr(c, pt, p)
            self.leaves[prefix + tn] = p
        return c


class LNGRUCell(torch.nn.Module):
    """Nematus/Marian's layer-normalized GRU, written independently with F.layer_norm: the input
    projection W_ih x and the recurrent projection W_hh h are each normalized in the blocks [r; z]
    (2H) and [n] (H) (eps 1e-5, no affine inside), then multiplied by the gain and shifted per unit,
    and take the places of W_ih x and W_hh h in torch.nn.GRUCell's equations (b_ih, b_hh added)."""

    def __init__(self, ref, prefix):
        super().__init__()
        self.p = {k: ref.t(prefix + k) for k in ("w_ih", "w_hh", "ln_ih.gain", "ln_ih.bias", "ln_hh.gain",
                                                  "ln_hh.bias")}
        self.b_ih = ref.t(prefix + "b_ih") if ref.has(prefix + "b_ih") else 0
        self.b_hh = ref.t(prefix + "b_hh") if ref.has(prefix + "b_hh") else 0
        self.hidden_size = self.p["w_hh"].shape[1]

    @staticmethod
    def norm(a, gain, bias, H):
        ln = torch.nn.functional.layer_norm
        a = torch.cat([ln(a[:, :2 * H], (2 * H,), eps=1e-5), ln(a[:, 2 * H:], (H,), eps=1e-5)], -1)
        return a * gain + bias

    def forward(self, x, h):
        H = self.hidden_size
        gi = self.norm(x @ self.p["w_ih"].T, self.p["ln_ih.gain"], self.p["ln_ih.bias"], H) + self.b_ih
        gh = self.norm(h @ self.p["w_hh"].T, self.p["ln_hh.gain"], self.p["ln_hh.bias"], H) + self.b_hh
        r = torch.sigmoid(gi[:, :H] + gh[:, :H])
        z = torch.sigmoid(gi[:, H:2 * H] + gh[:, H:2 * H])
        n = torch.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
        return (1 - z) * n + z * h


def run_seq(cell, x, lens, reverse, lstm, h0=None, c0=None):
    """out[:, t] = the state after step t; steps t >= lens[b] keep the state."""
    B, T, _ = x.shape
    H = cell.hidden_size
    h = h0 if h0 is not None else torch.zeros(B, H)
    c = c0 if c0 is not None else torch.zeros(B, H)
    outs = [None] * T
    for t in (range(T - 1, -1, -1) if reverse else range(T)):
        m = (t < lens).unsqueeze(1)
        if lstm:
            hn, cn = cell(x[:, t], (h, c))
            c = torch.where(m, cn, c)
        else:
            hn = cell(x[:, t], h)
        h = torch.where(m, hn, h)
        outs[t] = h
    return torch.stack(outs, 1)


def attention(q, keys, wq, wk, b, v, klen, src):
    """Bahdanau: e_j = v . tanh(Wq q + Wk k_j + b), softmax over j < klen, ctx = sum_j a_j k_j.
    q (R, Dq); keys (B, S, Dv); src (R) the sentence of each row."""
    kp = keys @ wk.T + (b if b is not None else 0)       # (B, S, A)
    qp = q @ wq.T                                         # (R, A)
    e = torch.tanh(qp[:, None, :] + kp[src]) @ v          # (R, S)
    S = keys.shape[1]
    mask = torch.arange(S)[None, :] < klen[src][:, None]
    alpha = torch.softmax(e.masked_fill(~mask, float("-inf")), dim=-1)
    return (alpha[:, :, None] * keys[src]).sum(1)


def forward(r, meta, lens):
    layer = meta["layer"]
    g = lambda k: int(meta[k])  # noqa: E731
    if layer in ("gru", "lstm", "bigru", "bilstm"):
        lstm = "lstm" in layer
        x = r.t("inp")
        if layer.startswith("bi"):
            f = run_seq(r.cell("fwd.", lstm), x, lens, False, lstm)
            b = run_seq(r.cell("bwd.", lstm), x, lens, True, lstm)
            return torch.cat([f, b], -1)
        return run_seq(r.cell("", lstm), x, lens, bool(g("reverse")), lstm, r.t("h0"), r.t("c0") if lstm else None)
    if layer == "gnmt":
        L, bi = g("L"), g("bi")
        x = r.t("inp")
        y = run_seq(r.cell("layer_0.", True), x, lens, False, True)
        if bi:
            y = torch.cat([y, run_seq(r.cell("layer_0.bwd.", True), x, lens, True, True)], -1)
        for l in range(1, L):
            h = run_seq(r.cell(f"layer_{l}.", True), y, lens, False, True)
            y = h + y if l >= 2 else h
        return y
    if layer == "attention":
        B, Tq = g("B"), g("Tq")
        src = torch.arange(B * Tq) // Tq
        b = r.t("b") if r.has("b") else None
        return attention(r.t("q"), r.t("keys"), r.t("W_q"), r.t("W_k"), b, r.t("v"), lens, src)
    if layer == "cgru":
        B, T = g("B"), g("T")
        gru1, gru2 = r.cell("gru1.", False), r.cell("gru2.", False)
        emb, enc, s = r.t("emb"), r.t("enc"), r.t("s0")
        ab = r.t("att.b") if r.has("att.b") else None
        ob = r.t("out.b") if r.has("out.b") else 0
        obo = r.t("out.b_o") if r.has("out.b_o") else 0
        src = torch.arange(B)
        logits = []
        for t in range(T):
            e = emb[:, t]
            s1 = gru1(e, s)
            c = attention(s1, enc, r.t("att.W_q"), r.t("att.W_k"), ab, r.t("att.v"), lens, src)
            s = gru2(c, s1)
            u = torch.tanh(s @ r.t("out.W_s").T + c @ r.t("out.W_c").T + e @ r.t("out.W_e").T + ob)
            logits.append(u @ r.t("out.W_o").T + obo)
        return torch.stack(logits, 1)
    if layer == "gnmt_dec":
        B, T, H = g("B"), g("T"), g("H")
        lstm = r.cell("lstm.", True)
        emb, enc = r.t("emb"), r.t("enc")
        h = r.t("h0") if r.has("h0") else torch.zeros(B, H)
        c = r.t("c0") if r.has("c0") else torch.zeros(B, H)
        ab = r.t("att.b") if r.has("att.b") else None
        src = torch.arange(B)
        ys, ctxs = [], []
        for t in range(T):
            a = attention(h, enc, r.t("att.W_q"), r.t("att.W_k"), ab, r.t("att.v"), lens, src)
            h, c = lstm(torch.cat([emb[:, t], a], -1), (h, c))
            ys.append(h)
            ctxs.append(a)
        return torch.cat([torch.stack(ys, 1).reshape(-1), torch.stack(ctxs, 1).reshape(-1)])
    raise SystemExit(f"unknown layer {layer}")


def main(inp, out):
    tensors, meta = st_read(inp)
    lens = torch.tensor(tensors["len"].astype(np.int64))
    r = Ref({k: v for k, v in tensors.items() if v.dtype == np.float32})
    y = forward(r, meta, lens)
    R = torch.tensor(tensors["R"].astype(np.float64))
    (y.reshape(-1) * R.reshape(-1)).sum().backward()
    res = {"out": y.detach().numpy().reshape(-1)}
    for name in r.np:
        if name == "R":
            continue
        leaf = r.leaves.get(name)
        res["grad/" + name] = np.zeros_like(r.np[name], np.float64) if leaf is None or leaf.grad is None \
            else leaf.grad.numpy()
    np.savez(out, **res)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
