/* vmap_api.c — tern_vmap_build(): reads a parallel corpus, encodes it with a model's
 * SentencePiece models and vocabularies, and writes a vocabulary map (search/vmap.h). */
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "model/model.h"
#include "search/vmap.h"

tern_vmap_options_t tern_vmap_default_options(void) {
    vmap_build_options_t b = vmap_build_default_options();
    tern_vmap_options_t o = {.struct_size = sizeof o, .max_ngram = b.max_ngram, .top_n = b.top_n, .top_k = b.top_k,
                             .min_count = b.min_count, .iterations = b.align.iterations,
                             .p0 = (float)b.align.p0, .tension = (float)b.align.tension, .max_pairs = 0};
    return o;
}

typedef struct {
    int **ids;
    int *len;
    int n, cap;
} id_lines_t;

static void id_lines_free(id_lines_t *l) {
    for (int i = 0; i < l->n; i++) free(l->ids[i]);
    free(l->ids);
    free(l->len);
}

static tern_status_t id_lines_push(id_lines_t *l, int *ids, int n) {
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 4096;
        int **ni = realloc(l->ids, (size_t)nc * sizeof *ni);
        if (ni) l->ids = ni;
        int *nl = ni ? realloc(l->len, (size_t)nc * sizeof *nl) : NULL;
        if (!ni || !nl) {
            free(ids);
            return tern_error(TERN_ERR_NOMEM, "out of memory");
        }
        l->len = nl;
        l->cap = nc;
    }
    l->ids[l->n] = ids;
    l->len[l->n++] = n;
    return TERN_OK;
}

/* Reads both files line by line into id lines (source without its start/end tokens). */
static tern_status_t read_corpus(const tern_model_t *m, const char *sp, const char *tp, long max_pairs,
                                 id_lines_t *src, id_lines_t *tgt) {
    FILE *fs = fopen(sp, "rb"), *ft = fopen(tp, "rb");
    tern_status_t st = TERN_OK;
    if (!fs || !ft) {
        st = tern_error(TERN_ERR_IO, "%s: cannot open", !fs ? sp : tp);
        goto done;
    }
    char *ls = NULL, *lt = NULL;
    size_t cs = 0, ct = 0;
    long line = 0;
    for (;;) {
        ssize_t rs = getline(&ls, &cs, fs), rt = getline(&lt, &ct, ft);
        if (rs < 0 && rt < 0) break;
        line++;
        if (rs < 0 || rt < 0) {
            st = tern_error(TERN_ERR_INPUT, "line counts differ: %s ends at line %ld, %s goes on",
                            rs < 0 ? sp : tp, line - 1, rs < 0 ? tp : sp);
            break;
        }
        if (max_pairs > 0 && line > max_pairs) break;
        while (rs > 0 && (ls[rs - 1] == '\n' || ls[rs - 1] == '\r')) rs--;
        while (rt > 0 && (lt[rt - 1] == '\n' || lt[rt - 1] == '\r')) rt--;
        int *si = NULL, *ti = NULL, ns = 0, nt = 0, trunc = 0;
        if ((st = model_encode_source(m, ls, (size_t)rs, 0, &si, &ns, &trunc))) {
            tern_error_prefix(st, "%s: line %ld", sp, line);
            break;
        }
        int k = 0; /* drop the special tokens the model adds to a source */
        for (int i = 0; i < ns; i++)
            if (si[i] != m->src_bos && si[i] != m->src_eos) si[k++] = si[i];
        if ((st = id_lines_push(src, si, k))) break;
        if ((st = model_encode_target(m, lt, (size_t)rt, &ti, &nt))) {
            tern_error_prefix(st, "%s: line %ld", tp, line);
            break;
        }
        if ((st = id_lines_push(tgt, ti, nt))) break;
    }
    if (!st && (ferror(fs) || ferror(ft))) st = tern_error(TERN_ERR_IO, "%s: read error", ferror(fs) ? sp : tp);
    free(ls);
    free(lt);
done:
    if (fs) fclose(fs);
    if (ft) fclose(ft);
    return st;
}

tern_status_t tern_vmap_build(const tern_model_t *m, const char *source_path, const char *target_path,
                              const char *out_path, const tern_vmap_options_t *options, tern_report_fn report, void *user_data) {
    tern_vmap_options_t to, defaults = tern_vmap_default_options();
    tern_status_t ost = API_STRUCT_IN(&to, options, &defaults, tern_vmap_options_t);
    if (ost) return ost;
    vmap_build_options_t o = vmap_build_default_options();
    o.max_ngram = to.max_ngram;
    o.top_n = to.top_n;
    o.top_k = to.top_k;
    o.min_count = to.min_count;
    o.align.iterations = to.iterations;
    o.align.p0 = to.p0;
    o.align.tension = to.tension;
    id_lines_t src = {0}, tgt = {0};
    double t0 = time_now();
    tern_status_t st = read_corpus(m, source_path, target_path, to.max_pairs, &src, &tgt);
    if (st) goto done;
    double t1 = time_now();
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    FILE *out = fopen(tmp, "wb");
    if (!out) {
        st = tern_error(TERN_ERR_IO, "%s: cannot open for writing", tmp);
        goto done;
    }
    align_corpus_t c = {src.n, (const int *const *)src.ids, src.len, (const int *const *)tgt.ids, tgt.len};
    vmap_build_stats_t stats;
    st = vmap_build(out, &c, m->src_vocab, m->tgt_vocab, &o, &stats);
    if (fclose(out) && !st) st = tern_error(TERN_ERR_IO, "%s: write error", tmp);
    if (!st && rename(tmp, out_path)) st = tern_error(TERN_ERR_IO, "%s: cannot rename into place", out_path);
    if (st) {
        remove(tmp);
        goto done;
    }
    if (report) {
        char line[4096 + 512];
        snprintf(line, sizeof line,
                 "vmap: %ld pairs aligned (%ld links) in %.1f s after %.1f s of encoding; rules: %ld 1-grams, "
                 "%ld 2-grams, %ld 3-grams; %d pieces always candidates; wrote %s",
                 stats.pairs_used, stats.links, time_now() - t1, t1 - t0, stats.rules[1], stats.rules[2],
                 stats.rules[3], stats.always, out_path);
        report(line, user_data);
    }
done:
    id_lines_free(&src);
    id_lines_free(&tgt);
    return st;
}
