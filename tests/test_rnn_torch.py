"""Tern's recurrent layers (src/nn/rnn.c) against PyTorch, forward and backward.

tests/tools/rnn_driver.c runs one layer's forward and backward in Tern (float32);
tests/tools/rnn_torch_ref.py runs the same layer built from torch.nn.GRUCell / torch.nn.LSTMCell
and explicit additive attention, in float64, on the same weights (copied unchanged: Tern's fused
gate layout is PyTorch's), inputs and padding. The loss is sum(out * R) with random R. The output
and EVERY input and parameter gradient must agree within 1e-4 relative, where the error of a
tensor is
    max |tern - torch| / max |torch|        (over the tensor's elements).
Cases: GRU and LSTM sequences forward and reverse (with h0, c0), bidirectional GRU and LSTM (one
of them at a size that runs the threaded per-step loops), GNMT's stacked encoder (bidirectional
bottom + residuals, and unidirectional), additive attention (several queries per sentence, with
and without the keys' bias), the conditional GRU decoder with deep output through time (with
and without the optional biases), and GNMT's attentive bottom decoder layer (with and without
initial states). Every case pads: some sentences/sources are shorter than T/S.
The layer-normalized GRU (Nematus/Marian; the reference's LNGRUCell, written with
F.layer_norm): sequences forward and reverse, bidirectional (one threaded), and the cGRU decoder
with and without the optional biases.

PyTorch is Debian's python3-torch, run under /usr/bin/python3 (TERN_TORCH_PYTHON overrides),
as tests/test_train_torch.py does.
"""
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
from train_torch_ref import st_read, st_write  # noqa: E402  (numpy-only helpers)
from torch_check import TORCH_PY, torch_python_or_skip  # noqa: E402

BUILD = os.environ.get("TERN_BUILD", "build")
DRIVER = os.path.join(ROOT, BUILD, "tests", "tools", "rnn_driver")
REF = os.path.join(ROOT, "tests", "tools", "rnn_torch_ref.py")

TOL = 1e-4  # max|tern - torch| / max|torch| per tensor, outputs and gradients


@pytest.fixture(scope="module")
def torch_python():
    torch_python_or_skip("-c", "import torch, numpy", timeout=None, tail=300)
    return TORCH_PY


def cell(rng, prefix, G, K, H, bias=True, ln=False):
    s = 1 / np.sqrt(H)
    out = {prefix + "w_ih": rng.uniform(-s, s, (G * H, K)), prefix + "w_hh": rng.uniform(-s, s, (G * H, H))}
    if bias:
        out[prefix + "b_ih"] = rng.uniform(-s, s, G * H)
        out[prefix + "b_hh"] = rng.uniform(-s, s, G * H)
    if ln:  # the layer-normalized GRU: gains around 1, shifts around 0
        for side in ("ih", "hh"):
            out[f"{prefix}ln_{side}.gain"] = 1 + 0.3 * rng.standard_normal(G * H)
            out[f"{prefix}ln_{side}.bias"] = 0.2 * rng.standard_normal(G * H)
    return out


def seq_case(layer, B, T, K, H, lens, reverse=0, ln=False):
    def make(rng):
        lstm, bi = "lstm" in layer, layer.startswith("bi")
        G = 4 if lstm else 3
        t = {"inp": rng.standard_normal((B, T, K))}
        if bi:
            t.update(cell(rng, "fwd.", G, K, H, ln=ln))
            t.update(cell(rng, "bwd.", G, K, H, ln=ln))
        else:
            t.update(cell(rng, "", G, K, H, ln=ln))
            t["h0"] = 0.5 * rng.standard_normal((B, H))
            if lstm:
                t["c0"] = 0.5 * rng.standard_normal((B, H))
        t["R"] = rng.standard_normal((B, T, (2 if bi else 1) * H))
        return t, dict(layer=layer, B=B, T=T, K=K, H=H, reverse=reverse), lens
    return make


