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
#include "search/search.h"

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

/* return_attention: the attention rows of the path ending at entry e (length len), plus the row
 * extra (S floats, when not NULL) for a last token that is not in the log, into a new array. */
static float *backtrack_attn(const float *alog, int S, const steplog_t *L, int e, int len, const float *extra) {
    int n = len + (extra != NULL);
    float *a = malloc((size_t)(n ? n : 1) * (size_t)(S ? S : 1) * sizeof(float));
    if (!a) return NULL;
    if (extra) memcpy(a + (size_t)len * S, extra, (size_t)S * sizeof(float));
    for (int i = len - 1; i >= 0; i--) {
        memcpy(a + (size_t)i * S, alog + (size_t)e * S, (size_t)S * sizeof(float));
        e = L->par[e];
    }
    return a;
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
        free(f->h[worst].tokens), free(f->h[worst].attn);
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
            for (; v < V && len < k; v++) topk_insert(values, indices, &len, k, -INFINITY, r * V + v);
            continue;
        }
        for (; v < V && len < k; v++) topk_insert(values, indices, &len, k, cand_score(x, mx, lse, score, r, V, v), r * V + v);
        __m256 vm = _mm256_set1_ps(mx[r]), vl = _mm256_set1_ps(lse[r]), vs = _mm256_set1_ps(score[r]);
        for (; v + 8 <= V; v += 8) {
            __m256 y = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(row + v), vm), vl), vs);
            int mask = _mm256_movemask_ps(_mm256_cmp_ps(y, _mm256_set1_ps(values[k - 1]), _CMP_GT_OQ));
            if (!mask) continue;
            _mm256_storeu_ps(tmp, y);
            for (; mask; mask &= mask - 1) {
                int j = __builtin_ctz((unsigned)mask);
                if (tmp[j] > values[k - 1]) topk_insert(values, indices, &len, k, tmp[j], r * V + v + j);
            }
        }
        for (; v < V; v++) {
            float y = cand_score(x, mx, lse, score, r, V, v);
            if (y > values[k - 1]) topk_insert(values, indices, &len, k, y, r * V + v);
        }
    }
}

/* The search's working state: options read once, the per-step buffers (current rows and the
 * next step's, swapped after each step), the finished sets and the step log. */
typedef struct {
    const decoder_iface_t *dec;
    const search_options_t *opt;
    const int *max_len;
    int N, V, S, B, K, nhyp, keep;
    int marian;         /* TERN_EOS_MARIAN: B - (finished hypotheses) candidates per step */
    int common, use_cov, ct2_exit, on_logprobs, sel, pruning;
    int max_cand;       /* finished hypotheses that stop a sentence with penalties: round(B * patience) */
    float log_thr;
    float *logits, *attn, *cov, *cov2, *cov_tmp;
    size_t logits_bytes;    /* big_alloc'd */
    /* return_attention: the attention row (S) of each step log entry's step (alog, alog_cap
     * entries), beside L */
    int ret_att;
    float *alog;
    size_t alog_cap;
    float *cands_v;     /* (N, K) top candidates per sentence */
    int *cands_i;
    int *grp;           /* first row of each sentence's group; grp[G] = R */
    float *row_mx, *row_lse;
    int *tokens, *tokens2, *sent, *sent2, *parent, *entry, *entry2, *eos_taken;
    float *score, *score2;
    finished_t *fin;
    steplog_t L;
    proc_chain_t chain;
    search_result_t *results; /* (N) the caller's: a sentence's result is made when it finishes */
    int *hook_buf;            /* (max length + 1) tokens for opt->on_step, or NULL */
    /* continuous batching (beam_search_stream), else NULL: the global step at which each sentence
     * started (its own step is t - t0[n]), the model's index of each sentence (set_rows' sent) and
     * set_rows' buffer for them */
    int *t0, *msent, *msent2;
} beam_t;

/* Sentence n's own step at the search's step t. */
static inline int own_step(const beam_t *b, int n, int t) { return b->t0 ? t - b->t0[n] : t; }

