/* test_score.c — unit tests of the scorer library on in-memory strings (the trainer's use):
 * tokenizers and text helpers against hand-derived outputs of the documented rules, invariants of
 * BLEU/chrF/GLEU, corpus stats = sum of sentence stats, the numpy-compatible generator's contract,
 * paired bootstrap edge cases, and error paths (no crash, a status and a message).
 * Exactness against sacreBLEU/NLTK/numpy themselves is tests/test_score_peer.py's job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "text/score.h"

static void check_tok(const char *in, score_tokenizer_t tok, int lc, const char *want) {
    text_buf_t tb;
    memset(&tb, 0, sizeof tb);
    const char *out;
    size_t len;
    CHECK(text_tokenize(&out, &len, &tb, in, tok, lc) == TERN_OK);
    CHECK_MSG(strcmp(out, want) == 0 && strlen(out) == len, "%s tokenized to [%s], want [%s]", in, out, want);
    text_buf_free(&tb);
}

static void test_tokenizers(void) {
    check_tok("Hello, world!", SCORE_TOK_13A, 0, "Hello , world !");
    check_tok("It costs 1,000.50 dollars.", SCORE_TOK_13A, 0, "It costs 1,000.50 dollars .");
    check_tok("Tom &amp; Jerry &quot;x&quot;", SCORE_TOK_13A, 0, "Tom & Jerry \" x \"");
    check_tok("1990-2000 state-of-the-art", SCORE_TOK_13A, 0, "1990 - 2000 state-of-the-art");
    check_tok("  a\xc2\xa0" "b\xe3\x80\x80" "c  ", SCORE_TOK_13A, 0, "a b c"); /* NBSP, U+3000 */
    check_tok("<skipped>x", SCORE_TOK_13A, 0, "x");
    check_tok("", SCORE_TOK_13A, 0, "");
    check_tok("ab c", SCORE_TOK_CHAR, 0, "a b c");
    check_tok("A  B", SCORE_TOK_NONE, 1, "a b");
    check_tok("\xc4\xb0", SCORE_TOK_NONE, 1, "i\xcc\x87");                 /* İ -> i + U+0307 */
    check_tok("\xce\x9f\xce\x94\xce\x9f\xce\xa3", SCORE_TOK_NONE, 1,         /* ΟΔΟΣ -> οδος */
              "\xce\xbf\xce\xb4\xce\xbf\xcf\x82");
    check_tok("\xce\xa3", SCORE_TOK_NONE, 1, "\xcf\x83");                    /* lone Σ -> σ */
    check_tok("5\xe2\x82\xac, x.", SCORE_TOK_INTL, 0, "5 \xe2\x82\xac , x .");  /* € is a symbol */
    CHECK_EQ_INT(score_tokenizer_parse("intl"), SCORE_TOK_INTL);
    CHECK_EQ_INT(score_tokenizer_parse("zh"), -1);
}

static void test_utf8(void) {
    size_t bad = 99;
    CHECK(text_utf8_valid("caf\xc3\xa9", 5, &bad));
    CHECK(!text_utf8_valid("ab\xff", 3, &bad) && bad == 2);
    CHECK(!text_utf8_valid("\xc0\x80", 2, &bad) && bad == 0);         /* overlong */
    CHECK(!text_utf8_valid("x\xed\xa0\x80", 4, &bad) && bad == 1);    /* surrogate */
    CHECK(!text_utf8_valid("\xf4\x90\x80\x80", 4, &bad) && bad == 0); /* > U+10FFFF */
    CHECK(!text_utf8_valid("\xe2\x82", 2, &bad) && bad == 0);         /* truncated */
    uint32_t cp[8];
    CHECK_EQ_INT(text_decode(cp, "a\xff" "b", 3), 3);
    CHECK(cp[1] == 0xFFFD);
    CHECK(text_is_py_space(0x3000) && text_is_py_space(0x85) && text_is_py_space(0x1F));
    CHECK(!text_is_py_space(0x200B) && !text_is_py_space(0xFEFF));
}

