/*
 * optim.c — Adam, SGD, gradient norm and clipping, learning-rate schedules, loss scaling
 * (see optim.h). Legend: n parameters, t updates done.
 */
#include "train/optim.h"

#include <math.h>
#include <omp.h>
#ifdef __AVX__
#include <immintrin.h>
#endif
#include <string.h>

#define PAR_MIN 32768

adam_config_t adam_default_config(void) {
    adam_config_t c = {0.9f, 0.98f, 1e-8f, 0.0f, 1};
    return c;
}

tern_status_t adam_init(adam_t *a, size_t n, const adam_config_t *cfg) {
    memset(a, 0, sizeof *a);
    if (!(cfg->beta1 >= 0.0f && cfg->beta1 < 1.0f && cfg->beta2 >= 0.0f && cfg->beta2 < 1.0f && cfg->eps > 0.0f &&
          cfg->weight_decay >= 0.0f))
        return tern_error(TERN_ERR_INVALID_ARG, "adam: betas (%g, %g) must be in [0, 1), eps %g > 0, weight decay "
                          "%g >= 0", cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay);
    a->cfg = *cfg;
    a->n = n;
    a->m = aligned_alloc64((n ? n : 1) * sizeof(float));
    a->v = aligned_alloc64((n ? n : 1) * sizeof(float));
    if (!a->m || !a->v) {
        adam_free(a);
        return tern_error(TERN_ERR_NOMEM, "adam: out of memory for %zu moments", n);
    }
    memset(a->m, 0, n * sizeof(float));
    memset(a->v, 0, n * sizeof(float));
    return TERN_OK;
}

void adam_free(adam_t *a) {
    aligned_free(a->m);
    aligned_free(a->v);
    memset(a, 0, sizeof *a);
}

/* The update of elements [i0, i1): p -= step · m / (sqrt(v) · inv_sqrt_bc2 + eps) after the moment
 * updates, per element in float in this order (no contraction: -std=c11), 8 at a time with AVX
 * (the same correctly rounded operations: identical results), the rest one by one. wmode: 0 no
 * weight decay, 1 decoupled (p *= decay first), 2 L2 (g += wd · p). */
static inline float adam_one(float *restrict params, const float *restrict grads, float *restrict m,
                             float *restrict v, long long i, float b1, float b2, float c1, float c2, float eps,
                             float gs, float wd, int wmode, float step, float inv_sqrt_bc2, float decay) {
    float g = grads[i] * gs, p = params[i];
    if (wmode == 1) p *= decay;
    else if (wmode == 2) g += wd * p;
    float mi = b1 * m[i] + c1 * g;
    float vi = b2 * v[i] + c2 * g * g;
    m[i] = mi;
    v[i] = vi;
    return p - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
}

static void adam_range(float *restrict params, const float *restrict grads, float *restrict m, float *restrict v,
                       long long i0, long long i1, float b1, float b2, float eps, float gs, float wd, int wmode,
                       float step, float inv_sqrt_bc2, float decay) {
    const float c1 = 1.0f - b1, c2 = 1.0f - b2;
    long long i = i0;
#ifdef __AVX__
    const __m256 vb1 = _mm256_set1_ps(b1), vb2 = _mm256_set1_ps(b2), vc1 = _mm256_set1_ps(c1),
                 vc2 = _mm256_set1_ps(c2), veps = _mm256_set1_ps(eps), vwd = _mm256_set1_ps(wd),
                 vstep = _mm256_set1_ps(step), vk = _mm256_set1_ps(inv_sqrt_bc2), vdecay = _mm256_set1_ps(decay),
                 vgs = _mm256_set1_ps(gs);
    for (; i + 8 <= i1; i += 8) {
        __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grads + i), vgs), p = _mm256_loadu_ps(params + i);
        if (wmode == 1) p = _mm256_mul_ps(p, vdecay);
        else if (wmode == 2) g = _mm256_add_ps(g, _mm256_mul_ps(vwd, p));
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(vb1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(vc1, g));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(vb2, _mm256_loadu_ps(v + i)), _mm256_mul_ps(_mm256_mul_ps(vc2, g), g));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        __m256 den = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vi), vk), veps);
        _mm256_storeu_ps(params + i, _mm256_sub_ps(p, _mm256_div_ps(_mm256_mul_ps(vstep, mi), den)));
    }
#endif
    for (; i < i1; i++)
        params[i] = adam_one(params, grads, m, v, i, b1, b2, c1, c2, eps, gs, wd, wmode, step, inv_sqrt_bc2, decay);
}

void adam_step(adam_t *a, float *params, const float *grads, float lr) { adam_step_scaled(a, params, grads, 1.0f, lr); }

