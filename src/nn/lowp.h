/*
 * nn/lowp.h — low-precision (bfloat16) compute for the training linear layers, float32 master
 * weights (see docs/training.md, "bfloat16 training").
 *
 * Legend: M rows of activations, K input and N output features of a linear layer.
 *
 * The model keeps float32 parameters (the optimizer's master copy) and, in bfloat16 mode, a
 * bfloat16 copy of them made once per update (lowp_sync_weights, before the first forward pass
 * that follows a change). A linear layer rounds its float32 input (and, backward, its output
 * gradient) to bfloat16 into this workspace's scratch, and runs the GEMMs with bfloat16 operands
 * and float32 accumulation and output (gemm_bf16); biases, gradients, layer norms, attention,
 * the loss and the optimizer stay float32.
 */
#ifndef TERN_NN_LOWP_H
#define TERN_NN_LOWP_H

#include "kernels/gemm_bf16.h"

typedef struct {
    bf16_t *a;        /* (cap_in) the layer input in bfloat16 */
    bf16_t *g;        /* (cap_out) the output gradient in bfloat16 */
    size_t cap_in;    /* elements of a: the largest M·K */
    size_t cap_out;   /* elements of g: the largest M·N */
    tern_status_t st; /* first error of a GEMM since lowp_take_error (sticky) */
} lowp_ws_t;

/* Scratch for layers with M·K <= max_in and M·N <= max_out; checks the CPU (bf16_check_cpu). */
tern_status_t lowp_ws_init(lowp_ws_t *ws, size_t max_in, size_t max_out);
/* Bytes of its scratch. */
size_t lowp_ws_bytes(const lowp_ws_t *ws);
void lowp_ws_free(lowp_ws_t *ws);
/* The first GEMM error since the last call (TERN_OK if none); clears it. */
tern_status_t lowp_take_error(lowp_ws_t *ws);

/* w16[0..n) = bfloat16(w[0..n)): the per-update copy of the master weights. */
void lowp_sync_weights(bf16_t *w16, const float *w, size_t n);

/* out (M, N) = bf16(inp) (M, K) · w16 (N, K)^T + b (N) (b may be NULL). */
void lowp_linear_forward(lowp_ws_t *ws, float *out, const float *inp, const bf16_t *w16, const float *b, int M,
                         int K, int N);
/* dinp += bf16(dout) · w16; dw += bf16(dout)^T · bf16(inp); db += column sums of dout (float32)
 * (dinp, db may be NULL). */
void lowp_linear_backward(lowp_ws_t *ws, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const bf16_t *w16, int M, int K, int N);

#endif
