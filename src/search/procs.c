/*
 * procs.c — the standard score processors (procs.h):
 *   suppress   logits stage: a suppressed sequence's last token gets -inf whenever the row's
 *              history ends with the rest of it (single pieces: always), before the softmax, as
 *              CTranslate2's suppress_sequences;
 *   prefix     log-prob stage: while t < the prefix length, the prefix token is the only candidate,
 *              and adds 0 to the score: a hypothesis' score is the log-probability of the free
 *              part given the prefix; at the first free step beam search ends only when EOS is
 *              the best candidate (both as CTranslate2's target_prefix), unless the sentence's
 *              prefix is plain (a forced language code: as transformers' forced_bos_token_id);
 *   restrict   log-prob stage: each row follows a node of the sentence's prefix tree (state: the
 *              node); only its children (and EOS where a sequence ends) keep their log-probs, so a
 *              hypothesis' score is its force-decoded log-probability;
 *   lmbr       log-prob stage: LMBR n-gram posteriors (lmbr.h) from the row's last 3 tokens;
 *   constraints log-prob stage: EOS removed while a row has unmet phrases; the beam's candidates
 *              chosen by dynamic beam allocation (constraints.h; state: met phrases, progress).
 */
#include "search/procs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "search/constraints.h"
#include "search/lmbr.h"

/* ------------------------------------------------------------ prefix tree */

tern_status_t trie_init(search_trie_t *t) {
    memset(t, 0, sizeof *t);
    t->cap = 16;
    t->node = malloc((size_t)t->cap * sizeof *t->node);
    if (!t->node) return tern_error(TERN_ERR_NOMEM, "out of memory");
    t->node[0] = (trie_node_t){-1, -1, -1, 0};
    t->n = 1;
    return TERN_OK;
}

void trie_free(search_trie_t *t) {
    free(t->node);
    memset(t, 0, sizeof *t);
}

int trie_child(const search_trie_t *t, int node, int tok) {
    for (int c = t->node[node].child; c >= 0; c = t->node[c].sibling)
        if (t->node[c].tok == tok) return c;
    return -1;
}

tern_status_t trie_insert(search_trie_t *t, const int *seq, int len) {
    int cur = 0;
    for (int i = 0; i < len; i++) {
        int c = trie_child(t, cur, seq[i]);
        if (c < 0) {
            if (t->n == t->cap) {
                int cap = t->cap * 2;
                trie_node_t *nn = realloc(t->node, (size_t)cap * sizeof *nn);
                if (!nn) return tern_error(TERN_ERR_NOMEM, "out of memory");
                t->node = nn;
                t->cap = cap;
            }
            c = t->n++;
            t->node[c] = (trie_node_t){seq[i], -1, t->node[cur].child, 0};
            t->node[cur].child = c;
        }
        cur = c;
    }
    t->node[cur].end = 1;
    return TERN_OK;
}

/* ------------------------------------------------------------ the processors */

struct search_procs {
    search_proc_t list[5];
    int n;
    const search_global_t *g;
    const search_sentence_t *const *sd;
    int N, V, eos;
    int beam;    /* beam search (else greedy) */
    float prefix_bias; /* > 0: prefixes bias the rows that follow them (prefix_bias_beta) */
    float *keep; /* (V) values kept by a mask */
    int *bans;   /* the suppressed sequences' tokens when every one is a single token, else NULL */
    int *keep_tok;
    cons_workspace_t *cons;
    int lmbr_count; /* clipping: the most evidence n-grams of a sentence of the batch */
};

static void suppress_apply(void *self, float *x, const search_rows_t *rows) {
    const search_procs_t *P = self;
    const search_suppress_t *S = P->g->suppress;
    for (int r = 0; r < rows->R; r++) {
        float *row = x + (size_t)r * rows->V;
        const int *h = rows->hist + (size_t)r * rows->H;
        for (int k = 0; k < S->n; k++) {
            int L = S->len[k];
            const int *q = S->seq[k];
            int match = 1;
            for (int i = 0; i < L - 1 && match; i++) match = h[rows->H - (L - 1) + i] == q[i];
            if (match) row[q[L - 1]] = -INFINITY;
        }
    }
}

