/* filter.c — parallel-corpus cleaning, one pair at a time (see filter.h for the rules and their
 * order). Per pair: validate and decode both sides once into reused buffers, count words,
 * non-whitespace characters and letters, compare the whitespace-normalized sides, then look the
 * pair's hash up in an open-addressing set that doubles at half load. No allocation per pair once
 * the buffers are warm, except SentencePiece's own when a model is given. */
#include "text/filter.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include <xxhash.h>

#include "text/langid.h"
#include "text/score.h" /* text_utf8_valid, text_decode, text_is_py_space */

typedef struct {
    uint32_t *cp; /* decoded code points */
    size_t cap;
    size_t n;
    int64_t words, nonspace, letters;
} side_t;

struct filter {
    filter_options_t o;
    side_t side[2];
    uint64_t *set;  /* hashes of kept pairs; 0 marks an empty slot */
    size_t set_cap, set_used;
    int has_zero;   /* the hash 0 itself was kept */
    XXH3_state_t *xxh;
    int64_t counts[FILTER_NRULES];
};

filter_options_t filter_default_options(void) {
    filter_options_t o;
    memset(&o, 0, sizeof o);
    o.max_words = 250;
    o.max_tokens = 0;
    o.max_ratio = 9.0;
    o.min_letters = 0.0;
    o.copies = 1;
    o.max_repeats = 0;
    o.repeat_min = 2;
    o.repeat_max = 100;
    o.duplicates = 1;
    return o;
}

const char *filter_rule_name(filter_rule_t r) {
    static const char *const names[FILTER_NRULES] = {
        "keep", "invalid_utf8", "empty", "too_many_words", "too_many_tokens", "ratio",
        "few_letters", "copy", "repetition", "language", "duplicate"};
    return (unsigned)r < FILTER_NRULES ? names[r] : "?";
}

tern_status_t filter_create(filter_t **out, const filter_options_t *o) {
    *out = NULL;
    if (!o->src_lang != !o->tgt_lang || (o->src_lang && (!*o->src_lang || !*o->tgt_lang)))
        return tern_error(TERN_ERR_INVALID_ARG, "filter: give both languages for the language rule (source '%s', "
                          "target '%s')", o->src_lang ? o->src_lang : "", o->tgt_lang ? o->tgt_lang : "");
    if (o->max_repeats < 0 || (o->max_repeats && (o->repeat_min < 1 || o->repeat_max < o->repeat_min)))
        return tern_error(TERN_ERR_INVALID_ARG, "filter: bad repetition rule (max_repeats %d, unit %d..%d characters)",
                          o->max_repeats, o->repeat_min, o->repeat_max);
    if (o->max_words < 0 || o->max_tokens < 0 || !(o->max_ratio >= 0) || !(o->min_letters >= 0) ||
        o->min_letters > 1)
        return tern_error(TERN_ERR_INVALID_ARG,
                          "filter: bad options (max_words %lld, max_tokens %lld, max_ratio %g, min_letters %g)",
                          (long long)o->max_words, (long long)o->max_tokens, o->max_ratio, o->min_letters);
    filter_t *f = calloc(1, sizeof *f);
    if (!f) return tern_error(TERN_ERR_NOMEM, "filter: out of memory");
    f->o = *o;
    f->xxh = XXH3_createState();
    f->set_cap = 1 << 16;
    f->set = calloc(f->set_cap, sizeof *f->set);
    if (!f->xxh || !f->set) {
        filter_free(f);
        return tern_error(TERN_ERR_NOMEM, "filter: out of memory");
    }
    *out = f;
    return TERN_OK;
}

void filter_free(filter_t *f) {
    if (!f) return;
    for (int s = 0; s < 2; s++) free(f->side[s].cp);
    free(f->set);
    if (f->xxh) XXH3_freeState(f->xxh);
    free(f);
}

const int64_t *filter_counts(const filter_t *f) { return f->counts; }

size_t filter_hash_set_size(const filter_t *f, size_t *bytes) {
    if (bytes) *bytes = f->set_cap * sizeof *f->set;
    return f->set_used + (size_t)f->has_zero;
}

static int is_letter(uint32_t c) {
    if (c < 0x80) return (c | 32) >= 'a' && (c | 32) <= 'z';
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}

