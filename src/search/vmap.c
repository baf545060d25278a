/* vmap.c — building, loading and applying a vocabulary map (vmap.h).
 *
 * N-grams of up to 3 source ids are packed into one 64-bit key, 21 bits an id (id + 1, so that
 * 0 pads shorter n-grams): vocabularies of up to 2^21 - 2 pieces. */
#include <stdlib.h>
#include <string.h>

#include "base/hash64.h"
#include "search/vmap.h"

#define VMAP_MAX_N 3
#define ID_BITS 21
#define ID_LIMIT ((1 << ID_BITS) - 2)

vmap_build_options_t vmap_build_default_options(void) {
    vmap_build_options_t o;
    o.max_ngram = 3;
    o.top_n = 20;
    o.top_k = 200;
    o.min_count = 2;
    o.align = align_default_options();
    return o;
}

static uint64_t ngram_key(const int *ids, int n) {
    uint64_t k = 0;
    for (int i = 0; i < n && i < VMAP_MAX_N; i++) k |= (uint64_t)(ids[i] + 1) << (ID_BITS * i);
    return k;
}

static int key_length(uint64_t k) {
    int n = 0;
    while (k) {
        n++;
        k >>= ID_BITS;
    }
    return n;
}

static int key_id(uint64_t k, int i) { return (int)((k >> (ID_BITS * i)) & ((1u << ID_BITS) - 1)) - 1; }

/* ------------------------------------------------------------------------------------ build */

typedef struct {
    uint64_t ngram; /* packed source ids */
    int tgt;
    long links;
} link_t;

static int cmp_link(const void *pa, const void *pb) {
    const link_t *a = pa, *b = pb;
    int na = key_length(a->ngram), nb = key_length(b->ngram);
    if (na != nb) return na < nb ? -1 : 1;
    for (int i = 0; i < na; i++) {
        int x = key_id(a->ngram, i), y = key_id(b->ngram, i);
        if (x != y) return x < y ? -1 : 1;
    }
    if (a->links != b->links) return a->links > b->links ? -1 : 1;
    return a->tgt < b->tgt ? -1 : a->tgt > b->tgt;
}

typedef struct {
    long count;
    int id;
} freq_t;

