/* test_qat.c — fake quantization (src/train/qat.h) against its definition.
 *
 * - qat_fake_quantize of a matrix equals q / scale with q and scale from quantize_rows_s8_ref (the
 *   scalar specification of int8 inference's weight rounding), bit for bit; every value within
 *   half a step (0.5 / scale) of the original; a row's largest magnitude kept (to 1 ulp); an
 *   all-zero row stays zero; fake quantization is idempotent.
 * - qat_new on each training family (Transformer, attention GRU untied, GNMT): the tensors it
 *   fake-quantizes are exactly the description's DESC_Q8 ones; qat_enter changes those (only) to
 *   their fq values, qat_leave gives back the parameters bit for bit; a GRU with a tied projection
 *   is refused.
 *
 * Legend: R rows, K columns.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/kernels.h"
#include "model/desc.h"
#include "train/family.h"
#include "train/gnmt_table.h"
#include "train/model.h"
#include "train/qat.h"
#include "train/rnn_gru_train.h"

static uint64_t rng = 88172645463325252ull;
static float urand(void) { /* xorshift64, in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static void test_rows(void) {
    enum { R = 7, K = 133 };
    float *w = malloc(sizeof(float) * R * K), *fq = malloc(sizeof(float) * R * K), scale[R];
    int8_t q[R * K], qrow[K];
    for (int i = 0; i < R * K; i++) w[i] = urand() * (1.0f + (float)(i / K)); /* rows of different ranges */
    for (int k = 0; k < K; k++) w[3 * K + k] = 0.0f;                            /* an all-zero row */
    memcpy(fq, w, sizeof(float) * R * K);
    qat_fake_quantize(fq, R, K, qrow);
    quantize_rows_s8_ref(q, scale, w, R, K);
    int same = 1, within = 1;
    for (int r = 0; r < R; r++) {
        float amax = 0, fmax = 0;
        for (int k = 0; k < K; k++) {
            int i = r * K + k;
            same &= fq[i] == (float)q[i] / scale[r];
            within &= fabsf(fq[i] - w[i]) <= 0.5f / scale[r] * (1.0f + 1e-6f);
            amax = fmaxf(amax, fabsf(w[i]));
            fmax = fmaxf(fmax, fabsf(fq[i]));
        }
        CHECK_NEAR(fmax, amax, 0, 2e-7);
    }
    CHECK(same);
    CHECK(within);
    for (int k = 0; k < K; k++) CHECK(fq[3 * K + k] == 0.0f);
    float *again = malloc(sizeof(float) * R * K);
    memcpy(again, fq, sizeof(float) * R * K);
    qat_fake_quantize(again, R, K, qrow);
    int idem = 1;
    for (int i = 0; i < R * K; i++) idem &= again[i] == fq[i];
    CHECK(idem);
    free(w), free(fq), free(again);
}

/* Enter/leave on a created model: the DESC_Q8 tensors change to fq, the rest stays, leave restores. */
static void check_model(const char *label, train_model_t *m) {
    qat_t *q;
    tern_status_t st = qat_new(&q, m, QAT_INT8);
    CHECK_MSG(!st, "%s: qat_new: %s", label, tern_last_error());
    if (st) return;
    for (size_t i = 0; i < m->n_params; i++) m->params[i] = urand() * 0.3f;
    float *before = malloc(m->n_params * sizeof(float));
    memcpy(before, m->params, m->n_params * sizeof(float));
    int n = 0, ok_sel = 1, ok_val = 1, changed = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const train_tensor_t *t = &m->tensors[i];
        int want = t->rank == 2 && desc_quantizable(m->family->desc, t->name);
        ok_sel &= qat_tensor_on(q, i) == want;
        n += want;
    }
    CHECK_EQ_INT(qat_count(q), n);
    qat_enter(q, m);
    qat_enter(q, m); /* idempotent while entered */
    int8_t *qrow = malloc(4096);
    for (int i = 0; i < m->n_tensors; i++) {
        const train_tensor_t *t = &m->tensors[i];
        float *ref = malloc(t->numel * sizeof(float));
        memcpy(ref, before + t->offset, t->numel * sizeof(float));
        if (qat_tensor_on(q, i)) qat_fake_quantize(ref, t->shape[0], t->shape[1], qrow);
        ok_val &= !memcmp(ref, m->params + t->offset, t->numel * sizeof(float));
        changed += qat_tensor_on(q, i) && memcmp(ref, before + t->offset, t->numel * sizeof(float));
        free(ref);
    }
    qat_leave(q, m);
    CHECK_MSG(ok_sel, "%s: the fake-quantized tensors are not the DESC_Q8 ones", label);
    CHECK_MSG(ok_val, "%s: entered values differ from fq of the masters", label);
    CHECK_MSG(changed == n && n > 0, "%s: %d of %d tensors changed by fq", label, changed, n);
    CHECK_MSG(!memcmp(before, m->params, m->n_params * sizeof(float)), "%s: qat_leave did not restore", label);
    free(qrow), free(before);
    qat_free(q);
}

static void test_families(void) {
    train_data_dims_t dd = {41, 41, 1, 0, 32};
    {
        const train_family_t *f = train_family_find("transformer");
        tmodel_config_t c;
        f->default_config(&c);
        c.d = 16, c.heads = 2, c.ff = 24, c.enc_layers = 2, c.dec_layers = 1, c.max_pos = 0;
        train_model_t m;
        CHECK(!f->create(&m, &c, &dd));
        check_model("transformer", &m);
        f->destroy(&m);
    }
    {
        const train_family_t *f = train_family_find("rnn-gru");
        rnn_gru_config_t c;
        f->default_config(&c);
        c.emb = 8, c.enc_hidden = 6, c.dec_hidden = 10, c.att = 7, c.out = 8, c.tie_proj = 0;
        train_model_t m;
        CHECK(!f->create(&m, &c, &dd));
        check_model("rnn-gru untied", &m);
        f->destroy(&m);
        c.tie_proj = 1;
        CHECK(!f->create(&m, &c, &dd));
        qat_t *q = NULL;
        CHECK(qat_new(&q, &m, QAT_INT8) == TERN_ERR_UNSUPPORTED && !q);
        CHECK(strstr(tern_last_error(), "decoder/projection/weight") != NULL);
        f->destroy(&m);
    }
    {
        const train_family_t *f = train_family_find("gnmt");
        gnmt_train_config_t c;
        f->default_config(&c);
        c.hidden = 8, c.att = 8, c.enc_layers = 3, c.dec_layers = 3, c.tie_proj = 0;
        train_model_t m;
        CHECK(!f->create(&m, &c, &dd));
        check_model("gnmt", &m);
        f->destroy(&m);
    }
}

int main(void) {
    test_rows();
    test_families();
    return check_report("test_qat");
}
