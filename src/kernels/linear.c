/* linear.c — linear layers: float32 (gemm + bias) and int8 the way CTranslate2 4.x runs them on
 * CPU with oneDNN: activations quantized per row and shifted to u8, dnnl_gemm_u8s8s32 with a
 * per-column compensation, int32 result dequantized with the bias fused in. docs/kernels.md cites
 * the CTranslate2 sources this reproduces.
 *
 * Legend: M rows of activations, N output features, K input features. */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <string.h>

#include "kernels/cpu_isa.h"
#include "kernels/extcheck.h"
#include "kernels/gemm_packed.h"
#include "kernels/gemm_s8.h"
#include "kernels/gemm_s8v.h"
#include "kernels/kernels.h"

#define ALIGN64(x) (((x) + 63) & ~(size_t)63)

/* ------------------------------------------------------------ quantization */

static float row_amax(const float *x, int K) {
    __m256 sign = _mm256_set1_ps(-0.0f), acc = _mm256_setzero_ps();
    int k = 0;
    /* max(|x|, acc): maxps returns its second operand when either is NaN, so NaNs are skipped
     * (as the scalar `a > amax` skips them) instead of poisoning a lane. */
    for (; k + 8 <= K; k += 8) acc = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)), acc);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    float amax = _mm_cvtss_f32(h);
    for (; k < K; k++) {
        float a = fabsf(x[k]);
        if (a > amax) amax = a;
    }
    return amax;
}

void quantize_rows_s8(int8_t *q, float *scale, const float *x, int M, int K) {
    for (int m = 0; m < M; m++) {
        const float *row = x + (size_t)m * K;
        int8_t *out = q + (size_t)m * K;
        float amax = row_amax(row, K);
        float s = 1.0f;
        if (amax != 0.0f) {
            if (amax < 127.0f / FLT_MAX) amax = 127.0f / FLT_MAX;
            s = 127.0f / amax;
        }
        scale[m] = s;
        __m256 vs = _mm256_set1_ps(s), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
        int k = 0;
        for (; k + 8 <= K; k += 8) {
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(row + k), vs);
            v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
            __m256i i32 = _mm256_cvtps_epi32(v);
            __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
            _mm_storel_epi64((__m128i *)(out + k), _mm_packs_epi16(i16, i16));
        }
        for (; k < K; k++) { /* as the vector body: max(r, -127) gives -127 for NaN, then min(., 127) */
            float r = nearbyintf(row[k] * s);
            r = r >= -127.0f ? r : -127.0f;
            out[k] = (int8_t)(r > 127.0f ? 127.0f : r);
        }
    }
}

/* CTranslate2's u8 activation quantization; flip = 0x80 stores the same byte minus 128 as int8 (the
 * signed value q = nearbyint(x * scale + 128) - 128, for the signed kernel). */
static void quantize_rows_shifted(uint8_t *q, float *scale, const float *x, int M, int K, uint8_t flip) {
    const __m128i vflip = _mm_set1_epi8((char)flip);
    for (int m = 0; m < M; m++) {
        const float *row = x + (size_t)m * K;
        uint8_t *out = q + (size_t)m * K;
        float amax = row_amax(row, K);
        float s = amax != 0.0f ? 127.0f / amax : 1.0f;
        scale[m] = s;
        __m256 vs = _mm256_set1_ps(s), shift = _mm256_set1_ps(128.0f);
        int k = 0;
        for (; k + 8 <= K; k += 8) {
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(row + k), vs);
            v = _mm256_add_ps(v, shift); /* separate add: no FMA, as CTranslate2 */
            v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m256i i32 = _mm256_cvtps_epi32(v);
            __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
            _mm_storel_epi64((__m128i *)(out + k), _mm_xor_si128(_mm_packus_epi16(i16, i16), vflip));
        }
        for (; k < K; k++) {
            float v = row[k] * s;
            v = v + 128.0f;
            float r = nearbyintf(v); /* NaN -> 0, as the vector body's saturating packs give */
            out[k] = (uint8_t)(!(r >= 0.0f) ? 0.0f : r > 255.0f ? 255.0f : r) ^ flip;
        }
    }
}

/* The signed bytes (u - 128) of quantize_rows_shifted in rows of ld >= K bytes, the bytes past K
 * zeroed (Tern's VNNI kernel's activations, gemm_s8v_forward). */
