/* bench_int8_ports.c — what the core's vector pipes allow an int8 GEMM without VNNI, against
 * float32 FMA: one thread, operands in registers or L1 (no memory traffic), so each figure is an
 * upper bound for any kernel built from the same instructions.
 *
 * Each loop runs ten independent accumulators (enough to hide every latency here, each kept
 * distinct so that the compiler cannot merge them). Per step:
 *
 *   f32 fma         10 x VFMADD231PS ymm                                  80 multiply-adds
 *                   (Tern's float32 panels)
 *   s8 exact int16  2 x VPMOVSXBW + 5 x VPBROADCASTD + 10 x (VPMADDWD + VPADDD)   160
 *                   (Tern's gemm_s8p on a 5 x 16 tile: exact for every byte)
 *   s8 sign trick   10 x (VPABSB + VPSIGNB + VPMADDUBSW + VPMADDWD(ones) + VPADDD) 320
 *                   (exact except weight -128), and the same with VPABSB once per step
 *   s8 saturating   10 x (VPMADDUBSW + VPMADDWD(ones) + VPADDD)           320
 *                   (oneDNN's AVX2 u8s8s32, hence CTranslate2's: its 16-bit pair sums saturate on
 *                   full-range u8 activations; exact only where activations have 7 bits)
 *   s8 VNNI ymm     10 x VPDPBUSD ymm (AVX512_VNNI + VL; a reference)     320
 *
 * and three that show how the pipes are shared:
 *   mix             5 x (VPMADDWD + VPADDD) and 5 x VFMADD231PS: as fast as 10 FMAs alone means
 *                   integer multiplies and FMAs issue on the same pipes
 *   madd only       10 x VPMADDWD
 *   madd+add        10 x (VPMADDWD + VPADDD)
 *
 * It prints ns per step, multiply-adds per ns, GOP/s (2 per multiply-add) and each form's rate
 * against float32 FMA's. A GEMM reaches a fraction of these (weights and activations stream
 * through the caches).
 *
 *   build/bench/bench_int8_ports [rounds]      (default 5; best of the rounds) */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/cpu_isa.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define KEEP(v) __asm__ volatile("" : "+x"(v))
#define TEN(op) op(c0) op(c1) op(c2) op(c3) op(c4) op(c5) op(c6) op(c7) op(c8) op(c9)

#define DECL10()                                                                                                   \
    __m256i c0 = _mm256_set1_epi32(0), c1 = _mm256_set1_epi32(1), c2 = _mm256_set1_epi32(2),                       \
            c3 = _mm256_set1_epi32(3), c4 = _mm256_set1_epi32(4), c5 = _mm256_set1_epi32(5),                       \
            c6 = _mm256_set1_epi32(6), c7 = _mm256_set1_epi32(7), c8 = _mm256_set1_epi32(8),                       \
            c9 = _mm256_set1_epi32(9)

static int sink_i(__m256i v) { return _mm256_extract_epi32(v, 0) + _mm256_extract_epi32(v, 7); }

/* Ten accumulators (the forms below keep at most 5 other registers live: no spills), each kept
 * distinct (KEEP after its update) so that the compiler cannot merge them. */

__attribute__((noinline)) static int run_fma(long n) {
    __m256 c0 = _mm256_set1_ps(0), c1 = _mm256_set1_ps(1), c2 = _mm256_set1_ps(2), c3 = _mm256_set1_ps(3),
           c4 = _mm256_set1_ps(4), c5 = _mm256_set1_ps(5), c6 = _mm256_set1_ps(6), c7 = _mm256_set1_ps(7),
           c8 = _mm256_set1_ps(8), c9 = _mm256_set1_ps(9);
    __m256 x = _mm256_set1_ps(1e-9f), y = _mm256_set1_ps(1.0f);
    for (long i = 0; i < n; i++) {
#define FM(a) a = _mm256_fmadd_ps(x, y, a); KEEP(a);
        TEN(FM)
#undef FM
        KEEP(x); KEEP(y);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                             _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)), _mm256_add_ps(c8, c9)));
    return (int)_mm256_cvtss_f32(s);
}

#define SUM10I()                                                                                                   \
    _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)),                         \
                     _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c4, c5), _mm256_add_epi32(c6, c7)),        \
                                      _mm256_add_epi32(c8, c9)))

/* Tern's gemm_s8p step on a 5 x 16 tile (the kernel's is 6 x 16), written in assembly so that
 * the compiler keeps every accumulator in a register: two weight vectors widened from bytes
 * (vpmovsxbw from L1), five broadcast activation pairs (vpbroadcastd from L1),
 * 10 x (vpmaddwd + vpaddd). */