/* keeps x[tok[i]] (i < n) of a row, -inf elsewhere */
static void keep_only(const search_procs_t *P, float *row, int V, const int *tok, int n) {
    for (int i = 0; i < n; i++) P->keep[i] = row[tok[i]];
    for (int v = 0; v < V; v++) row[v] = -INFINITY;
    for (int i = 0; i < n; i++) row[tok[i]] = P->keep[i];
}

static void prefix_apply(void *self, float *x, const search_rows_t *rows) {
    const search_procs_t *P = self;
    for (int r = 0; r < rows->R; r++) {
        const search_sentence_t *s = P->sd[rows->sent[r]];
        if (!s || s->prefix_len <= 0 || rows->t > s->prefix_len) continue;
        if (rows->t == s->prefix_len) {
            /* the first free step: beam search ends here only when EOS is the best candidate (as
             * CTranslate2, whose beam search keeps EOS only in the first slot at this step) */
            float *row = x + (size_t)r * rows->V, mx = -INFINITY;
            if (!P->beam || s->prefix_plain) continue;
            for (int v = 0; v < rows->V; v++) mx = row[v] > mx ? row[v] : mx;
            if (row[P->eos] < mx) row[P->eos] = -INFINITY;
            continue;
        }
        float *row = x + (size_t)r * rows->V;
        int tok = s->prefix[rows->t];
        if (tok < 0 || tok >= rows->V) continue;
        for (int v = 0; v < rows->V; v++) row[v] = -INFINITY;
        row[tok] = 0.0f; /* forced: the score counts only the free part (as CTranslate2's) */
    }
}

/* prefix_bias_beta (CTranslate2's biased decoding): state: the prefix tokens the row has followed
 * so far, -1 once it left the prefix (or passed its end). While a row follows, its distribution
 * becomes (1 - beta) p + beta on the prefix's next token: log((1 - beta) e^x), and for that
 * token log((1 - beta) e^x + beta). */
static void bias_init(void *self, int n, int *state) { state[0] = 0; }

static void bias_advance(void *self, int n, int *state, int tok) {
    const search_procs_t *P = self;
    const search_sentence_t *s = P->sd[n];
    if (state[0] < 0) return;
    state[0] = s && state[0] < s->prefix_len && tok == s->prefix[state[0]] ? state[0] + 1 : -1;
}

static void bias_apply(void *self, float *x, const search_rows_t *rows) {
    const search_procs_t *P = self;
    const float beta = P->prefix_bias, keep = 1.0f - beta, lkeep = logf(keep);
    for (int r = 0; r < rows->R; r++) {
        const search_sentence_t *s = P->sd[rows->sent[r]];
        const int k = rows->state[(size_t)r * rows->W + rows->off];
        if (!s || k < 0 || k >= s->prefix_len) continue;
        const int tok = s->prefix[k];
        float *row = x + (size_t)r * rows->V;
        const float p_tok = tok >= 0 && tok < rows->V ? expf(row[tok]) : 0.0f;
        for (int v = 0; v < rows->V; v++) row[v] += lkeep;
        if (tok >= 0 && tok < rows->V) row[tok] = logf(keep * p_tok + beta);
    }
}

static void restrict_init(void *self, int n, int *state) { state[0] = 0; }

static void restrict_advance(void *self, int n, int *state, int tok) {
    const search_procs_t *P = self;
    const search_sentence_t *s = P->sd[n];
    if (!s || !s->restrict_to || state[0] < 0) return;
    state[0] = trie_child(s->restrict_to, state[0], tok);
}

static void restrict_apply(void *self, float *x, const search_rows_t *rows) {
    search_procs_t *P = self;
    for (int r = 0; r < rows->R; r++) {
        const search_sentence_t *s = P->sd[rows->sent[r]];
        if (!s || !s->restrict_to) continue;
        const search_trie_t *T = s->restrict_to;
        int node = rows->state[(size_t)r * rows->W + rows->off], n = 0;
        if (node >= 0) {
            for (int c = T->node[node].child; c >= 0; c = T->node[c].sibling)
                if (T->node[c].tok != P->eos && T->node[c].tok >= 0 && T->node[c].tok < rows->V) P->keep_tok[n++] = T->node[c].tok;
            if (T->node[node].end) P->keep_tok[n++] = P->eos;
        }
        keep_only(P, x + (size_t)r * rows->V, rows->V, P->keep_tok, n);
    }
}