static void beam_free(beam_t *b) {
    for (int n = 0; b->fin && n < b->N; n++) {
        for (int i = 0; i < b->fin[n].n; i++) free(b->fin[n].h[i].tokens), free(b->fin[n].h[i].attn);
        free(b->fin[n].h);
        free(b->fin[n].fallen.tokens), free(b->fin[n].fallen.attn);
    }
    free(b->fin);
    proc_chain_free(&b->chain);
    free(b->L.tok), free(b->L.par);
    big_free(b->logits, b->logits_bytes);
    aligned_free(b->attn);
    free(b->cov), free(b->cov2), free(b->cov_tmp), free(b->cands_v), free(b->cands_i), free(b->grp);
    free(b->row_mx), free(b->row_lse);
    free(b->tokens), free(b->tokens2), free(b->sent), free(b->sent2);
    free(b->parent), free(b->score), free(b->score2), free(b->entry), free(b->entry2), free(b->eos_taken);
    free(b->hook_buf);
    free(b->t0), free(b->msent), free(b->msent2);
    free(b->alog);
}

/* Options and buffers for N sentences, at most G_max of them in flight with up to B rows each;
 * with first_rows, the first step's rows (one per sentence, BOS; G_max = N). */
static tern_status_t beam_init(beam_t *b, const decoder_iface_t *dec, int N, int G_max, int first_rows,
                               const int *max_len, const search_options_t *opt) {
    memset(b, 0, sizeof *b);
    b->dec = dec, b->opt = opt, b->max_len = max_len, b->N = N;
    b->V = dec->vocab_size, b->S = dec->source_len, b->B = opt->beam_size;
    b->common = opt->eos_policy == TERN_EOS_COMMON;
    b->marian = opt->eos_policy == TERN_EOS_MARIAN;
    b->K = b->common ? 2 * b->B : b->B; /* candidates taken per sentence */
    b->nhyp = opt->num_hypotheses < 1 ? 1 : opt->num_hypotheses;
    b->keep = b->nhyp > b->B ? b->nhyp : b->B;
    b->use_cov = opt->coverage_penalty != 0.0f;
    b->ret_att = opt->return_attention != 0;
    b->ct2_exit = opt->length_penalty == 0.0f && !b->use_cov;
    /* CTranslate2's max_candidates: round(B * patience), at least 1 */
    b->max_cand = opt->patience > 0 ? (int)lroundf((float)b->B * opt->patience) : b->B;
    if (b->max_cand < 1) b->max_cand = 1;
    const size_t maxR = (size_t)G_max * b->B, S1 = (size_t)(b->S ? b->S : 1);
    b->logits_bytes = maxR * b->V * sizeof(float);
    b->logits = big_alloc(b->logits_bytes);
    if (b->use_cov || b->ret_att) b->attn = aligned_alloc64(maxR * S1 * sizeof(float));
    if (b->use_cov) {
        b->cov = calloc(maxR * S1, sizeof(float));
        b->cov2 = calloc(maxR * S1, sizeof(float));
        b->cov_tmp = calloc(S1, sizeof(float));
    }
    b->cands_v = malloc((size_t)G_max * b->K * sizeof(float));
    b->cands_i = malloc((size_t)G_max * b->K * sizeof(int));
    b->grp = malloc((size_t)(G_max + 1) * sizeof(int));
    b->row_mx = malloc(maxR * sizeof(float)), b->row_lse = malloc(maxR * sizeof(float));
    b->tokens = malloc(maxR * sizeof(int)), b->tokens2 = malloc(maxR * sizeof(int));
    b->sent = malloc(maxR * sizeof(int)), b->sent2 = malloc(maxR * sizeof(int));
    b->parent = malloc(maxR * sizeof(int));
    b->score = malloc(maxR * sizeof(float)), b->score2 = malloc(maxR * sizeof(float));
    b->entry = malloc(maxR * sizeof(int)), b->entry2 = malloc(maxR * sizeof(int));
    b->eos_taken = calloc(maxR, sizeof(int));
    b->fin = calloc((size_t)N, sizeof *b->fin);
    if (!b->fin) return tern_error(TERN_ERR_NOMEM, "beam search: out of memory");
    if (opt->on_step) {
        int max_T = 1;
        for (int n = 0; n < N; n++) max_T = max_len[n] > max_T ? max_len[n] : max_T;
        if (!(b->hook_buf = malloc((size_t)(max_T + 1) * sizeof(int))))
            return tern_error(TERN_ERR_NOMEM, "beam search: out of memory");
    }
    tern_status_t st = proc_chain_init(&b->chain, opt->procs, opt->num_procs, opt->min_length, opt->eos, (int)maxR);
    if (st) {
        free(b->fin);
        b->fin = NULL;
        return st;
    }
    b->on_logprobs = b->chain.has_stage[SEARCH_STAGE_LOGPROBS];
    b->sel = b->chain.sel >= 0 && b->chain.p[b->chain.sel].select && b->on_logprobs;
    b->pruning = opt->prune_width > 0.0f && opt->prune_width < INFINITY;
    b->log_thr = opt->prune_threshold > 0.0f ? logf(opt->prune_threshold) : -INFINITY;
    if (!b->logits || (b->use_cov && (!b->attn || !b->cov || !b->cov2 || !b->cov_tmp)) || (b->ret_att && !b->attn) ||
        !b->cands_v ||
        !b->cands_i || !b->grp || !b->row_mx || !b->row_lse || !b->tokens || !b->tokens2 || !b->sent ||
        !b->sent2 || !b->parent || !b->score || !b->score2 || !b->entry || !b->entry2 || !b->eos_taken)
        return tern_error(TERN_ERR_NOMEM, "beam search: out of memory");
    if (!first_rows) return TERN_OK;
    for (int n = 0; n < N; n++) {
        b->tokens[n] = opt->bos;
        b->sent[n] = n;
        b->score[n] = 0.0f;
        b->entry[n] = -1;
    }
    proc_chain_start(&b->chain, N);
    return TERN_OK;
}

