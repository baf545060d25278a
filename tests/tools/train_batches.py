"""Batches of the training tests against PyTorch (tests/test_train_torch.py,
tests/test_gnmt_train_torch.py): numpy only."""
import numpy as np


def toy_batches(c, rng, NB, B, S, T):
    """A learnable task: the target is the source reversed, each token mapped by a fixed permutation.
    Token ids: pad 0, bos 1, eos 2, words from 3 up to c["src_vocab"] / c["tgt_vocab"]. Returns
    int32 (NB, B, S) sources and (NB, B, T) decoder inputs and targets (T >= S + 1)."""
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


def random_batch(c, rng, B, S, T, lens_src, lens_tgt):
    """One padded batch of random tokens (no token equal to c["pad_id"] inside a sentence;
    sentence b has lens_src[b] source and lens_tgt[b] target tokens, decoder input = a start token,
    then the targets shifted by one): int32 (1, B, S), (1, B, T), (1, B, T)."""
    pad = c["pad_id"]
    lo = max(pad + 1, 1)
    src = np.full((B, S), pad, np.int32)
    tin = np.full((B, T), pad, np.int32)
    tout = np.full((B, T), pad, np.int32)
    for b in range(B):
        src[b, :lens_src[b]] = rng.integers(lo, c["src_vocab"], lens_src[b])
        y = rng.integers(lo, c["tgt_vocab"], lens_tgt[b])
        tin[b, 0] = lo
        tin[b, 1:lens_tgt[b]] = y[:-1]
        tout[b, :lens_tgt[b]] = y
    return src[None], tin[None], tout[None]
