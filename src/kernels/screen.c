/* screen.c — the int8 pre-screen of a float32 linear layer's largest output (screen.h).
 *
 * Per call: the rows of inp are quantized and multiplied by the int8 copy of W exactly as an int8
 * layer runs (linear.c: oneDNN's packed u8s8s32 kernel on AVX512_VNNI, Tern's exact s8 kernel
 * elsewhere), giving approx (M, N). With x a row, a its int8 values and r = 1 / its scale (as the
 * dequantization rounds it), q_n, S_n the int8 row n and its scale, the residuals dx = x - a r
 * (per call) and dw_n = w_n - q_n / S_n (at build) bound each output (docs/kernels.md, "The int8
 * pre-screen of the output projection", derives it):
 *   err_n = [min(|x|_1 max|dw_n|, |x|_2 |dw_n|_2) + min(max|dx| |q_n/S_n|_1, |dx|_2 |q_n/S_n|_2)
 *            + (K + 32) u ((|x|_1 + K max|dx|) wq_n + |b_n|)] (1 + 2^-18),
 * wq_n >= max |w_n|, |q_n / S_n|. The candidates of a row are the n whose approx + err reaches the
 * largest approx - err; their float32 values are summed from the layer's own weights (plain rows,
 * or the packed blocked layout read through gemm_packed_offsets), eight candidates at a time, one
 * fused multiply-add per k in increasing k per candidate, then the bias.
 *
 * Legend: M rows of activations, N outputs, K inputs. */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/gemm_packed.h"
#include "kernels/gemm_s8.h"
#include "kernels/kernels.h"
#include "kernels/screen.h"

#define ALIGN64(x) (((x) + 63) & ~(size_t)63)

/* Built with -DTERN_PROF (as transformer.c), the three phases of linear_screen_forward are timed
 * (thread CPU time) and printed at exit. */
#ifdef TERN_PROF
#include <stdio.h>
#include <time.h>
static double sprof[3];
static double sprof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static int sprof_reg;
static long sprof_uniq, sprof_tot;
static void sprof_dump(void) {
    fprintf(stderr, "prof screen int8 %8.3f s\nprof screen cands %7.3f s\nprof screen exact %7.3f s\n", sprof[0],
            sprof[1], sprof[2]);
    fprintf(stderr, "prof screen distinct candidates per call %ld of %ld\n", sprof_uniq, sprof_tot);
}
#define SPROF(i, stmt)                                                                             \
    do {                                                                                           \
        if (!sprof_reg) sprof_reg = 1, atexit(sprof_dump);                                         \
        double _t = sprof_now();                                                                   \
        stmt;                                                                                      \
        sprof[i] += sprof_now() - _t;                                                              \
    } while (0)
#else
#define SPROF(i, stmt) do { stmt; } while (0)
#endif

struct linear_screen {
    int N, K;
    linear_t lin;                  /* the int8 layer (q NULL once packed) */
    int8_t *q;                     /* (N, K) or NULL */
    float *scale;                  /* (N) */
    int32_t *comp;                 /* (N) */
    void *pk;                      /* packed int8 weights or NULL */
    /* (N) bound coefficients (rounded up): max|dw_n|, |dw_n|_2, |q_n/S_n|_1, |q_n/S_n|_2,
     * (K + 32) u wq_n, (K + 32) u |b_n| (NULL without bias) */
    float *e1, *e2, *q1, *w2, *sc, *gamma;
    const float *bias;             /* (N) or NULL */
    const float *wbase;            /* float32 weights: W[n, k] = wbase[off_k[k] + off_n[n]] */
    int32_t *off_k, *off_n;        /* (K), (N) */
    size_t bytes, pk_bytes;
    atomic_long rows, cands, fallbacks;
};

/* The float nearest above or at d (d >= 0 finite): a coefficient rounded so the bound only grows. */
static float round_up(double d) {
    float f = (float)d;
    if ((double)f < d) f = nextafterf(f, INFINITY);
    return f;
}