/* Groups the R rows by sentence (grp); returns the number of groups. */
static int beam_groups(beam_t *b, int R) {
    int G = 0;
    for (int a = 0; a < R; G++) {
        b->grp[G] = a;
        int n = b->sent[a];
        while (a < R && b->sent[a] == n) a++;
    }
    b->grp[G] = R;
    return G;
}

/* Log-softmax statistics of every row, then the top candidates of every sentence (rows and
 * sentences on the translator's threads). */
static void beam_candidates(beam_t *b, int R, int G, int t) {
    const int V = b->V, K = b->K;
    const decoder_iface_t *dec = b->dec;
    const search_options_t *opt = b->opt;
    float *logits = b->logits;
    int nt = kernels_get_num_threads();
    nt = nt < G ? nt : G;
    if (b->on_logprobs) {
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
        proc_chain_apply(&b->chain, SEARCH_STAGE_LOGPROBS, logits, R, V, t, b->sent);
        for (int r = 0; r < R; r++) {
            const float *x = logits + (size_t)r * V;
            int any = 0;
            for (int v = 0; v < V && !any; v++) any = x[v] > -INFINITY;
            b->row_mx[r] = any ? 0.0f : -INFINITY;
            b->row_lse[r] = 0.0f;
        }
    }
    /* One sentence at a time, its rows' statistics then its candidates: the scan finds the rows
     * (B x V floats, 512 KB for beam 4 and 32k pieces) still in L2 where the statistics left them,
     * instead of reading the whole step's logits back from L3 or memory. */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1)
    for (int g = 0; g < G; g++) {
        int a = b->grp[g], n = b->grp[g + 1] - a;
        int kc = K < n * V ? K : n * V;
        if (!b->on_logprobs) {
            if (dec->logprobs && t >= opt->min_length) /* scores in log space (an ensemble's) */
                scores_stats(b->row_mx + a, b->row_lse + a, logits + (size_t)a * V, n, V);
            else
                log_softmax_stats(b->row_mx + a, b->row_lse + a, logits + (size_t)a * V, n, V);
        }
        if (b->sel) continue; /* below, one sentence at a time */
        topk_candidates(b->cands_v + (size_t)g * K, b->cands_i + (size_t)g * K, logits + (size_t)a * V,
                        b->row_mx + a, b->row_lse + a, b->score + a, n, V, kc);
    }
    for (int g = 0; b->sel && g < G; g++) {
        /* a processor chooses the candidates (constrained beam search), or leaves the plain top-K */
        int a = b->grp[g], n = b->grp[g + 1] - a;
        int kc = K < n * V ? K : n * V;
        const proc_chain_t *c = &b->chain;
        const search_proc_t *p = &c->p[c->sel];
        if (!p->select(p->self, b->sent[a], logits + (size_t)a * V, b->score + a, n, V, c->state + (size_t)a * c->W,
                       c->W, c->off[c->sel], b->B, kc, b->cands_v + (size_t)g * K, b->cands_i + (size_t)g * K))
            topk_candidates(b->cands_v + (size_t)g * K, b->cands_i + (size_t)g * K, logits + (size_t)a * V,
                            b->row_mx + a, b->row_lse + a, b->score + a, n, V, kc);
    }
}

