/*
 * test_api_callbacks.c — the C API's per-call hooks on the shipped model models/en-de (run from the
 * repository root): the per-sentence callback gives once per input exactly what
 * tern_translate_batch() gives (greedy and beam n-best, with scores); the greedy token events'
 * deltas concatenate to the final output; beam token events end with the final best hypothesis;
 * a cancellation flag set from another thread stops a long batch with TERN_ERR_CANCELLED and
 * leaves nothing allocated (run under ASan: make SAN=1); a callback returning nonzero stops the
 * call; the log callback receives the warnings instead of stderr; no_sort gives the same results with
 * batches cut in the input's order (the order of the result callbacks shows them), and so does
 * beams_apart (each row of a step its own forward).
 * The reference of every comparison is tern_translate_batch() itself (the path the CLI and the
 * CTranslate2 parity tests check), so any difference is the hooks' doing.
 */
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "tern.h"

/* One tern_translate() call: n sources with req's parameters and callbacks. */
static tern_status_t run(tern_translator_t *tr, const char *const *src, int n, tern_request_t *req,
                         tern_result_t *res) {
    req->sources = src;
    req->num_sources = n;
    return tern_translate(tr, req, res);
}

static const char *SENT[] = {
    "A man in an orange hat starring at something.",
    "A Boston Terrier is running on lush green grass in front of a white fence.",
    "A girl in karate uniform breaking a stick with a front kick.",
    "Five people wearing winter jackets and helmets stand in the snow, with snowmobiles in the background.",
    "People are fixing the roof of a house.",
    "",
    "A man in light colored clothing photographs a group of men wearing dark suits and hats standing around a woman dressed in a strapless gown.",
    "A group of people standing in front of an igloo.",
    "A boy in a red uniform is attempting to avoid getting out at home plate, while the catcher in the blue uniform is attempting to catch him.",
    "A guy works on a building.",
    "A man in a vest is sitting in a chair and holding magazines.",
    "A mother and her young song enjoying a beautiful day outside.",
};
#define NS ((int)(sizeof SENT / sizeof SENT[0]))

/* ---------------------------------------------------------------- per-sentence callback */

typedef struct {
    int calls[NS];
    tern_result_t got[NS]; /* deep copies */
} result_log_t;

static int on_result(int index, const tern_result_t *r, void *ud) {
    result_log_t *L = ud;
    if (index < 0 || index >= NS) return 1;
    L->calls[index]++;
    tern_result_t *c = &L->got[index];
    tern_result_free(c);
    c->num_hypotheses = r->num_hypotheses;
    c->hypotheses = calloc((size_t)r->num_hypotheses + 1, sizeof(char *));
    c->scores = r->scores ? calloc((size_t)r->num_hypotheses + 1, sizeof(float)) : NULL;
    for (int k = 0; k < r->num_hypotheses; k++) {
        c->hypotheses[k] = strdup(r->hypotheses[k]);
        if (c->scores) c->scores[k] = r->scores[k];
    }
    return 0;
}

static void check_results_equal(const tern_result_t *a, const tern_result_t *b, int i) {
    CHECK_EQ_INT(a->num_hypotheses, b->num_hypotheses);
    for (int k = 0; k < a->num_hypotheses && k < b->num_hypotheses; k++) {
        CHECK_MSG(strcmp(a->hypotheses[k], b->hypotheses[k]) == 0, "input %d hyp %d: '%s' vs '%s'", i, k,
                  a->hypotheses[k], b->hypotheses[k]);
        CHECK_MSG((a->scores == NULL) == (b->scores == NULL), "input %d: scores presence", i);
        if (a->scores && b->scores) CHECK_MSG(a->scores[k] == b->scores[k], "input %d hyp %d: score %.9g vs %.9g", i, k,
                                              a->scores[k], b->scores[k]);
    }
}

static void test_result_callback(tern_translator_t *tr, int beam, int nbest) {
    tern_search_params_t sp = tern_search_default_params();
    tern_request_t call = tern_request_default();
    call.params = &sp;
    sp.beam_size = beam;
    sp.num_hypotheses = nbest;
    sp.return_scores = 1;
    tern_result_t ref[NS], res[NS];
    CHECK_EQ_INT(run(tr, SENT, NS, &call, ref), TERN_OK);

    static result_log_t L;
    memset(&L, 0, sizeof L);
    call.on_result = on_result;
    call.on_result_data = &L;
    call.max_batch_size = 3; /* several batches */
    CHECK_EQ_INT(run(tr, SENT, NS, &call, res), TERN_OK);
    for (int i = 0; i < NS; i++) {
        CHECK_MSG(L.calls[i] == 1, "beam %d: input %d: %d calls", beam, i, L.calls[i]);
        check_results_equal(&ref[i], &res[i], i);
        check_results_equal(&ref[i], &L.got[i], i);
        tern_result_free(&res[i]);
        tern_result_free(&L.got[i]);
    }
    /* without a results array: the callback alone */
    memset(&L, 0, sizeof L);
    CHECK_EQ_INT(run(tr, SENT, NS, &call, NULL), TERN_OK);
    for (int i = 0; i < NS; i++) {
        CHECK_EQ_INT(L.calls[i], 1);
        check_results_equal(&ref[i], &L.got[i], i);
        tern_result_free(&L.got[i]);
        tern_result_free(&ref[i]);
    }
}

