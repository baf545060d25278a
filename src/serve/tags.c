/* tags.c — inline tags projected onto a translation through the attention (see tags.h). */
#include "serve/tags.h"

#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static const char BOUNDARY[] = "\xE2\x96\x81"; /* U+2581 */

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

/* ---------------------------------------------------------------- words */

typedef struct {
    int n;
    size_t *start, *end; /* [n] byte spans in the text */
    int *of_piece;       /* [pieces] the word of each piece (pieces given), else NULL */
} words_t;

static void words_free(words_t *w) { free(w->start), free(w->end), free(w->of_piece); }

static int words_alloc(words_t *w, int cap, int pieces) {
    memset(w, 0, sizeof *w);
    w->start = malloc((size_t)(cap ? cap : 1) * sizeof(size_t));
    w->end = malloc((size_t)(cap ? cap : 1) * sizeof(size_t));
    w->of_piece = pieces ? malloc((size_t)pieces * sizeof(int)) : NULL;
    return w->start && w->end && (!pieces || w->of_piece) ? 0 : -1;
}

/* The text's white-space separated words. */
static int words_from_text(const char *text, words_t *w) {
    size_t len = strlen(text);
    if (words_alloc(w, (int)(len / 2 + 1), 0)) return -1;
    for (size_t p = 0; p < len;) {
        while (p < len && is_space(text[p])) p++;
        if (p == len) break;
        w->start[w->n] = p;
        while (p < len && !is_space(text[p])) p++;
        w->end[w->n++] = p;
    }
    return 0;
}

/* Matches a piece's surface at text[*at] (its boundary mark as white space, "<0xNN>" as a byte). */
static int match_piece(const char *piece, const char *text, size_t *at) {
    size_t p = *at;
    if (strlen(piece) == 6 && !strncmp(piece, "<0x", 3) && piece[5] == '>') {
        if ((unsigned char)text[p] != (unsigned)strtoul(piece + 3, NULL, 16) || !text[p]) return 0;
        *at = p + 1;
        return 1;
    }
    for (const char *s = piece; *s;) {
        if (!strncmp(s, BOUNDARY, 3)) {
            while (is_space(text[p])) p++;
            s += 3;
            continue;
        }
        if (text[p] != *s) return 0;
        p++, s++;
    }
    *at = p;
    return 1;
}

/* 1 for a piece of ASCII punctuation only ("." "," ")"): a word of its own here, so that a tag
 * that ends before a full stop does not take it in. */
static int punct_piece(const char *p) {
    if (!*p) return 0;
    for (; *p; p++)
        if (!ispunct((unsigned char)*p)) return 0;
    return 1;
}

/* Words of np pieces (one from a piece starting with U+2581 to the next, a piece of punctuation
 * alone) and their spans in text. */
static int words_from_pieces(const char *const *pieces, int np, const char *text, words_t *w) {
    if (words_alloc(w, np, np)) return -1;
    size_t len = strlen(text), at = 0;
    for (int t = 0; t < np;) {
        int e = t + 1;
        while (e < np && strncmp(pieces[e], BOUNDARY, 3) && !punct_piece(pieces[e]) && !punct_piece(pieces[e - 1])) e++;
        while (at < len && is_space(text[at])) at++;
        size_t start = at, p = at;
        int ok = 1;
        for (int k = t; k < e && ok; k++) ok = match_piece(pieces[k], text, &p);
        if (!ok) { /* not found as pieces: up to the next white space */
            p = at;
            while (p < len && !is_space(text[p])) p++;
        }
        if (p > len) p = len;
        at = p;
        for (int k = t; k < e; k++) w->of_piece[k] = w->n;
        w->start[w->n] = start, w->end[w->n++] = p;
        t = e;
    }
    return 0;
}

static int without_end(const char *const *pieces, int n) {
    return n > 0 && (!strcmp(pieces[n - 1], "</s>") || !strcmp(pieces[n - 1], "<|endoftext|>")) ? n - 1 : n;
}

/* ---------------------------------------------------------------- output */

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} buf_t;

static void put(buf_t *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p, b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void put_escaped(buf_t *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '&') put(b, "&amp;", 5);
        else if (s[i] == '<') put(b, "&lt;", 4);
        else if (s[i] == '>') put(b, "&gt;", 4);
        else put(b, s + i, 1);
    }
}

/* ---------------------------------------------------------------- the tree of pairs */

typedef struct {
    int open, close;       /* tag indices, -1: the invisible mate */
    size_t so, eo;         /* source bytes enclosed */
    int child, last, next; /* first child, last child, next sibling (-1: none) */
    int a, b;              /* target words [a, b) */
} node_t;