static int cmp_freq(const void *pa, const void *pb) {
    const freq_t *a = pa, *b = pb;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* Counts the alignment links of every source n-gram, and in how many pairs each n-gram occurs. */
static tern_status_t count_links(const align_model_t *am, const align_corpus_t *c, int max_n, hash64_t *ngrams,
                                 long **ng_pairs, hash64_t *links, link_t **link_v, long *tgt_freq,
                                 vmap_build_stats_t *stats) {
    int max_t = 0;
    for (int s = 0; s < c->n; s++) max_t = TERN_MAX(max_t, c->tlen[s]);
    int *a = malloc(((size_t)max_t + 1) * sizeof *a);
    size_t ng_cap = 0, ln_cap = 0;
    int *last = NULL; /* (n-grams) the last pair that counted the n-gram */
    if (!a) return tern_error(TERN_ERR_NOMEM, "vmap: out of memory");
    tern_status_t st = TERN_OK;
    for (int s = 0; s < c->n && !st; s++) {
        int m = c->slen[s], n = c->tlen[s];
        for (int j = 0; j < n; j++) tgt_freq[c->tgt[s][j]]++;
        if (m == 0 || n == 0) continue;
        stats->pairs_used++;
        align_viterbi(am, c->src[s], m, c->tgt[s], n, a);
        for (int j = 0; j < n; j++) stats->links += a[j] >= 0;
        for (int len = 1; len <= max_n && !st; len++)
            for (int i = 0; i + len <= m && !st; i++) {
                int added;
                int32_t g = hash64_insert(ngrams, ngram_key(c->src[s] + i, len), &added);
                if (g < 0) {
                    st = TERN_ERR_NOMEM;
                    break;
                }
                if ((size_t)g >= ng_cap) {
                    size_t nc = ng_cap ? ng_cap * 2 : 4096;
                    long *np = realloc(*ng_pairs, nc * sizeof *np);
                    int *nl = np ? realloc(last, nc * sizeof *nl) : NULL;
                    if (np) *ng_pairs = np;
                    if (!np || !nl) {
                        st = tern_error(TERN_ERR_NOMEM, "vmap: out of memory");
                        break;
                    }
                    last = nl;
                    ng_cap = nc;
                }
                if (added) {
                    (*ng_pairs)[g] = 0;
                    last[g] = -1;
                }
                if (last[g] != s) {
                    last[g] = s;
                    (*ng_pairs)[g]++;
                }
                for (int j = 0; j < n; j++) {
                    if (a[j] < i || a[j] >= i + len) continue;
                    int32_t l = hash64_insert(links, ((uint64_t)g << 32) | (uint32_t)c->tgt[s][j], &added);
                    if (l < 0) {
                        st = TERN_ERR_NOMEM;
                        break;
                    }
                    if ((size_t)l >= ln_cap) {
                        size_t nc = ln_cap ? ln_cap * 2 : 16384;
                        link_t *nv = realloc(*link_v, nc * sizeof *nv);
                        if (!nv) {
                            st = tern_error(TERN_ERR_NOMEM, "vmap: out of memory");
                            break;
                        }
                        *link_v = nv;
                        ln_cap = nc;
                    }
                    if (added) (*link_v)[l] = (link_t){ngram_key(c->src[s] + i, len), c->tgt[s][j], 0};
                    (*link_v)[l].links++;
                }
            }
    }
    free(a);
    free(last);
    return st;
}

static int write_pieces(FILE *out, const vocab_t *v, const int *ids, int n) {
    for (int i = 0; i < n; i++) {
        const char *p = vocab_token(v, ids[i]);
        if (fprintf(out, "%s%s", i ? " " : "", p ? p : "") < 0) return 0;
    }
    return 1;
}

tern_status_t vmap_build(FILE *out, const align_corpus_t *c, const vocab_t *src_vocab,
                         const vocab_t *tgt_vocab, const vmap_build_options_t *opt,
                         vmap_build_stats_t *stats_out) {
    vmap_build_options_t o = opt ? *opt : vmap_build_default_options();
    vmap_build_stats_t stats;
    memset(&stats, 0, sizeof stats);
    int sv = vocab_size(src_vocab), tv = vocab_size(tgt_vocab);
    if (o.max_ngram < 1 || o.max_ngram > VMAP_MAX_N || o.top_n < 1 || o.top_n > 256 || o.top_k < 0 || o.min_count < 1)
        return tern_error(TERN_ERR_INVALID_ARG, "vmap: n-grams of 1 to %d pieces, top-n in 1..256, top-k >= 0, "
                                                "min-count >= 1", VMAP_MAX_N);
    if (sv > ID_LIMIT || tv > ID_LIMIT)
        return tern_error(TERN_ERR_UNSUPPORTED, "vmap: vocabularies of at most %d pieces", ID_LIMIT);
    align_model_t *am = NULL;
    tern_status_t st = align_train(&am, c, sv, tv, &o.align);
    if (st) return st;
    hash64_t ngrams = {0}, links = {0};
    long *ng_pairs = NULL, *tgt_freq = calloc((size_t)tv, sizeof *tgt_freq);
    link_t *lv = NULL;
    freq_t *fr = NULL;
    if (!tgt_freq) {
        st = tern_error(TERN_ERR_NOMEM, "vmap: out of memory");
        goto done;
    }
    if ((st = count_links(am, c, o.max_ngram, &ngrams, &ng_pairs, &links, &lv, tgt_freq, &stats))) goto done;
    /* the always-candidates: the top_k most frequent target pieces */
    fr = malloc((size_t)tv * sizeof *fr);
    if (!fr) {
        st = tern_error(TERN_ERR_NOMEM, "vmap: out of memory");
        goto done;
    }
    for (int i = 0; i < tv; i++) fr[i] = (freq_t){tgt_freq[i], i};
    qsort(fr, (size_t)tv, sizeof *fr, cmp_freq);
    int k = 0, ok = 1;
    ok &= fputc('\t', out) != EOF;
    for (int i = 0; i < tv && k < o.top_k && fr[i].count > 0; i++, k++) {
        const char *p = vocab_token(tgt_vocab, fr[i].id);
        ok &= fprintf(out, "%s%s", k ? " " : "", p ? p : "") >= 0;
    }
    ok &= fputc('\n', out) != EOF;
    stats.always = k;
    /* the rules, grouped by n-gram */
    qsort(lv, links.count, sizeof *lv, cmp_link);
    for (size_t i = 0; i < links.count && ok;) {
        size_t e = i;
        while (e < links.count && lv[e].ngram == lv[i].ngram) e++;
        int len = key_length(lv[i].ngram);
        int32_t g = hash64_find(&ngrams, lv[i].ngram);
        if (len == 1 || ng_pairs[g] >= o.min_count) {
            int ids[VMAP_MAX_N], tg[256];
            for (int q = 0; q < len; q++) ids[q] = key_id(lv[i].ngram, q);
            int nt = 0;
            for (size_t q = i; q < e && nt < o.top_n && nt < 256; q++) tg[nt++] = lv[q].tgt;
            ok &= write_pieces(out, src_vocab, ids, len);
            ok &= fputc('\t', out) != EOF;
            ok &= write_pieces(out, tgt_vocab, tg, nt);
            ok &= fputc('\n', out) != EOF;
            stats.rules[len]++;
        }
        i = e;
    }
    if (!ok) st = tern_error(TERN_ERR_IO, "vmap: writing the map failed");
done:
    align_free(am);
    hash64_free(&ngrams);
    hash64_free(&links);
    free(ng_pairs);
    free(tgt_freq);
    free(lv);
    free(fr);
    if (stats_out) *stats_out = stats;
    return st;
}

/* ------------------------------------------------------------------------------------- load */

struct vmap {
    hash64_t rules;    /* packed source n-gram -> rule */
    int *start, *cnt;  /* (rules) targets of a rule: ids[start .. start + cnt) */
    int *ids;
    int n_ids;
    int *always;
    int n_always;
    int max_n;
    int tgt_size;
    int shared;        /* a Marian shortlist on a joint vocabulary: every source id is a candidate too */
    int pad_from;      /* >= 0: candidates padded to a multiple of 8 from this id on (Marian's); -1: none */
};

void vmap_free(vmap_t *v) {
    if (!v) return;
    hash64_free(&v->rules);
    free(v->start);
    free(v->cnt);
    free(v->ids);
    free(v->always);
    free(v);
}

int vmap_max_ngram(const vmap_t *v) { return v->max_n; }
int vmap_num_rules(const vmap_t *v) { return (int)v->rules.count; }

static int push_id(int **arr, int *n, int *cap, int id) {
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 1024;
        int *na = realloc(*arr, (size_t)nc * sizeof *na);
        if (!na) return 0;
        *arr = na;
        *cap = nc;
    }
    (*arr)[(*n)++] = id;
    return 1;
}

