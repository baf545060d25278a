/*
 * kernels.h — CPU compute kernels.
 *
 * Legend of dimension letters: M rows of activations (batch × time flattened), N output features,
 * K input features, C channels, H heads, T/S target/source lengths, V vocabulary.
 * All matrices are row-major float32 unless stated otherwise. Weights are stored [N, K]
 * (out, in), as CTranslate2 and PyTorch store them.
 *
 * Every kernel has a scalar reference in kernels_ref.c (the specification, names ending in _ref);
 * the fast versions are tested against them in tests/c/test_kernels.c.
 * No kernel allocates: callers pass workspace.
 */
#ifndef TERN_KERNELS_H
#define TERN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------ GEMM (oneDNN / OpenBLAS) */

/* C[M,N] = alpha * op(A) · op(B) + beta * C, row-major, op(X) = X or X^T (trans != 0).
 * lda/ldb/ldc are the row strides of A, B, C as stored. */
void gemm_f32(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);

/* The same product for small shapes (a few dozen rows and columns: training attention's per-head
 * products), in Tern's register tiles without a library call's fixed cost (AVX2 + FMA builds; else,
 * or for transB with K > 512, gemm_f32). Float sums in order of k; counted by gemm_count_flops. */
void gemm_f32_small(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc);

/* Batched: for b in [0, batch): the same gemm on A + b*strideA, B + b*strideB, C + b*strideC. */
void gemm_f32_batched(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                      int lda, size_t strideA, const float *B, int ldb, size_t strideB, float beta,
                      float *C, int ldc, size_t strideC, int batch);

/* Benchmarks: gemm_count_flops(1) zeroes a process-wide counter and starts adding 2·M·N·K for every
 * gemm_f32 / gemm_f32_batched product (0 stops); gemm_flops_counted() reads it. */
void gemm_count_flops(int on);
unsigned long long gemm_flops_counted(void);

/* ------------------------------------------------------------ linear layers */

typedef enum { WEIGHT_F32 = 0, WEIGHT_S8 = 1 } weight_kind_t;

/* A linear layer's weight as run: float32 [N, K], or int8 [N, K] with per-row scales
 * (q = round(w * scale), scale = 127 / max|row|, as CTranslate2 stores them). */
typedef struct {
    weight_kind_t kind;
    int N, K;
    const float *w;      /* (N, K) float32, kind == WEIGHT_F32 */
    const int8_t *q;     /* (N, K) int8, kind == WEIGHT_S8 */
    const float *scale;  /* (N) per-row scale, kind == WEIGHT_S8 */
    const int32_t *comp; /* (N) compensation for the u8s8s32 GEMM (see linear_prepare_s8), or NULL */
    const float *bias;   /* (N) or NULL */
    int q_has_min;       /* q holds a -128 (set with comp by linear_prepare; computed per call without) */
} linear_t;

/* Fills comp[n] = -128 * sum_k q[n,k]: with activations shifted to u8 (a + 128), the int32
 * result of u8 · s8 plus comp equals the signed s8 · s8 product exactly. */
void linear_prepare_s8(int32_t *comp, const int8_t *q, int N, int K);
/* Prepares an int8 layer once, at load: lin->comp = comp (N int32, filled), lin->q_has_min. */
void linear_prepare(linear_t *lin, int32_t *comp);
/* Which int8 GEMM linear_forward runs on this CPU under the ISA caps: oneDNN's u8s8s32 where it is
 * exact (AVX512_VNNI), else Tern's exact AVX2 kernel (gemm_s8.h). */
const char *linear_int8_backend_name(void);
/* Which kernel runs the int8 layers packed at load (linear_pack_s8): "Tern VNNI (gemm_s8v)",
 * "oneDNN matmul (VNNI)" (TERN_INT8_PACKED=onednn) or "Tern AVX2 int16 (gemm_s8p)". */
const char *linear_int8_packed_kernel_name(void);

/* Bytes of workspace linear_forward needs for M rows (0 for float32 weights). */
size_t linear_workspace_size(const linear_t *lin, int M);

