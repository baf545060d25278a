/*
 * layers.c — forward and backward of the training layers (see layers.h for the conventions).
 *
 * Legend: B sentences, T/Tq query length, S/Tk key length, C channels, H heads, D = C / H,
 * F feed-forward width, V vocabulary, M rows, K/N input/output features, n elements.
 */
#include "nn/layers.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* Below this many elements an elementwise loop runs on one thread (OpenMP start-up costs more). */
#define PAR_MIN 32768

/* ------------------------------------------------------------ random numbers */

uint64_t rng_mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t dropout_key(uint64_t seed, uint64_t step, uint64_t site) {
    return rng_mix64(rng_mix64(rng_mix64(seed) ^ step) ^ site);
}

/* Chris Wellons' lowbias32: a bijective 32-bit integer hash with low bias. */
static inline uint32_t hash32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

static inline uint32_t bits32(uint32_t k0, uint32_t k1, uint32_t i) {
    return hash32(hash32(i + k0) ^ k1);
}

uint32_t rng_bits32(uint64_t key, uint32_t i) { return bits32((uint32_t)key, (uint32_t)(key >> 32), i); }

double rng_uniform(uint64_t key, uint64_t i) {
    return (double)(rng_mix64(key + rng_mix64(i)) >> 11) * (1.0 / 9007199254740992.0);
}

double rng_normal(uint64_t key, uint64_t i) {
    double u1 = rng_uniform(key, 2 * i), u2 = rng_uniform(key, 2 * i + 1);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

/* The threshold under which 32 random bits mean "dropped" (probability p). */
static inline uint32_t drop_threshold(float p) {
    double t = (double)p * 4294967296.0;
    return t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

/* ------------------------------------------------------------ helpers */

/* Dropout of n elements whose mask indices start at base: out[j] = keep ? in[j] * inv : 0
 * (accumulate: out[j] += that). Plain uint32 loops without branches (the kept value is masked
 * bitwise: +0.0f where dropped, as before), so that the compiler vectorizes the hash; the mask
 * of element j is bits32(k0, k1, base + j) >= thr, as everywhere. */
static inline float keep_or_zero(float v, uint32_t bits, uint32_t thr) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    u &= 0u - (uint32_t)(bits >= thr);
    memcpy(&v, &u, sizeof v);
    return v;
}

static inline void drop_mul(float *restrict out, const float *restrict in, uint32_t n, uint32_t base, uint32_t k0,
                            uint32_t k1, uint32_t thr, float inv) {
    for (uint32_t j = 0; j < n; j++) out[j] = keep_or_zero(in[j] * inv, bits32(k0, k1, base + j), thr);
}

static inline void drop_mul_acc(float *restrict out, const float *restrict in, uint32_t n, uint32_t base, uint32_t k0,
                                uint32_t k1, uint32_t thr, float inv) {
    for (uint32_t j = 0; j < n; j++) out[j] += keep_or_zero(in[j] * inv, bits32(k0, k1, base + j), thr);
}

/* In place (out == in allowed): same as drop_mul. */
static inline void drop_mul_inplace(float *x, uint32_t n, uint32_t base, uint32_t k0, uint32_t k1, uint32_t thr,
                                    float inv) {
    for (uint32_t j = 0; j < n; j++) x[j] = keep_or_zero(x[j] * inv, bits32(k0, k1, base + j), thr);
}

#define DROP_BLK 4096

/* Column sums (the bias and layer-norm parameter gradients) walk the rows in order, each row's
 * columns [c0, c0 + w) at once into double sums on the stack: contiguous loads the compiler
 * vectorizes and the prefetcher follows; each column is summed over m = 0, 1, ... in order,
 * whatever the split. Blocks of up to COLSUM_BLK columns, split between threads. */
#define COLSUM_BLK 4096

/* The number of column blocks for N columns: at least one per thread (when wide enough). */
static int colsum_blocks(int N) {
    int nb = (N + COLSUM_BLK - 1) / COLSUM_BLK, nt = omp_get_max_threads();
    if (nb < nt) nb = nt < (N + 63) / 64 ? nt : (N + 63) / 64;
    return nb;
}

/* acc[n] += sum over rows m of x[m, n], x (M, N); column blocks in parallel, double sums. */
static void colsum_acc(float *acc, const float *x, int M, int N) {
    int nblk = colsum_blocks(N);
#pragma omp parallel for schedule(static) if ((size_t)M * N >= PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = (int)((long long)N * blk / nblk), w = (int)((long long)N * (blk + 1) / nblk) - c0;
        double s[COLSUM_BLK];
        for (int c = 0; c < w; c++) s[c] = 0;
        for (int m = 0; m < M; m++) {
            const float *r = x + (size_t)m * N + c0;
            for (int c = 0; c < w; c++) s[c] += r[c];
        }
        for (int c = 0; c < w; c++) acc[c0 + c] += (float)s[c];
    }
}

