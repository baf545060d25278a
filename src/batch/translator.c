/*
 * translator.c — tern_translator_t: sorted token-budget batches over the model (through its
 * family table, family.h) and the search, batch translation of strings, and force decoding
 * (scoring).
 */
#include "batch/translator.h"

#include "batch/extras.h"

#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

tern_translator_options_t tern_translator_default_options(void) {
    tern_translator_options_t o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.search = NULL;
    o.max_input_length = 1024;
    o.max_batch_tokens = 4096;
    o.max_batch_size = 0;
    o.workers = 0;
    o.threads_per_worker = 0;
    o.read_ahead = 16;
    o.keep_unk = 1;
    return o;
}

int tern_num_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void translator_set_threads(const tern_translator_options_t *opt) {
    int workers = opt->workers > 0 ? opt->workers : 1;
    int threads = opt->threads_per_worker;
    if (threads <= 0) threads = tern_num_cores() / workers > 0 ? tern_num_cores() / workers : 1;
    kernels_set_num_threads(threads);
}

static tern_status_t check_options(const tern_translator_options_t *o) {
    if (o->max_batch_tokens < 1) return tern_error(TERN_ERR_INVALID_ARG, "batch token budget must be >= 1");
    if (o->max_input_length < 1) return tern_error(TERN_ERR_INVALID_ARG, "max_input_length must be >= 1");
    if (o->max_batch_size < 0 || o->workers < 0 || o->threads_per_worker < 0 || o->read_ahead < 0)
        return tern_error(TERN_ERR_INVALID_ARG, "max_batch_size, workers, threads_per_worker and read_ahead must be >= 0");
    return TERN_OK;
}

