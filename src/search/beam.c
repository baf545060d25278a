/*
 * beam.c — batched beam search (Iglesias et al., Algorithm 1): the batch is N sentences × up to
 * B beams, flattened into rows grouped by sentence. Each step takes the top candidates of each
 * sentence over its rows × V log-probs, moves EOS candidates to the sentence's finished set,
 * reorders the model state with one set_rows() call, and drops finished sentences at once.
 *
 * EOS policies: TERN_EOS_COMMON takes 2B candidates and keeps B live hypotheses, replacing each
 * finished one with the next non-EOS candidate (CTranslate2, fairseq); TERN_EOS_PAPER takes B
 * candidates and an EOS candidate uses up its slot for that step (the paper).
 * Backoff (paper policy only): when a sentence ends without any hypothesis that ended in EOS, the
 * best EOS candidate that fell out of the beam on the way is returned first instead of a
 * truncated hypothesis. The common policy returns the hypotheses cut at the maximum length, as
 * CTranslate2 does.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "search.h"

typedef struct {
    hypothesis_t *h;
    int n, cap;
    int registered;     /* hypotheses registered so far (pruned ones included) */
    int eos_finished;   /* some hypothesis ended with EOS */
    int top_finished;   /* the best candidate of some step was EOS */
    int done;
    hypothesis_t fallen; /* best EOS candidate that fell out of the beam (tokens NULL: none) */
} finished_t;

typedef struct {
    int *tok, *par;     /* step log: token and parent entry (-1: start) */
    int n, cap;
} steplog_t;

static int log_push(steplog_t *L, int tok, int par) {
    if (L->n == L->cap) {
        int cap = L->cap ? L->cap * 2 : 1024;
        int *t = realloc(L->tok, (size_t)cap * sizeof(int));
        if (!t) return -1;
        L->tok = t;
        int *p = realloc(L->par, (size_t)cap * sizeof(int));
        if (!p) return -1;
        L->par = p;
        L->cap = cap;
    }
    L->tok[L->n] = tok;
    L->par[L->n] = par;
    return L->n++;
}

/* Tokens of the path ending at entry e (length len), plus extra (if >= 0), into a new array. */
static int *backtrack(const steplog_t *L, int e, int len, int extra, int *out_len) {
    int n = len + (extra >= 0);
    int *t = malloc((size_t)(n ? n : 1) * sizeof(int));
    if (!t) return NULL;
    if (extra >= 0) t[len] = extra;
    for (int i = len - 1; i >= 0; i--) {
        t[i] = L->tok[e];
        e = L->par[e];
    }
    *out_len = n;
    return t;
}

/* Tokens of the path ending at entry e (length len) into buf (len entries). */
static void backtrack_into(const steplog_t *L, int e, int len, int *buf) {
    for (int i = len - 1; i >= 0; i--) {
        buf[i] = L->tok[e];
        e = L->par[e];
    }
}

static int add_finished(finished_t *f, hypothesis_t h, int keep) {
    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 8;
        hypothesis_t *n = realloc(f->h, (size_t)cap * sizeof *n);
        if (!n) return -1;
        f->h = n;
        f->cap = cap;
    }
    f->h[f->n++] = h;
    f->registered++;
    /* keep the list short: drop the worst beyond 2 * keep */
    if (f->n > 2 * keep) {
        int worst = 0;
        for (int i = 1; i < f->n; i++)
            if (f->h[i].unmet > f->h[worst].unmet ||
                (f->h[i].unmet == f->h[worst].unmet && f->h[i].score < f->h[worst].score))
                worst = i;
        free(f->h[worst].tokens);
        f->h[worst] = f->h[--f->n];
    }
    return 0;
}

static int cmp_hyp(const void *a, const void *b) {
    const hypothesis_t *x = a, *y = b;
    if (x->unmet != y->unmet) return x->unmet < y->unmet ? -1 : 1;
    if (x->score > y->score) return -1;
    if (x->score < y->score) return 1;
    return 0;
}

/* Score of the k-th best finished hypothesis (k from 1, equal scores counted each), or -inf. */
static float kth_best(const finished_t *f, int k) {
    if (f->n < k) return -INFINITY;
    /* small lists: walk down the distinct scores, counting how many hold each */
    float v = INFINITY;
    for (int seen = 0; seen < k;) {
        float next = -INFINITY;
        for (int i = 0; i < f->n; i++)
            if (f->h[i].score < v && f->h[i].score > next) next = f->h[i].score;
        if (next == -INFINITY) return -INFINITY;
        v = next;
        for (int i = 0; i < f->n; i++) seen += f->h[i].score == v;
    }
    return v;
}