/* ------------------------------------------------------------ embedding and positions */

void nn_sinusoids(float *table, int P, int C) {
    int half = C / 2;
    float inc = logf(10000.0f) / (float)(half > 1 ? half - 1 : 1);
    for (int pos = 0; pos < P; pos++) {
        float *row = table + (size_t)pos * C;
        for (int i = 0; i < half; i++) {
            float ts = expf(-inc * (float)i);
            float v = (float)(pos + 1) * ts;
            row[i] = sinf(v);
            row[half + i] = cosf(v);
        }
        if (C % 2) row[C - 1] = 0.0f;
    }
}

void nn_embed_row(float *out, const float *emb, float scale, const float *pos, int C) {
    if (pos)
        for (int c = 0; c < C; c++) out[c] = scale * emb[c] + pos[c];
    else
        for (int c = 0; c < C; c++) out[c] = scale * emb[c];
}

void nn_embedding_forward(float *out, const int *tokens, const float *wte, const float *pos, int B,
                          int T, int C, float scale, int pad_id) {
    int BT = B * T;
#pragma omp parallel for schedule(static) if ((size_t)BT * C >= PAR_MIN)
    for (int bt = 0; bt < BT; bt++) {
        float *o = out + (size_t)bt * C;
        int tok = tokens[bt], t = bt % T;
        if (tok == pad_id) {
            memset(o, 0, (size_t)C * sizeof(float));
            continue;
        }
        nn_embed_row(o, wte + (size_t)tok * C, scale, pos ? pos + (size_t)t * C : NULL, C);
    }
}

void nn_embedding_backward(float *dwte, float *dpos, const float *dout, const int *tokens, int B,
                           int T, int C, float scale, int pad_id) {
    int BT = B * T, nblk = (C + 63) / 64;
    /* Each thread owns a block of channels: repeated tokens never race. */
#pragma omp parallel for schedule(static) if ((size_t)BT * C >= PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * 64, c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int bt = 0; bt < BT; bt++) {
            int tok = tokens[bt];
            if (tok == pad_id) continue;
            const float *g = dout + (size_t)bt * C;
            float *e = dwte + (size_t)tok * C;
            for (int c = c0; c < c1; c++) e[c] += scale * g[c];
            if (dpos) {
                float *p = dpos + (size_t)(bt % T) * C;
                for (int c = c0; c < c1; c++) p[c] += g[c];
            }
        }
    }
}

/* ------------------------------------------------------------ layer normalization */

/* Threads for a row-wise pass over n values in M rows: the calling thread's intra-op threads
 * (kernels_get_num_threads) for a large block (an encoder's or a training batch's tokens), else 1:
 * a decoder step's rows measured no faster split, and each extra parallel region is one more place
 * where a thread waits. The rows are independent: the same values whatever the split. */
static int rows_team(size_t n, int M) {
    if (n < ((size_t)1 << 17)) return 1;
    int t = kernels_get_num_threads();
    return t < M ? (t > 0 ? t : 1) : (M > 0 ? M : 1);
}

void nn_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *g,
                          const float *b, int M, int C, float eps) {
    int nt = rows_team((size_t)M * C, M);
    if (nt == 1) {
        layernorm_forward(out, mean, rstd, inp, g, b, M, C, eps);
        return;
    }
    /* The kernel is row-wise: split the rows between threads. */
#pragma omp parallel num_threads(nt)
    {
        int n = omp_get_num_threads(), id = omp_get_thread_num();
        int m0 = (int)((long long)M * id / n), m1 = (int)((long long)M * (id + 1) / n);
        if (m1 > m0)
            layernorm_forward(out + (size_t)m0 * C, mean ? mean + m0 : NULL, rstd ? rstd + m0 : NULL,
                              inp + (size_t)m0 * C, g, b, m1 - m0, C, eps);
    }
}

