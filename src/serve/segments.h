/* segments.h — cutting the texts of a /translate request into the segments the engine translates,
 * and putting the translations back in their place.
 *
 * Plain text: each line of an item is a segment (an empty line stays empty, "\r\n" ends a line
 * too); the translation joins the lines' translations with "\n".
 * HTML (LibreTranslate's format "html"): the text between tags is translated, the tags (and
 * comments, and the content of <script> and <style>) are kept as they are. Inline tags (b, i,
 * em, a, span, ...: INLINE_TAGS in segments.c) do not end a text run: they are taken out of its
 * text, each sentence keeps the tags that fall in it (segments_t.tags, offsets into its text) and
 * gets them back around its translation's words by tags_project() (tags.h); a tag between two
 * sentences goes with the next one (an opening tag) or the previous one (a closing tag). A text run's
 * character references are decoded and its white space collapsed before translation, its
 * leading and trailing white space kept, and its translation escaped (&, <, >) in place.
 * Sentence splitting (split_lang given, LibreTranslate's behaviour): a line of text, or a text run
 * of HTML, is cut further into its sentences (ICU's sentence break iterator for the source
 * language, tern_split_sentences()), each one segment; the white space between them (a collapsed
 * single space in HTML) is kept as it was. */
#ifndef TERN_SERVE_SEGMENTS_H
#define TERN_SERVE_SEGMENTS_H

#include <stddef.h>

#include "serve/tags.h"

typedef struct {
    int seg;         /* segment index, or -1: literal text */
    int escape;      /* 1: escape the translation for HTML */
    const char *lit; /* literal: points into the item (not owned) */
    size_t len;
} seg_part_t;

typedef struct {
    char **seg; /* [n] segment texts (owned) */
    int *ntok;  /* [n] source tokens of each (filled by the caller) */
    int n, cap;
    seg_part_t *parts;
    int n_parts, parts_cap;
    int *item_first, *item_count; /* per item: its parts */
    seg_tag_t **tags; /* [n] HTML: the inline tags of each segment (owned; NULL: none), in order */
    int *n_tags;      /* [n] */
} segments_t;

/* Cuts items (kept alive by the caller while g is used) into segments; split_lang: the source
 * language whose sentences become segments (NULL: no sentence splitting). 0, or -1: out of
 * memory. */
int segments_build(segments_t *g, const char *const *items, int n_items, int html, const char *split_lang);
void segments_free(segments_t *g);

/* The hypothesis h of segment seg (NULL: none, taken as empty). */
typedef const char *(*segment_text_fn)(void *ctx, int seg, int h);
/* Item i with every segment replaced by its hypothesis h; malloc'd (NULL: out of memory). A
 * segment with inline tags gets them by tags_project() without alignment. */
char *segments_join(const segments_t *g, int item, int h, segment_text_fn text, void *ctx);
/* A segment's hypothesis h with its tags placed (tags_project(); malloc'd, escaped; NULL: out of
 * memory). */
typedef char *(*segment_render_fn)(void *ctx, int seg, int h, const seg_tag_t *tags, int n_tags);
/* segments_join() with render (NULL: tags_project() without alignment) for the segments with tags. */
char *segments_join_tags(const segments_t *g, int item, int h, segment_text_fn text, segment_render_fn render,
                         void *ctx);

/* Translates n texts: outs[i] (malloc'd, then the caller's) for texts[i]; 0, or -1 on failure
 * (outs already set are freed by the caller). */
typedef int (*segments_translate_fn)(void *ctx, const char *const *texts, int n, char **outs);
/* A whole HTML document translated (for /translate_file): its text runs (their sentences with
 * split_lang, NULL: whole runs) given to fn in one call, and the document rebuilt around their
 * translations, escaped, with tags, comments, <script> and <style> as they were (inline tags
 * placed without an alignment: fn gives none). malloc'd; NULL on failure (out of memory, or fn's
 * -1). */
char *segments_translate_html(const char *doc, const char *split_lang, segments_translate_fn fn, void *ctx);

#endif
