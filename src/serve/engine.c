/*
 * engine.c — one segment queue per model, workers that batch segments across requests, model
 * generations swapped in by a reload (see engine.h for the contract).
 *
 * Locking: each model has one mutex guarding its queue, its current generation pointer and the
 * reference counts of its generations, its statistics and the pending counts of the requests
 * queued on it. A request's result slots are written by the worker that ran its segment, outside
 * the lock (each slot by one worker), and read by the request's owner only after completion
 * (published under the lock, signalled through the eventfd).
 */
#include "serve/engine.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/base.h"
#include "batch/translator.h"

typedef struct segment {
    serve_request_t *req;
    int idx, ntok;
    struct segment *next;
} segment_t;

struct serve_request {
    request_kind_t kind;
    tern_search_params_t params;
    char *src_lang, *tgt_lang; /* a multilingual model's languages (request_set_langs), or NULL */
    int n;
    char **src, **tgt;
    segment_t *segs;          /* [n] */
    tern_result_t *results;   /* [n] (translate) */
    float **logprobs;         /* [n] (score) */
    int *counts;              /* [n] (score) */
    unsigned want;            /* REQ_WANT_* (translate): what else each segment's result carries */
    tern_token_scores_t *ts;  /* [n] with REQ_WANT_TOKEN_SCORES */
    tern_attention_t *att;    /* [n] with REQ_WANT_ATTENTION */
    int pending;              /* segments not yet done (model lock) */
    int done;                 /* completed (model lock) */
    atomic_int cancelled;
    atomic_int refs;
    tern_status_t status;
    char error[512];
    int efd;
    engine_model_t *model;
};

typedef struct {
    tern_model_t *model;
    tern_search_params_t search; /* the operator's flags over the model's own defaults */
    tern_translator_t **tr; /* [workers] */
    int refs;               /* model lock */
} generation_t;

struct engine_model {
    engine_t *engine;
    char name[64];
    char dir[1024];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    segment_t *head, *tail;
    int queued, running, stop;
    generation_t *gen;
    char **langs;             /* a multilingual model's language codes (engine_model_languages) */
    int n_langs;
    pthread_t *threads;
    int n_threads;
    engine_stats_t stats;
};

struct engine {
    engine_options_t opt;
    engine_model_t *models;
    int n_models;
};

typedef struct {
    engine_model_t *m;
    int w;
} worker_arg_t;

/* ------------------------------------------------------------------ generations */

static void gen_free(generation_t *g, int workers) {
    if (!g) return;
    if (g->tr)
        for (int i = 0; i < workers; i++) tern_translator_free(g->tr[i]);
    free(g->tr);
    tern_model_free(g->model);
    free(g);
}

