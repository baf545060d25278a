"""PyTorch reference of Tern's GRU family (`architecture: "rnn-gru"`, docs/rnn.md), step by step.

Written from the model's definition, not from Tern's code: torch.nn.GRUCell for every recurrent
cell (Tern's fused weights are PyTorch's: w_ih rows [r; z; n]), explicit additive attention and
deep output, float64 throughout. Reads a model directory's model.safetensors (names and shapes of
src/model/rnn_gru_desc.h; aliases resolved by the caller passing the tensors dict).

    encoder: x_j = Es[src_j]; h_j = [GRU_f(x)_j ; GRU_b(x)_j]
    s0 = tanh(W_init mean_j h_j + b_init)
    step:    e = Et[y_prev]; s' = GRU1(e, s); a = softmax_j(v . tanh(Wq s' + Wk h_j + bk));
             c = sum_j a_j h_j; s = GRU2(c, s'); u = tanh(Ws s + Wc c + We e + b);
             log p = log_softmax(Wo u + bo)
"""
import numpy as np
import torch

torch.set_default_dtype(torch.float64)


def _t(a):
    return torch.tensor(np.asarray(a, dtype=np.float64))


class LNGRUCell(torch.nn.Module):
    """The layer-normalized GRU (rnn/layer_norm = 1; Nematus/Marian): torch.nn.GRUCell's equations
    with W_ih x and W_hh h each replaced by [LN(a[:2H]); LN(a[2H:])] * gain + shift (F.layer_norm,
    eps 1e-5, the blocks [r; z] and [n]); b_ih and b_hh are added after the normalization."""

    def __init__(self, w, prefix):
        super().__init__()
        self.p = {k: _t(w[f"{prefix}/{k}"]) for k in ("w_ih", "w_hh", "b_ih", "b_hh", "ln_ih/gain", "ln_ih/bias",
                                                       "ln_hh/gain", "ln_hh/bias")}
        self.hidden_size = self.p["w_hh"].shape[1]

    def _norm(self, a, side):
        H, ln = self.hidden_size, torch.nn.functional.layer_norm
        a = torch.cat([ln(a[:, :2 * H], (2 * H,), eps=1e-5), ln(a[:, 2 * H:], (H,), eps=1e-5)], -1)
        return a * self.p[f"ln_{side}/gain"] + self.p[f"ln_{side}/bias"]

    def forward(self, x, h):
        H, p = self.hidden_size, self.p
        gi = self._norm(x @ p["w_ih"].T, "ih") + p["b_ih"]
        gh = self._norm(h @ p["w_hh"].T, "hh") + p["b_hh"]
        r = torch.sigmoid(gi[:, :H] + gh[:, :H])
        z = torch.sigmoid(gi[:, H:2 * H] + gh[:, H:2 * H])
        n = torch.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
        return (1 - z) * n + z * h


def _cell(w, prefix):
    if prefix + "/ln_ih/gain" in w:
        return LNGRUCell(w, prefix)
    w_ih = w[prefix + "/w_ih"]
    H, K = w_ih.shape[0] // 3, w_ih.shape[1]
    c = torch.nn.GRUCell(K, H)
    with torch.no_grad():
        c.weight_ih.copy_(_t(w_ih))
        c.weight_hh.copy_(_t(w[prefix + "/w_hh"]))
        c.bias_ih.copy_(_t(w[prefix + "/b_ih"]))
        c.bias_hh.copy_(_t(w[prefix + "/b_hh"]))
    return c


