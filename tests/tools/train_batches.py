"""Batches for the whole-model training checks against PyTorch (tests/test_train_torch.py,
tests/test_rnn_gru_train_torch.py, tests/test_gnmt_train_torch.py): numpy only, int32 (NB, B, L),
right-padded with pad_id."""
import numpy as np


def random_batch(c, rng, B, S, T, lens_src, lens_tgt):
    """One batch (NB = 1) of random tokens >= max(pad_id + 1, 1): sources of lens_src tokens,
    targets of lens_tgt tokens; tgt_in starts with that lowest id (with c["start_pad"]: the pad id,
    as a decoder started from the pad token, MarianMT's), then tgt_out shifted by one."""
    pad = c["pad_id"]
    lo = max(pad + 1, 1)
    src = np.full((B, S), pad, np.int32)
    tin = np.full((B, T), pad, np.int32)
    tout = np.full((B, T), pad, np.int32)
    for b in range(B):
        src[b, :lens_src[b]] = rng.integers(lo, c["src_vocab"], lens_src[b])
        y = rng.integers(lo, c["tgt_vocab"], lens_tgt[b])
        tin[b, 0] = pad if c.get("start_pad") else lo
        tin[b, 1:lens_tgt[b]] = y[:-1]
        tout[b, :lens_tgt[b]] = y
    return src[None], tin[None], tout[None]


def toy_batches(c, rng, NB, B, S, T):
    """A learnable task: the target is the source reversed, each token mapped by a fixed permutation
    (pad 0, bos 1, eos 2)."""
    pad, bos, eos, lo = 0, 1, 2, 3
    perm = rng.permutation(np.arange(lo, c["tgt_vocab"]))
    src = np.full((NB, B, S), pad, np.int32)
    tin = np.full((NB, B, T), pad, np.int32)
    tout = np.full((NB, B, T), pad, np.int32)
    for k in range(NB):
        for b in range(B):
            n = int(rng.integers(3, S + 1))
            s = rng.integers(lo, c["src_vocab"], n)
            y = np.concatenate([perm[s[::-1] - lo], [eos]])
            src[k, b, :n] = s
            tin[k, b, :n + 1] = np.concatenate([[bos], y[:-1]])
            tout[k, b, :n + 1] = y
    return src, tin, tout