static void lmbr_apply(void *self, float *x, const search_rows_t *rows) {
    const search_procs_t *P = self;
    for (int r = 0; r < rows->R; r++) {
        const search_sentence_t *s = P->sd[rows->sent[r]];
        const int *clip = P->g->lmbr->clip ? rows->state + (size_t)r * rows->W + rows->off + (P->g->lmbr->sum_gain ? 1 : 0)
                                           : NULL;
        lmbr_apply_row(s ? s->lmbr : NULL, P->g->lmbr, x + (size_t)r * rows->V, rows->V, P->eos,
                       rows->hist + (size_t)r * rows->H, rows->H, clip);
    }
}

static void lmbr_clip_init_fn(void *self, int n, int *state) {
    lmbr_clip_init(state, ((const search_procs_t *)self)->lmbr_count);
}

static void lmbr_clip_advance_fn(void *self, int n, int *state, int tok) {
    const search_procs_t *P = self;
    lmbr_clip_advance(P->sd[n]->lmbr, state, tok, P->eos);
}

/* --lmbr-sum-gain: state = [the row's gain so far, as float bits][a clipping state: last tokens, and
 * the bits only when clipping]; the search keeps the gain out of the length penalty. */
static void lmbr_sum_init_fn(void *self, int n, int *state) {
    const search_procs_t *P = self;
    float g = 0.0f;
    memcpy(state, &g, sizeof g);
    lmbr_clip_init(state + 1, P->g->lmbr->clip ? P->lmbr_count : 0);
}

static void lmbr_sum_advance_fn(void *self, int n, int *state, int tok) {
    const search_procs_t *P = self;
    const lmbr_params_t *p = P->g->lmbr;
    const lmbr_sentence_t *s = P->sd[n]->lmbr;
    if (tok == P->eos) return;
    float g;
    memcpy(&g, state, sizeof g);
    g += lmbr_token_gain(s, p, state + 1, tok);
    memcpy(state, &g, sizeof g);
    if (p->clip) {
        lmbr_clip_advance(s, state + 1, tok, P->eos);
    } else {
        int *h = state + 1;
        for (int i = 0; i + 1 < LMBR_ORDER - 1; i++) h[i] = h[i + 1];
        h[LMBR_ORDER - 2] = tok;
    }
}

static float lmbr_sum_unnormalized_fn(void *self, int n, const int *state) {
    float g;
    memcpy(&g, state, sizeof g);
    return g;
}

static const cons_sentence_t *cons_of(const search_procs_t *P, int n) { return P->sd[n]->constraints; }

static void cons_init(void *self, int n, int *state) { cons_state_init(state); }

static void cons_advance(void *self, int n, int *state, int tok) {
    const cons_sentence_t *c = cons_of(self, n);
    if (c) cons_state_advance(c, state, tok);
}

static void cons_apply(void *self, float *x, const search_rows_t *rows) {
    const search_procs_t *P = self;
    for (int r = 0; r < rows->R; r++) {
        const cons_sentence_t *c = cons_of(P, rows->sent[r]);
        if (c && cons_state_unmet(c, rows->state + (size_t)r * rows->W + rows->off) > 0)
            x[(size_t)r * rows->V + P->eos] = -INFINITY;
    }
}

static int cons_select_fn(void *self, int n, const float *x, const float *score, int b, int V, const int *state,
                          int W, int off, int B, int K, float *values, int *indices) {
    search_procs_t *P = self;
    return cons_select(P->cons, cons_of(P, n), x, score, b, V, state, W, off, B, K, P->eos, values, indices);
}

static int cons_unmet_fn(void *self, int n, const int *state) {
    const cons_sentence_t *c = cons_of(self, n);
    return c ? cons_state_unmet(c, state) : 0;
}

