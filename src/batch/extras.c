/* extras.c — a request's steering data, from memory into the search's (extras.h). */
#include "batch/extras.h"

#include <stdlib.h>
#include <string.h>

#include "search/constraints.h"
#include "search/lmbr.h"

struct request_extras {
    const tern_model_t *m;
    int pretok, max_len;           /* the call's pretokenized and max_decoding_length */
    search_global_t global;
    int has_global;
    search_suppress_t suppress;
    lmbr_params_t lmbr;
    tern_lmbr_params_t lp;         /* the request's LMBR parameters (lp.num_systems 0: none) */
};

typedef struct {
    search_sentence_t s; /* first: what the search reads */
    int *prefix;
    search_trie_t trie;
    int has_trie;
    lmbr_sentence_t *lmbr;
    cons_sentence_t *cons;
} owned_sentence_t;

/* text -> target ids; with an origin, an error names it and unknown pieces are warned about */
static tern_status_t encode(const request_extras_t *x, const char *text, const char *origin, int **ids, int *n) {
    tern_status_t st = model_encode_target_ex(x->m, text, strlen(text), x->pretok, ids, n);
    if (st) return origin ? tern_error_prefix(st, "%s", origin) : st;
    if (origin && x->m->tgt_unk >= 0 && !strstr(text, "<unk>"))
        for (int i = 0; i < *n; i++)
            if ((*ids)[i] == x->m->tgt_unk) {
                TERN_WARN("%s: unknown piece(s) in '%s' (read as <unk>)", origin, text);
                break;
            }
    return TERN_OK;
}

/* Appends the suppressed sequence ids (n tokens, malloc'd: x takes it). */
static tern_status_t push_suppress(request_extras_t *x, int *ids, int n, int *cap) {
    if (x->suppress.n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        int **s = realloc(x->suppress.seq, (size_t)*cap * sizeof *s);
        if (s) x->suppress.seq = s;
        int *l = realloc(x->suppress.len, (size_t)*cap * sizeof *l);
        if (l) x->suppress.len = l;
        if (!s || !l) {
            free(ids);
            return tern_error(TERN_ERR_NOMEM, "out of memory");
        }
    }
    x->suppress.seq[x->suppress.n] = ids;
    x->suppress.len[x->suppress.n++] = n;
    return TERN_OK;
}

/* The sequences the model never outputs (model.h: never_tok; a Hugging Face checkpoint's pad token). */
static tern_status_t add_model_suppress(request_extras_t *x, const tern_model_t *m, int *cap) {
    if (m->n_members) m = m->members[0];
    for (int i = 0; i < m->n_never; i++) {
        int a = m->never_off[i], n = m->never_off[i + 1] - a;
        if (n < 1 || n - 1 > SEARCH_MAX_HISTORY) continue;
        int *ids = malloc((size_t)n * sizeof *ids);
        if (!ids) return tern_error(TERN_ERR_NOMEM, "out of memory");
        memcpy(ids, m->never_tok + a, (size_t)n * sizeof *ids);
        tern_status_t st = push_suppress(x, ids, n, cap);
        if (st) return st;
    }
    return TERN_OK;
}

static tern_status_t add_suppress(request_extras_t *x, const tern_text_t *t, int *cap) {
    int *ids = NULL, n = 0;
    tern_status_t st = encode(x, t->text ? t->text : "", t->origin, &ids, &n);
    if (st || n == 0) {
        free(ids);
        return st;
    }
    if (n - 1 > SEARCH_MAX_HISTORY) {
        TERN_WARN("%s: a suppressed sequence has at most %d pieces (got %d): ignored", t->origin ? t->origin : "suppress",
                  SEARCH_MAX_HISTORY + 1, n);
        free(ids);
        return TERN_OK;
    }
    return push_suppress(x, ids, n, cap);
}

tern_lmbr_params_t tern_lmbr_default_params(void) {
    tern_lmbr_params_t p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.alpha = 1.0f;
    p.p = 0.85f;
    p.r = 0.7f;
    p.lambda = 0.0f; /* 0: 0.5 / the number of models */
    return p;
}

float tern_lmbr_lambda(const tern_model_t *m, const tern_lmbr_params_t *o) {
    if (o && o->lambda > 0) return o->lambda;
    int n = tern_model_info(m).num_members;
    return 0.5f / (float)(n > 0 ? n : 1);
}