/* The step's candidate scores are never stored: score of row r, token v is
 * ((x[r, v] - mx[r]) - lse[r]) + score[r], the same float operations, in the same order, as
 * log_softmax_forward then adding the hypothesis score (so the same values, bit for bit). */
static inline float cand_score(const float *x, const float *mx, const float *lse, const float *score,
                               int r, int V, int v) {
    if (mx[r] == -INFINITY) return -INFINITY;
    return ((x[(size_t)r * V + v] - mx[r]) - lse[r]) + score[r];
}

/* For a model whose step gives scores already in log space (decoder_iface_t.logprobs): statistics
 * that make cand_score() the score itself plus the hypothesis score (mx 0, lse 0; mx -inf for a
 * row of -inf, as log_softmax_stats). */
static void scores_stats(float *mx, float *lse, const float *x, int M, int V) {
    for (int r = 0; r < M; r++) {
        float m = -INFINITY;
        for (int v = 0; v < V && m == -INFINITY; v++) m = x[(size_t)r * V + v];
        mx[r] = m == -INFINITY ? -INFINITY : 0.0f;
        lse[r] = 0.0f;
    }
}

/* Inserts (v, i) into the sorted list of length *len (capacity k); entries come in increasing index
 * order, so an equal value never goes before an existing one (as topk() in ops.c). */
static void cand_insert(float *values, int *indices, int *len, int k, float v, int i) {
    int j = *len < k ? (*len)++ : k - 1;
    while (j > 0 && values[j - 1] < v) {
        values[j] = values[j - 1];
        indices[j] = indices[j - 1];
        j--;
    }
    values[j] = v;
    indices[j] = i;
}

/* topk() over the candidate scores of rows [0, b) (index r * V + v), one pass over the logits
 * without writing them: what topk() gives on the stored log-probabilities plus scores. */
static void topk_candidates(float *values, int *indices, const float *x, const float *mx, const float *lse,
                            const float *score, int b, int V, int k) {
    int len = 0;
    float tmp[8];
    for (int r = 0; r < b; r++) {
        const float *row = x + (size_t)r * V;
        int v = 0;
        if (mx[r] == -INFINITY) { /* a row of -inf: only while the list fills */
            for (; v < V && len < k; v++) cand_insert(values, indices, &len, k, -INFINITY, r * V + v);
            continue;
        }
        for (; v < V && len < k; v++) cand_insert(values, indices, &len, k, cand_score(x, mx, lse, score, r, V, v), r * V + v);
        __m256 vm = _mm256_set1_ps(mx[r]), vl = _mm256_set1_ps(lse[r]), vs = _mm256_set1_ps(score[r]);
        for (; v + 8 <= V; v += 8) {
            __m256 y = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(row + v), vm), vl), vs);
            int mask = _mm256_movemask_ps(_mm256_cmp_ps(y, _mm256_set1_ps(values[k - 1]), _CMP_GT_OQ));
            if (!mask) continue;
            _mm256_storeu_ps(tmp, y);
            for (; mask; mask &= mask - 1) {
                int j = __builtin_ctz((unsigned)mask);
                if (tmp[j] > values[k - 1]) cand_insert(values, indices, &len, k, tmp[j], r * V + v + j);
            }
        }
        for (; v < V; v++) {
            float y = cand_score(x, mx, lse, score, r, V, v);
            if (y > values[k - 1]) cand_insert(values, indices, &len, k, y, r * V + v);
        }
    }
}

/* Sentence n's result from its finished hypotheses (sorted, with the backoff when none ended
 * with EOS); they move to the result. Returns -1 when out of memory. */
static int finalize(search_result_t *res, finished_t *f, int common, int nhyp) {
    qsort(f->h, (size_t)f->n, sizeof *f->h, cmp_hyp);
    int use_fallen = !common && !f->eos_finished && f->fallen.tokens;
    int total = f->n + use_fallen;
    int cnt = total < nhyp ? total : nhyp;
    res->hyps = calloc((size_t)(cnt ? cnt : 1), sizeof(hypothesis_t));
    if (!res->hyps) return -1;
    int k = 0;
    if (use_fallen && k < cnt) {
        res->hyps[k++] = f->fallen;
        f->fallen.tokens = NULL;
    }
    for (int i = 0; k < cnt; i++) {
        res->hyps[k++] = f->h[i];
        f->h[i].tokens = NULL;
    }
    res->n = cnt;
    f->done = 2;
    return 0;
}