static void quantize_rows_s8_ld(int8_t *q, size_t ld, float *scale, const float *x, int M, int K) {
    for (int m = 0; m < M; m++) {
        quantize_rows_shifted((uint8_t *)q + (size_t)m * ld, scale + m, x + (size_t)m * K, 1, K, 0x80);
        for (size_t k = (size_t)K; k < ld; k++) q[(size_t)m * ld + k] = 0;
    }
}

void fake_quantize_rows_act(float *out, const float *x, int M, int K) {
    for (int m = 0; m < M; m++) {
        const float *row = x + (size_t)m * K;
        float *o = out + (size_t)m * K;
        float amax = row_amax(row, K);
        float s = amax != 0.0f ? 127.0f / amax : 1.0f;
        for (int k = 0; k < K; k++) {
            float v = row[k] * s;
            v = v + 128.0f;
            float r = nearbyintf(v); /* NaN -> 0, as the saturating packs give */
            r = !(r >= 0.0f) ? 0.0f : r > 255.0f ? 255.0f : r;
            o[k] = (r - 128.0f) / s;
        }
    }
}

void quantize_rows_u8(uint8_t *q, float *scale, const float *x, int M, int K) {
    quantize_rows_shifted(q, scale, x, M, K, 0);
}

/* The same signed values (u - 128) as int16, rows of ld >= K elements, the elements past K zeroed
 * (the packed AVX2 kernel's activations, gemm_s8p_forward). Every step as quantize_rows_shifted:
 * packs_epi32 saturates to int16, then the clamp to [0, 255] is packus_epi16's. */
static void quantize_rows_s16(int16_t *q, size_t ld, float *scale, const float *x, int M, int K) {
    const __m128i zero = _mm_setzero_si128(), top = _mm_set1_epi16(255), shift16 = _mm_set1_epi16(128);
    for (int m = 0; m < M; m++) {
        const float *row = x + (size_t)m * K;
        int16_t *out = q + (size_t)m * ld;
        float amax = row_amax(row, K);
        float s = amax != 0.0f ? 127.0f / amax : 1.0f;
        scale[m] = s;
        __m256 vs = _mm256_set1_ps(s), shift = _mm256_set1_ps(128.0f);
        int k = 0;
        for (; k + 8 <= K; k += 8) {
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(row + k), vs);
            v = _mm256_add_ps(v, shift); /* separate add: no FMA, as CTranslate2 */
            v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m256i i32 = _mm256_cvtps_epi32(v);
            __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
            i16 = _mm_min_epi16(_mm_max_epi16(i16, zero), top);
            _mm_storeu_si128((__m128i *)(out + k), _mm_sub_epi16(i16, shift16));
        }
        for (; k < K; k++) {
            float v = row[k] * s;
            v = v + 128.0f;
            float r = nearbyintf(v); /* NaN -> 0, as the vector body's saturating packs give */
            out[k] = (int16_t)((int)(!(r >= 0.0f) ? 0.0f : r > 255.0f ? 255.0f : r) - 128);
        }
        for (; (size_t)k < ld; k++) out[k] = 0;
    }
}

void linear_prepare_s8(int32_t *comp, const int8_t *q, int N, int K) {
    for (int n = 0; n < N; n++) {
        const int8_t *r = q + (size_t)n * K;
        int32_t sum = 0;
        for (int k = 0; k < K; k++) sum += r[k];
        comp[n] = -128 * sum;
    }
}

void linear_prepare(linear_t *lin, int32_t *comp) {
    linear_prepare_s8(comp, lin->q, lin->N, lin->K);
    lin->comp = comp;
    lin->q_has_min = gemm_s8_has_min(lin->q, (size_t)lin->N * lin->K);
}

/* ------------------------------------------------------------ int8 GEMM backend */

/* oneDNN's u8*s8 GEMM is exact only where it multiplies with VNNI's vpdpbusd (32-bit sums); without
 * VNNI its vpmaddubsw pair sums saturate at 16 bits (gemm_s8.c). It is used only when Tern's
 * dispatch (TERN_MAX_CPU_ISA) and oneDNN's (ONEDNN_MAX_CPU_ISA) both allow AVX512_VNNI and a probe
 * whose exact result saturates without it comes back exact; else gemm_s8s8s32 runs. */
static int g_int8_onednn;
/* With VNNI, the packed layers (a decoder step's few rows) run on Tern's kernel (gemm_s8v.c: each
 * weight panel streamed once for all the rows, the next ones prefetched), the same int32 sums as
 * oneDNN's matmul; TERN_INT8_PACKED=onednn keeps oneDNN's (for measurements). */
