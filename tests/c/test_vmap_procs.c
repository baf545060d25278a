/*
 * test_vmap_procs.c — the search processors' data under a vocabulary map (procs.h):
 * search_procs_mark() marks exactly the prefix, restrict-to, constraint and LMBR evidence tokens
 * (a brute-force set here), and search_remap_new() gives the same data in positions among the
 * candidates: every token of a prefix, prefix tree and constraint phrase is its position, a
 * suppressed sequence with a non-candidate piece is dropped (the others remapped), and the LMBR
 * n-gram table answers the same posterior and n-gram index for every evidence n-gram (and every
 * n-gram of random token sequences) asked in positions. Random cases; run under SAN=1 too.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "search/constraints.h"
#include "search/lmbr.h"
#include "search/procs.h"

static uint64_t rs = 12345;
static int rnd(int n) {
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int)((rs >> 33) % (uint64_t)n);
}

#define V 60
#define N 3

static void one_case(int seed) {
    rs = (uint64_t)seed * 7919 + 1;
    int prefix[N][4], plen[N];
    search_trie_t trie[N];
    cons_sentence_t *cons[N];
    lmbr_sentence_t *lm[N];
    int ev_tok[N][4][6], ev_len[N][4], ev_K[N];
    uint8_t want[V] = {0};
    search_sentence_t sd[N];
    const search_sentence_t *sdp[N];
    for (int n = 0; n < N; n++) {
        memset(&sd[n], 0, sizeof sd[n]);
        plen[n] = rnd(4);
        for (int i = 0; i < plen[n]; i++) want[prefix[n][i] = rnd(V)] = 1;
        sd[n].prefix = prefix[n], sd[n].prefix_len = plen[n];
        CHECK(trie_init(&trie[n]) == TERN_OK);
        for (int h = 0, H = rnd(3); h < H; h++) {
            int seq[5], L = 1 + rnd(5);
            for (int i = 0; i < L; i++) want[seq[i] = rnd(V)] = 1;
            CHECK(trie_insert(&trie[n], seq, L) == TERN_OK);
        }
        sd[n].restrict_to = trie[n].n > 1 ? &trie[n] : NULL;
        int ph[3][3], pl[3], C = rnd(3);
        const int *pp[3];
        for (int j = 0; j < C; j++) {
            pl[j] = 1 + rnd(3);
            for (int i = 0; i < pl[j]; i++) want[ph[j][i] = rnd(V)] = 1;
            pp[j] = ph[j];
        }
        CHECK(cons_sentence_new(&cons[n], pp, pl, C) == TERN_OK);
        sd[n].constraints = cons[n];
        int K = ev_K[n] = 1 + rnd(4);
        const int *tp[4];
        float sc[4];
        for (int e = 0; e < K; e++) {
            ev_len[n][e] = 1 + rnd(6);
            for (int i = 0; i < ev_len[n][e]; i++) want[ev_tok[n][e][i] = rnd(V)] = 1;
            tp[e] = ev_tok[n][e];
            sc[e] = -(float)rnd(100) / 10.0f;
        }
        lmbr_evidence_t ev = {tp, ev_len[n], sc, K};
        const lmbr_evidence_t *evp = &ev;
        CHECK(lmbr_sentence_build(&lm[n], &evp, NULL, 1, 0.7f) == TERN_OK);
        sd[n].lmbr = lm[n];
        sdp[n] = n == 1 && seed % 2 ? NULL : &sd[n]; /* a sentence without data */
    }
    /* the expected marks: the tokens of the sentences that have data */
    memset(want, 0, sizeof want);
    for (int n = 0; n < N; n++) {
        if (!sdp[n]) continue;
        for (int i = 0; i < plen[n]; i++) want[prefix[n][i]] = 1;
        for (int k = 1; k < trie[n].n; k++) want[trie[n].node[k].tok] = 1;
        for (int j = 0; j < cons[n]->C; j++)
            for (int i = 0; i < cons[n]->len[j]; i++) want[cons[n]->tok[j][i]] = 1;
    }
    for (int n = 0; n < N; n++)
        for (int e = 0; sdp[n] && e < ev_K[n]; e++)
            for (int i = 0; i < ev_len[n][e]; i++) want[ev_tok[n][e][i]] = 1;
    uint8_t mark[V] = {0};
    search_suppress_t sup;
    int s0[1] = {rnd(V)}, s1[2] = {rnd(V), rnd(V)}, s2[2] = {rnd(V), rnd(V)};
    int *sq[3] = {s0, s1, s2}, sl[3] = {1, 2, 2};
    sup.seq = sq, sup.len = sl, sup.n = 3;
    lmbr_params_t lp = lmbr_params(0.5f, 0.8f, 0.7f);
    search_global_t g = {&sup, &lp};
    search_procs_mark(&g, sdp, N, V, mark);
    for (int v = 0; v < V; v++) CHECK_EQ_INT(mark[v], want[v]);
    /* candidates: the marked tokens and random others */
    int cand[V], nc = 0;
    for (int v = 0; v < V; v++)
        if (mark[v] || rnd(3) == 0) cand[nc++] = v;
    int pos[V];
    for (int v = 0; v < V; v++) pos[v] = -1;
    for (int i = 0; i < nc; i++) pos[cand[i]] = i;
    for (int v = 0; v < V; v++) CHECK_EQ_INT(search_id_position(cand, nc, v), pos[v]);
    search_remap_t *rm = NULL;
    CHECK(search_remap_new(&rm, &g, sdp, N, cand, nc) == TERN_OK);
    if (!rm) return;
    const search_global_t *rg = search_remap_global(rm);
    const search_sentence_t *const *rsd = search_remap_sentences(rm);
    CHECK(rg && rg->lmbr == &lp);
    int kept = 0;
    for (int k = 0; k < 3; k++) {
        int ok = 1;
        for (int i = 0; i < sl[k]; i++) ok &= pos[sq[k][i]] >= 0;
        if (!ok) continue;
        CHECK(kept < rg->suppress->n && rg->suppress->len[kept] == sl[k]);
        for (int i = 0; kept < rg->suppress->n && i < sl[k]; i++) CHECK_EQ_INT(rg->suppress->seq[kept][i], pos[sq[k][i]]);
        kept++;
    }
    CHECK_EQ_INT(rg->suppress->n, kept);
    for (int n = 0; n < N; n++) {
        if (!sdp[n]) {
            CHECK(rsd[n] == NULL);
            continue;
        }
        const search_sentence_t *r = rsd[n];
        CHECK_EQ_INT(r->prefix_len, plen[n]);
        for (int i = 0; i < plen[n]; i++) CHECK_EQ_INT(r->prefix[i], pos[prefix[n][i]]);
        if (sd[n].restrict_to) {
            CHECK_EQ_INT(r->restrict_to->n, trie[n].n);
            for (int k = 0; k < trie[n].n; k++) {
                const trie_node_t *a = &trie[n].node[k], *b = &r->restrict_to->node[k];
                CHECK(b->child == a->child && b->sibling == a->sibling && b->end == a->end);
                CHECK_EQ_INT(b->tok, k ? pos[a->tok] : -1);
            }
        } else CHECK(r->restrict_to == NULL);
        CHECK_EQ_INT(r->constraints->C, cons[n]->C);
        CHECK_EQ_INT(r->constraints->total, cons[n]->total);
        for (int j = 0; j < cons[n]->C; j++)
            for (int i = 0; i < cons[n]->len[j]; i++) CHECK_EQ_INT(r->constraints->tok[j][i], pos[cons[n]->tok[j][i]]);
        /* LMBR: every n-gram of the evidence and of random sequences over the marked tokens */
        CHECK_EQ_INT(lmbr_ngram_count(r->lmbr), lmbr_ngram_count(lm[n]));
        for (int q = 0; q < 200; q++) {
            int seq[4], nn = 1 + rnd(4);
            if (q < 100) { /* from the evidence */
                int e = rnd(ev_K[n]);
                if (ev_len[n][e] < nn) nn = ev_len[n][e];
                int s = rnd(ev_len[n][e] - nn + 1);
                memcpy(seq, ev_tok[n][e] + s, (size_t)nn * sizeof(int));
            } else {
                for (int i = 0; i < nn; i++) seq[i] = cand[rnd(nc)];
            }
            int pseq[4];
            for (int i = 0; i < nn; i++) pseq[i] = pos[seq[i]];
            CHECK(lmbr_posterior(r->lmbr, pseq, nn, pseq[nn - 1]) == lmbr_posterior(lm[n], seq, nn, seq[nn - 1]));
            CHECK_EQ_INT(lmbr_ngram_index(r->lmbr, pseq, nn, pseq[nn - 1]),
                         lmbr_ngram_index(lm[n], seq, nn, seq[nn - 1]));
        }
    }
    search_remap_free(rm);
    for (int n = 0; n < N; n++) {
        trie_free(&trie[n]);
        cons_sentence_free(cons[n]);
        lmbr_sentence_free(lm[n]);
    }
}

int main(void) {
    for (int s = 0; s < 300; s++) one_case(s);
    /* no data at all: nothing marked, no global data */
    uint8_t mark[V] = {0};
    search_procs_mark(NULL, NULL, N, V, mark);
    int any = 0;
    for (int v = 0; v < V; v++) any |= mark[v];
    CHECK(!any);
    return check_report("test_vmap_procs");
}
