/*
 * optim.h — optimizers, learning-rate schedules, gradient clipping and dynamic loss scaling.
 *
 * Legend: n parameters (the model's one contiguous buffer), t updates done so far.
 *
 * Adam follows Kingma & Ba's Algorithm 1 exactly as torch.optim.Adam / AdamW compute it:
 *   m = β1 m + (1 - β1) g;  v = β2 v + (1 - β2) g²
 *   θ -= lr / (1 - β1^t) · m / (sqrt(v) / sqrt(1 - β2^t) + ε)
 * (fairseq adds ε to sqrt(v) before the bias correction — a difference of ε·sqrt(1 - β2^t) that
 * matters only in the first updates with tiny gradients.) Weight decay, two kinds:
 *   decoupled (AdamW, and what fairseq's adam does): θ -= lr · wd · θ before the Adam step;
 *   L2 (torch.optim.Adam's weight_decay): g += wd · θ before the moments.
 * Decay applies to every parameter (biases and layer norms included), as fairseq does.
 */
#ifndef TERN_TRAIN_OPTIM_H
#define TERN_TRAIN_OPTIM_H

#include <stddef.h>

#include "base/base.h"

/* ------------------------------------------------------------ Adam and SGD */

typedef struct {
    float beta1, beta2, eps; /* fairseq's Transformer recipes: 0.9, 0.98, 1e-8 */
    float weight_decay;      /* 0: none */
    int decoupled;           /* 1: AdamW-style decay (fairseq); 0: L2 added to the gradient */
} adam_config_t;

adam_config_t adam_default_config(void); /* 0.9, 0.98, 1e-8, decay 0, decoupled */

typedef struct {
    adam_config_t cfg;
    size_t n;
    float *m, *v;   /* (n) first and second moments, same layout as the parameters */
    long t;         /* Adam updates done (for the bias corrections) */
} adam_t;

tern_status_t adam_init(adam_t *a, size_t n, const adam_config_t *cfg); /* moments zero, t = 0 */
void adam_free(adam_t *a);
/* One update of params (n) with grads (n) at learning rate lr (t increments first). */
void adam_step(adam_t *a, float *params, const float *grads, float lr);
/* The same with the gradients taken as grads[i] · gscale (grads unchanged): adam_step after
 * grad_scale(grads, n, gscale), without that pass over the gradients (identical results). */
void adam_step_scaled(adam_t *a, float *params, const float *grads, float gscale, float lr);

/* Plain SGD: θ -= lr · (g + wd · θ). */
void sgd_step(float *params, const float *grads, size_t n, float lr, float weight_decay);

/* ------------------------------------------------------------ gradients */

/* sqrt(Σ g²) accumulated in double; +inf or NaN when a gradient is not finite. */
double grad_global_norm(const float *g, size_t n);
/* g *= a. */
void grad_scale(float *g, size_t n, float a);
/* Clipping by global norm as torch.nn.utils.clip_grad_norm_ and fairseq: when norm > max_norm,
 * g *= max_norm / (norm + 1e-6). Returns the norm before clipping. max_norm <= 0: no clipping
 * (the norm is still returned). */
double clip_grad_norm(float *g, size_t n, float max_norm);
/* The factor clip_grad_norm scales the gradients by, given their norm (1 when it does not clip):
 * clip_grad_norm(g) then adam_step(g) is adam_step_scaled(g, clip_grad_coef(grad_global_norm(g))). */
float clip_grad_coef(double norm, float max_norm);

/* ------------------------------------------------------------ learning-rate schedules */

typedef enum {
    LR_CONSTANT = 0,     /* lr */
    LR_INVERSE_SQRT = 1, /* fairseq's inverse_sqrt */
    LR_GNMT = 2          /* Adam at lr, then SGD at sgd_lr halved step-wise (GNMT, Wu et al. 2016) */
} lr_kind_t;

typedef struct {
    lr_kind_t kind;
    float lr;              /* constant rate / peak rate after warm-up / Adam-phase rate */
    /* inverse_sqrt: from warmup_init_lr, linear to lr over warmup updates, then lr·sqrt(warmup/t) */
    int warmup;
    float warmup_init_lr;
    /* GNMT: SGD from update sgd_start on at sgd_lr; from decay_start on, halved every
     * decay_interval updates, decay_times halvings at most */
    long sgd_start;
    float sgd_lr;
    long decay_start, decay_interval;
    int decay_times;
} lr_schedule_t;

/* The rate of the update that follows t updates (t = 0 for the first update), as fairseq's
 * scheduler sets it after step_update(t): inverse_sqrt gives warmup_init_lr + t·(lr -
 * warmup_init_lr)/warmup while t < warmup, then lr·sqrt(warmup)/sqrt(t). GNMT: lr while
 * t < sgd_start; then sgd_lr · 0.5^k, k = min(decay_times, floor((t - decay_start)/decay_interval)
 * + 1) once t >= decay_start (k = 0 before). */
double lr_at(const lr_schedule_t *s, long t);
/* 1 when update t uses SGD rather than Adam (GNMT after the switch). */
int lr_use_sgd(const lr_schedule_t *s, long t);
/* Checks the fields (positive rates, warm-up >= 1 for inverse_sqrt, intervals >= 1...). */
tern_status_t lr_schedule_check(const lr_schedule_t *s);

/* ------------------------------------------------------------ dynamic loss scaling */

/* For float16 training: the loss is multiplied by scale before the backward pass; an update
 * whose gradients overflow (not finite) is skipped and the scale divided by factor; after window
 * clean updates in a row the scale is multiplied by factor (fairseq's DynamicLossScaler with
 * tolerance 0). */
typedef struct {
    float scale;       /* current loss scale */
    float factor;      /* 2 */
    int window;        /* clean updates before growing (fairseq: 2000 / update_freq) */
    float min_scale;   /* below this, training has diverged */
    float max_scale;   /* growth stops here (2^24) */
    int clean;         /* clean updates since the last change */
    long overflows;    /* skipped updates so far */
} loss_scaler_t;

void loss_scaler_init(loss_scaler_t *ls, float init_scale, int window);
/* Call once per update with whether the (scaled) gradients overflowed. Returns TERN_OK with
 * *apply = 1 when the update should be applied (gradients then unscaled by 1/scale *before*
 * this call's growth: use the scale read before calling), 0 when it must be skipped; an error
 * when the scale fell below min_scale. */
tern_status_t loss_scaler_update(loss_scaler_t *ls, int overflow, int *apply);

#endif
