/*
 * nn/attention.h — incremental attention (a decoder step over cached keys and values; float32,
 * AVX2 — the build's baseline ISA, so they run under any TERN_MAX_CPU_ISA cap): scores q · K_j and
 * weighted sums Σ_j p_j V_j over keys and values addressed by row index (base + idx[j] · ld, or
 * base + j · ld without idx).
 *
 * The one-row kernels (att_dots, att_wsum) define the bits: every score is summed like dot()
 * (two 8-float accumulators over 16-float blocks, an 8-float tail into the first, then the same
 * reduction tree) and every weighted-sum element is the chain of fused multiply-adds over
 * j = 0..n-1 from zero. The grouped kernel (att_group) computes the same numbers for up to
 * ATT_GMAX rows at once that read the same keys (the beams of one sentence: the same source in
 * cross-attention, their common prefix of the tree cache in self-attention): each key and value
 * vector is loaded once for all of them. Bit-identical to the one-row kernels (tests/c/test_attention.c).
 */
#ifndef TERN_MODEL_ATTENTION_H
#define TERN_MODEL_ATTENTION_H

#include <stddef.h>

#define ATT_GMAX 4

/* sc[j] = q · K_j for j < n, K_j = base + (idx ? idx[j] : j) · ld (dh floats). */
void att_dots(float *sc, const float *q, const float *base, const int *idx, size_t ld, int n, int dh);
/* o (dh) = Σ_{j<n} p[j] · V_j, V_j = base + (idx ? idx[j] : j) · ld. */
void att_wsum(float *o, const float *p, const float *base, const int *idx, size_t ld, int n, int dh);

/* The attention of g ≤ ATT_GMAX rows (one head) over n keys/values each: row u's query
 * q + u · q_ld, its key/value j at Kb/Vb + idx_u[j] · ld with idx_u = idx + u · idx_ld (idx NULL:
 * row j, the same for all rows). The rows' idx agree on [0, P) (P ≤ n; with idx NULL pass P = n).
 * Writes row u's probabilities softmax(scores) to sc + u · sc_ld (n floats) and its weighted sum
 * to o + u · o_ld (dh floats): the same bits as att_dots, softmax_forward and att_wsum per row. */
void att_group(float *o, size_t o_ld, float *sc, size_t sc_ld, const float *q, size_t q_ld, int g,
               const float *Kb, const float *Vb, const int *idx, size_t idx_ld, size_t ld, int n, int P, int dh);

/* The attention of one row over n keys/values, all H heads: head h's query q + h · dh, its key and
 * value j at Kb/Vb + (idx ? idx[j] : j) · ld + h · dh. Writes head h's probabilities to
 * sc + h · sc_ld (n floats) and its weighted sum to o + h · dh: the same bits as att_dots,
 * softmax_forward and att_wsum per head (each key's row read once for all heads). */
void att_heads(float *o, float *sc, size_t sc_ld, const float *q, const float *Kb, const float *Vb, const int *idx,
               size_t ld, int n, int H, int dh);

/* Brings the first `width` floats of the n rows base + (idx ? idx[j] : j) · ld into the L2 cache
 * (prefetch hints only: the next chunk's keys and values while this chunk computes). */
void att_prefetch(const float *base, const int *idx, size_t ld, int n, int width);

#endif