/* A map being read, and what it left out (for the warning). */
typedef struct {
    vmap_t *v;
    const char *path;
    const vocab_t *src_vocab, *tgt_vocab;
    long lineno;
    int ids_cap, rule_cap, always_cap;
    long dropped_rules, dropped_targets, long_rules;
} vmap_reader_t;

/* The next piece of a list separated by spaces, from *p on (empty pieces skipped): its start,
 * with its length in *len and *p moved past it; NULL at the end. */
static const char *next_piece(const char **p, size_t *len) {
    const char *s = *p;
    while (*s == ' ') s++;
    if (!*s) return NULL;
    const char *sp = strchr(s, ' ');
    *len = sp ? (size_t)(sp - s) : strlen(s);
    *p = s + *len;
    return s;
}

/* A line's source n-gram: 1 with its ids in src (*n of them); 0 at the first piece unknown to the
 * source vocabulary, or at a piece beyond VMAP_MAX_N (counted in long_rules). */
static int parse_ngram(vmap_reader_t *rd, const char *text, int *src, int *n) {
    size_t len;
    *n = 0;
    for (const char *p = text, *piece; (piece = next_piece(&p, &len));) {
        if (*n == VMAP_MAX_N) {
            rd->long_rules++;
            return 0;
        }
        int id = vocab_lookup_n(rd->src_vocab, piece, len);
        if (id < 0) return 0;
        src[(*n)++] = id;
    }
    return 1;
}

