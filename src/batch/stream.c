/*
 * stream.c — tern_translate_stream(): translates a stream of lines in constant memory.
 *
 * Lines (and their extras) come from the request's read_source callback; they are read ahead in chunks (read_ahead × the batch token budget), tokenized, sorted by
 * length (not with the request's no_sort: then in the input's order) and cut into batches by the
 * token budget; `workers` translators, each with its own
 * state and intra-op threads but one shared read-only model, take batches from the chunk; the
 * chunk's results go to on_line in the input's order. One result per input line, always.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "batch/extras.h"
#include "batch/translator.h"

typedef struct {
    int start, count; /* into order[] */
} batch_t;

typedef struct {
    const tern_translator_options_t *opt;
    int **ids;
    int *len;
    search_sentence_t **sd;  /* per-sentence search data (NULL: none) */
    int *order;         /* sentence indices sorted by length, longest first */
    batch_t *batches;
    int n_batches, next;
    long line0;         /* the input line of sentence 0 (the sampling keys) */
    search_result_t *res;
    pthread_mutex_t mu;
    tern_status_t status;
    char error[1024];
} work_t;

typedef struct {
    work_t *w;
    tern_translator_t *tr;
} worker_arg_t;

static void *worker_main(void *p) {
    worker_arg_t *a = p;
    work_t *w = a->w;
    translator_set_threads(w->opt);
    int **bsrc = NULL;
    int *blen = NULL;
    search_result_t *bres = NULL;
    const search_sentence_t **bsd = NULL;
    uint64_t *bkey = NULL;
    int cap = 0;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        int b = w->status == TERN_OK && w->next < w->n_batches ? w->next++ : -1;
        pthread_mutex_unlock(&w->mu);
        if (b < 0) break;
        batch_t *bt = &w->batches[b];
        if (bt->count > cap) {
            cap = bt->count;
            free(bsrc), free(blen), free(bres), free(bsd), free(bkey);
            bkey = malloc((size_t)cap * sizeof *bkey);
            bsrc = malloc((size_t)cap * sizeof(int *));
            blen = malloc((size_t)cap * sizeof(int));
            bres = calloc((size_t)cap, sizeof *bres);
            bsd = calloc((size_t)cap, sizeof *bsd);
        }
        tern_status_t st;
        if (!bsrc || !blen || !bres || !bsd || !bkey) st = tern_error(TERN_ERR_NOMEM, "out of memory");
        else {
            for (int k = 0; k < bt->count; k++) {
                int i = w->order[bt->start + k];
                bsrc[k] = w->ids[i];
                blen[k] = w->len[i];
                bsd[k] = w->sd ? w->sd[i] : NULL;
                bkey[k] = sample_key((uint64_t)(w->line0 + i), 0);
            }
            st = translator_translate_ids_sd(a->tr, bsrc, blen, w->sd ? bsd : NULL, bkey, bt->count, bres);
            if (!st)
                for (int k = 0; k < bt->count; k++) w->res[w->order[bt->start + k]] = bres[k];
        }
        if (st) {
            pthread_mutex_lock(&w->mu);
            if (w->status == TERN_OK) {
                w->status = st;
                snprintf(w->error, sizeof w->error, "%s", tern_last_error());
            }
            pthread_mutex_unlock(&w->mu);
            break;
        }
    }
    free(bsrc), free(blen), free(bres), free(bsd), free(bkey);
    return NULL;
}

static int *g_sort_len; /* qsort has no context argument: guarded by the single caller thread */
static int cmp_order(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (g_sort_len[x] != g_sort_len[y]) return g_sort_len[y] - g_sort_len[x];
    return x - y;
}

/* The lines of one chunk, tokenized: ids[i] (malloc'd), len[i] for i < n; each line's search data
 * sd[i] from its extras (extras.h; NULL: none); has_sd: some line had extras. */
typedef struct {
    int **ids;
    int *len;
    search_sentence_t **sd;
    char **text; /* with replace_unknowns and pretokenized input: each line (its tokens to copy) */
    int n, cap, has_sd;
} chunk_t;

