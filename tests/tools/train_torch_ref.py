"""PyTorch reference for Tern's training step (tests/test_train_torch.py runs it).

    python3 train_torch_ref.py step  IN.safetensors OUT.npz
    python3 train_torch_ref.py train IN.safetensors OUT.npz
    python3 train_torch_ref.py info                       # torch version and BLAS, as JSON

It reads the same input file as tests/tools/train_driver.c (parameters under CTranslate2
TransformerSpec names, int32 batches, configuration as metadata), builds the model from PyTorch's
own nn.TransformerEncoderLayer / nn.TransformerDecoderLayer (fused in_proj [3C, C] = Tern's
QKV; the cross-attention in_proj = Tern's Q [C, C] stacked over its KV [2C, C]), and writes the
loss and every gradient (step) or the loss trajectory under Adam(W) + fairseq's inverse_sqrt
schedule + clip_grad_norm_ (train), under the same names, as .npz.

It needs torch and numpy only (Debian's python3-torch under /usr/bin/python3: the test suite's
virtual environment has no torch, so it runs this file with that interpreter). The safetensors
helpers below use numpy only, and the test suite imports them too.
"""
import json
import math
import re
import struct
import sys

import numpy as np

_DT = {"F32": np.float32, "I32": np.int32, "F16": np.float16, "I8": np.int8, "I16": np.int16}


def st_write(path, tensors, metadata=None):
    """Writes a safetensors file: tensors {name: ndarray of a dtype in _DT}, metadata {str: str}."""
    header, blobs, off = {}, [], 0
    names = {np.dtype(v): k for k, v in _DT.items()}
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        dt = names[arr.dtype]
        b = arr.tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def st_read(path):
    """Reads a safetensors file: ({name: ndarray}, metadata dict)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + n
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[base + b:base + e], dtype=_DT[info["dtype"]]).reshape(info["shape"]).copy()
    return out, meta


def sinusoids(P, C):
    """CTranslate2's table (as src/model/transformer_load.c): row p = sin/cos((p + 1) * ts_i)."""
    half = C // 2
    inc = math.log(10000.0) / max(half - 1, 1)
    ts = np.exp(-inc * np.arange(half, dtype=np.float64))
    v = (np.arange(P, dtype=np.float64)[:, None] + 1.0) * ts[None, :]
    return np.concatenate([np.sin(v), np.cos(v)], axis=1).astype(np.float32)


def _cfg(meta):
    def g(k, d, f=int):
        return f(meta[k]) if k in meta else d
    return dict(src_vocab=g("src_vocab", 0), tgt_vocab=g("tgt_vocab", 0), d=g("d", 0), heads=g("heads", 0),
                ff=g("ff", 0), enc_layers=g("enc_layers", 0), dec_layers=g("dec_layers", 0),
                max_pos=g("max_pos", 0), pre_norm=g("pre_norm", 1), act=g("act", 0), eps=g("eps", 1e-6, float),
                learned_pos=g("learned_pos", 0), scale_emb=g("scale_emb", 1), share_emb=g("share_emb", 1),
                tie_proj=g("tie_proj", 1), proj_bias=g("proj_bias", 0), pad_id=g("pad_id", 0),
                label_smoothing=g("label_smoothing", 0.1, float))


