/*
 * nn/layers.h — the layers inference and training share: each a pair of free functions, forward and
 * backward (inference calls the forwards).
 *
 * Legend: B sentences in a batch, T (Tq) query/target length, S (Tk) key/source length,
 * C channels (model width), H heads, D = C / H head width, F feed-forward width, V vocabulary,
 * M rows of activations (B × T flattened), K input and N output features of a linear layer,
 * n a flat element count.
 *
 * Conventions (llm.c's):
 * - Fixed argument order: outputs, saved buffers, inputs, weights, then dimensions and options.
 *   `x_forward(out, saved..., inp, weights..., dims)`,
 *   `x_backward(dinp, dweights..., scratch, dout, inp, weights..., saved..., dims)`.
 * - A gradient is named d<x>. EVERY gradient a backward function produces, of parameters and of
 *   inputs alike, ACCUMULATES with +=: the caller zeroes it once. That makes gradient
 *   accumulation over micro-batches free, and lets a residual stream keep one gradient buffer
 *   into which every branch adds. The one exception is the loss (nn_crossentropy_backward), where
 *   the backward pass starts: it writes its output.
 * - Activations are float32, row-major, rows of C contiguous floats. Weights are [N, K] (out, in),
 *   as CTranslate2 and PyTorch store them.
 * - Padding: a token equal to pad_id is padding. Embeddings of padding are zero and receive no
 *   gradient; attention never looks at keys past a sentence's length; the loss ignores padding
 *   targets. Outputs at padded query rows are computed (finite) but reach no loss.
 * - Dropout is driven by a counter-based generator: the mask of element i of a tensor is a pure
 *   function of (key, i), so a backward pass regenerates it instead of storing it, and a resumed
 *   run with the same keys drops the same units. Keys come from dropout_key().
 * - Nothing allocates; large loops use OpenMP; GEMMs go through the kernels' gemm dispatch.
 */
#ifndef TERN_NN_LAYERS_H
#define TERN_NN_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* ------------------------------------------------------------ random numbers */

/* SplitMix64 finalizer: a bijective 64-bit mix. */
uint64_t rng_mix64(uint64_t z);
/* The key of one dropout site: a hash of the run seed, the step (update × micro-batch) and the
 * site id (layer, sublayer), so that each site of each step draws an independent mask. */
uint64_t dropout_key(uint64_t seed, uint64_t step, uint64_t site);
/* The 32 random bits of element i under key (two rounds of a 32-bit integer hash, each a
 * bijection of i for a fixed key). Exposed for tests. */
uint32_t rng_bits32(uint64_t key, uint32_t i);
/* Uniform in [0, 1) and standard normal draws for counter i under key (initialization). */
double rng_uniform(uint64_t key, uint64_t i);
double rng_normal(uint64_t key, uint64_t i);

/* ------------------------------------------------------------ embedding and positions */

/* CTranslate2's sinusoidal position table: row p (0-based) holds sin/cos((p + 1) · ts_i),
 * ts_i = exp(-i · log(10000) / (C/2 - 1)), sines in the first half, cosines in the second (an
 * odd C's last column 0). Training and inference build their tables with this one function. */
void nn_sinusoids(float *table, int P, int C);

/* out = scale · emb + pos (pos NULL: no position), C floats: a token's input row to layer 0, in
 * training (nn_embedding_forward) and in inference (one row per decoder step). */
void nn_embed_row(float *out, const float *emb, float scale, const float *pos, int C);

/* out[b,t,:] = scale * wte[tokens[b,t], :] + pos[t, :]; zero for padding tokens.
 * tokens (B, T) ids in [0, V); wte (V, C); pos (>= T, C) or NULL (no positions). */
void nn_embedding_forward(float *out, const int *tokens, const float *wte, const float *pos, int B,
                          int T, int C, float scale, int pad_id);
/* dwte[tok] += scale * dout[b,t]; dpos[t] += dout[b,t] (dpos may be NULL: fixed positions).
 * Padding tokens contribute nothing. Runs over channel blocks in parallel (no write races). */
void nn_embedding_backward(float *dwte, float *dpos, const float *dout, const int *tokens, int B,
                           int T, int C, float scale, int pad_id);

/* ------------------------------------------------------------ layer normalization */

/* out = (inp - mean) * rstd * g + b over rows of C; saves mean (M) and rstd (M) (either may be
 * NULL). The kernels' layernorm_forward (the inference's own code), rows split between threads. */
void nn_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *g,
                          const float *b, int M, int C, float eps);
void nn_layernorm_backward(float *dinp, float *dg, float *db, const float *dout, const float *inp,
                           const float *g, const float *mean, const float *rstd, int M, int C);

/* ------------------------------------------------------------ linear */

/* The bias of a linear layer (any GEMM path, float32 or bfloat16): out[m, :] += b (N) for each of
 * the M rows; and its gradient db[n] += sum over rows m of dout[m, n] (summed in double). */
void nn_bias_forward(float *out, const float *b, int M, int N);
void nn_bias_backward(float *db, const float *dout, int M, int N);

/* out (M, N) = inp (M, K) · w (N, K)^T + b (N) (b may be NULL). Through gemm_f32. */
void nn_linear_forward(float *out, const float *inp, const float *w, const float *b, int M, int K,
                       int N);
/* dinp += dout · w; dw += dout^T · inp; db += column sums of dout (dinp, db may be NULL). */
void nn_linear_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, int M, int K, int N);
/* The same with dinp = dout · w (overwritten: no zero-fill of dinp needed first). */
void nn_linear_backward_set(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, int M, int K, int N);

/* ------------------------------------------------------------ activations */