/* Decodes a valid side and counts its words, non-whitespace characters and letters. */
static tern_status_t decode_side(side_t *sd, const char *s, size_t len) {
    if (len + 1 > sd->cap) {
        size_t cap = sd->cap ? sd->cap : 256;
        while (cap < len + 1) cap *= 2;
        uint32_t *p = realloc(sd->cp, cap * sizeof *p);
        if (!p) return tern_error(TERN_ERR_NOMEM, "filter: out of memory (line of %zu bytes)", len);
        sd->cp = p;
        sd->cap = cap;
    }
    sd->n = text_decode(sd->cp, s, len);
    sd->words = sd->nonspace = sd->letters = 0;
    int in_word = 0;
    for (size_t i = 0; i < sd->n; i++) {
        uint32_t c = sd->cp[i];
        if (text_is_py_space(c)) {
            in_word = 0;
            continue;
        }
        if (!in_word) sd->words++;
        in_word = 1;
        sd->nonspace++;
        sd->letters += is_letter(c);
    }
    return TERN_OK;
}

/* Rule 8: is there a unit cp[i .. i+L) with L in [lo, hi] and cp[i] not whitespace that is
 * followed right away by n more copies of itself (n + 1 in a row)? For each L, a maximal run
 * [p, q) of positions k with cp[k] == cp[k - L] allows exactly the starts i in [p - L, q - (n+1)L]
 * (the copies cover [i + L, i + (n+1)L)); one of them must not be whitespace. O(length x units). */
static int has_repetition(const side_t *sd, int n, int lo, int hi) {
    const uint32_t *cp = sd->cp;
    int64_t len = (int64_t)sd->n;
    for (int64_t L = lo; L <= hi && L * (n + 1) <= len; L++) {
        int64_t k = L;
        while (k < len) {
            if (cp[k] != cp[k - L]) {
                k++;
                continue;
            }
            int64_t p = k;
            while (k < len && cp[k] == cp[k - L]) k++;
            for (int64_t i = p - L; i <= k - (n + 1) * L; i++)
                if (!text_is_py_space(cp[i])) return 1;
        }
    }
    return 0;
}

/* Equal word sequences (Python: a.split() == b.split()). */
static int same_words(const side_t *a, const side_t *b) {
    if (a->words != b->words || a->nonspace != b->nonspace) return 0;
    size_t i = 0, j = 0;
    for (;;) {
        while (i < a->n && text_is_py_space(a->cp[i])) i++;
        while (j < b->n && text_is_py_space(b->cp[j])) j++;
        if (i == a->n || j == b->n) return i == a->n && j == b->n;
        while (i < a->n && j < b->n && !text_is_py_space(a->cp[i]) && !text_is_py_space(b->cp[j])) {
            if (a->cp[i] != b->cp[j]) return 0;
            i++;
            j++;
        }
        int ea = i == a->n || text_is_py_space(a->cp[i]), eb = j == b->n || text_is_py_space(b->cp[j]);
        if (ea != eb) return 0; /* one word goes on where the other ended */
    }
}

static tern_status_t count_pieces(int64_t *n, const spm_t *sp, const char *s, size_t len) {
    char **pieces;
    int k;
    tern_status_t st = spm_encode(sp, s, len, &pieces, &k);
    if (st) return st;
    free(pieces);
    *n = k;
    return TERN_OK;
}

static int over_ratio(int64_t a, int64_t b, double r) {
    return (double)a / (double)b > r || (double)b / (double)a > r;
}

/* Inserts h; returns 1 if it was already there. */
static int set_insert(filter_t *f, uint64_t h, tern_status_t *st) {
    *st = TERN_OK;
    if (h == 0) {
        int had = f->has_zero;
        f->has_zero = 1;
        return had;
    }
    size_t mask = f->set_cap - 1, i = (size_t)(h ^ (h >> 29)) & mask;
    while (f->set[i]) {
        if (f->set[i] == h) return 1;
        i = (i + 1) & mask;
    }
    f->set[i] = h;
    if (++f->set_used * 2 > f->set_cap) { /* grow: rehash into twice the slots */
        size_t cap = f->set_cap * 2;
        uint64_t *ns = calloc(cap, sizeof *ns);
        if (!ns) {
            *st = tern_error(TERN_ERR_NOMEM, "filter: out of memory (duplicate set of %zu pairs)", f->set_used);
            return 0;
        }
        for (size_t k = 0; k < f->set_cap; k++) {
            uint64_t v = f->set[k];
            if (!v) continue;
            size_t j = (size_t)(v ^ (v >> 29)) & (cap - 1);
            while (ns[j]) j = (j + 1) & (cap - 1);
            ns[j] = v;
        }
        free(f->set);
        f->set = ns;
        f->set_cap = cap;
    }
    return 0;
}