__attribute__((noinline)) static int run_s8_int16(long n, const int8_t *wb, const int32_t *ab) {
    DECL10();
    for (long i = 0; i < n; i++) {
        __m256i w0, w1, b, t;
        __asm__ volatile(
            "vpmovsxbw (%[w]), %[w0]\n\t"
            "vpmovsxbw 16(%[w]), %[w1]\n\t"
#define ROWASM(off, p, q)                                                                                        \
            "vpbroadcastd " #off "(%[a]), %[b]\n\t"                                                              \
            "vpmaddwd %[w0], %[b], %[t]\n\t"                                                                     \
            "vpaddd %[t], %[" #p "], %[" #p "]\n\t"                                                              \
            "vpmaddwd %[w1], %[b], %[t]\n\t"                                                                     \
            "vpaddd %[t], %[" #q "], %[" #q "]\n\t"
            ROWASM(0, c0, c1) ROWASM(4, c2, c3) ROWASM(8, c4, c5) ROWASM(12, c6, c7) ROWASM(16, c8, c9)
#undef ROWASM
            : [c0] "+x"(c0), [c1] "+x"(c1), [c2] "+x"(c2), [c3] "+x"(c3), [c4] "+x"(c4), [c5] "+x"(c5),
              [c6] "+x"(c6), [c7] "+x"(c7), [c8] "+x"(c8), [c9] "+x"(c9), [w0] "=&x"(w0), [w1] "=&x"(w1),
              [b] "=&x"(b), [t] "=&x"(t)
            : [w] "r"(wb), [a] "r"(ab)
            : "memory");
    }
    return sink_i(SUM10I());
}

/* Per 32 products: vpabsb, vpsignb, vpmaddubsw, vpmaddwd with ones, vpaddd. */
__attribute__((noinline)) static int run_s8_sign(long n) {
    DECL10();
    __m256i a = _mm256_set1_epi8(-3), w = _mm256_set1_epi8(5), one = _mm256_set1_epi16(1);
    for (long i = 0; i < n; i++) {
#define SG(c) c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(a), _mm256_sign_epi8(w, a)), one)); KEEP(c); KEEP(a); KEEP(w);
        TEN(SG)
#undef SG
    }
    return sink_i(SUM10I());
}

/* The same with |a| taken once per step (per activation row, as a kernel would). */
__attribute__((noinline)) static int run_s8_sign_hoisted(long n) {
    DECL10();
    __m256i a = _mm256_set1_epi8(-3), w = _mm256_set1_epi8(5), one = _mm256_set1_epi16(1);
    for (long i = 0; i < n; i++) {
        __m256i ua = _mm256_abs_epi8(a);
#define SG(c) c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(ua, _mm256_sign_epi8(w, a)), one)); KEEP(c); KEEP(w);
        TEN(SG)
#undef SG
        KEEP(a);
    }
    return sink_i(SUM10I());
}

/* Per 32 products: vpmaddubsw, vpmaddwd with ones, vpaddd. */
__attribute__((noinline)) static int run_s8_sat(long n) {
    DECL10();
    __m256i a = _mm256_set1_epi8(3), w = _mm256_set1_epi8(5), one = _mm256_set1_epi16(1);
    for (long i = 0; i < n; i++) {
#define SA(c) c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(a, w), one)); KEEP(c); KEEP(w);
        TEN(SA)
#undef SA
        KEEP(a);
    }
    return sink_i(SUM10I());
}

__attribute__((target("avx512f,avx512vl,avx512vnni"), noinline)) static int run_vnni(long n) {
    DECL10();
    __m256i a = _mm256_set1_epi8(3), w = _mm256_set1_epi8(5);
    for (long i = 0; i < n; i++) {
#define VN(c) c = _mm256_dpbusd_epi32(c, a, w); KEEP(c);
        TEN(VN)
#undef VN
        KEEP(a); KEEP(w);
    }
    return sink_i(SUM10I());
}

/* 5 x (vpmaddwd + vpaddd) and 5 x vfmadd231ps per step. */
__attribute__((noinline)) static int run_mix(long n) {
    __m256i c0 = _mm256_set1_epi32(0), c1 = _mm256_set1_epi32(1), c2 = _mm256_set1_epi32(2),
            c3 = _mm256_set1_epi32(3), c4 = _mm256_set1_epi32(4);
    __m256 f0 = _mm256_set1_ps(0), f1 = _mm256_set1_ps(1), f2 = _mm256_set1_ps(2), f3 = _mm256_set1_ps(3),
           f4 = _mm256_set1_ps(4);
    __m256i a = _mm256_set1_epi16(3), w = _mm256_set1_epi16(5);
    __m256 x = _mm256_set1_ps(1e-9f), y = _mm256_set1_ps(1.0f);
    for (long i = 0; i < n; i++) {
#define MI(c) c = _mm256_add_epi32(c, _mm256_madd_epi16(a, w)); KEEP(c); KEEP(w);
#define MF(f) f = _mm256_fmadd_ps(x, y, f); KEEP(f);
        MI(c0) MF(f0) MI(c1) MF(f1) MI(c2) MF(f2) MI(c3) MF(f3) MI(c4) MF(f4)
#undef MI
#undef MF
        KEEP(a); KEEP(x); KEEP(y);
    }
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(_mm256_add_epi32(c2, c3), c4));
    __m256 t = _mm256_add_ps(_mm256_add_ps(f0, f1), _mm256_add_ps(_mm256_add_ps(f2, f3), f4));
    return sink_i(s) + (int)_mm256_cvtss_f32(t);
}

