/* shortlist.c — Marian's lexical shortlists (text and binary) onto a vocabulary map (shortlist.h).
 *
 * Legend: V target vocabulary size, S source vocabulary size. */
#include "search/shortlist.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------ spec */

static int parse_long(const char *s, long *v) {
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end) return 0;
    *v = x;
    return 1;
}

tern_status_t shortlist_spec_parse(shortlist_spec_t *s, const char *text, const char *what) {
    memset(s, 0, sizeof *s);
    s->first = 100, s->best = 100, s->check = 1;
    char buf[1200];
    if (!text || !*text || strlen(text) >= sizeof buf)
        return tern_error(TERN_ERR_INVALID_ARG, "%s: expected FILE[,first,best[,threshold]]", what);
    snprintf(buf, sizeof buf, "%s", text);
    char *vals[5];
    int n = 0;
    for (char *p = buf, *tok; n < 5 && (tok = strsep(&p, ", ")) != NULL;)
        if (*tok) vals[n++] = tok;
    if (n == 0 || n > 4)
        return tern_error(TERN_ERR_INVALID_ARG, "%s '%s': expected FILE[,first,best[,threshold]]", what, text);
    snprintf(s->path, sizeof s->path, "%s", vals[0]);
    s->n_vals = n - 1;
    if (n > 1) {
        if (!strcmp(vals[1], "true") || !strcmp(vals[1], "false")) s->check = vals[1][0] == 't', s->first = -1;
        else if (!parse_long(vals[1], &s->first) || s->first < 0)
            return tern_error(TERN_ERR_INVALID_ARG, "%s '%s': first '%s' is not a count", what, text, vals[1]);
        else s->check = s->first != 0;
    }
    if (n > 2 && (!parse_long(vals[2], &s->best) || s->best < 0))
        return tern_error(TERN_ERR_INVALID_ARG, "%s '%s': best '%s' is not a count", what, text, vals[2]);
    if (n > 3) {
        char *end;
        s->threshold = strtof(vals[3], &end);
        if (end == vals[3] || *end || !isfinite(s->threshold))
            return tern_error(TERN_ERR_INVALID_ARG, "%s '%s': threshold '%s' is not a number", what, text, vals[3]);
    }
    return TERN_OK;
}

uint64_t shortlist_checksum(const uint64_t *words, size_t n) {
    uint64_t seed = 0;
    for (size_t i = 0; i < n; i++) seed ^= words[i] + 0x9e3779b9ull + (seed << 6) + (seed >> 2);
    return seed;
}

/* ------------------------------------------------------------------------------------ text */

typedef struct {
    int src, tgt;
    float prob;
    long seq;  /* line order: a pair given twice keeps its later line */
} entry_t;