tern_status_t tern_translator_create(tern_translator_t **out, const tern_model_t *model,
                                     const tern_translator_options_t *options) {
    *out = NULL;
    tern_translator_options_t o, defaults = tern_translator_default_options();
    tern_status_t st = API_STRUCT_IN(&o, options, &defaults, tern_translator_options_t);
    if (st) return st;
    if ((st = check_options(&o))) return st;
    tern_search_params_t sp, msp = tern_model_search_params(model, NULL);
    if ((st = search_params_in(&sp, o.search ? o.search : &msp))) return st;
    o.search = NULL; /* copied: the caller's struct need not outlive the call */
    tern_translator_t *tr = calloc(1, sizeof *tr);
    if (!tr) return tern_error(TERN_ERR_NOMEM, "out of memory");
    tr->model = model;
    tr->opt = o;
    tr->search = sp;
    tr->state = model->fam->state_new(model->net);
    if (!tr->state) {
        free(tr);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    *out = tr;
    return TERN_OK;
}

void tern_translator_free(tern_translator_t *tr) {
    if (!tr) return;
    if (tr->state) tr->model->fam->state_free(tr->state);
    free(tr->vm_cand);
    free(tr->vm_tok);
    free(tr->vm_mark);
    free(tr);
}

static int max_output_len(const tern_search_params_t *o, int src_len) {
    int lim = o->max_decoding_length;
    if (o->max_length_a > 0 || o->max_length_b > 0) {
        int l = (int)floorf(o->max_length_a * (float)src_len) + o->max_length_b;
        if (l < 1) l = 1;
        if (l < lim) lim = l;
    }
    return lim;
}

/* The vocabulary map's candidates for a batch, with the tokens its search processors need (target
 * prefixes, restrict-to hypotheses, constraints, LMBR evidence: search_procs_mark): restricts the
 * model's output to them and gives the search a decoder over positions in them (*dec), with its
 * start and end tokens (*bos, *eos) and their count (*ncand).
 * An ensemble looks its members' first source up (ensemble.h's packing). */
static tern_status_t vmap_restrict(tern_translator_t *tr, int *const *src, const int *len,
                                   const search_sentence_t *const *sd, int n, vmap_decoder_t *vd, decoder_iface_t *dec,
                                   int *bos, int *eos, int *ncand) {
    const tern_model_t *m = tr->model;
    const int V = m->info.target_vocab_size, rows = n * tr->call->p.beam_size;
    if (!tr->vm_cand) {
        tr->vm_cand = malloc((size_t)V * sizeof(int));
        tr->vm_mark = calloc((size_t)V, 1);
        if (!tr->vm_cand || !tr->vm_mark) return tern_error(TERN_ERR_NOMEM, "vocabulary map: out of memory");
    }
    if (rows > tr->vm_tok_cap) {
        free(tr->vm_tok);
        tr->vm_tok_cap = 0;
        if (!(tr->vm_tok = malloc((size_t)rows * sizeof(int))))
            return tern_error(TERN_ERR_NOMEM, "vocabulary map: out of memory");
        tr->vm_tok_cap = rows;
    }
    const int **s0 = malloc((size_t)n * sizeof *s0);
    int *l0 = malloc((size_t)n * sizeof *l0);
    if (!s0 || !l0) {
        free(s0), free(l0);
        return tern_error(TERN_ERR_NOMEM, "vocabulary map: out of memory");
    }
    for (int i = 0; i < n; i++) {
        s0[i] = m->n_members ? src[i] + 1 : src[i];
        l0[i] = m->n_members ? src[i][0] : len[i];
    }
    search_procs_mark(tr->call->global, sd, n, V, tr->vm_mark); /* vmap_candidates adds what is marked */
    int nc = vmap_candidates(m->vmap, s0, l0, n, tr->vm_cand, tr->vm_mark);
    *ncand = nc;
    free(s0), free(l0);
    tern_status_t st = m->fam->set_vocab(tr->state, tr->vm_cand, nc);
    if (st) return st;
    *dec = vmap_decoder(vd, dec, tr->vm_cand, nc, n, tr->vm_tok);
    *bos = vmap_position(tr->vm_cand, nc, m->tgt_start);
    *eos = vmap_position(tr->vm_cand, nc, m->tgt_eos);
    if (*bos < 0 || *eos < 0) return tern_error(TERN_ERR_INTERNAL, "vocabulary map: start or end token not a candidate");
    return TERN_OK;
}

/* ------------------------------------------------------------------ hooks of a call */

/* What a call with callbacks or a cancellation flag carries through the batches. */
struct call_hooks {
    tern_translator_t *tr;
    const tern_request_t *req;  /* the callbacks and the cancellation flag */
    tern_result_t *results;  /* the caller's (n), or NULL: results go to on_result only */
    uint8_t *given;          /* (n) 1: results[i] already converted (and given to on_result) */
    char **emitted;          /* (n) greedy: the text the token events of input i gave so far */
    const int *batch_idx;    /* input index of each sentence of the batch being decoded */
    int beam;                /* 1: beam search (token events give the best live hypothesis) */
    int *map;                /* scratch for token ids under a vocabulary map */
    int map_cap;
};

/* The search's tokens as vocabulary ids (through the vocabulary map when there is one). */
static const int *hook_ids(struct call_hooks *h, const int *tokens, int len) {
    const int *cand = h->tr->model->vmap ? h->tr->vm_cand : NULL;
    if (!cand || len == 0) return tokens;
    if (len > h->map_cap) {
        int *m = realloc(h->map, (size_t)len * sizeof(int));
        if (!m) return NULL;
        h->map = m;
        h->map_cap = len;
    }
    for (int i = 0; i < len; i++) h->map[i] = cand[tokens[i]];
    return h->map;
}

/* The target language's code, forced as the first output token, is left out of what a caller sees. */
static const int *skip_lang(const tern_translator_t *tr, const int *ids, int *len) {
    if (ids && *len > 0 && tr->call && tr->call->tgt_lang >= 0 && ids[0] == tr->call->tgt_lang) {
        (*len)--;
        return ids + 1;
    }
    return ids;
}

/* The p-th space-separated token of text (malloc'd; NULL when it has fewer or on no memory). */
static char *nth_token(const char *text, int p) {
    for (const char *s = text ? text : "";;) {
        while (*s == ' ') s++;
        if (!*s) return NULL;
        const char *e = strchr(s, ' ');
        size_t l = e ? (size_t)(e - s) : strlen(s);
        if (p-- == 0) return strndup(s, l);
        s += l;
    }
}

/* replace_unknowns (tern_request_t): for each unknown token of hypothesis hy (ids: its tokens from
 * `skip` on, as output), the source token it attended to most (repl[t], malloc'd; NULL: none):
 * the source piece of that position, or when that is unknown too and the source text is at hand
 * (text: pretokenized input) the text's token there. The end token and language codes are never
 * copied. */
static void unknown_replacements(const tern_translator_t *tr, const hypothesis_t *hy, const int *ids, int len,
                                 int skip, const int *src, int S, const char *text, char **repl) {
    const tern_model_t *m = tr->model->n_members ? tr->model->members[0] : tr->model;
    for (int t = 0; t < len; t++) {
        repl[t] = NULL;
        if (ids[t] != m->tgt_unk || !hy->attn || !src || S <= 0) continue;
        const float *row = hy->attn + (size_t)(t + skip) * S;
        int best = 0;
        for (int p = 1; p < S; p++)
            if (row[p] > row[best]) best = p;
        int id = src[best];
        if (id == m->src_eos || id == m->src_bos || id == tr->call->src_lang) continue;
        if (id != m->src_unk) {
            const char *piece = vocab_token(m->src_vocab, id);
            repl[t] = piece ? strdup(piece) : NULL;
        } else if (text) {
            repl[t] = nth_token(text, best);
        }
    }
}

/* The sources are space-separated pieces: pretokenized, or a model without a source SentencePiece. */
static int pieces_in(const tern_translator_t *tr, int pretok) {
    const tern_model_t *m = tr->model->n_members ? tr->model->members[0] : tr->model;
    return pretok || !m->src_spm;
}

/* A search result (vocabulary ids) as the API's result; src/S/text: input i's source ids and
 * (pretokenized) text for replace_unknowns (src NULL: none). */
static tern_status_t to_result_src(tern_translator_t *tr, const search_result_t *res, int pretok, tern_result_t *r,
                                   struct call_hooks *h, const int *src, int S, const char *text) {
    const tern_model_t *m = tr->model;
    memset(r, 0, sizeof *r);
    r->hypotheses = calloc((size_t)(res->n ? res->n : 1), sizeof(char *));
    const int rs = tr->call->p.return_scores;
    r->scores = rs ? calloc((size_t)(res->n ? res->n : 1), sizeof(float)) : NULL;
    if (!r->hypotheses || (rs && !r->scores)) {
        free(r->hypotheses), free(r->scores);
        memset(r, 0, sizeof *r);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    r->num_hypotheses = res->n;
    for (int k = 0; k < res->n; k++) {
        const hypothesis_t *hy = &res->hyps[k];
        int len = hy->length;
        const int *all = h ? hook_ids(h, hy->tokens, hy->length) : hy->tokens;
        const int *ids = skip_lang(tr, all, &len);
        char **repl = NULL;
        if (tr->call->replace_unknowns && src && len > 0 && ids && (repl = calloc((size_t)len, sizeof *repl)))
            unknown_replacements(tr, hy, ids, len, (int)(ids - all), src, S, pieces_in(tr, pretok) ? text : NULL, repl);
        tern_status_t st = ids || len == 0
                               ? model_decode_target_repl(m, ids, len, tr->opt.keep_unk, pretok,
                                                          (const char *const *)repl, &r->hypotheses[k])
                               : tern_error(TERN_ERR_NOMEM, "out of memory");
        for (int t = 0; repl && t < len; t++) free(repl[t]);
        free(repl);
        if (st) {
            tern_result_free(r);
            return st;
        }
        if (r->scores) r->scores[k] = hy->score;
    }
    return TERN_OK;
}

tern_status_t translator_result(tern_translator_t *tr, const search_result_t *res, const int *src, int src_len,
                                const char *text, tern_result_t *r) {
    return to_result_src(tr, res, tr->call->pretok, r, NULL, src, src_len, text);
}

/* Input i's search is finished (res: vocabulary ids when ids, else the search's tokens): convert
 * it, give it to on_result, keep it in results[i] (or free it). Nonzero: stop. */
static int hook_finish_input(struct call_hooks *h, int i, const search_result_t *res) {
    const tern_request_t *c = h->req;
    tern_result_t tmp, *r = h->results ? &h->results[i] : &tmp;
    const translator_call_t *call = h->tr->call;
    if (to_result_src(h->tr, res, call->pretok, r, h, call->src_ids ? call->src_ids[i] : NULL,
                      call->src_len ? call->src_len[i] : 0, call->sources ? call->sources[i] : NULL))
        return 1;
    h->given[i] = 1;
    int stop = 0;
    if (c->on_token && h->beam && res->n > 0) { /* beam search: the final best hypothesis */
        const hypothesis_t *hy = &res->hyps[0];
        int len = hy->length;
        const int *ids = skip_lang(h->tr, hook_ids(h, hy->tokens, hy->length), &len);
        tern_token_event_t ev = {i, -1, ids, len, r->hypotheses[0], NULL, 1};
        stop = c->on_token(&ev, c->on_token_data);
    }
    if (!stop && c->on_result) stop = c->on_result(i, r, c->on_result_data);
    if (!h->results) tern_result_free(&tmp);
    return stop;
}

static int hook_finish(void *ctx, int n, const search_result_t *res) {
    struct call_hooks *h = ctx;
    return hook_finish_input(h, h->batch_idx[n], res);
}

static int hook_step(void *ctx, int n, int t, const int *tokens, int len, int last) {
    struct call_hooks *h = ctx;
    const tern_request_t *c = h->req;
    int i = h->batch_idx[n];
    const int *ids = skip_lang(h->tr, hook_ids(h, tokens, len), &len);
    char *text = NULL;
    if ((!ids && len > 0) || model_decode_target_ex(h->tr->model, ids, len, h->tr->opt.keep_unk, h->tr->call->pretok, &text)) return 1;
    tern_token_event_t ev = {i, t, ids, len, text, NULL, last};
    if (!h->beam) { /* the delta: what the text adds to what was given, once it extends it */
        const char *prev = h->emitted[i] ? h->emitted[i] : "";
        size_t pl = strlen(prev);
        if (strncmp(text, prev, pl) == 0) {
            ev.delta = text + pl;
            free(h->emitted[i]);
            h->emitted[i] = strdup(text);
            if (!h->emitted[i]) {
                free(text);
                return 1;
            }
        } else {
            ev.delta = "";
        }
    }
    int stop = c->on_token(&ev, c->on_token_data);
    free(text);
    return stop;
}

static int hooks_cancelled(const struct call_hooks *h) {
    return h && h->req->cancel && __atomic_load_n(h->req->cancel, __ATOMIC_RELAXED);
}

/* The search's sampling set-up from the call's parameters. */
static search_sampling_t sampling_of(const tern_search_params_t *o) {
    return (search_sampling_t){o->sampling_topk != 1, o->sampling_topk, o->sampling_topp, o->sampling_temperature,
                               o->seed};
}

/* The repetition controls (sample.h) after the batch's processors: all (SEARCH_MAX_PROCS) gets
 * both lists; *rep their state. */
static tern_status_t repeat_procs(const tern_search_params_t *o, int V, const search_procs_t *procs,
                                  sample_repeat_t **rep, search_proc_t *all, int *np) {
    int n0 = 0;
    const search_proc_t *p0 = search_procs_list(procs, &n0);
    search_proc_t extra[2];
    int hist = o->max_decoding_length;
    int ne = sample_repeat_procs(rep, o->repetition_penalty, o->no_repeat_ngram_size, hist, V, extra);
    if (ne < 0) return tern_error(TERN_ERR_NOMEM, "out of memory");
    if (n0 + ne > SEARCH_MAX_PROCS) return tern_error(TERN_ERR_INVALID_ARG, "too many score processors");
    if (n0) memcpy(all, p0, (size_t)n0 * sizeof *all);
    if (ne) memcpy(all + n0, extra, (size_t)ne * sizeof *all);
    *np = n0 + ne;
    return TERN_OK;
}

/* Decodes one batch of non-empty sources (idx: their input indices, for the hooks; keys: their
 * sampling keys, sample.h). */
/* The attention rows of each sentence's hypotheses from the batch's padded width S down to the
 * sentence's own source length len[i] (in place: rows move forward only). */
static void trim_attention(search_result_t *res, int n, const int *len, int S) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < res[i].n; k++) {
            hypothesis_t *h = &res[i].hyps[k];
            for (int t = 0; h->attn && len[i] < S && t < h->length; t++)
                memmove(h->attn + (size_t)t * len[i], h->attn + (size_t)t * S, (size_t)len[i] * sizeof(float));
        }
}

