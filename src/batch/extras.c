/* extras.c — files that steer the search of a stream (extras.h). */
#include "extras.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "search/constraints.h"
#include "search/lmbr.h"
#include "search/nbest.h"

struct decode_extras {
    const tern_model_t *m;
    const tern_translate_options_t *o;
    search_global_t global;
    search_suppress_t suppress;
    lmbr_params_t lmbr;
    FILE *cons_in;
    const char *cons_path;
    long cons_lines;
    int cons_eof;
    FILE *prefix_in;
    const char *prefix_path;
    long prefix_lines;
    int prefix_eof;
    char *line;
    size_t line_cap;
    nbest_file_t restrict_nb;
    int has_restrict;
    nbest_file_t *ev; /* (num_lmbr_evidence) */
    int nev;
};

typedef struct {
    search_sentence_t s; /* first: what the search reads */
    int *prefix;
    search_trie_t trie;
    int has_trie;
    lmbr_sentence_t *lmbr;
    cons_sentence_t *cons;
} owned_sentence_t;

/* text -> target ids; warns (file, line) when a piece is unknown */
static tern_status_t encode(const decode_extras_t *x, const char *text, const char *file, long line, int **ids,
                            int *n) {
    tern_status_t st = model_encode_target(x->m, text, strlen(text), ids, n);
    if (st) return tern_error_prefix(st, "%s line %ld", file, line);
    if (x->m->tgt_unk >= 0 && !strstr(text, "<unk>"))
        for (int i = 0; i < *n; i++)
            if ((*ids)[i] == x->m->tgt_unk) {
                TERN_WARN("%s line %ld: unknown piece(s) in '%s' (read as <unk>)", file, line, text);
                break;
            }
    return TERN_OK;
}