void nn_layernorm_backward(float *dinp, float *dg, float *db, const float *dout, const float *inp,
                           const float *g, const float *mean, const float *rstd, int M, int C) {
    /* dinp: rows in parallel. */
#pragma omp parallel for schedule(static) if ((size_t)M * C >= PAR_MIN)
    for (int m = 0; m < M; m++) {
        const float *x = inp + (size_t)m * C, *dy = dout + (size_t)m * C;
        float mu = mean[m], rs = rstd[m];
        double s1 = 0, s2 = 0;
        /* simd: the double sums in vector lanes (only their order differs from a plain loop) */
#pragma omp simd reduction(+ : s1, s2)
        for (int c = 0; c < C; c++) {
            float dn = dy[c] * g[c];
            s1 += dn;
            s2 += dn * (x[c] - mu) * rs;
        }
        float m1 = (float)(s1 / C), m2 = (float)(s2 / C);
        float *dx = dinp + (size_t)m * C;
        for (int c = 0; c < C; c++) {
            float xh = (x[c] - mu) * rs;
            dx[c] += (dy[c] * g[c] - m1 - xh * m2) * rs;
        }
    }
    /* dg, db: column blocks in parallel, double sums (each column over m = 0, 1, ... in order). */
    int nblk = colsum_blocks(C);
#pragma omp parallel for schedule(static) if ((size_t)M * C >= PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = (int)((long long)C * blk / nblk), w = (int)((long long)C * (blk + 1) / nblk) - c0;
        double sg[COLSUM_BLK], sb[COLSUM_BLK];
        for (int c = 0; c < w; c++) sg[c] = sb[c] = 0;
        for (int m = 0; m < M; m++) {
            const float *x = inp + (size_t)m * C + c0, *dy = dout + (size_t)m * C + c0;
            float mu = mean[m], rs = rstd[m];
            for (int c = 0; c < w; c++) {
                sg[c] += dy[c] * ((x[c] - mu) * rs);
                sb[c] += dy[c];
            }
        }
        for (int c = 0; c < w; c++) {
            dg[c0 + c] += (float)sg[c];
            db[c0 + c] += (float)sb[c];
        }
    }
}

/* ------------------------------------------------------------ linear */

void nn_bias_forward(float *out, const float *b, int M, int N) {
#pragma omp parallel for schedule(static) if ((size_t)M * N >= PAR_MIN)
    for (int m = 0; m < M; m++) add_inplace(out + (size_t)m * N, b, (size_t)N);
}

void nn_bias_backward(float *db, const float *dout, int M, int N) { colsum_acc(db, dout, M, N); }

void nn_linear_forward(float *out, const float *inp, const float *w, const float *b, int M, int K,
                       int N) {
    gemm_f32(0, 1, M, N, K, 1.0f, inp, K, w, K, 0.0f, out, N);
    if (b) nn_bias_forward(out, b, M, N);
}

void nn_linear_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, int M, int K, int N) {
    if (dinp) gemm_f32(0, 0, M, K, N, 1.0f, dout, N, w, K, 1.0f, dinp, K);
    gemm_f32(1, 0, N, K, M, 1.0f, dout, N, inp, K, 1.0f, dw, K);
    if (db) nn_bias_backward(db, dout, M, N);
}

void nn_linear_backward_set(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, int M, int K, int N) {
    if (dinp) gemm_f32(0, 0, M, K, N, 1.0f, dout, N, w, K, 0.0f, dinp, K);
    gemm_f32(1, 0, N, K, M, 1.0f, dout, N, inp, K, 1.0f, dw, K);
    if (db) nn_bias_backward(db, dout, M, N);
}

/* ------------------------------------------------------------ activations */

void nn_activation_forward(float *out, const float *inp, size_t n, activation_t act) {
    if (out != inp) memcpy(out, inp, n * sizeof(float));
    if (n < PAR_MIN) {
        activation_forward(out, n, act);
        return;
    }
#pragma omp parallel
    {
        size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
        size_t i0 = n * id / nt / 8 * 8, i1 = id + 1 == nt ? n : n * (id + 1) / nt / 8 * 8;
        if (i1 > i0) activation_forward(out + i0, i1 - i0, act);
    }
}

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* dinp (+)= act'(inp) * dout: acc 1 adds, 0 overwrites (dinp may then alias dout). */
static void activation_backward(float *dinp, const float *dout, const float *inp, size_t n, activation_t act,
                                int acc);