class RefModel:
    """The Transformer of Tern's src/train/model.c, in PyTorch's own layers."""

    def __init__(self, cfg, weights, dropout=0.0):
        """dropout: PyTorch's layers' own (attention weights, activation, sublayer outputs), and on
        the embeddings; Tern's dropout = attn_dropout = act_dropout (bench/bench_train.py)."""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        self.torch, self.F, self.cfg, self.dropout = torch, F, cfg, dropout
        C, H, FF, eps = cfg["d"], cfg["heads"], cfg["ff"], cfg["eps"]
        acts = {0: F.relu, 1: lambda x: F.gelu(x, approximate="tanh"), 2: F.silu, 3: F.gelu,
                4: lambda x: x * torch.sigmoid(1.702 * x), 5: torch.tanh}
        act = acts[cfg["act"]]
        pre = bool(cfg["pre_norm"])
        t = lambda name: torch.tensor(weights[name])
        self.params = {}  # canonical CTranslate2 name -> (Parameter, row slice or None)

        def P(name, value):
            p = nn.Parameter(value)
            self.params[name] = (p, None)
            return p

        self.enc_emb = P("encoder/embeddings_0/weight", t("encoder/embeddings_0/weight"))
        self.dec_emb = self.enc_emb if cfg["share_emb"] else P("decoder/embeddings/weight",
                                                                t("decoder/embeddings/weight"))
        if cfg["learned_pos"]:
            self.enc_pos = P("encoder/position_encodings/encodings", t("encoder/position_encodings/encodings"))
            self.dec_pos = P("decoder/position_encodings/encodings", t("decoder/position_encodings/encodings"))
        else:
            s = torch.tensor(sinusoids(cfg["max_pos"], C))
            self.enc_pos = self.dec_pos = s
        self.enc, self.dec = [], []
        for l in range(cfg["enc_layers"]):
            L = nn.TransformerEncoderLayer(C, H, FF, dropout=dropout, activation=act, layer_norm_eps=eps,
                                           batch_first=True, norm_first=pre)
            p = f"encoder/layer_{l}/"
            self._set(L.self_attn.in_proj_weight, [p + "self_attention/linear_0/weight"], weights)
            self._set(L.self_attn.in_proj_bias, [p + "self_attention/linear_0/bias"], weights)
            self._set(L.self_attn.out_proj.weight, [p + "self_attention/linear_1/weight"], weights)
            self._set(L.self_attn.out_proj.bias, [p + "self_attention/linear_1/bias"], weights)
            self._set(L.norm1.weight, [p + "self_attention/layer_norm/gamma"], weights)
            self._set(L.norm1.bias, [p + "self_attention/layer_norm/beta"], weights)
            self._ffn(L, p, weights, L.norm2)
            self.enc.append(L)
        for l in range(cfg["dec_layers"]):
            L = nn.TransformerDecoderLayer(C, H, FF, dropout=dropout, activation=act, layer_norm_eps=eps,
                                           batch_first=True, norm_first=pre)
            p = f"decoder/layer_{l}/"
            self._set(L.self_attn.in_proj_weight, [p + "self_attention/linear_0/weight"], weights)
            self._set(L.self_attn.in_proj_bias, [p + "self_attention/linear_0/bias"], weights)
            self._set(L.self_attn.out_proj.weight, [p + "self_attention/linear_1/weight"], weights)
            self._set(L.self_attn.out_proj.bias, [p + "self_attention/linear_1/bias"], weights)
            self._set(L.norm1.weight, [p + "self_attention/layer_norm/gamma"], weights)
            self._set(L.norm1.bias, [p + "self_attention/layer_norm/beta"], weights)
            self._set(L.multihead_attn.in_proj_weight,
                      [p + "attention/linear_0/weight", p + "attention/linear_1/weight"], weights)
            self._set(L.multihead_attn.in_proj_bias,
                      [p + "attention/linear_0/bias", p + "attention/linear_1/bias"], weights)
            self._set(L.multihead_attn.out_proj.weight, [p + "attention/linear_2/weight"], weights)
            self._set(L.multihead_attn.out_proj.bias, [p + "attention/linear_2/bias"], weights)
            self._set(L.norm2.weight, [p + "attention/layer_norm/gamma"], weights)
            self._set(L.norm2.bias, [p + "attention/layer_norm/beta"], weights)
            self._ffn(L, p, weights, L.norm3)
            self.dec.append(L)
        self.enc_ln = self.dec_ln = None
        if pre:
            self.enc_ln = nn.LayerNorm(C, eps=eps)
            self._set(self.enc_ln.weight, ["encoder/layer_norm/gamma"], weights)
            self._set(self.enc_ln.bias, ["encoder/layer_norm/beta"], weights)
            self.dec_ln = nn.LayerNorm(C, eps=eps)
            self._set(self.dec_ln.weight, ["decoder/layer_norm/gamma"], weights)
            self._set(self.dec_ln.bias, ["decoder/layer_norm/beta"], weights)
        self.proj_w = self.dec_emb if cfg["tie_proj"] else P("decoder/projection/weight",
                                                             t("decoder/projection/weight"))
        self.proj_b = P("decoder/projection/bias", t("decoder/projection/bias")) if cfg["proj_bias"] else None

    def _set(self, param, names, weights):
        """Copies Tern's tensors (stacked along rows) into a PyTorch parameter; records the slices."""
        torch = self.torch
        vals = [weights[n] for n in names]
        with torch.no_grad():
            param.copy_(torch.tensor(np.concatenate(vals, axis=0)))
        r = 0
        for n, v in zip(names, vals):
            self.params[n] = (param, slice(r, r + v.shape[0]))
            r += v.shape[0]

    def _ffn(self, L, p, weights, norm):
        self._set(L.linear1.weight, [p + "ffn/linear_0/weight"], weights)
        self._set(L.linear1.bias, [p + "ffn/linear_0/bias"], weights)
        self._set(L.linear2.weight, [p + "ffn/linear_1/weight"], weights)
        self._set(L.linear2.bias, [p + "ffn/linear_1/bias"], weights)
        self._set(norm.weight, [p + "ffn/layer_norm/gamma"], weights)
        self._set(norm.bias, [p + "ffn/layer_norm/beta"], weights)

    def unique_params(self):
        seen, out = set(), []
        for p, _ in self.params.values():
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
        return out

    def embed(self, tok, E, pos):
        cfg = self.cfg
        scale = math.sqrt(cfg["d"]) if cfg["scale_emb"] else 1.0
        T = tok.shape[1]
        x = E[tok] * scale + pos[:T].unsqueeze(0)
        keep = tok != cfg["pad_id"]
        # a sentence that starts with the pad token (a decoder started from it: MarianMT's
        # decoder_start_token_id) reads the pad row and position 0 there; the row gets no gradient
        # (nn.Embedding's padding_idx)
        start = (tok[:, :1] == cfg["pad_id"]).squeeze(1)
        if bool(start.any()):
            x0 = E.detach()[tok[:, 0]] * scale + pos[0].unsqueeze(0)
            x = self.torch.cat([self.torch.where(start.unsqueeze(-1), x0, x[:, 0]).unsqueeze(1), x[:, 1:]], 1)
            keep = self.torch.cat([(keep[:, 0] | start).unsqueeze(1), keep[:, 1:]], 1)
        x = x * keep.unsqueeze(-1).to(x.dtype)
        return self.F.dropout(x, self.dropout) if self.dropout > 0 else x

    def loss(self, src, tin, tout, with_nll=True):
        """Returns (label-smoothed loss sum, nll sum (None unless with_nll), non-padding targets)."""
        torch, F, cfg = self.torch, self.F, self.cfg
        pad = cfg["pad_id"]
        src, tin, tout = (torch.tensor(a, dtype=torch.long) for a in (src, tin, tout))
        src_pad = src == pad
        x = self.embed(src, self.enc_emb, self.enc_pos)
        for L in self.enc:
            x = L(x, src_key_padding_mask=src_pad)
        if self.enc_ln is not None:
            x = self.enc_ln(x)
        T = tin.shape[1]
        causal = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        y = self.embed(tin, self.dec_emb, self.dec_pos)
        for L in self.dec:
            y = L(y, x, tgt_mask=causal, memory_key_padding_mask=src_pad)
        if self.dec_ln is not None:
            y = self.dec_ln(y)
        logits = F.linear(y, self.proj_w, self.proj_b).reshape(-1, cfg["tgt_vocab"])
        target = tout.reshape(-1)
        loss = F.cross_entropy(logits, target, ignore_index=pad, label_smoothing=cfg["label_smoothing"],
                               reduction="sum")
        nll = F.cross_entropy(logits, target, ignore_index=pad, reduction="sum") if with_nll else None
        return loss, nll, int((target != pad).sum())

    def grads(self):
        out = {}
        for name, (p, sl) in self.params.items():
            g = p.grad.detach().numpy()
            out[name] = (g if sl is None else g[sl]).astype(np.float32)
        return out

    def values(self):
        out = {}
        for name, (p, sl) in self.params.items():
            v = p.detach().numpy()
            out[name] = (v if sl is None else v[sl]).astype(np.float32)
        return out


