/* gemm_f32p.c — Tern's packed float32 linear layer in AVX2 + FMA (gemm_f32p.h; docs/kernels.md,
 * "Packed float32 linear layers on AVX2").
 *
 * Why: oneDNN 2.6's blocked float32 matmul (brgemm) exists only from AVX512_CORE up; on an AVX2
 * CPU (or under ONEDNN_MAX_CPU_ISA=AVX2) the matmul primitive is its GEMM ("gemm:jit", with plain
 * weights), which re-packs the weights on every call like dnnl_sgemm. For the 1-32 rows of a
 * decoder step that is a large share of the work. Here the weights are packed once, at load, into
 * panels of 16 output features (K x 16 floats each, k-major), and a register-blocked micro-kernel
 * multiplies them with broadcast activations:
 *
 *   - 6 rows x 16 features (12 accumulators, 2 panel loads and 1 broadcast per k: 15 of the 16
 *     ymm registers) for the full row blocks; the 1-5 rows left use several panels at once
 *     (1 row x 4 panels, 2-3 rows x 2 panels) so that 8-12 independent FMA chains hide the FMA
 *     latency when a step has few rows;
 *   - the panel stream prefetched into L2 16 KB ahead (below);
 *   - bias and ReLU applied in registers before the store;
 *   - the panel outer, its row blocks inner: a panel read from memory serves every row of the
 *     call before the next one is read (the weights of a decoder do not fit in the caches, so at
 *     small M each step streams them once, in address order); rows in chunks whose activations
 *     stay in L2 (about 384 KB);
 *   - the panels split across the OpenMP threads of the caller (kernels_get_num_threads()).
 *
 * Each output is one FMA chain over k ascending from 0, then + bias, then ReLU, whichever tile
 * computes it: results do not depend on M, on the row's place or on the threads.
 *
 * Legend: M rows of activations, N output features, K input features. Built for x86-64-v3 (the
 * build's baseline): AVX2 and FMA need no run-time check. */
#include <immintrin.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_isa.h"
#include "kernels/gemm_f32p.h"
#include "kernels/kernels.h"

#define NR F32P_NR /* 16 features per panel: 2 vectors */
#define MR 6       /* rows of a full tile */
#define GP 4       /* panels per group (the few-row tiles take up to 4 panels at once) */
/* Software prefetch of the panels' stream, PD k-rows (16 KB) ahead, into L2 (prefetcht2): the
 * hardware prefetchers alone left the few-row products waiting on memory (a decoder's weights do
 * not fit in the caches). Measured on Zen 4 under the AVX2 cap, weights cycled through 256 MB:
 * M = 4-16 38-58 -> 40-93 GFLOP/s; hint T0 or distance 64 was 5-20 % slower. Only the one-panel
 * tiles: the few-row tiles that read 2-4 panels at once ran 5-15 % faster (M = 1-3) on the
 * hardware prefetchers alone. */
#define PD 256

size_t f32p_panel_floats(int N, int K) {
    if (N <= 0 || K <= 0) return 0;
    return (size_t)((N + NR - 1) / NR) * NR * (size_t)K;
}

void f32p_pack(float *P, const float *W, int N, int K) {
    int panels = (N + NR - 1) / NR;
    for (int p = 0; p < panels; p++) {
        float *dst = P + (size_t)p * NR * K;
        for (int j = 0; j < NR; j++) {
            int n = p * NR + j;
            if (n < N) {
                const float *w = W + (size_t)n * K;
                for (int k = 0; k < K; k++) dst[(size_t)k * NR + j] = w[k];
            } else {
                for (int k = 0; k < K; k++) dst[(size_t)k * NR + j] = 0.0f;
            }
        }
    }
}

/* mr rows x np panels (compile-time constants after inlining: mr * 2 * np accumulators).
 * a: the first row (row stride lda); b: the first panel (panel stride ps floats); bias: NULL or the
 * padded bias at the first column; c: the output (row stride ldc); ncols: valid columns (<= 16 np). */