/* out[M, N] = inp[M, K] · W^T + bias. int8 weights: each row of inp is quantized to int8 with its
 * own scale (127 / max|row|, round to nearest), multiplied in int32 and dequantized with the bias
 * fused in: out = acc / (scale_a[m] * scale_w[n]) + bias[n]. ws: linear_workspace_size() bytes,
 * 64-byte aligned. */
void linear_forward(float *out, const float *inp, const linear_t *lin, int M, void *ws);

/* int8 weights packed once: for oneDNN's matmul kernel (gemm_packed.h) where the int8 GEMM is
 * oneDNN's (AVX512_VNNI), else for Tern's exact AVX2 int16 kernel (gemm_s8.h, gemm_s8p_*; any
 * shape with K <= GEMM_S8_MAX_K): bytes of the packed form of lin->q (0: not here, for this shape, or
 * lin has no q or no comp -- linear_prepare first), packing into buf (64-byte aligned; read-only
 * after, shareable by threads; lin->q may be freed after), and linear_forward on it: the same
 * outputs as linear_forward on lin->q, bit for bit (lin->q is not read, lin->comp, scale, bias
 * are). ws: linear_workspace_size(lin, M) bytes. Returns 0, or -1 (out untouched) when no kernel
 * could be made for M (out of memory). */
/* 1 where the packed int8 layers run on Tern's own kernels (gemm_s8v with VNNI, gemm_s8p without:
 * their packed form is cheap to make, e.g. once per batch for a vocabulary-restricted projection,
 * and its rows can be read back, linear_packed_row_s8), 0 where they run on oneDNN's matmul. */
int linear_int8_packs_own(void);
/* Elements [k0, k1) of weight row n of an int8 weight packed by linear_pack_s8 where
 * linear_int8_packs_own() (Tern's layouts: gemm_s8v, gemm_s8p); -1 for oneDNN's layout or out of
 * range. A tied embedding reads its rows this way once the output projection is packed. */
int linear_packed_row_s8(const void *pk, int n, int k0, int k1, int8_t *out);
size_t linear_packed_size_s8(const linear_t *lin);
int linear_pack_s8(void *buf, const linear_t *lin);
int linear_forward_packed_s8(float *out, const float *inp, const linear_t *lin, const void *pk, int M, void *ws);
/* The same with relu != 0: then max(out, 0) fused into the dequantization (the bits of
 * activation_forward(out, ., ACT_RELU) after linear_forward_packed_s8). Where the int8 GEMM is
 * oneDNN's, its int32 sums are written into out (dequantized in place): on -1 out may then hold
 * partial sums instead of being untouched. */
/* The activation rows as int8 inference quantizes them (per row: scale = 127 / max|x|, u8 =
 * nearbyint(x * scale + 128) clamped to [0, 255], each step a float operation as the kernels'), given
 * back dequantized: out = (u8 - 128) / scale. Training's fake quantization of the activations
 * (tern train --qat int8-act); out may not alias x. */
void fake_quantize_rows_act(float *out, const float *x, int M, int K);

int linear_forward_packed_s8_act(float *out, const float *inp, const linear_t *lin, const void *pk, int M, void *ws,
                                 int relu);

/* Quantization helpers (exposed for tests and for loading float weights as int8). */
/* Per-row symmetric int8: scale[m] = 127 / max|x[m,:]| (1 when the row is all zero),
 * q = round-half-to-even(float(x * scale)) clamped to [-127, 127] -- what CTranslate2 does both
 * at conversion (numpy.rint in specs/model_spec.py) and at load time (nearbyint in quantize_s8);
 * max|x| is clamped below at 127/FLT_MAX as model_spec.py does, so the scale stays finite.
 * NaNs do not count in max|x| and quantize to -127 (as do infinities, whose scale is 0). */
void quantize_rows_s8(int8_t *q, float *scale, const float *x, int M, int K);

/* ------------------------------------------------------------ elementwise and row ops */