def inverse_sqrt(t, lr, warmup, init):
    """fairseq's inverse_sqrt: the rate of the update that follows t updates."""
    if t < warmup:
        return init + t * (lr - init) / warmup
    return lr * math.sqrt(warmup) / math.sqrt(t)


def step_result(model, src, tin, tout):
    """One forward + backward of the batch with grad_scale 1/ntokens: {"grad/NAME": ..., loss_sum,
    nll_sum, ntokens}. model: loss(src, tin, tout) -> (loss sum, nll sum, ntokens) and grads()."""
    loss, nll, ntok = model.loss(src, tin, tout)
    (loss / ntok).backward()
    res = {"grad/" + k: v for k, v in model.grads().items()}
    res.update(loss_sum=np.float64(loss.item()), nll_sum=np.float64(nll.item()), ntokens=np.int64(ntok))
    return res


def gnmt_rate(t, meta, updates):
    """GNMT's schedule (Wu et al. 2016, as optim.h's LR_GNMT): Adam at lr for the first sgd_after
    updates, then SGD at sgd_lr, halved every decay_interval updates from decay_start, at most
    decay_times times (defaults as tests/tools/train_driver_util.h: never halved)."""
    start, sgd_lr = int(meta["sgd_after"]), float(meta["sgd_lr"])
    if t < start:
        return float(meta["lr"])
    decay_start = int(meta.get("decay_start", updates + start))
    k = 0
    if t >= decay_start:
        k = min((t - decay_start) // int(meta.get("decay_interval", 1)) + 1, int(meta.get("decay_times", 0)))
    return sgd_lr * 2.0 ** -k


def train_result(model, meta, src, tin, tout):
    """`updates` updates of Adam(W) + fairseq's inverse_sqrt schedule + clip_grad_norm_, update u on
    batch u % NB: {losses, nlls, grad_norms, lrs, "param/NAME": final values}. With `sgd_after` in
    meta: GNMT's schedule instead (gnmt_rate: Adam, then torch.optim.SGD). model: loss() as above,
    unique_params(), values()."""
    import torch
    updates = int(meta.get("updates", 200))
    sgd_after = int(meta["sgd_after"]) if "sgd_after" in meta else None
    lr = float(meta["lr"])
    if sgd_after is None:
        warmup, init = int(meta["warmup"]), float(meta["warmup_init_lr"])
    clip = float(meta.get("clip_norm", 0))
    params = model.unique_params()
    betas = (float(meta.get("beta1", 0.9)), float(meta.get("beta2", 0.98)))
    wd = float(meta.get("weight_decay", 0))
    kind = torch.optim.AdamW if int(meta.get("decoupled", 1)) else torch.optim.Adam
    opt = kind(params, lr=lr, betas=betas, eps=float(meta.get("adam_eps", 1e-8)), weight_decay=wd)
    sgd = torch.optim.SGD(params, lr=lr, weight_decay=wd) if sgd_after is not None else None
    losses, nlls, norms, lrs = [], [], [], []
    NB = src.shape[0]
    for u in range(updates):
        k = u % NB
        opt.zero_grad(set_to_none=False)
        loss, nll, ntok = model.loss(src[k], tin[k], tout[k])
        (loss / ntok).backward()
        norm = torch.nn.utils.clip_grad_norm_(params, clip) if clip > 0 else \
            torch.norm(torch.stack([p.grad.norm() for p in params]))
        rate = gnmt_rate(u, meta, updates) if sgd is not None else inverse_sqrt(u, lr, warmup, init)
        step_opt = sgd if sgd is not None and u >= sgd_after else opt
        for g in step_opt.param_groups:
            g["lr"] = rate
        step_opt.step()
        losses.append(loss.item() / ntok)
        nlls.append(nll.item() / ntok)
        norms.append(float(norm))
        lrs.append(rate)
    res = {"param/" + k: v for k, v in model.values().items()}
    res.update(losses=np.array(losses), nlls=np.array(nlls), grad_norms=np.array(norms), lrs=np.array(lrs))
    return res


def run(mode, inp, out, make_model):
    """`step` (step_result on batch 0) or `train` (train_result) of make_model(tensors, metadata)
    on the input file inp; writes the result to out (.npz)."""
    tensors, meta = st_read(inp)
    model = make_model(tensors, meta)
    src, tin, tout = tensors["batch/src"], tensors["batch/tgt_in"], tensors["batch/tgt_out"]
    if mode == "step":
        np.savez(out, **step_result(model, src[0], tin[0], tout[0]))
    else:
        np.savez(out, **train_result(model, meta, src, tin, tout))


def main(make_model, usage):
    """The command line of a training reference: `info`, or `step|train IN OUT` (run), else usage."""
    if sys.argv[1:2] == ["info"]:
        info()
    elif len(sys.argv) == 4 and sys.argv[1] in ("step", "train"):
        run(sys.argv[1], sys.argv[2], sys.argv[3], make_model)
    else:
        sys.exit(usage)


def info():
    import torch
    cfg = torch.__config__.show()
    blas = "unknown"
    try:  # the shared BLAS library this torch process actually mapped
        with open("/proc/self/maps") as f:
            libs = sorted({line.split()[-1] for line in f if "blas" in line.lower() and ".so" in line})
        blas = ", ".join(libs) or "none mapped"
    except OSError:
        pass
    m = re.search(r"BLAS_INFO=(\w+)", cfg)
    print(json.dumps({"torch": torch.__version__, "blas_libraries": blas,
                      "blas_info": "BLAS_INFO=" + (m.group(1) if m else "?")}))


if __name__ == "__main__":
    main(lambda tensors, meta: RefModel(_cfg(meta), tensors), __doc__)
