/*
 * stream.c — tern_translate_stream(): translates a text stream in constant memory.
 *
 * Lines are read ahead in chunks (read_ahead × the batch token budget), tokenized, sorted by
 * length and cut into batches by the token budget; `workers` translators, each with its own
 * state and intra-op threads but one shared read-only model, take batches from the chunk; the
 * chunk is written back in the input's order. One output line per input line, always.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "extras.h"
#include "translator.h"

typedef struct {
    int start, count; /* into order[] */
} batch_t;

typedef struct {
    const tern_model_t *model;
    const tern_translate_options_t *opt;
    int **ids;
    int *len;
    search_sentence_t **sd;  /* per-sentence search data (NULL: none) */
    int *order;         /* sentence indices sorted by length, longest first */
    batch_t *batches;
    int n_batches, next;
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
    int cap = 0;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        int b = w->status == TERN_OK && w->next < w->n_batches ? w->next++ : -1;
        pthread_mutex_unlock(&w->mu);
        if (b < 0) break;
        batch_t *bt = &w->batches[b];
        if (bt->count > cap) {
            cap = bt->count;
            free(bsrc), free(blen), free(bres), free(bsd);
            bsrc = malloc((size_t)cap * sizeof(int *));
            blen = malloc((size_t)cap * sizeof(int));
            bres = calloc((size_t)cap, sizeof *bres);
            bsd = calloc((size_t)cap, sizeof *bsd);
        }
        tern_status_t st;
        if (!bsrc || !blen || !bres || !bsd) st = tern_error(TERN_ERR_NOMEM, "out of memory");
        else {
            for (int k = 0; k < bt->count; k++) {
                int i = w->order[bt->start + k];
                bsrc[k] = w->ids[i];
                blen[k] = w->len[i];
                bsd[k] = w->sd ? w->sd[i] : NULL;
            }
            st = translator_translate_ids_sd(a->tr, bsrc, blen, w->sd ? bsd : NULL, bt->count, bres);
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
    free(bsrc), free(blen), free(bres), free(bsd);
    return NULL;
}

static int *g_sort_len; /* qsort has no context argument: guarded by the single caller thread */
static int cmp_order(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (g_sort_len[x] != g_sort_len[y]) return g_sort_len[y] - g_sort_len[x];
    return x - y;
}

static tern_status_t write_results(const tern_model_t *m, const tern_translate_options_t *o, FILE *out,
                                   search_result_t *res, int n, long line0, long *tokens_out) {
    for (int i = 0; i < n; i++) {
        int nh = o->num_hypotheses;
        for (int k = 0; k < nh; k++) {
            char *text = NULL;
            float score = 0;
            if (k < res[i].n) {
                hypothesis_t *h = &res[i].hyps[k];
                tern_status_t st = model_decode_target(m, h->tokens, h->length, o->keep_unk, &text);
                if (st) return st;
                score = h->score;
                *tokens_out += h->length;
            }
            int ok;
            if (nh == 1 && !o->print_scores) ok = fprintf(out, "%s\n", text ? text : "") >= 0;
            else ok = fprintf(out, "%ld ||| %s ||| %.6f\n", line0 + i, text ? text : "", score) >= 0;
            free(text);
            if (!ok) return tern_error(TERN_ERR_IO, "cannot write the output");
        }
    }
    return TERN_OK;
}

/* The lines of one chunk, tokenized: ids[i] (malloc'd), len[i] for i < n; with decoding extras
 * (prefixes, constraints, ...: extras.h) each line's search data sd[i]. */
typedef struct {
    int **ids;
    int *len;
    search_sentence_t **sd;
    int n, cap;
} chunk_t;

/* Reads and tokenizes lines into c until it holds budget source tokens or the input ends (*eof). */
static tern_status_t read_chunk(const tern_model_t *model, const tern_translate_options_t *o, FILE *in, long budget,
                                decode_extras_t *extras, chunk_t *c, char **line, size_t *line_cap, long *line_no,
                                int *eof) {
    long toks = 0;
    c->n = 0;
    while (toks < budget) {
        ssize_t r = getline(line, line_cap, in);
        if (r < 0) {
            *eof = 1;
            break;
        }
        (*line_no)++;
        while (r > 0 && ((*line)[r - 1] == '\n' || (*line)[r - 1] == '\r')) r--;
        if (c->n == c->cap) {
            int cap = c->cap ? 2 * c->cap : 1024;
            int **ni = realloc(c->ids, (size_t)cap * sizeof(int *));
            if (ni) c->ids = ni;
            int *nl = realloc(c->len, (size_t)cap * sizeof(int));
            if (nl) c->len = nl;
            search_sentence_t **ns = extras ? realloc(c->sd, (size_t)cap * sizeof *ns) : NULL;
            if (ns) c->sd = ns;
            if (!ni || !nl || (extras && !ns)) return tern_error(TERN_ERR_NOMEM, "out of memory");
            c->cap = cap;
        }
        int trunc = 0;
        tern_status_t st = model_encode_source(model, *line, (size_t)r, o->max_input_length, &c->ids[c->n],
                                               &c->len[c->n], &trunc);
        if (st) return tern_error_prefix(st, "input line %ld", *line_no);
        if (trunc) TERN_WARN("input line %ld: longer than %d tokens, truncated", *line_no, o->max_input_length);
        if (extras && (st = extras_next(extras, *line_no - 1, &c->sd[c->n]))) {
            free(c->ids[c->n]);
            return st;
        }
        toks += c->len[c->n] > 0 ? c->len[c->n] : 1;
        c->n++;
    }
    return TERN_OK;
}

/* Sorts sentences 0..n-1 by length, longest first, into order (n) and cuts them into batches by
 * the token budget (the first length of a batch is its padded width); returns the count. */
static int cut_batches(const int *len, int n, const tern_translate_options_t *o, int *order, batch_t *batches) {
    for (int i = 0; i < n; i++) order[i] = i;
    g_sort_len = (int *)len;
    qsort(order, (size_t)n, sizeof(int), cmp_order);
    int nb = 0;
    for (int a = 0; a < n;) {
        int width = len[order[a]] > 0 ? len[order[a]] : 1, b = 0;
        while (a + b < n && (b == 0 || (long)(b + 1) * width <= o->max_batch_tokens) &&
               (o->max_batch_size <= 0 || b < o->max_batch_size))
            b++;
        batches[nb++] = (batch_t){a, b};
        a += b;
    }
    return nb;
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

/* Translates a chunk on the translators and writes its lines (line0: the number of its first). */
static tern_status_t translate_chunk(const tern_model_t *model, const tern_translate_options_t *o,
                                     tern_translator_t **trs, chunk_t *c, FILE *out, long line0, long *tokens_out) {
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
        w.model = model;
        w.opt = o;
        w.ids = c->ids;
        w.len = c->len;
        w.sd = c->sd;
        w.order = order;
        w.batches = batches;
        w.n_batches = cut_batches(c->len, n, o, order, batches);
        /* continuous batching: one call over many batches keeps them full (a row that finishes
         * takes the next sentence); runs of consecutive batches, a few per worker for balance */
        if (!c->sd && w.n_batches > 1 && translator_continuous(trs[0])) {
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
        else st = write_results(model, o, out, res, n, line0, tokens_out);
    }
    for (int i = 0; i < n; i++) {
        if (res) search_result_free(&res[i]);
        free(c->ids[i]);
        c->ids[i] = NULL;
        if (c->sd) extras_sentence_free(c->sd[i]), c->sd[i] = NULL;
    }
    c->n = 0;
    free(order), free(batches), free(res);
    return st;
}

tern_status_t tern_translate_stream(const tern_model_t *model, FILE *in, FILE *out,
                                    const tern_translate_options_t *options, tern_progress_fn progress,
                                    void *user_data) {
    tern_translate_options_t o, defaults = tern_translate_default_options();
    tern_status_t ost = API_STRUCT_IN(&o, options, &defaults, tern_translate_options_t);
    if (ost) return ost;
    if (o.workers <= 0) o.workers = 1;
    /* Scores reach the output only in n-best lists or with print_scores: otherwise greedy search
     * needs no log-softmax (the argmax of the logits is the token). */
    if (o.num_hypotheses <= 1 && !o.print_scores) o.return_scores = 0;
    tern_status_t st = TERN_OK;
    tern_translator_t **trs = calloc((size_t)o.workers, sizeof *trs);
    if (!trs) return tern_error(TERN_ERR_NOMEM, "out of memory");
    decode_extras_t *extras = NULL; /* prefixes, suppressed sequences, restrictions, LMBR evidence */
    for (int k = 0; k < o.workers && !st; k++) st = tern_translator_create(&trs[k], model, &o);
    if (!st) st = extras_open(&extras, model, &o);
    for (int k = 0; !st && k < o.workers; k++) trs[k]->global = extras_global(extras);
    long budget = (long)o.read_ahead * o.max_batch_tokens;
    if (budget < 1) budget = 1;
    chunk_t c = {0};
    char *line = NULL;
    size_t line_cap = 0;
    long line_no = 0, written = 0, tokens_out = 0;
    double t0 = time_now();
    for (int eof = 0; !st && !eof;) {
        if ((st = read_chunk(model, &o, in, budget, extras, &c, &line, &line_cap, &line_no, &eof)) || c.n == 0) break;
        if ((st = translate_chunk(model, &o, trs, &c, out, written, &tokens_out))) break;
        written = line_no;
        if (progress) progress(written, tokens_out, time_now() - t0, user_data);
    }
    if (!st && fflush(out) != 0) st = tern_error(TERN_ERR_IO, "cannot write the output");
    for (int i = 0; i < c.n; i++) {
        free(c.ids[i]);
        if (c.sd) extras_sentence_free(c.sd[i]);
    }
    free(c.ids), free(c.len), free(c.sd), free(line);
    extras_close(extras, st ? -1 : line_no);
    for (int k = 0; k < o.workers; k++) tern_translator_free(trs[k]);
    free(trs);
    return st;
}
