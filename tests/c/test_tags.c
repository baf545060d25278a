/* test_tags.c — tags_project() (src/serve/tags.c) with hand-made attention: the rule of tags.h
 * written out case by case (aligned words, a pair around several words, swapped siblings clipped
 * to keep the order, a child clipped to its parent, an empty element, a tag whose mate is in
 * another sentence, crossing tags, escaping, punctuation as words, no alignment). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "serve/tags.h"

#define U "\xE2\x96\x81" /* U+2581 */

/* tags[i] from the source text: each "<...>" found in order, offset = bytes of text before it. */
static int parse(const char *marked, char *plain, seg_tag_t *tags, char store[][64]) {
    int n = 0;
    size_t o = 0;
    for (const char *p = marked; *p;) {
        if (*p == '<') {
            const char *e = strchr(p, '>') + 1;
            memcpy(store[n], p, (size_t)(e - p));
            store[n][e - p] = 0;
            tags[n] = (seg_tag_t){store[n], (size_t)(e - p), o, p[1] == '/', -1};
            n++;
            p = e;
        } else plain[o++] = *p++;
    }
    plain[o] = 0;
    for (int i = 0; i < n; i++) /* mates: the nearest open tag of the name */
        if (tags[i].close)
            for (int j = i - 1; j >= 0; j--)
                if (!tags[j].close && tags[j].mate < 0 && !strncmp(tags[j].text + 1, tags[i].text + 2, 1)) {
                    tags[i].mate = j, tags[j].mate = i;
                    break;
                }
    return n;
}

/* attention: target piece t attends only to source piece align[t] */
static void expect(const char *marked, const char *const *src, int ns, const char *hyp, const char *const *tgt,
                   int nt, const int *align, const char *want) {
    char plain[256], store[16][64];
    seg_tag_t tags[16];
    int n = parse(marked, plain, tags, store);
    float att[64 * 16] = {0};
    for (int t = 0; align && t < nt; t++) att[t * (ns + 1) + align[t]] = 1;
    const char *s2[17], *t2[17];
    for (int i = 0; i < ns; i++) s2[i] = src[i];
    s2[ns] = "</s>";
    for (int i = 0; i < nt; i++) t2[i] = tgt[i];
    t2[nt] = "</s>";
    tag_alignment_t al = {s2, ns + 1, t2, nt + 1, att, nt, ns + 1};
    char *got = tags_project(plain, hyp, tags, n, align ? &al : NULL);
    CHECK_MSG(got && !strcmp(got, want), "'%s' gave '%s', want '%s'", marked, got ? got : "(null)", want);
    free(got);
}

int main(void) {
    const char *src[] = {U "A", U "red", U "big", U "bike", "."};
    const char *tgt[] = {U "Ein", U "groß", "es", U "rote", "s", U "Rad", "."};
    /* Ein<-A, groß es<-big, rote s<-red, Rad<-bike, .<-. */
    const int al[] = {0, 2, 2, 1, 1, 3, 4};
    const char *hyp = "Ein großes rotes Rad.";
    expect("A <b>red</b> big bike.", src, 5, hyp, tgt, 7, al, "Ein großes <b>rotes</b> Rad.");
    expect("A <b>red big</b> bike.", src, 5, hyp, tgt, 7, al, "Ein <b>großes rotes</b> Rad.");
    /* siblings whose words swap: the second is clipped to after the first (empty) */
    expect("A <b>red</b> <i>big</i> bike.", src, 5, hyp, tgt, 7, al, "Ein großes <b>rotes</b> <i></i>Rad.");
    /* a child clipped to its parent */
    expect("A <b>red <i>big</i></b> bike.", src, 5, hyp, tgt, 7, al, "Ein <b><i>großes</i> rotes</b> Rad.");
    expect("A <u>red big bike</u>.", src, 5, hyp, tgt, 7, al, "Ein <u>großes rotes Rad</u>.");
    /* an empty element: before the target word of the next source word */
    expect("A red <br-like></br-like>big bike.", src, 5, hyp, tgt, 7, al, "Ein <br-like></br-like>großes rotes Rad.");
    /* mates in other sentences: from the start / to the end */
    expect("A red</b> big bike.", src, 5, hyp, tgt, 7, al, "Ein großes rotes</b> Rad.");
    expect("A red big <i>bike.", src, 5, hyp, tgt, 7, al, "Ein großes rotes <i>Rad.");
    /* crossing: one by one, an opening tag before its next word's target word, a closing one after
     * its previous word's, never before the tag before it (</i> after "big" -> after "großes",
     * held after </b>) */
    expect("<b>A <i>red</b> big</i> bike.", src, 5, hyp, tgt, 7, al, "<b>Ein großes <i>rotes</b></i> Rad.");
    /* escaping, attributes as written */
    const char *hyp2 = "Ein großes rotes Rad <&>.";
    const char *tgt2[] = {U "Ein", U "groß", "es", U "rote", "s", U "Rad", U "<&>", "."};
    const int al2[] = {0, 2, 2, 1, 1, 3, 3, 4};
    expect("A <a href=\"x?a&amp;b\">red</a> big bike.", src, 5, hyp2, tgt2, 8, al2,
           "Ein großes <a href=\"x?a&amp;b\">rotes</a> Rad &lt;&amp;&gt;.");
    /* no alignment: proportional over white-space words */
    expect("A <b>red</b> big bike.", src, 5, hyp, tgt, 7, NULL, "Ein <b>großes</b> rotes Rad.");
    return check_report("test_tags");
}