static tern_status_t decode_batch(tern_translator_t *tr, int *const *src, const int *len,
                                  const search_sentence_t *const *sd, const int *idx, const uint64_t *keys, int n,
                                  search_result_t *res) {
    const tern_model_t *m = tr->model;
    const translator_call_t *call = tr->call;
    const tern_search_params_t *o = &call->p;
    const model_family_t *fam = m->fam;
    tern_status_t st = fam->encode(tr->state, (const int *const *)src, len, n);
    if (st) return st;
    int *max_len = malloc((size_t)n * sizeof(int));
    if (!max_len) return tern_error(TERN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        max_len[i] = max_output_len(o, len[i]);
        if (max_len[i] > m->info.max_target_length) max_len[i] = m->info.max_target_length;
    }
    decoder_iface_t dec = {tr->state, m->info.target_vocab_size, fam->source_len(tr->state), fam->step, fam->set_rows,
                           fam->step_logprobs, fam->set_argmax_only, NULL, fam->set_argmax_never};
    search_options_t so = {0};
    so.beam_size = o->beam_size;
    so.num_hypotheses = o->num_hypotheses;
    so.length_penalty = o->length_penalty;
    so.length_norm = o->length_norm;
    so.coverage_penalty = o->coverage_penalty;
    so.eos_policy = o->eos_policy;
    so.early_stop = o->early_stop;
    so.min_length = o->min_length;
    /* greedy: the penalties change only the score, so without scores the argmax is all it needs */
    so.need_scores = o->return_scores || (o->beam_size > 1 && (o->length_penalty != 0 || o->coverage_penalty != 0));
    so.bos = m->tgt_start;
    so.eos = m->tgt_eos;
    so.prune_width = o->prune_width;
    so.patience = o->patience;
    so.prune_threshold = o->prune_threshold;
    so.sampling = sampling_of(o);
    so.sample_key = keys;
    so.return_attention = call->return_attention;
    struct call_hooks *h = call->hooks;
    if (h) {
        so.cancel = h->req->cancel;
        h->batch_idx = idx;
        h->beam = !(o->beam_size == 1);
        if (h->req->on_result || h->req->on_token) so.on_finish = hook_finish;
        if (h->req->on_token) so.on_step = hook_step;
        so.hook_ctx = h;
    }
    int constrained = 0; /* terminology constraints need the beam search's selection, even at beam 1 */
    int any_sd = 0;
    for (int i = 0; sd && i < n; i++) {
        constrained |= sd[i] && sd[i]->constraints;
        any_sd |= sd[i] != NULL;
    }
    if (constrained && so.sampling.on) {
        free(max_len);
        return tern_error(TERN_ERR_INVALID_ARG, "sampling (sampling_topk %d) cannot be combined with constraints",
                          o->sampling_topk);
    }
    vmap_decoder_t vd;
    search_remap_t *rm = NULL; /* under a vocabulary map: the processors' data in positions */
    const search_global_t *gl = call->global;
    int V = m->info.target_vocab_size, eos = m->tgt_eos, nc = 0;
    if (m->vmap) {
        if (!(st = vmap_restrict(tr, src, len, sd, n, &vd, &dec, &so.bos, &so.eos, &nc)) && (call->global || any_sd) &&
            !(st = search_remap_new(&rm, call->global, sd, n, tr->vm_cand, nc))) {
            gl = search_remap_global(rm);
            sd = search_remap_sentences(rm);
        }
        if (st) {
            fam->set_vocab(tr->state, NULL, 0);
            free(max_len);
            return st;
        }
        V = nc, eos = so.eos;
    }
    search_procs_t *procs = NULL; /* processors of this batch: prefixes, restrictions, LMBR, ... */
    sample_repeat_t *rep = NULL;  /* and the repetition controls */
    search_proc_t all[SEARCH_MAX_PROCS];
    if ((st = search_procs_bind(&procs, gl, sd, n, V, eos, o->beam_size, o->prefix_bias_beta)) ||
        (st = repeat_procs(o, V, procs, &rep, all, &so.num_procs))) {
        if (m->vmap) fam->set_vocab(tr->state, NULL, 0);
        search_procs_free(procs);
        sample_repeat_free(rep);
        search_remap_free(rm);
        free(max_len);
        return st;
    }
    so.procs = all;
    if (h) h->beam = !(o->beam_size == 1 && !constrained);
    st = o->beam_size == 1 && !constrained ? greedy_search(&dec, n, max_len, &so, res)
                                           : beam_search(&dec, n, max_len, &so, res);
    search_procs_free(procs);
    sample_repeat_free(rep);
    search_remap_free(rm);
    if (!st && so.return_attention) trim_attention(res, n, len, dec.source_len);
    if (m->vmap) { /* the state goes back to the whole vocabulary (force decoding uses it) */
        if (!st) vmap_results_to_ids(res, n, tr->vm_cand);
        tern_status_t s2 = fam->set_vocab(tr->state, NULL, 0);
        if (!st) st = s2;
    }
    free(max_len);
    return st;
}

