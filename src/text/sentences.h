/* sentences.h — sentence segmentation with ICU's sentence break iterator (libicu).
 *
 * A text is cut where ICU's rules for the language put a sentence boundary (UAX #29 with the
 * locale's tailoring and its standard abbreviation suppressions, "Dr.", "e.g.": ICU's "ss=standard"
 * keyword). Each sentence is given as a byte range of the text without the white space around it,
 * so that what lies between two ranges (spaces, line breaks) can be kept exactly as it was. */
#ifndef TERN_TEXT_SENTENCES_H
#define TERN_TEXT_SENTENCES_H

#include "base/base.h"

/* Sentences of text[0..len) (UTF-8; invalid bytes never crash, they stay inside a sentence) for
 * language lang (ICU locale or BCP 47 tag, "en", "de", "zh-Hans"; NULL or "": ICU's root rules).
 * *spans (malloc'd, 2 * *n entries, NULL when *n is 0) gets each sentence's [begin, end) byte
 * offsets, in order, not overlapping; white space alone makes no sentence. */
tern_status_t sentences_split(const char *text, size_t len, const char *lang, size_t **spans, int *n);

#endif