static int g_int8_s8v;
static pthread_once_t int8_once = PTHREAD_ONCE_INIT;

static int onednn_int8_probe(void) {
    enum { K = 64 };
    uint8_t a[2 * K];
    int8_t b[3 * K];
    int32_t c[6], comp[3] = {0, 0, 0};
    for (int k = 0; k < 2 * K; k++) a[k] = 255;
    for (int k = 0; k < 3 * K; k++) b[k] = k < 2 * K ? 127 : -127;
    if (dnnl_gemm_u8s8s32('N', 'T', 'F', 2, 3, K, 1.0f, a, K, 0, b, K, 0, 0.0f, c, 3, comp) != dnnl_success) return 0;
    for (int i = 0; i < 6; i++)
        if (c[i] != (i % 3 == 2 ? -1 : 1) * 255 * 127 * K) return 0;
    return 1;
}

static void int8_init(void) {
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), vnni = (unsigned)dnnl_cpu_isa_avx512_core_vnni;
    g_int8_onednn = cpu_isa_effective() >= CPU_ISA_AVX512_CORE_VNNI && (isa & vnni) == vnni && onednn_int8_probe();
    const char *pk = getenv("TERN_INT8_PACKED");
    g_int8_s8v = g_int8_onednn && !(pk && !strcmp(pk, "onednn"));
}

const char *linear_int8_packed_kernel_name(void) {
    pthread_once(&int8_once, int8_init);
    return g_int8_s8v ? "Tern VNNI (gemm_s8v)" : g_int8_onednn ? "oneDNN matmul (VNNI)" : "Tern AVX2 int16 (gemm_s8p)";
}

const char *linear_int8_backend_name(void) {
    pthread_once(&int8_once, int8_init);
    return g_int8_onednn ? "oneDNN u8s8s32 (AVX512_VNNI)" : "Tern s8s8s32 (AVX2)";
}

/* ------------------------------------------------------------ linear */

/* Bytes of the activation part of the workspace: u8 rows (M, K), or where Tern's kernels run, room
 * for int16 rows of gemm_s8p_a_stride(K) elements too (the packed kernel's). */
static size_t act_bytes(int M, int K) {
    pthread_once(&int8_once, int8_init);
    size_t u8 = (size_t)M * K, s16 = (size_t)M * gemm_s8p_a_stride(K) * sizeof(int16_t);
    if (g_int8_s8v) return (size_t)M * gemm_s8v_a_stride(K);
    return g_int8_onednn || s16 < u8 ? u8 : s16;
}

/* Workspace layout (each part 64-byte aligned): activations (act_bytes: u8 (M, K) or int16) |
 * scale_a (M) | int32 acc (M, N) | compensation (N), the last only when the linear_t has none. */
size_t linear_workspace_size_s8(int M, int N, int K, int have_comp) {
    if (M <= 0) return 0;
    return ALIGN64(act_bytes(M, K)) + ALIGN64((size_t)M * sizeof(float)) +
           ALIGN64((size_t)M * N * sizeof(int32_t)) + (have_comp ? 0 : ALIGN64((size_t)N * sizeof(int32_t)));
}

size_t linear_workspace_size(const linear_t *lin, int M) {
    if (lin->kind != WEIGHT_S8) return 0;
    return linear_workspace_size_s8(M, lin->N, lin->K, lin->comp != NULL);
}

/* out[m, :] = acc[m, :] * (1 / scale_a[m]) / scale_w + bias, in CTranslate2's order of operations
 * (src/cpu/kernels.cc dequantize_gemm_output_row): three separately rounded float operations.
 * comp (N) or NULL: added to acc first, in int32 (exact: the packed path's u8 shift correction).
 * relu: then max(v, 0), the instruction activation_forward's ReLU runs (so the same bits).
 * out may be acc itself (each element read before it is written). Large outputs (a vocabulary
 * projection) are split by rows over the translator's threads. */
