/*
 * kernels_cuda.h — Tern's CUDA kernels, host entry points (built only with `make CUDA=1`; the CPU
 * build never includes this). Every kernel has its arithmetic in rowops.h and a host emulation in
 * emulate.h with the same signature shape; the device results are tested against the emulation
 * (tests/cuda/test_cuda_kernels.cu, run by scripts/gpu_check.sh on a GPU).
 *
 * Pointers are device pointers; `stream` is a cudaStream_t (NULL: the default stream); calls are
 * asynchronous on it. Each returns 0, or -1 with tern_cuda_last_error() saying what failed (a
 * launch error, or an argument out of range naming it). Legend: M rows, C columns, k top-k size.
 */
#ifndef TERN_KERNELS_CUDA_H
#define TERN_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The message of the last failure on this thread ("" when none). */
const char *tern_cuda_last_error(void);
/* Number of CUDA devices usable here (0 without a driver or a device: never an error). */
int tern_cuda_device_count(void);

int tern_cuda_layernorm(float *out, const float *x, const float *gamma, const float *beta, int M, int C, float eps,
                        void *stream);
int tern_cuda_softmax(float *out, const float *x, int M, int C, int log_out, void *stream);
/* vals/idx [M, k] as emu_topk; k in 1..ROW_TOPK_MAX (32). */
int tern_cuda_topk(float *vals, int *idx, const float *x, int M, int C, int k, int log_probs, void *stream);
/* A decoder step's attention as emu_attention (len[r] <= max_len <= 4096, a device array). */
int tern_cuda_attention(float *out, float *probs, const float *q, const float *K, const float *V, const int *kv,
                        const int *len, long row_ld, long ld, int R, int H, int dh, int max_len, float scale,
                        void *stream);
int tern_cuda_embed(float *out, const float *emb, const int *ids, float scale, const float *pos, const int *pos_ids,
                    int M, int C, void *stream);
int tern_cuda_gather_rows(float *dst, const float *src, const int *rows, int n, int C, void *stream);
int tern_cuda_dequant(float *out, const int32_t *acc, const float *sa, const float *sw, const float *bias, int M,
                      int N, void *stream);

#ifdef __cplusplus
}
#endif

#endif
