/*
 * attention.c — the decoder's attention kernels (see attention.h): the one-row scores and weighted
 * sums, and the grouped form for rows that read the same keys and values.
 */
#include "nn/attention.h"

#include "kernels/kernels.h"

#include <immintrin.h>
#include <string.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define ATT_PF 4 /* keys ahead to prefetch */

static inline float dot(const float *a, const float *b, int n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc0 = _mm256_add_ps(acc0, acc1);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc0), _mm256_extractf128_ps(acc0, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    float r = _mm_cvtss_f32(s);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

static inline void axpy_n(float *y, float a, const float *x, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

/* The key or value row j of an attention: base + (idx ? idx[j] : j) · ld. */
static inline const float *att_row(const float *base, const int *idx, size_t ld, int j) {
    return base + (size_t)(idx ? idx[j] : j) * ld;
}

/* sc[j] = q · K_j for the n keys K_j = att_row(base, idx, ld, j): four keys at a time, each summed
 * exactly as dot() sums (the same accumulators and reduction order, so the same bits), the four
 * horizontal reductions shared. */
ALWAYS_INLINE void dots_i(float *sc, const float *q, const float *base, const int *idx, size_t ld, int n, int dh) {
    int j = 0;
    if ((dh & 7) == 0)
        for (; j + 4 <= n; j += 4) {
            const float *k[4];
            __m256 a[4], b[4];
            for (int u = 0; u < 4; u++) {
                k[u] = att_row(base, idx, ld, j + u);
                a[u] = b[u] = _mm256_setzero_ps();
            }
            int i = 0;
            for (; i + 16 <= dh; i += 16) {
                __m256 q0 = _mm256_loadu_ps(q + i), q1 = _mm256_loadu_ps(q + i + 8);
                for (int u = 0; u < 4; u++) {
                    a[u] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k[u] + i), a[u]);
                    b[u] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(k[u] + i + 8), b[u]);
                }
            }
            for (; i + 8 <= dh; i += 8) {
                __m256 q0 = _mm256_loadu_ps(q + i);
                for (int u = 0; u < 4; u++) a[u] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k[u] + i), a[u]);
            }
            __m128 s[4];
            for (int u = 0; u < 4; u++) {
                __m256 t = _mm256_add_ps(a[u], b[u]);
                s[u] = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
            }
            _mm_storeu_ps(sc + j, _mm_hadd_ps(_mm_hadd_ps(s[0], s[1]), _mm_hadd_ps(s[2], s[3])));
        }
    for (; j < n; j++) sc[j] = dot(q, att_row(base, idx, ld, j), dh);
}

/* o (dh) = sum over j < n of p[j] · V_j (V_j = att_row(base, idx, ld, j)): per element the same
 * fused multiply-adds in the same order as axpy_n from zero, with the sums kept in registers across
 * the keys (64 columns at a time). */
ALWAYS_INLINE void wsum_i(float *o, const float *p, const float *base, const int *idx, size_t ld, int n, int dh) {
    if (dh & 7) {
        memset(o, 0, (size_t)dh * sizeof(float));
        for (int j = 0; j < n; j++) axpy_n(o, p[j], att_row(base, idx, ld, j), dh);
        return;
    }
    int c = 0;
    for (; c + 64 <= dh; c += 64) {
        __m256 a[8];
        for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_ps();
        for (int j = 0; j < n; j++) {
            const float *v = att_row(base, idx, ld, j) + c;
            __m256 pj = _mm256_set1_ps(p[j]);
            for (int k = 0; k < 8; k++) a[k] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + 8 * k), a[k]);
        }
        for (int k = 0; k < 8; k++) _mm256_storeu_ps(o + c + 8 * k, a[k]);
    }
    for (; c < dh; c += 8) {
        __m256 a = _mm256_setzero_ps();
        for (int j = 0; j < n; j++)
            a = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(att_row(base, idx, ld, j) + c), a);
        _mm256_storeu_ps(o + c, a);
    }
}

/* The public forms: a copy of each kernel for contiguous rows (idx NULL), whose row addresses the
 * compiler computes without loading indices. */
void att_dots(float *sc, const float *q, const float *base, const int *idx, size_t ld, int n, int dh) {
    if (idx) dots_i(sc, q, base, idx, ld, n, dh);
    else dots_i(sc, q, base, NULL, ld, n, dh);
}

void att_wsum(float *o, const float *p, const float *base, const int *idx, size_t ld, int n, int dh) {
    if (idx) wsum_i(o, p, base, idx, ld, n, dh);
    else wsum_i(o, p, base, NULL, ld, n, dh);
}