/* Score of a hypothesis that ends at step t on row r (sentence n) taking tok (-1: EOS) with raw
 * score cv: length penalty (on the part of cv a processor does not keep out of it), and the
 * coverage penalty over every step of the hypothesis, the end token's included (as its length
 * is). */
static float beam_final_score(beam_t *b, int r, int n, int t, int tok, float cv) {
    const search_options_t *opt = b->opt;
    const int S = b->S;
    float u = proc_chain_unnormalized(&b->chain, r, n, tok);
    float sc = (cv - u) / search_length_penalty(t + 1, opt->length_penalty, opt->length_norm) + u;
    if (b->use_cov) {
        float *c = b->cov + (size_t)r * S, *a = b->attn + (size_t)r * S;
        for (int j = 0; j < S; j++) b->cov_tmp[j] = c[j] + a[j];
        sc += search_coverage_penalty(b->cov_tmp, S, opt->coverage_penalty);
    }
    return sc;
}

/* Registers the hypothesis of row r extended by tok (EOS, or any token at the last step) with
 * raw score cv into the sentence's finished set. */
static tern_status_t beam_finish(beam_t *b, finished_t *f, int r, int n, int t, int tok, float cv, int k) {
    int is_eos = tok == b->opt->eos;
    hypothesis_t h = {0};
    h.tokens = backtrack(&b->L, b->entry[r], t, is_eos ? -1 : tok, &h.length);
    if (!h.tokens) return tern_error(TERN_ERR_NOMEM, "beam search: out of memory");
    if (b->ret_att && !(h.attn = backtrack_attn(b->alog, b->S, &b->L, b->entry[r], t,
                                                is_eos ? NULL : b->attn + (size_t)r * b->S))) {
        free(h.tokens);
        return tern_error(TERN_ERR_NOMEM, "beam search: out of memory");
    }
    h.raw = cv;
    h.unmet = proc_chain_unmet(&b->chain, r, n, is_eos ? -1 : tok);
    /* the normalized length counts the end token, as CTranslate2 and fairseq do: t + 1 */
    h.score = beam_final_score(b, r, n, t, is_eos ? -1 : tok, cv);
    if (add_finished(f, h, b->keep)) return tern_error(TERN_ERR_NOMEM, "beam search: out of memory");
    if (is_eos) {
        f->eos_finished = 1;
        b->eos_taken[r] = 1;
        if (k == 0) f->top_finished = 1;
    }
    return TERN_OK;
}

/* Backoff candidates (paper policy): the best EOS extension of rows [a, a + nr) that was not
 * taken is kept as the sentence's fallen hypothesis. */
static tern_status_t beam_backoff(beam_t *b, finished_t *f, int a, int nr, int n, int t) {
    const search_options_t *opt = b->opt;
    for (int r = a; r < a + nr; r++) {
        float e = cand_score(b->logits, b->row_mx, b->row_lse, b->score, r, b->V, opt->eos);
        if (b->eos_taken[r] || e == -INFINITY) continue;
        float sc = beam_final_score(b, r, n, t, -1, e);
        if (f->fallen.tokens && sc <= f->fallen.score) continue;
        hypothesis_t h = {0};
        h.tokens = backtrack(&b->L, b->entry[r], t, -1, &h.length);
        if (!h.tokens) return tern_error(TERN_ERR_NOMEM, "beam search: out of memory");
        if (b->ret_att && !(h.attn = backtrack_attn(b->alog, b->S, &b->L, b->entry[r], t, NULL))) {
            free(h.tokens);
            return tern_error(TERN_ERR_NOMEM, "beam search: out of memory");
        }
        h.raw = e;
        h.score = sc;
        h.unmet = proc_chain_unmet(&b->chain, r, n, -1);
        free(f->fallen.tokens), free(f->fallen.attn);
        f->fallen = h;
    }
    return TERN_OK;
}