static int cmp_pair_seq(const void *pa, const void *pb) {
    const entry_t *a = pa, *b = pb;
    if (a->src != b->src) return a->src < b->src ? -1 : 1;
    if (a->tgt != b->tgt) return a->tgt < b->tgt ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Marian's order: by source, then probability and target id, both descending. */
static int cmp_best(const void *pa, const void *pb) {
    const entry_t *a = pa, *b = pb;
    if (a->src != b->src) return a->src < b->src ? -1 : 1;
    if (a->prob != b->prob) return a->prob > b->prob ? -1 : 1;
    return a->tgt > b->tgt ? -1 : a->tgt < b->tgt;
}

static tern_status_t read_text(const shortlist_spec_t *sp, const vocab_t *src_vocab, const vocab_t *tgt_vocab,
                               entry_t **out, long *n_out) {
    FILE *f = fopen(sp->path, "rb");
    if (!f) return tern_error(TERN_ERR_IO, "%s: cannot open the shortlist", sp->path);
    entry_t *e = NULL;
    long n = 0, cap = 0, lineno = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t r;
    tern_status_t st = TERN_OK;
    long unknown = 0;
    char first_unknown[160] = "";
    int unk_src = vocab_lookup(src_vocab, "<unk>"), unk_tgt = vocab_lookup(tgt_vocab, "<unk>");
    while (!st && (r = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        if (memchr(line, 0, (size_t)r)) {
            st = tern_error(TERN_ERR_FORMAT, "%s: line %ld: a NUL byte", sp->path, lineno);
            break;
        }
        char *field[4];
        int nf = 0;
        for (char *p = line, *tok; (tok = strsep(&p, " \t\r\n\v\f")) != NULL;)
            if (*tok) {
                if (nf < 4) field[nf] = tok;
                nf++;
            }
        if (nf == 0) continue;
        if (nf != 3) {
            st = tern_error(TERN_ERR_FORMAT, "%s: line %ld: %d field(s); a shortlist line is 'target source "
                            "probability'", sp->path, lineno, nf);
            break;
        }
        char *end;
        errno = 0;
        float prob = strtof(field[2], &end);
        if (end == field[2] || *end || !isfinite(prob)) {
            st = tern_error(TERN_ERR_FORMAT, "%s: line %ld: probability '%s' is not a number", sp->path, lineno,
                            field[2]);
            break;
        }
        if (!strcmp(field[0], "NULL") || !strcmp(field[1], "NULL")) continue; /* as Marian */
        int t = vocab_lookup(tgt_vocab, field[0]), s = vocab_lookup(src_vocab, field[1]);
        if (t < 0 || s < 0) { /* Marian reads a word outside its vocabulary as <unk>: so does Tern, saying so */
            if (!unknown++)
                snprintf(first_unknown, sizeof first_unknown, "line %ld: %s word '%.64s'", lineno,
                         t < 0 ? "target" : "source", t < 0 ? field[0] : field[1]);
            if (t < 0) t = unk_tgt;
            if (s < 0) s = unk_src;
            if (t < 0 || s < 0) {
                st = tern_error(TERN_ERR_MISMATCH, "%s: %s is not in the model's vocabulary, which has no <unk>",
                                sp->path, first_unknown);
                break;
            }
        }
        if (n == cap) {
            long nc = cap ? 2 * cap : 4096;
            entry_t *ne = realloc(e, (size_t)nc * sizeof *ne);
            if (!ne) {
                st = tern_error(TERN_ERR_NOMEM, "%s: out of memory at line %ld", sp->path, lineno);
                break;
            }
            e = ne, cap = nc;
        }
        e[n] = (entry_t){s, t, prob, n};
        n++;
    }
    if (!st && ferror(f)) st = tern_error(TERN_ERR_IO, "%s: read error", sp->path);
    if (!st && unknown)
        TERN_WARN("%s: %ld line(s) with words outside the model's vocabularies, read as <unk> as Marian does "
                  "(the first: %s)", sp->path, unknown, first_unknown);
    free(line);
    fclose(f);
    if (st) {
        free(e);
        return st;
    }
    *out = e, *n_out = n;
    return TERN_OK;
}

/* The text file's pruned lists: off (S + 1) and ids, malloc'd. */
static tern_status_t text_lists(const shortlist_spec_t *sp, const vocab_t *src_vocab, const vocab_t *tgt_vocab,
                                int64_t **off_out, int **ids_out) {
    entry_t *e = NULL;
    long n = 0;
    tern_status_t st = read_text(sp, src_vocab, tgt_vocab, &e, &n);
    if (st) return st;
    int S = vocab_size(src_vocab);
    if (n > 0) qsort(e, (size_t)n, sizeof *e, cmp_pair_seq);
    long k = 0; /* one entry per (source, target): the last line's */
    for (long i = 0; i < n; i++) {
        if (k > 0 && e[k - 1].src == e[i].src && e[k - 1].tgt == e[i].tgt) e[k - 1] = e[i];
        else e[k++] = e[i];
    }
    n = k;
    if (n > 0) qsort(e, (size_t)n, sizeof *e, cmp_best);
    int64_t *off = calloc((size_t)S + 1, sizeof *off);
    int *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!off || !ids) {
        free(e), free(off), free(ids);
        return tern_error(TERN_ERR_NOMEM, "%s: out of memory", sp->path);
    }
    long m = 0;
    for (long i = 0, s = 0; s < S; s++) {
        off[s] = m;
        long kept = 0;
        for (; i < n && e[i].src == s; i++)
            if (kept < sp->best && e[i].prob > sp->threshold) ids[m++] = e[i].tgt, kept++;
            else kept = sp->best; /* sorted: nothing after a pruned entry is kept (Marian's break) */
    }
    off[S] = m;
    free(e);
    *off_out = off, *ids_out = ids;
    return TERN_OK;
}

/* ---------------------------------------------------------------------------------- binary */

static tern_status_t binary_lists(const shortlist_spec_t *sp, const vocab_t *src_vocab, const vocab_t *tgt_vocab,
                                  long *first, long *best, int64_t **off_out, int **ids_out) {
    FILE *f = fopen(sp->path, "rb");
    if (!f) return tern_error(TERN_ERR_IO, "%s: cannot open the shortlist", sp->path);
    uint64_t *buf = NULL;
    tern_status_t st = TERN_OK;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) st = tern_error(TERN_ERR_IO, "%s: cannot read the shortlist", sp->path);
    else if (size < 48)
        st = tern_error(TERN_ERR_FORMAT, "%s: truncated binary shortlist (%ld bytes; its header alone has 48)", sp->path,
                        size);
    else if (!(buf = malloc((size_t)size + 8)))
        st = tern_error(TERN_ERR_NOMEM, "%s: out of memory", sp->path);
    else if (fread(buf, 1, (size_t)size, f) != (size_t)size)
        st = tern_error(TERN_ERR_IO, "%s: read error", sp->path);
    fclose(f);
    if (st) {
        free(buf);
        return st;
    }
    /* header: magic, checksum, first, best, n_off, n_ids */
    uint64_t n_off = buf[4], n_ids = buf[5], body = (uint64_t)size - 48;
    if (buf[0] != SHORTLIST_BINARY_MAGIC)
        st = tern_error(TERN_ERR_FORMAT, "%s: not a binary shortlist (magic %016llx)", sp->path,
                        (unsigned long long)buf[0]);
    else if (n_off < 1 || n_off > body / 8 || n_ids > body / 4 || n_off * 8 + n_ids * 4 != body)
        st = tern_error(TERN_ERR_FORMAT, "%s: %s binary shortlist: its header gives %llu offsets and %llu ids (%llu bytes "
                        "after the header), the file has %llu bytes after it", sp->path,
                        n_off <= body / 8 && n_ids <= body / 4 && n_off * 8 + n_ids * 4 > body ? "truncated" : "corrupt",
                        (unsigned long long)n_off, (unsigned long long)n_ids,
                        n_off <= body / 8 && n_ids <= body / 4 ? (unsigned long long)(n_off * 8 + n_ids * 4) : 0ull,
                        (unsigned long long)body);
    else if (sp->check && shortlist_checksum(buf + 2, ((size_t)size - 16) / 8) != buf[1])
        st = tern_error(TERN_ERR_FORMAT, "%s: checksum mismatch: the binary shortlist is corrupt", sp->path);
    else if (buf[2] > (uint64_t)INT32_MAX || buf[3] > (uint64_t)INT32_MAX)
        st = tern_error(TERN_ERR_FORMAT, "%s: header: first %llu, best %llu out of range", sp->path,
                        (unsigned long long)buf[2], (unsigned long long)buf[3]);
    else if (n_off - 1 > (uint64_t)vocab_size(src_vocab))
        st = tern_error(TERN_ERR_MISMATCH, "%s: lists for %llu source words, but the model's source vocabulary has %d",
                        sp->path, (unsigned long long)(n_off - 1), vocab_size(src_vocab));
    if (st) {
        free(buf);
        return st;
    }
    const uint64_t *o = buf + 6;
    const uint32_t *id = (const uint32_t *)(buf + 6 + n_off);
    int S = vocab_size(src_vocab), V = vocab_size(tgt_vocab);
    for (uint64_t s = 0; s + 1 < n_off && !st; s++)
        if (o[s] > o[s + 1] || o[s + 1] > n_ids)
            st = tern_error(TERN_ERR_FORMAT, "%s: offset %llu of source id %llu (%llu, next %llu) out of order or past "
                            "the %llu ids", sp->path, (unsigned long long)s, (unsigned long long)s,
                            (unsigned long long)o[s], (unsigned long long)o[s + 1], (unsigned long long)n_ids);
    if (!st && o[0] != 0) st = tern_error(TERN_ERR_FORMAT, "%s: the first offset is %llu, not 0", sp->path,
                                          (unsigned long long)o[0]);
    if (!st && o[n_off - 1] != n_ids)
        st = tern_error(TERN_ERR_FORMAT, "%s: the last offset is %llu, not the %llu ids", sp->path,
                        (unsigned long long)o[n_off - 1], (unsigned long long)n_ids);
    for (uint64_t j = 0; j < n_ids && !st; j++)
        if (id[j] >= (uint32_t)V)
            st = tern_error(TERN_ERR_MISMATCH, "%s: entry %llu: target id %u is not in the model's target vocabulary "
                            "(%d words)", sp->path, (unsigned long long)j, id[j], V);
    int64_t *off = NULL;
    int *ids = NULL;
    if (!st && (!(off = calloc((size_t)S + 1, sizeof *off)) || !(ids = malloc((n_ids + 1) * sizeof *ids))))
        st = tern_error(TERN_ERR_NOMEM, "%s: out of memory", sp->path);
    if (!st) {
        for (int s = 0; s <= S; s++) off[s] = (int64_t)((uint64_t)s < n_off ? o[s] : o[n_off - 1]);
        for (uint64_t j = 0; j < n_ids; j++) ids[j] = (int)id[j];
        *first = (long)buf[2], *best = (long)buf[3];
        *off_out = off, *ids_out = ids;
    } else {
        free(off), free(ids);
    }
    free(buf);
    return st;
}