/* LayerNorm over the last dimension: out = (x - mean) / sqrt(var + eps) * gamma + beta.
 * mean/rstd (M) may be NULL; when given they are saved for the backward pass. out may alias inp. */
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *gamma,
                       const float *beta, int M, int C, float eps);

/* Row-wise softmax and log-softmax over C columns (numerically stable). out may alias inp. */
void softmax_forward(float *out, const float *inp, int M, int C);
void log_softmax_forward(float *out, const float *inp, int M, int C);
/* What log_softmax_forward subtracts, without writing the row: max_value[m] and lse[m] such that
 * log_softmax(x)[m, c] == (x[m, c] - max_value[m]) - lse[m] bit for bit (max_value -inf: the row
 * is all -inf, lse 0). Lets a search scan log-probabilities without storing them. */
void log_softmax_stats(float *max_value, float *lse, const float *inp, int M, int C);
/* The sum of exp(x - mx) over n entries (mx = max(x)) that the softmaxes take, in double, with the
 * exps written to y when y != NULL: wide = 0 the AVX2 body, 1 the AVX-512 one (what the softmaxes
 * run where AVX-512 is allowed; the same bits). For tests/c/test_kernels.c. */
double row_sum_exp_width(float *y, const float *x, int n, float mx, int wide);
/* softmax_forward's probabilities (the same values), plus per row lse[m] = log(sum_c exp(x[m, c]))
 * and sum_in[m] = sum_c x[m, c], both in double, in three passes over the row (the training
 * loss: label-smoothed cross-entropy needs log p(y) = x[y] - lse and sum_c log p = sum_in - C lse).
 * out may alias inp. */
void softmax_lse_forward(float *out, double *lse, double *sum_in, const float *inp, int M, int C);
/* Softmax of rows where only the first len[m] columns count (the rest get probability 0). */
void softmax_masked_forward(float *out, const float *inp, const int *len, int M, int C);

typedef enum {
    ACT_RELU = 0,        /* max(x, 0) */
    ACT_GELU_TANH = 1,   /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    ACT_SWISH = 2,       /* x * sigmoid(x) */
    ACT_GELU = 3,        /* 0.5 x (1 + erf(x / sqrt(2))) */
    ACT_GELU_SIGMOID = 4,/* x * sigmoid(1.702 x) */
    ACT_TANH = 5
} activation_t;          /* numbering equals CTranslate2's common_spec.Activation */

/* In place over n values. */
void activation_forward(float *x, size_t n, activation_t act);

/* y[i] += x[i]; y[i] *= a; y[i] = x[i] * a + y[i]. */
void add_inplace(float *y, const float *x, size_t n);
void scale_inplace(float *y, float a, size_t n);
void axpy(float *y, float a, const float *x, size_t n);
/* y[i] = log(exp(y[i]) + exp(x[i] + c)) (x[i] + c rounded to float): the log of a sum of
 * probabilities given as log-probabilities (an ensemble's prob-mean, c = log w). -inf entries
 * (probability 0) are exact: log(exp(y) + 0) = y; a NaN in y or x + c gives NaN. Within
 * 1e-7 + 1.2e-7 |result| of the exact value (tests/c/test_kernels.c). Runs the AVX-512 version where
 * cpu_isa_effective() allows it, else AVX2; both give the same bits. */
void logaddexp_inplace(float *y, const float *x, float c, size_t n);
/* The two versions, for tests (the AVX-512 one only where cpu_isa_detected() >= AVX512_CORE). */
void logaddexp_inplace_avx2(float *y, const float *x, float c, size_t n);
void logaddexp_inplace_avx512(float *y, const float *x, float c, size_t n);
/* Adds bias (C) to every row of x (M, C). */
void add_bias_rows(float *x, const float *bias, int M, int C);

/* Index of the largest value of each row (first one on ties): out[m] for x (M, C). */
void argmax_rows(int *out, float *max_value, const float *x, int M, int C);