static inline __attribute__((always_inline)) void tile(const int mr, const int np, const float *a, int lda,
                                                       const float *b, size_t ps, int K, const float *bias,
                                                       int relu, float *c, int ldc, int ncols) {
    __m256 acc[MR][2 * GP];
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
        for (int j = 0; j < 2 * np; j++) acc[r][j] = _mm256_setzero_ps();
    for (int k = 0; k < K; k++) {
        __m256 bv[2 * GP];
#pragma GCC unroll 8
        for (int p = 0; p < np; p++) {
            /* (may point past the buffer: an address computed as an integer; prefetches never fault) */
            if (np == 1)
                _mm_prefetch((const char *)((uintptr_t)(b + p * ps + (size_t)k * NR) + PD * NR * sizeof(float)),
                             _MM_HINT_T2);
            bv[2 * p] = _mm256_load_ps(b + p * ps + (size_t)k * NR);
            bv[2 * p + 1] = _mm256_load_ps(b + p * ps + (size_t)k * NR + 8);
        }
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            __m256 av = _mm256_broadcast_ss(a + (size_t)r * lda + k);
#pragma GCC unroll 8
            for (int j = 0; j < 2 * np; j++) acc[r][j] = _mm256_fmadd_ps(av, bv[j], acc[r][j]);
        }
    }
    const __m256 zero = _mm256_setzero_ps();
    float tmp[MR][NR * GP] __attribute__((aligned(32)));
    int full = ncols == NR * np;
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
        for (int j = 0; j < 2 * np; j++) {
            __m256 v = acc[r][j];
            if (bias) v = _mm256_add_ps(v, _mm256_load_ps(bias + 8 * j));
            if (relu) v = _mm256_max_ps(v, zero);
            if (full) _mm256_storeu_ps(c + (size_t)r * ldc + 8 * j, v);
            else _mm256_store_ps(&tmp[r][8 * j], v);
        }
    if (!full)
        for (int r = 0; r < mr; r++) memcpy(c + (size_t)r * ldc, tmp[r], (size_t)ncols * sizeof(float));
}

typedef void (*tile_fn)(const float *a, int lda, const float *b, size_t ps, int K, const float *bias, int relu,
                        float *c, int ldc, int ncols);

#define TILE(mr, np)                                                                                          \
    static void tile_##mr##_##np(const float *a, int lda, const float *b, size_t ps, int K, const float *bias, \
                                 int relu, float *c, int ldc, int ncols) {                                    \
        tile(mr, np, a, lda, b, ps, K, bias, relu, c, ldc, ncols);                                            \
    }
TILE(1, 1) TILE(1, 2) TILE(1, 3) TILE(1, 4)
TILE(2, 1) TILE(2, 2)
TILE(3, 1) TILE(3, 2)
TILE(4, 1) TILE(5, 1) TILE(6, 1)
#undef TILE

/* tiles[mr][np]; np_max[mr]: the most panels a tile of mr rows takes */
static const tile_fn tiles[MR + 1][GP + 1] = {
    {0},
    {0, tile_1_1, tile_1_2, tile_1_3, tile_1_4},
    {0, tile_2_1, tile_2_2},
    {0, tile_3_1, tile_3_2},
    {0, tile_4_1},
    {0, tile_5_1},
    {0, tile_6_1},
};
static const int np_max[MR + 1] = {0, 4, 2, 2, 1, 1, 1};