/* GNMT pruning: new live hypotheses [first, R2) whose normalized score is more than the width below
 * the best finished one's leave the beam; returns the new R2. */
static int beam_prune_live(beam_t *b, const finished_t *f, int first, int R2, int t) {
    const search_options_t *opt = b->opt;
    float best_fin = f->h[0].score;
    for (int i = 1; i < f->n; i++) best_fin = f->h[i].score > best_fin ? f->h[i].score : best_fin;
    float lp = search_length_penalty(t + 1, opt->length_penalty, opt->length_norm);
    int w = first;
    for (int i = first; i < R2; i++) {
        if (b->score2[i] / lp < best_fin - opt->prune_width) continue;
        b->parent[w] = b->parent[i], b->sent2[w] = b->sent2[i], b->tokens2[w] = b->tokens2[i];
        b->score2[w] = b->score2[i];
        w++;
    }
    return w;
}

/* Is sentence n finished after this step, with live hypotheses [first, R2)? */
static int beam_sentence_done(const beam_t *b, const finished_t *f, int n, int last, int first, int R2) {
    const search_options_t *opt = b->opt;
    if (last || R2 == first) return 1;
    if (b->ct2_exit && opt->early_stop && f->top_finished && f->registered >= b->nhyp) return 1;
    if (!b->ct2_exit && opt->early_stop && f->registered >= b->max_cand && f->registered >= b->nhyp) return 1;
    if (!b->use_cov && !b->chain.may_raise && f->eos_finished && f->n >= b->nhyp) {
        /* exact bound: no live hypothesis can reach the n-th best finished score */
        float best_live = -INFINITY;
        for (int i = first; i < R2; i++) best_live = b->score2[i] > best_live ? b->score2[i] : best_live;
        float bound = best_live / search_length_penalty(b->max_len[n], opt->length_penalty, opt->length_norm);
        if (opt->length_penalty == 0.0f) bound = best_live;
        if (kth_best(f, b->nhyp) >= bound) return 1;
    }
    return 0;
}

static tern_status_t beam_finalize(beam_t *b, int n);

/* Sentence group g at step t: its candidates finish hypotheses or become the next step's rows
 * (appended at *R2); a finished sentence's rows leave the batch. */
static tern_status_t beam_expand_group(beam_t *b, int g, int t, int *R2io) {
    const search_options_t *opt = b->opt;
    const int V = b->V, B = b->B, K = b->K;
    int a = b->grp[g], nr = b->grp[g + 1] - a, n = b->sent[a];
    finished_t *f = &b->fin[n];
    t = own_step(b, n, t); /* from here on, the sentence's own step */
    int last = t + 1 >= b->max_len[n];
    int kc = K < nr * V ? K : nr * V;
    const float *cand_v = b->cands_v + (size_t)g * K;
    const int *cand_i = b->cands_i + (size_t)g * K;
    int sec = b->common ? B : kc;
    int R2 = *R2io, first_new = R2;
    int take = B < kc ? B : kc;
    if (b->marian && take > B - f->registered) take = B - f->registered > 0 ? B - f->registered : 0; /* Marian: the beam shrinks */
    tern_status_t st;
    for (int k = 0; k < take; k++) {
        float cv = cand_v[k];
        int ci = cand_i[k];
        if (cv == -INFINITY) break;
        if (b->pruning && !last && cv < cand_v[0] - opt->prune_width) break;
        int r = a + ci / V, tok = ci % V;
        if (k > 0 && !last && cv - b->score[r] < b->log_thr) continue;
        if (tok == opt->eos || last) {
            if ((st = beam_finish(b, f, r, n, t, tok, cv, k))) return st;
            if (last) continue;
            /* replace it by the next non-EOS candidate (common policy) */
            int j = sec;
            while (j < kc && (cand_i[j] % V == opt->eos || cand_v[j] == -INFINITY ||
                              cand_v[j] - b->score[a + cand_i[j] / V] < b->log_thr))
                j++;
            if (j >= kc || (b->pruning && cand_v[j] < cand_v[0] - opt->prune_width)) continue;
            sec = j + 1;
            cv = cand_v[j];
            ci = cand_i[j];
            r = a + ci / V;
            tok = ci % V;
        }
        b->parent[R2] = r;
        b->sent2[R2] = n;
        b->tokens2[R2] = tok;
        b->score2[R2] = cv;
        R2++;
    }
    if (!b->common && !b->marian && (st = beam_backoff(b, f, a, nr, n, t))) return st; /* Marian: no backoff */
    if (b->pruning && f->n > 0 && R2 > first_new) R2 = beam_prune_live(b, f, first_new, R2, t);
    *R2io = R2;
    if (beam_sentence_done(b, f, n, last, first_new, R2)) {
        *R2io = first_new; /* its rows leave the batch */
        f->done = 1;
        return beam_finalize(b, n);
    }
    return TERN_OK;
}