/* ------------------------------------------------------------------ grouped rows (dh % 8 == 0)
 * NQ queries × NK keys (NQ · NK ≤ 4) at a time: per (query, key) pair the accumulators and the
 * reduction of dot(), the pairs' horizontal reductions shared as in att_dots. Each key block is
 * loaded once for the NQ queries. */
ALWAYS_INLINE void dots_blk(float *sc, size_t sc_ld, const float *const *q, const float *base, const int *idx,
                            size_t ld, int j, int n, int dh, const int NQ, const int NK) {
    const float *k[4];
    __m256 a[4], b[4];
    for (int v = 0; v < NK; v++) k[v] = att_row(base, idx, ld, j + v);
    for (int p = 0; p < NQ * NK; p++) a[p] = b[p] = _mm256_setzero_ps();
    if (j + NK + ATT_PF < n) /* each key row is a page of its own: no hardware prefetch */
        for (int v = 0; v < NK; v++) {
            const char *f = (const char *)att_row(base, idx, ld, j + v + ATT_PF);
            for (int i = 0; i < dh * 4; i += 64) _mm_prefetch(f + i, _MM_HINT_T0);
        }
    int i = 0;
    for (; i + 16 <= dh; i += 16) {
        __m256 k0[4], k1[4];
        for (int v = 0; v < NK; v++) k0[v] = _mm256_loadu_ps(k[v] + i), k1[v] = _mm256_loadu_ps(k[v] + i + 8);
        for (int u = 0; u < NQ; u++) {
            __m256 q0 = _mm256_loadu_ps(q[u] + i), q1 = _mm256_loadu_ps(q[u] + i + 8);
            for (int v = 0; v < NK; v++) {
                a[u * NK + v] = _mm256_fmadd_ps(q0, k0[v], a[u * NK + v]);
                b[u * NK + v] = _mm256_fmadd_ps(q1, k1[v], b[u * NK + v]);
            }
        }
    }
    for (; i + 8 <= dh; i += 8) {
        __m256 k0[4];
        for (int v = 0; v < NK; v++) k0[v] = _mm256_loadu_ps(k[v] + i);
        for (int u = 0; u < NQ; u++) {
            __m256 q0 = _mm256_loadu_ps(q[u] + i);
            for (int v = 0; v < NK; v++) a[u * NK + v] = _mm256_fmadd_ps(q0, k0[v], a[u * NK + v]);
        }
    }
    __m128 s[4];
    for (int p = 0; p < 4; p++) {
        if (p < NQ * NK) {
            __m256 t = _mm256_add_ps(a[p], b[p]);
            s[p] = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
        } else
            s[p] = _mm_setzero_ps();
    }
    float r[4];
    _mm_storeu_ps(r, _mm_hadd_ps(_mm_hadd_ps(s[0], s[1]), _mm_hadd_ps(s[2], s[3])));
    for (int u = 0; u < NQ; u++)
        for (int v = 0; v < NK; v++) sc[u * sc_ld + j + v] = r[u * NK + v];
}

/* Scores of g (2..4) queries against the same n keys. */
ALWAYS_INLINE void dots_multi(float *sc, size_t sc_ld, const float *const *q, int g, const float *base, const int *idx,
                       size_t ld, int n, int dh) {
    int j = 0;
    switch (g) {
    case 2:
        for (; j + 2 <= n; j += 2) dots_blk(sc, sc_ld, q, base, idx, ld, j, n, dh, 2, 2);
        for (; j < n; j++) dots_blk(sc, sc_ld, q, base, idx, ld, j, n, dh, 2, 1);
        break;
    case 3:
        for (; j < n; j++) dots_blk(sc, sc_ld, q, base, idx, ld, j, n, dh, 3, 1);
        break;
    default:
        for (; j < n; j++) dots_blk(sc, sc_ld, q, base, idx, ld, j, n, dh, 4, 1);
        break;
    }
}

/* Columns [c, c + 8W) of the weighted sums of G rows over the same n values, each element the
 * fused multiply-add chain over j from zero (acc: from the value already in o). */
ALWAYS_INLINE void wsum_blk(float *const *o, const float *const *p, const float *base, const int *idx, size_t ld,
                            int n, int c, int dh, int acc, const int G, const int W) {
    __m256 a[8];
    for (int u = 0; u < G; u++)
        for (int w = 0; w < W; w++)
            a[u * W + w] = acc ? _mm256_loadu_ps(o[u] + c + 8 * w) : _mm256_setzero_ps();
    for (int j = 0; j < n; j++) {
        const float *v = att_row(base, idx, ld, j) + c;
        if (c == 0 && j + ATT_PF < n) { /* the first pass brings the rows' whole slices in */
            const char *f = (const char *)att_row(base, idx, ld, j + ATT_PF);
            for (int i = 0; i < dh * 4; i += 64) _mm_prefetch(f + i, _MM_HINT_T0);
        }
        __m256 vv[8];
        for (int w = 0; w < W; w++) vv[w] = _mm256_loadu_ps(v + 8 * w);
        for (int u = 0; u < G; u++) {
            __m256 pj = _mm256_set1_ps(p[u][j]);
            for (int w = 0; w < W; w++) a[u * W + w] = _mm256_fmadd_ps(pj, vv[w], a[u * W + w]);
        }
    }
    for (int u = 0; u < G; u++)
        for (int w = 0; w < W; w++) _mm256_storeu_ps(o[u] + c + 8 * w, a[u * W + w]);
}