static tern_status_t read_suppress(decode_extras_t *x, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return tern_error(TERN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    tern_status_t st = TERN_OK;
    char *line = NULL;
    size_t cap = 0;
    ssize_t r;
    long ln = 0;
    int scap = 0;
    while ((r = getline(&line, &cap, f)) >= 0) {
        ln++;
        while (r > 0 && (line[r - 1] == '\n' || line[r - 1] == '\r')) line[--r] = 0;
        int *ids = NULL, n = 0;
        if ((st = encode(x, line, path, ln, &ids, &n))) break;
        if (n == 0) {
            free(ids);
            continue;
        }
        if (n - 1 > SEARCH_MAX_HISTORY) {
            TERN_WARN("%s line %ld: a suppressed sequence has at most %d pieces (got %d): ignored", path, ln,
                      SEARCH_MAX_HISTORY + 1, n);
            free(ids);
            continue;
        }
        if (x->suppress.n == scap) {
            scap = scap ? scap * 2 : 16;
            int **s = realloc(x->suppress.seq, (size_t)scap * sizeof *s);
            if (s) x->suppress.seq = s;
            int *l = realloc(x->suppress.len, (size_t)scap * sizeof *l);
            if (l) x->suppress.len = l;
            if (!s || !l) {
                free(ids);
                st = tern_error(TERN_ERR_NOMEM, "out of memory");
                break;
            }
        }
        x->suppress.seq[x->suppress.n] = ids;
        x->suppress.len[x->suppress.n++] = n;
    }
    free(line);
    fclose(f);
    return st;
}

float extras_lmbr_lambda(const tern_model_t *m, const tern_translate_options_t *o) {
    if (o->lmbr_lambda > 0) return o->lmbr_lambda;
    int n = tern_model_info(m).num_members;
    return 0.5f / (float)(n > 0 ? n : 1);
}

tern_status_t extras_open(decode_extras_t **out, const tern_model_t *m, const tern_translate_options_t *o) {
    *out = NULL;
    if (!o->suppress_file && !o->target_prefix_file && !o->restrict_file && o->num_lmbr_evidence <= 0 &&
        !o->constraints_file)
        return TERN_OK;
    decode_extras_t *x = calloc(1, sizeof *x);
    if (!x) return tern_error(TERN_ERR_NOMEM, "out of memory");
    x->m = m;
    x->o = o;
    tern_status_t st = TERN_OK;
    if (o->suppress_file) {
        if ((st = read_suppress(x, o->suppress_file))) goto fail;
        x->global.suppress = &x->suppress;
    }
    if (o->target_prefix_file) {
        x->prefix_path = o->target_prefix_file;
        x->prefix_in = fopen(o->target_prefix_file, "r");
        if (!x->prefix_in) {
            st = tern_error(TERN_ERR_IO, "%s: cannot open: %s", o->target_prefix_file, strerror(errno));
            goto fail;
        }
    }
    if (o->constraints_file) {
        x->cons_path = o->constraints_file;
        x->cons_in = fopen(o->constraints_file, "r");
        if (!x->cons_in) {
            st = tern_error(TERN_ERR_IO, "%s: cannot open: %s", o->constraints_file, strerror(errno));
            goto fail;
        }
    }
    if (o->restrict_file) {
        if ((st = nbest_read(&x->restrict_nb, o->restrict_file))) goto fail;
        x->has_restrict = 1;
    }
    if (o->num_lmbr_evidence > 0) {
        if (o->lmbr_lambda < 0 || o->lmbr_p <= 0 || o->lmbr_r <= 0) {
            st = tern_error(TERN_ERR_INVALID_ARG, "LMBR: lambda must be >= 0 (0: the default), p and r > 0");
            goto fail;
        }
        x->ev = calloc((size_t)o->num_lmbr_evidence, sizeof *x->ev);
        if (!x->ev) {
            st = tern_error(TERN_ERR_NOMEM, "out of memory");
            goto fail;
        }
        for (int k = 0; k < o->num_lmbr_evidence; k++) {
            if ((st = nbest_read(&x->ev[k], o->lmbr_evidence[k]))) goto fail;
            x->nev++;
        }
        x->lmbr = lmbr_params(extras_lmbr_lambda(m, o), o->lmbr_p, o->lmbr_r);
        x->lmbr.clip = o->lmbr_clip != 0;
        x->lmbr.sum_gain = o->lmbr_sum_gain != 0;
        x->global.lmbr = &x->lmbr;
    }
    *out = x;
    return TERN_OK;
fail:
    extras_close(x, -1);
    return st;
}

const search_global_t *extras_global(const decode_extras_t *x) { return x ? &x->global : NULL; }

void extras_sentence_free(search_sentence_t *s) {
    if (!s) return;
    owned_sentence_t *w = (owned_sentence_t *)s;
    free(w->prefix);
    if (w->has_trie) trie_free(&w->trie);
    lmbr_sentence_free(w->lmbr);
    cons_sentence_free(w->cons);
    free(w);
}

/* token ids of the n-best entries of sentence i of f (empty when none) */
static tern_status_t encode_nbest(const decode_extras_t *x, const nbest_file_t *f, long i, int ***tok, int **len) {
    *tok = NULL;
    *len = NULL;
    if (i >= f->n || f->sent[i].K == 0) return TERN_OK;
    const nbest_sent_t *s = &f->sent[i];
    *tok = calloc((size_t)s->K, sizeof **tok);
    *len = calloc((size_t)s->K, sizeof **len);
    if (!*tok || !*len) return tern_error(TERN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < s->K; k++) {
        tern_status_t st = encode(x, s->text[k], f->path, s->line[k], &(*tok)[k], &(*len)[k]);
        if (st) return st;
    }
    return TERN_OK;
}

static void free_ids(int **tok, int *len, int K) {
    for (int k = 0; tok && k < K; k++) free(tok[k]);
    free(tok), free(len);
}

/* the JSON list of phrases of input line i: malformed lines, unknown pieces and phrases longer
 * than the maximum length are warned about (file, line) and left out */
static tern_status_t read_constraints(decode_extras_t *x, long i, owned_sentence_t *w) {
    ssize_t r = getline(&x->line, &x->line_cap, x->cons_in);
    if (r < 0) {
        x->cons_eof = 1;
        TERN_WARN("%s: %ld lines, but the input has more: input line %ld on are decoded without constraints",
                  x->cons_path, x->cons_lines, i + 1);
        return TERN_OK;
    }
    long ln = ++x->cons_lines;
    while (r > 0 && (x->line[r - 1] == '\n' || x->line[r - 1] == '\r')) x->line[--r] = 0;
    const char *p = x->line;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) return TERN_OK;
    cJSON *j = cJSON_Parse(x->line);
    if (!j || !cJSON_IsArray(j)) {
        TERN_WARN("%s line %ld: not a JSON list of strings: decoded without constraints", x->cons_path, ln);
        cJSON_Delete(j);
        return TERN_OK;
    }
    int n = cJSON_GetArraySize(j), C = 0, total = 0;
    int **phr = calloc((size_t)(n ? n : 1), sizeof *phr), *len = calloc((size_t)(n ? n : 1), sizeof *len);
    tern_status_t st = phr && len ? TERN_OK : tern_error(TERN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < n && !st; k++) {
        cJSON *e = cJSON_GetArrayItem(j, k);
        if (!cJSON_IsString(e)) {
            TERN_WARN("%s line %ld: constraint %d is not a string: left out", x->cons_path, ln, k + 1);
            continue;
        }
        if (C == CONS_MAX) {
            TERN_WARN("%s line %ld: more than %d constraints: the rest are left out", x->cons_path, ln, CONS_MAX);
            break;
        }
        if ((st = encode(x, e->valuestring, x->cons_path, ln, &phr[C], &len[C]))) break;
        if (len[C] == 0) {
            free(phr[C]);
            continue;
        }
        if (len[C] >= x->o->max_decoding_length || len[C] >= 4096) {
            TERN_WARN("%s line %ld: constraint %d (%d tokens) is longer than the maximum length (%d): left out",
                      x->cons_path, ln, k + 1, len[C], x->o->max_decoding_length);
            free(phr[C]);
            continue;
        }
        total += len[C];
        C++;
    }
    if (!st && total >= x->o->max_decoding_length)
        TERN_WARN("%s line %ld: the constraints (%d tokens) cannot all fit in the maximum length (%d)", x->cons_path,
                  ln, total, x->o->max_decoding_length);
    if (!st && C > 0 && !(st = cons_sentence_new(&w->cons, (const int *const *)phr, len, C)))
        w->s.constraints = w->cons;
    for (int k = 0; k < C; k++) free(phr[k]);
    free(phr), free(len);
    cJSON_Delete(j);
    return st;
}

