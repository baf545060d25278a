/*
 * greedy.c — greedy search: argmax over the logits at each step (no softmax unless scores, a
 * length penalty or a processor on log-probabilities ask for it; a model whose step gives log-space
 * scores, as an ensemble's, is taken at its word; when nothing but the argmax is read, the model is
 * told so: decoder_iface_t.set_argmax_only); finished sentences leave the batch at once.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "search/search.h"

float search_length_penalty(int length, float alpha, tern_length_norm_t norm) {
    if (alpha == 0.0f) return 1.0f;
    if (norm == TERN_LENPEN_GNMT) return powf((5.0f + (float)length) / 6.0f, alpha);
    return powf((float)length, alpha); /* CTranslate2: length 0 gives 0 (score -> -inf) */
}

float search_coverage_penalty(const float *coverage, int S, float beta) {
    float p = 0;
    for (int j = 0; j < S; j++)
        if (coverage[j] > 0) p += logf(coverage[j] < 1.0f ? coverage[j] : 1.0f);
    return beta * p;
}

void search_result_free(search_result_t *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) free(r->hyps[i].tokens), free(r->hyps[i].attn);
    free(r->hyps);
    r->hyps = NULL;
    r->n = 0;
}

/* log-sum-exp of a row (for the log-probability of the chosen token). */
static float row_logsumexp(const float *x, int V, float mx) {
    double s = 0;
    for (int v = 0; v < V; v++) s += exp((double)(x[v] - mx));
    return mx + (float)log(s);
}

/* A sentence's one result: its tokens, raw score, and the score normalized over `steps` (the
 * processors' unnormalized part u kept out of the length penalty) plus the coverage penalty cp. */
static tern_status_t greedy_result(search_result_t *res, const int *toks, int len, float raw, float u, int steps,
                                   float cp, const float *att, int S, const search_options_t *opt) {
    hypothesis_t *h = calloc(1, sizeof *h);
    int *tk = malloc((size_t)(len ? len : 1) * sizeof(int));
    float *at = att ? malloc((size_t)(len ? len : 1) * (size_t)(S ? S : 1) * sizeof(float)) : NULL;
    if (!h || !tk || (att && !at)) {
        free(h), free(tk), free(at);
        return tern_error(TERN_ERR_NOMEM, "greedy search: out of memory");
    }
    if (at) memcpy(at, att, (size_t)len * S * sizeof(float));
    h->attn = at;
    memcpy(tk, toks, (size_t)len * sizeof(int));
    h->tokens = tk;
    h->length = len;
    h->raw = raw;
    h->score = (raw - u) / search_length_penalty(steps, opt->length_penalty, opt->length_norm) + u;
    if (cp != 0.0f) h->score += cp;
    res->hyps = h;
    res->n = 1;
    return TERN_OK;
}

/* The end of a greedy search: the model back to whole logits, and on failure no results. */
static tern_status_t greedy_end(const decoder_iface_t *dec, int argmax_only, tern_status_t st,
                                search_result_t *results, int N) {
    if (argmax_only) {
        tern_status_t s2 = dec->set_argmax_only(dec->self, 0);
        if (!st) st = s2;
    }
    if (st)
        for (int n = 0; n < N; n++) search_result_free(&results[n]);
    return st;
}

/* No result yet for any of the N sentences. */
static void results_clear(search_result_t *results, int N) {
    for (int n = 0; n < N; n++) {
        results[n].n = 0;
        results[n].hyps = NULL;
    }
}

/* The longest of the N maximum lengths, and at least `floor`. */
static int longest_max_len(const int *max_len, int N, int floor) {
    int max_T = floor;
    for (int n = 0; n < N; n++) max_T = max_len[n] > max_T ? max_len[n] : max_T;
    return max_T;
}

/* The token callback for sentence n at its step t (hypothesis hy of len tokens; ends: its last). */
static tern_status_t greedy_token_hook(const search_options_t *opt, int n, int t, const int *hy, int len, int ends) {
    if (opt->on_step && opt->on_step(opt->hook_ctx, n, t, hy, len, ends))
        return tern_error(TERN_ERR_CANCELLED, "stopped by the token callback at step %d", t);
    return TERN_OK;
}