/* Panels [p0, p1) for every row. */
static void run_panels(float *out, const float *inp, const float *P, const float *bias, int relu, int M, int N,
                       int K, int p0, int p1) {
    size_t ps = (size_t)NR * K;
    /* rows per chunk: activations of about 384 KB, a multiple of MR, at least MR */
    int mc = (int)((384u << 10) / ((size_t)(K > 0 ? K : 1) * sizeof(float)));
    mc = mc / MR * MR;
    if (mc < MR) mc = MR;
    for (int m0 = 0; m0 < M; m0 += mc) {
        int rows = M - m0 < mc ? M - m0 : mc;
        int full = rows / MR * MR, rest = rows - full;
        const float *a = inp + (size_t)m0 * K;
        float *c = out + (size_t)m0 * N;
        for (int g = p0; g < p1; g += GP) {
            int g1 = g + GP < p1 ? g + GP : p1;
            for (int p = g; p < g1; p++) {
                int n0 = p * NR, nc = N - n0 < NR ? N - n0 : NR;
                const float *bp = bias ? bias + n0 : NULL;
                for (int r = 0; r < full; r += MR)
                    tile_6_1(a + (size_t)r * K, K, P + (size_t)p * ps, ps, K, bp, relu, c + (size_t)r * N + n0, N, nc);
            }
            if (rest) {
                for (int p = g; p < g1;) {
                    int np = g1 - p < np_max[rest] ? g1 - p : np_max[rest];
                    int n0 = p * NR, nc = N - n0 < NR * np ? N - n0 : NR * np;
                    tiles[rest][np](a + (size_t)full * K, K, P + (size_t)p * ps, ps, K, bias ? bias + n0 : NULL, relu,
                                    c + (size_t)full * N + n0, N, nc);
                    p += np;
                }
            }
        }
    }
}

/* ------------------------------------------------------------ the same panels at 512 bits
 *
 * On a CPU with full-width AVX-512 (Intel from Skylake-SP on, AMD Zen 5; not Zen 4, which splits
 * each 512-bit operation in two: cpu_avx512_halves) one zmm holds a whole panel row, so a tile
 * does twice the FMAs per instruction. Same layout, and every output is still one FMA chain over k
 * ascending from 0, then + bias, then ReLU: the same bits as the AVX2 tiles (tests/c/test_kernels.c
 * checks both against the scalar fmaf loop). Tiles: 12 rows x 2 panels (24 of the 32 zmm
 * registers accumulate; the activations are broadcast from memory into the FMAs) for the full row
 * blocks, and the 1-11 rows left over up to 8 panels so that 8-24 independent chains hide the FMA
 * latency. A partial last panel is stored under a mask. */
#define MR5 12 /* rows of a full 512-bit tile */
#define GP5 8  /* panels per group at 512 bits */
#define T512 __attribute__((target("avx512f")))

static inline __attribute__((always_inline)) T512 void tile512(const int mr, const int np, const float *a, int lda,
                                                                const float *b, size_t ps, int K, const float *bias,
                                                                int relu, float *c, int ldc, int ncols,
                                                                const float *pf, const float *pf_end, int pf_every,
                                                                int pf_lines) {
    __m512 acc[MR5][GP5];
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
        for (int p = 0; p < np; p++) acc[r][p] = _mm512_setzero_ps();
    for (int k = 0; k < K; k++) {
        __m512 bv[GP5];
#pragma GCC unroll 8
        for (int p = 0; p < np; p++) {
            if (np <= 2)
                _mm_prefetch((const char *)((uintptr_t)(b + p * ps + (size_t)k * NR) + PD * NR * sizeof(float)),
                             _MM_HINT_T2);
            bv[p] = _mm512_loadu_ps(b + p * ps + (size_t)k * NR);
        }
        if (pf && k % pf_every == 0) { /* a slice of the next group's panels (run_panels512) */
            const float *q = pf + (size_t)(k / pf_every) * pf_lines * NR;
            for (int l = 0; l < pf_lines && q + l * NR < pf_end; l++) _mm_prefetch((const char *)(q + l * NR), _MM_HINT_T1);
        }
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            __m512 av = _mm512_set1_ps(a[(size_t)r * lda + k]);
#pragma GCC unroll 8
            for (int p = 0; p < np; p++) acc[r][p] = _mm512_fmadd_ps(av, bv[p], acc[r][p]);
        }
    }
    const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int p = 0; p < np; p++) {
        int left = ncols - NR * p;
        __mmask16 m = left >= NR ? (__mmask16)0xFFFF : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
        __m512 bb = bias ? _mm512_loadu_ps(bias + NR * p) : zero;
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            __m512 v = acc[r][p];
            if (bias) v = _mm512_add_ps(v, bb);
            if (relu) v = _mm512_max_ps(v, zero);
            _mm512_mask_storeu_ps(c + (size_t)r * ldc + NR * p, m, v);
        }
    }
}

