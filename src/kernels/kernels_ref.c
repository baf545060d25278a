/* kernels_ref.c — scalar reference kernels: the specification that the fast kernels in gemm.c,
 * linear.c and ops.c are tested against (tests/c/test_kernels.c). Written for clarity, not speed;
 * accumulations are done in double where that makes the reference closer to the exact result.
 *
 * Legend: M rows, N output features, K input features, C channels (row length). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

/* ------------------------------------------------------------ GEMM */

void gemm_f32_ref(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc) {
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            double acc = 0;
            for (int k = 0; k < K; k++) {
                double a = transA ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k];
                double b = transB ? B[(size_t)n * ldb + k] : B[(size_t)k * ldb + n];
                acc += a * b;
            }
            float *c = &C[(size_t)m * ldc + n];
            *c = (float)(alpha * acc + (beta == 0.0f ? 0.0 : (double)beta * *c));
        }
    }
}

/* ------------------------------------------------------------ int8 quantization */

/* max |x[i]| over a row. */
static float row_amax(const float *x, int K) {
    float amax = 0.0f;
    for (int k = 0; k < K; k++) {
        float a = fabsf(x[k]);
        if (a > amax) amax = a;
    }
    return amax;
}

void quantize_rows_s8_ref(int8_t *q, float *scale, const float *x, int M, int K) {
    for (int m = 0; m < M; m++) {
        const float *row = x + (size_t)m * K;
        float amax = row_amax(row, K);
        float s = 1.0f;
        if (amax != 0.0f) {
            /* CTranslate2's converter keeps the scale finite for tiny rows (model_spec.py). */
            if (amax < 127.0f / FLT_MAX) amax = 127.0f / FLT_MAX;
            s = 127.0f / amax;
        }
        scale[m] = s;
        for (int k = 0; k < K; k++) {
            float v = row[k] * s;         /* float32 product, as numpy's `value *= scale` */
            float r = nearbyintf(v);      /* half to even, as numpy.rint */
            if (r > 127.0f) r = 127.0f;
            if (!(r >= -127.0f)) r = -127.0f; /* also NaN (from NaN or inf * 0): -127 */
            q[(size_t)m * K + k] = (int8_t)r;
        }
    }
}

void quantize_rows_u8_ref(uint8_t *q, float *scale, const float *x, int M, int K) {
    for (int m = 0; m < M; m++) {
        const float *row = x + (size_t)m * K;
        float amax = row_amax(row, K);
        float s = amax != 0.0f ? 127.0f / amax : 1.0f;
        scale[m] = s;
        for (int k = 0; k < K; k++) {
            float v = row[k] * s;   /* rounded to float */
            v = v + 128.0f;         /* rounded to float again (no fused multiply-add) */
            float r = nearbyintf(v); /* half to even */
            if (!(r >= 0.0f)) r = 0.0f; /* also NaN: 0 */
            if (r > 255.0f) r = 255.0f;
            q[(size_t)m * K + k] = (uint8_t)r;
        }
    }
}

void linear_forward_ref(float *out, const float *inp, const linear_t *lin, int M) {
    int N = lin->N, K = lin->K;
    if (lin->kind == WEIGHT_F32) {
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double acc = 0;
                for (int k = 0; k < K; k++) acc += (double)inp[(size_t)m * K + k] * lin->w[(size_t)n * K + k];
                out[(size_t)m * N + n] = (float)acc + (lin->bias ? lin->bias[n] : 0.0f);
            }
        return;
    }
    /* int8: quantize the row as CTranslate2 does (u8-shifted), take the exact integer product of the
     * signed values, dequantize as CTranslate2 does: (acc * (1 / scale_a)) / scale_w + bias. */
    for (int m = 0; m < M; m++) {
        const float *row = inp + (size_t)m * K;
        float sa;
        float amax = row_amax(row, K);
        sa = amax != 0.0f ? 127.0f / amax : 1.0f;
        float rsa = 1.0f / sa;
        for (int n = 0; n < N; n++) {
            int64_t acc = 0;
            for (int k = 0; k < K; k++) {
                float v = row[k] * sa;
                v = v + 128.0f;
                float r = nearbyintf(v);
                if (!(r >= 0.0f)) r = 0.0f; /* also NaN */
                if (r > 255.0f) r = 255.0f;
                acc += (int64_t)((int)r - 128) * lin->q[(size_t)n * K + k];
            }
            float y = (float)(int32_t)acc * rsa;
            y = y / lin->scale[n];
            if (lin->bias) y = y + lin->bias[n];
            out[(size_t)m * N + n] = y;
        }
    }
}