/* The R2 new rows become the current ones: step log entries, coverage, processor states, the
 * model's rows (set_rows), and the buffers swapped. */
static tern_status_t beam_advance(beam_t *b, int R2) {
    const int S = b->S;
    for (int i = 0; i < R2; i++) {
        int e = log_push(&b->L, b->tokens2[i], b->entry[b->parent[i]]);
        if (e < 0) return tern_error(TERN_ERR_NOMEM, "beam search: out of memory");
        b->entry2[i] = e;
        if (!b->ret_att) continue;
        /* the entry's token was chosen at this step on its parent row: that row's attention */
        if ((size_t)b->L.cap > b->alog_cap) {
            float *a2 = realloc(b->alog, (size_t)b->L.cap * (size_t)(S ? S : 1) * sizeof(float));
            if (!a2) return tern_error(TERN_ERR_NOMEM, "beam search: out of memory");
            b->alog = a2, b->alog_cap = (size_t)b->L.cap;
        }
        memcpy(b->alog + (size_t)e * S, b->attn + (size_t)b->parent[i] * S, (size_t)S * sizeof(float));
    }
    if (b->use_cov)
        for (int i = 0; i < R2; i++)
            for (int j = 0; j < S; j++)
                b->cov2[(size_t)i * S + j] = b->cov[(size_t)b->parent[i] * S + j] + b->attn[(size_t)b->parent[i] * S + j];
    proc_chain_advance(&b->chain, b->parent, b->sent2, b->tokens2, R2, 0);
    if (b->msent)
        for (int i = 0; i < R2; i++) b->msent2[i] = b->msent[b->sent2[i]];
    tern_status_t st = b->dec->set_rows(b->dec->self, b->parent, b->msent ? b->msent2 : b->sent2, R2);
    if (st) return st;
    int *ti;
    float *tf;
    ti = b->tokens, b->tokens = b->tokens2, b->tokens2 = ti;
    ti = b->sent, b->sent = b->sent2, b->sent2 = ti;
    ti = b->entry, b->entry = b->entry2, b->entry2 = ti;
    tf = b->score, b->score = b->score2, b->score2 = tf;
    if (b->use_cov) tf = b->cov, b->cov = b->cov2, b->cov2 = tf;
    return TERN_OK;
}

/* Sentence n's result from its finished hypotheses (sorted, with the backoff when none ended
 * with EOS); they move to the result; then the caller's on_finish hook. */