tern_status_t extras_next(decode_extras_t *x, long i, search_sentence_t **out) {
    *out = NULL;
    owned_sentence_t *w = calloc(1, sizeof *w);
    if (!w) return tern_error(TERN_ERR_NOMEM, "out of memory");
    tern_status_t st = TERN_OK;
    if (x->prefix_in && !x->prefix_eof) {
        ssize_t r = getline(&x->line, &x->line_cap, x->prefix_in);
        if (r < 0) {
            x->prefix_eof = 1;
            TERN_WARN("%s: %ld lines, but the input has more: input line %ld on are decoded without a prefix",
                      x->prefix_path, x->prefix_lines, i + 1);
        } else {
            x->prefix_lines++;
            while (r > 0 && (x->line[r - 1] == '\n' || x->line[r - 1] == '\r')) x->line[--r] = 0;
            if ((st = encode(x, x->line, x->prefix_path, x->prefix_lines, &w->prefix, &w->s.prefix_len))) goto fail;
            w->s.prefix = w->prefix;
            if (w->s.prefix_len >= x->o->max_decoding_length)
                TERN_WARN("%s line %ld: the prefix (%d tokens) reaches the maximum length (%d): the output is cut",
                          x->prefix_path, x->prefix_lines, w->s.prefix_len, x->o->max_decoding_length);
        }
    }
    if (x->cons_in && !x->cons_eof && (st = read_constraints(x, i, w))) goto fail;
    if (x->has_restrict) {
        int **tok = NULL, *len = NULL, K = i < x->restrict_nb.n ? x->restrict_nb.sent[i].K : 0;
        if ((st = encode_nbest(x, &x->restrict_nb, i, &tok, &len))) {
            free_ids(tok, len, K);
            goto fail;
        }
        if (K == 0)
            TERN_WARN("%s: no hypothesis for input line %ld: decoded without restriction", x->restrict_nb.path, i + 1);
        else {
            if ((st = trie_init(&w->trie))) {
                free_ids(tok, len, K);
                goto fail;
            }
            w->has_trie = 1;
            for (int k = 0; k < K && !st; k++) {
                if (len[k] + 1 > x->o->max_decoding_length)
                    TERN_WARN("%s line %ld: the hypothesis is longer than the maximum length (%d): it is cut",
                              x->restrict_nb.path, x->restrict_nb.sent[i].line[k], x->o->max_decoding_length);
                st = trie_insert(&w->trie, tok[k], len[k]);
            }
            w->s.restrict_to = &w->trie;
        }
        free_ids(tok, len, K);
        if (st) goto fail;
    }
    if (x->nev > 0) {
        lmbr_evidence_t *evs = calloc((size_t)x->nev, sizeof *evs);
        const lmbr_evidence_t **evp = calloc((size_t)x->nev, sizeof *evp);
        int ***toks = calloc((size_t)x->nev, sizeof *toks);
        int **lens = calloc((size_t)x->nev, sizeof *lens);
        int any = 0;
        if (!evs || !evp || !toks || !lens) st = tern_error(TERN_ERR_NOMEM, "out of memory");
        for (int k = 0; k < x->nev && !st; k++) {
            const nbest_file_t *f = &x->ev[k];
            int K = i < f->n ? f->sent[i].K : 0;
            if (K == 0) {
                TERN_WARN("%s: no evidence for input line %ld", f->path, i + 1);
                continue;
            }
            if ((st = encode_nbest(x, f, i, &toks[k], &lens[k]))) break;
            evs[k] = (lmbr_evidence_t){(const int *const *)toks[k], lens[k], f->sent[i].score, K};
            evp[k] = &evs[k];
            any = 1;
        }
        if (!st && any) st = lmbr_sentence_build(&w->lmbr, evp, x->o->lmbr_weights, x->nev, x->o->lmbr_alpha);
        for (int k = 0; toks && k < x->nev; k++) free_ids(toks[k], lens ? lens[k] : NULL, i < x->ev[k].n ? x->ev[k].sent[i].K : 0);
        free(evs), free(evp), free(toks), free(lens);
        if (st) goto fail;
        w->s.lmbr = w->lmbr;
    }
    *out = &w->s;
    return TERN_OK;
fail:
    extras_sentence_free(&w->s);
    return st;
}