static tern_status_t gen_load(const engine_options_t *o, const char *dir, generation_t **out) {
    *out = NULL;
    generation_t *g = calloc(1, sizeof *g);
    if (!g) return tern_error(TERN_ERR_NOMEM, "out of memory");
    g->refs = 1;
    tern_status_t st = tern_model_load(&g->model, dir, &o->model_options);
    if (st) {
        free(g);
        return st;
    }
    g->tr = calloc((size_t)o->workers, sizeof *g->tr);
    if (!g->tr) {
        gen_free(g, o->workers);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    tern_translator_options_t to = o->translator_options;
    g->search = search_params_over(&o->search, o->search_set, tern_model_search_params(g->model, NULL));
    to.search = &g->search;
    to.workers = o->workers;
    for (int i = 0; i < o->workers; i++)
        if ((st = tern_translator_create(&g->tr[i], g->model, &to))) {
            gen_free(g, o->workers);
            return st;
        }
    *out = g;
    return TERN_OK;
}

/* Takes a reference on the current generation (lock held). */
static generation_t *gen_acquire_locked(engine_model_t *m) {
    m->gen->refs++;
    return m->gen;
}

/* Drops a reference (lock held); returns the generation to free after unlocking, or NULL. */
static generation_t *gen_release_locked(engine_model_t *m, generation_t *g) {
    return --g->refs == 0 ? g : NULL;
}

/* ------------------------------------------------------------------ requests */

static void request_free(serve_request_t *r) {
    for (int i = 0; i < r->n; i++) {
        free(r->src ? r->src[i] : NULL);
        if (r->tgt) free(r->tgt[i]);
        if (r->results) tern_result_free(&r->results[i]);
        if (r->logprobs) free(r->logprobs[i]);
        if (r->ts) tern_token_scores_free(&r->ts[i]);
        if (r->att) tern_attention_free(&r->att[i]);
    }
    free(r->src_lang), free(r->tgt_lang);
    free(r->ts), free(r->att);
    free(r->src), free(r->tgt), free(r->segs), free(r->results), free(r->logprobs), free(r->counts);
    if (r->efd >= 0) close(r->efd);
    free(r);
}

serve_request_t *request_new(request_kind_t kind, const tern_search_params_t *params, int n,
                             const char *const *sources, const char *const *targets, const int *ntokens) {
    serve_request_t *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->efd = -1;
    r->kind = kind;
    r->params = *params;
    r->n = n;
    atomic_init(&r->refs, 1);
    atomic_init(&r->cancelled, 0);
    size_t k = (size_t)(n > 0 ? n : 1);
    r->src = calloc(k, sizeof *r->src);
    r->segs = calloc(k, sizeof *r->segs);
    if (kind == REQ_TRANSLATE) r->results = calloc(k, sizeof *r->results);
    else {
        r->tgt = calloc(k, sizeof *r->tgt);
        r->logprobs = calloc(k, sizeof *r->logprobs);
        r->counts = calloc(k, sizeof *r->counts);
    }
    r->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int ok = r->src && r->segs && r->efd >= 0 &&
             (kind == REQ_TRANSLATE ? r->results != NULL : (r->tgt && r->logprobs && r->counts));
    for (int i = 0; ok && i < n; i++) {
        r->src[i] = strdup(sources[i] ? sources[i] : "");
        if (!r->src[i]) ok = 0;
        if (ok && r->tgt && !(r->tgt[i] = strdup(targets[i] ? targets[i] : ""))) ok = 0;
        r->segs[i].req = r;
        r->segs[i].idx = i;
        r->segs[i].ntok = ntokens ? ntokens[i] : 1;
        if (r->segs[i].ntok < 1) r->segs[i].ntok = 1;
    }
    if (!ok) {
        request_free(r);
        return NULL;
    }
    return r;
}

int request_set_langs(serve_request_t *r, const char *source_lang, const char *target_lang) {
    free(r->src_lang), free(r->tgt_lang);
    r->src_lang = source_lang ? strdup(source_lang) : NULL;
    r->tgt_lang = target_lang ? strdup(target_lang) : NULL;
    return (source_lang && !r->src_lang) || (target_lang && !r->tgt_lang) ? -1 : 0;
}

void request_release(serve_request_t *r) {
    if (r && atomic_fetch_sub(&r->refs, 1) == 1) request_free(r);
}

void request_cancel(serve_request_t *r) { atomic_store(&r->cancelled, 1); }

int request_fd(const serve_request_t *r) { return r->efd; }

void request_wait(serve_request_t *r) {
    struct pollfd pf = {r->efd, POLLIN, 0};
    while (poll(&pf, 1, -1) < 0 && errno == EINTR) {
    }
}

tern_status_t request_status(const serve_request_t *r, const char **message) {
    /* the results were published under the model's lock: taking it orders our reads after them */
    if (r->model) {
        pthread_mutex_lock(&r->model->mu);
        pthread_mutex_unlock(&r->model->mu);
    }
    if (message) *message = r->error;
    return r->status;
}
int request_size(const serve_request_t *r) { return r->n; }
const tern_result_t *request_result(const serve_request_t *r, int i) { return &r->results[i]; }
int request_want(serve_request_t *r, unsigned want) {
    size_t k = (size_t)(r->n > 0 ? r->n : 1);
    if (r->kind != REQ_TRANSLATE) return -1;
    if ((want & REQ_WANT_TOKEN_SCORES) && !r->ts && !(r->ts = calloc(k, sizeof *r->ts))) return -1;
    if ((want & REQ_WANT_ATTENTION) && !r->att && !(r->att = calloc(k, sizeof *r->att))) return -1;
    r->want |= want;
    return 0;
}
const tern_token_scores_t *request_token_scores(const serve_request_t *r, int i) { return r->ts ? &r->ts[i] : NULL; }
const tern_attention_t *request_attention(const serve_request_t *r, int i) { return r->att ? &r->att[i] : NULL; }
const float *request_logprobs(const serve_request_t *r, int i, int *count) {
    *count = r->counts[i];
    return r->logprobs[i];
}

/* Marks one segment finished (lock held); completes the request with its last one. Returns the
 * request when the engine's reference must be dropped (after unlocking). */
static serve_request_t *segment_done_locked(serve_request_t *r) {
    if (--r->pending > 0) return NULL;
    r->done = 1;
    uint64_t one = 1;
    if (write(r->efd, &one, sizeof one) < 0) { /* an eventfd write of 1 cannot fail here */ }
    return r;
}

/* ------------------------------------------------------------------ queue and batches */

static int same_str(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

static int same_key(const segment_t *a, const segment_t *b, int cross) {
    if (!cross) return a->req == b->req;
    if (a->req == b->req) return 1;
    const tern_search_params_t *x = &a->req->params, *y = &b->req->params;
    /* one batch, one pair of languages (a multilingual model's request carries them) */
    return same_str(a->req->src_lang, b->req->src_lang) && same_str(a->req->tgt_lang, b->req->tgt_lang) &&
           a->req->kind == b->req->kind && a->req->want == b->req->want && x->beam_size == y->beam_size &&
           x->num_hypotheses == y->num_hypotheses &&
           x->length_penalty == y->length_penalty && x->length_norm == y->length_norm &&
           x->coverage_penalty == y->coverage_penalty && x->eos_policy == y->eos_policy &&
           x->early_stop == y->early_stop && x->max_length_a == y->max_length_a &&
           x->max_length_b == y->max_length_b && x->max_decoding_length == y->max_decoding_length &&
           x->min_length == y->min_length && x->return_scores == y->return_scores &&
           x->prune_width == y->prune_width && x->prune_threshold == y->prune_threshold &&
           x->sampling_topk == y->sampling_topk && x->sampling_topp == y->sampling_topp &&
           x->sampling_temperature == y->sampling_temperature && x->num_samples == y->num_samples &&
           x->seed == y->seed && x->repetition_penalty == y->repetition_penalty && x->patience == y->patience &&
           x->prefix_bias_beta == y->prefix_bias_beta &&
           x->no_repeat_ngram_size == y->no_repeat_ngram_size;
}

static int cmp_seg_len(const void *a, const void *b) {
    const segment_t *x = *(segment_t *const *)a, *y = *(segment_t *const *)b;
    return x->ntok - y->ntok;
}

/* Takes the next batch off the queue (lock held): the oldest waiting segment and the segments
 * that can share its batch (same request kind and options), length-sorted, as many as the token
 * budget (segments x longest) and the size cap allow, nearest in length first. Segments of
 * cancelled requests are dropped on the way (their requests returned in *dropped). */
static int take_batch(engine_model_t *m, segment_t **cand, segment_t **batch, int cap,
                      serve_request_t **dropped, int *n_dropped) {
    const engine_options_t *o = &m->engine->opt;
    *n_dropped = 0;
    /* drop cancelled segments */
    segment_t **pp = &m->head, *last = NULL;
    while (*pp) {
        segment_t *s = *pp;
        if (atomic_load(&s->req->cancelled)) {
            *pp = s->next;
            m->queued--;
            serve_request_t *r = segment_done_locked(s->req);
            if (r) dropped[(*n_dropped)++] = r;
        } else {
            last = s;
            pp = &s->next;
        }
    }
    m->tail = last;
    if (!m->head) return 0;
    segment_t *anchor = m->head;
    int nc = 0;
    for (segment_t *s = m->head; s && nc < cap; s = s->next)
        if (same_key(anchor, s, o->cross_batching)) cand[nc++] = s;
    qsort(cand, (size_t)nc, sizeof *cand, cmp_seg_len); /* anchor's position found below */
    int p = 0;
    while (cand[p] != anchor) p++;
    long budget = o->translator_options.max_batch_tokens;
    int size_cap = o->translator_options.max_batch_size > 0 ? o->translator_options.max_batch_size : cap;
    int i = p, j = p;
    for (int grew = 1; grew && j - i + 1 < size_cap;) {
        grew = 0;
        if (i > 0 && (long)(j - i + 2) * cand[j]->ntok <= budget) i--, grew = 1;
        else if (j + 1 < nc && (long)(j - i + 2) * cand[j + 1]->ntok <= budget) j++, grew = 1;
    }
    int b = 0;
    for (int k = i; k <= j; k++) {
        batch[b++] = cand[k];
        cand[k]->ntok = -cand[k]->ntok; /* mark taken (restored below) */
    }
    pp = &m->head;
    last = NULL;
    while (*pp) {
        segment_t *s = *pp;
        if (s->ntok < 0) {
            s->ntok = -s->ntok;
            *pp = s->next;
        } else {
            last = s;
            pp = &s->next;
        }
    }
    m->tail = last;
    m->queued -= b;
    return b;
}

/* The batch's results into their requests' slots, or its error (lock held); returns how many
 * requests it completed (in finished). */
static int publish_locked(segment_t **batch, int b, request_kind_t kind, tern_status_t st, const char *err,
                          tern_result_t *res, float **lp, int *cnt, tern_token_scores_t *ts, tern_attention_t *att,
                          serve_request_t **finished) {
    int nf = 0;
    for (int k = 0; k < b; k++) {
        serve_request_t *r = batch[k]->req;
        int i = batch[k]->idx;
        if (st) {
            if (!r->status) {
                r->status = st;
                snprintf(r->error, sizeof r->error, "%s", err);
            }
        } else if (kind == REQ_TRANSLATE) {
            r->results[i] = res[k];
            memset(&res[k], 0, sizeof res[k]);
            if (r->ts) r->ts[i] = ts[k], memset(&ts[k], 0, sizeof ts[k]);
            if (r->att) r->att[i] = att[k], memset(&att[k], 0, sizeof att[k]);
        } else {
            r->logprobs[i] = lp[k];
            r->counts[i] = cnt[k];
            lp[k] = NULL;
        }
        serve_request_t *fin = segment_done_locked(r);
        if (fin) finished[nf++] = fin;
    }
    return nf;
}

/* A worker's buffers, for up to a queue's worth (cap) of segments. */
typedef struct {
    segment_t **cand, **batch;
    serve_request_t **finished; /* (2 cap) */
    const char **src, **tgt;
    long *sidx; /* each segment's index in its request (the sampling keys) */
    tern_result_t *res;
    float **lp;
    int *cnt;
    tern_token_scores_t *ts;
    tern_attention_t *att;
} worker_bufs_t;

/* 1 when all of them are there. */
static int worker_bufs_alloc(worker_bufs_t *w, int cap) {
    w->cand = malloc((size_t)cap * sizeof *w->cand);
    w->batch = malloc((size_t)cap * sizeof *w->batch);
    w->finished = malloc((size_t)(2 * cap) * sizeof *w->finished);
    w->src = malloc((size_t)cap * sizeof *w->src);
    w->tgt = malloc((size_t)cap * sizeof *w->tgt);
    w->res = calloc((size_t)cap, sizeof *w->res);
    w->lp = calloc((size_t)cap, sizeof *w->lp);
    w->cnt = calloc((size_t)cap, sizeof *w->cnt);
    w->sidx = calloc((size_t)cap, sizeof *w->sidx);
    w->ts = calloc((size_t)cap, sizeof *w->ts);
    w->att = calloc((size_t)cap, sizeof *w->att);
    return w->cand && w->batch && w->finished && w->src && w->tgt && w->res && w->lp && w->cnt && w->sidx && w->ts &&
           w->att;
}

static void worker_bufs_free(worker_bufs_t *w) {
    free(w->cand), free(w->batch), free(w->finished), free(w->src), free(w->tgt), free(w->res), free(w->lp),
        free(w->cnt), free(w->sidx), free(w->ts), free(w->att);
}

/* The nf finished requests released outside the lock (held before and after). */
static void release_unlocked(engine_model_t *m, serve_request_t **finished, int nf) {
    pthread_mutex_unlock(&m->mu);
    for (int k = 0; k < nf; k++) request_release(finished[k]);
    pthread_mutex_lock(&m->mu);
}

/* Out of memory at the worker's start: the next queued segment fails (lock held). */
static void fail_next_segment_locked(engine_model_t *m) {
    segment_t *s = m->head;
    m->head = s->next;
    if (!m->head) m->tail = NULL;
    m->queued--;
    s->req->status = TERN_ERR_NOMEM;
    snprintf(s->req->error, sizeof s->req->error, "out of memory");
    serve_request_t *r = segment_done_locked(s->req);
    pthread_mutex_unlock(&m->mu);
    if (r) request_release(r);
    pthread_mutex_lock(&m->mu);
}

/* Translates or scores the b segments of the batch with translator tr (lock not held); err (512
 * bytes) gets an error's text, *tokens the segments' source tokens and *width the longest. */
static tern_status_t run_batch(tern_translator_t *tr, worker_bufs_t *w, int b, request_kind_t kind, tern_request_t *req,
                               char *err, long *tokens, int *width) {
    for (int k = 0; k < b; k++) {
        w->src[k] = w->batch[k]->req->src[w->batch[k]->idx];
        w->sidx[k] = w->batch[k]->idx; /* sampling: the segment's index in its own request */
        if (kind == REQ_SCORE) w->tgt[k] = w->batch[k]->req->tgt[w->batch[k]->idx];
        *tokens += w->batch[k]->ntok;
        if (w->batch[k]->ntok > *width) *width = w->batch[k]->ntok;
    }
    tern_status_t st;
    req->sources = w->src;
    req->num_sources = b;
    req->source_index = w->sidx;
    req->targets = kind == REQ_SCORE ? w->tgt : NULL;
    unsigned want = w->batch[0]->req->want; /* equal in a batch (same_key) */
    req->token_scores = kind == REQ_TRANSLATE && (want & REQ_WANT_TOKEN_SCORES) ? w->ts : NULL;
    req->attention = kind == REQ_TRANSLATE && (want & REQ_WANT_ATTENTION) ? w->att : NULL;
    if (kind == REQ_TRANSLATE) st = tern_translate(tr, req, w->res);
    else st = tern_score(tr, req, w->lp, w->cnt);
    if (st) snprintf(err, 512, "%s: %s", tern_status_string(st), tern_last_error());
    return st;
}

/* A decoded batch of b segments (width: the longest source, tokens: all of them) in the model's
 * statistics (lock held). */
static void count_batch_locked(engine_model_t *m, int b, int width, long tokens) {
    m->stats.batches++;
    m->stats.batch_segments += (uint64_t)b;
    m->stats.batch_tokens += (uint64_t)b * (uint64_t)width;
    m->stats.segments += (uint64_t)b;
    m->stats.source_tokens += (uint64_t)tokens;
    int h = 0;
    while (h < 10 && b > (1 << h)) h++;
    m->stats.batch_size_hist[h]++;
}

/* The batch of b segments taken (lock held before and after; nf requests finished in the taking):
 * decoded outside the lock by the worker's translator of the current generation, its results
 * published, its requests released. */
static void serve_batch_locked(engine_model_t *m, int worker, worker_bufs_t *w, int b, int nf) {
    engine_t *e = m->engine;
    generation_t *g = gen_acquire_locked(m);
    m->running += b;
    request_kind_t kind = w->batch[0]->req->kind;
    tern_request_t req = tern_request_default();
    req.params = &w->batch[0]->req->params;
    req.source_lang = w->batch[0]->req->src_lang; /* the batch's requests share them (same_key) */
    req.target_lang = w->batch[0]->req->tgt_lang;
    pthread_mutex_unlock(&m->mu);

    for (int k = 0; k < nf; k++) request_release(w->finished[k]);
    long tokens = 0;
    int width = 0;
    char err[512] = "";
    tern_status_t st = run_batch(g->tr[worker], w, b, kind, &req, err, &tokens, &width);

    pthread_mutex_lock(&m->mu);
    nf = publish_locked(w->batch, b, kind, st, err, w->res, w->lp, w->cnt, w->ts, w->att, w->finished);
    m->running -= b;
    count_batch_locked(m, b, width, tokens);
    generation_t *old = gen_release_locked(m, g);
    pthread_mutex_unlock(&m->mu);
    if (old) gen_free(old, e->opt.workers);
    for (int k = 0; k < nf; k++) request_release(w->finished[k]);
    pthread_mutex_lock(&m->mu);
}

static void *worker_main(void *p) {
    worker_arg_t a = *(worker_arg_t *)p;
    free(p);
    engine_model_t *m = a.m;
    engine_t *e = m->engine;
    int cap = e->opt.max_queue > 0 ? e->opt.max_queue : 1;
    worker_bufs_t w = {0};
    int ok = worker_bufs_alloc(&w, cap);
    pthread_mutex_lock(&m->mu);
    for (;;) {
        while (!m->stop && !m->head) pthread_cond_wait(&m->cv, &m->mu);
        if (!m->head && m->stop) break;
        int nf = 0;
        int b = ok ? take_batch(m, w.cand, w.batch, cap, w.finished, &nf) : 0;
        if (!ok) { /* out of memory at start: fail what comes */
            fail_next_segment_locked(m);
            continue;
        }
        if (b == 0) {
            release_unlocked(m, w.finished, nf);
            continue;
        }
        serve_batch_locked(m, a.w, &w, b, nf);
    }
    pthread_mutex_unlock(&m->mu);
    worker_bufs_free(&w);
    return NULL;
}

int engine_submit(engine_model_t *m, serve_request_t *r) {
    engine_t *e = m->engine;
    pthread_mutex_lock(&m->mu);
    if (m->stop || m->queued + r->n > e->opt.max_queue) {
        pthread_mutex_unlock(&m->mu);
        return -1;
    }
    r->model = m;
    if (r->n == 0) {
        r->done = 1;
        uint64_t one = 1;
        if (write(r->efd, &one, sizeof one) < 0) { /* cannot fail */ }
        pthread_mutex_unlock(&m->mu);
        return 0;
    }
    atomic_fetch_add(&r->refs, 1);
    r->pending = r->n;
    for (int i = 0; i < r->n; i++) {
        segment_t *s = &r->segs[i];
        s->next = NULL;
        if (m->tail) m->tail->next = s;
        else m->head = s;
        m->tail = s;
    }
    m->queued += r->n;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    return 0;
}

/* ------------------------------------------------------------------ engine */

tern_status_t engine_create(engine_t **out, const engine_model_spec_t *specs, int n, const engine_options_t *o) {
    *out = NULL;
    if (n < 1) return tern_error(TERN_ERR_INVALID_ARG, "no model");
    if (o->workers < 1 || o->max_queue < 1)
        return tern_error(TERN_ERR_INVALID_ARG, "workers and max_queue must be >= 1");
    engine_t *e = calloc(1, sizeof *e);
    if (!e) return tern_error(TERN_ERR_NOMEM, "out of memory");
    e->opt = *o;
    e->models = calloc((size_t)n, sizeof *e->models);
    if (!e->models) {
        free(e);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    tern_status_t st = TERN_OK;
    for (int i = 0; i < n; i++) {
        engine_model_t *m = &e->models[i];
        m->engine = e;
        snprintf(m->name, sizeof m->name, "%s", specs[i].name);
        snprintf(m->dir, sizeof m->dir, "%s", specs[i].dir);
        pthread_mutex_init(&m->mu, NULL);
        pthread_cond_init(&m->cv, NULL);
        e->n_models = i + 1;
        if ((st = gen_load(o, m->dir, &m->gen))) {
            tern_error_prefix(st, "model %s (%s)", m->name, m->dir);
            engine_free(e);
            return st;
        }
        tern_model_info_t info = tern_model_info(m->gen->model);
        if (info.num_languages > 0) {
            if (!(m->langs = calloc((size_t)info.num_languages, sizeof *m->langs))) st = TERN_ERR_NOMEM;
            for (int k = 0; !st && k < info.num_languages; k++)
                if (!(m->langs[m->n_langs++] = strdup(info.languages[k]))) st = TERN_ERR_NOMEM;
            if (st) {
                engine_free(e);
                return tern_error(TERN_ERR_NOMEM, "out of memory");
            }
        }
    }
    for (int i = 0; i < n; i++) {
        engine_model_t *m = &e->models[i];
        m->threads = calloc((size_t)o->workers, sizeof *m->threads);
        if (!m->threads) {
            engine_free(e);
            return tern_error(TERN_ERR_NOMEM, "out of memory");
        }
        for (int w = 0; w < o->workers; w++) {
            worker_arg_t *a = malloc(sizeof *a);
            if (a) {
                a->m = m;
                a->w = w;
            }
            if (!a || pthread_create(&m->threads[w], NULL, worker_main, a)) {
                free(a);
                engine_free(e);
                return tern_error(TERN_ERR_INTERNAL, "cannot start a worker thread");
            }
            m->n_threads = w + 1;
        }
    }
    *out = e;
    return TERN_OK;
}

void engine_free(engine_t *e) {
    if (!e) return;
    for (int i = 0; i < e->n_models; i++) {
        engine_model_t *m = &e->models[i];
        pthread_mutex_lock(&m->mu);
        m->stop = 1;
        pthread_cond_broadcast(&m->cv);
        pthread_mutex_unlock(&m->mu);
        for (int w = 0; w < m->n_threads; w++) pthread_join(m->threads[w], NULL);
        free(m->threads);
        gen_free(m->gen, e->opt.workers);
        for (int k = 0; k < m->n_langs; k++) free(m->langs[k]);
        free(m->langs);
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->cv);
    }
    free(e->models);
    free(e);
}

int engine_num_models(const engine_t *e) { return e->n_models; }
engine_model_t *engine_model_at(engine_t *e, int i) { return i >= 0 && i < e->n_models ? &e->models[i] : NULL; }
engine_model_t *engine_find(engine_t *e, const char *name) {
    for (int i = 0; i < e->n_models; i++)
        if (!strcmp(e->models[i].name, name)) return &e->models[i];
    return NULL;
}
const char *engine_model_name(const engine_model_t *m) { return m->name; }
const char *engine_model_dir(const engine_model_t *m) { return m->dir; }
const char *const *engine_model_languages(const engine_model_t *m, int *n) {
    *n = m->n_langs;
    return (const char *const *)m->langs;
}
tern_search_params_t engine_default_params(const engine_t *e) { return e->opt.search; }

void engine_model_stats(engine_model_t *m, engine_stats_t *out) {
    pthread_mutex_lock(&m->mu);
    *out = m->stats;
    out->queued = m->queued;
    out->running = m->running;
    pthread_mutex_unlock(&m->mu);
}

tern_search_params_t engine_model_params(engine_model_t *m) {
    pthread_mutex_lock(&m->mu);
    tern_search_params_t p = m->gen->search;
    pthread_mutex_unlock(&m->mu);
    return p;
}

tern_status_t engine_count_tokens(engine_model_t *m, const char *text, int *count) {
    pthread_mutex_lock(&m->mu);
    generation_t *g = gen_acquire_locked(m);
    pthread_mutex_unlock(&m->mu);
    tern_status_t st = tern_model_source_tokens(g->model, text, count);
    pthread_mutex_lock(&m->mu);
    generation_t *old = gen_release_locked(m, g);
    pthread_mutex_unlock(&m->mu);
    if (old) gen_free(old, m->engine->opt.workers);
    return st;
}

tern_status_t engine_source_pieces(engine_model_t *m, const char *text, char ***pieces, int *n) {
    *pieces = NULL, *n = 0;
    pthread_mutex_lock(&m->mu);
    generation_t *g = gen_acquire_locked(m);
    pthread_mutex_unlock(&m->mu);
    const tern_model_t *m0 = g->model->n_members ? g->model->members[0] : g->model;
    int *ids = NULL, len = 0, trunc = 0, cap = m->engine->opt.translator_options.max_input_length;
    tern_status_t st = model_encode_source(m0, text, strlen(text), cap > 0 ? cap : 1024, &ids, &len, &trunc);
    if (!st && len > 0) {
        if (!(*pieces = calloc((size_t)len, sizeof(char *)))) st = tern_error(TERN_ERR_NOMEM, "out of memory");
        for (int i = 0; !st && i < len; i++) {
            const char *piece = vocab_token(m0->src_vocab, ids[i]);
            if (!((*pieces)[i] = strdup(piece ? piece : ""))) st = tern_error(TERN_ERR_NOMEM, "out of memory");
            else *n = i + 1;
        }
    }
    free(ids);
    if (st) engine_pieces_free(*pieces, *n), *pieces = NULL, *n = 0;
    pthread_mutex_lock(&m->mu);
    generation_t *old = gen_release_locked(m, g);
    pthread_mutex_unlock(&m->mu);
    if (old) gen_free(old, m->engine->opt.workers);
    return st;
}

void engine_pieces_free(char **pieces, int n) {
    for (int i = 0; pieces && i < n; i++) free(pieces[i]);
    free(pieces);
}

tern_status_t engine_reload(engine_t *e) {
    tern_status_t first = TERN_OK;
    for (int i = 0; i < e->n_models; i++) {
        engine_model_t *m = &e->models[i];
        generation_t *g = NULL;
        tern_status_t st = gen_load(&e->opt, m->dir, &g);
        pthread_mutex_lock(&m->mu);
        generation_t *old = NULL;
        if (st) m->stats.reload_failures++;
        else {
            old = gen_release_locked(m, m->gen);
            m->gen = g;
            m->stats.reloads++;
        }
        pthread_mutex_unlock(&m->mu);
        if (old) gen_free(old, e->opt.workers);
        if (st && !first) first = tern_error_prefix(st, "reloading model %s (%s)", m->name, m->dir);
    }
    return first;
}