/* ---------------------------------------------------------------- no_sort: batches in input order */

typedef struct {
    int order[NS], n;
} order_log_t;

static int on_result_order(int index, const tern_result_t *r, void *ud) {
    order_log_t *L = ud;
    (void)r;
    if (L->n >= NS) return 1;
    L->order[L->n++] = index;
    return 0;
}

/* tern_request_t.no_sort: the same results as sorted batches; the order of on_result shows the
 * batches: sorted, the longest sources first; unsorted, consecutive sources in the input's order
 * (the empty input 5 is answered first, before any batch). no_sort 2 is refused. */
static void test_no_sort(tern_translator_t *tr, int beam) {
    tern_search_params_t sp = tern_search_default_params();
    sp.beam_size = beam;
    sp.return_scores = 1;
    tern_request_t call = tern_request_default();
    call.params = &sp;
    tern_result_t ref[NS], res[NS];
    CHECK_EQ_INT(run(tr, SENT, NS, &call, ref), TERN_OK);
    order_log_t L;
    call.on_result = on_result_order;
    call.on_result_data = &L;
    for (int mbs = 1; mbs <= 3; mbs += 2) {
        for (int no_sort = 0; no_sort <= 1; no_sort++) {
            memset(&L, 0, sizeof L);
            call.max_batch_size = mbs;
            call.no_sort = no_sort;
            CHECK_EQ_INT(run(tr, SENT, NS, &call, res), TERN_OK);
            CHECK_EQ_INT(L.n, NS);
            for (int i = 0; i < NS; i++) {
                check_results_equal(&ref[i], &res[i], i);
                tern_result_free(&res[i]);
            }
            CHECK_EQ_INT(L.order[0], 5);
            if (no_sort && mbs == 1) { /* one source a batch: exactly the input's order */
                static const int want[NS] = {5, 0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11};
                for (int k = 0; k < NS; k++) CHECK_MSG(L.order[k] == want[k], "beam %d: call %d is input %d, want %d",
                                                       beam, k, L.order[k], want[k]);
            } else if (no_sort) { /* batches {0,1,2} {3,4,6} {7,8,9} {10,11}: a batch's inputs finish in any order */
                static const int batch_of[NS] = {0, 0, 0, 1, 1, -1, 1, 2, 2, 2, 3, 3};
                for (int k = 1; k < NS; k++)
                    CHECK_MSG(batch_of[L.order[k]] == (k - 1) / 3, "beam %d: call %d is input %d (batch %d), want batch %d",
                              beam, k, L.order[k], batch_of[L.order[k]], (k - 1) / 3);
            } else if (mbs == 1) { /* sorted: longest first; inputs 6 and 8 are the two longest */
                CHECK_MSG((L.order[1] == 6 || L.order[1] == 8) && (L.order[2] == 6 || L.order[2] == 8),
                          "beam %d: sorted calls start %d, %d, %d", beam, L.order[0], L.order[1], L.order[2]);
            }
        }
    }
    /* beams_apart: each row its own forward, the same results (unsorted batches of 3 here) */
    call.beams_apart = 1;
    memset(&L, 0, sizeof L);
    CHECK_EQ_INT(run(tr, SENT, NS, &call, res), TERN_OK);
    CHECK_EQ_INT(L.n, NS);
    for (int i = 0; i < NS; i++) {
        check_results_equal(&ref[i], &res[i], i);
        tern_result_free(&res[i]);
    }
    call.beams_apart = 2;
    CHECK_EQ_INT(run(tr, SENT, NS, &call, res), TERN_ERR_INVALID_ARG);
    CHECK_MSG(strstr(tern_last_error(), "beams_apart must be 0 or 1 (got 2)") != NULL, "message '%s'", tern_last_error());
    call.beams_apart = 0;
    call.no_sort = 2;
    CHECK_EQ_INT(run(tr, SENT, NS, &call, res), TERN_ERR_INVALID_ARG);
    CHECK_MSG(strstr(tern_last_error(), "no_sort must be 0 or 1 (got 2)") != NULL, "message '%s'", tern_last_error());
    for (int i = 0; i < NS; i++) tern_result_free(&ref[i]);
}

