/* test_filter.c — unit tests of the corpus filter library: each rule, their order, the duplicate
 * set growing past its first allocation, options checking. The CLI and the comparison with a Python
 * re-implementation on Multi30k are tests/test_filter.py's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "text/filter.h"

static filter_rule_t judge(filter_t *f, const char *s, const char *t) {
    filter_rule_t r = FILTER_NRULES;
    CHECK(filter_pair(&r, f, s, strlen(s), t, strlen(t)) == TERN_OK);
    return r;
}

static void test_rules_and_order(void) {
    filter_options_t o = filter_default_options();
    o.max_words = 5;
    o.max_tokens = 4;
    o.max_ratio = 2;
    o.min_letters = 0.5;
    filter_t *f;
    CHECK(filter_create(&f, &o) == TERN_OK);
    CHECK_EQ_INT(judge(f, "a b c", "x y z"), FILTER_KEEP);
    CHECK_EQ_INT(judge(f, "a \xff", ""), FILTER_INVALID_UTF8);          /* before empty */
    CHECK_EQ_INT(judge(f, " \t\xe3\x80\x80", "x"), FILTER_EMPTY);       /* U+3000 only */
    CHECK_EQ_INT(judge(f, "a b c d e f", "x"), FILTER_TOO_MANY_WORDS);  /* before ratio */
    CHECK_EQ_INT(judge(f, "a b c d e", "x y z v w"), FILTER_TOO_MANY_TOKENS); /* tokens = words */
    CHECK_EQ_INT(judge(f, "a b c", "x"), FILTER_RATIO);                 /* 3 > 2 * 1 */
    CHECK_EQ_INT(judge(f, "a b", "x"), FILTER_KEEP);                    /* 2 is not > 2 */
    CHECK_EQ_INT(judge(f, "12 34 a", "x y"), FILTER_FEW_LETTERS);       /* 1 of 5 */
    CHECK_EQ_INT(judge(f, "same  words", "same\twords"), FILTER_COPY);
    CHECK_EQ_INT(judge(f, "same words", "same wordsx"), FILTER_KEEP);
    CHECK_EQ_INT(judge(f, "same words", "same wordsx"), FILTER_DUPLICATE);
    CHECK_EQ_INT(judge(f, "a b c", "x y z"), FILTER_DUPLICATE);
    CHECK_EQ_INT(judge(f, "a b c", "x y  z"), FILTER_KEEP);             /* bytes differ */
    const int64_t *c = filter_counts(f);
    CHECK_EQ_INT(c[FILTER_KEEP], 4);
    for (int r = 1; r < FILTER_NRULES; r++)
        CHECK_MSG(c[r] == (r == FILTER_DUPLICATE ? 2 : r == FILTER_LANGUAGE || r == FILTER_REPETITION ? 0 : 1), "%s: %lld",
                  filter_rule_name((filter_rule_t)r),
                  (long long)c[r]);
    /* a NUL inside a line is a character like any other */
    filter_rule_t r;
    CHECK(filter_pair(&r, f, "a\0b", 3, "a\0c", 3) == TERN_OK && r == FILTER_KEEP);
    filter_free(f);
    CHECK(strcmp(filter_rule_name(FILTER_FEW_LETTERS), "few_letters") == 0);
}

/* Rule 8 (--max-repeats): a unit of repeat_min..repeat_max code points, its first not
 * whitespace, more than max_repeats times in a row; after copy, before language and duplicate.
 * The regex it equals (OpusFilter's) is checked on random lines in tests/test_filter.py. */
static void test_repetition_rule(void) {
    filter_options_t o = filter_default_options();
    o.max_repeats = 2;
    filter_t *f;
    CHECK(filter_create(&f, &o) == TERN_OK);
    CHECK_EQ_INT(judge(f, "A Boston Terrier", "Ein Boston-Sch-Schel-Schel-Schel-"), FILTER_REPETITION);
    CHECK_EQ_INT(judge(f, "A Boston Terrier", "Ein Boston Terrier"), FILTER_KEEP);
    CHECK_EQ_INT(judge(f, "ababab x", "y"), FILTER_REPETITION);          /* either side */
    CHECK_EQ_INT(judge(f, "abab x", "y"), FILTER_KEEP);                  /* twice is allowed */
    CHECK_EQ_INT(judge(f, "Schifffahrt", "shipping"), FILTER_KEEP);     /* units of 1 don't count */
    CHECK_EQ_INT(judge(f, "x Ã©Ã©Ã©Ã©Ã©Ã©", "y"), FILTER_REPETITION); /* code points */
    CHECK_EQ_INT(judge(f, "a      b", "y"), FILTER_KEEP);               /* a unit starts with a non-space */
    CHECK_EQ_INT(judge(f, "hi hi hi hi", "hi hi hi hi"), FILTER_COPY);    /* copy first */
    CHECK_EQ_INT(judge(f, "ababab x", "y"), FILTER_REPETITION);          /* never entered the duplicate set */
    CHECK_EQ_INT(filter_counts(f)[FILTER_REPETITION], 4);
    filter_free(f);
    o.max_repeats = 1; /* a unit twice in a row goes */
    o.repeat_min = 3;
    o.repeat_max = 4;
    CHECK(filter_create(&f, &o) == TERN_OK);
    CHECK_EQ_INT(judge(f, "abab x", "y"), FILTER_KEEP);                  /* unit "ab": shorter than 3 */
    CHECK_EQ_INT(judge(f, "abcabc x", "y"), FILTER_REPETITION);
    CHECK_EQ_INT(judge(f, "abcdeabcde x", "y"), FILTER_KEEP);            /* unit of 5: longer than 4 */
    filter_free(f);
    o.repeat_min = 5; /* min > max */
    CHECK(filter_create(&f, &o) == TERN_ERR_INVALID_ARG && f == NULL);
    o.repeat_min = 0;
    CHECK(filter_create(&f, &o) == TERN_ERR_INVALID_ARG && f == NULL);
    o.repeat_min = 2;
    o.max_repeats = -1;
    CHECK(filter_create(&f, &o) == TERN_ERR_INVALID_ARG && f == NULL);
}