typedef struct {
    const char *src, *hyp;
    const seg_tag_t *tags;
    node_t *nodes;
    int n_nodes, root_first, root_last;
    words_t sw, tw;
    int *best_src; /* [tw.n] the source word each target word goes with (-1: none) */
    int *best_tgt; /* [sw.n] the target word of each source word (-1: none) */
    buf_t out;
} proj_t;

static void add_child(proj_t *P, int parent, int k) {
    int *first = parent < 0 ? &P->root_first : &P->nodes[parent].child;
    int *last = parent < 0 ? &P->root_last : &P->nodes[parent].last;
    if (*last >= 0) P->nodes[*last].next = k;
    else *first = k;
    *last = k;
}

/* 0, or -1 when the tags do not nest. */
static int build_tree(proj_t *P, int n, size_t src_len) {
    int *stack = malloc((size_t)(n ? n : 1) * sizeof(int)), sp = 0;
    if (!stack) return -2;
    P->root_first = P->root_last = -1;
    for (int i = 0; i < n; i++) {
        const seg_tag_t *t = &P->tags[i];
        if (!t->close) {
            int k = P->n_nodes++;
            P->nodes[k] = (node_t){i, -1, t->offset, src_len, -1, -1, -1, 0, 0};
            add_child(P, sp ? stack[sp - 1] : -1, k);
            stack[sp++] = k;
        } else if (t->mate >= 0) {
            if (!sp || P->nodes[stack[sp - 1]].open != t->mate) {
                free(stack);
                return -1;
            }
            node_t *x = &P->nodes[stack[--sp]];
            x->close = i;
            x->eo = t->offset;
        } else { /* its opening half before the sentence: everything before it at the top is inside */
            if (sp) {
                free(stack);
                return -1;
            }
            int k = P->n_nodes++;
            P->nodes[k] = (node_t){-1, i, 0, t->offset, P->root_first, P->root_last, -1, 0, 0};
            P->root_first = P->root_last = k;
        }
    }
    free(stack);
    return 0;
}

/* The target span of node k within [lo, hi). */
static void place(proj_t *P, int k, int lo, int hi) {
    node_t *x = &P->nodes[k];
    int a = INT_MAX, b = -1, anchor = P->tw.n;
    for (int i = 0; i < P->sw.n; i++) {
        if (P->sw.start[i] < x->eo && P->sw.end[i] > x->so) {
            int j = P->best_tgt[i];
            if (j >= 0 && j < a) a = j;
            if (j >= 0 && j > b) b = j;
        } else if (P->sw.start[i] >= x->so && anchor == P->tw.n && P->best_tgt[i] >= 0)
            anchor = P->best_tgt[i];
    }
    for (int j = 0; j < P->tw.n; j++) {
        int i = P->best_src[j];
        if (i >= 0 && P->sw.start[i] < x->eo && P->sw.end[i] > x->so) {
            if (j < a) a = j;
            if (j > b) b = j;
        }
    }
    if (b >= 0) {
        b++;
        a = a < lo ? lo : a > hi ? hi : a;
        b = b < a ? a : b > hi ? hi : b;
    } else a = b = anchor < lo ? lo : anchor > hi ? hi : anchor;
    x->a = a, x->b = b;
    int cur = a;
    for (int c = x->child; c >= 0; c = P->nodes[c].next) {
        place(P, c, cur, b);
        cur = P->nodes[c].b;
    }
}

