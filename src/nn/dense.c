/* nn/dense.c — the linear layers' one forward (nn/dense.h). */
#include "nn/dense.h"

#include "kernels/gemm_packed.h"
#include "kernels/kernels.h"
#include "nn/layers.h"

int nn_scratch_grow(nn_scratch_t *s, size_t bytes) {
    if (bytes <= s->cap) return 0;
    size_t n = s->cap ? s->cap : 4096;
    while (n < bytes) n *= 2;
    void *p = aligned_alloc64(n);
    if (!p) return -1;
    aligned_free(s->p);
    s->p = p;
    s->cap = n;
    return 0;
}

void nn_scratch_free(nn_scratch_t *s) {
    aligned_free(s->p);
    s->p = NULL;
    s->cap = 0;
}

static tern_status_t lin_scratch(nn_scratch_t *ws, const linear_t *lin, int M) {
    if (nn_scratch_grow(ws, linear_workspace_size(lin, M)))
        return tern_error(TERN_ERR_NOMEM, "linear workspace: out of memory");
    return TERN_OK;
}

/* The packed copy when there is one and a kernel could be made for M rows: 1 done, 0 not done,
 * < 0 (status in *s) error. relu: the int8 kernel applies ReLU in its dequantization. */
static int run_packed(float *out, const float *inp, const nn_dense_t *d, int M, nn_scratch_t *ws, tern_status_t *s,
                      int relu) {
    if (!d->pk) return 0;
    if (d->lin->kind == WEIGHT_F32) return gemm_packed_forward(out, inp, d->pk, M) == 0;
    if ((*s = lin_scratch(ws, d->lin, M))) return -1;
    return linear_forward_packed_s8_act(out, inp, d->lin, d->pk, M, ws->p, relu) == 0;
}

/* The layer as loaded (its plain weights: no fallback where packing gave them back). */
static tern_status_t run_plain(float *out, const float *inp, const nn_dense_t *d, int M, nn_scratch_t *ws) {
    const linear_t *lin = d->lin;
    if (lin->kind == WEIGHT_F32 ? !lin->w : !lin->q)
        return tern_error(TERN_ERR_NOMEM, "GEMM kernel for %d rows: out of memory", M);
    tern_status_t s = lin_scratch(ws, lin, M);
    if (s) return s;
    linear_forward(out, inp, lin, M, ws->p);
    return TERN_OK;
}

tern_status_t nn_dense_forward(float *out, const float *inp, const nn_dense_t *d, int M, nn_scratch_t *ws) {
    if (!d->lin) { /* training */
        if (d->fq_buf) {
            fake_quantize_rows_act(d->fq_buf, inp, M, d->K);
            inp = d->fq_buf;
        }
        if (d->w16) lowp_linear_forward(d->lowp, out, inp, d->w16, d->b, M, d->K, d->N);
        else nn_linear_forward(out, inp, d->w, d->b, M, d->K, d->N);
        return TERN_OK;
    }
    tern_status_t s = TERN_OK;
    int r = run_packed(out, inp, d, M, ws, &s, 0);
    if (r) return r > 0 ? TERN_OK : s;
    return run_plain(out, inp, d, M, ws);
}

tern_status_t nn_dense_act_forward(float *out, const float *inp, const nn_dense_t *d, activation_t act, int M,
                                   nn_scratch_t *ws) {
    size_t n = (size_t)M * d->N;
    if (!d->lin) {
        tern_status_t s = nn_dense_forward(out, inp, d, M, ws);
        if (!s) activation_forward(out, n, act);
        return s;
    }
    tern_status_t s = TERN_OK;
    int relu_s8 = d->lin->kind == WEIGHT_S8 && act == ACT_RELU;
    int r = run_packed(out, inp, d, M, ws, &s, relu_s8);
    if (r < 0) return s;
    if (r) {
        /* other activations (and ReLU where the float32 kernel was packed without it) run after it */
        if (d->lin->kind == WEIGHT_F32 ? !d->act_packed : !relu_s8) activation_forward(out, n, act);
        return TERN_OK;
    }
    if ((s = run_plain(out, inp, d, M, ws))) return s;
    activation_forward(out, n, act);
    return TERN_OK;
}
