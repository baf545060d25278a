/*
 * emulate.c — the CUDA row kernels on the host (emulate.h): for each row, thread t = 0..T-1 of
 * the block computes its partial with rowops.h, then the tree combines the partials at widths
 * T/2, T/4, ..., 1 exactly as kernels.cu does, then each column's output is written. Compiled with
 * -ffp-contract=off (the Makefile), as kernels.cu is with --fmad=false.
 */
#include "kernels/cuda/emulate.h"

#include <string.h>

#include "kernels/cuda/rowops.h"

#define T ROW_THREADS

static float tree(float *p, float (*op)(float, float)) {
    for (int w = T / 2; w > 0; w >>= 1)
        for (int i = 0; i < w; i++) p[i] = op(p[i], p[i + w]);
    return p[0];
}

void emu_layernorm(float *out, const float *x, const float *gamma, const float *beta, int M, int C, float eps) {
    float p[T];
    for (int m = 0; m < M; m++) {
        const float *r = x + (long)m * C;
        float *o = out + (long)m * C;
        for (int t = 0; t < T; t++) p[t] = ln_partial_sum(r, C, t, T);
        float mean = tree(p, rowop_add) / (float)C;
        for (int t = 0; t < T; t++) p[t] = ln_partial_sqdev(r, mean, C, t, T);
        float rstd = ln_rstd(tree(p, rowop_add), C, eps);
        for (int c = 0; c < C; c++) o[c] = ln_out(r[c], mean, rstd, gamma[c], beta[c]);
    }
}

void emu_softmax(float *out, const float *x, int M, int C, int log_out) {
    float p[T];
    for (int m = 0; m < M; m++) {
        const float *r = x + (long)m * C;
        float *o = out + (long)m * C;
        for (int t = 0; t < T; t++) p[t] = sm_partial_max(r, C, t, T);
        float mx = tree(p, rowop_max);
        for (int t = 0; t < T; t++) p[t] = sm_partial_expsum(r, mx, C, t, T);
        float sum = tree(p, rowop_add);
        float logsum = logf(sum);
        for (int c = 0; c < C; c++) o[c] = log_out ? sm_logprob(r[c], mx, logsum) : sm_prob(r[c], mx, sum);
    }
}

void emu_topk(float *vals, int *idx, const float *x, int M, int C, int k, int log_probs) {
    static float v[T][ROW_TOPK_MAX];
    static int ix[T][ROW_TOPK_MAX];
    int n[T];
    float p[T];
    for (int m = 0; m < M; m++) {
        const float *r = x + (long)m * C;
        for (int t = 0; t < T; t++) topk_partial(v[t], ix[t], &n[t], r, C, k, t, T);
        for (int w = T / 2; w > 0; w >>= 1)
            for (int i = 0; i < w; i++) topk_merge(v[i], ix[i], &n[i], v[i + w], ix[i + w], n[i + w], k);
        float mx = 0, logsum = 0;
        if (log_probs) {
            for (int t = 0; t < T; t++) p[t] = sm_partial_max(r, C, t, T);
            mx = tree(p, rowop_max);
            for (int t = 0; t < T; t++) p[t] = sm_partial_expsum(r, mx, C, t, T);
            logsum = logf(tree(p, rowop_add));
        }
        for (int j = 0; j < k; j++) {
            int ok = j < n[0];
            idx[(long)m * k + j] = ok ? ix[0][j] : -1;
            float val = ok ? v[0][j] : -INFINITY;
            vals[(long)m * k + j] = log_probs && ok ? sm_logprob(val, mx, logsum) : val;
        }
    }
}

void emu_attention(float *out, float *probs, const float *q, const float *K, const float *V, const int *kv,
                   const int *len, long row_ld, long ld, int R, int H, int dh, int max_len, float scale) {
    static float sc[ROW_ATT_MAX];
    float p[T];
    for (int r = 0; r < R; r++)
        for (int h = 0; h < H; h++) {
            int n = len[r] < max_len ? len[r] : max_len;
            long base = (long)(kv ? kv[r] : r) * row_ld + (long)h * dh;
            const float *qr = q + ((long)r * H + h) * dh;
            float *o = out + ((long)r * H + h) * dh;
            if (n <= 0) {
                for (int d = 0; d < dh; d++) o[d] = 0.0f;
                continue;
            }
            for (int j = 0; j < n; j++) sc[j] = att_score(qr, K + base + (long)j * ld, dh, scale);
            for (int t = 0; t < T; t++) p[t] = sm_partial_max(sc, n, t, T);
            float mx = tree(p, rowop_max);
            for (int t = 0; t < T; t++) p[t] = sm_partial_expsum(sc, mx, n, t, T);
            float sum = tree(p, rowop_add);
            for (int j = 0; j < n; j++) sc[j] = sm_prob(sc[j], mx, sum);
            for (int d = 0; d < dh; d++) o[d] = att_out(sc, V + base, ld, n, d);
            if (probs)
                for (int j = 0; j < n; j++) probs[((long)r * H + h) * max_len + j] = sc[j];
        }
}

void emu_embed(float *out, const float *emb, const int *ids, float scale, const float *pos, const int *pos_ids,
               int M, int C) {
    for (int m = 0; m < M; m++) {
        const float *e = emb + (long)ids[m] * C;
        const float *q = pos ? pos + (long)pos_ids[m] * C : NULL;
        for (int c = 0; c < C; c++) out[(long)m * C + c] = embed_out(e[c], scale, q ? q[c] : 0.0f);
    }
}

void emu_gather_rows(float *dst, const float *src, const int *rows, int n, int C) {
    for (int i = 0; i < n; i++) memcpy(dst + (long)i * C, src + (long)rows[i] * C, (size_t)C * sizeof *dst);
}

void emu_dequant(float *out, const int32_t *acc, const float *sa, const float *sw, const float *bias, int M, int N) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++)
            out[(long)m * N + n] = dequant_out(acc[(long)m * N + n], sa[m], sw[n], bias ? bias[n] : 0.0f);
}