/* u = 2^-24, the unit roundoff of float32. */
#define U24 (1.0 / 16777216.0)

/* Where the float32 rows are read: W (N, K) plain, or the packed form. 0, or -1. */
static int attach(linear_screen_t *s, const float *W, const void *packed) {
    const int N = s->N, K = s->K;
    free(s->off_k), free(s->off_n);
    s->off_k = malloc((size_t)K * sizeof(int32_t));
    s->off_n = malloc((size_t)N * sizeof(int32_t));
    int64_t *ok = malloc((size_t)K * sizeof(int64_t)), *on = malloc((size_t)N * sizeof(int64_t));
    int r = -1;
    if (!s->off_k || !s->off_n || !ok || !on) goto done;
    if (W) {
        for (int k = 0; k < K; k++) ok[k] = k;
        for (int n = 0; n < N; n++) on[n] = (int64_t)n * K;
        s->wbase = W;
    } else {
        size_t wb;
        if (!packed || gemm_packed_offsets(packed, ok, on)) goto done;
        s->wbase = gemm_packed_weights(packed, &wb);
    }
    /* 32-bit offsets (the gather's): the largest element offset must fit */
    int64_t mk = 0, mn = 0;
    for (int k = 0; k < K; k++) {
        if (ok[k] < 0) goto done;
        mk = ok[k] > mk ? ok[k] : mk;
    }
    for (int n = 0; n < N; n++) {
        if (on[n] < 0) goto done;
        mn = on[n] > mn ? on[n] : mn;
    }
    if (mk + mn > INT32_MAX) goto done;
    for (int k = 0; k < K; k++) s->off_k[k] = (int32_t)ok[k];
    for (int n = 0; n < N; n++) s->off_n[n] = (int32_t)on[n];
    r = 0;
done:
    free(ok), free(on);
    if (r) {
        free(s->off_k), free(s->off_n);
        s->off_k = s->off_n = NULL;
        s->wbase = NULL;
    }
    return r;
}

