/* test_langid.c — unit tests of text/langid.h (CLD2's shim): codes as LibreTranslate writes them,
 * percentages, reliability, best effort, bytes CLD2 refuses, errors. The comparison with pycld2
 * (LibreTranslate's own detector) on 1,000 Multi30k lines is tests/test_langid.py's. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "text/langid.h"

static langid_result_t detect(const char *text, int best_effort) {
    langid_result_t r;
    CHECK(langid_detect(&r, text, strlen(text), best_effort, 1) == TERN_OK);
    return r;
}

static void test_languages_and_codes(void) {
    static const char *const cases[][2] = {
        {"en", "A man in an orange hat is staring at something in the street."},
        {"de", "Ein Mann mit einem orangefarbenen Hut starrt etwas auf der Strasse an."},
        {"fr", "Un homme avec un chapeau orange regarde quelque chose dans la rue."},
        {"cs", "Muž v oranžovém klobouku, který na něco zírá na ulici před obchodem."},
        /* CLD2 writes Hebrew "iw": LibreTranslate's code is "he" */
        {"he", "\xd7\x90\xd7\x99\xd7\xa9 \xd7\xa2\xd7\x9d \xd7\x9b\xd7\x95\xd7\x91\xd7\xa2 \xd7\x9b\xd7\xaa\xd7\x95\xd7\x9d "
               "\xd7\x9e\xd7\xa1\xd7\xaa\xd7\x9b\xd7\x9c \xd7\xa2\xd7\x9c \xd7\x9e\xd7\xa9\xd7\x94\xd7\x95 \xd7\x91\xd7\xa8\xd7\x97\xd7\x95\xd7\x91 "
               "\xd7\x9c\xd7\x99\xd7\x93 \xd7\x94\xd7\x97\xd7\xa0\xd7\x95\xd7\xaa \xd7\x94\xd7\x92\xd7\x93\xd7\x95\xd7\x9c\xd7\x94."}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        langid_result_t r = detect(cases[i][1], 0);
        CHECK_MSG(r.reliable && r.n >= 1 && !strcmp(r.guess[0].code, cases[i][0]), "%s: got %s (reliable %d)",
                  cases[i][0], r.n ? r.guess[0].code : "none", r.reliable);
        CHECK(r.guess[0].percent > 50 && r.guess[0].percent <= 100 && r.text_bytes > 0);
    }
}

static void test_short_and_empty(void) {
    langid_result_t r = detect("", 0);
    CHECK(r.n == 0 && !r.reliable);
    r = detect("12345 !!", 1); /* no letters: nothing even with best effort */
    CHECK(r.n == 0);
    r = detect("Hello", 0);    /* too short for CLD2 without best effort */
    CHECK(!r.reliable);
    r = detect("Hello", 1);
    CHECK(r.n == 1 && !strcmp(r.guess[0].code, "en"));
}

static void test_bytes(void) {
    /* control characters, C1 controls and noncharacters: read as spaces, the rest detected */
    const char *t = "\x0b\xc2\x8a\xef\xb7\x90The man is walking his dog in the park near the river.\x01";
    langid_result_t r = detect(t, 0);
    CHECK(r.reliable && r.n >= 1 && !strcmp(r.guess[0].code, "en"));
    /* not NUL-terminated: only len bytes are read */
    char buf[] = "Un homme avec un chapeau orange regarde quelque chose dans la rue.XXXX";
    CHECK(langid_detect(&r, buf, strlen(buf) - 4, 0, 1) == TERN_OK && !strcmp(r.guess[0].code, "fr"));
    /* invalid UTF-8: an error naming the byte, nothing detected */
    CHECK(langid_detect(&r, "abc\xff", 4, 0, 1) == TERN_ERR_INPUT && r.n == 0);
    CHECK(strstr(tern_last_error(), "byte 3") != NULL);
    /* HTML mode skips tags: the text between them decides */
    const char *html = "<p class=\"the and of to in is\">Ein Mann mit einem orangefarbenen Hut starrt etwas an.</p>";
    CHECK(langid_detect(&r, html, strlen(html), 0, 0) == TERN_OK && r.n >= 1 && !strcmp(r.guess[0].code, "de"));
    CHECK(strlen(langid_version()) > 0);
}

int main(void) {
    test_languages_and_codes();
    test_short_and_empty();
    test_bytes();
    return check_report("test_langid");
}