static void test_bleu_chrf_gleu(void) {
    const char *hyp[3] = {"The cat sat on the mat.", "A dog barks loudly.", ""};
    const char *ref0[3] = {"The cat sat on the mat.", "A dog barked.", ""};
    const char *ref1[3] = {"There is a cat on the mat.", "The dog barks very loudly!", " "};
    const char *const *refs[2] = {ref0, ref1};
    bleu_options_t bo = bleu_default_options();

    bleu_result_t r;
    CHECK(bleu_corpus(&r, hyp, refs, &bo, 1, 1) == TERN_OK);
    CHECK_NEAR(r.score, 100.0, 1e-12, 0);
    CHECK(r.bp == 1.0 && r.hyp_len == 7 && r.ref_len == 7);

    /* corpus stats are the sum of sentence stats */
    bleu_stats_t per[3], tot, one;
    CHECK(bleu_corpus_stats(per, &tot, hyp, refs, &bo, 3, 2) == TERN_OK);
    bleu_workspace_t ws;
    memset(&ws, 0, sizeof ws);
    int64_t sum_correct0 = 0, sum_hyp = 0, sum_ref = 0;
    for (int i = 0; i < 3; i++) {
        const char *rr[2] = {ref0[i], ref1[i]};
        CHECK(bleu_sentence_stats(&one, &ws, hyp[i], rr, &bo, 2) == TERN_OK);
        CHECK(memcmp(&one, &per[i], sizeof one) == 0);
        sum_correct0 += one.correct[0];
        sum_hyp += one.hyp_len;
        sum_ref += one.ref_len;
    }
    CHECK(tot.correct[0] == sum_correct0 && tot.hyp_len == sum_hyp && tot.ref_len == sum_ref);
    /* sentence 2: hyp 5 tokens, refs 4 and 6 tokens: tie at distance 1 goes to the shorter */
    CHECK_EQ_INT(per[1].hyp_len, 5);
    CHECK_EQ_INT(per[1].ref_len, 4);
    /* the empty hypothesis: no n-grams, reference length of the closest (empty) reference */
    CHECK(per[2].hyp_len == 0 && per[2].ref_len == 0 && per[2].total[0] == 0);
    bleu_result_t z = bleu_compute(&per[2], &bo);
    CHECK(z.score == 0.0);

    /* clipping: "the the the" against "the cat": 1 matching unigram out of 3 */
    const char *h2[1] = {"the the the"}, *r2[1] = {"the cat"};
    const char *const *rr2[1] = {r2};
    CHECK(bleu_corpus_stats(NULL, &tot, h2, rr2, &bo, 1, 1) == TERN_OK);
    CHECK(tot.correct[0] == 1 && tot.total[0] == 3 && tot.total[1] == 2);
    bleu_workspace_free(&ws);

    chrf_options_t co = chrf_default_options();
    double c;
    CHECK(chrf_corpus(&c, hyp, refs, &co, 1, 1) == TERN_OK);
    CHECK_NEAR(c, 100.0, 1e-12, 0);
    co.word_order = 2;
    CHECK(chrf_corpus(&c, hyp, refs, &co, 1, 1) == TERN_OK);
    CHECK_NEAR(c, 100.0, 1e-12, 0);
    const char *hx[1] = {"xyz"}, *rx[1] = {"abc"};
    const char *const *rrx[1] = {rx};
    CHECK(chrf_corpus(&c, hx, rrx, &co, 1, 1) == TERN_OK);
    CHECK(c == 0.0);

    gleu_result_t g;
    gleu_stats_t gs[3];
    CHECK(gleu_corpus(&g, gs, hyp, refs, &bo, 1, 1) == TERN_OK);
    CHECK_NEAR(g.mean, 100.0, 1e-12, 0);
    CHECK(gleu_corpus(&g, gs, hyp, refs, &bo, 3, 2) == TERN_OK);
    CHECK(gs[2].all == 0 && gleu_sentence_score(&gs[2]) == 0.0); /* neither side has n-grams */
    CHECK(g.match == gs[0].match + gs[1].match && g.all == gs[0].all + gs[1].all);
    CHECK_NEAR(g.mean, (gleu_sentence_score(&gs[0]) + gleu_sentence_score(&gs[1])) / 3, 1e-12, 0);
    /* GLEU is symmetric in hypothesis and reference */
    gleu_stats_t a, b;
    memset(&ws, 0, sizeof ws);
    const char *ra[1] = {"a b c d e"}, *rb[1] = {"a b x d"};
    CHECK(gleu_sentence_stats(&a, &ws, "a b x d", ra, &bo, 1) == TERN_OK);
    CHECK(gleu_sentence_stats(&b, &ws, "a b c d e", rb, &bo, 1) == TERN_OK);
    CHECK(a.match == b.match && a.all == b.all && a.match == 4 && a.all == 14);
    bleu_workspace_free(&ws);
}

