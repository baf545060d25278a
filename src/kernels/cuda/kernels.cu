/*
 * kernels.cu — Tern's CUDA row kernels (kernels_cuda.h). One block of ROW_THREADS threads per row:
 * thread t computes its strided partial with rowops.h, the partials meet in shared memory and are
 * combined by the tree of rowops.h (widths T/2 .. 1), exactly as emulate.c does on the host, so
 * the device's results are compared with the emulation bit for bit where no transcendental is
 * involved. Built with --fmad=false (no contraction beyond rowops.h's explicit fmaf).
 */
#include <cuda_runtime.h>

#include <stdio.h>
#include <string.h>

#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/rowops.h"

#define T ROW_THREADS

static __thread char last_error[512];

extern "C" const char *tern_cuda_last_error(void) { return last_error; }

static int fail(const char *fmt, const char *what) {
    snprintf(last_error, sizeof last_error, fmt, what);
    return -1;
}

static int launched(const char *name) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        snprintf(last_error, sizeof last_error, "%s: %s", name, cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

extern "C" int tern_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* no driver or no device: 0 devices, not an error */
        return 0;
    }
    return n;
}

/* The tree over the block's partials in shared memory p[T] (Op: rowop_add or rowop_max); every
 * thread gets the result. */
struct tree_add {
    __device__ float operator()(float a, float b) const { return rowop_add(a, b); }
};
struct tree_max {
    __device__ float operator()(float a, float b) const { return rowop_max(a, b); }
};
template <class Op>
__device__ static float block_tree(float *p, float v, Op op) {
    int t = threadIdx.x;
    p[t] = v;
    __syncthreads();
    for (int w = T / 2; w > 0; w >>= 1) {
        if (t < w) p[t] = op(p[t], p[t + w]);
        __syncthreads();
    }
    float r = p[0];
    __syncthreads();
    return r;
}

__global__ static void k_layernorm(float *out, const float *x, const float *gamma, const float *beta, int C,
                                   float eps) {
    __shared__ float p[T];
    const float *r = x + (long)blockIdx.x * C;
    float *o = out + (long)blockIdx.x * C;
    int t = threadIdx.x;
    float mean = block_tree(p, ln_partial_sum(r, C, t, T), tree_add()) / (float)C;
    float rstd = ln_rstd(block_tree(p, ln_partial_sqdev(r, mean, C, t, T), tree_add()), C, eps);
    for (int c = t; c < C; c += T) o[c] = ln_out(r[c], mean, rstd, gamma[c], beta[c]);
}

__global__ static void k_softmax(float *out, const float *x, int C, int log_out) {
    __shared__ float p[T];
    const float *r = x + (long)blockIdx.x * C;
    float *o = out + (long)blockIdx.x * C;
    int t = threadIdx.x;
    float mx = block_tree(p, sm_partial_max(r, C, t, T), tree_max());
    float sum = block_tree(p, sm_partial_expsum(r, mx, C, t, T), tree_add());
    float logsum = logf(sum);
    for (int c = t; c < C; c += T) o[c] = log_out ? sm_logprob(r[c], mx, logsum) : sm_prob(r[c], mx, sum);
}

/* Each thread's list lives in shared memory (T x k entries: 32 KiB at k = 16, 64 KiB at 32: the
 * launch asks for it dynamically); the tree merges list i + w into list i. */
__global__ static void k_topk(float *vals, int *idx, const float *x, int C, int k, int log_probs) {
    extern __shared__ unsigned char smem[];
    float *sv = (float *)smem;
    int *si = (int *)(sv + T * k);
    int *sn = si + T * k;
    __shared__ float p[T];
    const float *r = x + (long)blockIdx.x * C;
    int t = threadIdx.x;
    topk_partial(sv + t * k, si + t * k, &sn[t], r, C, k, t, T);
    __syncthreads();
    for (int w = T / 2; w > 0; w >>= 1) {
        if (t < w) topk_merge(sv + t * k, si + t * k, &sn[t], sv + (t + w) * k, si + (t + w) * k, sn[t + w], k);
        __syncthreads();
    }
    float mx = 0, logsum = 0;
    if (log_probs) {
        mx = block_tree(p, sm_partial_max(r, C, t, T), tree_max());
        logsum = logf(block_tree(p, sm_partial_expsum(r, mx, C, t, T), tree_add()));
    }
    for (int j = t; j < k; j += T) {
        int ok = j < sn[0];
        idx[(long)blockIdx.x * k + j] = ok ? si[j] : -1;
        float v = ok ? sv[j] : -INFINITY;
        vals[(long)blockIdx.x * k + j] = log_probs && ok ? sm_logprob(v, mx, logsum) : v;
    }
}

/* One block per (query row, head): the scores in shared memory, each thread whole scores
 * (j = t, t + T, ...), the softmax by the tree, then each thread whole output elements (d = t,
 * t + T, ...: a head of 64 uses 64 threads here; splitting the keys is for later). */
__global__ static void k_attention(float *out, float *probs, const float *q, const float *K, const float *V,
                                   const int *kv, const int *len, long row_ld, long ld, int H, int dh, int max_len,
                                   float scale) {
    extern __shared__ float sc[];
    __shared__ float p[T];
    int r = blockIdx.x / H, h = blockIdx.x % H, t = threadIdx.x;
    int n = len[r] < max_len ? len[r] : max_len; /* never past the shared scores */
    long base = (long)(kv ? kv[r] : r) * row_ld + (long)h * dh;
    const float *qr = q + ((long)r * H + h) * dh;
    float *o = out + ((long)r * H + h) * dh;
    if (n <= 0) {
        for (int d = t; d < dh; d += T) o[d] = 0.0f;
        return;
    }
    for (int j = t; j < n; j += T) sc[j] = att_score(qr, K + base + (long)j * ld, dh, scale);
    __syncthreads();
    float mx = block_tree(p, sm_partial_max(sc, n, t, T), tree_max());
    float sum = block_tree(p, sm_partial_expsum(sc, mx, n, t, T), tree_add());
    for (int j = t; j < n; j += T) sc[j] = sm_prob(sc[j], mx, sum);
    __syncthreads();
    for (int d = t; d < dh; d += T) o[d] = att_out(sc, V + base, ld, n, d);
    if (probs)
        for (int j = t; j < n; j += T) probs[((long)r * H + h) * max_len + j] = sc[j];
}