/* Gives the chunk's results to on_line in order (line0: the number of its first line). */
static tern_status_t write_results(tern_translator_t *tr, const tern_request_t *req, search_result_t *res,
                                   const chunk_t *c, int n, long line0, long *tokens_out) {
    for (int i = 0; i < n; i++) {
        tern_result_t r;
        tern_status_t st = translator_result(tr, &res[i], c->ids[i], c->len[i], c->text[i], &r);
        if (st) return st;
        for (int k = 0; k < res[i].n; k++) *tokens_out += res[i].hyps[k].length;
        int stop = req->on_line(line0 + i, &r, req->stream_data);
        tern_result_free(&r);
        if (stop) return tern_error(TERN_ERR_CANCELLED, "stopped by the line callback at input line %ld", line0 + i + 1);
    }
    return TERN_OK;
}

static tern_status_t chunk_grow(chunk_t *c) {
    int cap = c->cap ? 2 * c->cap : 1024;
    int **ni = realloc(c->ids, (size_t)cap * sizeof(int *));
    if (ni) c->ids = ni;
    int *nl = realloc(c->len, (size_t)cap * sizeof(int));
    if (nl) c->len = nl;
    search_sentence_t **ns = realloc(c->sd, (size_t)cap * sizeof *ns);
    if (ns) c->sd = ns;
    char **nt = realloc(c->text, (size_t)cap * sizeof *nt);
    if (nt) c->text = nt;
    if (!ni || !nl || !ns || !nt) return tern_error(TERN_ERR_NOMEM, "out of memory");
    c->cap = cap;
    return TERN_OK;
}

/* Reads and tokenizes lines into c until it holds budget source tokens or the input ends (*eof). */
static tern_status_t read_chunk(const tern_model_t *model, const tern_request_t *req, const translator_call_t *call,
                                const request_extras_t *x, long budget, chunk_t *c, long *line_no, int *eof) {
    long toks = 0;
    c->n = 0;
    c->has_sd = 0;
    while (toks < budget) {
        const char *line = NULL;
        size_t r = 0;
        const tern_source_extras_t *ex = NULL;
        int got = req->read_source(*line_no, &line, &r, &ex, req->stream_data);
        if (got < 0) return tern_error(TERN_ERR_IO, "cannot read input line %ld", *line_no + 1);
        if (got == 0) {
            *eof = 1;
            break;
        }
        (*line_no)++;
        if (!line) r = 0;
        while (r > 0 && (line[r - 1] == '\n' || line[r - 1] == '\r')) r--;
        tern_status_t st = c->n == c->cap ? chunk_grow(c) : TERN_OK;
        if (st) return st;
        int trunc = 0;
        c->sd[c->n] = NULL;
        c->text[c->n] = NULL;
        const tern_model_t *m0 = model->n_members ? model->members[0] : model;
        if (call->replace_unknowns && (call->pretok || !m0->src_spm) && !(c->text[c->n] = strndup(line ? line : "", r)))
            return tern_error(TERN_ERR_NOMEM, "out of memory");
        st = model_encode_source_lang(model, line ? line : "", r, call->max_input_length, call->pretok, call->src_lang_code,
                                      &c->ids[c->n], &c->len[c->n], &trunc);
        if (st) {
            free(c->text[c->n]), c->text[c->n] = NULL;
            return tern_error_prefix(st, "input line %ld", *line_no);
        }
        if (trunc) TERN_WARN("input line %ld: longer than %d tokens, truncated", *line_no, call->max_input_length);
        if (ex && (st = extras_sentence(x, *line_no - 1, ex, &c->sd[c->n]))) {
            free(c->ids[c->n]);
            free(c->text[c->n]), c->text[c->n] = NULL;
            return st;
        }
        c->has_sd |= ex != NULL;
        toks += c->len[c->n] > 0 ? c->len[c->n] : 1;
        c->n++;
    }
    return TERN_OK;
}

/* Sorts sentences 0..n-1 by length, longest first, into order (n) (o->no_sort: keeps the input's
 * order) and cuts them into batches by the token budget (a batch's padded width is its longest
 * length, at least 1: sorted, the first); returns the count. */