/* The k largest values of x[0..n) with their indices, sorted descending (ties: lower index first). */
void topk(float *values, int *indices, const float *x, int n, int k);
/* topk()'s step, for searches that pick their own candidates: inserts (v, i) into the descending
 * list values/indices of length *len (capacity k; a full list drops its last entry); entries come
 * in increasing index order, so an equal value never goes before an existing one. */
static inline void topk_insert(float *values, int *indices, int *len, int k, float v, int i) {
    int j = *len < k ? (*len)++ : k - 1;
    while (j > 0 && values[j - 1] < v) {
        values[j] = values[j - 1];
        indices[j] = indices[j - 1];
        j--;
    }
    values[j] = v;
    indices[j] = i;
}

/* ------------------------------------------------------------ conversions */

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);        /* round to nearest even */
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);        /* round to nearest even */
void half_to_float_array(float *out, const uint16_t *in, size_t n);
void bf16_to_float_array(float *out, const uint16_t *in, size_t n);

/* ------------------------------------------------------------ threads */

/* Intra-op threads used by the GEMM library on the calling thread (OpenMP/OpenBLAS). */
void kernels_set_num_threads(int n);

/* ------------------------------------------------------------ scalar references */

void gemm_f32_ref(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc);
void linear_forward_ref(float *out, const float *inp, const linear_t *lin, int M);
void layernorm_forward_ref(float *out, const float *inp, const float *gamma, const float *beta,
                           int M, int C, float eps);
void softmax_forward_ref(float *out, const float *inp, int M, int C);
void log_softmax_forward_ref(float *out, const float *inp, int M, int C);
void activation_forward_ref(float *x, size_t n, activation_t act);
/* in double: max + log1p(exp(min - max)), rounded once to float */
void logaddexp_inplace_ref(float *y, const float *x, float c, size_t n);

/* ------------------------------------------------------------ additions (kernels engineer) */

/* Threads set by kernels_set_num_threads() on the calling thread (OpenMP's default when never set). */
int kernels_get_num_threads(void);
/* Items per chunk when n items are shared by `threads` threads that take chunks in turn
 * (schedule(dynamic, ...)), about per_thread chunks each, at least 1 item: a thread slowed by
 * something else on its core takes fewer chunks, the others more (a static split waits for the
 * slowest). */
static inline int kernels_chunk(int n, int threads, int per_thread) {
    int c = n / (threads * per_thread);
    return c > 1 ? c : 1;
}

/* "oneDNN" or "OpenBLAS": the library gemm_f32 uses for this shape on the calling thread. */
const char *gemm_f32_backend_name(int transA, int transB, int M, int N, int K);

/* Activation quantization exactly as CTranslate2 4.x does on CPU with a oneDNN/MKL int8 backend
 * (src/cpu/kernels.cc quantize_s8 with shift_to_uint8 = round_before_cast = true):
 * scale[m] = 127 / max|x[m,:]| (1 for an all-zero row), q = nearbyint(float(x * scale) + 128)
 * (round half to even, two float roundings, no fused multiply-add), i.e. the int8 value + 128.
 * NaNs do not count in max|x| and quantize to 0. */
void quantize_rows_u8(uint8_t *q, float *scale, const float *x, int M, int K);

/* Bytes of workspace a WEIGHT_S8 linear_forward needs, without a linear_t at hand. */
size_t linear_workspace_size_s8(int M, int N, int K, int have_comp);

/* Scalar references of the additions and of the kernels that had none (tests/c/test_kernels.c). */
void quantize_rows_s8_ref(int8_t *q, float *scale, const float *x, int M, int K);
void quantize_rows_u8_ref(uint8_t *q, float *scale, const float *x, int M, int K);
void softmax_masked_forward_ref(float *out, const float *inp, const int *len, int M, int C);
void argmax_rows_ref(int *out, float *max_value, const float *x, int M, int C);
void topk_ref(float *values, int *indices, const float *x, int n, int k);
float half_to_float_ref(uint16_t h);
uint16_t float_to_half_ref(float f);
float bf16_to_float_ref(uint16_t b);
uint16_t float_to_bf16_ref(float f);

#endif
