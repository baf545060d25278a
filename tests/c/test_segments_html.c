/* test_segments_html.c — segments_translate_html() (src/serve/segments.c), the HTML document
 * translation /translate_file is to use, with a stand-in translator that brackets each text it is
 * given: the expected documents are written out, so the cutting (tags kept, references decoded
 * then escaped again, sentences apart with a single space between them, white space at a run's
 * edges kept, inline tags carried inside their sentence) is checked exactly. Broken HTML gives a
 * document, never a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "serve/segments.h"

static int calls;

static int bracket(void *ctx, const char *const *texts, int n, char **outs) {
    (void)ctx;
    calls++;
    for (int i = 0; i < n; i++) {
        size_t k = strlen(texts[i]);
        if (!(outs[i] = malloc(k + 3))) return -1;
        snprintf(outs[i], k + 3, "[%s]", texts[i]);
    }
    return 0;
}

static int refuse(void *ctx, const char *const *texts, int n, char **outs) {
    (void)ctx, (void)texts, (void)n, (void)outs;
    return -1;
}

static void expect(const char *lang, const char *doc, const char *want) {
    char *got = segments_translate_html(doc, lang, bracket, NULL);
    CHECK_MSG(got && !strcmp(got, want), "'%s' gave '%s', want '%s'", doc, got ? got : "(null)", want);
    free(got);
}

int main(void) {
    expect("en", "<p>A man rides a bicycle. A dog runs!</p>", "<p>[A man rides a bicycle.] [A dog runs!]</p>");
    expect(NULL, "<p>A man rides a bicycle. A dog runs!</p>", "<p>[A man rides a bicycle. A dog runs!]</p>");
    expect("en", "<ul>\n <li> One. </li>\n <li class=\"x\">Tom &amp; Jerry &lt; 3</li></ul>",
           "<ul>\n <li> [One.] </li>\n <li class=\"x\">[Tom &amp; Jerry &lt; 3]</li></ul>");
    expect("en", "<!-- c. d. --><script>if (a < b) x();</script><style>p{}</style>Hi.&nbsp;There.<br/>",
           "<!-- c. d. --><script>if (a < b) x();</script><style>p{}</style>[Hi.] [There.]<br/>");
    /* broken HTML: an unclosed tag, a stray '<', an unterminated comment */
    expect("en", "<p>Open. <b>bold", "<p>[Open. <b>bold]"); /* one sentence (lowercase after the stop) */
    expect("en", "<p>Open. <b>Bold", "<p>[Open.] <b>[Bold]");
    /* inline tags stay inside their sentence (tags.h; here without an alignment: proportional) */
    expect("en", "<p>A <b>red</b> bike.</p>", "<p>[A <b>red</b> bike.]</p>");
    expect("en", "<p>A <a href=\"x?a=1&amp;b=2\">red <i>big</i></a> bike. Two <em>dogs</em>.</p>",
           "<p>[A <a href=\"x?a=1&amp;b=2\">red <i>big</i></a> bike.] [Two <em>dogs.]</em></p>"); /* white-space words */
    expect("en", "<b><i>crossing</b> tags</i> here.", "<b><i>[crossing</b> tags</i> here.]");
    expect("en", "stray </b>close.", "[stray</b> close.]");
    expect("en", "a < b. C > d.", "[a &lt; b.] [C &gt; d.]");
    expect("en", "a < b. c > d.", "[a &lt; b. c &gt; d.]"); /* lowercase after the stop: one sentence (UAX #29 SB8) */
    expect("en", "x <!-- never closed", "[x] <!-- never closed");
    calls = 0;
    expect("en", "<p></p>", "<p></p>");
    CHECK_EQ_INT(calls, 0); /* nothing to translate: no call */
    char *r = segments_translate_html("<p>A. B.</p>", "en", refuse, NULL);
    CHECK(r == NULL);
    return check_report("test_segments_html");
}
