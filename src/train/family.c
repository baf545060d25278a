/* family.c — the registry of training families (family.h), beside the inference registry
 * (src/model/family.c): the list is TRAIN_FAMILIES in family.h (docs/model-families.md). */
#include "train/family.h"

#include <string.h>

#include "train/model.h" /* train_tensor_view */

#define FAMILY_ENTRY(name) &train_family_##name,
static const train_family_t *const FAMILIES[] = {TRAIN_FAMILIES(FAMILY_ENTRY)};
enum { N_FAMILIES = sizeof FAMILIES / sizeof FAMILIES[0] };

const train_family_t *train_family_find(const char *architecture) {
    for (int i = 0; i < N_FAMILIES; i++)
        if (!strcmp(FAMILIES[i]->architecture, architecture)) return FAMILIES[i];
    return NULL;
}

const char *const train_precision_names[] = {"float32", "bfloat16", NULL};
const int train_precision_values[] = {0, 1};

const train_family_t *train_family_at(int i) { return i >= 0 && i < N_FAMILIES ? FAMILIES[i] : NULL; }

void train_model_views(const train_model_t *m, const float *buf, tensor_t *out) {
    for (int i = 0; i < m->n_tensors; i++) {
        const train_tensor_t *t = &m->tensors[i];
        train_tensor_view(&out[i], t->name, t->rank, t->shape[0], t->shape[1], t->numel, buf + t->offset);
    }
}

void train_weighted_sums(const float *losses, const float *nlls, const float *w, int B, int T, double *loss_sum,
                         double *nll_sum) {
    double ls = 0, ns = 0;
    for (int b = 0; b < B; b++) {
        double l1 = 0, n1 = 0;
        for (int t = 0; t < T; t++) l1 += losses[(size_t)b * T + t], n1 += nlls[(size_t)b * T + t];
        ls += (double)w[b] * l1;
        ns += (double)w[b] * n1;
    }
    *loss_sum = ls;
    *nll_sum = ns;
}

void train_scale_sentence_rows(float *dlogits, const float *w, int B, int T, int V) {
    for (int b = 0; b < B; b++) {
        float wb = w[b];
        float *d = dlogits + (size_t)b * T * V;
        for (size_t i = 0; i < (size_t)T * V; i++) d[i] *= wb;
    }
}
