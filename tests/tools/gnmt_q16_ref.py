"""NumPy reference of GNMT's quantized inference as Tern runs it (src/model/gnmt.c, an int8 model
whose files carry gnmt/clip_delta), written from the arithmetic's definition, not from Tern's code:

* every matrix (LSTM input and recurrent, attention query and key, output projection) quantized
  per output row: s_w = 127 / max|w_row| (float32), q_w = rint(float32(w * s_w)) in [-127, 127];
* every input row of a matrix product quantized at run time (CTranslate2's u8 rule):
  s_a = 127 / max|x_row| (1 for a zero row), q_a = rint(float32(float32(x * s_a) + 128)) - 128;
* the products summed exactly in integers, dequantized as float32((float32(acc) * (1 / s_a)) / s_w)
  + bias (the LSTM's b_ih + b_hh fused into its input product's bias);
* the LSTM step: gates [i, f, g, o], c' = f * clip(c_prev, delta) + i * g, m = o * tanh(c');
  the stored state c = Q16(c'), m = Q16(m), and a residual layer's output Q16(clip(m + x, delta)),
  where Q16(v) = rint(float32(clip(v, delta) * (32767 / delta))) * (delta / 32767): the 16-bit
  fixed-point values over [-delta, delta] (GNMT, Wu et al. 2016, section 6);
* the logits clipped to [-gamma, gamma] (gnmt/clip_gamma; 0: none); log_softmax in float64.
The nonlinearities (tanh, the attention's softmax) are float64 here and Tern's own float32
approximations there: the tests compare within a stated tolerance.

    python3 gnmt_q16_ref.py MODEL_DIR REQUEST.json OUT.json [--no-q16]

REQUEST: {"eos", "start", "force": [[src ids + eos], [tgt ids]], ...]}; OUT: {"force": [[log-prob of
each target token, then of eos], ...]}. --no-q16: the states stay float32 (int8 products only).
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_torch_ref import st_read  # noqa: E402

f32 = np.float32


def quant_w(w):
    amax = np.abs(w).max(axis=1)
    s = np.where(amax != 0, f32(127) / np.maximum(amax, f32(127) / np.finfo(np.float32).max), f32(1)).astype(f32)
    q = np.clip(np.rint((w * s[:, None]).astype(f32)), -127, 127).astype(np.int64)
    return q, s


class Lin:
    def __init__(self, w, b=None):
        self.q, self.s = quant_w(w.astype(f32))
        self.b = None if b is None else b.astype(f32)

    def __call__(self, x):
        x = np.atleast_2d(x).astype(f32)
        amax = np.abs(x).max(axis=1)
        sa = np.where(amax != 0, f32(127) / np.where(amax != 0, amax, f32(1)), f32(1)).astype(f32)
        qa = np.clip(np.rint(((x * sa[:, None]).astype(f32) + f32(128)).astype(f32)), 0, 255).astype(np.int64) - 128
        acc = qa @ self.q.T
        r = (f32(1) / sa).astype(f32)
        out = ((acc.astype(f32) * r[:, None]).astype(f32) / self.s[None, :]).astype(f32)
        if self.b is not None:
            out = (out + self.b[None, :]).astype(f32)
        return out


def sig(x):
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


class Q16GNMT:
    def __init__(self, path, q16=True):
        t, meta = st_read(path)
        aliases = {k[6:]: v for k, v in meta.items() if k.startswith("alias:")}
        for k, v in aliases.items():
            t[k] = t[v]
        sc = {k: float(v.reshape(-1)[0]) for k, v in t.items() if k.startswith("gnmt/")}
        self.H, self.Le, self.Ld = int(sc["gnmt/hidden_size"]), int(sc["gnmt/encoder_layers"]), \
            int(sc["gnmt/decoder_layers"])
        self.delta, self.gamma = f32(sc.get("gnmt/clip_delta", 0)), f32(sc.get("gnmt/clip_gamma", 0))
        assert self.delta > 0, "a model without gnmt/clip_delta has no quantized path"
        self.q16 = q16
        self.scale, self.qstep = f32(f32(32767) / self.delta), f32(self.delta / f32(32767))
        self.enc_emb = t["encoder/embeddings/weight"].astype(f32)
        self.dec_emb = t.get("decoder/embeddings/weight", self.enc_emb).astype(f32)
        proj = t.get("decoder/projection/weight", self.dec_emb)

        def cell(p):
            b = (t[p + "/bias_ih"].astype(f32) + t[p + "/bias_hh"].astype(f32)).astype(f32)
            return Lin(t[p + "/weight_ih"], b), Lin(t[p + "/weight_hh"])
        self.enc = [cell(f"encoder/layer_{l}") for l in range(self.Le)]
        self.enc_rev = cell("encoder/layer_0_reverse")
        self.dec = [cell(f"decoder/layer_{l}") for l in range(self.Ld)]
        self.att_q = Lin(t["decoder/attention/linear_query/weight"])
        self.att_k = Lin(t["decoder/attention/linear_key/weight"], t["decoder/attention/linear_key/bias"])
        self.att_v = t["decoder/attention/v"].astype(np.float64)
        self.proj = Lin(proj, t["decoder/projection/bias"])

    def clip(self, v):
        return np.clip(v, -self.delta, self.delta).astype(f32)

    def Q(self, v):
        if not self.q16:
            return v.astype(f32)
        return (np.rint((self.clip(v) * self.scale).astype(f32)) * self.qstep).astype(f32)

    def point(self, g, c_prev):
        H = self.H
        g = g.astype(np.float64)
        i, f, gg, o = sig(g[:, :H]), sig(g[:, H:2 * H]), np.tanh(g[:, 2 * H:3 * H]), sig(g[:, 3 * H:])
        c = (f * self.clip(c_prev) + i * gg).astype(f32)
        h = (o * np.tanh(c.astype(np.float64))).astype(f32)
        return self.Q(h), self.Q(c)

    def run(self, cell, xs, reverse=False):
        ih, hh = cell
        gx = ih(xs)
        h = np.zeros((1, self.H), f32)
        c = np.zeros((1, self.H), f32)
        out = np.zeros((len(xs), self.H), f32)
        for t in (range(len(xs) - 1, -1, -1) if reverse else range(len(xs))):
            g = (gx[t:t + 1] + hh(h)).astype(f32)
            h, c = self.point(g, c)
            out[t] = h[0]
        return out

    def encode(self, src):
        x = self.enc_emb[np.array(src)]
        y = np.concatenate([self.run(self.enc[0], x), self.run(self.enc_rev, x, True)], 1)
        for l in range(1, self.Le):
            h = self.run(self.enc[l], y)
            y = self.Q(self.clip((h + y).astype(f32))) if l >= 2 else h
        self.keys = y
        self.kp = self.att_k(y).astype(np.float64)
        self.h = [np.zeros((1, self.H), f32) for _ in range(self.Ld)]
        self.c = [np.zeros((1, self.H), f32) for _ in range(self.Ld)]

    def step(self, tok):
        qp = self.att_q(self.h[0]).astype(np.float64)[0]
        e = np.tanh(qp[None] + self.kp) @ self.att_v
        a = np.exp(e - e.max())
        a /= a.sum()
        ctx = (a[:, None] * self.keys.astype(np.float64)).sum(0).astype(f32)
        y = None
        for l in range(self.Ld):
            x = np.concatenate([self.dec_emb[tok] if l == 0 else y[0], ctx])[None]
            ih, hh = self.dec[l]
            g = (ih(x) + hh(self.h[l])).astype(f32)
            self.h[l], self.c[l] = self.point(g, self.c[l])
            y = self.h[l] if l < 2 else self.Q(self.clip((self.h[l] + y).astype(f32)))
        logits = self.proj(y)[0].astype(np.float64)
        if self.gamma > 0:
            logits = np.clip(logits, -self.gamma, self.gamma)
        m = logits.max()
        return logits - m - np.log(np.exp(logits - m).sum())


def main():
    model = Q16GNMT(os.path.join(sys.argv[1], "model.safetensors"), q16="--no-q16" not in sys.argv)
    req = json.load(open(sys.argv[2]))
    out = {"force": []}
    for src, tgt in req["force"]:
        model.encode(src)
        lps, tok = [], req["start"]
        for nxt in list(tgt) + [req["eos"]]:
            lps.append(float(model.step(tok)[nxt]))
            tok = nxt
        out["force"].append(lps)
    json.dump(out, open(sys.argv[3], "w"))


if __name__ == "__main__":
    main()