linear_screen_t *linear_screen_new(const float *W, const void *packed, const float *bias, int N, int K) {
    if (N <= 0 || K <= 0 || K > GEMM_S8_MAX_K || (!W && !packed)) return NULL;
    linear_screen_t *s = calloc(1, sizeof *s);
    float *row = NULL; /* one row read back from the packed form */
    if (!s) return NULL;
    s->N = N, s->K = K;
    s->bias = bias;
    if (attach(s, W, packed) || (!W && !(row = malloc((size_t)K * sizeof(float))))) goto fail;
    s->q = aligned_alloc64((size_t)N * K);
    s->scale = malloc((size_t)N * sizeof(float));
    s->comp = malloc((size_t)N * sizeof(int32_t));
    s->e1 = malloc((size_t)N * sizeof(float));
    s->e2 = malloc((size_t)N * sizeof(float));
    s->q1 = malloc((size_t)N * sizeof(float));
    s->w2 = malloc((size_t)N * sizeof(float));
    s->sc = malloc((size_t)N * sizeof(float));
    s->gamma = bias ? malloc((size_t)N * sizeof(float)) : NULL;
    if (!s->q || !s->scale || !s->comp || !s->e1 || !s->e2 || !s->q1 || !s->w2 || !s->sc || (bias && !s->gamma))
        goto fail;
    /* (K + 32) u: the float32 rounding of the exact sum (K u), of the int8 layer's dequantization
     * (4 u) and of the comparisons (u), with room to spare; docs/kernels.md */
    const double c = (double)(K + 32) * U24;
    for (int n = 0; n < N; n++) {
        const float *w = W ? W + (size_t)n * K : row;
        if (!W)
            for (int k = 0; k < K; k++) row[k] = s->wbase[s->off_k[k] + s->off_n[n]];
        quantize_rows_s8(s->q + (size_t)n * K, s->scale + n, w, 1, K);
        const int8_t *q = s->q + (size_t)n * K;
        const double S = s->scale[n];
        double wmax = 0, dmax = 0, d2 = 0, q1 = 0, q2 = 0;
        for (int k = 0; k < K; k++) {
            if (!isfinite(w[k])) goto fail;
            double wk = w[k], qk = q[k] / S, d = fabs(wk - qk);
            wmax = fmax(wmax, fmax(fabs(wk), fabs(qk)));
            dmax = fmax(dmax, d);
            d2 += d * d;
            q1 += fabs(qk);
            q2 += qk * qk;
        }
        if (bias && !isfinite(bias[n])) goto fail;
        /* the double sums' own rounding (relative K 2^-53, and 2^-52 wmax per difference): margins */
        double tiny = wmax * 0x1p-50;
        s->e1[n] = round_up(dmax * (1 + 1e-9) + tiny);
        s->e2[n] = round_up(sqrt(d2) * (1 + 1e-9) + tiny * sqrt((double)K));
        s->q1[n] = round_up(q1 * (1 + 1e-9));
        s->w2[n] = round_up(sqrt(q2) * (1 + 1e-9));
        s->sc[n] = round_up(c * wmax * (1 + 1e-9));
        if (bias) s->gamma[n] = round_up(c * fabs((double)bias[n]) * (1 + 1e-9));
    }
    s->lin = (linear_t){.kind = WEIGHT_S8, .N = N, .K = K, .q = s->q, .scale = s->scale, .bias = bias};
    linear_prepare(&s->lin, s->comp);
    size_t pk_bytes = linear_packed_size_s8(&s->lin);
    if (pk_bytes && (s->pk = aligned_alloc64(pk_bytes)) != NULL) {
        if (linear_pack_s8(s->pk, &s->lin) == 0) {
            aligned_free(s->q);
            s->q = NULL;
            s->lin.q = NULL;
            s->pk_bytes = pk_bytes;
        } else {
            aligned_free(s->pk);
            s->pk = NULL;
        }
    }
    s->bytes = (s->q ? (size_t)N * K : s->pk_bytes) + (size_t)N * sizeof(float) * (bias ? 8 : 7) +
               (size_t)N * sizeof(int32_t) + ((size_t)N + K) * sizeof(int32_t);
    free(row);
    return s;
fail:
    free(row);
    linear_screen_free(s);
    return NULL;
}

void linear_screen_free(linear_screen_t *s) {
    if (!s) return;
    aligned_free(s->q);
    aligned_free(s->pk);
    free(s->scale), free(s->comp), free(s->e1), free(s->e2), free(s->q1), free(s->w2), free(s->sc);
    free(s->gamma);
    free(s->off_k), free(s->off_n);
    free(s);
}


size_t linear_screen_bytes(const linear_screen_t *s) { return s->bytes; }

void linear_screen_stats(const linear_screen_t *s, long *rows, long *cands, long *fallbacks) {
    *rows = atomic_load(&s->rows);
    *cands = atomic_load(&s->cands);
    *fallbacks = atomic_load(&s->fallbacks);
}

/* Largest number of candidates of one row before the float32 layer is cheaper. */
static int row_cap(int N) { return N / 32 > 16 ? N / 32 : (N < 16 ? N : 16); }

/* Per row: |x|_1, |x|_2, max|dx|, |dx|_2, |x|_1 + K max|dx| (the bound's row factors). */
enum { RV_L1, RV_X2, RV_A1, RV_A2, RV_LS, RV_N };

/* Workspace: the int8 layer's | the activation bytes (M, K) and scales (M) | row factors (M, RV_N)
 * | count (M) | candidates (M, cap). */
size_t linear_screen_workspace_size(const linear_screen_t *s, int M) {
    if (M <= 0) return 0;
    return ALIGN64(linear_workspace_size(&s->lin, M)) + ALIGN64((size_t)M * s->K) +
           ALIGN64((size_t)M * sizeof(float)) + ALIGN64((size_t)M * RV_N * sizeof(float)) +
           ALIGN64((size_t)M * sizeof(int)) + ALIGN64((size_t)M * row_cap(s->N) * sizeof(int32_t));
}