/* ------------------------------------------------------------------ continuous batching */

struct stream_ctx {
    tern_translator_t *tr;
    int *const *src;
    const int *len;
};

static tern_status_t stream_admit(void *ctx, int first, int n, int fresh) {
    struct stream_ctx *c = ctx;
    const model_family_t *fam = c->tr->model->fam;
    const int *const *src = (const int *const *)c->src + first;
    return fresh ? fam->encode(c->tr->state, src, c->len + first, n) : fam->admit(c->tr->state, src, c->len + first, n);
}

/* Global processors continuous batching runs: suppressed single tokens (a model's never-generated
 * pad, language codes or <unk>, a request's single-token suppressions), nothing else. */
static int global_streams(const search_global_t *g) {
    if (!g) return 1;
    if (g->lmbr) return 0;
    for (int k = 0; g->suppress && k < g->suppress->n; k++)
        if (g->suppress->len[k] != 1) return 0;
    return 1;
}

/* Greedy or beam search with continuous batching (search.h's greedy_search_stream,
 * beam_search_stream) where it gives what decode_batch gives: no per-sentence data, no global
 * processors but single-token suppressions, no vocabulary map, no coverage penalty, a family with
 * admit() whose step writes logits; TERN_CONTINUOUS=0 turns it off. */
static int stream_ok(const tern_translator_t *tr, const search_sentence_t *const *sd, int n) {
    const tern_model_t *m = tr->model;
    const tern_search_params_t *o = tr->call ? &tr->call->p : &tr->search;
    const char *env = getenv("TERN_CONTINUOUS");
    if (env && strcmp(env, "0") == 0) return 0;
    if (o->coverage_penalty != 0.0f || m->vmap || (tr->call && !global_streams(tr->call->global)) || !m->fam->admit ||
        m->fam->step_logprobs)
        return 0;
    if (o->sampling_topk != 1 || o->repetition_penalty != 1.0f || o->no_repeat_ngram_size > 0) return 0;
    if (tr->call && tr->call->return_attention) return 0; /* the streaming searches keep no attention */
    if (tr->call && tr->call->no_sort) return 0; /* unsorted: fixed batches in the input's order */
    for (int i = 0; sd && i < n; i++)
        if (sd[i]) return 0;
    return 1;
}

int translator_continuous(const tern_translator_t *tr) { return stream_ok(tr, NULL, 0); }

/* Decodes the n sorted non-empty sources of a window (idx: their input indices) with continuous
 * batching: as many rows in flight as the largest batch decode_batch would form from them. */
static tern_status_t decode_stream(tern_translator_t *tr, int *const *src, const int *len, const int *idx, int n,
                                   search_result_t *res) {
    const tern_model_t *m = tr->model;
    const translator_call_t *call = tr->call;
    const tern_search_params_t *o = &call->p;
    const model_family_t *fam = m->fam;
    int max_rows = 1;
    for (int a = 0; a < n;) { /* the batches of translator_translate_ids_sd */
        int width = len[a], b = 0;
        while (a + b < n && (b == 0 || (long)(b + 1) * width <= call->max_batch_tokens) &&
               (call->max_batch_size <= 0 || b < call->max_batch_size))
            b++;
        max_rows = b > max_rows ? b : max_rows;
        a += b;
    }
    int *max_len = malloc((n > 0 ? (size_t)n : 1) * sizeof(int));
    if (!max_len) return tern_error(TERN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        max_len[i] = max_output_len(o, len[i]);
        if (max_len[i] > m->info.max_target_length) max_len[i] = m->info.max_target_length;
    }
    decoder_iface_t dec = {tr->state, m->info.target_vocab_size, 0, fam->step, fam->set_rows, fam->step_logprobs,
                           fam->set_argmax_only, fam->set_argmax_ban, fam->set_argmax_never};
    search_options_t so = {0};
    so.beam_size = o->beam_size;
    so.num_hypotheses = o->beam_size == 1 ? 1 : o->num_hypotheses;
    so.length_penalty = o->length_penalty;
    so.length_norm = o->length_norm;
    so.eos_policy = o->eos_policy;
    so.early_stop = o->early_stop;
    so.min_length = o->min_length;
    so.need_scores = o->return_scores || (o->beam_size > 1 && o->length_penalty != 0);
    so.bos = m->tgt_start;
    so.eos = m->tgt_eos;
    so.prune_width = o->prune_width;
    so.patience = o->patience;
    so.prune_threshold = o->prune_threshold;
    struct call_hooks *h = call->hooks;
    if (h) {
        so.cancel = h->req->cancel;
        h->batch_idx = idx;
        h->beam = o->beam_size != 1;
        if (h->req->on_result || h->req->on_token) so.on_finish = hook_finish;
        if (h->req->on_token) so.on_step = hook_step;
        so.hook_ctx = h;
    }
    /* the single-token suppressions (global_streams): the same processors decode_batch binds */
    search_procs_t *procs = NULL;
    search_proc_t all[SEARCH_MAX_PROCS];
    sample_repeat_t *rep = NULL;
    tern_status_t st = search_procs_bind(&procs, call->global, NULL, n, m->info.target_vocab_size, m->tgt_eos,
                                         o->beam_size, 0.0f);
    if (!st) st = repeat_procs(o, m->info.target_vocab_size, procs, &rep, all, &so.num_procs);
    if (st) {
        search_procs_free(procs);
        sample_repeat_free(rep);
        free(max_len);
        return st;
    }
    so.procs = all;
    struct stream_ctx ctx = {tr, src, len};
    long stats[3] = {0, 0, 0};
    search_feed_t feed = {stream_admit, &ctx, n, len, max_rows, call->max_batch_tokens, 0, stats};
    feed.min_admit = max_rows / 4 > 1 ? max_rows / 4 : 1;
    const char *env = getenv("TERN_CONTINUOUS_MIN_ADMIT");
    if (env && atoi(env) > 0) feed.min_admit = atoi(env);
    st = o->beam_size == 1 ? greedy_search_stream(&dec, &feed, max_len, &so, res)
                           : beam_search_stream(&dec, &feed, max_len, &so, res);
    search_procs_free(procs);
    sample_repeat_free(rep);
    if (!st && (env = getenv("TERN_CONTINUOUS_STATS")) && strcmp(env, "1") == 0)
        fprintf(stderr, "continuous batching: %d sentences, %d rows at most, %ld steps, %ld rows (%.1f per step), %ld admissions\n",
                n, max_rows, stats[0], stats[1], stats[0] ? (double)stats[1] / (double)stats[0] : 0.0, stats[2]);
    free(max_len);
    return st;
}