/* Sentence n ends at its step t: its result (greedy_result's arguments) and the result callback. */
static tern_status_t greedy_finish(search_result_t *results, int n, int t, const int *hy, int len, float raw, float u,
                                   float cp, const float *att, int S, const search_options_t *opt) {
    tern_status_t st = greedy_result(&results[n], hy, len, raw, u, t + 1, cp, att, S, opt);
    if (st) return st;
    if (opt->on_finish && opt->on_finish(opt->hook_ctx, n, &results[n]))
        return tern_error(TERN_ERR_CANCELLED, "stopped by the result callback at step %d", t);
    return TERN_OK;
}

/* greedy_search's state: the options read once, the processors and the buffers. Rows: tokens (the
 * next input), sent (the sentence), parent (the row before compaction); per sentence: score, its
 * hypothesis hyp (max_T a sentence) of hlen tokens, its coverage cov (S a sentence). */
typedef struct {
    const decoder_iface_t *dec;
    const search_options_t *opt;
    const int *max_len;
    int N, V, S, max_T, need_attn, on_logprobs, argmax_ok;
    int lp_until;    /* on_logprobs: the step from which no processor on log-probabilities acts
                        and none is needed (no scores, no sampling); INT_MAX: never */
    int argmax_only; /* what the model was last told */
    proc_chain_t chain;
    int *tokens, *sent, *parent, *best, *hyp, *hlen;
    float *bestv, *score, *logits, *attn, *cov;
    float *hatt;         /* return_attention: (N, max_T, S) each sentence's rows so far, else NULL */
    sample_pair_t *work; /* (V) sampling's scratch */
} greedy_t;

/* Only the argmax of each row is read: the model may skip the rest (an int8 pre-screen); not with
 * scores, log-space scores or processors that read the logits or log-probabilities. */
static int greedy_argmax_ok(const greedy_t *g) {
    const search_options_t *opt = g->opt;
    int user_logits = 0;
    for (int i = 0; i < opt->num_procs; i++)
        user_logits |= opt->procs[i].stage == SEARCH_STAGE_LOGITS && !(opt->procs[i].n_bans > 0 && g->dec->set_argmax_never);
    return g->dec->set_argmax_only && !g->dec->logprobs && !(g->on_logprobs && g->lp_until == INT_MAX) &&
           !opt->need_scores && !user_logits;
}

/* Without scores or sampling, processors on log-probabilities that all stop acting at some step
 * (a forced prefix: NLLB's target language code) leave the rows to the logits' argmax from then
 * on: the step they all stop, else INT_MAX. */
static int greedy_lp_until(const greedy_t *g) {
    const search_options_t *opt = g->opt;
    if (opt->need_scores || opt->sampling.on) return INT_MAX;
    int until = 0;
    for (int i = 0; i < opt->num_procs; i++) {
        if (opt->procs[i].stage != SEARCH_STAGE_LOGPROBS) continue;
        if (opt->procs[i].until <= 0) return INT_MAX;
        if (opt->procs[i].until > until) until = opt->procs[i].until;
    }
    return until;
}

/* Whether step t normalizes the rows and runs the processors on log-probabilities. */
static int greedy_lp_now(const greedy_t *g, int t) { return g->on_logprobs && t < g->lp_until; }

/* Argmax-only steps with processors that only ban tokens (suppressed single tokens: a Hugging Face
 * checkpoint's pad): the model keeps those tokens out of each row's argmax (set_argmax_never), the
 * processors then remove them as on full logits. 0 where the model cannot (argmax_ok then 0). */
