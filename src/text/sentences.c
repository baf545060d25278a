/* sentences.c — sentence segmentation through ICU's break iterator (see sentences.h).
 *
 * ICU reads the UTF-8 text in place through a UText, so the boundaries it returns are byte
 * offsets of the caller's text: no conversion to UTF-16 and back. A boundary falls after the
 * white space that follows a sentence (UAX #29 keeps "Sp" and paragraph separators with the
 * sentence before); the spans here leave that white space out, and the caller keeps it as the
 * separator. */
#include "text/sentences.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unicode/ubrk.h>
#include <unicode/utext.h>
#include <utf8proc.h>

/* 1 when the code point is white space (Unicode White_Space: separators Z*, and the controls
 * tab, line feed, vertical tab, form feed, carriage return, next line). */
static int is_space(utf8proc_int32_t c) {
    if (c == '\t' || c == '\n' || c == 0x0B || c == '\f' || c == '\r' || c == 0x85) return 1;
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

/* The range [*b, *e) of text without its leading and trailing white space (*b == *e: none left). An
 * invalid byte counts as one non-space character. */
static void trim(const char *text, size_t *b, size_t *e) {
    size_t first = *e, last = *e;
    for (size_t i = *b; i < *e;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text + i, (utf8proc_ssize_t)(*e - i), &c);
        if (k <= 0) k = 1, c = -1;
        if (c < 0 || !is_space(c)) {
            if (first == *e) first = i;
            last = i + (size_t)k;
        }
        i += (size_t)k;
    }
    if (first == *e) last = first;
    *b = first, *e = last;
}

/* The ICU locale for lang with the standard abbreviation suppressions; -1 when lang is not a
 * plausible language tag (letters, digits, '-', '_' only, at most 32 bytes). */
static int icu_locale(char *out, size_t cap, const char *lang) {
    if (!lang) lang = "";
    size_t n = strlen(lang);
    if (n > 32) return -1;
    for (size_t i = 0; i < n; i++) {
        char c = lang[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return -1;
    }
    snprintf(out, cap, "%s@ss=standard", lang);
    return 0;
}

tern_status_t sentences_split(const char *text, size_t len, const char *lang, size_t **spans, int *n) {
    *spans = NULL, *n = 0;
    if (!text && len) return tern_error(TERN_ERR_INVALID_ARG, "sentence split: NULL text");
    char loc[64];
    if (icu_locale(loc, sizeof loc, lang))
        return tern_error(TERN_ERR_INVALID_ARG, "sentence split: '%.40s' is not a language tag", lang);
    if (len == 0) return TERN_OK;
    if (len > INT32_MAX) /* ICU's break iterators give 32-bit offsets */
        return tern_error(TERN_ERR_INPUT, "sentence split: text of %zu bytes, over 2 GiB", len);
    UErrorCode e = U_ZERO_ERROR;
    UText *ut = utext_openUTF8(NULL, text, (int64_t)len, &e);
    UBreakIterator *bi = U_SUCCESS(e) ? ubrk_open(UBRK_SENTENCE, loc, NULL, 0, &e) : NULL;
    if (U_SUCCESS(e)) ubrk_setUText(bi, ut, &e);
    if (U_FAILURE(e)) {
        if (bi) ubrk_close(bi);
        if (ut) utext_close(ut);
        return tern_error(TERN_ERR_INTERNAL, "sentence split: ICU break iterator for '%s': %s", loc, u_errorName(e));
    }
    size_t *out = NULL;
    int cnt = 0, cap = 0;
    tern_status_t st = TERN_OK;
    for (int32_t b = ubrk_first(bi), nb; (nb = ubrk_next(bi)) != UBRK_DONE; b = nb) {
        size_t s = (size_t)b, t = (size_t)nb;
        if (t > len) t = len; /* native offsets are the text's bytes: never past it */
        trim(text, &s, &t);
        if (s == t) continue;
        if (cnt == cap) {
            cap = cap ? 2 * cap : 8;
            size_t *o2 = realloc(out, (size_t)cap * 2 * sizeof *o2);
            if (!o2) {
                st = tern_error(TERN_ERR_NOMEM, "sentence split: out of memory");
                break;
            }
            out = o2;
        }
        out[2 * cnt] = s, out[2 * cnt + 1] = t;
        cnt++;
    }
    ubrk_close(bi);
    utext_close(ut);
    if (st) {
        free(out);
        return st;
    }
    *spans = out, *n = cnt;
    return TERN_OK;
}

tern_status_t tern_split_sentences(const char *text, size_t len, const char *lang, size_t **spans, int *count) {
    if (!spans || !count) return tern_error(TERN_ERR_INVALID_ARG, "tern_split_sentences: NULL output");
    return sentences_split(text, len, lang, spans, count);
}

void tern_sentences_free(size_t *spans) { free(spans); }