/* What search_procs_bind finds the search needs: which processors, and their sizes. */
typedef struct {
    int any_prefix, any_restrict, any_cons, cons_total; /* per-sentence data */
    int prefix_max;                                     /* the longest prefix */
    int sup, suppress_h;                                /* suppressed sequences, their longest history */
    int lm, lm_count;                                   /* LMBR, its largest sentence's distinct n-grams */
} procs_needs_t;

/* The needs of the sentences' data and of the global suppressed sequences and LMBR; an error for a
 * suppressed sequence or LMBR clipping state out of bounds. */
static tern_status_t procs_needs(procs_needs_t *q, const search_global_t *g, const search_sentence_t *const *sd,
                                 int N) {
    for (int n = 0; sd && n < N; n++) {
        if (!sd[n]) continue;
        q->any_prefix |= sd[n]->prefix_len > 0;
        if (sd[n]->prefix_len > q->prefix_max) q->prefix_max = sd[n]->prefix_len;
        q->any_restrict |= sd[n]->restrict_to != NULL;
        q->any_cons |= sd[n]->constraints != NULL && sd[n]->constraints->C > 0;
        if (sd[n]->constraints && sd[n]->constraints->total > q->cons_total) q->cons_total = sd[n]->constraints->total;
    }
    q->sup = g && g->suppress && g->suppress->n > 0;
    for (int k = 0; q->sup && k < g->suppress->n; k++) {
        if (g->suppress->len[k] < 1 || g->suppress->len[k] - 1 > SEARCH_MAX_HISTORY)
            return tern_error(TERN_ERR_INVALID_ARG, "suppressed sequence %d: 1 to %d pieces", k + 1,
                              SEARCH_MAX_HISTORY + 1);
        if (g->suppress->len[k] - 1 > q->suppress_h) q->suppress_h = g->suppress->len[k] - 1;
    }
    q->lm = g && g->lmbr;
    for (int n = 0; q->lm && g->lmbr->clip && sd && n < N; n++)
        if (sd[n] && lmbr_ngram_count(sd[n]->lmbr) > q->lm_count) q->lm_count = lmbr_ngram_count(sd[n]->lmbr);
    if (q->lm && g->lmbr->clip && lmbr_clip_ints(q->lm_count) + 3 > SEARCH_MAX_STATE)
        return tern_error(TERN_ERR_INVALID_ARG, "LMBR clipping: a sentence's evidence has %d distinct n-grams, at most %d",
                          q->lm_count, (SEARCH_MAX_STATE - 3 - (LMBR_ORDER - 1)) * 32);
    return TERN_OK;
}

/* The LMBR processor: its state by gain (summed apart from the length penalty, clipped, or plain). */
static search_proc_t lmbr_proc(search_procs_t *P, const lmbr_params_t *L, int lm_count) {
    search_proc_t p = {0};
    p.self = P, p.stage = SEARCH_STAGE_LOGPROBS, p.history = LMBR_ORDER - 1, p.may_raise = 1;
    p.apply = lmbr_apply;
    if (L->sum_gain) {
        p.state_ints = 1 + lmbr_clip_ints(L->clip ? lm_count : 0);
        p.init_state = lmbr_sum_init_fn, p.advance = lmbr_sum_advance_fn;
        p.unnormalized = lmbr_sum_unnormalized_fn;
    } else if (L->clip) {
        p.state_ints = lmbr_clip_ints(lm_count);
        p.init_state = lmbr_clip_init_fn, p.advance = lmbr_clip_advance_fn;
    }
    return p;
}

/* P's processors in their order: suppression on logits, then prefix, restriction, LMBR and
 * constraints on log-probabilities. */