/* ------------------------------------------------------------ row ops */

void layernorm_forward_ref(float *out, const float *inp, const float *gamma, const float *beta,
                           int M, int C, float eps) {
    for (int m = 0; m < M; m++) {
        const float *x = inp + (size_t)m * C;
        double mean = 0, var = 0;
        for (int c = 0; c < C; c++) mean += x[c];
        mean /= C;
        for (int c = 0; c < C; c++) var += (x[c] - mean) * (x[c] - mean);
        var /= C;
        double rstd = 1.0 / sqrt(var + eps);
        for (int c = 0; c < C; c++)
            out[(size_t)m * C + c] = (float)((x[c] - mean) * rstd * gamma[c] + beta[c]);
    }
}

/* Softmax over the first n entries of x into y (double accumulation). A row whose entries are all
 * -inf gets probabilities 0 (log-probabilities -inf). */
static void softmax_row_ref(float *y, const float *x, int n, int log_out) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) if (x[i] > mx) mx = x[i];
    if (mx == -INFINITY) {
        for (int i = 0; i < n; i++) y[i] = log_out ? -INFINITY : 0.0f;
        return;
    }
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    for (int i = 0; i < n; i++) {
        double d = (double)x[i] - mx;
        y[i] = log_out ? (float)(d - log(sum)) : (float)(exp(d) / sum);
    }
}

void softmax_forward_ref(float *out, const float *inp, int M, int C) {
    for (int m = 0; m < M; m++) softmax_row_ref(out + (size_t)m * C, inp + (size_t)m * C, C, 0);
}

void log_softmax_forward_ref(float *out, const float *inp, int M, int C) {
    for (int m = 0; m < M; m++) softmax_row_ref(out + (size_t)m * C, inp + (size_t)m * C, C, 1);
}

void softmax_masked_forward_ref(float *out, const float *inp, const int *len, int M, int C) {
    for (int m = 0; m < M; m++) {
        int n = len[m] < 0 ? 0 : len[m] > C ? C : len[m];
        softmax_row_ref(out + (size_t)m * C, inp + (size_t)m * C, n, 0);
        for (int c = n; c < C; c++) out[(size_t)m * C + c] = 0.0f;
    }
}

void activation_forward_ref(float *x, size_t n, activation_t act) {
    for (size_t i = 0; i < n; i++) {
        double v = x[i], y;
        switch (act) {
        case ACT_RELU: y = v > 0 ? v : 0; break;
        /* 0.5 v (1 + tanh(u)) written as v / (1 + exp(-2u)) and 0.5 v (1 + erf(z)) as 0.5 v erfc(-z):
         * the same functions without the cancellation of 1 + tanh / 1 + erf for negative v (which
         * left no correct digit below v = -6 even in double). */
        case ACT_GELU_TANH: y = v / (1 + exp(-2 * 0.7978845608028654 * (v + 0.044715 * v * v * v))); break;
        case ACT_SWISH: y = v / (1 + exp(-v)); break;
        case ACT_GELU: y = 0.5 * v * erfc(-v * 0.7071067811865476); break;
        case ACT_GELU_SIGMOID: y = v / (1 + exp(-1.702 * v)); break;
        case ACT_TANH: y = tanh(v); break;
        default: y = v; break;
        }
        x[i] = (float)y;
    }
}

void logaddexp_inplace_ref(float *y, const float *x, float c, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double a = y[i], b = (float)(x[i] + c); /* x + c rounded to float, as specified */
        double mx = a > b ? a : b, mn = a > b ? b : a;
        if (isnan(a) || isnan(b)) y[i] = NAN;
        else if (mn == -INFINITY) y[i] = (float)mx;
        else y[i] = (float)(mx + log1p(exp(mn - mx)));
    }
}

void argmax_rows_ref(int *out, float *max_value, const float *x, int M, int C) {
    for (int m = 0; m < M; m++) {
        const float *r = x + (size_t)m * C;
        int best = 0;
        for (int c = 1; c < C; c++) if (r[c] > r[best]) best = c;
        out[m] = best;
        if (max_value) max_value[m] = C > 0 ? r[best] : -INFINITY;
    }
}