static int cut_batches(const int *len, int n, const translator_call_t *o, int *order, batch_t *batches) {
    for (int i = 0; i < n; i++) order[i] = i;
    if (!o->no_sort) {
        g_sort_len = (int *)len;
        qsort(order, (size_t)n, sizeof(int), cmp_order);
    }
    int nb = 0;
    for (int a = 0; a < n;) {
        int width = 1, b = 0;
        while (a + b < n && (o->max_batch_size <= 0 || b < o->max_batch_size)) {
            int w = len[order[a + b]] > width ? len[order[a + b]] : width;
            if (b > 0 && (long)(b + 1) * w > o->max_batch_tokens) break;
            width = w;
            b++;
        }
        batches[nb++] = (batch_t){a, b};
        a += b;
    }
    return nb;
}

/* TERN_BATCH_LOG=1: each batch as cut (before continuous batching runs them together) on stderr,
 * "tern: batch: lines L1,L2,... width W" (input lines from 1; W its padded width). */
static void log_batches(const int *len, const int *order, const batch_t *batches, int nb, long line0) {
    const char *env = getenv("TERN_BATCH_LOG");
    if (!env || strcmp(env, "1") != 0) return;
    for (int b = 0; b < nb; b++) {
        int width = 1;
        fputs("tern: batch: lines ", stderr);
        for (int k = 0; k < batches[b].count; k++) {
            int i = order[batches[b].start + k];
            width = len[i] > width ? len[i] : width;
            fprintf(stderr, "%s%ld", k ? "," : "", line0 + i + 1);
        }
        fprintf(stderr, " width %d\n", width);
    }
}

/* Runs w's batches on up to W translators in parallel (on this thread when one, or when no
 * thread could be started). */
static void run_workers(work_t *w, tern_translator_t **trs, int W) {
    int nthreads = W < w->n_batches ? W : w->n_batches;
    pthread_t *th = nthreads > 1 ? malloc((size_t)nthreads * sizeof *th) : NULL;
    worker_arg_t *args = nthreads > 1 ? malloc((size_t)nthreads * sizeof *args) : NULL;
    int started = 0;
    if (th && args)
        for (int k = 0; k < nthreads; k++) {
            args[k] = (worker_arg_t){w, trs[k]};
            if (pthread_create(&th[k], NULL, worker_main, &args[k]) == 0) started++;
            else break;
        }
    if (started == 0) {
        worker_arg_t a = {w, trs[0]};
        worker_main(&a);
    }
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
    free(th), free(args);
}

/* Translates a chunk on the translators and gives its lines to on_line (line0: the number of its
 * first). */
static tern_status_t translate_chunk(const tern_translator_options_t *o, const tern_request_t *req,
                                     tern_translator_t **trs, chunk_t *c, long line0, long *tokens_out) {
    int n = c->n;
    int *order = malloc((size_t)n * sizeof(int));
    batch_t *batches = malloc((size_t)n * sizeof(batch_t));
    search_result_t *res = calloc((size_t)n, sizeof *res);
    tern_status_t st;
    if (!order || !batches || !res) {
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
    } else {
        work_t w;
        memset(&w, 0, sizeof w);
        w.opt = o;
        w.line0 = line0;
        w.ids = c->ids;
        w.len = c->len;
        w.sd = c->has_sd ? c->sd : NULL;
        w.order = order;
        w.batches = batches;
        w.n_batches = cut_batches(c->len, n, trs[0]->call, order, batches);
        log_batches(c->len, order, batches, w.n_batches, line0);
        /* continuous batching: one call over many batches keeps them full (a row that finishes
         * takes the next sentence); runs of consecutive batches, a few per worker for balance */
        if (!w.sd && w.n_batches > 1 && translator_continuous(trs[0])) {
            int G = o->workers > 1 ? 4 * o->workers : 1, per = (w.n_batches + G - 1) / G, ng = 0;
            for (int b = 0; b < w.n_batches; b += per) {
                int e = b + per < w.n_batches ? b + per : w.n_batches;
                batches[ng++] = (batch_t){batches[b].start, batches[e - 1].start + batches[e - 1].count - batches[b].start};
            }
            w.n_batches = ng;
        }
        w.res = res;
        pthread_mutex_init(&w.mu, NULL);
        run_workers(&w, trs, o->workers);
        pthread_mutex_destroy(&w.mu);
        st = w.status;
        if (st) tern_error(st, "%s", w.error);
        else st = write_results(trs[0], req, res, c, n, line0, tokens_out);
    }
    for (int i = 0; i < n; i++) {
        if (res) search_result_free(&res[i]);
        free(c->ids[i]);
        c->ids[i] = NULL;
        free(c->text[i]), c->text[i] = NULL;
        extras_sentence_free(c->sd[i]), c->sd[i] = NULL;
    }
    c->n = 0;
    free(order), free(batches), free(res);
    return st;
}