/* A line's target pieces, appended to the always-candidates or to the rules' ids; pieces unknown
 * to the target vocabulary are counted and left out. */
static tern_status_t add_targets(vmap_reader_t *rd, const char *text, int is_always) {
    vmap_t *v = rd->v;
    size_t len;
    for (const char *p = text, *piece; (piece = next_piece(&p, &len));) {
        int id = vocab_lookup_n(rd->tgt_vocab, piece, len);
        if (id < 0) rd->dropped_targets++;
        else if (is_always ? !push_id(&v->always, &v->n_always, &rd->always_cap, id)
                           : !push_id(&v->ids, &v->n_ids, &rd->ids_cap, id))
            return TERN_ERR_NOMEM;
    }
    return TERN_OK;
}

/* The rule of a source n-gram: its targets are ids[start ..]. A repeated n-gram: the later line
 * replaces the earlier (as CTranslate2). */
static tern_status_t add_rule(vmap_reader_t *rd, const int *src, int n, int start) {
    vmap_t *v = rd->v;
    int added;
    int32_t g = hash64_insert(&v->rules, ngram_key(src, n), &added);
    if (g < 0) return TERN_ERR_NOMEM;
    if (added && g >= rd->rule_cap) {
        int nc = rd->rule_cap ? rd->rule_cap * 2 : 4096;
        int *ns = realloc(v->start, (size_t)nc * sizeof *ns);
        if (ns) v->start = ns;
        int *nn = ns ? realloc(v->cnt, (size_t)nc * sizeof *nn) : NULL;
        if (!ns || !nn) return TERN_ERR_NOMEM;
        v->cnt = nn;
        rd->rule_cap = nc;
    }
    v->start[g] = start;
    v->cnt[g] = v->n_ids - start;
    if (n > v->max_n) v->max_n = n;
    return TERN_OK;
}

/* One non-empty line (r bytes, without its line end): "n-gram TAB targets". */
static tern_status_t read_rule_line(vmap_reader_t *rd, char *line, size_t r) {
    if (memchr(line, 0, r)) return tern_error(TERN_ERR_FORMAT, "%s: line %ld: a NUL byte", rd->path, rd->lineno);
    char *tab = strchr(line, '\t');
    if (!tab)
        return tern_error(TERN_ERR_FORMAT, "%s: line %ld: no TAB between the source n-gram and its targets",
                          rd->path, rd->lineno);
    *tab = 0;
    int src[VMAP_MAX_N] = {0}, n;
    int known = parse_ngram(rd, line, src, &n);
    int is_always = n == 0 && known && line[0] == 0;
    if (!known || (n == 0 && !is_always)) {
        rd->dropped_rules++;
        return TERN_OK;
    }
    int start = rd->v->n_ids;
    tern_status_t st = add_targets(rd, tab + 1, is_always);
    return st || is_always ? st : add_rule(rd, src, n, start);
}