static size_t clampz(size_t v, size_t lo, size_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static void emit(proj_t *P, int k, size_t *cur, size_t limit) {
    const node_t *x = &P->nodes[k];
    size_t L = strlen(P->hyp);
    size_t op = x->a < x->b || x->a < P->tw.n ? P->tw.start[x->a] : L;
    size_t cp = x->a < x->b ? P->tw.end[x->b - 1] : op;
    op = clampz(op, *cur, limit);
    put_escaped(&P->out, P->hyp + *cur, op - *cur);
    *cur = op;
    if (x->open >= 0) put(&P->out, P->tags[x->open].text, P->tags[x->open].len);
    cp = clampz(cp, *cur, limit);
    for (int c = x->child; c >= 0; c = P->nodes[c].next) emit(P, c, cur, cp);
    put_escaped(&P->out, P->hyp + *cur, cp - *cur);
    *cur = cp;
    if (x->close >= 0) put(&P->out, P->tags[x->close].text, P->tags[x->close].len);
}

/* Where a tag of tags that do not nest goes: an opening tag before the target word of the first
 * source word at or after it, a closing one after the target word of the last source word before
 * it (the translation's start or end when there is none). */
static size_t tag_position(const proj_t *P, const seg_tag_t *t, size_t L) {
    if (!t->close) {
        for (int i = 0; i < P->sw.n; i++)
            if (P->sw.start[i] >= t->offset && P->best_tgt[i] >= 0) return P->tw.start[P->best_tgt[i]];
        return L;
    }
    for (int i = P->sw.n - 1; i >= 0; i--)
        if (P->sw.end[i] <= t->offset && P->best_tgt[i] >= 0) return P->tw.end[P->best_tgt[i]];
    return 0;
}

/* best_src / best_tgt from the attention (or proportional). */
static int align(proj_t *P, const tag_alignment_t *al) {
    int nsw = P->sw.n, ntw = P->tw.n;
    P->best_src = malloc((size_t)(ntw ? ntw : 1) * sizeof(int));
    P->best_tgt = malloc((size_t)(nsw ? nsw : 1) * sizeof(int));
    if (!P->best_src || !P->best_tgt) return -1;
    if (al) {
        double *m = calloc((size_t)(ntw ? ntw : 1) * (size_t)(nsw ? nsw : 1), sizeof(double));
        if (!m) return -1;
        int np_t = without_end(al->tgt_pieces, al->n_tgt), np_s = without_end(al->src_pieces, al->n_src);
        for (int t = 0; t < np_t && t < al->rows; t++)
            for (int s = 0; s < np_s && s < al->cols; s++)
                m[(size_t)P->tw.of_piece[t] * nsw + P->sw.of_piece[s]] += al->attn[(size_t)t * al->cols + s];
        for (int j = 0; j < ntw; j++) {
            int best = nsw ? 0 : -1;
            for (int i = 1; i < nsw; i++)
                if (m[(size_t)j * nsw + i] > m[(size_t)j * nsw + best]) best = i;
            P->best_src[j] = best;
        }
        for (int i = 0; i < nsw; i++) {
            int best = ntw ? 0 : -1;
            for (int j = 1; j < ntw; j++)
                if (m[(size_t)j * nsw + i] > m[(size_t)best * nsw + i]) best = j;
            P->best_tgt[i] = best;
        }
        free(m);
    } else {
        for (int j = 0; j < ntw; j++) P->best_src[j] = nsw ? (int)((long)j * nsw / ntw) : -1;
        for (int i = 0; i < nsw; i++) P->best_tgt[i] = ntw ? (int)((long)i * ntw / nsw) : -1;
    }
    return 0;
}

char *tags_project(const char *src, const char *hyp, const seg_tag_t *tags, int n, const tag_alignment_t *al) {
    proj_t P;
    memset(&P, 0, sizeof P);
    P.src = src ? src : "", P.hyp = hyp ? hyp : "", P.tags = tags;
    /* an alignment whose pieces do not fit its attention is no alignment */
    if (al && (!al->attn || without_end(al->tgt_pieces, al->n_tgt) > al->rows ||
               without_end(al->src_pieces, al->n_src) > al->cols))
        al = NULL;
    int err = 0;
    P.nodes = malloc((size_t)(n ? n : 1) * sizeof *P.nodes);
    if (!P.nodes) return NULL;
    if (al) {
        err = words_from_pieces(al->src_pieces, without_end(al->src_pieces, al->n_src), P.src, &P.sw) ||
              words_from_pieces(al->tgt_pieces, without_end(al->tgt_pieces, al->n_tgt), P.hyp, &P.tw);
    } else
        err = words_from_text(P.src, &P.sw) || words_from_text(P.hyp, &P.tw);
    int tree = err ? -2 : build_tree(&P, n, strlen(P.src));
    if (tree == -2 || (tree != -2 && align(&P, al))) err = 1;
    if (!err && tree == -1) { /* they do not nest: each tag by its own position, in order */
        size_t c = 0, L = strlen(P.hyp);
        for (int i = 0; i < n; i++) {
            size_t pos = tag_position(&P, &tags[i], L);
            if (pos < c) pos = c;
            put_escaped(&P.out, P.hyp + c, pos - c);
            put(&P.out, tags[i].text, tags[i].len);
            c = pos;
        }
        put_escaped(&P.out, P.hyp + c, L - c);
    } else if (!err) {
        int cur = 0;
        for (int k = P.root_first; k >= 0; k = P.nodes[k].next) {
            place(&P, k, cur, P.tw.n);
            cur = P.nodes[k].b;
        }
        size_t c = 0, L = strlen(P.hyp);
        for (int k = P.root_first; k >= 0; k = P.nodes[k].next) emit(&P, k, &c, L);
        put_escaped(&P.out, P.hyp + c, L - c);
    }
    if (!err && !P.out.s) put(&P.out, "", 0);
    words_free(&P.sw), words_free(&P.tw);
    free(P.nodes), free(P.best_src), free(P.best_tgt);
    if (err || P.out.oom) {
        free(P.out.s);
        return NULL;
    }
    return P.out.s;
}