typedef struct {
    void *lin_ws;
    uint8_t *qa;
    float *sa, *rv;
    int *count;
    int32_t *cand;
    int cap;
} ws_t;

static ws_t ws_parts(const linear_screen_t *s, int M, void *ws) {
    ws_t w;
    char *p = ws;
    w.lin_ws = p;
    p += ALIGN64(linear_workspace_size(&s->lin, M));
    w.qa = (uint8_t *)p;
    p += ALIGN64((size_t)M * s->K);
    w.sa = (float *)p;
    p += ALIGN64((size_t)M * sizeof(float));
    w.rv = (float *)p;
    p += ALIGN64((size_t)M * RV_N * sizeof(float));
    w.count = (int *)p;
    p += ALIGN64((size_t)M * sizeof(int));
    w.cand = (int32_t *)p;
    w.cap = row_cap(s->N);
    return w;
}

/* Per row the bound's factors, from the activation bytes the int8 layer computes (quantize_rows_u8
 * is its quantization on every path: the u8 value is a + 128) and the reciprocal of the scale as its
 * dequantization rounds it; then approx through the int8 layer. -1 when a row is not finite (or
 * its scale overflows) or the int8 kernel is missing. Sums in double, rounded up with margins for
 * their own rounding (K 2^-53 relative; each residual within 2^-52 |x_k|). */
static int approx_rows(float *approx, const float *inp, const linear_screen_t *s, int M, const ws_t *w) {
    const int K = s->K;
    quantize_rows_u8(w->qa, w->sa, inp, M, K);
    for (int m = 0; m < M; m++) {
        const float *x = inp + (size_t)m * K;
        const uint8_t *a = w->qa + (size_t)m * K;
        if (!isfinite(w->sa[m])) return -1;
        const double r = 1.0f / w->sa[m];
        double l1 = 0, x2 = 0, a1 = 0, a2 = 0;
        for (int k = 0; k < K; k++) {
            double xk = x[k], d = fabs(xk - (double)((int)a[k] - 128) * r);
            l1 += fabs(xk);
            x2 += xk * xk;
            a1 = fmax(a1, d);
            a2 += d * d;
        }
        if (!isfinite(l1) || !isfinite(x2)) return -1;
        float *rv = w->rv + (size_t)m * RV_N;
        double tiny = l1 * 0x1p-50;
        rv[RV_L1] = round_up(l1 * (1 + 1e-9));
        rv[RV_X2] = round_up(sqrt(x2) * (1 + 1e-9));
        rv[RV_A1] = round_up(a1 * (1 + 1e-9) + tiny);
        rv[RV_A2] = round_up(sqrt(a2) * (1 + 1e-9) + tiny);
        rv[RV_LS] = round_up((l1 + K * (a1 + tiny)) * (1 + 1e-9));
    }
    if (s->pk) return linear_forward_packed_s8(approx, inp, &s->lin, s->pk, M, w->lin_ws) ? -1 : 0;
    linear_forward(approx, inp, &s->lin, M, w->lin_ws);
    return 0;
}

/* err of 8 outputs of a row (rv: its factors): [min(L1 e1, X2 e2) + min(A1 q1, A2 w2) + LS sc +
 * gamma] (1 + 2^-18) -- the factor covers the rounding of these operations and of approx -+ err
 * (docs/kernels.md). */
static inline __m256 err8(const linear_screen_t *s, int n, const __m256 *rv) {
    __m256 t1 = _mm256_min_ps(_mm256_mul_ps(rv[RV_L1], _mm256_loadu_ps(s->e1 + n)),
                              _mm256_mul_ps(rv[RV_X2], _mm256_loadu_ps(s->e2 + n)));
    __m256 t2 = _mm256_min_ps(_mm256_mul_ps(rv[RV_A1], _mm256_loadu_ps(s->q1 + n)),
                              _mm256_mul_ps(rv[RV_A2], _mm256_loadu_ps(s->w2 + n)));
    __m256 e = _mm256_add_ps(_mm256_add_ps(t1, t2), _mm256_mul_ps(rv[RV_LS], _mm256_loadu_ps(s->sc + n)));
    if (s->gamma) e = _mm256_add_ps(e, _mm256_loadu_ps(s->gamma + n));
    return _mm256_mul_ps(e, _mm256_set1_ps(1.0f + 1.0f / 262144));
}

