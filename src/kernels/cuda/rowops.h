/*
 * rowops.h — the arithmetic of Tern's CUDA row kernels, written once for the GPU and the host.
 *
 * Legend: C columns of a row (channels, or V for a vocabulary row), T threads of the block that
 * owns one row (ROW_THREADS), t a thread's index in it, k the size of a top-k list.
 *
 * A CUDA row kernel (kernels.cu) gives one row to one block of T threads: thread t visits the
 * columns c = t, t + T, t + 2T, ... (a strided pass, coalesced on the device), keeps a partial
 * result, and the T partials are combined by a tree: at width w = T/2, T/4, ..., 1, partial[i] ⊕=
 * partial[i + w] for i < w (what a shared-memory reduction and the __shfl_down_sync one both do).
 * Every step of that is a function here, used by the device kernels and by the host emulation
 * (emulate.c), which runs the same steps for t = 0..T-1 in turn. So the GPU's results are checked
 * against the emulation on the same inputs (bit for bit where no transcendental function is
 * involved: layer norm, top-k, gathers, dequantization; within the device's expf/logf error
 * otherwise), and the emulation is checked on every CPU against the double-precision scalar
 * references of kernels_ref.c (tests/c/test_cuda_host.c). Both sides are compiled without
 * floating-point contraction (nvcc --fmad=false, cc -ffp-contract=off): the fused multiply-adds
 * are the explicit fmaf() calls below, so that both sides round the same operations.
 *
 * This header is C11 for the host and CUDA C++ for nvcc; it includes nothing of Tern's.
 */
#ifndef TERN_CUDA_ROWOPS_H
#define TERN_CUDA_ROWOPS_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define ROWOP static __host__ __device__ __forceinline__
#else
#define ROWOP static inline
#endif

/* Threads per row block (a power of two: the tree halves it). */
#define ROW_THREADS 256
/* Largest k of the row top-k (a beam of 16 takes 2 x 16 candidates per row). */
#define ROW_TOPK_MAX 32
/* Most keys of one attention row (the scores of a row live in shared memory: 16 KiB). */
#define ROW_ATT_MAX 4096

/* ------------------------------------------------------------ the tree */

/* Tree steps for T threads: at each width w (T/2 down to 1), slot i < w takes slot i + w. The
 * callers write the loop (`for (w = T / 2; w > 0; w >>= 1)`), the combination is one of these. */
ROWOP float rowop_add(float a, float b) { return a + b; }
ROWOP float rowop_max(float a, float b) { return b > a ? b : a; }

/* ------------------------------------------------------------ layer norm */

/* Thread t's partial sum of x over its columns (in column order). */
ROWOP float ln_partial_sum(const float *x, int C, int t, int T) {
    float s = 0.0f;
    for (int c = t; c < C; c += T) s += x[c];
    return s;
}

/* Thread t's partial sum of squared deviations from mean. */
ROWOP float ln_partial_sqdev(const float *x, float mean, int C, int t, int T) {
    float s = 0.0f;
    for (int c = t; c < C; c += T) {
        float d = x[c] - mean;
        s = fmaf(d, d, s);
    }
    return s;
}

/* 1 / sqrt(var + eps), both divisions and the root correctly rounded on both sides (CUDA's
 * defaults without --use_fast_math: -prec-div=true -prec-sqrt=true). */
ROWOP float ln_rstd(float sqdev_sum, int C, float eps) { return 1.0f / sqrtf(sqdev_sum / (float)C + eps); }

/* out[c] = (x[c] - mean) * rstd * gamma[c] + beta[c]. */
ROWOP float ln_out(float x, float mean, float rstd, float gamma, float beta) {
    return fmaf((x - mean) * rstd, gamma, beta);
}

/* ------------------------------------------------------------ softmax and log-softmax */

ROWOP float sm_partial_max(const float *x, int C, int t, int T) {
    float m = -INFINITY;
    for (int c = t; c < C; c += T) m = x[c] > m ? x[c] : m;
    return m;
}

/* Thread t's partial sum of exp(x - max); a row whose max is -inf (all -inf) sums 0. */
ROWOP float sm_partial_expsum(const float *x, float max, int C, int t, int T) {
    float s = 0.0f;
    if (max == -INFINITY) return s;
    for (int c = t; c < C; c += T) s += expf(x[c] - max);
    return s;
}