/* out = act(inp) over n values (out may alias inp), with the inference's own kernel. Supported:
 * every activation_t (ReLU, GELU with erf, GELU tanh approximation, Swish, GELU sigmoid, tanh). */
void nn_activation_forward(float *out, const float *inp, size_t n, activation_t act);
/* dinp += act'(inp) * dout. */
void nn_activation_backward(float *dinp, const float *dout, const float *inp, size_t n,
                            activation_t act);
/* dinp = act'(inp) * dout (overwritten; dinp may alias dout). */
void nn_activation_backward_set(float *dinp, const float *dout, const float *inp, size_t n,
                                activation_t act);
/* In place over d (M, N), the backward of out = dropout(act(inp)) (dropout p, key as
 * nn_dropout_forward over the M·N elements; p 0: none): d = act'(inp) * dropout(d), and db[n] +=
 * the column sums of the result (nn_bias_backward: the bias gradient of the linear layer whose
 * output inp is), in one pass. */
void nn_activation_backward_bias(float *d, const float *inp, int M, int N, activation_t act, float p, uint64_t key,
                                 float *db);

/* ------------------------------------------------------------ residual and dropout */

/* out = a + b (out may alias a or b). */
void nn_residual_forward(float *out, const float *a, const float *b, size_t n);
/* da += dout; db += dout. */
void nn_residual_backward(float *da, float *db, const float *dout, size_t n);

/* out[i] = keep(key, i) ? inp[i] / (1 - p) : 0, where an element is dropped with probability p
 * (0 <= p < 1; p == 0 copies). out may alias inp. */
void nn_dropout_forward(float *out, const float *inp, size_t n, float p, uint64_t key);
/* out = dropout(act(inp)) (nn_activation_forward then nn_dropout_forward, the same results) in one
 * pass over memory (blocks of a few thousand values: each block through both while in cache). */
void nn_activation_dropout_forward(float *out, const float *inp, size_t n, activation_t act, float p, uint64_t key);
/* sum = dropout(sum) + x (nn_dropout_forward in place then nn_residual_forward, the same results)
 * in one pass. */
void nn_dropout_residual_forward(float *sum, const float *x, size_t n, float p, uint64_t key);
/* dinp[i] += keep(key, i) ? dout[i] / (1 - p) : 0 (the mask regenerated from the key). */
void nn_dropout_backward(float *dinp, const float *dout, size_t n, float p, uint64_t key);
/* nn_dropout_forward(out, inp, M·N, p, key) over M rows of N, with db[n] += the column sums of out
 * (nn_bias_backward(db, out, M, N)) in the same pass; p > 0, out does not alias inp. */
void nn_dropout_forward_bias(float *out, const float *inp, int M, int N, float p, uint64_t key, float *db);

/* ------------------------------------------------------------ multi-head attention */

/* Scaled dot-product attention of H heads, for each sentence b and head h:
 *   att[b,h] = softmax(Q_bh K_bh^T / sqrt(D)) with keys j >= klen[b] masked and, when causal,
 *   keys j > i masked; out[b,:,h*D:(h+1)*D] = dropout(att[b,h]) · V_bh.
 * q: (B, Tq) rows of stride ldq, head h at columns [h*D, (h+1)*D); k, v: (B, Tk) rows of stride
 * ldkv. Self-attention passes the fused (B, T, 3C) QKV with q = qkv, k = qkv + C, v = qkv + 2C,
 * ldq = ldkv = 3C; cross-attention q (B, T, C) with ldq = C and the fused (B, S, 2C) KV.
 * out (B, Tq, C); att (B, H, Tq, Tk) saved: the probabilities before dropout, 0 where masked.
 * klen (B): valid keys per sentence (1..Tk), or NULL for all Tk.
 * p_drop > 0 drops attention weights (mask element = flat index in att under key) and needs
 * scratch (B, H, Tq, Tk); scratch may be NULL when p_drop == 0. */
void nn_attention_forward(float *out, float *att, float *scratch, const float *q, int ldq,
                          const float *k, const float *v, int ldkv, const int *klen, int B, int Tq,
                          int Tk, int C, int H, int causal, float p_drop, uint64_t key);
/* dq (stride ldq), dk and dv (stride ldkv) += the gradients; for self-attention they point into
 * one fused (B, T, 3C) dqkv. scratch (B, H, Tq, Tk) is overwritten. */
void nn_attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                           const float *q, int ldq, const float *k, const float *v, int ldkv,
                           const float *att, int B, int Tq, int Tk, int C, int H, float p_drop,
                           uint64_t key);

/* ------------------------------------------------------------ loss */

/* Label-smoothed cross-entropy over rows of V logits (fairseq's label_smoothed_cross_entropy in
 * its original form, and PyTorch's cross_entropy(label_smoothing=eps)):
 *   nll[m]  = -log p[m, y_m]
 *   loss[m] = (1 - eps) * nll[m] + eps / V * sum_j -log p[m, j]
 * Rows whose target is pad_id get loss = nll = 0. probs (M, V) receives softmax(logits) (saved
 * for the backward; may alias logits). Returns the number of non-padding rows; *loss_sum and
 * *nll_sum (may be NULL) receive the sums over rows, accumulated in double. */
int nn_crossentropy_forward(float *probs, float *losses, float *nlls, double *loss_sum,
                            double *nll_sum, const float *logits, const int *targets, int M, int V,
                            float eps, int pad_id);
/* dlogits = grad_scale * (probs - q), q = (1 - eps) onehot(y) + eps / V: the gradient of
 * grad_scale * sum_m loss[m]. Padding rows get 0. WRITES dlogits (the start of the backward pass);
 * dlogits may alias probs. */
void nn_crossentropy_backward(float *dlogits, const float *probs, const int *targets, int M, int V,
                              float eps, int pad_id, float grad_scale);

#endif