/* 10 x vpmaddwd per step, each into its own register (no add). */
__attribute__((noinline)) static int run_madd_only(long n) {
    DECL10();
    __m256i w = _mm256_set1_epi16(1);
    for (long i = 0; i < n; i++) {
#define MO(c) c = _mm256_madd_epi16(c, w); KEEP(c);
        TEN(MO)
#undef MO
        KEEP(w);
    }
    return sink_i(SUM10I());
}

/* 10 x (vpmaddwd + vpaddd) per step. */
__attribute__((noinline)) static int run_madd_add(long n) {
    DECL10();
    __m256i a = _mm256_set1_epi16(3), w = _mm256_set1_epi16(5);
    for (long i = 0; i < n; i++) {
#define MA(c) c = _mm256_add_epi32(c, _mm256_madd_epi16(a, w)); KEEP(c); KEEP(w);
        TEN(MA)
#undef MA
        KEEP(a);
    }
    return sink_i(SUM10I());
}

typedef struct {
    const char *name;
    double macs; /* multiply-adds per step */
    int kind;
} form_t;

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    if (rounds < 1) rounds = 1;
    const int vnni = cpu_isa_effective() >= CPU_ISA_AVX512_CORE_VNNI;
    static const form_t forms[] = {
        {"f32 fma (Tern's float32 panels)", 80, 0},
        {"s8 exact int16 (Tern's gemm_s8p)", 160, 1},
        {"s8 sign trick (exact, q != -128)", 320, 2},
        {"s8 sign trick, vpabsb hoisted", 320, 3},
        {"s8 saturating (oneDNN AVX2 u8s8)", 320, 4},
        {"s8 VNNI ymm (reference)", 320, 5},
        {"mix: 5 madd+add, 5 fma", 0, 6},
        {"madd only (10 vpmaddwd)", 0, 7},
        {"madd+add (10 vpmaddwd + 10 vpaddd)", 0, 8},
    };
    int8_t wb[32];
    int32_t ab[6];
    for (int i = 0; i < 32; i++) wb[i] = (int8_t)(i - 16);
    for (int i = 0; i < 6; i++) ab[i] = 0x00030002 + i;
    const long n = 20000000L;
    int sink = 0;
    double best_ns[9];
    printf("# bench_int8_ports: %ld steps per round, best of %d rounds, 1 thread, operands in registers\n", n, rounds);
    printf("%-36s %10s %12s %9s %9s\n", "form", "ns/step", "mult-add/ns", "GOP/s", "vs fma");
    for (int f = 0; f < 9; f++) {
        if (forms[f].kind == 5 && !vnni) {
            printf("%-36s %10s\n", forms[f].name, "(no VNNI)");
            best_ns[f] = 0;
            continue;
        }
        double best = 1e30;
        for (int r = 0; r < rounds; r++) {
            double t = now();
            switch (forms[f].kind) {
            case 0: sink += run_fma(n); break;
            case 1: sink += run_s8_int16(n, wb, ab); break;
            case 2: sink += run_s8_sign(n); break;
            case 3: sink += run_s8_sign_hoisted(n); break;
            case 4: sink += run_s8_sat(n); break;
            case 5: sink += run_vnni(n); break;
            case 6: sink += run_mix(n); break;
            case 7: sink += run_madd_only(n); break;
            default: sink += run_madd_add(n); break;
            }
            t = now() - t;
            if (t < best) best = t;
        }
        best_ns[f] = best / (double)n * 1e9;
        if (forms[f].macs > 0) {
            double rate = forms[f].macs / best_ns[f];
            printf("%-36s %10.3f %12.1f %9.1f %9.2f\n", forms[f].name, best_ns[f], rate, 2 * rate,
                   rate / (forms[0].macs / best_ns[0]));
        } else {
            printf("%-36s %10.3f %12s %9s %9s\n", forms[f].name, best_ns[f], "", "", "");
        }
    }
    printf("# mix: %.3f ns against %.3f for its 5 madd+add alone plus its 5 fma alone (shared pipes if equal)\n",
           best_ns[6], best_ns[8] / 2 + best_ns[0] / 2);
    return sink == 42 ? 1 : 0;
}
