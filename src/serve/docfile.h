/* docfile.h — documents translated whole (the server's POST /translate_file, `tern translate
 * --file-format`): a file cut into the texts to translate ("items"), and rebuilt around their
 * translations.
 *
 *   .txt   UTF-8 text (a byte order mark is kept): one item, translated as /translate's format
 *          "text" (line by line, each line's sentences apart).
 *   .html  UTF-8 HTML: one item, translated as format "html".
 *   .docx  a zip archive: the paragraphs (w:p) of word/document.xml, each one item in format
 *          "html": a run (w:r) whose properties (w:rPr) differ from the paragraph's main ones (the
 *          properties of most of its characters) becomes an inline tag, <b id="rK"> for a bold
 *          run, <i ...> italic, <u ...> underlined, <span ...> otherwise, so its words are placed
 *          by the attention alignment as /translate places HTML inline tags (tags.h); w:tab and
 *          w:br/w:cr become <tab/> and <br/> (which end a text run). After translation the
 *          paragraph's runs are rebuilt: text outside a tag with the main properties, text inside
 *          tag K with run K's. A paragraph holding anything else inside its runs or between them
 *          (a hyperlink, a field, a drawing, tracked changes, a content control...) is copied
 *          unchanged, untranslated; bookmarks, proofing marks and the paragraph's properties stay,
 *          the new runs going where the first run was.
 *   .odt   a zip archive: the paragraphs and headings (text:p, text:h) of content.xml, each one
 *          item as for .docx: text:span (its text:style-name) is the inline markup (<span
 *          id="sK">), text:tab, text:line-break <tab/> and <br/>, text:s a space. Soft page breaks
 *          are dropped, bookmarks stay (in front of the text); any other element makes the
 *          paragraph stay as it was.
 * Every other member of an archive is copied unchanged (same bytes, same compression method:
 * ODF's "mimetype" stays first and stored). Only word/document.xml and content.xml are
 * translated (not headers, footers, footnotes or styles).
 *
 * Limits and errors: doc_open() answers 400 (the input is wrong) or 413 (it is too large) with a
 * message naming what: not UTF-8 at line N, a NUL byte at line N, not a zip archive, a missing
 * member, malformed XML at line N of a member, more entries than max_entries, more uncompressed
 * bytes than max_uncompressed (counted while inflating: a zip bomb stops at the limit). */
#ifndef TERN_SERVE_DOCFILE_H
#define TERN_SERVE_DOCFILE_H

#include <stddef.h>

typedef enum { DOC_TXT = 0, DOC_HTML, DOC_DOCX, DOC_ODT } doc_kind_t;

typedef struct {
    size_t max_uncompressed; /* bytes of all of an archive's members once inflated */
    int max_entries;         /* members of an archive */
} doc_limits_t;

doc_limits_t doc_default_limits(void); /* 100 MB, 1000 entries */

/* The kind of a file by its name's extension (.txt, .html/.htm, .docx, .odt; any case); -1. */
int doc_kind_of(const char *filename);
/* The formats doc_kind_of() takes, as LibreTranslate lists them: ".txt", ".html", ".docx", ".odt". */
extern const char *const doc_formats[4];
const char *doc_content_type(doc_kind_t kind);

typedef struct doc doc_t;

/* Reads a document (data: len bytes, copied); 0, or 400/413 with err set (500: out of memory). */
int doc_open(doc_t **out, doc_kind_t kind, const void *data, size_t len, const doc_limits_t *lim, char *err,
             size_t en);
int doc_num_items(const doc_t *d);
const char *doc_item(const doc_t *d, int i);
/* 1: the items are HTML (format "html"), 0: plain text. */
int doc_items_html(const doc_t *d);
/* Characters (code points) of the document's text: of the whole file for .txt and .html, of the
 * paragraphs' text (without markup) for .docx and .odt. */
long doc_chars(const doc_t *d);
/* Item i's translation (copied); 0, or -1 when out of memory. An item without one stays as it was. */
int doc_set(doc_t *d, int i, const char *translation);
/* The translated document (malloc'd, *len bytes); 0, or -1 with err set. */
int doc_write(doc_t *d, char **out, size_t *len, char *err, size_t en);
void doc_free(doc_t *d);

#endif
