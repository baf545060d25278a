/* constraints.c — lexically constrained beam search with dynamic beam allocation (constraints.h). */
#include "search/constraints.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

tern_status_t cons_sentence_new(cons_sentence_t **out, const int *const *phr, const int *len, int C) {
    *out = NULL;
    if (C < 0 || C > CONS_MAX) return tern_error(TERN_ERR_INVALID_ARG, "at most %d constraints per sentence (got %d)", CONS_MAX, C);
    cons_sentence_t *s = calloc(1, sizeof *s);
    if (!s) return tern_error(TERN_ERR_NOMEM, "out of memory");
    s->len = calloc((size_t)(C ? C : 1), sizeof(int));
    s->tok = calloc((size_t)(C ? C : 1), sizeof(int *));
    if (!s->len || !s->tok) {
        cons_sentence_free(s);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    for (int j = 0; j < C; j++) {
        if (len[j] < 1 || len[j] >= 4096) {
            s->C = j;
            cons_sentence_free(s);
            return tern_error(TERN_ERR_INVALID_ARG, "constraint %d: 1 to 4095 tokens (got %d)", j + 1, len[j]);
        }
        s->tok[j] = malloc((size_t)len[j] * sizeof(int));
        if (!s->tok[j]) {
            s->C = j;
            cons_sentence_free(s);
            return tern_error(TERN_ERR_NOMEM, "out of memory");
        }
        memcpy(s->tok[j], phr[j], (size_t)len[j] * sizeof(int));
        s->len[j] = len[j];
        s->total += len[j];
        s->C = j + 1;
    }
    *out = s;
    return TERN_OK;
}

void cons_sentence_free(cons_sentence_t *s) {
    if (!s) return;
    for (int j = 0; j < s->C; j++) free(s->tok[j]);
    free(s->tok), free(s->len);
    free(s);
}

void cons_state_init(int *state) {
    state[0] = 0;
    state[1] = -1;
}

/* a phrase begins with tok: the first unmet one (or -1) */
static int starts(const cons_sentence_t *s, int met, int tok) {
    for (int j = 0; j < s->C; j++)
        if (!(met >> j & 1) && s->tok[j][0] == tok) return j;
    return -1;
}

void cons_state_advance(const cons_sentence_t *s, int *state, int tok) {
    int met = state[0], prog = state[1];
    if (prog >= 0) {
        int j = prog / 4096, pos = prog % 4096;
        if (s->tok[j][pos] == tok) {
            if (pos + 1 == s->len[j]) state[0] = met | 1 << j, state[1] = -1;
            else state[1] = prog + 1;
            return;
        }
        state[1] = prog = -1; /* the phrase broke off: the token may begin another */
    }
    int j = starts(s, met, tok);
    if (j < 0) return;
    if (s->len[j] == 1) state[0] = met | 1 << j;
    else state[1] = j * 4096 + 1;
}

int cons_state_met_tokens(const cons_sentence_t *s, const int *state) {
    int n = 0;
    for (int j = 0; j < s->C; j++)
        if (state[0] >> j & 1) n += s->len[j];
    if (state[1] >= 0) n += state[1] % 4096;
    return n;
}

int cons_state_unmet(const cons_sentence_t *s, const int *state) {
    int n = 0;
    for (int j = 0; j < s->C; j++) n += !(state[0] >> j & 1);
    return n;
}

typedef struct {
    float v;   /* score + log-prob */
    int idx;   /* row * V + token */
    int bank;
} cand_t;

struct cons_workspace {
    cand_t *pool;
    int cap;
    int *taken;  /* (cap) */
    int *bank_n, *bank_start, *bank_used, *bank_quota; /* (banks) */
    int bank_cap;
};

cons_workspace_t *cons_workspace_new(int B, int K, int max_total) {
    cons_workspace_t *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->cap = K + B * (2 + CONS_MAX) + 8;
    w->pool = malloc((size_t)w->cap * sizeof *w->pool);
    w->taken = malloc((size_t)w->cap * sizeof(int));
    w->bank_cap = max_total + 1;
    w->bank_n = malloc((size_t)w->bank_cap * sizeof(int));
    w->bank_start = malloc((size_t)w->bank_cap * sizeof(int));
    w->bank_used = malloc((size_t)w->bank_cap * sizeof(int));
    w->bank_quota = malloc((size_t)w->bank_cap * sizeof(int));
    if (!w->pool || !w->taken || !w->bank_n || !w->bank_start || !w->bank_used || !w->bank_quota) {
        cons_workspace_free(w);
        return NULL;
    }
    return w;
}

void cons_workspace_free(cons_workspace_t *w) {
    if (!w) return;
    free(w->pool), free(w->taken), free(w->bank_n), free(w->bank_start), free(w->bank_used), free(w->bank_quota);
    free(w);
}

static int cmp_bank_score(const void *a, const void *b) {
    const cand_t *x = a, *y = b;
    if (x->bank != y->bank) return x->bank > y->bank ? -1 : 1;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int cmp_score(const void *a, const void *b) {
    const cand_t *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static void pool_add(cons_workspace_t *w, int *n, float v, int idx) {
    if (v == -INFINITY || *n >= w->cap) return;
    for (int i = 0; i < *n; i++)
        if (w->pool[i].idx == idx) return;
    w->pool[*n].v = v;
    w->pool[*n].idx = idx;
    (*n)++;
}

/* The plain top-K candidates over the b rows into the pool (a small insertion list); their number. */
static int pool_top_k(cons_workspace_t *w, const float *x, const float *score, int b, int V, int K) {
    int topn = 0;
    for (int r = 0; r < b; r++) {
        const float *row = x + (size_t)r * V;
        for (int v = 0; v < V; v++) {
            float c = row[v] + score[r];
            if (row[v] == -INFINITY || (topn == K && c <= w->pool[topn - 1].v)) continue;
            int j = topn < K ? topn++ : K - 1;
            while (j > 0 && w->pool[j - 1].v < c) {
                w->pool[j] = w->pool[j - 1];
                j--;
            }
            w->pool[j].v = c;
            w->pool[j].idx = r * V + v;
        }
    }
    return topn;
}

/* Adds to the pool (*n entries) every row's best token and the tokens that advance its
 * constraints: the next token of the one in progress, the first of each one not met. */
static void pool_add_row_tokens(cons_workspace_t *w, int *n, const cons_sentence_t *s, const float *x,
                                const float *score, int b, int V, const int *state, int W, int off) {
    for (int r = 0; r < b; r++) {
        const float *row = x + (size_t)r * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[best]) best = v;
        pool_add(w, n, row[best] + score[r], r * V + best);
        const int *st = state + (size_t)r * W + off;
        if (st[1] >= 0) {
            int j = st[1] / 4096, pos = st[1] % 4096, t = s->tok[j][pos];
            if (t >= 0 && t < V) pool_add(w, n, row[t] + score[r], r * V + t);
        }
        for (int j = 0; j < s->C; j++) {
            int t = s->tok[j][0];
            if (!(st[0] >> j & 1) && t >= 0 && t < V) pool_add(w, n, row[t] + score[r], r * V + t);
        }
    }
}

/* Room for `banks` banks (sized by cons_workspace_new for the batch: not reached); 0 when out of
 * memory. */
static int banks_reserve(cons_workspace_t *w, int banks) {
    if (banks <= w->bank_cap) return 1;
    int *a = realloc(w->bank_n, (size_t)banks * sizeof(int));
    if (a) w->bank_n = a;
    int *c = realloc(w->bank_start, (size_t)banks * sizeof(int));
    if (c) w->bank_start = c;
    int *d = realloc(w->bank_used, (size_t)banks * sizeof(int));
    if (d) w->bank_used = d;
    int *e = realloc(w->bank_quota, (size_t)banks * sizeof(int));
    if (e) w->bank_quota = e;
    if (!a || !c || !d || !e) return 0;
    w->bank_cap = banks;
    return 1;
}

/* Each of the n candidates in its bank (the constraint tokens met after it); the pool sorted by
 * bank, highest first, then score, and each bank's size and start. */
static void banks_sort(cons_workspace_t *w, int n, int banks, const cons_sentence_t *s, int V, const int *state,
                       int W, int off, int eos) {
    for (int i = 0; i < n; i++) {
        int r = w->pool[i].idx / V, t = w->pool[i].idx % V;
        int st[2] = {state[(size_t)r * W + off], state[(size_t)r * W + off + 1]};
        if (t != eos) cons_state_advance(s, st, t);
        w->pool[i].bank = cons_state_met_tokens(s, st);
    }
    qsort(w->pool, (size_t)n, sizeof *w->pool, cmp_bank_score);
    for (int k = 0; k < banks; k++) w->bank_n[k] = w->bank_used[k] = 0;
    for (int i = 0; i < n; i++) w->bank_n[w->pool[i].bank]++;
    for (int k = banks - 1, start = 0; k >= 0; k--) {
        w->bank_start[k] = start;
        start += w->bank_n[k];
    }
}

/* The banks' quotas of the B slots: B / banks each (at most what a bank has), then one at a time
 * from the highest bank. */
static void banks_quotas(cons_workspace_t *w, int banks, int B) {
    int slots = B, q = B / banks;
    for (int k = 0; k < banks; k++) {
        w->bank_quota[k] = q < w->bank_n[k] ? q : w->bank_n[k];
        slots -= w->bank_quota[k];
    }
    for (int progress = 1; slots > 0 && progress;) {
        progress = 0;
        for (int k = banks - 1; k >= 0 && slots > 0; k--)
            if (w->bank_quota[k] < w->bank_n[k]) w->bank_quota[k]++, slots--, progress = 1;
    }
}

/* The beam: each bank's best (its quota of them; marked taken among the n), ordered by score (the
 * caller's EOS handling reads it best first); its size. */
static int beam_from_banks(cons_workspace_t *w, int n, int banks, float *values, int *indices) {
    for (int i = 0; i < n; i++) w->taken[i] = 0;
    int m = 0;
    for (int k = banks - 1; k >= 0; k--)
        for (int i = 0; i < w->bank_quota[k]; i++) {
            int at = w->bank_start[k] + i;
            w->taken[at] = 1;
            values[m] = w->pool[at].v;
            indices[m++] = w->pool[at].idx;
        }
    for (int i = 1; i < m; i++)
        for (int j = i; j > 0 && values[j - 1] < values[j]; j--) {
            float tv = values[j];
            values[j] = values[j - 1], values[j - 1] = tv;
            int ti = indices[j];
            indices[j] = indices[j - 1], indices[j - 1] = ti;
        }
    return m;
}

/* After the beam's m: the candidates not taken, by score, as replacements, up to K (-inf after). */
static void fill_replacements(cons_workspace_t *w, int n, int m, int K, float *values, int *indices) {
    int rest = 0;
    for (int i = 0; i < n; i++)
        if (!w->taken[i]) w->pool[rest++] = w->pool[i];
    qsort(w->pool, (size_t)rest, sizeof *w->pool, cmp_score);
    for (int i = 0; i < rest && m < K; i++) {
        values[m] = w->pool[i].v;
        indices[m++] = w->pool[i].idx;
    }
    for (; m < K; m++) values[m] = -INFINITY, indices[m] = 0;
}

int cons_select(cons_workspace_t *w, const cons_sentence_t *s, const float *x, const float *score, int b, int V,
                const int *state, int W, int off, int B, int K, int eos, float *values, int *indices) {
    if (!s || s->C == 0) return 0;
    int n = pool_top_k(w, x, score, b, V, K);
    pool_add_row_tokens(w, &n, s, x, score, b, V, state, W, off);
    /* banks: constraint tokens met after the candidate */
    int banks = s->total + 1;
    if (!banks_reserve(w, banks)) return 0; /* out of memory: the plain top-K */
    banks_sort(w, n, banks, s, V, state, W, off, eos);
    banks_quotas(w, banks, B);
    int m = beam_from_banks(w, n, banks, values, indices);
    fill_replacements(w, n, m, K, values, indices);
    return 1;
}