#define TILE5(mr, np)                                                                                            \
    static T512 void tile5_##mr##_##np(const float *a, int lda, const float *b, size_t ps, int K,                \
                                       const float *bias, int relu, float *c, int ldc, int ncols,                \
                                       const float *pf, const float *pf_end, int pf_every, int pf_lines) {       \
        tile512(mr, np, a, lda, b, ps, K, bias, relu, c, ldc, ncols, pf, pf_end, pf_every, pf_lines);            \
    }
TILE5(1, 1) TILE5(1, 2) TILE5(1, 3) TILE5(1, 4) TILE5(1, 5) TILE5(1, 6) TILE5(1, 7) TILE5(1, 8)
TILE5(2, 1) TILE5(2, 2) TILE5(2, 3) TILE5(2, 4)
TILE5(3, 1) TILE5(3, 2) TILE5(3, 3) TILE5(3, 4)
TILE5(4, 1) TILE5(4, 2) TILE5(4, 3) TILE5(4, 4)
TILE5(5, 1) TILE5(5, 2) TILE5(5, 3) TILE5(5, 4)
TILE5(6, 1) TILE5(6, 2) TILE5(6, 3) TILE5(6, 4)
TILE5(7, 1) TILE5(7, 2) TILE5(7, 3)
TILE5(8, 1) TILE5(8, 2) TILE5(8, 3)
TILE5(9, 1) TILE5(9, 2)
TILE5(10, 1) TILE5(10, 2)
TILE5(11, 1) TILE5(11, 2)
TILE5(12, 1) TILE5(12, 2)
#undef TILE5

typedef void (*tile5_fn)(const float *a, int lda, const float *b, size_t ps, int K, const float *bias, int relu,
                         float *c, int ldc, int ncols, const float *pf, const float *pf_end, int pf_every,
                         int pf_lines);
#define R5(mr) {0, tile5_##mr##_1, tile5_##mr##_2
static const tile5_fn tiles5[MR5 + 1][GP5 + 1] = {
    {0},
    R5(1), tile5_1_3, tile5_1_4, tile5_1_5, tile5_1_6, tile5_1_7, tile5_1_8},
    R5(2), tile5_2_3, tile5_2_4}, R5(3), tile5_3_3, tile5_3_4}, R5(4), tile5_4_3, tile5_4_4},
    R5(5), tile5_5_3, tile5_5_4}, R5(6), tile5_6_3, tile5_6_4},
    R5(7), tile5_7_3}, R5(8), tile5_8_3},
    R5(9)}, R5(10)}, R5(11)}, R5(12)},
};
#undef R5
static const int np_max5[MR5 + 1] = {0, 8, 4, 4, 4, 4, 4, 3, 3, 2, 2, 2, 2};

/* run_panels at 512 bits: the panel group outer, its row blocks inner, rows in ~1 MB chunks.
 * The first pass over a group (its first row block) reads the group's panels from memory; the
 * later passes find them in L2 and, while they compute, prefetch the next group (contiguous in
 * memory) into L2, spread evenly over all their tiles (one cache line every pf_every k, or two
 * every k when the passes are few), so that memory and arithmetic overlap when a call has more
 * than one row block. */
