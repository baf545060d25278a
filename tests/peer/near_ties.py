"""Greedy outputs of two int8 engines compared line by line: where they differ, how far apart the two
first differing tokens are under CTranslate2's own scores. An int8 model's flipped activation
quantization step moves a log-prob by up to ~0.16 (tests/test_translate_peer.py prints the worst per
model), so tokens closer than 0.2 can swap; a mismatch further apart is a real difference."""

NEAR_TIE = 0.2


def greedy_gaps(ct2, sources, got, want):
    """For each line where got != want (token lists as space-joined strings), CTranslate2's
    log p(got's token) - log p(want's token) at the first differing step (</s> past an end)."""
    gaps = []
    for src, g, w in zip(sources, got, want):
        if g == w:
            continue
        g, w = g.split(), w.split()
        k = next((i for i in range(min(len(g), len(w))) if g[i] != w[i]), min(len(g), len(w)))
        lp = [ct2.score_batch([src], [g[:k] + [t]])[0].log_probs[k] for t in
              (g[k] if k < len(g) else "</s>", w[k] if k < len(w) else "</s>")]
        gaps.append(lp[0] - lp[1])
    return gaps
