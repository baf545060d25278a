/* tags.h — HTML inline tags carried over to a sentence's translation by the attention alignment
 * (as Bergamot does), for format "html" (segments.h).
 *
 * A sentence that held inline tags (<b>, <a href=...>, ...) is translated without them; its tags
 * (their original text, attributes untouched) are then put around the target words aligned to the
 * source words they enclosed:
 *   - words: source and target pieces grouped from one starting with U+2581 to the next, a piece of
 *     ASCII punctuation alone being a word of its own (the end token is no word); their byte
 *     spans in the sentence and its translation found as in quality.h.
 *   - alignment: the attention summed over a target word's rows and a source word's columns;
 *     each target word goes with its most attended source word, each source word with the target
 *     word that attends to it most.
 *   - a tag pair enclosing source bytes [so, eo) covers the source words overlapping them; its
 *     target span is the smallest run of target words holding every target word aligned to one of
 *     them and every source word's best target word. An empty element (or one whose words align
 *     to nothing) stays empty, before the target word of the next source word.
 *   - nesting is kept: the pairs form the source's tree; a child's span is clipped to its parent's
 *     and to after its previous sibling's (so tags never cross and keep their order; a clipped
 *     span may become empty).
 *   - a tag whose mate lies in another sentence (or is missing: broken HTML) acts as a pair with
 *     an invisible mate at the sentence's start (a closing tag) or end (an opening tag). Tags that
 *     do not nest even so (</i> closing across <b>) are placed one by one: an opening tag before
 *     the target word of the first source word after it, a closing one after the target word of
 *     the last source word before it (never before the previous tag).
 * Every tag is written exactly once, in the source's order; the translation is escaped (&, <, >).
 * Without an alignment (a hypothesis other than the best, a route through English) target word j
 * goes with source word j x (source words) / (target words). */
#ifndef TERN_SERVE_TAGS_H
#define TERN_SERVE_TAGS_H

#include <stddef.h>

typedef struct {
    const char *text; /* the tag as written (not owned) */
    size_t len;
    size_t offset;    /* its position in the sentence's text (bytes) */
    int close;        /* 1: a closing tag */
    int mate;         /* the index of its other half in the sentence's tags, or -1 */
} seg_tag_t;

typedef struct {
    const char *const *src_pieces; /* the source's pieces (an end token "</s>" last is skipped) */
    int n_src;
    const char *const *tgt_pieces; /* the best hypothesis's pieces (an end token last is skipped) */
    int n_tgt;
    const float *attn;             /* rows x cols: row t the attention of target piece t over the
                                      source pieces (cols may count the end token) */
    int rows, cols;
} tag_alignment_t;

/* The translation hyp of sentence src (its text) with tags[0..n) placed (al NULL: the
 * proportional alignment); malloc'd, NULL when out of memory. */
char *tags_project(const char *src, const char *hyp, const seg_tag_t *tags, int n, const tag_alignment_t *al);

#endif