static int set_never(const decoder_iface_t *dec, const search_options_t *opt, int on) {
    for (int i = 0; i < opt->num_procs; i++)
        if (opt->procs[i].n_bans > 0 && opt->procs[i].stage == SEARCH_STAGE_LOGITS) {
            if (!dec->set_argmax_never) return 0;
            tern_status_t st = dec->set_argmax_never(dec->self, on ? opt->procs[i].bans : NULL,
                                                     on ? opt->procs[i].n_bans : 0);
            return st == TERN_OK;
        }
    return 1;
}
static int greedy_set_never(greedy_t *g, int on) { return set_never(g->dec, g->opt, on); }

static tern_status_t greedy_alloc(greedy_t *g) {
    size_t N = (size_t)g->N, S = (size_t)(g->S ? g->S : 1);
    g->tokens = malloc(N * sizeof(int));
    g->sent = malloc(N * sizeof(int));
    g->parent = malloc(N * sizeof(int));
    g->best = malloc(N * sizeof(int));
    g->bestv = malloc(N * sizeof(float));
    g->score = calloc(N, sizeof(float));
    g->hyp = malloc(N * (size_t)(g->max_T > 0 ? g->max_T : 1) * sizeof(int));
    g->hlen = calloc(N, sizeof(int));
    g->logits = aligned_alloc64(N * g->V * sizeof(float));
    g->attn = g->need_attn ? aligned_alloc64(N * S * sizeof(float)) : NULL;
    g->cov = g->need_attn ? calloc(N * S, sizeof(float)) : NULL;
    g->work = g->opt->sampling.on ? malloc((size_t)g->V * sizeof *g->work) : NULL;
    g->hatt = g->opt->return_attention ? malloc(N * (size_t)(g->max_T > 0 ? g->max_T : 1) * S * sizeof(float)) : NULL;
    if (!g->tokens || !g->sent || !g->parent || !g->best || !g->bestv || !g->score || !g->hyp || !g->hlen || !g->logits ||
        (g->need_attn && (!g->attn || !g->cov)) || (g->opt->sampling.on && !g->work) ||
        (g->opt->return_attention && !g->hatt))
        return tern_error(TERN_ERR_NOMEM, "greedy search: out of memory");
    return TERN_OK;
}

static void greedy_free(greedy_t *g) {
    free(g->tokens), free(g->sent), free(g->parent), free(g->best), free(g->bestv), free(g->score), free(g->hyp),
        free(g->hlen);
    aligned_free(g->logits);
    aligned_free(g->attn);
    free(g->cov);
    free(g->work);
    free(g->hatt);
}

static void sample_rows(greedy_t *g, int R, int t);

/* Step t of the R rows: the model's logits (argmax-only from the first step the minimum length no
 * longer masks EOS on: that mask needs the runner-up), the processors (on log-probabilities, the
 * rows normalized in place, where they ask for them), and each row's best token. */
static tern_status_t greedy_step(greedy_t *g, int R, int t) {
    const decoder_iface_t *dec = g->dec;
    const search_options_t *opt = g->opt;
    tern_status_t st;
    if (g->argmax_ok && !g->argmax_only && t >= opt->min_length && !greedy_lp_now(g, t)) {
        if ((st = dec->set_argmax_only(dec->self, 1))) return st;
        g->argmax_only = 1;
    }
    if ((st = dec->step(dec->self, g->tokens, t, g->logits, g->attn))) return st;
    proc_chain_apply(&g->chain, SEARCH_STAGE_LOGITS, g->logits, R, g->V, t, g->sent);
    if (greedy_lp_now(g, t)) {
        if (!(dec->logprobs && t >= opt->min_length)) log_softmax_forward(g->logits, g->logits, R, g->V);
        proc_chain_apply(&g->chain, SEARCH_STAGE_LOGPROBS, g->logits, R, g->V, t, g->sent);
    }
    if (opt->sampling.on) sample_rows(g, R, t);
    else argmax_rows(g->best, g->bestv, g->logits, R, g->V);
    return TERN_OK;
}

/* Random sampling instead of the argmax (sample.h): each row's token drawn from its log-probs
 * with the uniform number of (seed, its sentence's key, step t); bestv its log-prob. */
