/* langid.h — language identification with CLD2 (Google's Compact Language Detector 2, Debian's
 * libcld2, the "full" table of about 160 languages), the detector LibreTranslate itself calls
 * (through pycld2); langid.cc is its C++ shim, like spm.cc for SentencePiece.
 *
 * A detection gives up to three languages, ranked, each with the percentage (0..100) of the
 * text's letters CLD2 attributes to it: LibreTranslate's /detect reports that percentage as its
 * "confidence". CLD2 also says whether its best guess is reliable (clearly ahead of the second,
 * for text long enough); without best_effort an unreliable text gives no language at all.
 *
 * Codes are ISO 639-1 where one exists, as LibreTranslate writes them: CLD2's old codes are
 * mapped (iw -> he, jw -> jv, in -> id, no -> nb, zh-Hant -> zt, LibreTranslate's Traditional
 * Chinese); others are CLD2's own (e.g. "ckb", "haw"). */
#ifndef TERN_LANGID_H
#define TERN_LANGID_H

#include <stddef.h>

#include "base/base.h"

#define LANGID_MAX 3

typedef struct {
    char code[16];   /* "en", "de", "zt", ... */
    int percent;     /* 0..100: the share of the text's letters in this language */
    double score;    /* CLD2's normalized score (near 1.0 for ordinary text of the language) */
} langid_guess_t;

typedef struct {
    langid_guess_t guess[LANGID_MAX]; /* ranked, best first; unknown languages left out */
    int n;            /* 0..3 guesses */
    int reliable;     /* CLD2's is_reliable for the best guess */
    int text_bytes;   /* letters-only bytes CLD2 looked at */
} langid_result_t;

/* Detects the language of text (len bytes, need not be NUL-terminated). best_effort: when CLD2
 * finds no reliable answer, its best guess anyway (kCLDFlagBestEffort), as LibreTranslate's second
 * try does. plain_text 0: text may hold HTML (tags skipped, entities expanded), as pycld2's
 * default and so LibreTranslate. Control characters and noncharacters (which CLD2 refuses, and
 * pycld2 with it) are read as spaces. Errors: text not valid UTF-8 (TERN_ERR_INPUT, naming the
 * byte offset), longer than INT_MAX bytes. Thread-safe (CLD2 keeps no state). */
tern_status_t langid_detect(langid_result_t *out, const char *text, size_t len, int best_effort, int plain_text);

/* CLD2's version string ("code_version - data_build_date"). */
const char *langid_version(void);

#endif