void topk_ref(float *values, int *indices, const float *x, int n, int k) {
    /* Selection: k times, the best entry not yet taken (ties: lower index). O(n k). */
    if (k > n) k = n;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            int taken = 0;
            for (int t = 0; t < j; t++) if (indices[t] == i) { taken = 1; break; }
            if (taken) continue;
            if (best < 0 || x[i] > x[best]) best = i;
        }
        indices[j] = best;
        values[j] = x[best];
    }
}

/* ------------------------------------------------------------ conversions (bit arithmetic) */

float half_to_float_ref(uint16_t h) {
    int sign = h >> 15, e = (h >> 10) & 0x1f, mant = h & 0x3ff;
    float v;
    if (e == 0x1f) {
        if (mant == 0) v = INFINITY;
        else {
            uint32_t bits = 0x7f800000u | ((uint32_t)mant << 13); /* payload kept, quiet bit as given */
            bits |= 0x00400000u;                                     /* NaNs come out quiet */
            memcpy(&v, &bits, 4);
        }
    } else if (e == 0) {
        v = ldexpf((float)mant, -24);                /* subnormal: mant * 2^-24 */
    } else {
        v = ldexpf((float)(mant | 0x400), e - 25);   /* (1024 + mant) * 2^(e - 15 - 10) */
    }
    return sign ? -v : v;
}

uint16_t float_to_half_ref(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000);
    float a = fabsf(f);
    if (isnan(f)) return (uint16_t)(sign | 0x7e00 | ((bits >> 13) & 0x3ff));
    /* Largest finite half is 65504; values >= 65520 (the midpoint to 2^16) round to infinity. */
    if (a >= 65520.0f) return sign | 0x7c00;
    /* Round a to the nearest multiple of the half ulp at its binade, ties to even, in double. */
    int e;
    frexp(a, &e);                       /* a = f * 2^e, f in [0.5, 1) */
    int ulp_exp = e - 11;               /* 11 significant bits */
    if (ulp_exp < -24) ulp_exp = -24;   /* subnormal halves: ulp 2^-24 */
    double scaled = ldexp((double)a, -ulp_exp);
    double r = nearbyint(scaled);       /* half to even (default rounding mode) */
    double v = ldexp(r, ulp_exp);       /* the rounded value, exact in double */
    if (v == 0) return sign;
    int ve;
    frexp(v, &ve);
    if (ve - 1 < -14) {                 /* subnormal: v = mant * 2^-24 */
        return (uint16_t)(sign | (uint16_t)ldexp(v, 24));
    }
    int E = ve - 1 + 15;                /* biased exponent */
    uint16_t mant = (uint16_t)(ldexp(v, -(ve - 1) + 10) - 1024);
    return (uint16_t)(sign | (E << 10) | mant);
}

float bf16_to_float_ref(uint16_t b) {
    int sign = b >> 15, e = (b >> 7) & 0xff, mant = b & 0x7f;
    float v;
    if (e == 0xff) {
        if (mant == 0) v = INFINITY;
        else {
            uint32_t bits = ((uint32_t)b << 16) & 0x7fffffffu;
            memcpy(&v, &bits, 4);
        }
    } else if (e == 0) {
        v = ldexpf((float)mant, -133);               /* mant * 2^(-126 - 7) */
    } else {
        v = ldexpf((float)(mant | 0x80), e - 134);   /* (128 + mant) * 2^(e - 127 - 7) */
    }
    return sign ? -v : v;
}

uint16_t float_to_bf16_ref(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if (isnan(f)) return (uint16_t)((bits >> 16) | 0x0040);  /* quiet NaN, sign and top payload kept */
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000);
    float a = fabsf(f);
    if (isinf(f)) return sign | 0x7f80;
    if (a == 0) return sign;
    int e;
    frexp(a, &e);
    int ulp_exp = e - 8;                /* 8 significant bits */
    if (ulp_exp < -133) ulp_exp = -133; /* subnormal bf16 */
    double r = nearbyint(ldexp((double)a, -ulp_exp));
    double v = ldexp(r, ulp_exp);
    if (v >= 0x1p128) return sign | 0x7f80; /* rounded past the largest bf16 (0x1.fcp127): inf */
    float vf = (float)v;                /* exact: v has at most 8 significant bits */
    uint32_t vb;
    memcpy(&vb, &vf, 4);
    return (uint16_t)(sign | (vb >> 16));
}