tern_status_t extras_new(request_extras_t **out, const tern_model_t *m, const tern_request_t *req,
                         const translator_call_t *call) {
    *out = NULL;
    request_extras_t *x = calloc(1, sizeof *x);
    if (!x) return tern_error(TERN_ERR_NOMEM, "out of memory");
    x->m = m;
    x->pretok = call->pretok;
    x->max_len = call->p.max_decoding_length;
    tern_status_t st = TERN_OK;
    int cap = 0;
    if (req->suppress)
        for (int k = 0; k < req->num_suppress && !st; k++) st = add_suppress(x, &req->suppress[k], &cap);
    if (!st) st = add_model_suppress(x, m, &cap);
    x->suppress.on_logprobs = (m->n_members ? m->members[0] : m)->never_on_logprobs;
    if (req->suppress || x->suppress.n) {
        x->global.suppress = &x->suppress;
        x->has_global = 1;
    }
    if (!st && req->lmbr) {
        tern_lmbr_params_t d = tern_lmbr_default_params();
        if (!(st = API_STRUCT_IN(&x->lp, req->lmbr, &d, tern_lmbr_params_t)) &&
            (x->lp.num_systems < 0 || x->lp.lambda < 0 || !(x->lp.p > 0) || !(x->lp.r > 0)))
            st = tern_error(TERN_ERR_INVALID_ARG, "LMBR: num_systems must be >= 0, lambda >= 0 (0: the default), p and r > 0");
        if (!st && x->lp.num_systems > 0) {
            x->lmbr = lmbr_params(tern_lmbr_lambda(m, &x->lp), x->lp.p, x->lp.r);
            x->lmbr.clip = x->lp.clip != 0;
            x->lmbr.sum_gain = x->lp.sum_gain != 0;
            x->global.lmbr = &x->lmbr;
            x->has_global = 1;
        }
    }
    if (st) {
        extras_free(x);
        return st;
    }
    *out = x;
    return TERN_OK;
}

const search_global_t *extras_global(const request_extras_t *x) { return x && x->has_global ? &x->global : NULL; }

void extras_sentence_free(search_sentence_t *s) {
    if (!s) return;
    owned_sentence_t *w = (owned_sentence_t *)s;
    free(w->prefix);
    if (w->has_trie) trie_free(&w->trie);
    lmbr_sentence_free(w->lmbr);
    cons_sentence_free(w->cons);
    free(w);
}

/* token ids of K n-best entries */
static tern_status_t encode_nbest(const request_extras_t *x, const tern_text_t *h, int K, int ***tok, int **len) {
    *tok = calloc((size_t)(K ? K : 1), sizeof **tok);
    *len = calloc((size_t)(K ? K : 1), sizeof **len);
    if (!*tok || !*len) return tern_error(TERN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < K; k++) {
        tern_status_t st = encode(x, h[k].text ? h[k].text : "", h[k].origin, &(*tok)[k], &(*len)[k]);
        if (st) return st;
    }
    return TERN_OK;
}

static void free_ids(int **tok, int *len, int K) {
    for (int k = 0; tok && k < K; k++) free(tok[k]);
    free(tok), free(len);
}

static tern_status_t sentence_prefix(const request_extras_t *x, const tern_source_extras_t *e, owned_sentence_t *w) {
    if (!e->target_prefix) return TERN_OK;
    tern_status_t st = encode(x, e->target_prefix, e->prefix_origin, &w->prefix, &w->s.prefix_len);
    if (st) return st;
    w->s.prefix = w->prefix;
    if (e->prefix_origin && w->s.prefix_len >= x->max_len)
        TERN_WARN("%s: the prefix (%d tokens) reaches the maximum length (%d): the output is cut", e->prefix_origin,
                  w->s.prefix_len, x->max_len);
    return TERN_OK;
}

/* the phrases that fit (NULL, empty and too long ones are left out, with a warning naming the
 * origin for too long ones) */
static tern_status_t sentence_constraints(const request_extras_t *x, const tern_source_extras_t *e,
                                          owned_sentence_t *w) {
    int n = e->constraints ? e->num_constraints : 0, C = 0, total = 0;
    if (n <= 0) return TERN_OK;
    const char *org = e->constraints_origin ? e->constraints_origin : "constraints";
    int **phr = calloc((size_t)n, sizeof *phr), *len = calloc((size_t)n, sizeof *len);
    tern_status_t st = phr && len ? TERN_OK : tern_error(TERN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < n && !st; k++) {
        if (!e->constraints[k]) continue;
        if (C == CONS_MAX) {
            TERN_WARN("%s: more than %d constraints: the rest are left out", org, CONS_MAX);
            break;
        }
        if ((st = encode(x, e->constraints[k], e->constraints_origin, &phr[C], &len[C]))) break;
        if (len[C] == 0) {
            free(phr[C]);
            continue;
        }
        if (len[C] >= x->max_len || len[C] >= 4096) {
            TERN_WARN("%s: constraint %d (%d tokens) is longer than the maximum length (%d): left out", org, k + 1,
                      len[C], x->max_len);
            free(phr[C]);
            continue;
        }
        total += len[C];
        C++;
    }
    if (!st && total >= x->max_len)
        TERN_WARN("%s: the constraints (%d tokens) cannot all fit in the maximum length (%d)", org, total, x->max_len);
    if (!st && C > 0 && !(st = cons_sentence_new(&w->cons, (const int *const *)phr, len, C)))
        w->s.constraints = w->cons;
    for (int k = 0; k < C; k++) free(phr[k]);
    free(phr), free(len);
    return st;
}

