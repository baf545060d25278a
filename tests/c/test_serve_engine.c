/* test_serve_engine.c — the engine of `tern serve` (src/serve/engine.c) without HTTP, on the
 * shipped model models/en-de (run from the repository root):
 *  - requests queued together and decoded in batches across requests give, for every sentence,
 *    what tern_translate_batch() gives for that sentence alone on a translator of its own
 *    (the reference: no queue, no batching with other sentences): hypotheses exact, scores
 *    within 1e-4 (batches of other shapes round differently);
 *  - the per-call options of a request (beam, n-best) reach its batch, and requests with other
 *    options are not mixed into it;
 *  - a cancelled request's waiting segments are dropped, it completes, nothing leaks (ASan);
 *  - the queue refuses past max_queue; a reload while requests wait drops none of them;
 *  - a request's own search parameters win over the translator's, which stay as they were;
 *  - scoring requests give tern_score()'s log-probabilities.
 */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "serve/engine.h"
#include "tern.h"

static const char *const SRC[] = {
    "A man is riding a bicycle.",          "Two dogs play in the snow.",
    "A woman in a red dress reads a book by the window.", "Children are playing soccer on a field.",
    "A cat.",                               "An old man with a white beard sings on a street corner.",
};
#define NSRC 6

static int same_result(const tern_result_t *a, const tern_result_t *b) {
    if (a->num_hypotheses != b->num_hypotheses) return 0;
    for (int k = 0; k < a->num_hypotheses; k++) {
        if (strcmp(a->hypotheses[k], b->hypotheses[k])) return 0;
        if ((a->scores == NULL) != (b->scores == NULL)) return 0;
        if (a->scores && fabsf(a->scores[k] - b->scores[k]) > 1e-4f) return 0; /* batch rounding */
    }
    return 1;
}

/* Reference: each sentence alone through the plain batch API with these options. */
static void reference(const tern_model_t *model, const tern_search_params_t *call, tern_result_t *ref) {
    tern_search_params_t sp = tern_search_default_params();
    sp.beam_size = call->beam_size;
    sp.num_hypotheses = call->num_hypotheses;
    sp.return_scores = call->return_scores;
    tern_translator_options_t o = tern_translator_default_options();
    o.search = &sp;
    o.threads_per_worker = 1;
    tern_translator_t *tr = NULL;
    CHECK(tern_translator_create(&tr, model, &o) == TERN_OK);
    for (int i = 0; i < NSRC; i++) CHECK(tern_translate_batch(tr, &SRC[i], 1, &ref[i]) == TERN_OK);
    tern_translator_free(tr);
}