__global__ static void k_embed(float *out, const float *emb, const int *ids, float scale, const float *pos,
                               const int *pos_ids, int C) {
    const float *e = emb + (long)ids[blockIdx.x] * C;
    const float *q = pos ? pos + (long)pos_ids[blockIdx.x] * C : NULL;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        out[(long)blockIdx.x * C + c] = embed_out(e[c], scale, q ? q[c] : 0.0f);
}

__global__ static void k_gather(float *dst, const float *src, const int *rows, int C) {
    const float *s = src + (long)rows[blockIdx.x] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dst[(long)blockIdx.x * C + c] = s[c];
}

__global__ static void k_dequant(float *out, const int32_t *acc, const float *sa, const float *sw, const float *bias,
                                 int N) {
    long m = blockIdx.x;
    for (int n = threadIdx.x; n < N; n += blockDim.x)
        out[m * N + n] = dequant_out(acc[m * N + n], sa[m], sw[n], bias ? bias[n] : 0.0f);
}

static int rows_ok(int M, int C, const char *fn) {
    if (M < 0 || C < 1) return fail("%s: M must be >= 0 and C >= 1", fn);
    return 0;
}

extern "C" int tern_cuda_layernorm(float *out, const float *x, const float *gamma, const float *beta, int M, int C,
                                   float eps, void *stream) {
    if (rows_ok(M, C, "tern_cuda_layernorm")) return -1;
    if (M == 0) return 0;
    k_layernorm<<<M, T, 0, (cudaStream_t)stream>>>(out, x, gamma, beta, C, eps);
    return launched("tern_cuda_layernorm");
}

extern "C" int tern_cuda_softmax(float *out, const float *x, int M, int C, int log_out, void *stream) {
    if (rows_ok(M, C, "tern_cuda_softmax")) return -1;
    if (M == 0) return 0;
    k_softmax<<<M, T, 0, (cudaStream_t)stream>>>(out, x, C, log_out);
    return launched("tern_cuda_softmax");
}

extern "C" int tern_cuda_topk(float *vals, int *idx, const float *x, int M, int C, int k, int log_probs,
                              void *stream) {
    if (rows_ok(M, C, "tern_cuda_topk")) return -1;
    if (k < 1 || k > ROW_TOPK_MAX || k > C) return fail("%s: k must be in 1..32 and <= C", "tern_cuda_topk");
    if (M == 0) return 0;
    size_t shm = (size_t)T * k * (sizeof(float) + sizeof(int)) + T * sizeof(int);
    static __thread int raised_for = 0;
    if (shm > 48 * 1024 && raised_for < (int)shm) { /* above the default per-block limit: opt in */
        if (cudaFuncSetAttribute(k_topk, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm) != cudaSuccess)
            return launched("tern_cuda_topk (shared memory)");
        raised_for = (int)shm;
    }
    k_topk<<<M, T, shm, (cudaStream_t)stream>>>(vals, idx, x, C, k, log_probs);
    return launched("tern_cuda_topk");
}

extern "C" int tern_cuda_attention(float *out, float *probs, const float *q, const float *K, const float *V,
                                   const int *kv, const int *len, long row_ld, long ld, int R, int H, int dh,
                                   int max_len, float scale, void *stream) {
    if (R < 0 || H < 1 || dh < 1) return fail("%s: R must be >= 0, H and dh >= 1", "tern_cuda_attention");
    if (max_len < 1 || max_len > ROW_ATT_MAX) return fail("%s: max_len must be in 1..4096", "tern_cuda_attention");
    if (R == 0) return 0;
    k_attention<<<R * H, T, (size_t)max_len * sizeof(float), (cudaStream_t)stream>>>(out, probs, q, K, V, kv, len,
                                                                                      row_ld, ld, H, dh, max_len,
                                                                                      scale);
    return launched("tern_cuda_attention");
}

extern "C" int tern_cuda_embed(float *out, const float *emb, const int *ids, float scale, const float *pos,
                               const int *pos_ids, int M, int C, void *stream) {
    if (rows_ok(M, C, "tern_cuda_embed")) return -1;
    if (M == 0) return 0;
    k_embed<<<M, 128, 0, (cudaStream_t)stream>>>(out, emb, ids, scale, pos, pos_ids, C);
    return launched("tern_cuda_embed");
}

extern "C" int tern_cuda_gather_rows(float *dst, const float *src, const int *rows, int n, int C, void *stream) {
    if (rows_ok(n, C, "tern_cuda_gather_rows")) return -1;
    if (n == 0) return 0;
    k_gather<<<n, 128, 0, (cudaStream_t)stream>>>(dst, src, rows, C);
    return launched("tern_cuda_gather_rows");
}

extern "C" int tern_cuda_dequant(float *out, const int32_t *acc, const float *sa, const float *sw, const float *bias,
                                 int M, int N, void *stream) {
    if (rows_ok(M, N, "tern_cuda_dequant")) return -1;
    if (M == 0) return 0;
    k_dequant<<<M, 128, 0, (cudaStream_t)stream>>>(out, acc, sa, sw, bias, N);
    return launched("tern_cuda_dequant");
}