/* ---------------------------------------------------------------- token callback */

typedef struct {
    char text[NS][4096];   /* greedy: concatenated deltas */
    char last[NS][4096];   /* text of the last event */
    int events[NS], lasts[NS], bad_step[NS], last_step[NS];
} token_log_t;

static int on_token(const tern_token_event_t *ev, void *ud) {
    token_log_t *L = ud;
    int i = ev->index;
    if (i < 0 || i >= NS) return 1;
    if (L->lasts[i]) L->bad_step[i]++; /* an event after the last one */
    if (ev->step >= 0 && ev->step != L->last_step[i] + 1) L->bad_step[i]++;
    if (ev->step >= 0) L->last_step[i] = ev->step;
    L->events[i]++;
    if (ev->delta) strncat(L->text[i], ev->delta, sizeof L->text[i] - strlen(L->text[i]) - 1);
    snprintf(L->last[i], sizeof L->last[i], "%s", ev->text);
    L->lasts[i] += ev->is_last;
    return 0;
}

static void test_token_callback(tern_translator_t *tr, int beam) {
    tern_search_params_t sp = tern_search_default_params();
    tern_request_t call = tern_request_default();
    call.params = &sp;
    sp.beam_size = beam;
    sp.num_hypotheses = 1;
    tern_result_t ref[NS], res[NS];
    CHECK_EQ_INT(run(tr, SENT, NS, &call, ref), TERN_OK);
    static token_log_t L;
    memset(&L, 0, sizeof L);
    for (int i = 0; i < NS; i++) L.last_step[i] = -1;
    call.on_token = on_token;
    call.on_token_data = &L;
    CHECK_EQ_INT(run(tr, SENT, NS, &call, res), TERN_OK);
    for (int i = 0; i < NS; i++) {
        check_results_equal(&ref[i], &res[i], i);
        if (SENT[i][0] == 0) {
            CHECK_EQ_INT(L.events[i], 0); /* empty inputs are not decoded */
        } else {
            CHECK_MSG(L.lasts[i] == 1, "beam %d input %d: %d last events", beam, i, L.lasts[i]);
            CHECK_MSG(L.bad_step[i] == 0, "beam %d input %d: steps out of order", beam, i);
            CHECK_MSG(strcmp(L.last[i], ref[i].hypotheses[0]) == 0, "beam %d input %d: last '%s' vs '%s'", beam, i,
                      L.last[i], ref[i].hypotheses[0]);
            if (beam == 1)
                CHECK_MSG(strcmp(L.text[i], ref[i].hypotheses[0]) == 0, "input %d: deltas '%s' vs '%s'", i, L.text[i],
                          ref[i].hypotheses[0]);
            CHECK_MSG(L.events[i] >= 2, "input %d: %d events", i, L.events[i]);
        }
        tern_result_free(&res[i]);
        tern_result_free(&ref[i]);
    }
}

/* ---------------------------------------------------------------- cancellation */

typedef struct {
    volatile int cancel;
    int results_seen; /* atomic */
} cancel_ctx_t;

static int count_result(int index, const tern_result_t *r, void *ud) {
    cancel_ctx_t *c = ud;
    __atomic_add_fetch(&c->results_seen, 1, __ATOMIC_SEQ_CST);
    return 0;
}