static void sample_rows(greedy_t *g, int R, int t) {
    const search_options_t *opt = g->opt;
    for (int r = 0; r < R; r++) {
        const float *x = g->logits + (size_t)r * g->V;
        double u = sample_uniform(opt->sampling.seed, opt->sample_key[g->sent[r]], t);
        g->best[r] = sample_row(&opt->sampling, x, g->V, u, g->work);
        g->bestv[r] = x[g->best[r]];
    }
}

/* Row r takes its best token at step t: the sentence's score, coverage and hypothesis grow; a
 * sentence that ends gets its result, another goes on as row *R2 of the next step. */
static tern_status_t greedy_take(greedy_t *g, search_result_t *results, int r, int t, int *R2) {
    const search_options_t *opt = g->opt;
    const int V = g->V, S = g->S, max_T = g->max_T;
    int n = g->sent[r], tok = g->best[r];
    float bestv = g->bestv[r];
    if (greedy_lp_now(g, t)) g->score[n] += bestv;
    else if (opt->need_scores)
        g->score[n] += g->dec->logprobs && t >= opt->min_length
                           ? bestv /* scores in log space (an ensemble's) */
                           : bestv - row_logsumexp(g->logits + (size_t)r * V, V, bestv);
    if (g->need_attn)
        for (int j = 0; j < S; j++) g->cov[(size_t)n * S + j] += g->attn[(size_t)r * S + j];
    int is_eos = tok == opt->eos;
    int *hy = g->hyp + (size_t)n * max_T;
    float *ha = g->hatt ? g->hatt + (size_t)n * max_T * S : NULL;
    if (!is_eos) {
        /* the attention of the step that chose the token (the end token's is not kept: it has no
         * token of the hypothesis, as CTranslate2's return_attention) */
        if (ha) memcpy(ha + (size_t)g->hlen[n] * S, g->attn + (size_t)r * S, (size_t)S * sizeof(float));
        hy[g->hlen[n]++] = tok;
    }
    int ends = is_eos || t + 1 >= g->max_len[n];
    tern_status_t st = greedy_token_hook(opt, n, t, hy, g->hlen[n], ends);
    if (st) return st;
    if (ends) {
        float u = proc_chain_unnormalized(&g->chain, r, n, is_eos ? -1 : tok);
        float cp = opt->coverage_penalty != 0.0f ? search_coverage_penalty(g->cov + (size_t)n * S, S, opt->coverage_penalty) : 0.0f;
        return greedy_finish(results, n, t, hy, g->hlen[n], g->score[n], u, cp, ha, S, opt);
    }
    g->parent[*R2] = r;
    g->sent[*R2] = n;
    g->tokens[*R2] = tok;
    (*R2)++;
    return TERN_OK;
}

/* The decoding loop: a step for the rows left until every sentence has ended. */
static tern_status_t greedy_decode(greedy_t *g, search_result_t *results) {
    const decoder_iface_t *dec = g->dec;
    tern_status_t st;
    for (int n = 0; n < g->N; n++) {
        g->tokens[n] = g->opt->bos;
        g->sent[n] = n;
    }
    proc_chain_start(&g->chain, g->N);
    int R = g->N;
    for (int t = 0; R > 0; t++) {
        if (search_cancelled(g->opt)) return tern_error(TERN_ERR_CANCELLED, "cancelled at decoding step %d", t);
        if ((st = greedy_step(g, R, t))) return st;
        int R2 = 0;
        for (int r = 0; r < R; r++)
            if ((st = greedy_take(g, results, r, t, &R2))) return st;
        if (R2 == 0) break;
        proc_chain_advance(&g->chain, g->parent, g->sent, g->tokens, R2, 1);
        /* rows keep their order: only when some left does the model compact its state */
        if (R2 != R && (st = dec->set_rows(dec->self, g->parent, g->sent, R2))) return st;
        R = R2;
    }
    return TERN_OK;
}