tern_status_t beam_search(const decoder_iface_t *dec, int N, const int *max_len,
                          const search_options_t *opt, search_result_t *results) {
    const int V = dec->vocab_size, S = dec->source_len, B = opt->beam_size;
    const int common = opt->eos_policy == TERN_EOS_COMMON;
    const int K = common ? 2 * B : B; /* candidates taken per sentence */
    const int nhyp = opt->num_hypotheses < 1 ? 1 : opt->num_hypotheses;
    const int keep = nhyp > B ? nhyp : B;
    const int use_cov = opt->coverage_penalty != 0.0f;
    const int ct2_exit = opt->length_penalty == 0.0f && !use_cov;
    const size_t maxR = (size_t)N * B;
    tern_status_t st = TERN_OK;
    proc_chain_t chain;
    memset(&chain, 0, sizeof chain);
    int max_T = 1;
    for (int n = 0; n < N; n++) {
        results[n].n = 0;
        results[n].hyps = NULL;
        max_T = max_len[n] > max_T ? max_len[n] : max_T;
    }
    int *hook_buf = opt->on_step ? malloc((size_t)(max_T + 1) * sizeof(int)) : NULL;

    float *logits = aligned_alloc64(maxR * V * sizeof(float));
    float *attn = use_cov ? aligned_alloc64(maxR * (S ? S : 1) * sizeof(float)) : NULL;
    float *cov = use_cov ? calloc(maxR * (S ? S : 1), sizeof(float)) : NULL;
    float *cov2 = use_cov ? calloc(maxR * (S ? S : 1), sizeof(float)) : NULL;
    float *cov_tmp = use_cov ? calloc((size_t)(S ? S : 1), sizeof(float)) : NULL;
    float *cands_v = malloc((size_t)N * K * sizeof(float)); /* (N, K) top candidates per sentence */
    int *cands_i = malloc((size_t)N * K * sizeof(int));
    int *grp = malloc((size_t)(N + 1) * sizeof(int)); /* first row of each sentence's group */
    float *row_mx = malloc(maxR * sizeof(float)), *row_lse = malloc(maxR * sizeof(float));
    int *tokens = malloc(maxR * sizeof(int)), *tokens2 = malloc(maxR * sizeof(int));
    int *sent = malloc(maxR * sizeof(int)), *sent2 = malloc(maxR * sizeof(int));
    int *parent = malloc(maxR * sizeof(int));
    float *score = malloc(maxR * sizeof(float)), *score2 = malloc(maxR * sizeof(float));
    int *entry = malloc(maxR * sizeof(int)), *entry2 = malloc(maxR * sizeof(int));
    int *eos_taken = calloc(maxR, sizeof(int));
    finished_t *fin = calloc((size_t)N, sizeof *fin);
    steplog_t L = {0};
    if ((st = proc_chain_init(&chain, opt->procs, opt->num_procs, opt->min_length, opt->eos, (int)maxR))) {
        free(fin);
        fin = NULL;
        goto done;
    }
    const int on_logprobs = chain.has_stage[SEARCH_STAGE_LOGPROBS];
    const int sel = chain.sel >= 0 && chain.p[chain.sel].select && on_logprobs;
    const int pruning = opt->prune_width > 0.0f && opt->prune_width < INFINITY;
    const float log_thr = opt->prune_threshold > 0.0f ? logf(opt->prune_threshold) : -INFINITY;
    if (!logits || (use_cov && (!attn || !cov || !cov2 || !cov_tmp)) || !cands_v || !cands_i || !grp || !row_mx ||
        !row_lse || !tokens || !tokens2 ||
        !sent || !sent2 || !parent || !score || !score2 || !entry || !entry2 || !eos_taken || !fin ||
        (opt->on_step && !hook_buf)) {
        st = tern_error(TERN_ERR_NOMEM, "beam search: out of memory");
        goto done;
    }
    for (int n = 0; n < N; n++) {
        tokens[n] = opt->bos;
        sent[n] = n;
        score[n] = 0.0f;
        entry[n] = -1;
    }
    proc_chain_start(&chain, N);
    int R = N;
#define NOMEM() do { st = tern_error(TERN_ERR_NOMEM, "beam search: out of memory"); goto done; } while (0)
    for (int t = 0; R > 0; t++) {
        if (search_cancelled(opt)) {
            st = tern_error(TERN_ERR_CANCELLED, "cancelled at decoding step %d", t);
            goto done;
        }
        if ((st = dec->step(dec->self, tokens, t, logits, attn))) goto done;
        proc_chain_apply(&chain, SEARCH_STAGE_LOGITS, logits, R, V, t, sent);
        /* log-softmax statistics of every row, then the top candidates of every sentence (rows
         * and sentences on the translator's threads) */
        int G = 0;
        for (int a = 0; a < R; G++) {
            grp[G] = a;
            int n = sent[a];
            while (a < R && sent[a] == n) a++;
        }
        grp[G] = R;
        int nt = kernels_get_num_threads();
        nt = nt < G ? nt : G;
        if (on_logprobs) {
            /* processors on log-probabilities: the rows become log-probs in place (the same values as
             * the statistics give), the processors change them, and the scan below reads them with
             * max 0 and lse 0 (x - 0 - 0 + score: the same float operations) */
#pragma omp parallel num_threads(nt) if (nt > 1)
            {
                int nth = omp_get_num_threads(), ith = omp_get_thread_num();
                int r0 = (int)((long)R * ith / nth), r1 = (int)((long)R * (ith + 1) / nth);
                if (!(dec->logprobs && t >= opt->min_length)) /* else already log-space scores (an ensemble's) */
                    log_softmax_forward(logits + (size_t)r0 * V, logits + (size_t)r0 * V, r1 - r0, V);
            }
            proc_chain_apply(&chain, SEARCH_STAGE_LOGPROBS, logits, R, V, t, sent);
            for (int r = 0; r < R; r++) {
                const float *x = logits + (size_t)r * V;
                int any = 0;
                for (int v = 0; v < V && !any; v++) any = x[v] > -INFINITY;
                row_mx[r] = any ? 0.0f : -INFINITY;
                row_lse[r] = 0.0f;
            }
        }
#pragma omp parallel num_threads(nt) if (nt > 1)
        {
            int nth = omp_get_num_threads(), ith = omp_get_thread_num();
            int r0 = (int)((long)R * ith / nth), r1 = (int)((long)R * (ith + 1) / nth);
            if (!on_logprobs) {
                if (dec->logprobs && t >= opt->min_length) /* scores in log space (an ensemble's) */
                    scores_stats(row_mx + r0, row_lse + r0, logits + (size_t)r0 * V, r1 - r0, V);
                else
                    log_softmax_stats(row_mx + r0, row_lse + r0, logits + (size_t)r0 * V, r1 - r0, V);
            }
#pragma omp barrier
#pragma omp for schedule(dynamic, 1)
            for (int g = 0; g < G; g++) {
                int b = grp[g + 1] - grp[g];
                int kc = K < b * V ? K : b * V;
                if (sel) continue; /* below, one sentence at a time */
                topk_candidates(cands_v + (size_t)g * K, cands_i + (size_t)g * K, logits + (size_t)grp[g] * V,
                                row_mx + grp[g], row_lse + grp[g], score + grp[g], b, V, kc);
            }
        }
        for (int g = 0; sel && g < G; g++) {
            /* a processor chooses the candidates (constrained beam search), or leaves the plain top-K */
            int a = grp[g], b = grp[g + 1] - grp[g];
            int kc = K < b * V ? K : b * V;
            const search_proc_t *p = &chain.p[chain.sel];
            if (!p->select(p->self, sent[a], logits + (size_t)a * V, score + a, b, V, chain.state + (size_t)a * chain.W,
                           chain.W, chain.off[chain.sel], B, kc, cands_v + (size_t)g * K, cands_i + (size_t)g * K))
                topk_candidates(cands_v + (size_t)g * K, cands_i + (size_t)g * K, logits + (size_t)a * V, row_mx + a,
                                row_lse + a, score + a, b, V, kc);
        }
        for (int r = 0; r < R; r++) eos_taken[r] = 0;
        int R2 = 0;
        for (int g = 0; g < G; g++) {
            int a = grp[g], b = grp[g + 1] - grp[g], n = sent[a];
            finished_t *f = &fin[n];
            int last = t + 1 >= max_len[n];
            int kc = K < b * V ? K : b * V;
            const float *cand_v = cands_v + (size_t)g * K;
            const int *cand_i = cands_i + (size_t)g * K;
            int sec = common ? B : kc;
            int first_new = R2;
            int take = B < kc ? B : kc;
            for (int k = 0; k < take; k++) {
                float cv = cand_v[k];
                int ci = cand_i[k];
                if (cv == -INFINITY) break;
                if (pruning && !last && cv < cand_v[0] - opt->prune_width) break;
                int r = a + ci / V, tok = ci % V;
                if (k > 0 && !last && cv - score[r] < log_thr) continue;
                int is_eos = tok == opt->eos;
                if (is_eos || last) {
                    hypothesis_t h = {0};
                    h.tokens = backtrack(&L, entry[r], t, is_eos ? -1 : tok, &h.length);
                    if (!h.tokens) NOMEM();
                    h.raw = cv;
                    h.unmet = proc_chain_unmet(&chain, r, n, is_eos ? -1 : tok);
                    /* the normalized length counts the end token, as CTranslate2 and fairseq do: t + 1 */
                    h.score = cv / search_length_penalty(t + 1, opt->length_penalty, opt->length_norm);
                    if (use_cov) {
                        /* coverage over every step of the hypothesis, the end token's included
                         * (as its length is) */
                        float *c = cov + (size_t)r * S, *tmp = cov_tmp;
                        for (int j = 0; j < S; j++) tmp[j] = c[j] + attn[(size_t)r * S + j];
                        h.score += search_coverage_penalty(tmp, S, opt->coverage_penalty);
                    }
                    if (add_finished(f, h, keep)) NOMEM();
                    if (is_eos) {
                        f->eos_finished = 1;
                        eos_taken[r] = 1;
                        if (k == 0) f->top_finished = 1;
                    }
                    if (last) continue;
                    /* replace it by the next non-EOS candidate (common policy) */
                    int j = sec;
                    while (j < kc && (cand_i[j] % V == opt->eos || cand_v[j] == -INFINITY ||
                                      cand_v[j] - score[a + cand_i[j] / V] < log_thr))
                        j++;
                    if (j >= kc || (pruning && cand_v[j] < cand_v[0] - opt->prune_width)) continue;
                    sec = j + 1;
                    cv = cand_v[j];
                    ci = cand_i[j];
                    r = a + ci / V;
                    tok = ci % V;
                }
                parent[R2] = r;
                sent2[R2] = n;
                tokens2[R2] = tok;
                score2[R2] = cv;
                R2++;
            }
            /* backoff candidates (paper policy): EOS extensions that were not taken */
            for (int r = a; !common && r < a + b; r++) {
                float e = cand_score(logits, row_mx, row_lse, score, r, V, opt->eos);
                if (eos_taken[r] || e == -INFINITY) continue;
                float sc = e / search_length_penalty(t + 1, opt->length_penalty, opt->length_norm);
                if (use_cov) {
                    for (int j = 0; j < S; j++) cov_tmp[j] = cov[(size_t)r * S + j] + attn[(size_t)r * S + j];
                    sc += search_coverage_penalty(cov_tmp, S, opt->coverage_penalty);
                }
                if (f->fallen.tokens && sc <= f->fallen.score) continue;
                hypothesis_t h = {0};
                h.tokens = backtrack(&L, entry[r], t, -1, &h.length);
                if (!h.tokens) NOMEM();
                h.raw = e;
                h.score = sc;
                h.unmet = proc_chain_unmet(&chain, r, n, -1);
                free(f->fallen.tokens);
                f->fallen = h;
            }
            /* GNMT pruning: live hypotheses whose normalized score is more than the width below the
             * best finished one's leave the beam */
            if (pruning && f->n > 0 && R2 > first_new) {
                float best_fin = f->h[0].score;
                for (int i = 1; i < f->n; i++) best_fin = f->h[i].score > best_fin ? f->h[i].score : best_fin;
                float lp = search_length_penalty(t + 1, opt->length_penalty, opt->length_norm);
                int w = first_new;
                for (int i = first_new; i < R2; i++) {
                    if (score2[i] / lp < best_fin - opt->prune_width) continue;
                    parent[w] = parent[i], sent2[w] = sent2[i], tokens2[w] = tokens2[i], score2[w] = score2[i];
                    w++;
                }
                R2 = w;
            }
            /* is the sentence finished? */
            int finished = last || R2 == first_new;
            if (!finished && ct2_exit && opt->early_stop && f->top_finished && f->registered >= nhyp) finished = 1;
            if (!finished && !ct2_exit && opt->early_stop && f->registered >= B && f->registered >= nhyp)
                finished = 1;
            if (!finished && !use_cov && !chain.may_raise && f->eos_finished && f->n >= nhyp) {
                /* exact bound: no live hypothesis can reach the n-th best finished score */
                float best_live = -INFINITY;
                for (int i = first_new; i < R2; i++) best_live = score2[i] > best_live ? score2[i] : best_live;
                float bound = best_live / search_length_penalty(max_len[n], opt->length_penalty, opt->length_norm);
                if (opt->length_penalty == 0.0f) bound = best_live;
                if (kth_best(f, nhyp) >= bound) finished = 1;
            }
            if (finished) {
                R2 = first_new; /* its rows leave the batch */
                f->done = 1;
                if (finalize(&results[n], f, common, nhyp)) NOMEM();
                if (opt->on_finish && opt->on_finish(opt->hook_ctx, n, &results[n])) {
                    st = tern_error(TERN_ERR_CANCELLED, "stopped by the result callback at step %d", t);
                    goto done;
                }
            }
        }
        if (R2 == 0) break;
        /* step log entries and state of the new rows */
        for (int i = 0; i < R2; i++) {
            int e = log_push(&L, tokens2[i], entry[parent[i]]);
            if (e < 0) NOMEM();
            entry2[i] = e;
        }
        for (int a = 0; opt->on_step && a < R2;) { /* each sentence's best live hypothesis */
            int b = a, best_i = a;
            for (; b < R2 && sent2[b] == sent2[a]; b++)
                if (score2[b] > score2[best_i]) best_i = b;
            backtrack_into(&L, entry2[best_i], t + 1, hook_buf);
            if (opt->on_step(opt->hook_ctx, sent2[a], t, hook_buf, t + 1, 0)) {
                st = tern_error(TERN_ERR_CANCELLED, "stopped by the token callback at step %d", t);
                goto done;
            }
            a = b;
        }
        if (use_cov)
            for (int i = 0; i < R2; i++)
                for (int j = 0; j < S; j++)
                    cov2[(size_t)i * S + j] = cov[(size_t)parent[i] * S + j] + attn[(size_t)parent[i] * S + j];
        proc_chain_advance(&chain, parent, sent2, tokens2, R2, 0);
        if ((st = dec->set_rows(dec->self, parent, sent2, R2))) goto done;
        int *ti;
        float *tf;
        ti = tokens, tokens = tokens2, tokens2 = ti;
        ti = sent, sent = sent2, sent2 = ti;
        ti = entry, entry = entry2, entry2 = ti;
        tf = score, score = score2, score2 = tf;
        if (use_cov) tf = cov, cov = cov2, cov2 = tf;
        R = R2;
    }
    /* results of sentences not finished in the loop (none expected: every sentence leaves through
     * `finished`) */
    for (int n = 0; n < N; n++)
        if (fin[n].done != 2) {
            if (finalize(&results[n], &fin[n], common, nhyp)) NOMEM();
            if (opt->on_finish && opt->on_finish(opt->hook_ctx, n, &results[n])) {
                st = tern_error(TERN_ERR_CANCELLED, "stopped by the result callback");
                goto done;
            }
        }
#undef NOMEM
done:
    if (st)
        for (int n = 0; n < N; n++) search_result_free(&results[n]);
    free(hook_buf);
    for (int n = 0; fin && n < N; n++) {
        for (int i = 0; i < fin[n].n; i++) free(fin[n].h[i].tokens);
        free(fin[n].h);
        free(fin[n].fallen.tokens);
    }
    free(fin);
    proc_chain_free(&chain);
    free(L.tok), free(L.par);
    aligned_free(logits);
    aligned_free(attn);
    free(cov), free(cov2), free(cov_tmp), free(cands_v), free(cands_i), free(grp), free(row_mx), free(row_lse);
    free(tokens), free(tokens2), free(sent), free(sent2);
    free(parent), free(score), free(score2), free(entry), free(entry2), free(eos_taken);
    return st;
}