tern_status_t filter_pair(filter_rule_t *rule, filter_t *f, const char *src, size_t src_len,
                          const char *tgt, size_t tgt_len) {
    const filter_options_t *o = &f->o;
    tern_status_t st;
    *rule = FILTER_KEEP;
    filter_rule_t r = FILTER_KEEP;
    const char *txt[2] = {src, tgt};
    size_t len[2] = {src_len, tgt_len};
    const spm_t *sp[2] = {o->src_spm, o->tgt_spm};
    int64_t tokens[2];

    if (!text_utf8_valid(src, src_len, NULL) || !text_utf8_valid(tgt, tgt_len, NULL)) {
        r = FILTER_INVALID_UTF8;
        goto done;
    }
    for (int s = 0; s < 2; s++)
        if ((st = decode_side(&f->side[s], txt[s], len[s]))) return st;
    const side_t *a = &f->side[0], *b = &f->side[1];
    if (a->words == 0 || b->words == 0) {
        r = FILTER_EMPTY;
        goto done;
    }
    if (o->max_words && (a->words > o->max_words || b->words > o->max_words)) {
        r = FILTER_TOO_MANY_WORDS;
        goto done;
    }
    int need_tokens = o->max_tokens || (o->max_ratio > 0 && sp[0] && sp[1]);
    for (int s = 0; s < 2; s++) {
        tokens[s] = f->side[s].words;
        if (need_tokens && sp[s] && (st = count_pieces(&tokens[s], sp[s], txt[s], len[s]))) return st;
    }
    if (o->max_tokens && (tokens[0] > o->max_tokens || tokens[1] > o->max_tokens)) {
        r = FILTER_TOO_MANY_TOKENS;
        goto done;
    }
    if (o->max_ratio > 0) {
        int64_t la = sp[0] && sp[1] ? tokens[0] : a->words, lb = sp[0] && sp[1] ? tokens[1] : b->words;
        if (la > 0 && lb > 0 && over_ratio(la, lb, o->max_ratio)) {
            r = FILTER_RATIO;
            goto done;
        }
    }
    if (o->min_letters > 0 && ((double)a->letters / (double)a->nonspace < o->min_letters ||
                               (double)b->letters / (double)b->nonspace < o->min_letters)) {
        r = FILTER_FEW_LETTERS;
        goto done;
    }
    if (o->copies && same_words(a, b)) {
        r = FILTER_COPY;
        goto done;
    }
    if (o->max_repeats && (has_repetition(a, o->max_repeats, o->repeat_min, o->repeat_max) ||
                           has_repetition(b, o->max_repeats, o->repeat_min, o->repeat_max))) {
        r = FILTER_REPETITION;
        goto done;
    }
    if (o->src_lang) {
        const char *want[2] = {o->src_lang, o->tgt_lang};
        for (int s = 0; s < 2 && r == FILTER_KEEP; s++) {
            langid_result_t li;
            if ((st = langid_detect(&li, txt[s], len[s], 0, 1))) return st;
            /* Only a reliable verdict removes: short or mixed lines CLD2 is unsure of stay. */
            if (li.reliable && li.n > 0 && strcmp(li.guess[0].code, want[s])) r = FILTER_LANGUAGE;
        }
        if (r != FILTER_KEEP) goto done;
    }
    if (o->duplicates) {
        XXH3_64bits_reset(f->xxh);
        XXH3_64bits_update(f->xxh, src, src_len);
        XXH3_64bits_update(f->xxh, "\n", 1);
        XXH3_64bits_update(f->xxh, tgt, tgt_len);
        int seen = set_insert(f, XXH3_64bits_digest(f->xxh), &st);
        if (st) return st;
        if (seen) r = FILTER_DUPLICATE;
    }
done:
    f->counts[r]++;
    *rule = r;
    return TERN_OK;
}
