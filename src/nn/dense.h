/*
 * nn/dense.h — a linear layer as a forward pass reads it, whatever holds its weights: the one
 * forward of the Transformer's linear layers in inference and in training (nn/transformer.h).
 *
 * Legend: M rows of activations, K input and N output features.
 *
 * A layer's weights come from one of two places:
 * - inference: a loaded layer of the kernels (linear_t: float32, or int8 with per-row scales and
 *   run-time quantized activations) and, where transformer_pack made one, its packed copy for
 *   Tern's GEMM kernels (gemm_packed.h: float32 panels, or the int8 kernel with the bias and the
 *   activation fused into its dequantization);
 * - training: float32 weights (N, K) and a bias (N) inside the model's flat parameters, and in
 *   bfloat16 training their bfloat16 copy with its scratch (nn/lowp.h).
 * The arithmetic of each is the kernels': nn_dense_forward only picks which one runs.
 */
#ifndef TERN_NN_DENSE_H
#define TERN_NN_DENSE_H

#include <stddef.h>

#include "kernels/kernels.h"
#include "nn/lowp.h"

/* A growable, 64-byte aligned scratch buffer, kept between calls (the int8 layers' quantized
 * activations; the attention's per-thread scores). */
typedef struct {
    void *p;
    size_t cap; /* bytes */
} nn_scratch_t;

/* p with at least bytes (grown by doubling; the contents are not kept): 0, or -1 out of memory. */
int nn_scratch_grow(nn_scratch_t *s, size_t bytes);
void nn_scratch_free(nn_scratch_t *s);

typedef struct {
    /* inference */
    const linear_t *lin;   /* the loaded layer, or NULL (training) */
    const void *pk;        /* its packed copy, or NULL */
    int act_packed;        /* the packed copy applies the activation itself (nn_dense_act_forward) */
    /* training */
    const float *w, *b;    /* (N, K), (N) float32 (b may be NULL) */
    const bf16_t *w16;     /* (N, K) the bfloat16 copy of w: bfloat16 compute through lowp */
    lowp_ws_t *lowp;
    /* training with fake-quantized activations (tern train --qat int8-act): the input rows are
     * first rounded as int8 inference rounds them (fake_quantize_rows_act) into this buffer (at
     * least M x K floats); NULL: the rows as they are */
    float *fq_buf;
    int K, N;
} nn_dense_t;

/* A training layer: float32 weights w (N, K) and bias b, or bfloat16 compute when w16 (with its
 * workspace lowp) is given. */
static inline nn_dense_t nn_dense_f32(const float *w, const float *b, const bf16_t *w16, lowp_ws_t *lowp, int K,
                                      int N) {
    return (nn_dense_t){.w = w, .b = b, .w16 = w16, .lowp = lowp, .K = K, .N = N};
}
/* An inference layer: lin with its packed copy pk (or NULL). */
static inline nn_dense_t nn_dense_of(const linear_t *lin, const void *pk) {
    return (nn_dense_t){.lin = lin, .pk = pk, .K = lin->K, .N = lin->N};
}

/* out (M, N) = inp (M, K) · W^T + bias: the packed kernel where there is one (and it can run M
 * rows), else the layer as loaded (linear_forward), else (training) gemm_f32 or the bfloat16 GEMM.
 * ws: grown as the int8 layers need. Errors: out of memory, or a packed layer whose plain weights
 * were given back and whose kernel cannot run M rows. */
tern_status_t nn_dense_forward(float *out, const float *inp, const nn_dense_t *d, int M, nn_scratch_t *ws);

/* out = act(dense(inp)): the activation fused into the packed kernel where it does it (float32
 * panels packed with ReLU: act_packed; int8 with ReLU: its dequantization), else after it. */
tern_status_t nn_dense_act_forward(float *out, const float *inp, const nn_dense_t *d, activation_t act, int M,
                                   nn_scratch_t *ws);

#endif