#define WSUM_COLS(G, W)                                                                            \
    do {                                                                                           \
        for (; c + 8 * (W) <= dh; c += 8 * (W)) wsum_blk(o, p, base, idx, ld, n, c, dh, acc, G, W);    \
        for (; c < dh; c += 8) wsum_blk(o, p, base, idx, ld, n, c, dh, acc, G, 1);                     \
    } while (0)

ALWAYS_INLINE void wsum_multi(float *const *o, const float *const *p, int g, const float *base, const int *idx, size_t ld,
                       int n, int dh, int acc) {
    int c = 0;
    switch (g) {
    case 1: WSUM_COLS(1, 8); break;
    case 2: WSUM_COLS(2, 4); break;
    case 3: WSUM_COLS(3, 2); break;
    default: WSUM_COLS(4, 2); break;
    }
}

ALWAYS_INLINE void group_i(float *o, size_t o_ld, float *sc, size_t sc_ld, const float *q, size_t q_ld, int g,
               const float *Kb, const float *Vb, const int *idx, size_t idx_ld, size_t ld, int n, int P, int dh) {
    if (P > n || !idx) P = n;
    if (g == 1 || P <= 0 || (dh & 7) || g > ATT_GMAX) {
        for (int u = 0; u < g; u++) {
            const int *iu = idx ? idx + u * idx_ld : NULL;
            float *su = sc + u * sc_ld;
            dots_i(su, q + u * q_ld, Kb, iu, ld, n, dh);
            softmax_forward(su, su, 1, n);
            wsum_i(o + u * o_ld, su, Vb, iu, ld, n, dh);
        }
        return;
    }
    const float *qs[ATT_GMAX] = {0}, *ps[ATT_GMAX] = {0};
    float *os[ATT_GMAX] = {0};
    for (int u = 0; u < g; u++) qs[u] = q + u * q_ld, ps[u] = sc + u * sc_ld, os[u] = o + u * o_ld;
    /* the shared keys [0, P) for all rows at once, each row's own [P, n) after */
    dots_multi(sc, sc_ld, qs, g, Kb, idx, ld, P, dh);
    for (int u = 0; u < g; u++) {
        float *su = sc + u * sc_ld;
        if (n > P) dots_i(su + P, qs[u], Kb, idx + u * idx_ld + P, ld, n - P, dh);
        softmax_forward(su, su, 1, n);
    }
    wsum_multi(os, ps, g, Vb, idx, ld, P, dh, 0);
    if (n > P)
        for (int u = 0; u < g; u++) {
            const float *pu = ps[u] + P;
            wsum_multi(os + u, &pu, 1, Vb, idx + u * idx_ld + P, ld, n - P, dh, 1);
        }
}

void att_group(float *o, size_t o_ld, float *sc, size_t sc_ld, const float *q, size_t q_ld, int g,
               const float *Kb, const float *Vb, const int *idx, size_t idx_ld, size_t ld, int n, int P, int dh) {
    if (idx) group_i(o, o_ld, sc, sc_ld, q, q_ld, g, Kb, Vb, idx, idx_ld, ld, n, P, dh);
    else group_i(o, o_ld, sc, sc_ld, q, q_ld, g, Kb, Vb, NULL, 0, ld, n, n, dh);
}

/* ------------------------------------------------------------------ all heads of one row
 * The loops of att_dots / att_wsum turned inside out: for each block of four keys, every head's
 * four scores (each key's row is then read from its start to its end, a prefetcher-friendly run,
 * where head by head it was read in dh-float pieces eight times over); for each block of four
 * values, every head's weighted sums, accumulated in o. Per score and per output element the same
 * operations in the same order as the one-row kernels, so the same bits. */