int main(void) {
    const char *dir = "models/en-de";
    if (access("models/en-de/config.json", R_OK) != 0) {
        fprintf(stderr, "test_serve_engine: run from the repository root (models/en-de not found)\n");
        return 1;
    }
    tern_set_log_level(TERN_LOG_ERROR);
    tern_model_t *model = NULL;
    CHECK(tern_model_load(&model, dir, NULL) == TERN_OK);
    if (!model) return check_report("test_serve_engine");

    tern_search_params_t beam4 = tern_search_default_params();
    tern_search_params_t nbest = beam4;
    nbest.beam_size = 5;
    nbest.num_hypotheses = 3;
    tern_result_t ref4[NSRC], ref5[NSRC];
    reference(model, &beam4, ref4);
    reference(model, &nbest, ref5);

    /* a request with its own parameters on a translator set up with beam 1: the request's win,
     * and the translator's own are unchanged afterwards */
    {
        tern_search_params_t gp = tern_search_default_params();
        gp.beam_size = 1;
        tern_translator_options_t o = tern_translator_default_options();
        o.search = &gp;
        o.threads_per_worker = 1;
        tern_translator_t *tr = NULL;
        CHECK(tern_translator_create(&tr, model, &o) == TERN_OK);
        tern_result_t r;
        tern_request_t req = tern_request_default();
        req.sources = &SRC[2];
        req.num_sources = 1;
        req.params = &nbest;
        CHECK(tern_translate(tr, &req, &r) == TERN_OK);
        CHECK(same_result(&r, &ref5[2]));
        tern_result_free(&r);
        tern_search_params_t bad = nbest;
        bad.num_hypotheses = 6;
        req.params = &bad;
        CHECK(tern_translate(tr, &req, &r) == TERN_ERR_INVALID_ARG);
        tern_search_params_t greedy = gp;
        tern_result_t g1, g2;
        CHECK(tern_translate_batch(tr, &SRC[2], 1, &g1) == TERN_OK);
        req.params = &greedy;
        CHECK(tern_translate(tr, &req, &g2) == TERN_OK);
        CHECK(g1.num_hypotheses == 1 && same_result(&g1, &g2));
        tern_result_free(&g1);
        tern_result_free(&g2);
        tern_translator_free(tr);
        int n = 0;
        CHECK(tern_model_source_tokens(model, "", &n) == TERN_OK);
        CHECK(strcmp(tern_version(), TERN_VERSION) == 0);
    }

    for (int cross = 1; cross >= 0; cross--) {
        engine_options_t eo;
        memset(&eo, 0, sizeof eo);
        eo.model_options = tern_model_default_options();
        eo.translator_options = tern_translator_default_options();
        eo.translator_options.threads_per_worker = 1;
        eo.search = tern_search_default_params();
        eo.workers = 2;
        eo.max_queue = 64;
        eo.cross_batching = cross;
        engine_model_spec_t spec = {"en-de", dir};
        engine_t *e = NULL;
        CHECK(engine_create(&e, &spec, 1, &eo) == TERN_OK);
        if (!e) break;
        engine_model_t *m = engine_find(e, "en-de");
        CHECK(m != NULL && engine_find(e, "de-en") == NULL);
        int ntok[NSRC];
        for (int i = 0; i < NSRC; i++) CHECK(engine_count_tokens(m, SRC[i], &ntok[i]) == TERN_OK);
        /* three requests of two sentences with the default options, two with n-best options,
         * one cancelled before it is decoded (it may or may not be), all queued at once */
        serve_request_t *r[6];
        for (int k = 0; k < 3; k++) r[k] = request_new(REQ_TRANSLATE, &beam4, 2, SRC + 2 * k, NULL, ntok + 2 * k);
        for (int k = 0; k < 2; k++) r[3 + k] = request_new(REQ_TRANSLATE, &nbest, 3, SRC + 3 * k, NULL, ntok + 3 * k);
        r[5] = request_new(REQ_TRANSLATE, &beam4, NSRC, SRC, NULL, ntok);
        for (int k = 0; k < 6; k++) CHECK(r[k] && engine_submit(m, r[k]) == 0);
        request_cancel(r[5]);
        /* over the bound: refused whole */
        serve_request_t *big = request_new(REQ_TRANSLATE, &beam4, 65, (const char *const[65]){0}, NULL, NULL);
        CHECK(big && engine_submit(m, big) == -1);
        request_release(big);
        /* reload while they wait */
        CHECK(engine_reload(e) == TERN_OK);
        for (int k = 0; k < 5; k++) {
            request_wait(r[k]);
            CHECK(request_status(r[k], NULL) == TERN_OK);
            int per = k < 3 ? 2 : 3, first = k < 3 ? 2 * k : 3 * (k - 3);
            for (int i = 0; i < per; i++) {
                const tern_result_t *got = request_result(r[k], i);
                CHECK_MSG(same_result(got, k < 3 ? &ref4[first + i] : &ref5[first + i]),
                          "cross=%d request %d sentence %d: '%s'", cross, k, i,
                          got->num_hypotheses ? got->hypotheses[0] : "(none)");
            }
        }
        request_wait(r[5]); /* a cancelled request completes too */
        for (int k = 0; k < 6; k++) request_release(r[k]);

        /* scoring: the log-probabilities of tern_score for the reference translations */
        const char *tgt[NSRC];
        for (int i = 0; i < NSRC; i++) tgt[i] = ref4[i].hypotheses[0];
        serve_request_t *sr = request_new(REQ_SCORE, &beam4, NSRC, SRC, tgt, ntok);
        CHECK(sr && engine_submit(m, sr) == 0);
        request_wait(sr);
        CHECK(request_status(sr, NULL) == TERN_OK);
        tern_translator_t *tr = NULL;
        tern_translator_options_t o = tern_translator_default_options();
        o.threads_per_worker = 1;
        CHECK(tern_translator_create(&tr, model, &o) == TERN_OK);
        for (int i = 0; i < NSRC; i++) {
            float *lp = NULL;
            int cnt = 0, got_cnt = 0;
            tern_request_t sq = tern_request_default();
            sq.sources = &SRC[i];
            sq.targets = &tgt[i];
            sq.num_sources = 1;
            CHECK(tern_score(tr, &sq, &lp, &cnt) == TERN_OK);
            const float *got = request_logprobs(sr, i, &got_cnt);
            CHECK_EQ_INT(got_cnt, cnt);
            for (int t = 0; t < cnt && t < got_cnt; t++) CHECK_NEAR(got[t], lp[t], 1e-5, 1e-5);
            free(lp);
        }
        tern_translator_free(tr);
        request_release(sr);
        engine_stats_t st;
        engine_model_stats(m, &st);
        CHECK(st.queued == 0 && st.running == 0 && st.reloads == 1);
        CHECK(st.batches >= 1 && st.batch_segments == st.segments);
        engine_free(e);
    }
    for (int i = 0; i < NSRC; i++) tern_result_free(&ref4[i]), tern_result_free(&ref5[i]);
    tern_model_free(model);
    return check_report("test_serve_engine");
}