static void procs_list(search_procs_t *P, const procs_needs_t *q, const search_global_t *g) {
    if (q->sup) {
        search_proc_t p = {0};
        p.self = P, p.history = q->suppress_h, p.apply = suppress_apply;
        p.stage = g->suppress->on_logprobs ? SEARCH_STAGE_LOGPROBS : SEARCH_STAGE_LOGITS;
        if (P->bans) p.bans = P->bans, p.n_bans = g->suppress->n;
        P->list[P->n++] = p;
    }
    if (q->any_prefix && P->prefix_bias > 0) {
        search_proc_t p = {0};
        p.self = P, p.stage = SEARCH_STAGE_LOGPROBS, p.state_ints = 1;
        p.init_state = bias_init, p.advance = bias_advance, p.apply = bias_apply;
        P->list[P->n++] = p;
    } else if (q->any_prefix) {
        search_proc_t p = {0};
        p.self = P, p.stage = SEARCH_STAGE_LOGPROBS, p.apply = prefix_apply;
        p.until = q->prefix_max + 1; /* prefix_apply acts at steps t <= prefix_len */
        P->list[P->n++] = p;
    }
    if (q->any_restrict) {
        search_proc_t p = {0};
        p.self = P, p.stage = SEARCH_STAGE_LOGPROBS, p.state_ints = 1;
        p.init_state = restrict_init, p.advance = restrict_advance, p.apply = restrict_apply;
        P->list[P->n++] = p;
    }
    if (q->lm) P->list[P->n++] = lmbr_proc(P, g->lmbr, q->lm_count);
    if (q->any_cons) {
        search_proc_t p = {0};
        p.self = P, p.stage = SEARCH_STAGE_LOGPROBS, p.state_ints = 2;
        p.init_state = cons_init, p.advance = cons_advance, p.apply = cons_apply;
        p.select = cons_select_fn, p.unmet = cons_unmet_fn;
        P->list[P->n++] = p;
    }
}