static tern_status_t beam_finalize(beam_t *b, int n) {
    finished_t *f = &b->fin[n];
    search_result_t *res = &b->results[n];
    qsort(f->h, (size_t)f->n, sizeof *f->h, cmp_hyp);
    int use_fallen = !b->common && !b->marian && !f->eos_finished && f->fallen.tokens;
    int total = f->n + use_fallen;
    int cnt = total < b->nhyp ? total : b->nhyp;
    res->hyps = calloc((size_t)(cnt ? cnt : 1), sizeof(hypothesis_t));
    if (!res->hyps) return tern_error(TERN_ERR_NOMEM, "beam search: out of memory");
    int k = 0;
    if (use_fallen && k < cnt) {
        res->hyps[k++] = f->fallen;
        f->fallen.tokens = NULL, f->fallen.attn = NULL;
    }
    for (int i = 0; k < cnt; i++) {
        res->hyps[k++] = f->h[i];
        f->h[i].tokens = NULL, f->h[i].attn = NULL;
    }
    res->n = cnt;
    f->done = 2;
    if (b->opt->on_finish && b->opt->on_finish(b->opt->hook_ctx, n, res))
        return tern_error(TERN_ERR_CANCELLED, "stopped by the result callback");
    return TERN_OK;
}

/* The token hook: each sentence's best live hypothesis (highest raw score) after step t, the
 * current rows being the new ones. Nonzero from the hook stops the search. */
static tern_status_t beam_step_hook(beam_t *b, int R, int t) {
    const search_options_t *opt = b->opt;
    for (int a = 0; a < R;) {
        int e = a, best = a, tn = own_step(b, b->sent[a], t);
        for (; e < R && b->sent[e] == b->sent[a]; e++)
            if (b->score[e] > b->score[best]) best = e;
        backtrack_into(&b->L, b->entry[best], tn + 1, b->hook_buf);
        if (opt->on_step(opt->hook_ctx, b->sent[a], tn, b->hook_buf, tn + 1, 0))
            return tern_error(TERN_ERR_CANCELLED, "stopped by the token callback at step %d", tn);
        a = e;
    }
    return TERN_OK;
}

/* Step t after the model wrote the logits of the R rows: each sentence's candidates, its finished
 * hypotheses, and the next step's rows (beam_advance, when any); *R2 gets their number, *ended
 * (when not NULL) the number of sentences that finished at this step. */
static tern_status_t beam_select(beam_t *b, int R, int t, int *R2, int *ended) {
    int G = beam_groups(b, R);
    beam_candidates(b, R, G, t);
    for (int r = 0; r < R; r++) b->eos_taken[r] = 0;
    int n2 = 0, gone = 0;
    tern_status_t st;
    for (int g = 0; g < G; g++) {
        int n = b->sent[b->grp[g]];
        if ((st = beam_expand_group(b, g, t, &n2))) return st;
        gone += b->fin[n].done != 0;
    }
    *R2 = n2;
    if (ended) *ended = gone;
    return n2 > 0 ? beam_advance(b, n2) : TERN_OK;
}

/* After the search: the sentences not finished in the loop (none expected: every sentence leaves
 * through beam_sentence_done) get their results; on an error st, every result is freed. */
static tern_status_t beam_end(beam_t *b, tern_status_t st, search_result_t *results, int N) {
    for (int n = 0; n < N && !st; n++)
        if (b->fin[n].done != 2) st = beam_finalize(b, n);
    if (st)
        for (int n = 0; n < N; n++) search_result_free(&results[n]);
    beam_free(b);
    return st;
}

tern_status_t beam_search(const decoder_iface_t *dec, int N, const int *max_len,
                          const search_options_t *opt, search_result_t *results) {
    for (int n = 0; n < N; n++) {
        results[n].n = 0;
        results[n].hyps = NULL;
    }
    beam_t b;
    tern_status_t st = beam_init(&b, dec, N, N, 1, max_len, opt);
    b.results = results;
    if (st) goto done;
    int R = N;
    for (int t = 0; R > 0; t++) {
        if (search_cancelled(opt)) {
            st = tern_error(TERN_ERR_CANCELLED, "cancelled at decoding step %d", t);
            goto done;
        }
        if ((st = dec->step(dec->self, b.tokens, t, b.logits, b.attn))) goto done;
        proc_chain_apply(&b.chain, SEARCH_STAGE_LOGITS, b.logits, R, b.V, t, b.sent);
        int R2;
        if ((st = beam_select(&b, R, t, &R2, NULL))) goto done;
        if (R2 == 0) break;
        R = R2;
        if (opt->on_step && (st = beam_step_hook(&b, R, t))) goto done;
    }
done:
    return beam_end(&b, st, results, N);
}