static tern_status_t sentence_restrict(const request_extras_t *x, const tern_source_extras_t *e, owned_sentence_t *w) {
    int K = e->restrict_to ? e->num_restrict : 0;
    if (K <= 0) return TERN_OK;
    int **tok = NULL, *len = NULL;
    tern_status_t st = encode_nbest(x, e->restrict_to, K, &tok, &len);
    if (!st && !(st = trie_init(&w->trie))) {
        w->has_trie = 1;
        for (int k = 0; k < K && !st; k++) {
            if (len[k] + 1 > x->max_len && e->restrict_to[k].origin)
                TERN_WARN("%s: the hypothesis is longer than the maximum length (%d): it is cut", e->restrict_to[k].origin,
                          x->max_len);
            st = trie_insert(&w->trie, tok[k], len[k]);
        }
        w->s.restrict_to = &w->trie;
    }
    free_ids(tok, len, K);
    return st;
}

static tern_status_t sentence_lmbr(const request_extras_t *x, const tern_source_extras_t *e, owned_sentence_t *w) {
    const int S = x->lp.num_systems;
    if (S <= 0 || !e->lmbr_evidence || !e->lmbr_evidence_count) return TERN_OK;
    lmbr_evidence_t *evs = calloc((size_t)S, sizeof *evs);
    const lmbr_evidence_t **evp = calloc((size_t)S, sizeof *evp);
    int ***toks = calloc((size_t)S, sizeof *toks);
    int **lens = calloc((size_t)S, sizeof *lens);
    float **scores = calloc((size_t)S, sizeof *scores);
    int any = 0;
    tern_status_t st = evs && evp && toks && lens && scores ? TERN_OK : tern_error(TERN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < S && !st; k++) {
        int K = e->lmbr_evidence[k] ? e->lmbr_evidence_count[k] : 0;
        if (K <= 0) continue;
        if ((st = encode_nbest(x, e->lmbr_evidence[k], K, &toks[k], &lens[k]))) break;
        if (!(scores[k] = malloc((size_t)K * sizeof(float)))) {
            st = tern_error(TERN_ERR_NOMEM, "out of memory");
            break;
        }
        for (int j = 0; j < K; j++) scores[k][j] = e->lmbr_evidence[k][j].score;
        evs[k] = (lmbr_evidence_t){(const int *const *)toks[k], lens[k], scores[k], K};
        evp[k] = &evs[k];
        any = 1;
    }
    if (!st && any) st = lmbr_sentence_build(&w->lmbr, evp, x->lp.weights, S, x->lp.alpha);
    for (int k = 0; toks && k < S; k++) {
        free_ids(toks[k], lens ? lens[k] : NULL, e->lmbr_evidence[k] ? e->lmbr_evidence_count[k] : 0);
        if (scores) free(scores[k]);
    }
    free(evs), free(evp), free(toks), free(lens), free(scores);
    if (!st) w->s.lmbr = w->lmbr;
    return st;
}

tern_status_t extras_sentence(const request_extras_t *x, long i, const tern_source_extras_t *extras,
                              search_sentence_t **out) {
    *out = NULL;
    tern_source_extras_t e;
    memset(&e, 0, sizeof e);
    e.struct_size = sizeof e;
    tern_status_t st = extras ? API_STRUCT_IN(&e, extras, &e, tern_source_extras_t) : TERN_OK;
    if (st) return tern_error_prefix(st, "extras of input %ld", i);
    owned_sentence_t *w = calloc(1, sizeof *w);
    if (!w) return tern_error(TERN_ERR_NOMEM, "out of memory");
    if ((st = sentence_prefix(x, &e, w)) || (st = sentence_constraints(x, &e, w)) || (st = sentence_restrict(x, &e, w)) ||
        (st = sentence_lmbr(x, &e, w))) {
        if (!e.prefix_origin && e.target_prefix) tern_error_prefix(st, "target prefix %ld", i);
        extras_sentence_free(&w->s);
        return st;
    }
    *out = &w->s;
    return TERN_OK;
}

void extras_free(request_extras_t *x) {
    if (!x) return;
    for (int k = 0; k < x->suppress.n; k++) free(x->suppress.seq[k]);
    free(x->suppress.seq), free(x->suppress.len);
    free(x);
}