static void test_errors_and_invalid_input(void) {
    bleu_options_t bo = bleu_default_options();
    bleu_workspace_t ws;
    memset(&ws, 0, sizeof ws);
    bleu_stats_t st;
    const char *r[1] = {"x"};
    CHECK(bleu_sentence_stats(&st, &ws, "x", r, &bo, 0) == TERN_ERR_INVALID_ARG);
    CHECK(strstr(tern_last_error(), "no reference") != NULL);
    const char *rn[1] = {NULL};
    CHECK(bleu_sentence_stats(&st, &ws, "x", rn, &bo, 1) == TERN_ERR_INVALID_ARG);
    bo.max_order = 7;
    CHECK(bleu_sentence_stats(&st, &ws, "x", r, &bo, 1) == TERN_ERR_INVALID_ARG);
    bo.max_order = 4;
    /* invalid UTF-8 reaching the library decodes as U+FFFD: a score, never a crash */
    const char *rb[1] = {"ab\xff\xfe cd"};
    CHECK(bleu_sentence_stats(&st, &ws, "ab\xff\xfe cd \xe2\x82", rb, &bo, 1) == TERN_OK);
    CHECK(st.correct[0] == 2);
    bleu_workspace_free(&ws);
    chrf_options_t co = chrf_default_options();
    co.char_order = 0;
    co.word_order = 0;
    double c;
    const char *h[1] = {"a"};
    const char *const *rr[1] = {r};
    CHECK(chrf_corpus(&c, h, rr, &co, 1, 1) == TERN_ERR_INVALID_ARG);
    CHECK(strstr(tern_last_error(), "sentence 1") != NULL);
}

static void test_generator(void) {
    np_pcg64_t g1, g2;
    np_pcg64_seed(&g1, 12345);
    np_pcg64_seed(&g2, 12345);
    int same = 1;
    for (int i = 0; i < 100; i++) same &= np_pcg64_next_u64(&g1) == np_pcg64_next_u64(&g2);
    CHECK(same);
    np_pcg64_seed(&g2, 12346);
    np_pcg64_seed(&g1, 12345);
    CHECK(np_pcg64_next_u64(&g1) != np_pcg64_next_u64(&g2));
    /* next_u32 hands out the low then the high half of one 64-bit draw */
    np_pcg64_seed(&g1, 7);
    np_pcg64_seed(&g2, 7);
    uint64_t x = np_pcg64_next_u64(&g1);
    CHECK(np_pcg64_next_u32(&g2) == (uint32_t)x && np_pcg64_next_u32(&g2) == (uint32_t)(x >> 32));
    int ok = 1;
    for (uint64_t n = 1; n < 3000; n += 7) ok &= np_pcg64_below(&g1, n) < n;
    CHECK(ok);
    np_pcg64_seed(&g1, 1);
    CHECK(np_pcg64_below(&g1, 1) == 0);
    uint32_t idx[5 * 4];
    bootstrap_indices(idx, 99, 4, 5);
    int in = 1;
    for (int i = 0; i < 20; i++) in &= idx[i] < 4;
    CHECK(in);
}