ALWAYS_INLINE void dots_heads_i(float *sc, size_t sc_ld, const float *q, const float *base, const int *idx, size_t ld,
                                int n, int H, int dh) {
    int j = 0;
    if ((dh & 7) == 0)
        for (; j + 4 <= n; j += 4) {
            const float *k[4];
            for (int u = 0; u < 4; u++) k[u] = att_row(base, idx, ld, j + u);
            for (int hh = 0; hh < H; hh++) {
                const float *qh = q + (size_t)hh * dh;
                size_t o = (size_t)hh * dh;
                __m256 a[4], b[4];
                for (int u = 0; u < 4; u++) a[u] = b[u] = _mm256_setzero_ps();
                int i = 0;
                for (; i + 16 <= dh; i += 16) {
                    __m256 q0 = _mm256_loadu_ps(qh + i), q1 = _mm256_loadu_ps(qh + i + 8);
                    for (int u = 0; u < 4; u++) {
                        a[u] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k[u] + o + i), a[u]);
                        b[u] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(k[u] + o + i + 8), b[u]);
                    }
                }
                for (; i + 8 <= dh; i += 8) {
                    __m256 q0 = _mm256_loadu_ps(qh + i);
                    for (int u = 0; u < 4; u++) a[u] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k[u] + o + i), a[u]);
                }
                __m128 s[4];
                for (int u = 0; u < 4; u++) {
                    __m256 t = _mm256_add_ps(a[u], b[u]);
                    s[u] = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
                }
                _mm_storeu_ps(sc + hh * sc_ld + j, _mm_hadd_ps(_mm_hadd_ps(s[0], s[1]), _mm_hadd_ps(s[2], s[3])));
            }
        }
    for (; j < n; j++) {
        const float *kr = att_row(base, idx, ld, j);
        for (int hh = 0; hh < H; hh++) sc[hh * sc_ld + j] = dot(q + (size_t)hh * dh, kr + (size_t)hh * dh, dh);
    }
}

ALWAYS_INLINE void wsum_heads_i(float *o, const float *p, size_t p_ld, const float *base, const int *idx, size_t ld,
                                int n, int H, int dh) {
    memset(o, 0, (size_t)H * dh * sizeof(float));
    if (dh & 7) {
        for (int j = 0; j < n; j++) {
            const float *v = att_row(base, idx, ld, j);
            for (int hh = 0; hh < H; hh++) axpy_n(o + (size_t)hh * dh, p[hh * p_ld + j], v + (size_t)hh * dh, dh);
        }
        return;
    }
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *v[4];
        for (int u = 0; u < 4; u++) v[u] = att_row(base, idx, ld, j + u);
        for (int hh = 0; hh < H; hh++) {
            const float *ph = p + hh * p_ld + j;
            __m256 p0 = _mm256_set1_ps(ph[0]), p1 = _mm256_set1_ps(ph[1]), p2 = _mm256_set1_ps(ph[2]),
                   p3 = _mm256_set1_ps(ph[3]);
            size_t off = (size_t)hh * dh;
            for (int c = 0; c < dh; c += 8) {
                __m256 acc = _mm256_loadu_ps(o + off + c);
                acc = _mm256_fmadd_ps(p0, _mm256_loadu_ps(v[0] + off + c), acc);
                acc = _mm256_fmadd_ps(p1, _mm256_loadu_ps(v[1] + off + c), acc);
                acc = _mm256_fmadd_ps(p2, _mm256_loadu_ps(v[2] + off + c), acc);
                acc = _mm256_fmadd_ps(p3, _mm256_loadu_ps(v[3] + off + c), acc);
                _mm256_storeu_ps(o + off + c, acc);
            }
        }
    }
    for (; j < n; j++) {
        const float *vr = att_row(base, idx, ld, j);
        for (int hh = 0; hh < H; hh++) {
            __m256 pj = _mm256_set1_ps(p[hh * p_ld + j]);
            size_t off = (size_t)hh * dh;
            for (int c = 0; c < dh; c += 8)
                _mm256_storeu_ps(o + off + c,
                                 _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + off + c), _mm256_loadu_ps(o + off + c)));
        }
    }
}

void att_heads(float *o, float *sc, size_t sc_ld, const float *q, const float *Kb, const float *Vb, const int *idx,
               size_t ld, int n, int H, int dh) {
    if (idx) dots_heads_i(sc, sc_ld, q, Kb, idx, ld, n, H, dh);
    else dots_heads_i(sc, sc_ld, q, Kb, NULL, ld, n, H, dh);
    for (int hh = 0; hh < H; hh++) softmax_forward(sc + hh * sc_ld, sc + hh * sc_ld, 1, n);
    if (idx) wsum_heads_i(o, sc, sc_ld, Vb, idx, ld, n, H, dh);
    else wsum_heads_i(o, sc, sc_ld, Vb, NULL, ld, n, H, dh);
}

void att_prefetch(const float *base, const int *idx, size_t ld, int n, int width) {
    for (int j = 0; j < n; j++) {
        const char *f = (const char *)att_row(base, idx, ld, j);
        for (int i = 0; i < width * 4; i += 64) _mm_prefetch(f + i, _MM_HINT_T1);
    }
}