void nn_activation_backward(float *dinp, const float *dout, const float *inp, size_t n,
                            activation_t act) {
    activation_backward(dinp, dout, inp, n, act, 1);
}

void nn_activation_backward_set(float *dinp, const float *dout, const float *inp, size_t n,
                                activation_t act) {
    activation_backward(dinp, dout, inp, n, act, 0);
}

/* r = x > 0 ? r : 0 and s += r over w values (restrict: vectorized). */
static inline void relu_bwd_colsum(float *restrict r, const float *restrict x, double *restrict s, int w) {
    for (int c = 0; c < w; c++) { /* v = x > 0 ? r : +0, branch-free (as keep_or_zero) */
        uint32_t u;
        float v = r[c];
        memcpy(&u, &v, sizeof u);
        u &= 0u - (uint32_t)(x[c] > 0.0f);
        memcpy(&v, &u, sizeof v);
        r[c] = v;
        s[c] += v;
    }
}

/* a += b over n values. */
static inline void add_rows(float *restrict a, const float *restrict b, size_t n) {
    for (size_t i = 0; i < n; i++) a[i] = a[i] + b[i];
}

/* s += o over w values. */
static inline void add_colsum(double *restrict s, const float *restrict o, int w) {
    for (int c = 0; c < w; c++) s[c] += o[c];
}

void nn_activation_backward_bias(float *d, const float *inp, int M, int N, activation_t act, float p, uint64_t key,
                                 float *db) {
    if (act != ACT_RELU) {
        if (p > 0.0f) nn_dropout_forward(d, d, (size_t)M * N, p, key); /* the dropout's backward: the same mask */
        activation_backward(d, d, inp, (size_t)M * N, act, 0);
        colsum_acc(db, d, M, N);
        return;
    }
    uint32_t thr = drop_threshold(p), k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    float inv = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    int nblk = colsum_blocks(N);
#pragma omp parallel for schedule(static) if ((size_t)M * N >= PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = (int)((long long)N * blk / nblk), w = (int)((long long)N * (blk + 1) / nblk) - c0;
        double s[COLSUM_BLK];
        for (int c = 0; c < w; c++) s[c] = 0;
        for (int m = 0; m < M; m++) {
            size_t i0 = (size_t)m * N + c0;
            float *r = d + i0;
            const float *x = inp + i0;
            if (p > 0.0f) drop_mul_inplace(r, (uint32_t)w, (uint32_t)i0, k0, k1, thr, inv);
            relu_bwd_colsum(r, x, s, w);
        }
        for (int c = 0; c < w; c++) db[c0 + c] += (float)s[c];
    }
}

static void activation_backward(float *dinp, const float *dout, const float *inp, size_t n, activation_t act,
                                int acc) {
    const float k_tanh = 0.7978845608028654f;     /* sqrt(2 / pi) */
    const float k_pdf = 0.3989422804014327f;      /* 1 / sqrt(2 pi) */
    const float k_erf = 0.7071067811865476f;      /* 1 / sqrt(2) */
    long long nn = (long long)n;
    if (act == ACT_RELU) { /* the common case, in a loop the compiler vectorizes */
        if (acc) {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
            for (long long i = 0; i < nn; i++) dinp[i] += inp[i] > 0.0f ? dout[i] : 0.0f;
        } else {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
            for (long long i = 0; i < nn; i++) dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
        }
        return;
    }
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (long long i = 0; i < nn; i++) {
        float x = inp[i], d;
        switch (act) {
        case ACT_RELU: d = x > 0.0f ? 1.0f : 0.0f; break;
        case ACT_GELU: d = 0.5f * (1.0f + erff(x * k_erf)) + x * k_pdf * expf(-0.5f * x * x); break;
        case ACT_GELU_TANH: {
            float u = k_tanh * (x + 0.044715f * x * x * x), t = tanhf(u);
            d = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k_tanh * (1.0f + 3.0f * 0.044715f * x * x);
            break;
        }
        case ACT_SWISH: {
            float s = sigmoidf_(x);
            d = s + x * s * (1.0f - s);
            break;
        }
        case ACT_GELU_SIGMOID: {
            float s = sigmoidf_(1.702f * x);
            d = s + 1.702f * x * s * (1.0f - s);
            break;
        }
        case ACT_TANH: {
            float t = tanhf(x);
            d = 1.0f - t * t;
            break;
        }
        default: d = 1.0f; break;
        }
        if (acc) dinp[i] += d * dout[i];
        else dinp[i] = d * dout[i];
    }
}

