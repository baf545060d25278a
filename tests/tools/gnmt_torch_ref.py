"""PyTorch reference of Tern's GNMT family (architecture "gnmt"), run step by step.

    /usr/bin/python3 gnmt_torch_ref.py MODEL_DIR REQUESTS.json OUT.json

MODEL_DIR holds a Tern GNMT model.safetensors (names: src/model/gnmt_desc.h). REQUESTS.json:
{"eos": id, "start": id, "max_len": N, "min_len": M, "greedy": [[src ids], ...],
 "force": [[[src ids], [tgt ids]], ...]} (source ids with the end token already appended).
OUT.json: {"greedy": [[ids], ...] (without the end token), "force": [[log-prob of each target
token, then of the end token], ...], "coverage": [[sum over the forced steps (the end token's
included) of the attention on each source position], ...], "attn": [[first step's attention row],
...]}; with "calibrate" in the request also "eos_bias" (see main()).

The model is built independently of Tern's code from torch.nn.LSTMCell (PyTorch's gate order
[i, f, g, o]; Tern stores PyTorch's tensors) and GNMT's attention written out, in float64:
  encoder: layer 0 bidirectional (forward and backward states concatenated), layer 1 over it,
           layers l >= 2 with a residual; decoder: a_t = softmax_j(v . tanh(Wq y0_{t-1} + Wk x_j
           + b)) . x, layer 0 over [e_t; a_t], layer l >= 1 over [y_{l-1}; a_t] (+ y_{l-1} from
           l = 2), logits = W_p y_top + b_p; log_softmax. With GNMT's clips stored in the model
           (gnmt/clip_delta, gnmt/clip_gamma): every step reads the previous cell state clipped to
           [-delta, delta], residual outputs are clipped likewise, the logits to [-gamma, gamma].
Greedy: argmax at each step, the end token masked while fewer than min_len tokens were produced,
at most max_len tokens.
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_torch_ref import st_read  # noqa: E402

torch.set_default_dtype(torch.float64)


class GNMT:
    def __init__(self, path):
        t, _ = st_read(path)
        self.t = {k: torch.tensor(v.astype(np.float64)) for k, v in t.items() if not k.startswith("gnmt/")}
        sc = {k: v.reshape(-1)[0] for k, v in t.items() if k.startswith("gnmt/")}
        self.H, self.A = int(sc["gnmt/hidden_size"]), int(sc["gnmt/attention_size"])
        self.Le, self.Ld = int(sc["gnmt/encoder_layers"]), int(sc["gnmt/decoder_layers"])
        self.delta = float(sc.get("gnmt/clip_delta", 0.0))
        self.gamma = float(sc.get("gnmt/clip_gamma", 0.0))
        g = self.t.get
        self.enc_emb = g("encoder/embeddings/weight")
        self.dec_emb = g("decoder/embeddings/weight", self.enc_emb)
        self.proj = g("decoder/projection/weight", self.dec_emb)
        self.enc = [self.cell(f"encoder/layer_{l}") for l in range(self.Le)]
        self.enc_rev = self.cell("encoder/layer_0_reverse")
        self.dec = [self.cell(f"decoder/layer_{l}") for l in range(self.Ld)]

    def cell(self, p):
        w_ih = self.t[p + "/weight_ih"]
        c = torch.nn.LSTMCell(w_ih.shape[1], self.H)
        with torch.no_grad():
            c.weight_ih.copy_(w_ih)
            c.weight_hh.copy_(self.t[p + "/weight_hh"])
            c.bias_ih.copy_(self.t[p + "/bias_ih"])
            c.bias_hh.copy_(self.t[p + "/bias_hh"])
        return c

    def lstm(self, cell, x, h, c):
        """One step. With GNMT's clipping (delta > 0; Wu et al. 2016 eq. in section 6):
        c'_t, m_t = LSTM(c_{t-1}, m_{t-1}, x_t), c_t = clip(c'_t, delta): the step reads its
        predecessor's state clipped; m_t = o * tanh(c'_t). The state returned is c'_t (the next
        step clips it), so that c_t = clamp(c'_t) is torch.clamp's (its subgradient)."""
        if not getattr(self, "delta", 0):
            return cell(x, (h, c))
        g = x @ cell.weight_ih.T + cell.bias_ih + h @ cell.weight_hh.T + cell.bias_hh
        i, f, gg, o = g.chunk(4, 1)
        c = torch.sigmoid(f) * torch.clamp(c, -self.delta, self.delta) + torch.sigmoid(i) * torch.tanh(gg)
        return torch.sigmoid(o) * torch.tanh(c), c

    def xclip(self, x):
        """x_t = clip(m_t + x_{t-1}, delta) of a residual layer."""
        return torch.clamp(x, -self.delta, self.delta) if getattr(self, "delta", 0) else x

    def run(self, cell, xs, reverse=False):
        h = torch.zeros(1, self.H)
        c = torch.zeros(1, self.H)
        out = [None] * len(xs)
        for t in (range(len(xs) - 1, -1, -1) if reverse else range(len(xs))):
            h, c = self.lstm(cell, xs[t][None], h, c)
            out[t] = h[0]
        return torch.stack(out)

    def encode(self, src):
        x = self.enc_emb[torch.tensor(src)]
        y = torch.cat([self.run(self.enc[0], x), self.run(self.enc_rev, x, True)], 1)
        for l in range(1, self.Le):
            h = self.run(self.enc[l], y)
            y = self.xclip(h + y) if l >= 2 else h
        self.keys = y
        self.kp = y @ self.t["decoder/attention/linear_key/weight"].T + self.t["decoder/attention/linear_key/bias"]
        self.h = [torch.zeros(1, self.H) for _ in range(self.Ld)]
        self.c = [torch.zeros(1, self.H) for _ in range(self.Ld)]

    def step(self, tok):
        qp = self.h[0][0] @ self.t["decoder/attention/linear_query/weight"].T
        e = torch.tanh(qp[None] + self.kp) @ self.t["decoder/attention/v"]
        alpha = torch.softmax(e, 0)
        a = (alpha[:, None] * self.keys).sum(0)
        x = torch.cat([self.dec_emb[tok], a])[None]
        self.h[0], self.c[0] = self.lstm(self.dec[0], x, self.h[0], self.c[0])
        y = self.h[0]
        for l in range(1, self.Ld):
            x = torch.cat([y[0], a])[None]
            self.h[l], self.c[l] = self.lstm(self.dec[l], x, self.h[l], self.c[l])
            y = self.xclip(self.h[l] + y) if l >= 2 else self.h[l]
        logits = y[0] @ self.proj.T + self.t["decoder/projection/bias"]
        if getattr(self, "gamma", 0):
            logits = torch.clamp(logits, -self.gamma, self.gamma)
        return torch.log_softmax(logits, 0), alpha


def main():
    model = GNMT(os.path.join(sys.argv[1], "model.safetensors"))
    with open(sys.argv[2]) as f:
        req = json.load(f)
    eos, start = req["eos"], req["start"]
    out = {"greedy": [], "force": [], "attn": []}

    def greedy(src, attn=None):
        model.encode(src)
        tok, hyp = start, []
        for i in range(req["max_len"]):
            lp, al = model.step(tok)
            if i == 0 and attn is not None:
                attn.append(al.tolist())
            if len(hyp) < req.get("min_len", 1):
                lp[eos] = -float("inf")
            tok = int(torch.argmax(lp))
            if tok == eos:
                break
            hyp.append(tok)
        return hyp

    def beam(src, B):
        """CTranslate2's beam search as Tern's search (src/search/beam.c, common end-token policy,
        no penalties, min length 0): at each step the top 2B continuations of the live hypotheses
        by total log-prob; among the first B, an end token finishes a hypothesis and is replaced by
        the next non-end candidate from rank B on; the sentence stops once a step's best candidate
        is the end token, or when no live hypothesis can beat the best finished one (log-probs only
        fall), or at max_len (every candidate then finishes). Returns the best finished."""
        model.encode(src)
        live = [(0.0, [], start, [h.clone() for h in model.h], [c.clone() for c in model.c])]
        fin = []
        for t in range(req["max_len"]):
            last = t + 1 >= req["max_len"]
            cands = []
            for i, (sc, toks, tok, hs, cs) in enumerate(live):
                model.h, model.c = [h.clone() for h in hs], [c.clone() for c in cs]
                lp, _ = model.step(tok)
                nh, nc = model.h, model.c
                for v in range(lp.shape[0]):
                    cands.append((sc + float(lp[v]), i, v, nh, nc))
            cands.sort(key=lambda x: -x[0])
            K = min(2 * B, len(cands))
            nxt, sec, top_fin = [], B, False
            for k in range(min(B, K)):
                cv, i, v, nh, nc = cands[k]
                if v == eos or last:
                    fin.append((cv, live[i][1] + ([] if v == eos else [v])))
                    if v == eos and k == 0:
                        top_fin = True
                    if last:
                        continue
                    j = sec
                    while j < K and cands[j][2] == eos:
                        j += 1
                    if j >= K:
                        continue
                    sec = j + 1
                    cv, i, v, nh, nc = cands[j]
                nxt.append((cv, live[i][1] + [v], v, nh, nc))
            if last or not nxt or (top_fin and fin):
                break
            if fin and max(f[0] for f in fin) >= max(x[0] for x in nxt):
                break
            live = nxt
        return max(fin, key=lambda f: f[0])[1]

    with torch.no_grad():
        cal = req.get("calibrate")
        if cal:  # the end token's bias b in [lo, hi] whose mean greedy length is nearest the target
            bias = model.t["decoder/projection/bias"]
            base = float(bias[eos])
            lo, hi = cal["lo"], cal["hi"]
            for _ in range(cal["iters"]):
                b = (lo + hi) / 2
                bias[eos] = base + b
                n = np.mean([len(greedy(s)) for s in cal["inputs"]])
                lo, hi = (lo, b) if n < cal["target"] else (b, hi)
            out["eos_bias"] = (lo + hi) / 2
        for src in req.get("greedy", []):
            out["greedy"].append(greedy(src, out["attn"]))
        out["beam"] = [beam(src, req["beam_size"]) for src in req.get("beam", [])]
        out["coverage"] = []
        for src, tgt in req.get("force", []):
            model.encode(src)
            tok, lps, cov = start, [], 0
            for y in list(tgt) + [eos]:
                lp, al = model.step(tok)
                lps.append(float(lp[y]))
                cov = cov + al
                tok = y
            out["force"].append(lps)
            out["coverage"].append(cov.tolist())
    with open(sys.argv[3], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