static tern_status_t read_rules(vmap_reader_t *rd, FILE *f) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t r;
    tern_status_t st = TERN_OK;
    while (!st && (r = getline(&line, &cap, f)) >= 0) {
        rd->lineno++;
        while (r > 0 && (line[r - 1] == '\n' || line[r - 1] == '\r')) line[--r] = 0;
        if (r > 0) st = read_rule_line(rd, line, (size_t)r);
    }
    free(line);
    return st;
}

tern_status_t vmap_load(vmap_t **out, const char *path, const vocab_t *src_vocab, const vocab_t *tgt_vocab,
                        const int *always, int n_always) {
    *out = NULL;
    if (vocab_size(src_vocab) > ID_LIMIT)
        return tern_error(TERN_ERR_UNSUPPORTED, "%s: vocabulary maps need vocabularies of at most %d pieces", path,
                          ID_LIMIT);
    FILE *f = fopen(path, "rb");
    if (!f) return tern_error(TERN_ERR_IO, "%s: cannot open the vocabulary map", path);
    vmap_reader_t rd = {.path = path, .src_vocab = src_vocab, .tgt_vocab = tgt_vocab};
    vmap_t *v = rd.v = calloc(1, sizeof *v);
    if (!v) {
        fclose(f);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    v->tgt_size = vocab_size(tgt_vocab);
    v->pad_from = -1;
    tern_status_t st = TERN_OK;
    for (int i = 0; i < n_always && !st; i++)
        if (always[i] >= 0 && !push_id(&v->always, &v->n_always, &rd.always_cap, always[i])) st = TERN_ERR_NOMEM;
    if (!st) st = read_rules(&rd, f);
    if (!st && ferror(f)) st = tern_error(TERN_ERR_IO, "%s: read error", path);
    if (st == TERN_ERR_NOMEM) tern_error(st, "%s: out of memory at line %ld", path, rd.lineno);
    fclose(f);
    if (st) {
        vmap_free(v);
        return st;
    }
    if (rd.dropped_rules || rd.dropped_targets || rd.long_rules)
        TERN_WARN("%s: %ld rule(s) with source pieces not in the model's vocabulary, %ld with more than %d "
                  "pieces (ignored); %ld target piece(s) not in the target vocabulary (ignored)",
                  path, rd.dropped_rules, rd.long_rules, VMAP_MAX_N, rd.dropped_targets);
    *out = v;
    return TERN_OK;
}

tern_status_t vmap_from_lists(vmap_t **out, int tgt_size, int n_src, const int64_t *off, const int *ids,
                              const int *always, int n_always, int shared, int pad_from) {
    *out = NULL;
    if (n_src > ID_LIMIT)
        return tern_error(TERN_ERR_UNSUPPORTED, "vocabulary maps need vocabularies of at most %d pieces", ID_LIMIT);
    vmap_t *v = calloc(1, sizeof *v);
    size_t n_ids = n_src > 0 ? (size_t)off[n_src] : 0;
    if (!v) return tern_error(TERN_ERR_NOMEM, "out of memory");
    v->tgt_size = tgt_size;
    v->shared = shared;
    v->pad_from = pad_from;
    v->max_n = 1;
    v->start = malloc(((size_t)n_src + 1) * sizeof *v->start);
    v->cnt = malloc(((size_t)n_src + 1) * sizeof *v->cnt);
    v->ids = malloc((n_ids + 1) * sizeof *v->ids);
    v->always = malloc(((size_t)n_always + 1) * sizeof *v->always);
    tern_status_t st = v->start && v->cnt && v->ids && v->always ? TERN_OK : TERN_ERR_NOMEM;
    if (!st) {
        memcpy(v->ids, ids, n_ids * sizeof *v->ids);
        v->n_ids = (int)n_ids;
        for (int i = 0; i < n_always; i++)
            if (always[i] >= 0 && always[i] < tgt_size) v->always[v->n_always++] = always[i];
    }
    for (int s = 0; s < n_src && !st; s++) {
        if (off[s + 1] == off[s]) continue;
        int added;
        int32_t g = hash64_insert(&v->rules, ngram_key(&s, 1), &added);
        if (g < 0 || g > n_src) st = TERN_ERR_NOMEM;
        else v->start[g] = (int)off[s], v->cnt[g] = (int)(off[s + 1] - off[s]);
    }
    if (st) {
        vmap_free(v);
        return tern_error(st, "out of memory");
    }
    *out = v;
    return TERN_OK;
}

static void mark_ids(const int *ids, int n, uint8_t *mark, int tgt_size) {
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < tgt_size) mark[ids[i]] = 1;
}