/* ------------------------------------------------------------ residual and dropout */

void nn_residual_forward(float *out, const float *a, const float *b, size_t n) {
    long long nn = (long long)n;
    int nt = rows_team(n, 1 << 30);
    if (nt == 1) {
        for (long long i = 0; i < nn; i++) out[i] = a[i] + b[i];
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (long long i = 0; i < nn; i++) out[i] = a[i] + b[i];
}

void nn_residual_backward(float *da, float *db, const float *dout, size_t n) {
    long long nn = (long long)n;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (long long i = 0; i < nn; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

void nn_dropout_forward(float *out, const float *inp, size_t n, float p, uint64_t key) {
    if (p <= 0.0f) {
        if (out != inp) memcpy(out, inp, n * sizeof(float));
        return;
    }
    uint32_t thr = drop_threshold(p), k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    float inv = 1.0f / (1.0f - p);
    long long nblk = (long long)((n + DROP_BLK - 1) / DROP_BLK);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (long long blk = 0; blk < nblk; blk++) {
        size_t i0 = (size_t)blk * DROP_BLK, m = n - i0 < DROP_BLK ? n - i0 : DROP_BLK;
        if (out == inp) drop_mul_inplace(out + i0, (uint32_t)m, (uint32_t)i0, k0, k1, thr, inv);
        else drop_mul(out + i0, inp + i0, (uint32_t)m, (uint32_t)i0, k0, k1, thr, inv);
    }
}

void nn_activation_dropout_forward(float *out, const float *inp, size_t n, activation_t act, float p, uint64_t key) {
    if (p <= 0.0f) {
        nn_activation_forward(out, inp, n, act);
        return;
    }
    uint32_t thr = drop_threshold(p), k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    float inv = 1.0f / (1.0f - p);
    long long nblk = (long long)((n + DROP_BLK - 1) / DROP_BLK);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (long long blk = 0; blk < nblk; blk++) {
        size_t i0 = (size_t)blk * DROP_BLK, m = n - i0 < DROP_BLK ? n - i0 : DROP_BLK;
        if (out != inp) memcpy(out + i0, inp + i0, m * sizeof(float));
        activation_forward(out + i0, m, act); /* per element: the same whatever the split */
        drop_mul_inplace(out + i0, (uint32_t)m, (uint32_t)i0, k0, k1, thr, inv);
    }
}

void nn_dropout_residual_forward(float *sum, const float *x, size_t n, float p, uint64_t key) {
    uint32_t thr = drop_threshold(p), k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    float inv = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    long long nblk = (long long)((n + DROP_BLK - 1) / DROP_BLK);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (long long blk = 0; blk < nblk; blk++) {
        size_t i0 = (size_t)blk * DROP_BLK, m = n - i0 < DROP_BLK ? n - i0 : DROP_BLK;
        if (p > 0.0f) drop_mul_inplace(sum + i0, (uint32_t)m, (uint32_t)i0, k0, k1, thr, inv);
        add_rows(sum + i0, x + i0, m);
    }
}

void nn_dropout_forward_bias(float *out, const float *inp, int M, int N, float p, uint64_t key, float *db) {
    uint32_t thr = drop_threshold(p), k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    float inv = 1.0f / (1.0f - p);
    int nblk = colsum_blocks(N);
#pragma omp parallel for schedule(static) if ((size_t)M * N >= PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = (int)((long long)N * blk / nblk), w = (int)((long long)N * (blk + 1) / nblk) - c0;
        double s[COLSUM_BLK];
        for (int c = 0; c < w; c++) s[c] = 0;
        for (int m = 0; m < M; m++) {
            size_t i0 = (size_t)m * N + c0; /* element i's mask: index i of the whole M·N, as nn_dropout_forward */
            float *o = out + i0;
            drop_mul(o, inp + i0, (uint32_t)w, (uint32_t)i0, k0, k1, thr, inv);
            add_colsum(s, o, w);
        }
        for (int c = 0; c < w; c++) db[c0 + c] += (float)s[c];
    }
}

void nn_dropout_backward(float *dinp, const float *dout, size_t n, float p, uint64_t key) {
    long long nn = (long long)n;
    if (p <= 0.0f) {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
        for (long long i = 0; i < nn; i++) dinp[i] += dout[i];
        return;
    }
    uint32_t thr = drop_threshold(p), k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    float inv = 1.0f / (1.0f - p);
    long long nblk = (long long)((n + DROP_BLK - 1) / DROP_BLK);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (long long blk = 0; blk < nblk; blk++) {
        size_t i0 = (size_t)blk * DROP_BLK, m = n - i0 < DROP_BLK ? n - i0 : DROP_BLK;
        drop_mul_acc(dinp + i0, dout + i0, (uint32_t)m, (uint32_t)i0, k0, k1, thr, inv);
    }
}

/* ------------------------------------------------------------ multi-head attention */

void nn_attention_forward(float *out, float *att, float *scratch, const float *q, int ldq,
                          const float *k, const float *v, int ldkv, const int *klen, int B, int Tq,
                          int Tk, int C, int H, int causal, float p_drop, uint64_t key) {
    int D = C / H, BH = B * H;
    float scale = 1.0f / sqrtf((float)D);
    uint32_t thr = drop_threshold(p_drop), k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    float inv = p_drop > 0.0f ? 1.0f / (1.0f - p_drop) : 1.0f;
    /* One (sentence, head) per iteration; the small gemms (gemm_f32_small) run single-threaded inside. */
#pragma omp parallel for schedule(dynamic, 1) if (BH > 1)
    for (int bh = 0; bh < BH; bh++) {
        int b = bh / H, h = bh % H;
        size_t a0 = (size_t)bh * Tq * Tk;
        float *A = att + a0;
        const float *qh = q + (size_t)b * Tq * ldq + h * D;
        const float *kh = k + (size_t)b * Tk * ldkv + h * D;
        const float *vh = v + (size_t)b * Tk * ldkv + h * D;
        int kl = klen ? klen[b] : Tk;
        gemm_f32_small(0, 1, Tq, Tk, D, scale, qh, ldq, kh, ldkv, 0.0f, A, Tk);
        for (int i = 0; i < Tq; i++) {
            int len = causal && i + 1 < kl ? i + 1 : kl;
            softmax_masked_forward(A + (size_t)i * Tk, A + (size_t)i * Tk, &len, 1, Tk);
        }
        const float *P = A;
        if (p_drop > 0.0f) {
            float *Sd = scratch + a0;
            size_t n = (size_t)Tq * Tk;
            drop_mul(Sd, A, (uint32_t)n, (uint32_t)a0, k0, k1, thr, inv);
            P = Sd;
        }
        gemm_f32_small(0, 0, Tq, D, Tk, 1.0f, P, Tk, vh, ldkv, 0.0f, out + (size_t)b * Tq * C + h * D, C);
    }
}

void nn_attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                           const float *q, int ldq, const float *k, const float *v, int ldkv,
                           const float *att, int B, int Tq, int Tk, int C, int H, float p_drop,
                           uint64_t key) {
    int D = C / H, BH = B * H;
    float scale = 1.0f / sqrtf((float)D);
    uint32_t thr = drop_threshold(p_drop), k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    float inv = p_drop > 0.0f ? 1.0f / (1.0f - p_drop) : 1.0f;
#pragma omp parallel for schedule(dynamic, 1) if (BH > 1)
    for (int bh = 0; bh < BH; bh++) {
        int b = bh / H, h = bh % H;
        size_t a0 = (size_t)bh * Tq * Tk, n = (size_t)Tq * Tk;
        const float *P = att + a0;
        float *Sc = scratch + a0;
        const float *qh = q + (size_t)b * Tq * ldq + h * D;
        const float *kh = k + (size_t)b * Tk * ldkv + h * D;
        const float *vh = v + (size_t)b * Tk * ldkv + h * D;
        float *dqh = dq + (size_t)b * Tq * ldq + h * D;
        float *dkh = dk + (size_t)b * Tk * ldkv + h * D;
        float *dvh = dv + (size_t)b * Tk * ldkv + h * D;
        const float *doh = dout + (size_t)b * Tq * C + h * D;
        /* dV += dropout(P)^T dO */
        const float *Pd = P;
        if (p_drop > 0.0f) {
            drop_mul(Sc, P, (uint32_t)n, (uint32_t)a0, k0, k1, thr, inv);
            Pd = Sc;
        }
        gemm_f32_small(1, 0, Tk, D, Tq, 1.0f, Pd, Tk, doh, C, 1.0f, dvh, ldkv);
        /* dP = dO V^T (through the dropout mask) */
        gemm_f32_small(0, 1, Tq, Tk, D, 1.0f, doh, C, vh, ldkv, 0.0f, Sc, Tk);
        if (p_drop > 0.0f)
            drop_mul_inplace(Sc, (uint32_t)n, (uint32_t)a0, k0, k1, thr, inv);
        /* softmax backward: dS = P * (dP - sum_j P dP) */
        for (int i = 0; i < Tq; i++) {
            const float *p = P + (size_t)i * Tk;
            float *s = Sc + (size_t)i * Tk;
            double dot = 0;
            for (int j = 0; j < Tk; j++) dot += (double)p[j] * s[j];
            float fd = (float)dot;
            for (int j = 0; j < Tk; j++) s[j] = p[j] * (s[j] - fd);
        }
        /* dQ += scale dS K; dK += scale dS^T Q */
        gemm_f32_small(0, 0, Tq, D, Tk, scale, Sc, Tk, kh, ldkv, 1.0f, dqh, ldq);
        gemm_f32_small(1, 0, Tk, D, Tq, scale, Sc, Tk, qh, ldq, 1.0f, dkh, ldkv);
    }
}

/* ------------------------------------------------------------ loss */

int nn_crossentropy_forward(float *probs, float *losses, float *nlls, double *loss_sum,
                            double *nll_sum, const float *logits, const int *targets, int M, int V,
                            float eps, int pad_id) {
    double ls = 0, ns = 0;
    int count = 0;
#pragma omp parallel for schedule(static) reduction(+ : ls, ns, count) if ((size_t)M * V >= PAR_MIN)
    for (int m = 0; m < M; m++) {
        float *p = probs + (size_t)m * V;
        const float *x = logits + (size_t)m * V;
        int y = targets[m];
        if (y == pad_id) {
            losses[m] = 0.0f;
            if (nlls) nlls[m] = 0.0f;
            memset(p, 0, (size_t)V * sizeof(float));
            continue;
        }
        /* one fused softmax: probabilities, log-sum-exp and the sum of the logits, from which
         * nll = lse - x[y] and sum_j log p_j = sum_j x_j - V lse (no log-probability row) */
        double xy = x[y], lse, sum_x;
        softmax_lse_forward(p, &lse, &sum_x, x, 1, V); /* p may alias x: x[y] read first */
        double nll = lse - xy;
        double sum_lp = sum_x - (double)V * lse;
        double loss = (1.0 - eps) * nll - (double)eps / V * sum_lp;
        losses[m] = (float)loss;
        if (nlls) nlls[m] = (float)nll;
        ls += loss;
        ns += nll;
        count++;
    }
    if (loss_sum) *loss_sum = ls;
    if (nll_sum) *nll_sum = ns;
    return count;
}

void nn_crossentropy_backward(float *dlogits, const float *probs, const int *targets, int M, int V,
                              float eps, int pad_id, float grad_scale) {
    float u = eps / (float)V;
#pragma omp parallel for schedule(static) if ((size_t)M * V >= PAR_MIN)
    for (int m = 0; m < M; m++) {
        float *d = dlogits + (size_t)m * V;
        const float *p = probs + (size_t)m * V;
        int y = targets[m];
        if (y == pad_id) {
            memset(d, 0, (size_t)V * sizeof(float));
            continue;
        }
        for (int j = 0; j < V; j++) d[j] = grad_scale * (p[j] - u);
        d[y] -= grad_scale * (1.0f - eps);
    }
}
