/* test_sentences.c — sentence splitting (src/text/sentences.c, ICU's sentence break iterator):
 * the expected sentences of each case are written out by hand (UAX #29 with ICU's standard
 * abbreviation suppressions); the separators between them must be exactly the text's own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tern.h"

/* Splits text for lang and checks the sentences against want (NULL-terminated), and that text is
 * exactly sentences and white space in between. */
static void expect(const char *lang, const char *text, const char *const *want) {
    size_t *sp = NULL;
    int n = -1, k = 0;
    CHECK(tern_split_sentences(text, strlen(text), lang, &sp, &n) == TERN_OK);
    while (want[k]) k++;
    CHECK_MSG(n == k, "'%s': %d sentences, want %d", text, n, k);
    size_t prev = 0;
    for (int i = 0; i < n && i < k; i++) {
        size_t b = sp[2 * i], e = sp[2 * i + 1];
        CHECK_MSG(b >= prev && e > b && e <= strlen(text), "'%s': span %d [%zu, %zu)", text, i, b, e);
        CHECK_MSG(strlen(want[i]) == e - b && !strncmp(text + b, want[i], e - b), "'%s': sentence %d is '%.*s', want '%s'",
                  text, i, (int)(e - b), text + b, want[i]);
        for (size_t j = prev; j < b; j++) CHECK_MSG(strchr(" \t\r\n", text[j]) || (unsigned char)text[j] >= 0x80,
                                                   "'%s': byte %zu between sentences is '%c'", text, j, text[j]);
        prev = e;
    }
    tern_sentences_free(sp);
}

#define S(...) ((const char *const[]){__VA_ARGS__, NULL})

int main(void) {
    /* the paragraph: three sentences */
    expect("en", "A man rides a bicycle down the street. A dog runs through the park. Two children play football on the grass.",
           S("A man rides a bicycle down the street.", "A dog runs through the park.",
             "Two children play football on the grass."));
    /* abbreviations (ICU's standard suppressions), decimals, initials inside a sentence */
    expect("en", "Mr. Smith arrived at 3.5 p.m. today. He left.", S("Mr. Smith arrived at 3.5 p.m. today.", "He left."));
    /* CLDR's English list has no "Dr." (it ends sentences as "Drive"): ICU breaks after it, and so
     * do we; pinned here so that a change of ICU's data is seen */
    expect("en", "Dr. Smith left.", S("Dr.", "Smith left."));
    expect("en", "Mr. Brown paid $3.50 for it, i.e. too much.", S("Mr. Brown paid $3.50 for it, i.e. too much."));
    /* "?!" and "..." end one sentence each; closing quotes stay with theirs */
    expect("en", "Really?! Yes... \"Go home.\" She went.", S("Really?!", "Yes...", "\"Go home.\"", "She went."));
    /* a lowercase word after a full stop continues the sentence (UAX #29 rule SB8) */
    expect("en", "It costs approx. five dollars.", S("It costs approx. five dollars."));
    /* line breaks end sentences and are kept, with the spaces around them, as separators */
    expect("en", "  First line\nSecond one.  Third.\r\n\nFourth  ", S("First line", "Second one.", "Third.", "Fourth"));
    /* German: abbreviations of the de locale */
    expect("de", "Das ist z.B. ein Satz. Und noch einer!", S("Das ist z.B. ein Satz.", "Und noch einer!"));
    expect("de", "Herr Dr. Meier ging. Sie auch.", S("Herr Dr. Meier ging.", "Sie auch."));
    /* CJK full stops and exclamation marks (no spaces between the sentences) */
    expect("zh", "\xe4\xbb\x8a\xe5\xa4\xa9\xe5\xa4\xa9\xe6\xb0\x94\xe5\xbe\x88\xe5\xa5\xbd\xe3\x80\x82\xe6\x88\x91\xe4\xbb\xac"
                 "\xe5\x8e\xbb\xe5\x85\xac\xe5\x9b\xad\xef\xbc\x81",
           S("\xe4\xbb\x8a\xe5\xa4\xa9\xe5\xa4\xa9\xe6\xb0\x94\xe5\xbe\x88\xe5\xa5\xbd\xe3\x80\x82",
             "\xe6\x88\x91\xe4\xbb\xac\xe5\x8e\xbb\xe5\x85\xac\xe5\x9b\xad\xef\xbc\x81"));
    /* nothing but white space (U+3000 included): no sentence */
    expect("en", " \t\n\xe3\x80\x80 ", (const char *const[]){NULL});
    expect("", "", (const char *const[]){NULL});
    /* invalid UTF-8 stays inside a sentence, never crashes */
    expect("en", "Bad \xff\xfe byte. Next.", S("Bad \xff\xfe byte.", "Next."));

    /* a language that is not a tag: a clear error */
    size_t *sp = NULL;
    int n = 0;
    CHECK(tern_split_sentences("A. B.", 5, "en; rm -rf", &sp, &n) == TERN_ERR_INVALID_ARG);
    CHECK(strstr(tern_last_error(), "not a language tag") != NULL);
    CHECK(sp == NULL && n == 0);
    return check_report("test_sentences");
}