typedef struct {
    int len, idx;
} len_idx_t;

static int cmp_hyp_score(const void *a, const void *b) {
    const hypothesis_t *x = a, *y = b;
    return x->score > y->score ? -1 : x->score < y->score ? 1 : 0;
}

/* Input i's M samples (results sres[i * M .. i * M + M - 1], one hypothesis each) as its n-best
 * list, best score first (qsort's order between equal scores is fixed by the input order). */
static tern_status_t merge_samples(search_result_t *sres, int n, int M, search_result_t *res) {
    for (int i = 0; i < n; i++) {
        hypothesis_t *h = calloc((size_t)M, sizeof *h);
        if (!h) return tern_error(TERN_ERR_NOMEM, "out of memory");
        int k = 0;
        for (int j = 0; j < M; j++) {
            search_result_t *r = &sres[(size_t)i * M + j];
            for (int q = 0; q < r->n && k < M; q++) h[k++] = r->hyps[q];
            free(r->hyps);
            r->hyps = NULL, r->n = 0;
        }
        qsort(h, (size_t)k, sizeof *h, cmp_hyp_score);
        res[i].hyps = h, res[i].n = k;
    }
    return TERN_OK;
}

/* num_samples M > 1: each input decoded M times, row (i, j) with key sample_key(i, j) (keys[i] | j
 * when keys are given), by a call with one sample and no callbacks; the callbacks then get each
 * input's merged n-best list (no token events). */
static tern_status_t translate_samples(tern_translator_t *tr, int *const *src, const int *len,
                                       const search_sentence_t *const *sd, const uint64_t *keys, int n,
                                       search_result_t *res) {
    translator_call_t *saved = tr->call, one = *saved;
    const int M = saved->p.num_samples;
    size_t nm = (size_t)n * M;
    int **s2 = malloc((nm ? nm : 1) * sizeof *s2), *l2 = malloc((nm ? nm : 1) * sizeof *l2);
    const search_sentence_t **sd2 = sd ? malloc((nm ? nm : 1) * sizeof *sd2) : NULL;
    uint64_t *k2 = malloc((nm ? nm : 1) * sizeof *k2);
    search_result_t *r2 = calloc(nm ? nm : 1, sizeof *r2);
    tern_status_t st = TERN_OK;
    for (int i = 0; i < n; i++) res[i].n = 0, res[i].hyps = NULL;
    if (!s2 || !l2 || (sd && !sd2) || !k2 || !r2) st = tern_error(TERN_ERR_NOMEM, "out of memory");
    for (size_t q = 0; !st && q < nm; q++) {
        size_t i = q / M;
        s2[q] = src[i], l2[q] = len[i];
        if (sd2) sd2[q] = sd[i];
        k2[q] = (keys ? keys[i] : sample_key(i, 0)) | (uint64_t)(q % M);
    }
    one.p.num_samples = 1, one.hooks = NULL;
    tr->call = &one;
    if (!st) st = translator_translate_ids_sd(tr, s2, l2, sd2, k2, (int)nm, r2);
    tr->call = saved;
    if (!st) st = merge_samples(r2, n, M, res);
    struct call_hooks *h = saved->hooks;
    for (int i = 0; !st && h && h->given && i < n; i++)
        if (hook_finish_input(h, i, &res[i])) st = tern_error(TERN_ERR_CANCELLED, "stopped by the result callback");
    for (size_t q = 0; r2 && q < nm; q++) search_result_free(&r2[q]);
    if (st)
        for (int i = 0; i < n; i++) search_result_free(&res[i]);
    free(s2), free(l2), free(sd2), free(k2), free(r2);
    return st;
}

static int cmp_len_desc(const void *a, const void *b) {
    const len_idx_t *x = a, *y = b;
    if (x->len != y->len) return y->len - x->len;
    return x->idx - y->idx;
}

static tern_status_t translate_ids(tern_translator_t *tr, int *const *src, const int *len,
                                   const search_sentence_t *const *sd, const uint64_t *keys, int n, search_result_t *res);

/* The target language's code forced as the first output token (transformers' forced_bos_token_id):
 * each sentence's data with the code before its own prefix. */
static tern_status_t translate_lang(tern_translator_t *tr, int *const *src, const int *len,
                                    const search_sentence_t *const *sd, const uint64_t *keys, int n,
                                    search_result_t *res) {
    const size_t nn = (size_t)(n > 0 ? n : 1);
    search_sentence_t *own = calloc(nn, sizeof *own);
    const search_sentence_t **sd2 = calloc(nn, sizeof *sd2);
    int **pre = calloc(nn, sizeof *pre);
    tern_status_t st = own && sd2 && pre ? TERN_OK : tern_error(TERN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && !st; i++) {
        if (sd && sd[i]) own[i] = *sd[i];
        int k = own[i].prefix ? own[i].prefix_len : 0;
        if (!(pre[i] = malloc((size_t)(k + 1) * sizeof(int)))) {
            st = tern_error(TERN_ERR_NOMEM, "out of memory");
            break;
        }
        pre[i][0] = tr->call->tgt_lang;
        if (k) memcpy(pre[i] + 1, own[i].prefix, (size_t)k * sizeof(int));
        own[i].prefix = pre[i];
        own[i].prefix_len = k + 1;
        own[i].prefix_plain = k == 0; /* the code alone: EOS may follow it in any beam slot, as in transformers */
        sd2[i] = &own[i];
    }
    if (!st) st = translate_ids(tr, src, len, sd2, keys, n, res);
    for (int i = 0; pre && i < n; i++) free(pre[i]);
    free(pre), free(sd2), free(own);
    return st;
}

static tern_status_t translate_ids_sd(tern_translator_t *tr, int *const *src, const int *len,
                                      const search_sentence_t *const *sd, const uint64_t *keys, int n,
                                      search_result_t *res) {
    const translator_call_t *o = tr->call;
    if (o->p.num_samples > 1) return translate_samples(tr, src, len, sd, keys, n, res);
    if (o->tgt_lang >= 0) return translate_lang(tr, src, len, sd, keys, n, res);
    return translate_ids(tr, src, len, sd, keys, n, res);
}

tern_status_t translator_translate_ids_sd(tern_translator_t *tr, int *const *src, const int *len,
                                          const search_sentence_t *const *sd, const uint64_t *keys, int n,
                                          search_result_t *res) {
    const model_family_t *fam = tr->model->fam;
    if (!tr->call->beams_apart) return translate_ids_sd(tr, src, len, sd, keys, n, res);
    /* beams_apart (translator_call_init checked the family has it): this call's steps row by row */
    tern_status_t st = fam->set_rows_apart(tr->state, 1);
    if (!st) st = translate_ids_sd(tr, src, len, sd, keys, n, res);
    fam->set_rows_apart(tr->state, 0);
    return st;
}