/* softmax: exp(x - max) / sum (0 for a row of -inf); log-softmax: (x - max) - log(sum) (-inf). */
ROWOP float sm_prob(float x, float max, float sum) { return max == -INFINITY ? 0.0f : expf(x - max) / sum; }
ROWOP float sm_logprob(float x, float max, float logsum) { return max == -INFINITY ? -INFINITY : (x - max) - logsum; }

/* ------------------------------------------------------------ top-k of a row */

/* A descending list of up to k (value, index) pairs; order: greater value first, equal values by
 * lower index first (topk_ref's order, so results are exact). NaN never enters. */
ROWOP int topk_before(float va, int ia, float vb, int ib) { return va > vb || (va == vb && ia < ib); }

/* Inserts (v, i) into the list vals/idx of *len entries (at most k). */
ROWOP void topk_push(float *vals, int *idx, int *len, int k, float v, int i) {
    if (v != v) return; /* NaN */
    int n = *len;
    if (n == k && !topk_before(v, i, vals[n - 1], idx[n - 1])) return;
    int p = n < k ? n : k - 1;
    while (p > 0 && topk_before(v, i, vals[p - 1], idx[p - 1])) {
        vals[p] = vals[p - 1];
        idx[p] = idx[p - 1];
        p--;
    }
    vals[p] = v;
    idx[p] = i;
    if (n < k) *len = n + 1;
}

/* Thread t's list over its columns. */
ROWOP void topk_partial(float *vals, int *idx, int *len, const float *x, int C, int k, int t, int T) {
    *len = 0;
    for (int c = t; c < C; c += T) topk_push(vals, idx, len, k, x[c], c);
}

/* Merges list b into list a (the tree's step for top-k): the k best of both, in order. */
ROWOP void topk_merge(float *va, int *ia, int *na, const float *vb, const int *ib, int nb, int k) {
    float v[ROW_TOPK_MAX];
    int ix[ROW_TOPK_MAX];
    int p = 0, q = 0, n = 0;
    while (n < k && (p < *na || q < nb)) {
        if (q >= nb || (p < *na && topk_before(va[p], ia[p], vb[q], ib[q]))) {
            v[n] = va[p];
            ix[n++] = ia[p++];
        } else {
            v[n] = vb[q];
            ix[n++] = ib[q++];
        }
    }
    for (int j = 0; j < n; j++) {
        va[j] = v[j];
        ia[j] = ix[j];
    }
    *na = n;
}

/* ------------------------------------------------------------ attention of a decoder step */

/* One query row and one head over n cached keys/values (dh floats each, key j at k + j * ld):
 * score j = (q · k_j) * scale, the dot product a chain of fmaf over d = 0..dh-1 from zero (a thread
 * computes whole scores: j = t, t + T, ...); then the row's softmax (max and sum of exp by the
 * tree); output element d = the chain of fmaf over j = 0..n-1 of p_j * v_j[d] from zero. */
ROWOP float att_score(const float *q, const float *k, int dh, float scale) {
    float s = 0.0f;
    for (int d = 0; d < dh; d++) s = fmaf(q[d], k[d], s);
    return s * scale;
}

ROWOP float att_out(const float *p, const float *v, long ld, int n, int d) {
    float o = 0.0f;
    for (int j = 0; j < n; j++) o = fmaf(p[j], v[(long)j * ld + d], o);
    return o;
}

/* ------------------------------------------------------------ embeddings and gathers */

/* out = emb * scale + pos (the Transformer's scaled embedding plus its position row, which the
 * device reads from the model's table; pos 0 for none): one multiply and one add, rounded as the
 * CPU path's two passes round them. */
ROWOP float embed_out(float emb, float scale, float pos) { return emb * scale + pos; }

/* ------------------------------------------------------------ int8 GEMM epilogue */

/* The int8 linear layer's dequantization (kernels.h, linear_forward): an int32 sum of int8
 * activations (row scale sa) times int8 weights (row scale sw), plus the bias. */
ROWOP float dequant_out(int32_t acc, float sa, float sw, float bias) { return (float)acc / (sa * sw) + bias; }

#endif