tern_status_t greedy_search(const decoder_iface_t *dec, int N, const int *max_len,
                            const search_options_t *opt, search_result_t *results) {
    greedy_t g = {.dec = dec, .opt = opt, .max_len = max_len, .N = N, .V = dec->vocab_size, .S = dec->source_len,
                  .max_T = longest_max_len(max_len, N, 0),
                  .need_attn = opt->coverage_penalty != 0.0f || opt->return_attention};
    results_clear(results, N);
    tern_status_t st = proc_chain_init(&g.chain, opt->procs, opt->num_procs, opt->min_length, opt->eos, N);
    if (st) return st;
    /* sampling draws from the log-probs, and a sampled hypothesis' score adds its tokens' */
    g.on_logprobs = g.chain.has_stage[SEARCH_STAGE_LOGPROBS] || opt->sampling.on;
    g.lp_until = g.on_logprobs ? greedy_lp_until(&g) : INT_MAX;
    g.argmax_ok = greedy_argmax_ok(&g) && greedy_set_never(&g, 1);
    if (!(st = greedy_alloc(&g))) st = greedy_decode(&g, results);
    st = greedy_end(dec, g.argmax_only, st, results, N);
    if (g.argmax_ok) greedy_set_never(&g, 0);
    proc_chain_free(&g.chain);
    greedy_free(&g);
    return st;
}

int search_feed_take(const search_feed_t *feed, const int *row_sent, int R, int in_flight, int next, int free_slots) {
    int width = 0;
    for (int r = 0; r < R; r++) width = feed->src_len[row_sent[r]] > width ? feed->src_len[row_sent[r]] : width;
    int k = 0;
    while (k < free_slots && next + k < feed->N) {
        int w = feed->src_len[next + k] > width ? feed->src_len[next + k] : width;
        if (in_flight + k > 0 && feed->max_tokens > 0 && (long)(in_flight + k + 1) * w > feed->max_tokens) break;
        width = w;
        k++;
    }
    return k;
}

/* greedy_search_stream's state. Rows (M at most): tokens, sent (the feed's sentence), sidx (the
 * model's sentence), rt (the row's step), parent, ban (under the minimum length) and its hypothesis
 * so far (hyp, max_T a row); per sentence of the feed: score and hlen. R rows, next: the next
 * sentence to admit, nsent: the model's sentences. */
typedef struct {
    const decoder_iface_t *dec;
    const search_feed_t *feed;
    const search_options_t *opt;
    const int *max_len;
    int N, V, M, max_T, min_admit, argmax_ok, can_ban;
    int argmax_only; /* what the model was last told */
    proc_chain_t chain; /* the token bans (search_procs_only_bans), no minimum length */
    int on_logprobs;    /* a ban on log-probabilities: the rows normalized, as greedy_search does */
    int never_set;      /* the model was told the bans on logits (set_argmax_never) */
    int *tokens, *sent, *sidx, *rt, *parent, *best, *hlen, *hyp;
    float *bestv, *score, *logits;
    unsigned char *ban;
    int R, next, nsent;
} greedy_stream_t;

static tern_status_t stream_alloc(greedy_stream_t *g) {
    size_t M = (size_t)g->M, N = (size_t)(g->N ? g->N : 1);
    g->tokens = malloc(M * sizeof(int));
    g->sent = malloc(M * sizeof(int));
    g->sidx = malloc(M * sizeof(int));
    g->rt = malloc(M * sizeof(int));
    g->parent = malloc(M * sizeof(int));
    g->best = malloc(M * sizeof(int));
    g->bestv = malloc(M * sizeof(float));
    g->ban = malloc(M);
    g->score = calloc(N, sizeof(float));
    g->hlen = calloc(N, sizeof(int));
    g->hyp = malloc(M * (size_t)g->max_T * sizeof(int));
    g->logits = aligned_alloc64(M * g->V * sizeof(float));
    if (!g->tokens || !g->sent || !g->sidx || !g->rt || !g->parent || !g->best || !g->bestv || !g->ban || !g->score ||
        !g->hlen || !g->hyp || !g->logits)
        return tern_error(TERN_ERR_NOMEM, "greedy search: out of memory");
    return TERN_OK;
}