static inline float err1(const linear_screen_t *s, int n, const float *rv) {
    float t1 = fminf(rv[RV_L1] * s->e1[n], rv[RV_X2] * s->e2[n]);
    float t2 = fminf(rv[RV_A1] * s->q1[n], rv[RV_A2] * s->w2[n]);
    float e = (t1 + t2) + rv[RV_LS] * s->sc[n];
    if (s->gamma) e += s->gamma[n];
    return e * (1.0f + 1.0f / 262144);
}

/* The candidates of row m into w->cand + m * cap (count in w->count[m]; cap + 1 when more). One
 * pass computes err, the largest approx - err (thr) and stores approx + err over approx (a is the
 * output row, overwritten afterwards); the second compares with thr. */
static void row_candidates(float *a, const linear_screen_t *s, int m, const ws_t *w) {
    const int N = s->N;
    const float *rvm = w->rv + (size_t)m * RV_N;
    __m256 rv[RV_N];
    for (int i = 0; i < RV_N; i++) rv[i] = _mm256_set1_ps(rvm[i]);
    /* thr = max (approx - err); NaNs drop out (max_ps keeps its second operand), which only lowers thr */
    __m256 vt = _mm256_set1_ps(-INFINITY);
    int n = 0;
    for (; n + 8 <= N; n += 8) {
        __m256 v = _mm256_loadu_ps(a + n), e = err8(s, n, rv);
        vt = _mm256_max_ps(_mm256_sub_ps(v, e), vt);
        _mm256_storeu_ps(a + n, _mm256_add_ps(v, e));
    }
    float t8[8], thr = -INFINITY;
    _mm256_storeu_ps(t8, vt);
    for (int i = 0; i < 8; i++) thr = t8[i] > thr ? t8[i] : thr;
    for (int j = n; j < N; j++) {
        float e = err1(s, j, rvm), lo = a[j] - e;
        thr = lo > thr ? lo : thr;
        a[j] = a[j] + e;
    }
    /* candidates: !(approx + err < thr) -- a NaN is a candidate */
    int32_t *c = w->cand + (size_t)m * w->cap;
    int cnt = 0, cap = w->cap;
    const __m256 vthr = _mm256_set1_ps(thr);
    for (n = 0; n + 8 <= N; n += 8) {
        unsigned mask = ~(unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(a + n), vthr, _CMP_LT_OQ)) & 0xffu;
        if (!mask) continue;
        if (cnt + __builtin_popcount(mask) > cap) {
            w->count[m] = cap + 1;
            return;
        }
        while (mask) {
            c[cnt++] = n + __builtin_ctz(mask);
            mask &= mask - 1;
        }
    }
    for (; n < N; n++)
        if (!(a[n] < thr)) {
            if (cnt == cap) {
                w->count[m] = cap + 1;
                return;
            }
            c[cnt++] = n;
        }
    w->count[m] = cnt;
}

/* y[j] = sum_k x[k] W[c[j], k] (one fused multiply-add per k, increasing k, from 0) + bias[c[j]]
 * for the cnt candidates c, eight at a time through a gather of their weights at each k. */
static void exact_dots(float *y, const float *x, const int32_t *c, int cnt, const linear_screen_t *s) {
    const int K = s->K;
    const float *wb = s->wbase;
    for (int j0 = 0; j0 < cnt; j0 += 8) {
        int nj = cnt - j0 < 8 ? cnt - j0 : 8;
        int32_t idx[8];
        for (int j = 0; j < 8; j++) idx[j] = s->off_n[c[j0 + (j < nj ? j : 0)]];
        __m256i vi = _mm256_loadu_si256((const __m256i *)idx);
        __m256 acc = _mm256_setzero_ps();
        for (int k = 0; k < K; k++)
            acc = _mm256_fmadd_ps(_mm256_set1_ps(x[k]), _mm256_i32gather_ps(wb + s->off_k[k], vi, 4), acc);
        float r[8];
        _mm256_storeu_ps(r, acc);
        for (int j = 0; j < nj; j++) y[j0 + j] = s->bias ? r[j] + s->bias[c[j0 + j]] : r[j];
    }
}

