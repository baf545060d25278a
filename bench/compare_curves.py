"""Compares the loss curves of two `tern train` save directories run on the same batches (e.g.
--precision float32 vs bfloat16, same seed): per-update training loss gaps by update range and
the validation losses at the updates both validated.

    .venv/bin/python bench/compare_curves.py SAVE_DIR_A SAVE_DIR_B
"""
import sys

import numpy as np


def curve(path):
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f if not line.startswith("#")]


def main(a_dir, b_dir):
    a, b = curve(f"{a_dir}/train_curve.tsv"), curve(f"{b_dir}/train_curve.tsv")
    n = min(len(a), len(b))
    assert [x[0] for x in a[:n]] == [x[0] for x in b[:n]], "update numbers differ"
    assert [x[7] for x in a[:n]] == [x[7] for x in b[:n]], "the batches differ (target tokens per update)"
    la, lb = np.array([float(x[2]) for x in a[:n]]), np.array([float(x[2]) for x in b[:n]])
    rel = (lb - la) / la
    print(f"{n} common updates; training loss, B vs A:")
    edges = list(range(0, n, 100)) + [n]
    for lo, hi in list(zip(edges[:-1], edges[1:])) + [(max(0, n - 100), n)]:
        print(f"  updates {lo + 1}-{hi}: A {la[lo:hi].mean():.4f}, B {lb[lo:hi].mean():.4f}, mean |rel gap| "
              f"{np.abs(rel[lo:hi]).mean():.2e}, max {np.abs(rel[lo:hi]).max():.2e}, mean signed {rel[lo:hi].mean():+.2e}")
    va = {x[0]: x for x in curve(f"{a_dir}/valid_curve.tsv")}
    vb = {x[0]: x for x in curve(f"{b_dir}/valid_curve.tsv")}
    for k in sorted(set(va) & set(vb), key=int):
        x, y = float(va[k][2]), float(vb[k][2])
        print(f"  validation at {k}: loss A {x:.4f}, B {y:.4f} (rel gap {(y - x) / x:+.2e}); nll {float(va[k][3]):.4f}, "
              f"{float(vb[k][3]):.4f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