def gnmt_case(L, bi, B, T, K, H, lens):
    def make(rng):
        t = {"inp": rng.standard_normal((B, T, K))}
        t.update(cell(rng, "layer_0.", 4, K, H))
        if bi:
            t.update(cell(rng, "layer_0.bwd.", 4, K, H))
        for l in range(1, L):
            t.update(cell(rng, f"layer_{l}.", 4, (2 if bi and l == 1 else 1) * H, H))
        t["R"] = rng.standard_normal((B, T, (2 if bi and L == 1 else 1) * H))
        return t, dict(layer="gnmt", L=L, bi=bi, B=B, T=T, K=K, H=H), lens
    return make


def att_case(B, Tq, S, Dq, A, Dv, klen, bias=True):
    def make(rng):
        t = {"q": rng.standard_normal((B * Tq, Dq)), "keys": rng.standard_normal((B, S, Dv)),
             "W_q": rng.standard_normal((A, Dq)) / np.sqrt(Dq), "W_k": rng.standard_normal((A, Dv)) / np.sqrt(Dv),
             "v": rng.standard_normal(A) / np.sqrt(A)}
        if bias:
            t["b"] = 0.1 * rng.standard_normal(A)
        t["R"] = rng.standard_normal((B * Tq, Dv))
        return t, dict(layer="attention", B=B, Tq=Tq, S=S, Dq=Dq, A=A, Dv=Dv), klen
    return make


def cgru_case(B, T, S, H, E, Dv, A, O, V, slen, bias=True, ln=False):
    def make(rng):
        n = lambda *shape: rng.standard_normal(shape) / np.sqrt(shape[-1])  # noqa: E731
        t = {"emb": rng.standard_normal((B, T, E)), "s0": 0.5 * rng.standard_normal((B, H)),
             "enc": rng.standard_normal((B, S, Dv))}
        t.update(cell(rng, "gru1.", 3, E, H, bias, ln))
        t.update(cell(rng, "gru2.", 3, Dv, H, bias, ln))
        t.update({"att.W_q": n(A, H), "att.W_k": n(A, Dv), "att.v": n(A), "out.W_s": n(O, H),
                  "out.W_c": n(O, Dv), "out.W_e": n(O, E), "out.W_o": n(V, O)})
        if bias:
            t.update({"att.b": 0.1 * rng.standard_normal(A), "out.b": 0.1 * rng.standard_normal(O),
                      "out.b_o": 0.1 * rng.standard_normal(V)})
        t["R"] = rng.standard_normal((B, T, V))
        return t, dict(layer="cgru", B=B, T=T, S=S, H=H, E=E, Dv=Dv, A=A, O=O, V=V), slen
    return make


def gnmt_dec_case(B, T, S, H, E, Dv, A, slen, h0=True):
    def make(rng):
        t = {"emb": rng.standard_normal((B, T, E)), "enc": rng.standard_normal((B, S, Dv))}
        if h0:
            t["h0"] = 0.5 * rng.standard_normal((B, H))
            t["c0"] = 0.5 * rng.standard_normal((B, H))
        t.update(cell(rng, "lstm.", 4, E + Dv, H))
        t.update({"att.W_q": rng.standard_normal((A, H)) / np.sqrt(H),
                  "att.W_k": rng.standard_normal((A, Dv)) / np.sqrt(Dv),
                  "att.b": 0.1 * rng.standard_normal(A), "att.v": rng.standard_normal(A) / np.sqrt(A)})
        t["R"] = rng.standard_normal(B * T * (H + Dv))
        return t, dict(layer="gnmt_dec", B=B, T=T, S=S, H=H, E=E, Dv=Dv, A=A), slen
    return make