static void dequantize_rows(float *out, const int32_t *acc, const int32_t *comp, const float *scale_a,
                            const float *scale_w, const float *bias, int M, int N, int relu) {
    int nt = kernels_get_num_threads();
    if (nt > M) nt = M;
    if ((size_t)M * N < ((size_t)1 << 16)) nt = 1;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int m = 0; m < M; m++) {
        const int32_t *c = acc + (size_t)m * N;
        float *y = out + (size_t)m * N;
        float r = 1.0f / scale_a[m];
        __m256 vr = _mm256_set1_ps(r);
        int n = 0;
        for (; n + 8 <= N; n += 8) {
            __m256i iv = _mm256_loadu_si256((const __m256i *)(c + n));
            if (comp) iv = _mm256_add_epi32(iv, _mm256_loadu_si256((const __m256i *)(comp + n)));
            __m256 v = _mm256_cvtepi32_ps(iv);
            v = _mm256_mul_ps(v, vr);
            v = _mm256_div_ps(v, _mm256_loadu_ps(scale_w + n));
            if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + n));
            if (relu) v = _mm256_max_ps(v, _mm256_setzero_ps());
            _mm256_storeu_ps(y + n, v);
        }
        for (; n < N; n++) {
            float v = (float)(comp ? c[n] + comp[n] : c[n]) * r;
            v = v / scale_w[n];
            if (bias) v = v + bias[n];
            if (relu) v = v > 0.0f ? v : 0.0f; /* maxps(v, 0): 0 for NaN and for -0 */
            y[n] = v;
        }
    }
}

void linear_forward(float *out, const float *inp, const linear_t *lin, int M, void *ws) {
    int N = lin->N, K = lin->K;
    if (M <= 0 || N <= 0) return;
    if (lin->kind == WEIGHT_F32) {
        gemm_f32(0, 1, M, N, K, 1.0f, inp, K, lin->w, K, 0.0f, out, N);
        if (lin->bias) add_bias_rows(out, lin->bias, M, N);
        return;
    }
    pthread_once(&int8_once, int8_init);
    uint8_t *qa = ws;
    float *scale_a = (float *)((char *)ws + ALIGN64(act_bytes(M, K)));
    int32_t *acc = (int32_t *)((char *)scale_a + ALIGN64((size_t)M * sizeof(float)));
    if (K == 0) {
        quantize_rows_u8(qa, scale_a, inp, M, K);
        memset(acc, 0, (size_t)M * N * sizeof(int32_t));
    } else if (!g_int8_onednn) {
        /* the same activation bytes as CTranslate2's, stored as signed values (u8 - 128), exact product */
        quantize_rows_shifted(qa, scale_a, inp, M, K, 0x80);
        int has_min = lin->comp ? lin->q_has_min : gemm_s8_has_min(lin->q, (size_t)N * K);
        gemm_s8s8s32(M, N, K, (const int8_t *)qa, K, lin->q, K, acc, N, has_min);
    } else {
        const int32_t *comp = lin->comp;
        if (!comp) {
            int32_t *c = (int32_t *)((char *)acc + ALIGN64((size_t)M * N * sizeof(int32_t)));
            linear_prepare_s8(c, lin->q, N, K);
            comp = c;
        }
        quantize_rows_u8(qa, scale_a, inp, M, K);
        /* acc = (qa) · q^T + comp[n]: 'R' applies comp per column n of the row-major C. */
        extcheck_2d("int8 linear", "A (u8)", qa, M, K, K, 1);
        extcheck_2d("int8 linear", "B (s8)", lin->q, N, K, K, 1);
        extcheck_2d("int8 linear", "C (s32)", acc, M, N, N, sizeof(int32_t));
        extcheck_2d("int8 linear", "compensation", comp, 1, N, N, sizeof(int32_t));
        dnnl_gemm_u8s8s32('N', 'T', 'R', M, N, K, 1.0f, qa, K, 0, lin->q, K, 0, 0.0f, acc, N, comp);
    }
    dequantize_rows(out, acc, NULL, scale_a, lin->scale, lin->bias, M, N, 0);
}

/* ------------------------------------------------------------ packed int8 weights */

int linear_packed_row_s8(const void *pk, int n, int k0, int k1, int8_t *out) {
    if (gemm_s8v_row(pk, n, k0, k1, out) == 0) return 0;
    return gemm_s8p_row(pk, n, k0, k1, out);
}

int linear_int8_packs_own(void) {
    pthread_once(&int8_once, int8_init);
    return !g_int8_onednn || g_int8_s8v;
}

size_t linear_packed_size_s8(const linear_t *lin) {
    if (lin->kind != WEIGHT_S8 || !lin->q || !lin->comp || lin->N <= 0 || lin->K <= 0) return 0;
    pthread_once(&int8_once, int8_init);
    if (g_int8_s8v) return gemm_s8v_size(lin->N, lin->K);
    return g_int8_onednn ? gemm_packed_size_s8(lin->N, lin->K) : gemm_s8p_size(lin->N, lin->K);
}

