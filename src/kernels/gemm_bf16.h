/*
 * gemm_bf16.h — bfloat16 GEMM with float32 accumulation and output (oneDNN matmul), and the
 * float32 -> bfloat16 conversion (round to nearest even), for bfloat16 training.
 *
 * Legend: M rows of C, N columns of C, K the reduced dimension; n a flat element count.
 *
 * bfloat16 is the upper half of a float32 (1 sign, 8 exponent, 7 mantissa bits), stored as
 * uint16_t. Runs only where the CPU has AVX512_BF16 (bf16_check_cpu says so, clearly, instead
 * of a SIGILL). One oneDNN primitive per (transA, transB, accumulate) and thread, with runtime dimensions.
 */
#ifndef TERN_KERNELS_GEMM_BF16_H
#define TERN_KERNELS_GEMM_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

typedef uint16_t bf16_t;

/* 1 when the CPU has AVX512_BF16 (cpuid leaf 7 subleaf 1, EAX bit 5, with AVX-512 state
 * enabled by the OS) AND oneDNN's effective ISA includes avx512_core_bf16 (it does not when
 * limited by ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA). */
int bf16_cpu_supported(void);
/* TERN_OK, or TERN_ERR_UNSUPPORTED with a message naming what is missing. */
tern_status_t bf16_check_cpu(void);

/* Round to nearest even, as VCVTNE2PS2BF16 does: NaN stays a (quiet) NaN, infinities stay,
 * denormal inputs become signed zero. The scalar specification of bf16_from_f32. */
static inline bf16_t bf16_round(float f) {
    union { float f; uint32_t u; } x = {f};
    uint32_t u = x.u;
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u);
    if ((u & 0x7f800000u) == 0) return (bf16_t)((u >> 16) & 0x8000u);
    if ((u & 0x7f800000u) == 0x7f800000u) return (bf16_t)(u >> 16);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}
static inline float bf16_to_f32(bf16_t h) {
    union { uint32_t u; float f; } x = {(uint32_t)h << 16};
    return x.f;
}

/* dst[i] = bf16_round(src[i]), with AVX512_BF16 (_mm512_cvtne2ps_pbh) when the CPU has it
 * (scalar otherwise); threads split large arrays. */
void bf16_from_f32(bf16_t *dst, const float *src, size_t n);
/* The scalar loop (the specification; for tests). */
void bf16_from_f32_ref(bf16_t *dst, const float *src, size_t n);

/* C[M,N] = op(A) · op(B) + beta · C with A, B bfloat16 and C float32 (float32 accumulation),
 * row-major, op(X) = X or X^T (trans != 0); lda/ldb/ldc the row strides as stored; beta 0 or 1
 * (1: oneDNN's sum post-op). Needs bf16_check_cpu() == TERN_OK. Returns an error when oneDNN
 * fails (it names the shape). */
tern_status_t gemm_bf16(int transA, int transB, int M, int N, int K, const bf16_t *A, int lda,
                        const bf16_t *B, int ldb, float beta, float *C, int ldc);

/* Counters of the calling thread's primitive cache: calls, primitives created. */
void gemm_bf16_stats(long *calls, long *created);
/* Frees the calling thread's primitives and stream. */
void gemm_bf16_cache_clear(void);

#endif