/* Rule 9 (--langid): what CLD2 reliably calls another language goes, what it is unsure of stays;
 * after copy, before duplicate (a removed pair never enters the duplicate set). Which lines CLD2
 * calls reliable is checked against pycld2 in tests/test_filter.py. */
static void test_language_rule(void) {
    const char *en = "A man in an orange hat is staring at something in the street.",
               *de = "Ein Mann mit einem orangefarbenen Hut starrt etwas auf der Strasse an.",
               *fr = "Un homme avec un chapeau orange regarde quelque chose dans la rue.";
    filter_options_t o = filter_default_options();
    o.src_lang = "en";
    o.tgt_lang = "de";
    filter_t *f;
    CHECK(filter_create(&f, &o) == TERN_OK);
    CHECK_EQ_INT(judge(f, en, de), FILTER_KEEP);
    CHECK_EQ_INT(judge(f, fr, de), FILTER_LANGUAGE);    /* source in French */
    CHECK_EQ_INT(judge(f, en, en), FILTER_COPY);        /* copy first */
    CHECK_EQ_INT(judge(f, de, en), FILTER_LANGUAGE);    /* the sides swapped */
    CHECK_EQ_INT(judge(f, fr, de), FILTER_LANGUAGE);    /* again: not a duplicate, never kept */
    CHECK_EQ_INT(judge(f, "Ok.", "Ja."), FILTER_KEEP);  /* too short for a reliable verdict */
    CHECK_EQ_INT(judge(f, en, de), FILTER_DUPLICATE);
    CHECK_EQ_INT(filter_counts(f)[FILTER_LANGUAGE], 3);
    filter_free(f);
    o.tgt_lang = NULL; /* one language alone is a mistake */
    CHECK(filter_create(&f, &o) == TERN_ERR_INVALID_ARG && f == NULL);
    o.tgt_lang = "";
    CHECK(filter_create(&f, &o) == TERN_ERR_INVALID_ARG && f == NULL);
}

static void test_hash_set_growth(void) {
    filter_options_t o = filter_default_options();
    filter_t *f;
    CHECK(filter_create(&f, &o) == TERN_OK);
    char s[64], t[64];
    int kept = 1, dup = 1;
    for (int i = 0; i < 100000; i++) {
        snprintf(s, sizeof s, "source %d", i);
        snprintf(t, sizeof t, "target %d", i);
        kept &= judge(f, s, t) == FILTER_KEEP;
    }
    for (int i = 0; i < 100000; i += 3) {
        snprintf(s, sizeof s, "source %d", i);
        snprintf(t, sizeof t, "target %d", i);
        dup &= judge(f, s, t) == FILTER_DUPLICATE;
    }
    CHECK(kept && dup);
    size_t bytes;
    CHECK_EQ_INT(filter_hash_set_size(f, &bytes), 100000);
    CHECK(bytes >= 2 * 100000 * sizeof(uint64_t));
    filter_free(f);
}

static void test_options(void) {
    filter_options_t o = filter_default_options();
    CHECK(o.max_words == 250 && o.max_ratio == 9.0 && o.copies && o.duplicates && o.min_letters == 0);
    filter_t *f = (filter_t *)&o;
    o.min_letters = 1.5;
    CHECK(filter_create(&f, &o) == TERN_ERR_INVALID_ARG && f == NULL);
    o = filter_default_options();
    o.max_ratio = -1;
    CHECK(filter_create(&f, &o) == TERN_ERR_INVALID_ARG);
    /* rules off */
    o = filter_default_options();
    o.max_words = 0;
    o.max_ratio = 0;
    o.copies = 0;
    o.duplicates = 0;
    CHECK(filter_create(&f, &o) == TERN_OK);
    CHECK_EQ_INT(judge(f, "a a a a a a a a a a a a", "b"), FILTER_KEEP);
    CHECK_EQ_INT(judge(f, "x", "x"), FILTER_KEEP);
    CHECK_EQ_INT(judge(f, "x", "x"), FILTER_KEEP);
    filter_free(f);
    filter_free(NULL);
}

int main(void) {
    test_rules_and_order();
    test_repetition_rule();
    test_language_rule();
    test_hash_set_growth();
    test_options();
    return check_report("test_filter");
}