static tern_status_t translate_ids(tern_translator_t *tr, int *const *src, const int *len,
                                   const search_sentence_t *const *sd, const uint64_t *keys, int n,
                                   search_result_t *res) {
    const translator_call_t *o = tr->call;
    tern_status_t st = TERN_OK;
    uint64_t *bkey = malloc((size_t)(n ? n : 1) * sizeof *bkey);
    len_idx_t *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    int **bsrc = malloc((size_t)(n ? n : 1) * sizeof(int *));
    int *blen = malloc((size_t)(n ? n : 1) * sizeof(int));
    int *bidx = malloc((size_t)(n ? n : 1) * sizeof(int));
    search_result_t *bres = calloc((size_t)(n ? n : 1), sizeof *bres);
    const search_sentence_t **bsd = calloc((size_t)(n ? n : 1), sizeof *bsd);
    if (!order || !bsrc || !blen || !bidx || !bres || !bsd || !bkey) {
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
        goto done;
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        res[i].n = 0;
        res[i].hyps = NULL;
        if (len[i] > 0) order[m++] = (len_idx_t){len[i], i};
        else { /* empty input: num_hypotheses empty hypotheses of score 0, without decoding */
            int nh = o->p.num_hypotheses > 0 ? o->p.num_hypotheses : 1;
            res[i].hyps = calloc((size_t)nh, sizeof(hypothesis_t));
            if (!res[i].hyps) {
                st = tern_error(TERN_ERR_NOMEM, "out of memory");
                goto done;
            }
            res[i].n = nh;
            if (o->hooks && o->hooks->given && hook_finish_input(o->hooks, i, &res[i])) {
                st = tern_error(TERN_ERR_CANCELLED, "stopped by the result callback");
                goto done;
            }
        }
    }
    if (!o->no_sort) qsort(order, (size_t)m, sizeof *order, cmp_len_desc);
    if (m > 0 && stream_ok(tr, sd, n)) {
        for (int k = 0; k < m; k++) {
            bsrc[k] = src[order[k].idx];
            blen[k] = order[k].len;
            bidx[k] = order[k].idx;
        }
        if ((st = decode_stream(tr, bsrc, blen, bidx, m, bres))) goto done;
        for (int k = 0; k < m; k++) res[order[k].idx] = bres[k];
        goto done;
    }
    for (int a = 0; a < m;) {
        if (hooks_cancelled(o->hooks)) {
            st = tern_error(TERN_ERR_CANCELLED, "cancelled before batch of input %d", order[a].idx);
            goto done;
        }
        /* the padded width of a batch is its longest source (sorted: the first) */
        int width = 0, b = 0;
        while (a + b < m && (o->max_batch_size <= 0 || b < o->max_batch_size)) {
            int w = order[a + b].len > width ? order[a + b].len : width;
            if (b > 0 && (long)(b + 1) * w > o->max_batch_tokens) break;
            width = w;
            b++;
        }
        for (int k = 0; k < b; k++) {
            bsrc[k] = src[order[a + k].idx];
            blen[k] = order[a + k].len;
            bsd[k] = sd ? sd[order[a + k].idx] : NULL;
            bidx[k] = order[a + k].idx;
        }
        for (int k = 0; k < b; k++) bkey[k] = keys ? keys[order[a + k].idx] : sample_key((uint64_t)order[a + k].idx, 0);
        if ((st = decode_batch(tr, bsrc, blen, bsd, bidx, bkey, b, bres))) goto done;
        for (int k = 0; k < b; k++) res[order[a + k].idx] = bres[k];
        a += b;
    }
done:
    free(order), free(bsrc), free(blen), free(bidx), free(bres), free(bsd), free(bkey);
    return st;
}

void tern_attention_free(tern_attention_t *a) {
    if (!a) return;
    for (int k = 0; a->weights && k < a->num_hypotheses; k++) free(a->weights[k]);
    free(a->weights), free(a->target_lengths);
    memset(a, 0, sizeof *a);
}