/* n-best entries for sentences the input does not have: a warning naming the first such line */
static void warn_beyond(const nbest_file_t *f, long lines, const char *what) {
    long first = -1;
    int count = 0;
    for (long i = lines; i < f->n; i++)
        for (int k = 0; k < f->sent[i].K; k++) {
            count++;
            if (first < 0 || f->sent[i].line[k] < first) first = f->sent[i].line[k];
        }
    if (count)
        TERN_WARN("%s line %ld: %s for sentence %d and beyond, but the input has %ld lines: %d entries ignored",
                  f->path, first, what, (int)lines, lines, count);
}

void extras_close(decode_extras_t *x, long lines) {
    if (!x) return;
    if (lines >= 0) {
        if (x->cons_in && !x->cons_eof && getline(&x->line, &x->line_cap, x->cons_in) >= 0)
            TERN_WARN("%s: more lines than the input's %ld: line %ld on are ignored", x->cons_path, lines, lines + 1);
        if (x->prefix_in && !x->prefix_eof && getline(&x->line, &x->line_cap, x->prefix_in) >= 0)
            TERN_WARN("%s: more lines than the input's %ld: line %ld on are ignored", x->prefix_path, lines, lines + 1);
        if (x->has_restrict) warn_beyond(&x->restrict_nb, lines, "hypotheses");
        for (int k = 0; k < x->nev; k++) warn_beyond(&x->ev[k], lines, "evidence");
    }
    if (x->prefix_in) fclose(x->prefix_in);
    if (x->cons_in) fclose(x->cons_in);
    free(x->line);
    for (int k = 0; k < x->suppress.n; k++) free(x->suppress.seq[k]);
    free(x->suppress.seq), free(x->suppress.len);
    if (x->has_restrict) nbest_free(&x->restrict_nb);
    for (int k = 0; k < x->nev; k++) nbest_free(&x->ev[k]);
    free(x->ev);
    free(x);
}
