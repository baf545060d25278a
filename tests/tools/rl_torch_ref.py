"""PyTorch reference for RL refinement's step (src/train/rl.h; tests/test_rl_torch.py runs it).

    python3 rl_torch_ref.py rlstep IN.safetensors REWARDS.npy OUT.npz
    python3 rl_torch_ref.py rltrain IN.safetensors REWARDS.npy OUT.npz
    python3 rl_torch_ref.py info

IN is the input of build/tests/tools/family_train_driver's `rlstep` (the parameters, the reference
batch batch/src, batch/tgt_in, batch/tgt_out (1, B, L), the fixed samples rl/samples (B*M, Ls) with
rl/sample_len, metadata: architecture and its configuration, alpha, start_id, eos_id, pad_id).
REWARDS.npy: the samples' rewards r (B*M, float64), computed by the test with NLTK's sentence_gleu.

The objective, written out over the architecture's own PyTorch model (train_torch_ref.py's
Transformer, gnmt_train_torch_ref.py's GNMT, rnn_train_torch_ref.py's attention GRU; float64):

    loss = alpha * NLL(references) / ntokens
           + sum_b sum_m (r_bm - mean_m r_bm) / (M * B) * NLL(y_bm)

NLL(y_bm) = -log p(y_bm, EOS | x_b), each sample teacher-forced on its own (decoder input
start + y, output y + EOS). Gradients by autograd of that loss. OUT: "grad/NAME", loss_sum and
nll_sum (the references' label-smoothed and plain sums), ntokens, rl_weighted_nll.
rltrain: `updates` updates of torch.optim.Adam (lr, beta1, beta2, adam_eps; constant rate) with
clip_grad_norm_ (clip_norm) on that loss, the same samples every update. OUT: losses (the
references' nll per token), rl_terms (sum (r - b) nll / (M B)), grad_norms, "param/NAME".
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_torch_ref import info, st_read  # noqa: E402


def make_model(tensors, meta):
    arch = meta["architecture"]
    if arch == "transformer":
        from train_torch_ref import RefModel, _cfg
        return RefModel(_cfg(meta), tensors)
    if arch == "gnmt":
        from gnmt_train_torch_ref import make_model as mk
    elif arch == "rnn-gru":
        from rnn_train_torch_ref import make_model as mk
    else:
        sys.exit(f"rl_torch_ref: architecture {arch}")
    return mk(tensors, meta)


def load(inp, rewards_path):
    tensors, meta = st_read(inp)
    model = make_model({k: v for k, v in tensors.items() if not k.startswith("rl/")}, meta)
    return model, meta, tensors, np.load(rewards_path)


def objective(model, meta, tensors, r):
    """(total loss, references' (loss, nll, ntokens), sum (r - b) * nll of the samples)."""
    src, tin, tout = tensors["batch/src"][0], tensors["batch/tgt_in"][0], tensors["batch/tgt_out"][0]
    samples, slen = tensors["rl/samples"], tensors["rl/sample_len"]
    B = src.shape[0]
    M = samples.shape[0] // B
    alpha = float(meta["alpha"])
    start, eos = int(meta["start_id"]), int(meta["eos_id"])
    loss, nll, ntok = model.loss(src, tin, tout)
    total = alpha * nll / ntok
    wn = 0.0
    for b in range(B):
        base = r[b * M:(b + 1) * M].mean()
        for m in range(M):
            i = b * M + m
            y = [int(t) for t in samples[i, :slen[i]]]
            ti = np.array([[start] + y], dtype=np.int32)
            to = np.array([y + [eos]], dtype=np.int32)
            _, nll_i, _ = model.loss(src[b:b + 1], ti, to)
            total = total + (r[i] - base) / (M * B) * nll_i
            wn += (r[i] - base) * nll_i.item()
    return total, (loss, nll, ntok), wn


def rl_step(inp, rewards_path, out):
    model, meta, tensors, r = load(inp, rewards_path)
    total, (loss, nll, ntok), wn = objective(model, meta, tensors, r)
    total.backward()
    res = {"grad/" + k: v for k, v in model.grads().items()}
    res.update(loss_sum=np.float64(loss.item()), nll_sum=np.float64(nll.item()), ntokens=np.int64(ntok),
               rl_weighted_nll=np.float64(wn))
    np.savez(out, **res)


def rl_train(inp, rewards_path, out):
    import torch
    model, meta, tensors, r = load(inp, rewards_path)
    B = tensors["batch/src"].shape[1]
    M = tensors["rl/samples"].shape[0] // B
    params = model.unique_params()
    opt = torch.optim.Adam(params, lr=float(meta["lr"]), betas=(float(meta["beta1"]), float(meta["beta2"])),
                           eps=float(meta["adam_eps"]))
    clip = float(meta.get("clip_norm", 0))
    losses, terms, norms = [], [], []
    for _ in range(int(meta["updates"])):
        opt.zero_grad(set_to_none=False)
        total, (_, nll, ntok), wn = objective(model, meta, tensors, r)
        total.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, clip) if clip > 0 else \
            torch.norm(torch.stack([p.grad.norm() for p in params]))
        opt.step()
        losses.append(nll.item() / ntok)
        terms.append(wn / (M * B))
        norms.append(float(norm))
    res = {"param/" + k: v for k, v in model.values().items()}
    res.update(losses=np.array(losses), rl_terms=np.array(terms), grad_norms=np.array(norms))
    np.savez(out, **res)


if __name__ == "__main__":
    if sys.argv[1:2] == ["info"]:
        info()
    elif len(sys.argv) == 5 and sys.argv[1] == "rlstep":
        rl_step(*sys.argv[2:])
    elif len(sys.argv) == 5 and sys.argv[1] == "rltrain":
        rl_train(*sys.argv[2:])
    else:
        sys.exit(__doc__)