class GruModel:
    def __init__(self, w):
        """w: {name: ndarray} with every tensor of the description (tied names filled in)."""
        self.Es = _t(w["encoder/embeddings/weight"])
        self.Et = _t(w["decoder/embeddings/weight"])
        self.f = _cell(w, "encoder/forward")
        self.b = _cell(w, "encoder/backward")
        self.g1 = _cell(w, "decoder/gru1")
        self.g2 = _cell(w, "decoder/gru2")
        n = {k: _t(v) for k, v in w.items() if k.startswith("decoder/")}
        self.Wi, self.bi = n["decoder/init/weight"], n["decoder/init/bias"]
        self.Wq, self.Wk = n["decoder/attention/query/weight"], n["decoder/attention/key/weight"]
        self.bk, self.v = n["decoder/attention/key/bias"], n["decoder/attention/v"]
        self.Ws, self.Wc = n["decoder/output/state/weight"], n["decoder/output/context/weight"]
        self.We, self.bo_ = n["decoder/output/embedding/weight"], n["decoder/output/bias"]
        self.Wo, self.bo = n["decoder/projection/weight"], n["decoder/projection/bias"]

    @torch.no_grad()
    def encode(self, src):
        x = self.Es[torch.tensor(src)]
        L = len(src)
        hf, hb = [None] * L, [None] * L
        h = torch.zeros(1, self.f.hidden_size)
        for j in range(L):
            h = self.f(x[j:j + 1], h)
            hf[j] = h[0]
        h = torch.zeros(1, self.b.hidden_size)
        for j in reversed(range(L)):
            h = self.b(x[j:j + 1], h)
            hb[j] = h[0]
        enc = torch.stack([torch.cat([hf[j], hb[j]]) for j in range(L)])
        s0 = torch.tanh(self.Wi @ enc.mean(0) + self.bi)
        kp = enc @ self.Wk.T + self.bk
        return enc, kp, s0

    @torch.no_grad()
    def step(self, enc, kp, s, y_prev):
        e = self.Et[y_prev]
        s1 = self.g1(e[None], s[None])[0]
        a = torch.softmax(torch.tanh(self.Wq @ s1 + kp) @ self.v, 0)
        c = a @ enc
        s2 = self.g2(c[None], s1[None])[0]
        u = torch.tanh(self.Ws @ s2 + self.Wc @ c + self.We @ e + self.bo_)
        return torch.log_softmax(self.Wo @ u + self.bo, 0), s2

    def greedy(self, src, start, eos, max_len, min_len=1):
        """Argmax tokens (EOS excluded), EOS masked before min_len tokens, at most max_len tokens;
        also the smallest gap between the best and second-best log-prob met on the way."""
        enc, kp, s = self.encode(src)
        y, out, gap = start, [], float("inf")
        for t in range(max_len):
            lp, s = self.step(enc, kp, s, y)
            if t < min_len:
                lp = lp.clone()
                lp[eos] = -float("inf")
            top = torch.topk(lp, 2).values
            gap = min(gap, float(top[0] - top[1]))
            y = int(torch.argmax(lp))
            if y == eos:
                break
            out.append(y)
        return out, gap

    def beam(self, src, start, eos, max_len, beam, min_len=1):
        """Beam search as Tern's default and CTranslate2's (no length penalty): per step the top 2·beam
        extensions (score + log p) of the live hypotheses; the first `beam` are taken in order, an EOS
        among them finishes a hypothesis and is replaced by the next non-EOS extension after them; at
        the length cap every taken extension finishes. The search ends when the best extension of a
        step is EOS, or when no live hypothesis beats the best finished one. Returns the tokens of
        the best finished hypothesis and the smallest score gap between candidates ranked beam-1/beam
        and 2·beam-1/2·beam (a near tie that float32 may order differently)."""
        enc, kp, s0 = self.encode(src)
        live = [(0.0, [], start, s0)]  # score, tokens, last token, state
        finished, gap = [], float("inf")
        for t in range(max_len):
            cands = []
            for r, (sc, toks, y, s) in enumerate(live):
                lp, s2 = self.step(enc, kp, s, y)
                if t < min_len:
                    lp = lp.clone()
                    lp[eos] = -float("inf")
                for v in range(lp.shape[0]):
                    cands.append((sc + float(lp[v]), r, v, s2))
            cands.sort(key=lambda c: -c[0])
            K = min(2 * beam, len(cands))
            vals = [c[0] for c in cands[:K + 1]]
            for i in range(1, len(vals)):
                gap = min(gap, vals[i - 1] - vals[i])
            last = t + 1 >= max_len
            new, sec, top_eos = [], beam, False
            for k in range(min(beam, K)):
                cv, r, v, s2 = cands[k]
                if cv == -float("inf"):
                    break
                if v == eos or last:
                    finished.append((cv, live[r][1] + ([] if v == eos else [v])))
                    if v == eos and k == 0:
                        top_eos = True
                    if last:
                        continue
                    j = sec
                    while j < K and (cands[j][2] == eos or cands[j][0] == -float("inf")):
                        j += 1
                    if j >= K:
                        continue
                    sec = j + 1
                    cv, r, v, s2 = cands[j]
                new.append((cv, live[r][1] + [v], v, s2))
            done = last or not new or top_eos
            if not done and finished and any(f[1] is not None for f in finished):
                if max(f[0] for f in finished) >= max(n[0] for n in new):
                    done = True
            if done:
                break
            live = new
        best = max(finished, key=lambda f: f[0])
        return best[1], gap

    def score(self, src, tgt, start, eos):
        """log p of every target token and of the final EOS."""
        enc, kp, s = self.encode(src)
        y, out = start, []
        for tok in list(tgt) + [eos]:
            lp, s = self.step(enc, kp, s, y)
            out.append(float(lp[tok]))
            y = tok
        return out


def main(model_dir, inp, out):
    """inp (JSON): {"src": [[ids]], "tgt": [[ids]] or null, "start", "eos", "max_len"}; writes
    {"greedy": [[ids]], "gap": [float], "score": [[log-probs]]} to out."""
    import json
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from train_torch_ref import st_read

    w, meta = st_read(os.path.join(model_dir, "model.safetensors"))
    for k, v in meta.items():
        if k.startswith("alias:"):
            w[k[6:]] = w[v]
    m = GruModel(w)
    job = json.load(open(inp))
    res = {"greedy": [], "gap": [], "score": [], "beam": [], "beam_gap": []}
    for i, src in enumerate(job["src"]):
        toks, gap = m.greedy(src, job["start"], job["eos"], job["max_len"])
        res["greedy"].append(toks)
        res["gap"].append(gap)
        if job.get("beam"):
            toks, gap = m.beam(src, job["start"], job["eos"], job["max_len"], job["beam"])
            res["beam"].append(toks)
            res["beam_gap"].append(gap)
        if job.get("tgt"):
            res["score"].append(m.score(src, job["tgt"][i], job["start"], job["eos"]))
    json.dump(res, open(out, "w"))


if __name__ == "__main__":
    import sys

    main(*sys.argv[1:4])
