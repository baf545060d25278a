/* bench_logaddexp.c — nanoseconds per entry of an ensemble's prob-mean fold,
 * y = log(exp(y) + exp(x + c)), over one beam step's scores (5 rows x 32,000 entries):
 * the scalar expf + log1pf loop src/model/ensemble.c ran before, logaddexp_inplace's AVX2 version
 * and, where the CPU has it, its AVX-512 version. CPU time of the calling thread, best of 50.
 *
 *   build/bench/bench_logaddexp */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "kernels/cpu_isa.h"
#include "kernels/kernels.h"

/* The scalar fold ensemble.c ran before logaddexp_inplace. */
static void scalar_fold(float *y, const float *x, float c, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float a = y[i], b = c + x[i];
        if (a == -INFINITY) y[i] = b;
        else if (b != -INFINITY) {
            float m = a > b ? a : b;
            y[i] = m + log1pf(expf(-fabsf(a - b)));
        }
    }
}

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void) {
    const size_t n = 5 * 32000;
    float *y0 = aligned_alloc64(n * sizeof(float)), *y = aligned_alloc64(n * sizeof(float)),
          *x = aligned_alloc64(n * sizeof(float));
    if (!y0 || !y || !x) return 1;
    unsigned s = 12345;
    for (size_t i = 0; i < n; i++) { /* log-probs in [-20, 0) */
        s = s * 1664525u + 1013904223u;
        y0[i] = -20.0f * (float)((s >> 8) & 0xffff) / 65536.0f - 1e-3f;
        s = s * 1664525u + 1013904223u;
        x[i] = -20.0f * (float)((s >> 8) & 0xffff) / 65536.0f - 1e-3f;
    }
    const int have512 = cpu_isa_detected() >= CPU_ISA_AVX512_CORE;
    printf("CPU: %s; logaddexp_inplace runs %s\n", cpu_isa_name(cpu_isa_detected()),
           cpu_isa_effective() >= CPU_ISA_AVX512_CORE ? "AVX-512" : "AVX2");
    const char *names[3] = {"scalar expf + log1pf", "AVX2", "AVX-512"};
    for (int v = 0; v < 3; v++) {
        if (v == 2 && !have512) {
            printf("%-22s (no AVX-512 on this CPU)\n", names[v]);
            continue;
        }
        double best = 1e30;
        for (int rep = 0; rep < 50; rep++) {
            memcpy(y, y0, n * sizeof(float));
            double t = cpu_seconds();
            if (v == 0) scalar_fold(y, x, -0.6931472f, n);
            else if (v == 1) logaddexp_inplace_avx2(y, x, -0.6931472f, n);
            else logaddexp_inplace_avx512(y, x, -0.6931472f, n);
            t = cpu_seconds() - t;
            if (t < best) best = t;
        }
        printf("%-22s %6.3f ms per step, %5.2f ns per entry\n", names[v], best * 1e3, best * 1e9 / (double)n);
    }
    aligned_free(y0);
    aligned_free(y);
    aligned_free(x);
    return 0;
}