void adam_step_scaled(adam_t *a, float *params, const float *grads, float gscale, float lr) {
    a->t++;
    const float b1 = a->cfg.beta1, b2 = a->cfg.beta2, eps = a->cfg.eps, wd = a->cfg.weight_decay;
    const int wmode = wd == 0.0f ? 0 : a->cfg.decoupled ? 1 : 2;
    double bc1 = 1.0 - pow((double)b1, (double)a->t), bc2 = 1.0 - pow((double)b2, (double)a->t);
    const float step = (float)(lr / bc1), inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    const float decay = 1.0f - lr * wd;
    float *m = a->m, *v = a->v;
    long long n = (long long)a->n;
#pragma omp parallel if (n >= PAR_MIN)
    {
        long long nt = omp_get_num_threads(), id = omp_get_thread_num();
        long long i0 = n * id / nt / 16 * 16, i1 = id + 1 == nt ? n : n * (id + 1) / nt / 16 * 16;
        if (i1 > i0)
            adam_range(params, grads, m, v, i0, i1, b1, b2, eps, gscale, wd, wmode, step, inv_sqrt_bc2, decay);
    }
}

void sgd_step(float *params, const float *grads, size_t n, float lr, float weight_decay) {
    long long nn = (long long)n;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (long long i = 0; i < nn; i++) params[i] -= lr * (grads[i] + weight_decay * params[i]);
}

double grad_global_norm(const float *g, size_t n) {
    double s = 0;
    long long nn = (long long)n;
    /* simd: partial sums in vector lanes (products exact in double; only the order of the sum differs) */
#pragma omp parallel for simd schedule(static) reduction(+ : s) if (n >= PAR_MIN)
    for (long long i = 0; i < nn; i++) s += (double)g[i] * g[i];
    return sqrt(s);
}

void grad_scale(float *g, size_t n, float a) {
    long long nn = (long long)n;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (long long i = 0; i < nn; i++) g[i] *= a;
}

float clip_grad_coef(double norm, float max_norm) {
    return max_norm > 0.0f && isfinite(norm) && norm > max_norm ? (float)(max_norm / (norm + 1e-6)) : 1.0f;
}

double clip_grad_norm(float *g, size_t n, float max_norm) {
    double norm = grad_global_norm(g, n);
    float coef = clip_grad_coef(norm, max_norm);
    if (coef != 1.0f) grad_scale(g, n, coef);
    return norm;
}

/* ------------------------------------------------------------ schedules */

double lr_at(const lr_schedule_t *s, long t) {
    if (t < 0) t = 0;
    switch (s->kind) {
    case LR_CONSTANT: return s->lr;
    case LR_INVERSE_SQRT:
        if (t < s->warmup) return s->warmup_init_lr + (double)t * ((double)s->lr - s->warmup_init_lr) / s->warmup;
        return (double)s->lr * sqrt((double)s->warmup) / sqrt((double)t);
    case LR_GNMT: {
        if (t < s->sgd_start) return s->lr;
        long k = 0;
        if (t >= s->decay_start) {
            k = (t - s->decay_start) / s->decay_interval + 1;
            if (k > s->decay_times) k = s->decay_times;
        }
        return ldexp((double)s->sgd_lr, (int)-k);
    }
    }
    return s->lr;
}

int lr_use_sgd(const lr_schedule_t *s, long t) { return s->kind == LR_GNMT && t >= s->sgd_start; }

tern_status_t lr_schedule_check(const lr_schedule_t *s) {
    if (!(s->lr > 0.0f)) return tern_error(TERN_ERR_INVALID_ARG, "learning rate must be > 0 (got %g)", s->lr);
    switch (s->kind) {
    case LR_CONSTANT: return TERN_OK;
    case LR_INVERSE_SQRT:
        if (s->warmup < 1 || !(s->warmup_init_lr >= 0.0f))
            return tern_error(TERN_ERR_INVALID_ARG, "inverse_sqrt: warm-up %d must be >= 1 and its initial rate "
                              "%g >= 0", s->warmup, s->warmup_init_lr);
        return TERN_OK;
    case LR_GNMT:
        if (s->sgd_start < 0 || !(s->sgd_lr > 0.0f) || s->decay_interval < 1 || s->decay_times < 0 ||
            s->decay_start < s->sgd_start)
            return tern_error(TERN_ERR_INVALID_ARG, "gnmt schedule: need SGD start >= 0, SGD rate > 0, decay start "
                              ">= SGD start, decay interval >= 1, halvings >= 0");
        return TERN_OK;
    }
    return tern_error(TERN_ERR_INVALID_ARG, "unknown learning-rate schedule %d", (int)s->kind);
}

/* ------------------------------------------------------------ loss scaling */

void loss_scaler_init(loss_scaler_t *ls, float init_scale, int window) {
    memset(ls, 0, sizeof *ls);
    ls->scale = init_scale > 0.0f ? init_scale : 65536.0f;
    ls->factor = 2.0f;
    ls->window = window > 0 ? window : 2000;
    ls->min_scale = 1e-4f;
    ls->max_scale = 16777216.0f;
}

tern_status_t loss_scaler_update(loss_scaler_t *ls, int overflow, int *apply) {
    if (overflow) {
        *apply = 0;
        ls->overflows++;
        ls->clean = 0;
        ls->scale /= ls->factor;
        if (ls->scale < ls->min_scale)
            return tern_error(TERN_ERR_INPUT, "loss scale fell to %g (below %g): the gradients keep "
                              "overflowing, training has diverged", ls->scale, ls->min_scale);
        return TERN_OK;
    }
    *apply = 1;
    if (++ls->clean >= ls->window) {
        ls->clean = 0;
        if (ls->scale * ls->factor <= ls->max_scale) ls->scale *= ls->factor;
    }
    return TERN_OK;
}
