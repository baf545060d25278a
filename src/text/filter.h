/* filter.h — parallel-corpus cleaning as the Scaling-NMT (Ott et al. 2018, fairseq's use of Moses'
 * clean-corpus-n.perl) and OpenNMT papers do it: one pair at a time, so a caller can stream a corpus
 * of any size; only the set of 64-bit hashes of kept pairs (for exact duplicates) grows.
 *
 * A pair is judged by the first rule it matches, in this order (filter_rule_t):
 *   1 invalid_utf8     either side is not valid UTF-8 (Python's strict decoder's definition)
 *   2 empty            either side has no character other than whitespace
 *   3 too_many_words   either side has more than max_words words
 *   4 too_many_tokens  either side has more than max_tokens tokens
 *   5 ratio            len(src) / len(tgt) > max_ratio or len(tgt) / len(src) > max_ratio
 *   6 few_letters      on either side, letters / non-whitespace characters < min_letters
 *   7 copy             the source equals the target, whitespace normalized
 *   8 repetition       (only with max_repeats) a side holds a unit of repeat_min..repeat_max
 *                      characters, its first not whitespace, more than max_repeats times in a row
 *                      ("Schel-Schel-Schel-", "nnnnnn" with max_repeats 2): the runaway loops of
 *                      machine translation, as OpusFilter's RepetitionFilter (Python:
 *                      re.search(r"(\S.{min-1,max-1}?)\1{N,}", side) with N = max_repeats)
 *   9 language         (only with src_lang/tgt_lang) a side is reliably in another language:
 *                      CLD2 (text/langid.h, plain text, no best effort) calls its best guess
 *                      reliable and that guess is not the side's expected language
 *  10 duplicate        the very same (source, target) byte strings were kept before
 * Words are Python's str.split() words: maximal runs of characters that are not Unicode whitespace
 * (str.isspace()). Tokens are SentencePiece pieces of the side's model when one is given, else
 * words; the ratio counts tokens when both sides have a model, else words (a side that
 * SentencePiece turns into no piece at all, e.g. only zero-width characters, is not judged by the
 * ratio). Letters are characters of Unicode category L* (Python's str.isalpha()). Duplicates are
 * found by XXH3-64 of "source\ntarget" (lines have no '\n', so the key is unambiguous): with n
 * distinct kept pairs, the probability that any two share a hash (one unique pair wrongly dropped)
 * is about n^2 / 2^65 — 2e-11 for 29,000 pairs, 3e-4 for 10^8.
 */
#ifndef TERN_FILTER_H
#define TERN_FILTER_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "text/spm.h"

typedef enum {
    FILTER_KEEP = 0,
    FILTER_INVALID_UTF8,
    FILTER_EMPTY,
    FILTER_TOO_MANY_WORDS,
    FILTER_TOO_MANY_TOKENS,
    FILTER_RATIO,
    FILTER_FEW_LETTERS,
    FILTER_COPY,
    FILTER_REPETITION,
    FILTER_LANGUAGE,
    FILTER_DUPLICATE,
    FILTER_NRULES
} filter_rule_t;

typedef struct {
    int64_t max_words;      /* remove when a side has more words; 0: off (default 250) */
    int64_t max_tokens;     /* remove when a side has more tokens; 0: off (default) */
    double max_ratio;       /* remove when the longer side is more than this times the shorter;
                               0: off (default 9, clean-corpus-n.perl's) */
    double min_letters;     /* remove when a side's fraction of letters among its non-whitespace
                               characters is below this; 0: off (default) */
    int copies;             /* 1: remove source == target (default 1) */
    int max_repeats;        /* remove when a unit appears more than this many times in a row on a
                               side; 0: off (default); else >= 1 */
    int repeat_min, repeat_max; /* the unit's length in characters (default 2..100) */
    int duplicates;         /* 1: remove exact duplicate pairs (default 1) */
    const spm_t *src_spm;   /* tokens of the source: SentencePiece pieces (borrowed; NULL: words) */
    const spm_t *tgt_spm;   /* tokens of the target (borrowed; NULL: words) */
    const char *src_lang;   /* the source's language as text/langid.h writes it ("en"); with
                               tgt_lang, turns rule 8 on (default NULL: off) */
    const char *tgt_lang;   /* the target's language ("de") */
} filter_options_t;

filter_options_t filter_default_options(void);

/* "invalid_utf8", "empty", ..., "repetition", "language", "duplicate"; "keep" for FILTER_KEEP. */
const char *filter_rule_name(filter_rule_t r);

typedef struct filter filter_t;

tern_status_t filter_create(filter_t **out, const filter_options_t *o);
void filter_free(filter_t *f);

/* Judges one pair (byte strings without their '\n'; they need not be NUL-terminated). *rule gets
 * FILTER_KEEP or the first rule that removes the pair; kept pairs enter the duplicate set. */
tern_status_t filter_pair(filter_rule_t *rule, filter_t *f, const char *src, size_t src_len,
                          const char *tgt, size_t tgt_len);

/* Pairs judged so far by each outcome: counts[FILTER_KEEP] kept, counts[r] removed by rule r. */
const int64_t *filter_counts(const filter_t *f);
/* Entries in the duplicate set (kept pairs) and the bytes it holds. */
size_t filter_hash_set_size(const filter_t *f, size_t *bytes);

#endif