static void stream_free(greedy_stream_t *g) {
    free(g->tokens), free(g->sent), free(g->sidx), free(g->rt), free(g->parent), free(g->best), free(g->bestv),
        free(g->ban), free(g->score), free(g->hlen), free(g->hyp);
    aligned_free(g->logits);
}

/* Admission before step *t: the next sentences join when enough rows are free (token budget: rows
 * x the longest source in flight, as a whole batch counts it); into an empty batch they start the
 * model afresh, at step 0. */
static tern_status_t stream_admit(greedy_stream_t *g, int *t) {
    const search_feed_t *feed = g->feed;
    int free_rows = g->M - g->R;
    if (!(g->next < g->N && (g->R == 0 || free_rows >= g->min_admit || free_rows >= g->N - g->next))) return TERN_OK;
    int k = search_feed_take(feed, g->sent, g->R, g->R, g->next, free_rows);
    if (k <= 0) return TERN_OK;
    int fresh = g->R == 0;
    tern_status_t st = feed->admit(feed->ctx, g->next, k, fresh);
    if (st) return st;
    if (fresh) g->nsent = 0, *t = 0;
    for (int i = 0; i < k; i++) {
        int r = g->R + i;
        g->tokens[r] = g->opt->bos;
        g->sent[r] = g->next + i;
        g->sidx[r] = g->nsent + i;
        g->rt[r] = 0;
    }
    g->nsent += k;
    g->next += k;
    if (feed->stats) feed->stats[2]++;
    g->R += k;
    return TERN_OK;
}

/* Step t of the rows: rows before the minimum length need the runner-up of EOS: the model gives it
 * for those rows (set_argmax_ban), or the step reads full logits; then EOS masked on those rows and
 * each row's best token. */
static tern_status_t stream_step(greedy_stream_t *g, int t) {
    const decoder_iface_t *dec = g->dec;
    const search_options_t *opt = g->opt;
    const int R = g->R, V = g->V;
    tern_status_t st;
    int young = 0;
    for (int r = 0; r < R; r++) young |= (g->ban[r] = g->rt[r] < opt->min_length);
    int want = g->argmax_ok && (!young || g->can_ban);
    if (want != g->argmax_only) {
        if ((st = dec->set_argmax_only(dec->self, want))) return st;
        g->argmax_only = want;
    }
    if (want && young && (st = dec->set_argmax_ban(dec->self, opt->eos, g->ban))) return st;
    if ((st = dec->step(dec->self, g->tokens, t, g->logits, NULL))) return st;
    if (g->feed->stats) g->feed->stats[0]++, g->feed->stats[1] += R;
    if (young)
        for (int r = 0; r < R; r++)
            if (g->rt[r] < opt->min_length) g->logits[(size_t)r * V + opt->eos] = -INFINITY;
    /* the bans, as greedy_search's chain runs them after the minimum length (they read neither the
     * step nor the sentence) */
    proc_chain_apply(&g->chain, SEARCH_STAGE_LOGITS, g->logits, R, V, t, g->sent);
    if (g->on_logprobs) {
        log_softmax_forward(g->logits, g->logits, R, V);
        proc_chain_apply(&g->chain, SEARCH_STAGE_LOGPROBS, g->logits, R, V, t, g->sent);
    }
    argmax_rows(g->best, g->bestv, g->logits, R, V);
    return TERN_OK;
}

/* Row r takes its best token at its own step: a sentence that ends gets its result, another goes
 * on as row *R2 (its hypothesis moved along). */
