/* bench_bf16_peak.c — the core's peak multiply-add rate in bfloat16 (VDPBF16PS zmm: 32 products
 * summed pairwise into 16 float32 lanes) vs float32 (VFMADD231PS zmm: 16), one thread, ten
 * independent accumulators (enough to hide either instruction's latency). This bounds what
 * bfloat16 GEMMs can gain over float32 on this CPU without AMX: if VDPBF16PS issues at half the
 * rate of VFMADD231PS, their peak FLOP/s are equal.
 *
 *   build/bench/bench_bf16_peak [rounds]      (default 3) */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/gemm_bf16.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define TEN(op) op(a0); op(a1); op(a2); op(a3); op(a4); op(a5); op(a6); op(a7); op(a8); op(a9)

__attribute__((target("avx512f,avx512bf16"), noinline)) static float run_bf16(long n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0;
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3c00);
    for (long i = 0; i < n; i++) {
#define DP(a) a = _mm512_dpbf16_ps(a, x, y)
        TEN(DP);
        __asm__ volatile("" : "+v"(x), "+v"(y));
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(_mm512_add_ps(a6, a7), _mm512_add_ps(a8, a9))));
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f"), noinline)) static float run_f32(long n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0;
    __m512 x = _mm512_set1_ps(1e-9f), y = _mm512_set1_ps(1.0f);
    for (long i = 0; i < n; i++) {
#define FM(a) a = _mm512_fmadd_ps(x, y, a)
        TEN(FM);
        __asm__ volatile("" : "+v"(x), "+v"(y));
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(_mm512_add_ps(a6, a7), _mm512_add_ps(a8, a9))));
    return _mm512_reduce_add_ps(s);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    if (bf16_check_cpu()) {
        fprintf(stderr, "bench_bf16_peak: %s\n", tern_last_error());
        return 1;
    }
    const long n = 50000000;
    for (int r = 0; r < rounds; r++) {
        double t0 = now();
        volatile float s1 = run_bf16(n);
        double t1 = now();
        volatile float s2 = run_f32(n);
        double t2 = now();
        (void)s1, (void)s2;
        double nb = (double)n * 10, gb = nb * 64 / (t1 - t0) / 1e9, gf = nb * 32 / (t2 - t1) / 1e9;
        printf("VDPBF16PS zmm %.2f ns/instr, %.1f GFLOP/s | VFMADD231PS zmm %.2f ns/instr, %.1f GFLOP/s | "
               "bf16/f32 peak %.2f\n", (t1 - t0) / nb * 1e9, gb, (t2 - t1) / nb * 1e9, gf, gb / gf);
    }
    return 0;
}