static void test_paired_bootstrap(void) {
    /* two systems, 6 sentences, BLEU stats */
    const char *a[6] = {"a b c d", "e f g", "h i j k l", "m n", "o p q", "r s t u"};
    const char *b[6] = {"a b c x", "e f", "h i j k l", "m x", "o p q", "r x t u"};
    const char *ref[6] = {"a b c d", "e f g", "h i j k l", "m n", "o p q", "r s t u"};
    const char *const *refs[1] = {ref};
    bleu_options_t bo = bleu_default_options();
    bleu_stats_t sa[6], sb[6], tot;
    CHECK(bleu_corpus_stats(sa, &tot, a, refs, &bo, 6, 1) == TERN_OK);
    CHECK(bleu_corpus_stats(sb, &tot, b, refs, &bo, 6, 1) == TERN_OK);
    paired_bs_result_t r1, r2, same;
    CHECK(paired_bootstrap(&r1, (int64_t *)sa, (int64_t *)sb, NULL, bleu_stats_score, bleu_resample_score,
                           &bo, 12345, 6, BLEU_NSTATS, 200) == TERN_OK);
    CHECK(paired_bootstrap(&r2, (int64_t *)sa, (int64_t *)sb, NULL, bleu_stats_score, bleu_resample_score,
                           &bo, 12345, 6, BLEU_NSTATS, 200) == TERN_OK);
    CHECK(memcmp(&r1, &r2, sizeof r1) == 0); /* seeded: reproducible */
    CHECK_NEAR(r1.base_score, 100.0, 1e-12, 0);
    CHECK(r1.sys_score < r1.base_score && r1.p_value > 0 && r1.p_value <= 1);
    /* a system against itself: every difference is 0, nothing exceeds it: p = 1 / (S + 1) */
    CHECK(paired_bootstrap(&same, (int64_t *)sa, (int64_t *)sa, NULL, bleu_stats_score,
                           bleu_resample_score, &bo, 1, 6, BLEU_NSTATS, 99) == TERN_OK);
    CHECK(same.p_value == 1.0 / 100.0 && same.base_mean == same.sys_mean);
    /* given indices: all resamples = the corpus itself -> means equal the scores, intervals 0 */
    uint32_t idx[3 * 6];
    for (int i = 0; i < 18; i++) idx[i] = (uint32_t)(i % 6);
    CHECK(paired_bootstrap(&r1, (int64_t *)sa, (int64_t *)sb, idx, bleu_stats_score, bleu_resample_score,
                           &bo, 0, 6, BLEU_NSTATS, 3) == TERN_OK);
    CHECK(r1.base_ci == 0 && r1.sys_ci == 0);
    CHECK_NEAR(r1.sys_mean, r1.sys_score, 1e-4, 0); /* float32 precisions in the resamples */
    idx[4] = 6;
    CHECK(paired_bootstrap(&r1, (int64_t *)sa, (int64_t *)sb, idx, bleu_stats_score, bleu_resample_score,
                           &bo, 0, 6, BLEU_NSTATS, 3) == TERN_ERR_INVALID_ARG);
    /* chrF resamples are float32 values */
    chrf_options_t co = chrf_default_options();
    chrf_stats_t ca[6], cb[6], ct;
    CHECK(chrf_corpus_stats(ca, &ct, a, refs, &co, 6, 1) == TERN_OK);
    CHECK(chrf_corpus_stats(cb, &ct, b, refs, &co, 6, 1) == TERN_OK);
    int64_t fa[6 * 18], fb[6 * 18];
    for (int i = 0; i < 6; i++) {
        memcpy(fa + 18 * i, ca[i].v, 18 * sizeof(int64_t));
        memcpy(fb + 18 * i, cb[i].v, 18 * sizeof(int64_t));
    }
    CHECK(paired_bootstrap(&r1, fa, fb, NULL, chrf_stats_score, chrf_resample_score, &co, 12345, 6, 18,
                           100) == TERN_OK);
    CHECK(r1.sys_mean == (double)(float)r1.sys_mean && r1.sys_ci == (double)(float)r1.sys_ci);
}

int main(void) {
    test_tokenizers();
    test_utf8();
    test_bleu_chrf_gleu();
    test_errors_and_invalid_input();
    test_generator();
    test_paired_bootstrap();
    return check_report("test_score");
}
