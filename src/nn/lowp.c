/* lowp.c — bfloat16 linear layers for training (see lowp.h). */
#include "nn/lowp.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "nn/layers.h"

tern_status_t lowp_ws_init(lowp_ws_t *ws, size_t max_in, size_t max_out) {
    memset(ws, 0, sizeof *ws);
    tern_status_t st = bf16_check_cpu();
    if (st) return st;
    ws->a = aligned_alloc64((max_in * sizeof(bf16_t) + 63) & ~(size_t)63);
    ws->g = aligned_alloc64((max_out * sizeof(bf16_t) + 63) & ~(size_t)63);
    if (!ws->a || !ws->g) {
        lowp_ws_free(ws);
        return tern_error(TERN_ERR_NOMEM, "bfloat16 workspace: out of memory (%zu bytes)",
                          (max_in + max_out) * sizeof(bf16_t));
    }
    ws->cap_in = max_in;
    ws->cap_out = max_out;
    return TERN_OK;
}

size_t lowp_ws_bytes(const lowp_ws_t *ws) { return (ws->cap_in + ws->cap_out) * sizeof(bf16_t); }

void lowp_ws_free(lowp_ws_t *ws) {
    if (!ws) return;
    aligned_free(ws->a);
    aligned_free(ws->g);
    memset(ws, 0, sizeof *ws);
}

tern_status_t lowp_take_error(lowp_ws_t *ws) {
    tern_status_t st = ws->st;
    ws->st = TERN_OK;
    return st;
}

void lowp_sync_weights(bf16_t *w16, const float *w, size_t n) { bf16_from_f32(w16, w, n); }

static void keep_error(lowp_ws_t *ws, tern_status_t st) {
    if (st && !ws->st) ws->st = st;
}

static int fits(lowp_ws_t *ws, size_t n, size_t cap) {
    if (n <= cap) return 1;
    keep_error(ws, tern_error(TERN_ERR_INTERNAL, "bfloat16 linear layer: %zu elements exceed the workspace (%zu)", n,
                              cap));
    return 0;
}

void lowp_linear_forward(lowp_ws_t *ws, float *out, const float *inp, const bf16_t *w16, const float *b, int M,
                         int K, int N) {
    if (!fits(ws, (size_t)M * K, ws->cap_in)) return;
    bf16_from_f32(ws->a, inp, (size_t)M * K);
    keep_error(ws, gemm_bf16(0, 1, M, N, K, ws->a, K, w16, K, 0.0f, out, N));
    if (b) nn_bias_forward(out, b, M, N);
}

void lowp_linear_backward(lowp_ws_t *ws, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const bf16_t *w16, int M, int K, int N) {
    if (!fits(ws, (size_t)M * N, ws->cap_out) || !fits(ws, (size_t)M * K, ws->cap_in)) return;
    bf16_from_f32(ws->g, dout, (size_t)M * N);
    if (dinp) keep_error(ws, gemm_bf16(0, 0, M, K, N, ws->g, N, w16, K, 1.0f, dinp, K));
    bf16_from_f32(ws->a, inp, (size_t)M * K);
    keep_error(ws, gemm_bf16(1, 0, N, K, M, ws->g, N, ws->a, K, 1.0f, dw, K));
    if (db) nn_bias_backward(db, dout, M, N);
}