static void *canceller(void *arg) {
    cancel_ctx_t *c = arg;
    /* wait until the batch is under way (some sentence finished), then cancel */
    while (__atomic_load_n(&c->results_seen, __ATOMIC_SEQ_CST) == 0) usleep(1000);
    __atomic_store_n(&c->cancel, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static int stop_after_three(int index, const tern_result_t *r, void *ud) {
    int *n = ud;
    return ++*n >= 3;
}

static void test_cancel(tern_translator_t *tr) {
    enum { N = 600 };
    const char **src = malloc(N * sizeof *src);
    for (int i = 0; i < N; i++) src[i] = SENT[i % NS][0] ? SENT[i % NS] : SENT[0];
    tern_search_params_t sp = tern_search_default_params();
    tern_request_t call = tern_request_default();
    call.params = &sp;
    sp.beam_size = 5;
    call.max_batch_size = 4; /* many batches, many steps */
    cancel_ctx_t c = {0, 0};
    call.cancel = &c.cancel;
    call.on_result = count_result;
    call.on_result_data = &c;
    tern_result_t *res = malloc(N * sizeof *res);
    pthread_t th;
    pthread_create(&th, NULL, canceller, &c);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tern_status_t st = run(tr, src, N, &call, res);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pthread_join(th, NULL);
    CHECK_MSG(st == TERN_ERR_CANCELLED, "status %d (%s): %s", st, tern_status_string(st), tern_last_error());
    CHECK_MSG(c.results_seen < N, "all %d inputs finished before the cancellation", c.results_seen);
    int empty = 1;
    for (int i = 0; i < N; i++) empty &= res[i].num_hypotheses == 0 && res[i].hypotheses == NULL;
    CHECK_MSG(empty, "results left after a cancelled call");
    printf("cancelled after %d of %d inputs, %.3f s\n", c.results_seen, N,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));

    /* a flag already set: nothing is decoded */
    c.cancel = 1;
    c.results_seen = 0;
    CHECK_EQ_INT(run(tr, src, 8, &call, res), TERN_ERR_CANCELLED);
    CHECK_EQ_INT(c.results_seen, 0);

    /* a callback that asks to stop; greedy and beam */
    for (int beam = 1; beam <= 4; beam += 3) {
        int seen = 0;
        tern_search_params_t sp2 = tern_search_default_params();
        tern_request_t c2 = tern_request_default();
        c2.params = &sp2;
        sp2.beam_size = beam;
        c2.on_result = stop_after_three;
        c2.on_result_data = &seen;
        CHECK_EQ_INT(run(tr, src, 40, &c2, res), TERN_ERR_CANCELLED);
        CHECK_EQ_INT(seen, 3);
    }
    CHECK(strcmp(tern_status_string(TERN_ERR_CANCELLED), "cancelled") == 0);
    /* the translator still works after a cancelled call */
    tern_result_t r1;
    CHECK_EQ_INT(run(tr, src, 1, &call, &r1), TERN_ERR_CANCELLED); /* flag still set */
    c.cancel = 0;
    CHECK_EQ_INT(run(tr, src, 1, &call, &r1), TERN_OK);
    CHECK_EQ_INT(r1.num_hypotheses, 1);
    tern_result_free(&r1);
    free(res);
    free(src);
}

/* ---------------------------------------------------------------- log callback */

typedef struct {
    int n;
    char last[512];
    tern_log_level_t level;
} log_ctx_t;

static void on_log(tern_log_level_t level, const char *msg, void *ud) {
    log_ctx_t *c = ud;
    c->n++;
    c->level = level;
    snprintf(c->last, sizeof c->last, "%s", msg);
}

static void test_log_callback(const tern_model_t *model) {
    tern_search_params_t sp = tern_search_default_params();
    sp.beam_size = 1;
    tern_translator_options_t to = tern_translator_default_options();
    to.search = &sp;
    to.max_input_length = 4; /* every input below is truncated: a warning per input */
    to.threads_per_worker = 1;
    tern_translator_t *tr = NULL;
    CHECK_EQ_INT(tern_translator_create(&tr, model, &to), TERN_OK);
    log_ctx_t c = {0, "", TERN_LOG_QUIET};
    tern_set_log_callback(on_log, &c);
    tern_result_t r[2], r2;
    CHECK_EQ_INT(tern_translate_batch(tr, SENT, 2, r), TERN_OK);
    CHECK_EQ_INT(c.n, 2);
    CHECK_EQ_INT(c.level, TERN_LOG_WARN);
    CHECK_MSG(strstr(c.last, "input 1") && strstr(c.last, "truncated"), "message '%s'", c.last);
    tern_set_log_level(TERN_LOG_ERROR); /* below the level: not given */
    CHECK_EQ_INT(tern_translate_batch(tr, SENT, 1, &r2), TERN_OK);
    CHECK_EQ_INT(c.n, 2);
    tern_set_log_level(TERN_LOG_WARN);
    tern_set_log_callback(NULL, NULL);
    for (int i = 0; i < 2; i++) tern_result_free(&r[i]);
    tern_result_free(&r2);
    tern_translator_free(tr);
}

int main(void) {
    if (access("models/en-de/config.json", R_OK) != 0) {
        fprintf(stderr, "models/en-de not found: run from the repository root\n");
        return 1;
    }
    tern_model_t *model = NULL;
    tern_model_options_t mo = tern_model_default_options();
    if (tern_model_load(&model, "models/en-de", &mo) != TERN_OK) {
        fprintf(stderr, "cannot load models/en-de: %s\n", tern_last_error());
        return 1;
    }
    tern_translator_options_t to = tern_translator_default_options();
    to.threads_per_worker = 1;
    tern_translator_t *tr = NULL;
    CHECK_EQ_INT(tern_translator_create(&tr, model, &to), TERN_OK);
    test_result_callback(tr, 1, 1);
    test_result_callback(tr, 4, 2);
    test_token_callback(tr, 1);
    test_token_callback(tr, 4);
    test_cancel(tr);
    test_no_sort(tr, 1);
    test_no_sort(tr, 4);
    test_log_callback(model);
    tern_translator_free(tr);
    tern_model_free(model);
    return check_report("test_api_callbacks");
}