tern_status_t search_procs_bind(search_procs_t **out, const search_global_t *g, const search_sentence_t *const *sd,
                                int N, int V, int eos, int beam, float prefix_bias) {
    *out = NULL;
    procs_needs_t q = {0};
    tern_status_t st = procs_needs(&q, g, sd, N);
    if (st) return st;
    if (!q.any_prefix && !q.any_restrict && !q.sup && !q.lm && !q.any_cons) return TERN_OK;
    search_procs_t *P = calloc(1, sizeof *P);
    static const search_sentence_t none = {0};
    const search_sentence_t **sdc = malloc((size_t)(N ? N : 1) * sizeof *sdc);
    if (P) P->keep = malloc((size_t)(V + 1) * sizeof(float));
    if (P) P->keep_tok = malloc((size_t)(V + 1) * sizeof(int));
    if (P && q.any_cons) P->cons = cons_workspace_new(beam > 0 ? beam : 1, 2 * (beam > 0 ? beam : 1), q.cons_total);
    if (!P || !sdc || !P->keep || !P->keep_tok || (q.any_cons && !P->cons)) {
        if (P) free(P->keep), free(P->keep_tok), cons_workspace_free(P->cons);
        free(P), free(sdc);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    for (int n = 0; n < N; n++) sdc[n] = sd && sd[n] ? sd[n] : &none;
    int single = q.sup;
    for (int k = 0; single && k < g->suppress->n; k++) single = g->suppress->len[k] == 1;
    if (single && (P->bans = malloc((size_t)g->suppress->n * sizeof(int))))
        for (int k = 0; k < g->suppress->n; k++) P->bans[k] = g->suppress->seq[k][0];
    P->g = g;
    P->sd = sdc;
    P->N = N;
    P->V = V;
    P->eos = eos;
    P->beam = beam > 1;
    P->prefix_bias = prefix_bias;
    P->lmbr_count = q.lm_count;
    procs_list(P, &q, g);
    *out = P;
    return TERN_OK;
}

void search_procs_free(search_procs_t *P) {
    if (!P) return;
    free(P->keep), free(P->keep_tok), free(P->bans);
    cons_workspace_free(P->cons);
    free((void *)P->sd);
    free(P);
}

const search_proc_t *search_procs_list(const search_procs_t *P, int *count) {
    *count = P ? P->n : 0;
    return P ? P->list : NULL;
}

/* ------------------------------------------------------------ under a vocabulary map */

int search_id_position(const int *cand, int nc, int id) {
    int lo = 0, hi = nc - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (cand[mid] == id) return mid;
        if (cand[mid] < id) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

static void mark_ids(const int *ids, int n, uint8_t *mark, int V) {
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < V) mark[ids[i]] = 1;
}

void search_procs_mark(const search_global_t *g, const search_sentence_t *const *sd, int N, int V, uint8_t *mark) {
    (void)g; /* suppressed sequences need no candidate */
    for (int n = 0; sd && n < N; n++) {
        const search_sentence_t *s = sd[n];
        if (!s) continue;
        if (s->prefix && s->prefix_len > 0) mark_ids(s->prefix, s->prefix_len, mark, V);
        if (s->restrict_to)
            for (int k = 1; k < s->restrict_to->n; k++) mark_ids(&s->restrict_to->node[k].tok, 1, mark, V);
        if (s->constraints)
            for (int j = 0; j < s->constraints->C; j++) mark_ids(s->constraints->tok[j], s->constraints->len[j], mark, V);
        if (s->lmbr) lmbr_sentence_mark(s->lmbr, mark, V);
    }
}

struct search_remap {
    search_global_t g;
    search_suppress_t sup;
    int N;
    search_sentence_t *s;         /* (N) */
    const search_sentence_t **sp; /* (N) */
    int **prefix;                 /* (N) */
    search_trie_t *trie;          /* (N) node == NULL: none */
    cons_sentence_t **cons;       /* (N) */
    lmbr_sentence_t **lmbr;       /* (N) */
};

const search_global_t *search_remap_global(const search_remap_t *r) { return r->g.suppress || r->g.lmbr ? &r->g : NULL; }
const search_sentence_t *const *search_remap_sentences(const search_remap_t *r) { return r->sp; }

void search_remap_free(search_remap_t *r) {
    if (!r) return;
    for (int k = 0; k < r->sup.n; k++) free(r->sup.seq[k]);
    free(r->sup.seq), free(r->sup.len);
    for (int n = 0; n < r->N; n++) {
        if (r->prefix) free(r->prefix[n]);
        if (r->trie && r->trie[n].node) trie_free(&r->trie[n]);
        if (r->cons) cons_sentence_free(r->cons[n]);
        if (r->lmbr) lmbr_sentence_free(r->lmbr[n]);
    }
    free(r->s), free(r->sp), free(r->prefix), free(r->trie), free(r->cons), free(r->lmbr);
    free(r);
}

static void remap_ids(int *dst, const int *src, int n, const int *cand, int nc) {
    for (int i = 0; i < n; i++) dst[i] = search_id_position(cand, nc, src[i]);
}

/* The suppressed sequences S in positions of the candidates (cand, nc): those with a piece not
 * among them are never completed in the restricted search and are left out. */
static tern_status_t remap_suppress(search_remap_t *r, const search_suppress_t *S, const int *cand, int nc) {
    r->sup.seq = calloc((size_t)S->n, sizeof(int *));
    r->sup.len = calloc((size_t)S->n, sizeof(int));
    r->sup.on_logprobs = S->on_logprobs;
    if (!r->sup.seq || !r->sup.len) return tern_error(TERN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < S->n; k++) {
        if (S->len[k] < 1 || S->len[k] - 1 > SEARCH_MAX_HISTORY) /* as search_procs_bind */
            return tern_error(TERN_ERR_INVALID_ARG, "suppressed sequence %d: 1 to %d pieces", k + 1,
                              SEARCH_MAX_HISTORY + 1);
        int ok = 1;
        for (int i = 0; ok && i < S->len[k]; i++) ok = search_id_position(cand, nc, S->seq[k][i]) >= 0;
        if (!ok) continue;
        int *q = malloc((size_t)S->len[k] * sizeof(int));
        if (!q) return tern_error(TERN_ERR_NOMEM, "out of memory");
        remap_ids(q, S->seq[k], S->len[k], cand, nc);
        r->sup.seq[r->sup.n] = q;
        r->sup.len[r->sup.n++] = S->len[k];
    }
    r->g.suppress = &r->sup;
    return TERN_OK;
}

/* The trie T of allowed paths into U, its tokens in positions of the candidates. */
static tern_status_t remap_trie(search_trie_t *U, const search_trie_t *T, const int *cand, int nc) {
    U->node = malloc((size_t)(T->n ? T->n : 1) * sizeof *U->node);
    if (!U->node) return tern_error(TERN_ERR_NOMEM, "out of memory");
    memcpy(U->node, T->node, (size_t)T->n * sizeof *U->node);
    U->n = U->cap = T->n;
    for (int k = 1; k < U->n; k++) U->node[k].tok = search_id_position(cand, nc, T->node[k].tok);
    return TERN_OK;
}

/* The constraints c anew (*out), their phrases in positions of the candidates. */
static tern_status_t remap_constraints(cons_sentence_t **out, const cons_sentence_t *c, const int *cand, int nc) {
    int *buf = malloc((size_t)(c->total ? c->total : 1) * sizeof(int));
    int *ph[CONS_MAX];
    if (!buf) return tern_error(TERN_ERR_NOMEM, "out of memory");
    for (int j = 0, o = 0; j < c->C; o += c->len[j], j++) {
        ph[j] = buf + o;
        remap_ids(ph[j], c->tok[j], c->len[j], cand, nc);
    }
    tern_status_t st = cons_sentence_new(out, (const int *const *)ph, c->len, c->C);
    free(buf);
    return st;
}

/* Sentence n's data s (its prefix, allowed paths, constraints and LMBR posteriors) in positions of
 * the candidates, as r->s[n]. */
static tern_status_t remap_sentence(search_remap_t *r, int n, const search_sentence_t *s, const int *cand, int nc) {
    tern_status_t st;
    search_sentence_t *t = &r->s[n];
    *t = *s;
    if (s->prefix && s->prefix_len > 0) {
        if (!(r->prefix[n] = malloc((size_t)s->prefix_len * sizeof(int))))
            return tern_error(TERN_ERR_NOMEM, "out of memory");
        remap_ids(r->prefix[n], s->prefix, s->prefix_len, cand, nc);
        t->prefix = r->prefix[n];
    }
    if (s->restrict_to) {
        if ((st = remap_trie(&r->trie[n], s->restrict_to, cand, nc))) return st;
        t->restrict_to = &r->trie[n];
    }
    if (s->constraints) {
        if ((st = remap_constraints(&r->cons[n], s->constraints, cand, nc))) return st;
        t->constraints = r->cons[n];
    }
    if (s->lmbr) {
        if ((st = lmbr_sentence_remap(&r->lmbr[n], s->lmbr, cand, nc))) return st;
        t->lmbr = r->lmbr[n];
    }
    r->sp[n] = t;
    return TERN_OK;
}

tern_status_t search_remap_new(search_remap_t **out, const search_global_t *g, const search_sentence_t *const *sd,
                               int N, const int *cand, int nc) {
    *out = NULL;
    tern_status_t st = TERN_OK;
    search_remap_t *r = calloc(1, sizeof *r);
    if (!r) return tern_error(TERN_ERR_NOMEM, "out of memory");
    size_t n1 = (size_t)(N ? N : 1);
    r->N = N;
    r->s = calloc(n1, sizeof *r->s);
    r->sp = calloc(n1, sizeof *r->sp);
    r->prefix = calloc(n1, sizeof *r->prefix);
    r->trie = calloc(n1, sizeof *r->trie);
    r->cons = calloc(n1, sizeof *r->cons);
    r->lmbr = calloc(n1, sizeof *r->lmbr);
    if (!r->s || !r->sp || !r->prefix || !r->trie || !r->cons || !r->lmbr) {
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (g) {
        r->g.lmbr = g->lmbr;
        if (g->suppress && g->suppress->n > 0 && (st = remap_suppress(r, g->suppress, cand, nc))) goto fail;
    }
    for (int n = 0; sd && n < N; n++)
        if (sd[n] && (st = remap_sentence(r, n, sd[n], cand, nc))) goto fail;
    *out = r;
    return TERN_OK;
fail:
    search_remap_free(r);
    return st;
}