CASES = {
    "gru": seq_case("gru", 4, 7, 16, 24, [7, 4, 1, 6]),
    "gru-reverse": seq_case("gru", 4, 7, 16, 24, [7, 4, 1, 6], reverse=1),
    "lstm": seq_case("lstm", 4, 7, 16, 24, [7, 4, 1, 6]),
    "lstm-reverse": seq_case("lstm", 4, 7, 16, 24, [5, 7, 2, 1], reverse=1),
    "bigru": seq_case("bigru", 5, 6, 20, 16, [6, 3, 5, 1, 6]),
    "bilstm": seq_case("bilstm", 5, 6, 20, 16, [6, 3, 5, 1, 6]),
    "bigru-threaded": seq_case("bigru", 32, 5, 48, 512, [5 - (i % 4) for i in range(32)]),
    "gnmt-bi-residual-L4": gnmt_case(4, 1, 4, 6, 12, 16, [6, 2, 5, 3]),
    "gnmt-uni-residual-L3": gnmt_case(3, 0, 4, 6, 12, 16, [6, 2, 5, 3]),
    "attention": att_case(4, 3, 9, 20, 16, 24, [9, 5, 1, 7]),
    "attention-nobias-threaded": att_case(16, 4, 20, 32, 64, 40, [20 - i for i in range(16)], bias=False),
    "cgru": cgru_case(4, 6, 8, 20, 12, 32, 18, 14, 30, [8, 5, 2, 7]),
    "cgru-nobias-threaded": cgru_case(16, 5, 12, 24, 16, 48, 128, 20, 40, [12 - (i % 6) for i in range(16)],
                                      bias=False),
    "gru-ln": seq_case("gru", 4, 7, 16, 24, [7, 4, 1, 6], ln=True),
    "gru-ln-reverse": seq_case("gru", 4, 7, 16, 24, [7, 4, 1, 6], reverse=1, ln=True),
    "bigru-ln": seq_case("bigru", 5, 6, 20, 16, [6, 3, 5, 1, 6], ln=True),
    "bigru-ln-threaded": seq_case("bigru", 32, 5, 48, 512, [5 - (i % 4) for i in range(32)], ln=True),
    "cgru-ln": cgru_case(4, 6, 8, 20, 12, 32, 18, 14, 30, [8, 5, 2, 7], ln=True),
    "cgru-ln-nobias-threaded": cgru_case(16, 5, 12, 24, 16, 48, 128, 20, 40, [12 - (i % 6) for i in range(16)],
                                         bias=False, ln=True),
    "gnmt-decoder-bottom": gnmt_dec_case(4, 6, 8, 20, 12, 20, 18, [8, 5, 2, 7]),
    "gnmt-decoder-bottom-noh0-threaded": gnmt_dec_case(16, 5, 12, 32, 16, 32, 128, [12 - (i % 6) for i in range(16)],
                                                       h0=False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_layer_matches_pytorch(name, tmp_path, torch_python):
    assert os.path.exists(DRIVER), f"{DRIVER} is missing: run make"
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    tensors, meta, lens = CASES[name](rng)
    data = {k: np.asarray(v, np.float32) for k, v in tensors.items()}
    data["len"] = np.asarray(lens, np.int32)
    inp, out_c, out_t = (str(tmp_path / n) for n in ("in.safetensors", "c.safetensors", "t.npz"))
    st_write(inp, data, {k: str(v) for k, v in meta.items()})
    r = subprocess.run([DRIVER, inp, out_c], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([torch_python, REF, inp, out_t], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    tern, _ = st_read(out_c)
    ref = dict(np.load(out_t))
    names = ["out"] + ["grad/" + k for k in data if k not in ("R", "len")]
    assert set(tern) == set(names) == set(ref), (sorted(tern), sorted(ref))
    worst, worst_name = 0.0, ""
    for n in names:
        a, b = tern[n].astype(np.float64).reshape(-1), ref[n].reshape(-1)
        assert a.shape == b.shape, n
        scale = np.abs(b).max()
        assert scale > 0, f"{n}: PyTorch's value is all zero (the comparison would be vacuous)"
        err = np.abs(a - b).max() / scale
        if err > worst:
            worst, worst_name = err, n
        assert err <= TOL, f"{name} {n}: rel err {err:.3e} > {TOL}"
    print(f"{name}: {len(names)} tensors, worst rel err {worst:.2e} ({worst_name})")
