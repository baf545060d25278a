/*
 * qat.c — fake quantization of the int8 weight matrices in training (see qat.h).
 *
 * Legend: R rows, K columns of one weight matrix.
 */
#include "train/qat.h"
#include "kernels/kernels.h"
#include "model/desc.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t offset;   /* floats from the start of the parameter buffer */
    int R, K;
} qat_tensor_t;

struct qat {
    qat_mode_t mode;
    int n;                 /* tensors fake-quantized */
    qat_tensor_t *t;       /* (n) */
    unsigned char *on;     /* (n_tensors of the model) */
    size_t numel;          /* floats in all of them */
    float *master;         /* (numel) the master values while entered */
    int8_t *qrow;          /* (max K) scratch */
    int entered;
};

int qat_mode_parse(const char *name) {
    if (!strcmp(name, "none")) return QAT_NONE;
    if (!strcmp(name, "int8")) return QAT_INT8;
    if (!strcmp(name, "int8-act")) return QAT_INT8_ACT;
    return -1;
}

const char *qat_mode_name(int mode) { return mode == QAT_INT8 ? "int8" : mode == QAT_INT8_ACT ? "int8-act" : "none"; }

void qat_fake_quantize(float *w, int R, int K, int8_t *qrow) {
    for (int r = 0; r < R; r++) {
        float *row = w + (size_t)r * K, scale;
        quantize_rows_s8(qrow, &scale, row, 1, K);
        for (int k = 0; k < K; k++) row[k] = (float)qrow[k] / scale;
    }
}

tern_status_t qat_new(qat_t **out, const train_model_t *m, qat_mode_t mode) {
    *out = NULL;
    const train_family_t *f = m->family;
    if (mode != QAT_INT8 && mode != QAT_INT8_ACT)
        return tern_error(TERN_ERR_INVALID_ARG, "--qat: unknown mode %d (int8, int8-act or none)", (int)mode);
    const model_desc_t *md = f->desc;
    if (!md)
        return tern_error(TERN_ERR_UNSUPPORTED, "--qat int8: the %s family does not describe which of its tensors "
                          "int8 inference quantizes (train_family_t.desc): it cannot be trained with fake "
                          "quantization", f->architecture);
    for (int i = 0; i < m->n_aliases; i++) {
        int a = desc_quantizable(md, m->alias_names[i]), b = desc_quantizable(md, m->alias_targets[i]);
        if (a != b)
            return tern_error(TERN_ERR_UNSUPPORTED, "--qat int8: '%s' is tied to '%s', but int8 inference runs "
                              "the one in int8 and the other in float32, which fake quantization of the one "
                              "stored tensor cannot mirror: train with an untied projection or "
                              "without --qat", a ? m->alias_names[i] : m->alias_targets[i],
                              a ? m->alias_targets[i] : m->alias_names[i]);
    }
    qat_t *q = calloc(1, sizeof *q);
    if (!q || !(q->t = calloc((size_t)m->n_tensors + 1, sizeof *q->t)) ||
        !(q->on = calloc((size_t)m->n_tensors + 1, 1))) {
        qat_free(q);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    q->mode = mode;
    int maxK = 1;
    for (int i = 0; i < m->n_tensors; i++) {
        const train_tensor_t *t = &m->tensors[i];
        if (t->rank != 2 || !desc_quantizable(md, t->name)) continue;
        q->on[i] = 1;
        q->t[q->n++] = (qat_tensor_t){t->offset, t->shape[0], t->shape[1]};
        q->numel += t->numel;
        if (t->shape[1] > maxK) maxK = t->shape[1];
    }
    if (!q->n) {
        qat_free(q);
        return tern_error(TERN_ERR_UNSUPPORTED, "--qat int8: the %s model has no tensor int8 inference quantizes",
                          f->architecture);
    }
    if (!(q->master = malloc(q->numel * sizeof(float))) || !(q->qrow = malloc((size_t)maxK))) {
        qat_free(q);
        return tern_error(TERN_ERR_NOMEM, "out of memory for the fake quantization's master copy");
    }
    *out = q;
    return TERN_OK;
}

void qat_free(qat_t *q) {
    if (!q) return;
    free(q->t);
    free(q->on);
    free(q->master);
    free(q->qrow);
    free(q);
}

int qat_count(const qat_t *q) { return q->n; }
size_t qat_numel(const qat_t *q) { return q->numel; }
int qat_tensor_on(const qat_t *q, int i) { return q->on[i]; }

void qat_enter(qat_t *q, train_model_t *m) {
    if (q->entered) return;
    float *s = q->master;
    for (int i = 0; i < q->n; i++) {
        float *w = m->params + q->t[i].offset;
        size_t n = (size_t)q->t[i].R * q->t[i].K;
        memcpy(s, w, n * sizeof(float));
        qat_fake_quantize(w, q->t[i].R, q->t[i].K, q->qrow);
        s += n;
    }
    q->entered = 1;
    m->family->params_changed(m);
}

void qat_leave(qat_t *q, train_model_t *m) {
    if (!q->entered) return;
    const float *s = q->master;
    for (int i = 0; i < q->n; i++) {
        size_t n = (size_t)q->t[i].R * q->t[i].K;
        memcpy(m->params + q->t[i].offset, s, n * sizeof(float));
        s += n;
    }
    q->entered = 0;
    m->family->params_changed(m);
}