static void run_panels512(float *out, const float *inp, const float *P, const float *bias, int relu, int M, int N,
                          int K, int p0, int p1) {
    size_t ps = (size_t)NR * K;
    int mc = (int)((1024u << 10) / ((size_t)(K > 0 ? K : 1) * sizeof(float)));
    mc = mc / MR5 * MR5;
    if (mc < MR5) mc = MR5;
    for (int m0 = 0; m0 < M; m0 += mc) {
        int rows = M - m0 < mc ? M - m0 : mc;
        int full = rows / MR5 * MR5, rest = rows - full;
        const float *a = inp + (size_t)m0 * K;
        float *c = out + (size_t)m0 * N;
        for (int g = p0; g < p1; g += GP5) {
            int g1 = g + GP5 < p1 ? g + GP5 : p1;
            /* the next group [pf, pf_end): K cache lines a panel, over the tiles of the later passes */
            int n1 = g1 + GP5 < p1 ? g1 + GP5 : p1;
            const float *pf = g1 < p1 ? P + (size_t)g1 * ps : NULL, *pf_end = P + (size_t)n1 * ps;
            int gsz = g1 - g, calls = (full / MR5 - 1) * ((gsz + 1) / 2);
            if (rest && full) calls += (gsz + np_max5[rest] - 1) / np_max5[rest];
            int every = 1, lines = 2;
            if (pf && calls > 0) {
                long need = (long)(n1 - g1) * K, per = (need + calls - 1) / calls; /* lines a tile */
                if (per <= K) lines = 1, every = (int)(K / (per > 0 ? per : 1));
                /* else two every k, the most that helped (4 or 8 were no faster at 16-28 rows, where the
                 * later passes are too few to cover the whole next group) */
            }
            const int step = (K + every - 1) / every * lines; /* lines a tile prefetches */
            for (int p = g; p < g1; p += 2) {
                int np = g1 - p < 2 ? g1 - p : 2;
                int n0 = p * NR, nc = N - n0 < NR * np ? N - n0 : NR * np;
                const float *bp = bias ? bias + n0 : NULL;
                for (int r = 0; r < full; r += MR5) {
                    const float *q = r > 0 && pf && pf < pf_end ? pf : NULL;
                    tiles5[MR5][np](a + (size_t)r * K, K, P + (size_t)p * ps, ps, K, bp, relu, c + (size_t)r * N + n0,
                                    N, nc, q, pf_end, every, lines);
                    if (q) pf += (size_t)step * NR;
                }
            }
            for (int p = g; rest && p < g1;) {
                int np = g1 - p < np_max5[rest] ? g1 - p : np_max5[rest];
                int n0 = p * NR, nc = N - n0 < NR * np ? N - n0 : NR * np;
                const float *q = full > 0 && pf && pf < pf_end ? pf : NULL;
                tiles5[rest][np](a + (size_t)full * K, K, P + (size_t)p * ps, ps, K, bias ? bias + n0 : NULL, relu,
                                 c + (size_t)full * N + n0, N, nc, q, pf_end, every, lines);
                if (q) pf += (size_t)step * NR;
                p += np;
            }
        }
    }
}

/* The 512-bit tiles where the CPU runs AVX-512 at full width and TERN_MAX_CPU_ISA allows it;
 * TERN_F32P_AVX2=1 keeps the AVX2 tiles (comparisons). Decided once per process. */
static int use_avx512(void) {
    static atomic_int v = -1;
    int r = atomic_load(&v);
    if (r < 0) {
        const char *e = getenv("TERN_F32P_AVX2");
        r = cpu_isa_effective() >= CPU_ISA_AVX512_CORE && !cpu_avx512_halves() && !(e && *e && strcmp(e, "0"));
        atomic_store(&v, r);
    }
    return r;
}

const char *f32p_tiles_name(void) { return use_avx512() ? "AVX-512" : "AVX2"; }

void f32p_forward(float *out, const float *inp, const float *P, const float *bias, int relu, int M, int N, int K,
                  int threads) {
    if (M <= 0 || N <= 0) return;
    int panels = (N + NR - 1) / NR;
    int wide = use_avx512(), gp = wide ? GP5 : GP;
    if (threads > panels) threads = panels;
    /* a parallel region costs a few microseconds: only where each thread gets real work */
    if ((double)M * N * K < 2e5) threads = 1;
    if (threads <= 1) {
        (wide ? run_panels512 : run_panels)(out, inp, P, bias, relu, M, N, K, 0, panels);
        return;
    }
    /* panels in chunks taken in turn (kernels_chunk: about 8 per thread), whole groups */
    int chunk = (kernels_chunk(panels, threads, 8) + gp - 1) / gp * gp;
    int nchunks = (panels + chunk - 1) / chunk;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int c = 0; c < nchunks; c++) {
        int p0 = c * chunk, p1 = p0 + chunk < panels ? p0 + chunk : panels;
        (wide ? run_panels512 : run_panels)(out, inp, P, bias, relu, M, N, K, p0, p1);
    }
}