/* Beam search with continuous batching (search.h): up to feed->max_rows sentences in flight, each
 * with up to B rows; as sentences finish, the next ones are admitted (feed->admit: one row each, at
 * its own step 0, after the current rows) within the token budget (sentences in flight x the
 * longest source in flight, as decode_batch's batches count it). Each sentence's search is
 * beam_search's, at its own step: the maximum and minimum lengths, the length penalty, the step
 * log and the hooks count from its admission. */
tern_status_t beam_search_stream(const decoder_iface_t *dec, const search_feed_t *feed, const int *max_len,
                                 const search_options_t *opt, search_result_t *results) {
    const int N = feed->N, Gm = feed->max_rows > 0 ? feed->max_rows : 1, V = dec->vocab_size;
    if (!search_procs_only_bans(opt->procs, opt->num_procs) || opt->coverage_penalty != 0.0f || dec->logprobs)
        return tern_error(TERN_ERR_INTERNAL, "continuous batching: processors other than token bans, coverage or "
                                             "log-space scores");
    for (int n = 0; n < N; n++) {
        results[n].n = 0;
        results[n].hyps = NULL;
    }
    /* the minimum length is applied here per row (its own step), not by the chain's global step */
    search_options_t o2 = *opt;
    o2.min_length = 0;
    const int min_len = opt->min_length, min_admit = feed->min_admit > 0 ? feed->min_admit : 1;
    beam_t b;
    tern_status_t st = beam_init(&b, dec, N, Gm, 0, max_len, &o2);
    b.results = results;
    if (!st) {
        b.t0 = malloc((size_t)(N ? N : 1) * sizeof(int));
        b.msent = malloc((size_t)(N ? N : 1) * sizeof(int));
        b.msent2 = malloc((size_t)Gm * b.B * sizeof(int));
        if (!b.t0 || !b.msent || !b.msent2) st = tern_error(TERN_ERR_NOMEM, "beam search: out of memory");
    }
    if (st) goto done;
    int R = 0, next = 0, nsent = 0, live = 0; /* rows, next sentence, the model's sentences, in flight */
    for (int t = 0; R > 0 || next < N; t++) {
        int free_s = Gm - live;
        if (next < N && (R == 0 || free_s >= min_admit || free_s >= N - next)) {
            int k = search_feed_take(feed, b.sent, R, live, next, free_s);
            if (k > 0) {
                int fresh = R == 0;
                if ((st = feed->admit(feed->ctx, next, k, fresh))) goto done;
                if (fresh) nsent = 0, t = 0; /* the model starts anew, its steps from 0 */
                for (int i = 0; i < k; i++) {
                    int n = next + i;
                    b.tokens[R + i] = opt->bos;
                    b.sent[R + i] = n;
                    b.score[R + i] = 0.0f;
                    b.entry[R + i] = -1;
                    b.t0[n] = t;
                    b.msent[n] = nsent + i;
                }
                nsent += k, next += k, live += k, R += k;
                if (feed->stats) feed->stats[2]++;
            }
        }
        if (search_cancelled(opt)) {
            st = tern_error(TERN_ERR_CANCELLED, "cancelled at decoding step %d", t);
            goto done;
        }
        if ((st = dec->step(dec->self, b.tokens, t, b.logits, NULL))) goto done;
        if (feed->stats) feed->stats[0]++, feed->stats[1] += R;
        /* the minimum length: the EOS logit removed before the softmax on rows under it (the
         * chain's rule, per row) */
        for (int r = 0; r < R; r++)
            if (own_step(&b, b.sent[r], t) < min_len) b.logits[(size_t)r * V + opt->eos] = -INFINITY;
        /* the token bans on logits (those on log-probabilities run in beam_candidates), as
         * beam_search's chain after the minimum length: they read neither the step nor the sentence */
        proc_chain_apply(&b.chain, SEARCH_STAGE_LOGITS, b.logits, R, V, t, b.sent);
        int R2, ended;
        if ((st = beam_select(&b, R, t, &R2, &ended))) goto done;
        live -= ended;
        R = R2;
        if (R > 0 && opt->on_step && (st = beam_step_hook(&b, R, t))) goto done;
    }
done:
    return beam_end(&b, st, results, N);
}