static tern_status_t stream_take(greedy_stream_t *g, search_result_t *results, int r, int *R2) {
    const search_options_t *opt = g->opt;
    const int V = g->V, max_T = g->max_T;
    int n = g->sent[r], tok = g->best[r], tr = g->rt[r];
    int *hy = g->hyp + (size_t)r * max_T;
    if (g->on_logprobs) g->score[n] += g->bestv[r];
    else if (opt->need_scores) g->score[n] += g->bestv[r] - row_logsumexp(g->logits + (size_t)r * V, V, g->bestv[r]);
    int is_eos = tok == opt->eos;
    if (!is_eos) hy[g->hlen[n]++] = tok;
    int ends = is_eos || tr + 1 >= g->max_len[n];
    tern_status_t st = greedy_token_hook(opt, n, tr, hy, g->hlen[n], ends);
    if (st) return st;
    /* greedy_search's arithmetic, without processors (u = 0) or coverage */
    if (ends) return greedy_finish(results, n, tr, hy, g->hlen[n], g->score[n], 0.0f, 0.0f, NULL, 0, opt);
    int k = *R2;
    if (k != r) memmove(g->hyp + (size_t)k * max_T, hy, (size_t)g->hlen[n] * sizeof(int));
    g->parent[k] = r;
    g->sent[k] = n;
    g->sidx[k] = g->sidx[r];
    g->rt[k] = tr + 1;
    g->tokens[k] = tok;
    (*R2)++;
    return TERN_OK;
}

/* The decoding loop: admission, a step, the tokens taken, until every sentence has ended. */
static tern_status_t stream_decode(greedy_stream_t *g, search_result_t *results) {
    const decoder_iface_t *dec = g->dec;
    tern_status_t st;
    for (int t = 0; g->R > 0 || g->next < g->N; t++) {
        if ((st = stream_admit(g, &t))) return st;
        if (search_cancelled(g->opt)) return tern_error(TERN_ERR_CANCELLED, "cancelled at decoding step %d", t);
        if ((st = stream_step(g, t))) return st;
        int R2 = 0;
        for (int r = 0; r < g->R; r++)
            if ((st = stream_take(g, results, r, &R2))) return st;
        /* rows keep their order: only when some left does the model compact its state */
        if (R2 != g->R && R2 > 0 && (st = dec->set_rows(dec->self, g->parent, g->sidx, R2))) return st;
        g->R = R2;
    }
    return TERN_OK;
}

/* Greedy search with continuous batching (search.h): greedy_stream_t's rows. */
tern_status_t greedy_search_stream(const decoder_iface_t *dec, const search_feed_t *feed, const int *max_len,
                                   const search_options_t *opt, search_result_t *results) {
    if (!search_procs_only_bans(opt->procs, opt->num_procs) || opt->coverage_penalty != 0.0f || dec->logprobs ||
        opt->sampling.on)
        return tern_error(TERN_ERR_INTERNAL, "continuous batching: processors other than token bans, coverage or "
                                             "log-space scores");
    greedy_stream_t g = {.dec = dec, .feed = feed, .opt = opt, .max_len = max_len, .N = feed->N, .V = dec->vocab_size,
                         .M = feed->max_rows > 0 ? feed->max_rows : 1, .max_T = longest_max_len(max_len, feed->N, 1),
                         .min_admit = feed->min_admit > 0 ? feed->min_admit : 1};
    results_clear(results, g.N);
    tern_status_t st = proc_chain_init(&g.chain, opt->procs, opt->num_procs, 0, opt->eos, g.M);
    if (st) return st;
    proc_chain_start(&g.chain, g.N);
    g.on_logprobs = g.chain.has_stage[SEARCH_STAGE_LOGPROBS];
    /* argmax-only steps: as greedy_search (greedy_argmax_ok, set_never): bans on logits kept out
     * of each row's argmax by the model, or none */
    g.argmax_ok = dec->set_argmax_only && !opt->need_scores && !g.on_logprobs && set_never(dec, opt, 1);
    g.never_set = g.argmax_ok;
    /* rows under the minimum length in argmax-only steps: where the model can (set_argmax_ban) */
    g.can_ban = g.argmax_ok && dec->set_argmax_ban && dec->set_argmax_ban(dec->self, opt->eos, NULL) == TERN_OK;
    st = stream_alloc(&g);
    if (!st) st = stream_decode(&g, results);
    st = greedy_end(dec, g.argmax_only, st, results, g.N);
    if (g.never_set) set_never(dec, opt, 0);
    proc_chain_free(&g.chain);
    stream_free(&g);
    return st;
}