/* A search result's attention rows (sentence of S source tokens) as the API's: moved out of res. */
static tern_status_t to_attention(search_result_t *res, int S, tern_attention_t *a) {
    memset(a, 0, sizeof *a);
    a->target_lengths = calloc((size_t)(res->n ? res->n : 1), sizeof(int));
    a->weights = calloc((size_t)(res->n ? res->n : 1), sizeof(float *));
    if (!a->target_lengths || !a->weights) {
        free(a->target_lengths), free(a->weights);
        memset(a, 0, sizeof *a);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    a->num_hypotheses = res->n;
    a->source_length = S;
    for (int k = 0; k < res->n; k++) {
        a->target_lengths[k] = res->hyps[k].length;
        a->weights[k] = res->hyps[k].attn; /* NULL for an empty input's empty hypotheses */
        res->hyps[k].attn = NULL;
    }
    return TERN_OK;
}

void tern_result_free(tern_result_t *r) {
    if (!r) return;
    for (int i = 0; i < r->num_hypotheses; i++) free(r->hypotheses[i]);
    free(r->hypotheses);
    free(r->scores);
    memset(r, 0, sizeof *r);
}

tern_status_t tern_translate_batch(tern_translator_t *tr, const char *const *sources, int n,
                                   tern_result_t *results) {
    tern_request_t req = tern_request_default();
    req.sources = sources;
    req.num_sources = n;
    if (!results && n > 0) return tern_error(TERN_ERR_INVALID_ARG, "tern_translate_batch: NULL results");
    return tern_translate(tr, &req, results);
}

/* The request's sources as token ids (ids[i], len[i]; truncated with a warning). */
static tern_status_t encode_sources(tern_translator_t *tr, const tern_request_t *req, int **ids, int *len) {
    const translator_call_t *c = tr->call;
    for (int i = 0; i < req->num_sources; i++) {
        int trunc = 0;
        const char *s = req->sources[i] ? req->sources[i] : "";
        tern_status_t st = model_encode_source_lang(tr->model, s, strlen(s), c->max_input_length, c->pretok, c->src_lang_code, &ids[i],
                                                  &len[i], &trunc);
        if (st) return st;
        if (trunc) TERN_WARN("input %d: longer than %d tokens, truncated", i, c->max_input_length);
    }
    return TERN_OK;
}

/* The search data of each source with extras (sd[i]; NULL: none). */
static tern_status_t build_sentences(const request_extras_t *x, const tern_request_t *req, search_sentence_t **sd) {
    for (int i = 0; req->extras && i < req->num_sources; i++) {
        if (!req->extras[i]) continue;
        tern_status_t st = extras_sentence(x, i, req->extras[i], &sd[i]);
        if (st) return st;
    }
    return TERN_OK;
}

void tern_token_scores_free(tern_token_scores_t *s) {
    if (!s) return;
    for (int t = 0; s->tokens && t < s->num_tokens; t++) free(s->tokens[t]);
    free(s->tokens), free(s->log_probs);
    memset(s, 0, sizeof *s);
}

static tern_status_t force_decode(tern_translator_t *tr, int *const *src, const int *len, int ns, const int *rows,
                                  int *const *tids, const int *tlen, float **lp, const volatile int *cancel);

/* tern_request_t.token_scores: the best hypothesis of each source (res[i]'s first, vocabulary ids)
 * force-decoded against its source (ids[i], len[i]), in chunks within the call's token budget. */
static tern_status_t token_scores(tern_translator_t *tr, const tern_request_t *req, int *const *ids, const int *len,
                                  const search_result_t *res) {
    const int n = req->num_sources;
    const tern_model_t *m = tr->model, *m0 = m->n_members ? m->members[0] : m;
    const size_t nn = (size_t)(n > 0 ? n : 1);
    int **tids = calloc(nn, sizeof *tids), *tlen = calloc(nn, sizeof *tlen), *rows = malloc(nn * sizeof *rows);
    int **bsrc = malloc(nn * sizeof *bsrc), *blen = malloc(nn * sizeof *blen);
    float **lp = calloc(nn, sizeof *lp);
    tern_status_t st = TERN_OK;
    memset(req->token_scores, 0, nn * sizeof *req->token_scores);
    if (!tids || !tlen || !rows || !bsrc || !blen || !lp) {
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        if (len[i] <= 0 || res[i].n <= 0) continue;
        tids[i] = res[i].hyps[0].tokens;
        tlen[i] = res[i].hyps[0].length;
        if (tlen[i] + 1 > m->info.max_target_length) tlen[i] = m->info.max_target_length - 1;
        if (!(lp[i] = calloc((size_t)tlen[i] + 1, sizeof(float)))) {
            st = tern_error(TERN_ERR_NOMEM, "out of memory");
            goto done;
        }
    }
    for (int i = 0; i < n;) { /* chunks: sources x their longest source within max_batch_tokens */
        int ns = 0, width = 0;
        for (; i < n; i++) {
            if (!lp[i]) continue;
            int w = len[i] > width ? len[i] : width;
            if (ns > 0 && (long)(ns + 1) * w > tr->call->max_batch_tokens) break;
            width = w;
            bsrc[ns] = ids[i], blen[ns] = len[i], rows[ns++] = i;
        }
        if (ns > 0 && (st = force_decode(tr, bsrc, blen, ns, rows, tids, tlen, lp, req->cancel))) goto done;
    }
    for (int i = 0; i < n; i++) {
        if (!lp[i]) continue;
        tern_token_scores_t *ts = &req->token_scores[i];
        int skip = tr->call->tgt_lang >= 0 && tlen[i] > 0 && tids[i][0] == tr->call->tgt_lang; /* the forced code */
        int T = tlen[i] + 1 - skip;
        ts->tokens = calloc((size_t)T, sizeof(char *));
        ts->log_probs = malloc((size_t)T * sizeof(float));
        if (!ts->tokens || !ts->log_probs) {
            free(ts->tokens), free(ts->log_probs);
            memset(ts, 0, sizeof *ts);
            st = tern_error(TERN_ERR_NOMEM, "out of memory");
            goto done;
        }
        ts->num_tokens = T;
        for (int t = 0; t < T; t++) {
            int id = t + skip < tlen[i] ? tids[i][t + skip] : m->tgt_eos;
            const char *piece = vocab_token(m0->tgt_vocab, id);
            ts->log_probs[t] = lp[i][t + skip];
            if (!(ts->tokens[t] = strdup(piece ? piece : ""))) {
                st = tern_error(TERN_ERR_NOMEM, "out of memory");
                goto done;
            }
        }
    }
done:
    for (int i = 0; lp && i < n; i++) free(lp[i]);
    free(tids), free(tlen), free(rows), free(bsrc), free(blen), free(lp);
    if (st)
        for (int i = 0; i < n; i++) tern_token_scores_free(&req->token_scores[i]);
    return st;
}

/* tern_translate() on a checked request under the call tr->call. */
static tern_status_t translate_request(tern_translator_t *tr, const tern_request_t *req, const request_extras_t *x,
                                       tern_result_t *results) {
    const int n = req->num_sources;
    const size_t nn = (size_t)(n > 0 ? n : 1);
    translator_call_t *call = tr->call;
    tern_status_t st = TERN_OK;
    int **ids = calloc(nn, sizeof(int *));
    int *len = calloc(nn, sizeof(int));
    search_result_t *res = calloc(nn, sizeof *res);
    search_sentence_t **sd = req->extras ? calloc(nn, sizeof *sd) : NULL;
    uint64_t *keys = NULL; /* sampling keys from req->source_index */
    struct call_hooks hooks = {0};
    if (req->on_result || req->on_token || req->cancel) {
        hooks.tr = tr;
        hooks.req = req;
        hooks.results = results;
        hooks.given = calloc(nn, 1);
        hooks.emitted = calloc(nn, sizeof(char *));
        if (!hooks.given || !hooks.emitted) {
            st = tern_error(TERN_ERR_NOMEM, "out of memory");
            goto done;
        }
        call->hooks = &hooks;
    }
    if (!ids || !len || !res || (req->extras && !sd)) {
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (results) memset(results, 0, (size_t)n * sizeof *results);
    translator_set_threads(&tr->opt);
    if ((st = encode_sources(tr, req, ids, len)) || (st = build_sentences(x, req, sd))) goto done;
    if (req->source_index) {
        if (!(keys = malloc(nn * sizeof *keys))) {
            st = tern_error(TERN_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (int i = 0; i < n; i++) keys[i] = sample_key((uint64_t)req->source_index[i], 0);
    }
    call->sources = req->sources, call->src_ids = ids, call->src_len = len; /* replace_unknowns */
    if ((st = translator_translate_ids_sd(tr, ids, len, (const search_sentence_t *const *)sd, keys, n, res))) goto done;
    for (int i = 0; results && i < n; i++)
        if (!(hooks.given && hooks.given[i]) &&
            (st = to_result_src(tr, &res[i], call->pretok, &results[i], NULL, ids[i], len[i], req->sources[i])))
            goto done;
    if (req->token_scores && (st = token_scores(tr, req, ids, len, res))) goto done;
    for (int i = 0; req->attention && i < n; i++)
        if ((st = to_attention(&res[i], len[i], &req->attention[i]))) goto done;
done:
    call->hooks = NULL;
    call->sources = NULL, call->src_ids = NULL, call->src_len = NULL;
    for (int i = 0; i < n && res; i++) search_result_free(&res[i]);
    for (int i = 0; i < n && ids; i++) free(ids[i]);
    for (int i = 0; i < n && sd; i++) extras_sentence_free(sd[i]);
    for (int i = 0; i < n && hooks.emitted; i++) free(hooks.emitted[i]);
    free(hooks.given), free(hooks.emitted), free(hooks.map);
    free(ids), free(len), free(res), free(sd), free(keys);
    if (st && results)
        for (int i = 0; i < n; i++) tern_result_free(&results[i]);
    if (st && req->attention)
        for (int i = 0; i < n; i++) tern_attention_free(&req->attention[i]);
    if (st && req->token_scores)
        for (int i = 0; i < n; i++) tern_token_scores_free(&req->token_scores[i]);
    return st;
}

tern_status_t tern_translate(tern_translator_t *tr, const tern_request_t *request, tern_result_t *results) {
    tern_request_t req;
    tern_status_t st = request_in(&req, request, "tern_translate");
    if (st) return st;
    if (!tr) return tern_error(TERN_ERR_INVALID_ARG, "tern_translate: NULL translator");
    if (req.num_sources > 0 && !results && !req.on_result)
        return tern_error(TERN_ERR_INVALID_ARG, "tern_translate: NULL results without on_result");
    if (req.read_source || req.on_line || req.progress)
        return tern_error(TERN_ERR_INVALID_ARG, "tern_translate: read_source, on_line and progress are for tern_translate_stream()");
    translator_call_t call;
    if ((st = translator_call_init(tr, &req, &call))) return st;
    request_extras_t *x = NULL;
    if ((st = extras_new(&x, tr->model, &req, &call))) return st;
    call.global = extras_global(x);
    tr->call = &call;
    st = translate_request(tr, &req, x, results);
    tr->call = NULL;
    extras_free(x);
    return st;
}

/* ------------------------------------------------------------------ force decoding */

/* Force-decodes ns encoded sources (src, len; sentence r is input rows[r]) against their target
 * ids (tids[rows[r]], tlen[rows[r]] tokens, then EOS): lp[rows[r]][t] = the model's log-prob (an
 * ensemble's score) of target token t. */
static tern_status_t force_decode(tern_translator_t *tr, int *const *src, const int *len, int ns, const int *rows,
                                  int *const *tids, const int *tlen, float **lp, const volatile int *cancel) {
    const tern_model_t *m = tr->model;
    const model_family_t *fam = m->fam;
    const int V = m->info.target_vocab_size;
    tern_status_t st = fam->encode(tr->state, (const int *const *)src, len, ns);
    if (st) return st;
    int *sent = malloc((size_t)ns * sizeof(int)), *parent = malloc((size_t)ns * sizeof(int));
    int *tok = malloc((size_t)ns * sizeof(int));
    float *logits = aligned_alloc64((size_t)ns * V * sizeof(float));
    if (!sent || !parent || !tok || !logits) {
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int r = 0; r < ns; r++) {
        sent[r] = r;
        tok[r] = m->tgt_start;
    }
    for (int t = 0, R = ns; R > 0; t++) {
        if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED)) {
            st = tern_error(TERN_ERR_CANCELLED, "cancelled at step %d of force decoding", t);
            goto done;
        }
        if ((st = fam->step(tr->state, tok, t, logits, NULL))) goto done;
        if (!fam->step_logprobs) log_softmax_forward(logits, logits, R, V);
        int R2 = 0;
        for (int r = 0; r < R; r++) {
            int i = rows[sent[r]];
            int y = t < tlen[i] ? tids[i][t] : m->tgt_eos;
            lp[i][t] = logits[(size_t)r * V + y];
            if (t < tlen[i]) { /* the row goes on with its target token; finished rows leave */
                parent[R2] = r;
                sent[R2] = sent[r];
                tok[R2] = y;
                R2++;
            }
        }
        if (R2 == 0) break;
        if (R2 != R && (st = fam->set_rows(tr->state, parent, sent, R2))) goto done;
        R = R2;
    }
done:
    free(sent), free(parent), free(tok);
    aligned_free(logits);
    return st;
}

tern_status_t tern_score(tern_translator_t *tr, const tern_request_t *request, float **token_logprobs,
                         int *token_counts) {
    tern_request_t req;
    tern_status_t st = request_in(&req, request, "tern_score");
    if (st) return st;
    const int n = req.num_sources;
    if (!tr || (n > 0 && (!req.targets || !token_logprobs || !token_counts)))
        return tern_error(TERN_ERR_INVALID_ARG, "tern_score: NULL translator, targets or outputs");
    translator_call_t call;
    if ((st = translator_call_init(tr, &req, &call))) return st;
    const char *const *sources = req.sources, *const *targets = req.targets;
    const int pretok = call.pretok;
    const volatile int *cancel = req.cancel;
    const tern_model_t *m = tr->model;
    size_t nn = (size_t)(n > 0 ? n : 1);
    int **sids = calloc(nn, sizeof(int *)), **tids = calloc(nn, sizeof(int *)), **bsrc = malloc(nn * sizeof(int *));
    int *slen = calloc(nn, sizeof(int)), *tlen = calloc(nn, sizeof(int)), *blen = malloc(nn * sizeof(int));
    int *rows = malloc(nn * sizeof(int));
    for (int i = 0; i < n; i++) {
        token_logprobs[i] = NULL;
        token_counts[i] = 0;
    }
    if (!sids || !tids || !bsrc || !slen || !tlen || !blen || !rows) {
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
        goto done;
    }
    translator_set_threads(&tr->opt);
    int ns = 0; /* the non-empty sources, decoded as one batch (the CLI sizes batches by the token budget) */
    for (int i = 0; i < n; i++) {
        int trunc;
        const char *s = sources[i] ? sources[i] : "", *t = targets[i] ? targets[i] : "";
        if ((st = model_encode_source_lang(m, s, strlen(s), call.max_input_length, pretok, call.src_lang_code, &sids[i],
                                            &slen[i], &trunc)))
            goto done;
        if ((st = model_encode_target_ex(m, t, strlen(t), pretok, &tids[i], &tlen[i]))) goto done;
        if (call.tgt_lang >= 0) { /* the target language's code first (text_to_ids left room for it) */
            memmove(tids[i] + 1, tids[i], (size_t)tlen[i] * sizeof(int));
            tids[i][0] = call.tgt_lang;
            tlen[i]++;
        }
        if (tlen[i] + 1 > m->info.max_target_length) tlen[i] = m->info.max_target_length - 1;
        token_counts[i] = slen[i] > 0 ? tlen[i] + 1 : 0;
        if (!(token_logprobs[i] = calloc((size_t)tlen[i] + 1, sizeof(float)))) {
            st = tern_error(TERN_ERR_NOMEM, "out of memory");
            goto done;
        }
        if (slen[i] > 0) {
            bsrc[ns] = sids[i];
            blen[ns] = slen[i];
            rows[ns++] = i;
        }
    }
    if (ns > 0) st = force_decode(tr, bsrc, blen, ns, rows, tids, tlen, token_logprobs, cancel);
    for (int i = 0; !st && call.tgt_lang >= 0 && i < n; i++) /* the forced code's log-probability is not returned */
        if (token_counts[i] > 0 && tlen[i] > 0) {
            memmove(token_logprobs[i], token_logprobs[i] + 1, (size_t)tlen[i] * sizeof(float));
            token_counts[i]--;
        }
done:
    for (int i = 0; i < n; i++) {
        if (sids) free(sids[i]);
        if (tids) free(tids[i]);
    }
    if (st) tern_score_results_free(token_logprobs, n);
    free(sids), free(tids), free(bsrc), free(slen), free(tlen), free(blen), free(rows);
    return st;
}

void tern_score_results_free(float **token_logprobs, int n) {
    for (int i = 0; token_logprobs && i < n; i++) {
        free(token_logprobs[i]);
        token_logprobs[i] = NULL;
    }
}
