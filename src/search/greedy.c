/*
 * greedy.c — greedy search: argmax over the logits at each step (no softmax unless scores, a
 * length penalty or a processor on log-probabilities ask for it; a model whose step gives log-space
 * scores, as an ensemble's, is taken at its word; when nothing but the argmax is read, the model is
 * told so: decoder_iface_t.set_argmax_only); finished sentences leave the batch at once.
 */
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
    for (int i = 0; i < r->n; i++) free(r->hyps[i].tokens);
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
                                   float cp, const search_options_t *opt) {
    hypothesis_t *h = calloc(1, sizeof *h);
    int *tk = malloc((size_t)(len ? len : 1) * sizeof(int));
    if (!h || !tk) {
        free(h), free(tk);
        return tern_error(TERN_ERR_NOMEM, "greedy search: out of memory");
    }
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

tern_status_t greedy_search(const decoder_iface_t *dec, int N, const int *max_len,
                            const search_options_t *opt, search_result_t *results) {
    int V = dec->vocab_size, S = dec->source_len;
    int need_attn = opt->coverage_penalty != 0.0f;
    int max_T = 0;
    for (int n = 0; n < N; n++) max_T = max_len[n] > max_T ? max_len[n] : max_T;
    tern_status_t st = TERN_OK;
    for (int n = 0; n < N; n++) {
        results[n].n = 0;
        results[n].hyps = NULL;
    }
    proc_chain_t chain;
    if ((st = proc_chain_init(&chain, opt->procs, opt->num_procs, opt->min_length, opt->eos, N))) return st;
    /* processors on log-probabilities need them: the rows are then normalized in place */
    const int on_logprobs = chain.has_stage[SEARCH_STAGE_LOGPROBS];
    /* only the argmax of each row is read: the model may skip the rest (an int8 pre-screen), from
     * the first step the minimum length no longer masks EOS on (that mask needs the runner-up) */
    int user_logits = 0;
    for (int i = 0; i < opt->num_procs; i++) user_logits |= opt->procs[i].stage == SEARCH_STAGE_LOGITS;
    const int argmax_ok = dec->set_argmax_only && !dec->logprobs && !on_logprobs && !opt->need_scores && !user_logits;
    int argmax_only = 0; /* what the model was last told */
    int *tokens = malloc((size_t)N * sizeof(int));
    int *sent = malloc((size_t)N * sizeof(int));
    int *parent = malloc((size_t)N * sizeof(int));
    int *best = malloc((size_t)N * sizeof(int));
    float *bestv = malloc((size_t)N * sizeof(float));
    float *score = calloc((size_t)N, sizeof(float));
    int *hyp = malloc((size_t)N * (size_t)(max_T > 0 ? max_T : 1) * sizeof(int));
    int *hlen = calloc((size_t)N, sizeof(int));
    float *logits = aligned_alloc64((size_t)N * V * sizeof(float));
    float *attn = need_attn ? aligned_alloc64((size_t)N * (S ? S : 1) * sizeof(float)) : NULL;
    float *cov = need_attn ? calloc((size_t)N * (S ? S : 1), sizeof(float)) : NULL;
    if (!tokens || !sent || !parent || !best || !bestv || !score || !hyp || !hlen || !logits ||
        (need_attn && (!attn || !cov))) {
        st = tern_error(TERN_ERR_NOMEM, "greedy search: out of memory");
        goto done;
    }
    for (int n = 0; n < N; n++) {
        tokens[n] = opt->bos;
        sent[n] = n;
    }
    proc_chain_start(&chain, N);
    int R = N;
    for (int t = 0; R > 0; t++) {
        if (search_cancelled(opt)) {
            st = tern_error(TERN_ERR_CANCELLED, "cancelled at decoding step %d", t);
            goto done;
        }
        if (argmax_ok && !argmax_only && t >= opt->min_length) {
            if ((st = dec->set_argmax_only(dec->self, 1))) goto done;
            argmax_only = 1;
        }
        if ((st = dec->step(dec->self, tokens, t, logits, attn))) goto done;
        proc_chain_apply(&chain, SEARCH_STAGE_LOGITS, logits, R, V, t, sent);
        if (on_logprobs) {
            if (!(dec->logprobs && t >= opt->min_length)) log_softmax_forward(logits, logits, R, V);
            proc_chain_apply(&chain, SEARCH_STAGE_LOGPROBS, logits, R, V, t, sent);
        }
        argmax_rows(best, bestv, logits, R, V);
        int R2 = 0;
        for (int r = 0; r < R; r++) {
            int n = sent[r], tok = best[r];
            if (on_logprobs) score[n] += bestv[r];
            else if (opt->need_scores)
                score[n] += dec->logprobs && t >= opt->min_length
                                ? bestv[r] /* scores in log space (an ensemble's) */
                                : bestv[r] - row_logsumexp(logits + (size_t)r * V, V, bestv[r]);
            if (need_attn)
                for (int j = 0; j < S; j++) cov[(size_t)n * S + j] += attn[(size_t)r * S + j];
            int is_eos = tok == opt->eos;
            if (!is_eos) hyp[(size_t)n * max_T + hlen[n]++] = tok;
            int ends = is_eos || t + 1 >= max_len[n];
            if (opt->on_step && opt->on_step(opt->hook_ctx, n, t, hyp + (size_t)n * max_T, hlen[n], ends)) {
                st = tern_error(TERN_ERR_CANCELLED, "stopped by the token callback at step %d", t);
                goto done;
            }
            if (ends) {
                float u = proc_chain_unnormalized(&chain, r, n, is_eos ? -1 : tok);
                float cp = need_attn ? search_coverage_penalty(cov + (size_t)n * S, S, opt->coverage_penalty) : 0.0f;
                if ((st = greedy_result(&results[n], hyp + (size_t)n * max_T, hlen[n], score[n], u, t + 1, cp, opt)))
                    goto done;
                if (opt->on_finish && opt->on_finish(opt->hook_ctx, n, &results[n])) {
                    st = tern_error(TERN_ERR_CANCELLED, "stopped by the result callback at step %d", t);
                    goto done;
                }
            } else {
                parent[R2] = r;
                sent[R2] = n;
                tokens[R2] = tok;
                R2++;
            }
        }
        if (R2 == 0) break;
        proc_chain_advance(&chain, parent, sent, tokens, R2, 1);
        /* rows keep their order: only when some left does the model compact its state */
        if (R2 != R && (st = dec->set_rows(dec->self, parent, sent, R2))) goto done;
        R = R2;
    }
done:
    st = greedy_end(dec, argmax_only, st, results, N);
    proc_chain_free(&chain);
    free(tokens), free(sent), free(parent), free(best), free(bestv), free(score), free(hyp), free(hlen);
    aligned_free(logits);
    aligned_free(attn);
    free(cov);
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

/* Greedy search with continuous batching (search.h). Rows: tokens, sent (the feed's sentence),
 * sidx (the model's sentence), rt (the row's step) and its hypothesis so far (hyp, a row each). */
tern_status_t greedy_search_stream(const decoder_iface_t *dec, const search_feed_t *feed, const int *max_len,
                                   const search_options_t *opt, search_result_t *results) {
    int V = dec->vocab_size, N = feed->N, M = feed->max_rows > 0 ? feed->max_rows : 1;
    if (opt->num_procs || opt->coverage_penalty != 0.0f || dec->logprobs)
        return tern_error(TERN_ERR_INTERNAL, "continuous batching: processors, coverage or log-space scores");
    int max_T = 1;
    for (int n = 0; n < N; n++) max_T = max_len[n] > max_T ? max_len[n] : max_T;
    tern_status_t st = TERN_OK;
    for (int n = 0; n < N; n++) {
        results[n].n = 0;
        results[n].hyps = NULL;
    }
    const int argmax_ok = dec->set_argmax_only && !opt->need_scores;
    int argmax_only = 0; /* what the model was last told */
    int min_admit = feed->min_admit > 0 ? feed->min_admit : 1;
    /* rows under the minimum length in argmax-only steps: where the model can (set_argmax_ban) */
    const int can_ban = argmax_ok && dec->set_argmax_ban && dec->set_argmax_ban(dec->self, opt->eos, NULL) == TERN_OK;
    int *tokens = malloc((size_t)M * sizeof(int));
    int *sent = malloc((size_t)M * sizeof(int));
    int *sidx = malloc((size_t)M * sizeof(int));
    int *rt = malloc((size_t)M * sizeof(int));
    int *parent = malloc((size_t)M * sizeof(int));
    int *best = malloc((size_t)M * sizeof(int));
    float *bestv = malloc((size_t)M * sizeof(float));
    unsigned char *ban = malloc((size_t)M);
    float *score = calloc((size_t)(N ? N : 1), sizeof(float));
    int *hlen = calloc((size_t)(N ? N : 1), sizeof(int));
    int *hyp = malloc((size_t)M * (size_t)max_T * sizeof(int));
    float *logits = aligned_alloc64((size_t)M * V * sizeof(float));
    if (!tokens || !sent || !sidx || !rt || !parent || !best || !bestv || !ban || !score || !hlen || !hyp || !logits) {
        st = tern_error(TERN_ERR_NOMEM, "greedy search: out of memory");
        goto done;
    }
    int R = 0, next = 0, nsent = 0; /* rows, the next sentence to admit, the model's sentences */
    for (int t = 0; R > 0 || next < N; t++) {
        /* admission: the next sentences join when enough rows are free (token budget: rows x the
         * longest source in flight, as a whole batch counts it) */
        int free_rows = M - R;
        if (next < N && (R == 0 || free_rows >= min_admit || free_rows >= N - next)) {
            int k = search_feed_take(feed, sent, R, R, next, free_rows);
            if (k > 0) {
                int fresh = R == 0;
                if ((st = feed->admit(feed->ctx, next, k, fresh))) goto done;
                if (fresh) nsent = 0, t = 0;
                for (int i = 0; i < k; i++) {
                    tokens[R + i] = opt->bos;
                    sent[R + i] = next + i;
                    sidx[R + i] = nsent + i;
                    rt[R + i] = 0;
                }
                nsent += k;
                next += k;
                if (feed->stats) feed->stats[2]++;
                R += k;
            }
        }
        if (search_cancelled(opt)) {
            st = tern_error(TERN_ERR_CANCELLED, "cancelled at decoding step %d", t);
            goto done;
        }
        /* rows before the minimum length need the runner-up of EOS: the model gives it for those
         * rows (set_argmax_ban), or the step reads full logits */
        int young = 0;
        for (int r = 0; r < R; r++) young |= (ban[r] = rt[r] < opt->min_length);
        int want = argmax_ok && (!young || can_ban);
        if (want != argmax_only) {
            if ((st = dec->set_argmax_only(dec->self, want))) goto done;
            argmax_only = want;
        }
        if (want && young && (st = dec->set_argmax_ban(dec->self, opt->eos, ban))) goto done;
        if ((st = dec->step(dec->self, tokens, t, logits, NULL))) goto done;
        if (feed->stats) feed->stats[0]++, feed->stats[1] += R;
        if (young)
            for (int r = 0; r < R; r++)
                if (rt[r] < opt->min_length) logits[(size_t)r * V + opt->eos] = -INFINITY;
        argmax_rows(best, bestv, logits, R, V);
        int R2 = 0;
        for (int r = 0; r < R; r++) {
            int n = sent[r], tok = best[r], tr = rt[r];
            int *hy = hyp + (size_t)r * max_T;
            if (opt->need_scores) score[n] += bestv[r] - row_logsumexp(logits + (size_t)r * V, V, bestv[r]);
            int is_eos = tok == opt->eos;
            if (!is_eos) hy[hlen[n]++] = tok;
            int ends = is_eos || tr + 1 >= max_len[n];
            if (opt->on_step && opt->on_step(opt->hook_ctx, n, tr, hy, hlen[n], ends)) {
                st = tern_error(TERN_ERR_CANCELLED, "stopped by the token callback at step %d", tr);
                goto done;
            }
            if (ends) {
                /* greedy_search's arithmetic, without processors (u = 0) or coverage */
                if ((st = greedy_result(&results[n], hy, hlen[n], score[n], 0.0f, tr + 1, 0.0f, opt))) goto done;
                if (opt->on_finish && opt->on_finish(opt->hook_ctx, n, &results[n])) {
                    st = tern_error(TERN_ERR_CANCELLED, "stopped by the result callback at step %d", tr);
                    goto done;
                }
            } else {
                if (R2 != r) memmove(hyp + (size_t)R2 * max_T, hy, (size_t)hlen[n] * sizeof(int));
                parent[R2] = r;
                sent[R2] = n;
                sidx[R2] = sidx[r];
                rt[R2] = tr + 1;
                tokens[R2] = tok;
                R2++;
            }
        }
        /* rows keep their order: only when some left does the model compact its state */
        if (R2 != R && R2 > 0 && (st = dec->set_rows(dec->self, parent, sidx, R2))) goto done;
        R = R2;
    }
done:
    st = greedy_end(dec, argmax_only, st, results, N);
    free(tokens), free(sent), free(sidx), free(rt), free(parent), free(best), free(bestv), free(ban), free(score), free(hlen),
        free(hyp);
    aligned_free(logits);
    return st;
}
