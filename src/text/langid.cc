// langid.cc — the C interface to CLD2's detector (langid.h). CLD2's call never throws by design,
// but a std::vector grows inside it: bad_alloc is caught here, nothing crosses the C boundary.
#include <climits>
#include <cstdio> // before CLD2's header, which uses FILE without including it
#include <cstdlib>
#include <utf8proc.h>

#include <cld2/public/compact_lang_det.h>
#include <cld2/public/encodings.h>

#include <cstring>
#include <new>

extern "C" {
#include "text/langid.h"
}

// CLD2's codes that LibreTranslate (argos-translate) writes differently.
static const char *lt_code(const char *cld) {
    static const char *const map[][2] = {{"iw", "he"}, {"jw", "jv"}, {"in", "id"},
                                         {"no", "nb"}, {"zh-Hant", "zt"}};
    for (const auto &m : map)
        if (!strcmp(cld, m[0])) return m[1];
    return cld;
}

// CLD2 takes "interchange-valid" UTF-8 only: no C0 control but tab, LF and CR, no C1 control, no
// noncharacter. Those code points carry no language; each is replaced by spaces of its length in
// a copy (buf), so a text that is valid UTF-8 is always detected rather than refused. Returns the
// text to detect (text itself when it had none), NULL for invalid UTF-8 (*bad: its byte offset).
static const char *interchange_copy(const char *text, size_t len, char **buf, size_t *bad) {
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)text;
    size_t i = 0;
    *buf = nullptr;
    while (i < len) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p + i, (utf8proc_ssize_t)(len - i), &cp);
        if (k < 0) {
            free(*buf);
            *buf = nullptr;
            *bad = i;
            return nullptr;
        }
        bool drop = (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') || (cp >= 0x7f && cp < 0xa0) ||
                    (cp >= 0xfdd0 && cp <= 0xfdef) || (cp & 0xfffe) == 0xfffe;
        if (drop) {
            if (!*buf) {
                if (!(*buf = (char *)malloc(len ? len : 1))) throw std::bad_alloc();
                memcpy(*buf, text, len);
            }
            memset(*buf + i, ' ', (size_t)k);
        }
        i += (size_t)k;
    }
    return *buf ? *buf : text;
}

extern "C" tern_status_t langid_detect(langid_result_t *out, const char *text, size_t len, int best_effort,
                                       int plain_text) {
    memset(out, 0, sizeof *out);
    if (len > (size_t)INT_MAX) return tern_error(TERN_ERR_INVALID_ARG, "langid: text of %zu bytes is too long", len);
    CLD2::Language lang3[3];
    int percent3[3];
    double score3[3];
    int text_bytes = 0, valid = 0;
    bool reliable = false;
    CLD2::CLDHints hints = {nullptr, nullptr, CLD2::UNKNOWN_ENCODING, CLD2::UNKNOWN_LANGUAGE};
    char *buf = nullptr;
    try {
        size_t bad = 0;
        const char *t = interchange_copy(text ? text : "", len, &buf, &bad);
        if (!t) return tern_error(TERN_ERR_INPUT, "langid: text is not valid UTF-8 (at byte %zu)", bad);
        CLD2::ExtDetectLanguageSummaryCheckUTF8(t, (int)len, plain_text != 0, &hints,
                                                best_effort ? CLD2::kCLDFlagBestEffort : 0, lang3, percent3,
                                                score3, nullptr, &text_bytes, &reliable, &valid);
    } catch (const std::bad_alloc &) {
        free(buf);
        return tern_error(TERN_ERR_NOMEM, "langid: out of memory");
    } catch (...) {
        free(buf);
        return tern_error(TERN_ERR_INTERNAL, "langid: CLD2 failed");
    }
    free(buf);
    if ((size_t)valid < len) /* a code point CLD2 refuses that interchange_copy() kept: a bug here */
        return tern_error(TERN_ERR_INTERNAL, "langid: CLD2 refused the text at byte %d", valid);
    out->reliable = reliable;
    out->text_bytes = text_bytes;
    for (int i = 0; i < 3; i++) {
        if (lang3[i] == CLD2::UNKNOWN_LANGUAGE || lang3[i] == CLD2::TG_UNKNOWN_LANGUAGE) continue;
        langid_guess_t *g = &out->guess[out->n++];
        snprintf(g->code, sizeof g->code, "%s", lt_code(CLD2::LanguageCode(lang3[i])));
        g->percent = percent3[i];
        g->score = score3[i];
    }
    return TERN_OK;
}

extern "C" const char *langid_version(void) { return CLD2::DetectLanguageVersion(); }