static int team(int M) {
    int t = kernels_get_num_threads();
    return t < M ? (t > 0 ? t : 1) : (M > 0 ? M : 1);
}

/* Every row's candidates; 1 when a row has too many. */
static int find_candidates(long *total, float *approx, const linear_screen_t *s, int M, const ws_t *w, int nt) {
    int over = 0;
    long tot = 0;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static) reduction(| : over) reduction(+ : tot)
    for (int m = 0; m < M; m++) {
        row_candidates(approx + (size_t)m * s->N, s, m, w);
        over |= w->count[m] > w->cap;
        tot += w->count[m];
    }
    *total = tot;
    return over;
}

/* Every row: the candidates' float32 values over the upper bounds row_candidates left (those of the
 * other outputs are below thr, itself at most the row's largest float32 value: no fill needed). */
static void exact_rows(float *out, const float *inp, const linear_screen_t *s, int M, const ws_t *w, int nt) {
    const int N = s->N, K = s->K;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int m = 0; m < M; m++) {
        float *y = out + (size_t)m * N;
        const int32_t *c = w->cand + (size_t)m * w->cap;
        float v[64];
        for (int j0 = 0; j0 < w->count[m]; j0 += 64) {
            int nj = w->count[m] - j0 < 64 ? w->count[m] - j0 : 64;
            exact_dots(v, inp + (size_t)m * K, c + j0, nj, s);
            for (int j = 0; j < nj; j++) y[c[j0 + j]] = v[j];
        }
    }
}

long linear_screen_forward(float *out, const float *inp, const linear_screen_t *s, int M, void *ws) {
    linear_screen_t *sm = (linear_screen_t *)s; /* the counters */
    if (M <= 0) return 0;
    if (!s->wbase) return -1;
    ws_t w = ws_parts(s, M, ws);
    int ar;
    SPROF(0, ar = approx_rows(out, inp, s, M, &w));
    if (ar) {
        atomic_fetch_add_explicit(&sm->fallbacks, 1, memory_order_relaxed);
        return -1;
    }
    int nt = team(M), over;
    long total = 0;
    SPROF(1, over = find_candidates(&total, out, s, M, &w, nt));
    if (over) {
        atomic_fetch_add_explicit(&sm->fallbacks, 1, memory_order_relaxed);
        return -1;
    }
#ifdef TERN_PROF
    {
        static long uniq, tot;
        static unsigned char *seen;
        if (!seen) seen = calloc((size_t)s->N, 1);
        for (int m = 0; m < M; m++)
            for (int j = 0; j < w.count[m]; j++) {
                int c = w.cand[(size_t)m * w.cap + j];
                tot++;
                if (!seen[c]) seen[c] = 1, uniq++;
            }
        for (int m = 0; m < M; m++)
            for (int j = 0; j < w.count[m]; j++) seen[w.cand[(size_t)m * w.cap + j]] = 0;
        sprof_uniq = uniq, sprof_tot = tot;
    }
#endif
    SPROF(2, exact_rows(out, inp, s, M, &w, nt));
    atomic_fetch_add_explicit(&sm->rows, M, memory_order_relaxed);
    atomic_fetch_add_explicit(&sm->cands, total, memory_order_relaxed);
    return total;
}

int linear_screen_bounds(float *approx, float *err, const float *inp, const linear_screen_t *s, int M, void *ws) {
    if (M <= 0) return 0;
    ws_t w = ws_parts(s, M, ws);
    if (approx_rows(approx, inp, s, M, &w)) return -1;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < s->N; n++) err[(size_t)m * s->N + n] = err1(s, n, w.rv + (size_t)m * RV_N);
    return 0;
}