int linear_pack_s8(void *buf, const linear_t *lin) {
    if (!linear_packed_size_s8(lin)) return -1;
    extcheck_2d("linear_pack_s8", "weights", lin->q, lin->N, lin->K, lin->K, 1);
    if (g_int8_s8v) return gemm_s8v_pack(buf, lin->q, lin->N, lin->K);
    return g_int8_onednn ? gemm_pack_s8(buf, lin->q, lin->N, lin->K) : gemm_s8p_pack(buf, lin->q, lin->N, lin->K);
}

/* As linear_forward, with the product on the packed weights: the same activation values, the same
 * int32 sums, the same dequantization. oneDNN (VNNI): the u8 rows, the u8 · s8 sum plus comp (both
 * exact in int32; comp added in dequantize_rows instead of inside the GEMM call). Tern's AVX2
 * kernel: the signed rows u - 128 as int16, the exact signed sum (no compensation), as
 * gemm_s8s8s32 gives. */
int linear_forward_packed_s8(float *out, const float *inp, const linear_t *lin, const void *pk, int M, void *ws) {
    return linear_forward_packed_s8_act(out, inp, lin, pk, M, ws, 0);
}

/* The int32 sums of oneDNN's kernel go into out itself (as int32) and are dequantized in place:
 * for a vocabulary projection (M x 32000) that is one buffer read and written instead of a second
 * one of the same size read, and out read for ownership, on top (the dequantization was bound by
 * those memory passes). Where the GEMM fails after a first chunk, out holds partial sums (the
 * caller's fallback rewrites it). */
int linear_forward_packed_s8_act(float *out, const float *inp, const linear_t *lin, const void *pk, int M, void *ws,
                                 int relu) {
    int N = lin->N, K = lin->K;
    if (M <= 0 || N <= 0) return 0;
    if (lin->kind != WEIGHT_S8 || !lin->comp) return -1;
    pthread_once(&int8_once, int8_init);
    uint8_t *qa = ws;
    float *scale_a = (float *)((char *)ws + ALIGN64(act_bytes(M, K)));
    /* the rows' quantization split over the threads for a large block (the encoder's tokens; a
     * decoder step's rows stay on one thread, as transformer.c's rows_team): rows are quantized
     * independently, the same bytes whatever the split */
    int nt = (size_t)M * K < ((size_t)1 << 17) ? 1 : kernels_get_num_threads();
    if (nt > M) nt = M;
    /* the activation rows each kernel reads: signed bytes (gemm_s8v), int16 (gemm_s8p), u8 (oneDNN) */
    enum { Q_S8, Q_S16, Q_U8 } qk = g_int8_s8v ? Q_S8 : !g_int8_onednn ? Q_S16 : Q_U8;
    int pn = N, pkk = K;
    if ((qk == Q_S8 && gemm_s8v_dims(pk, &pn, &pkk)) || (qk == Q_S16 && gemm_s8p_dims(pk, &pn, &pkk)) || pn != N ||
        pkk != K)
        return -1;
    size_t lda = qk == Q_S8 ? gemm_s8v_a_stride(K) : qk == Q_S16 ? gemm_s8p_a_stride(K) : (size_t)K;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int m0 = (int)((long)M * omp_get_thread_num() / omp_get_num_threads());
        int m1 = (int)((long)M * (omp_get_thread_num() + 1) / omp_get_num_threads());
        const float *x = inp + (size_t)m0 * K;
        if (qk == Q_S8) quantize_rows_s8_ld((int8_t *)ws + (size_t)m0 * lda, lda, scale_a + m0, x, m1 - m0, K);
        else if (qk == Q_S16) quantize_rows_s16((int16_t *)ws + (size_t)m0 * lda, lda, scale_a + m0, x, m1 - m0, K);
        else quantize_rows_u8(qa + (size_t)m0 * lda, scale_a + m0, x, m1 - m0, K);
    }
    if (qk == Q_S8) return gemm_s8v_forward_deq(out, (const int8_t *)ws, pk, M, scale_a, lin->scale, lin->bias, relu);
    if (qk == Q_S16) return gemm_s8p_forward_deq(out, (const int16_t *)ws, pk, M, scale_a, lin->scale, lin->bias, relu);
    int32_t *acc = (int32_t *)out;
    if (gemm_packed_forward_s8(acc, qa, pk, M)) return -1;
    extcheck_2d("int8 linear (packed)", "compensation", lin->comp, 1, N, N, sizeof(int32_t));
    dequantize_rows(out, acc, lin->comp, scale_a, lin->scale, lin->bias, M, N, relu);
    return 0;
}
