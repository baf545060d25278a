/*
 * search_driver.c — runs greedy or beam search with the score processors over a mock model, for
 * tests/test_lmbr.py (whose brute-force Python reference recomputes the same mock and the LMBR
 * scores independently).
 *
 * The mock model: logits after target prefix p of sentence n are a hash of (seed, n, p):
 *   h = prefix_hash(seed, n, p); logits[v] = (float)(2.0 * (2.0 * unit(mix64(h ^ (0x1000 + v))) - 1.0))
 *   logits[eos] += (float)(-1.0 + 0.4 * |p|)
 * with splitmix64's finalizer mix64 and unit(x) = (x >> 11) * 2^-53 (see test_lmbr.py).
 *
 * usage: search_driver SEED V BOS EOS B NHYP N MAXLEN MINLEN LP EARLY LMBR LAMBDA P R ALPHA EVIDENCE
 *   LMBR 0: plain search (EVIDENCE ignored); 1: LMBR with EVIDENCE, a file of lines
 *   "W w_0 w_1 ..." (system weights, first line) then "n s score tok tok ..." (sentence, system).
 * Output: one line per returned hypothesis: "n k score raw | tok tok ...".
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search/lmbr.h"
#include "search/procs.h"
#include "search/search.h"

#define MAXROWS 4096
#define MAXT 64

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
static double unit01(uint64_t h) { return (double)(h >> 11) * 0x1p-53; }

typedef struct {
    uint64_t seed;
    int V, eos, R;
    int sent[MAXROWS], len[MAXROWS], pre[MAXROWS][MAXT];
    int sent2[MAXROWS], len2[MAXROWS], pre2[MAXROWS][MAXT];
} mock_t;

static void logits_of(const mock_t *m, int n, const int *p, int len, float *out) {
    uint64_t h = mix64(m->seed * 0xD1B54A32D192ED03ULL + (uint64_t)(n + 1) * 0x8CB92BA72F3D8DD7ULL);
    for (int i = 0; i < len; i++) h = mix64(h + (uint64_t)(p[i] + 1) * 0xA24BAED4963EE407ULL);
    for (int v = 0; v < m->V; v++) out[v] = (float)(2.0 * (2.0 * unit01(mix64(h ^ (0x1000u + (unsigned)v))) - 1.0));
    out[m->eos] += (float)(-1.0 + 0.4 * len);
}

static tern_status_t mock_step(void *self, const int *tokens, int t, float *logits, float *attn) {
    mock_t *m = self;
    for (int r = 0; r < m->R; r++) {
        if (t > 0) {
            if (m->len[r] >= MAXT) return TERN_ERR_INTERNAL;
            m->pre[r][m->len[r]++] = tokens[r];
        }
        logits_of(m, m->sent[r], m->pre[r], m->len[r], logits + (size_t)r * m->V);
    }
    return TERN_OK;
}

static tern_status_t mock_set_rows(void *self, const int *parent, const int *sent, int R) {
    mock_t *m = self;
    if (R > MAXROWS) return TERN_ERR_INTERNAL;
    for (int i = 0; i < R; i++) {
        m->sent2[i] = sent[i];
        m->len2[i] = m->len[parent[i]];
        memcpy(m->pre2[i], m->pre[parent[i]], sizeof m->pre2[i]);
    }
    m->R = R;
    memcpy(m->sent, m->sent2, sizeof(int) * (size_t)R);
    memcpy(m->len, m->len2, sizeof(int) * (size_t)R);
    memcpy(m->pre, m->pre2, sizeof(m->pre[0]) * (size_t)R);
    return TERN_OK;
}

int main(int argc, char **argv) {
    if (argc < 18 || argc > 20) {
        fprintf(stderr, "usage: search_driver SEED V BOS EOS B NHYP N MAXLEN MINLEN LP EARLY LMBR LAMBDA P R ALPHA EVIDENCE [CLIP [SUM_GAIN]]\n");
        return 2;
    }
    static mock_t m;
    m.seed = strtoull(argv[1], NULL, 10);
    m.V = atoi(argv[2]);
    int bos = atoi(argv[3]), eos = atoi(argv[4]), B = atoi(argv[5]), nhyp = atoi(argv[6]), N = atoi(argv[7]);
    int maxlen = atoi(argv[8]), minlen = atoi(argv[9]);
    float lp = strtof(argv[10], NULL);
    int early = atoi(argv[11]), use_lmbr = atoi(argv[12]);
    float lambda = strtof(argv[13], NULL), p = strtof(argv[14], NULL), r = strtof(argv[15], NULL);
    float alpha = strtof(argv[16], NULL);
    m.eos = eos;
    m.R = N;
    for (int n = 0; n < N; n++) m.sent[n] = n, m.len[n] = 0;

    /* evidence: per sentence and system, hypotheses */
    enum { MAXS = 8, MAXK = 256 };
    static int *tok[64][MAXS][MAXK];
    static int len[64][MAXS][MAXK];
    static float sc[64][MAXS][MAXK];
    static int K[64][MAXS];
    float w[MAXS];
    int S = 0;
    if (use_lmbr) {
        FILE *f = fopen(argv[17], "r");
        if (!f) return 1;
        char line[65536];
        while (fgets(line, sizeof line, f)) {
            char *q = line, *e;
            if (line[0] == 'W') {
                q++;
                for (S = 0;; S++) {
                    float x = strtof(q, &e);
                    if (e == q) break;
                    w[S] = x;
                    q = e;
                }
                continue;
            }
            int n = (int)strtol(q, &e, 10), s;
            q = e;
            s = (int)strtol(q, &e, 10);
            q = e;
            float score = strtof(q, &e);
            q = e;
            int buf[MAXT], L = 0;
            for (;;) {
                long t = strtol(q, &e, 10);
                if (e == q) break;
                buf[L++] = (int)t;
                q = e;
            }
            int k = K[n][s]++;
            tok[n][s][k] = malloc(sizeof(int) * (size_t)(L ? L : 1));
            memcpy(tok[n][s][k], buf, sizeof(int) * (size_t)L);
            len[n][s][k] = L;
            sc[n][s][k] = score;
        }
        fclose(f);
    }
    static search_sentence_t sd[64];
    static const search_sentence_t *sdp[64];
    static lmbr_sentence_t *ls[64];
    lmbr_params_t params = lmbr_params(lambda, p, r);
    params.clip = argc > 18 && atoi(argv[18]);
    params.sum_gain = argc > 19 && atoi(argv[19]);
    search_global_t g = {NULL, use_lmbr ? &params : NULL};
    for (int n = 0; n < N && use_lmbr; n++) {
        lmbr_evidence_t ev[MAXS];
        const lmbr_evidence_t *evp[MAXS];
        for (int s = 0; s < S; s++) {
            ev[s] = (lmbr_evidence_t){(const int *const *)tok[n][s], len[n][s], sc[n][s], K[n][s]};
            evp[s] = K[n][s] ? &ev[s] : NULL;
        }
        if (lmbr_sentence_build(&ls[n], evp, w, S, alpha)) return 1;
        sd[n].lmbr = ls[n];
        sdp[n] = &sd[n];
    }
    search_procs_t *procs = NULL;
    if (search_procs_bind(&procs, &g, use_lmbr ? sdp : NULL, N, m.V, eos, B, 0.0f)) return 1;
    search_options_t so = {0};
    so.beam_size = B;
    so.num_hypotheses = nhyp;
    so.length_penalty = lp;
    so.length_norm = TERN_LENPEN_PLAIN;
    so.eos_policy = TERN_EOS_COMMON;
    so.early_stop = early;
    so.min_length = minlen;
    so.need_scores = 1;
    so.bos = bos;
    so.eos = eos;
    so.procs = search_procs_list(procs, &so.num_procs);
    decoder_iface_t dec = {&m, m.V, 1, mock_step, mock_set_rows, 0, NULL, NULL, NULL};
    int ml[64];
    for (int n = 0; n < N; n++) ml[n] = maxlen;
    search_result_t res[64];
    tern_status_t st = B > 1 ? beam_search(&dec, N, ml, &so, res) : greedy_search(&dec, N, ml, &so, res);
    if (st) {
        fprintf(stderr, "search failed: %s\n", tern_last_error());
        return 1;
    }
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < res[n].n; k++) {
            hypothesis_t *h = &res[n].hyps[k];
            printf("%d %d %.9g %.9g |", n, k, h->score, h->raw);
            for (int i = 0; i < h->length; i++) printf(" %d", h->tokens[i]);
            printf("\n");
        }
        search_result_free(&res[n]);
        lmbr_sentence_free(ls[n]);
    }
    search_procs_free(procs);
    for (int n = 0; n < 64; n++)
        for (int s = 0; s < MAXS; s++)
            for (int k = 0; k < K[n][s]; k++) free(tok[n][s][k]);
    return 0;
}