int vmap_candidates(const vmap_t *v, const int *const *src, const int *len, int n, int *out, uint8_t *mark) {
    mark_ids(v->always, v->n_always, mark, v->tgt_size);
    for (int s = 0; s < n; s++)
        for (int g = 1; g <= v->max_n; g++)
            for (int i = 0; i + g <= len[s]; i++) {
                int ok = 1;
                for (int q = 0; q < g; q++) ok &= src[s][i + q] >= 0 && src[s][i + q] <= ID_LIMIT;
                if (!ok) continue;
                int32_t r = hash64_find(&v->rules, ngram_key(src[s] + i, g));
                if (r >= 0) mark_ids(v->ids + v->start[r], v->cnt[r], mark, v->tgt_size);
            }
    if (v->shared)
        for (int s = 0; s < n; s++) mark_ids(src[s], len[s], mark, v->tgt_size);
    if (v->pad_from >= 0) { /* Marian's shortlists: a multiple of 8 candidates, the lowest ids >= pad_from added */
        int count = 0;
        for (int i = 0; i < v->tgt_size; i++) count += mark[i];
        for (int i = v->pad_from; i < v->tgt_size && count % 8; i++)
            if (!mark[i]) mark[i] = 1, count++;
    }
    int k = 0;
    for (int i = 0; i < v->tgt_size; i++)
        if (mark[i]) {
            out[k++] = i;
            mark[i] = 0;
        }
    return k;
}

/* ----------------------------------------------------------------------- restricted search */

static tern_status_t vd_step(void *self, const int *tokens, int t, float *logits, float *attn) {
    vmap_decoder_t *vd = self;
    for (int r = 0; r < vd->R; r++) vd->tok[r] = tokens[r] >= 0 && tokens[r] < vd->n ? vd->cand[tokens[r]] : tokens[r];
    return vd->inner.step(vd->inner.self, vd->tok, t, logits, attn);
}

static tern_status_t vd_set_rows(void *self, const int *parent, const int *sent, int R) {
    vmap_decoder_t *vd = self;
    tern_status_t st = vd->inner.set_rows(vd->inner.self, parent, sent, R);
    if (!st) vd->R = R;
    return st;
}

decoder_iface_t vmap_decoder(vmap_decoder_t *vd, const decoder_iface_t *inner, const int *cand, int n, int R,
                             int *tok) {
    vd->inner = *inner;
    vd->cand = cand;
    vd->n = n;
    vd->tok = tok;
    vd->R = R;
    decoder_iface_t d = *inner;
    d.self = vd;
    d.vocab_size = n;
    d.step = vd_step;
    d.set_rows = vd_set_rows;
    d.set_argmax_only = NULL; /* the restricted projection is already small */
    d.set_argmax_ban = NULL;
    d.set_argmax_never = NULL;
    return d;
}

int vmap_position(const int *cand, int n, int id) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cand[mid] == id) return mid;
        if (cand[mid] < id) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

void vmap_results_to_ids(search_result_t *res, int N, const int *cand) {
    for (int i = 0; i < N; i++)
        for (int h = 0; h < res[i].n; h++)
            for (int k = 0; k < res[i].hyps[h].length; k++) res[i].hyps[h].tokens[k] = cand[res[i].hyps[h].tokens[k]];
}
