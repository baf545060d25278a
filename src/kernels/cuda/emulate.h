/*
 * emulate.h — the CUDA row kernels (kernels.cu) run on the host: the same steps of rowops.h in the
 * same order, thread after thread, with the same tree. What the device computes is compared with
 * these on the same inputs (tests/cuda/), and these with kernels_ref.c on every CPU
 * (tests/c/test_cuda_host.c). Legend: M rows, C columns, k top-k size, N output features.
 * Built into the tests only (not into libtern): compile with -ffp-contract=off.
 */
#ifndef TERN_CUDA_EMULATE_H
#define TERN_CUDA_EMULATE_H

#include <stdint.h>

/* out[M, C] = layer norm of x's rows (gamma, beta: C). out may alias x. */
void emu_layernorm(float *out, const float *x, const float *gamma, const float *beta, int M, int C, float eps);
/* out[M, C] = softmax (log_out 0) or log-softmax (1) of x's rows. out may alias x. */
void emu_softmax(float *out, const float *x, int M, int C, int log_out);
/* Per row: the k best (value, index) of x (vals/idx: [M, k], descending, ties by lower index);
 * with log_probs, the values are the row's log-softmax (the top-k of the logits, then each value
 * turned into its log-probability, as the fused kernel does). k <= ROW_TOPK_MAX, k <= C. */
void emu_topk(float *vals, int *idx, const float *x, int M, int C, int k, int log_probs);
/* out[M, C]: row m = emb[ids[m]] * scale + pos[pos_ids[m]] (pos NULL: no positions). */
void emu_embed(float *out, const float *emb, const int *ids, float scale, const float *pos, const int *pos_ids,
               int M, int C);
/* A decoder step's attention, H heads of dh: query row r (q + r * H * dh) attends to the len[r]
 * keys/values of cache row kv[r] (kv NULL: r), key j of head h at K + kv[r] * row_ld + j * ld +
 * h * dh (likewise V); out [R, H * dh]; probs [R, H, max_len] when not NULL (the first len[r] of
 * each). len[r] 0 gives zeros; one above max_len counts as max_len. max_len <= ROW_ATT_MAX. */
void emu_attention(float *out, float *probs, const float *q, const float *K, const float *V, const int *kv,
                   const int *len, long row_ld, long ld, int R, int H, int dh, int max_len, float scale);
/* dst[i] = src[rows[i]] for n rows of C floats (the beam's set_rows). */
void emu_gather_rows(float *dst, const float *src, const int *rows, int n, int C);
/* out[M, N] = acc / (sa[m] * sw[n]) + bias[n] (bias NULL: 0). */
void emu_dequant(float *out, const int32_t *acc, const float *sa, const float *sw, const float *bias, int M, int N);

#endif