static int is_binary(const char *path) {
    FILE *f = fopen(path, "rb");
    uint64_t magic = 0;
    int yes = f && fread(&magic, 8, 1, f) == 1 && magic == SHORTLIST_BINARY_MAGIC;
    if (f) fclose(f);
    return yes;
}

/* ------------------------------------------------------------------------------------ load */

tern_status_t shortlist_load(vmap_t **out, const shortlist_spec_t *spec, const vocab_t *src_vocab,
                             const vocab_t *tgt_vocab, int shared, int eos, shortlist_info_t *info) {
    *out = NULL;
    shortlist_info_t in;
    memset(&in, 0, sizeof in);
    int64_t *off = NULL;
    int *ids = NULL;
    tern_status_t st;
    if ((in.binary = is_binary(spec->path))) {
        if (spec->n_vals > 1)
            return tern_error(TERN_ERR_INVALID_ARG, "%s: a binary shortlist takes no first/best/threshold (they are "
                              "in the file); its one value is Marian's check flag", spec->path);
        st = binary_lists(spec, src_vocab, tgt_vocab, &in.first, &in.best, &off, &ids);
    } else {
        if (spec->first < 0)
            return tern_error(TERN_ERR_INVALID_ARG, "%s: a text shortlist's first value is a count", spec->path);
        in.first = spec->first, in.best = spec->best;
        st = text_lists(spec, src_vocab, tgt_vocab, &off, &ids);
    }
    if (st) return st;
    int S = vocab_size(src_vocab), V = vocab_size(tgt_vocab);
    for (int s = 0; s < S; s++) in.sources += off[s + 1] > off[s];
    in.entries = (long)off[S];
    int n_first = in.first < V ? (int)in.first : V;
    int *always = malloc(((size_t)n_first + 1) * sizeof *always);
    if (!always) st = tern_error(TERN_ERR_NOMEM, "out of memory");
    if (!st) {
        for (int i = 0; i < n_first; i++) always[i] = i;
        always[n_first] = eos;
        st = vmap_from_lists(out, V, S, off, ids, always, n_first + 1, shared, n_first);
    }
    free(always), free(off), free(ids);
    if (!st && info) *info = in;
    return st;
}