/* The stream's request, checked. */
static tern_status_t stream_request_in(tern_request_t *req, const tern_request_t *request) {
    tern_status_t st = request_in(req, request, "tern_translate_stream");
    if (st) return st;
    if (!req->read_source || !req->on_line)
        return tern_error(TERN_ERR_INVALID_ARG, "tern_translate_stream: needs read_source and on_line");
    if (req->sources || req->num_sources || req->targets || req->extras || req->on_result || req->on_token)
        return tern_error(TERN_ERR_INVALID_ARG,
                          "tern_translate_stream: sources, targets, extras, on_result and on_token must be NULL "
                          "(lines and their extras come from read_source)");
    return TERN_OK;
}

/* Reads, translates and gives back chunk after chunk. */
static tern_status_t stream_run(const tern_model_t *model, const tern_translator_options_t *o,
                                const tern_request_t *req, tern_translator_t **trs, const request_extras_t *x) {
    long budget = (long)o->read_ahead * trs[0]->call->max_batch_tokens;
    if (budget < 1) budget = 1;
    chunk_t c = {0};
    long line_no = 0, written = 0, tokens_out = 0;
    double t0 = time_now();
    tern_status_t st = TERN_OK;
    for (int eof = 0; !st && !eof;) {
        if (req->cancel && __atomic_load_n(req->cancel, __ATOMIC_RELAXED)) {
            st = tern_error(TERN_ERR_CANCELLED, "cancelled before input line %ld", line_no + 1);
            break;
        }
        if ((st = read_chunk(model, req, trs[0]->call, x, budget, &c, &line_no, &eof)) || c.n == 0) break;
        if ((st = translate_chunk(o, req, trs, &c, written, &tokens_out))) break;
        written = line_no;
        if (req->progress) req->progress(written, tokens_out, time_now() - t0, req->stream_data);
    }
    for (int i = 0; i < c.n; i++) {
        free(c.ids[i]);
        free(c.text[i]);
        extras_sentence_free(c.sd[i]);
    }
    free(c.ids), free(c.len), free(c.sd), free(c.text);
    return st;
}

tern_status_t tern_translate_stream(const tern_model_t *model, const tern_translator_options_t *options,
                                    const tern_request_t *request) {
    tern_translator_options_t o, defaults = tern_translator_default_options();
    tern_request_t req;
    tern_status_t st = API_STRUCT_IN(&o, options, &defaults, tern_translator_options_t);
    if (st || (st = stream_request_in(&req, request))) return st;
    if (!model) return tern_error(TERN_ERR_INVALID_ARG, "tern_translate_stream: NULL model");
    if (o.workers <= 0) o.workers = 1;
    tern_translator_t **trs = calloc((size_t)o.workers, sizeof *trs);
    if (!trs) return tern_error(TERN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < o.workers && !st; k++) st = tern_translator_create(&trs[k], model, &o);
    translator_call_t call;
    request_extras_t *x = NULL; /* suppressed sequences, LMBR parameters; each line's extras */
    if (!st) st = translator_call_init(trs[0], &req, &call);
    if (!st) st = extras_new(&x, model, &req, &call);
    if (!st) {
        call.global = extras_global(x);
        for (int k = 0; k < o.workers; k++) trs[k]->call = &call;
        st = stream_run(model, &o, &req, trs, x);
    }
    extras_free(x);
    for (int k = 0; k < o.workers; k++) tern_translator_free(trs[k]);
    free(trs);
    return st;
}
