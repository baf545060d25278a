/* nn/transformer.c — the Transformer's layers, one forward for inference and training
 * (nn/transformer.h). */
#include "nn/transformer.h"

#include <math.h>
#include <omp.h>

const float *nn_sublayer_in(float *ln, float *mean, float *rstd, const float *x, const nn_norm_t *norm, int M,
                            int C, float eps, int pre_norm) {
    if (!pre_norm) return x;
    nn_layernorm_forward(ln, mean, rstd, x, norm->g, norm->b, M, C, eps);
    return ln;
}

const float *nn_sublayer_out(float *sum, float *ln, float *mean, float *rstd, const float *f, const float *x,
                             const nn_norm_t *norm, int M, int C, float eps, int pre_norm, float p, uint64_t key) {
    size_t n = (size_t)M * C;
    if (sum == f) nn_dropout_residual_forward(sum, x, n, p, key); /* sum = dropout(f) + x */
    else nn_residual_forward(sum, x, f, n);                         /* p = 0: sum = x + f */
    if (pre_norm) return sum;
    nn_layernorm_forward(ln, mean, rstd, sum, norm->g, norm->b, M, C, eps);
    return ln;
}

tern_status_t nn_ffn_forward(float *out, float *fc, float *h, const float *in, const nn_dense_t *w1,
                             const nn_dense_t *w2, activation_t act, float p, uint64_t key, int M, nn_scratch_t *ws) {
    tern_status_t s;
    if (fc) {
        if ((s = nn_dense_forward(fc, in, w1, M, ws))) return s;
        nn_activation_dropout_forward(h, fc, (size_t)M * w1->N, act, p, key);
    } else if ((s = nn_dense_act_forward(h, in, w1, act, M, ws))) {
        return s;
    }
    return nn_dense_forward(out, h, w2, M, ws);
}

/* The packed batch's self-attention: one (sentence, head) pair per task, each thread with its own
 * scores (S, S); the GEMMs inside the parallel region run on one thread. */
static tern_status_t packed_attention(float *ctx, const float *qkv, const nn_batch_t *bt, int C, int H,
                                      nn_scratch_t *ws) {
    int dh = C / H, S = bt->S, tasks = bt->B * H, nt = kernels_get_num_threads();
    float alpha = 1.0f / sqrtf((float)dh);
    if (nt > tasks) nt = tasks;
    if (nt < 1) nt = 1;
    size_t stride = ((size_t)S * S + 15) & ~(size_t)15;
    if (nn_scratch_grow(ws, stride * nt * sizeof(float)))
        return tern_error(TERN_ERR_NOMEM, "encoder attention scores: out of memory");
    float *scores = ws->p;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1)
    for (int task = 0; task < tasks; task++) {
        int n = task / H, h = task % H;
        float *sc = scores + stride * (size_t)omp_get_thread_num();
        int L = bt->len[n], off = bt->off[n];
        const float *base = qkv + (size_t)off * 3 * C;
        const float *Q = base + h * dh, *K = base + C + h * dh, *V = base + 2 * C + h * dh;
        gemm_f32(0, 1, L, L, dh, alpha, Q, 3 * C, K, 3 * C, 0.0f, sc, L);
        softmax_forward(sc, sc, L, L);
        gemm_f32(0, 0, L, dh, L, 1.0f, sc, L, V, 3 * C, 0.0f, ctx + (size_t)off * C + h * dh, C);
    }
    return TERN_OK;
}

tern_status_t nn_encoder_attention_forward(float *ctx, float *att, float *scratch, const float *qkv,
                                           const nn_batch_t *bt, int C, int H, float p, uint64_t key,
                                           nn_scratch_t *ws) {
    if (bt->off) {
        if (p > 0.0f) return tern_error(TERN_ERR_INTERNAL, "encoder attention: dropout on a packed batch");
        return packed_attention(ctx, qkv, bt, C, H, ws);
    }
    nn_attention_forward(ctx, att, scratch, qkv, 3 * C, qkv + C, qkv + 2 * C, 3 * C, bt->len, bt->B, bt->S, bt->S,
                         C, H, 0, p, key);
    return TERN_OK;
}

tern_status_t nn_encoder_layer_forward(const float **y, const nn_encoder_acts_t *a, const float *x,
                                       const nn_encoder_layer_t *w, const nn_batch_t *bt, int M,
                                       const nn_tdims_t *d, const nn_tdrop_t *dr, nn_scratch_t *ws) {
    int C = d->C;
    tern_status_t s;
    /* self-attention */
    const float *in = nn_sublayer_in(a->ln1, a->mean1, a->rstd1, x, &w->ln_att, M, C, d->eps, d->pre_norm);
    if ((s = nn_dense_forward(a->qkv, in, &w->qkv, M, ws))) return s;
    if ((s = nn_encoder_attention_forward(a->ctx, a->att, a->att_scratch, a->qkv, bt, C, d->H, dr->p_att, dr->k_att,
                                          ws)))
        return s;
    if ((s = nn_dense_forward(a->sum1, a->ctx, &w->out, M, ws))) return s;
    x = nn_sublayer_out(a->sum1, a->ln1, a->mean1, a->rstd1, a->sum1, x, &w->ln_att, M, C, d->eps, d->pre_norm, dr->p,
                        dr->k_att_out);
    /* feed-forward */
    in = nn_sublayer_in(a->ln2, a->mean2, a->rstd2, x, &w->ln_ffn, M, C, d->eps, d->pre_norm);
    if ((s = nn_ffn_forward(a->sum2, a->fc, a->h, in, &w->ffn1, &w->ffn2, d->act, dr->p_act, dr->k_act, M, ws)))
        return s;
    *y = nn_sublayer_out(a->sum2, a->ln2, a->mean2, a->rstd2, a->sum2, x, &w->ln_ffn, M, C, d->eps, d->pre_norm,
                         dr->p, dr->k_ffn_out);
    return TERN_OK;
}
