/* rl.c — the GLEU reward and the REINFORCE step of RL refinement (rl.h). */
#include "train/rl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ids as "12 7 301" into *buf (grown as needed) at offset off; returns the end offset or -1. */
static long ids_text(char **buf, size_t *cap, size_t off, const int *ids, int n) {
    size_t need = off + (size_t)n * 12 + 2;
    if (need > *cap) {
        size_t nc = need * 2;
        char *nb = realloc(*buf, nc);
        if (!nb) return -1;
        *buf = nb;
        *cap = nc;
    }
    char *p = *buf + off;
    for (int i = 0; i < n; i++) p += sprintf(p, i ? " %d" : "%d", ids[i]);
    *p++ = '\0';
    return (long)(p - *buf);
}

tern_status_t rl_gleu_ids(double *score, bleu_workspace_t *ws, char **buf, size_t *cap, const int *hyp, int hl,
                          const int *ref, int rl) {
    long a = ids_text(buf, cap, 0, hyp, hl);
    long b = a < 0 ? -1 : ids_text(buf, cap, (size_t)a, ref, rl);
    if (b < 0) return tern_error(TERN_ERR_NOMEM, "RL refinement: out of memory");
    const char *refs[1] = {*buf + a};
    bleu_options_t o = bleu_default_options();
    o.tokenize = SCORE_TOK_NONE; /* the ids, split on spaces */
    o.lowercase = 0;
    o.max_order = 4;
    gleu_stats_t g;
    tern_status_t st = gleu_sentence_stats(&g, ws, *buf, refs, &o, 1);
    if (st) return st;
    *score = g.all ? (double)g.match / (double)g.all : 0.0;
    return TERN_OK;
}

tern_status_t rl_samples_backward(const train_family_t *fam, train_model_t *m, void *ws, const rl_caps_t *caps,
                                  const rl_tokens_t *tok, const int *src, int B, int S, const int *ref_out, int T,
                                  int M, const int *const *samp, const int *slen, float scale, double *rewards,
                                  rl_stats_t *stats) {
    if (!fam->set_sentence_weights)
        return tern_error(TERN_ERR_UNSUPPORTED, "RL refinement: the %s family has no per-sentence loss weights",
                          fam->architecture);
    if (B < 1 || M < 1) return TERN_OK;
    if (S > caps->max_S || S > caps->src_tokens)
        return tern_error(TERN_ERR_INVALID_ARG, "RL refinement: sources of %d tokens exceed the workspace", S);
    size_t n = (size_t)B * M;
    tern_status_t st = TERN_OK;
    double *r = malloc(n * sizeof *r);
    float *w = malloc(n * sizeof *w);
    int max_len = 0;
    for (size_t i = 0; i < n; i++) max_len = TERN_MAX(max_len, slen[i]);
    int Tmax = max_len + 1; /* + start / EOS */
    if (Tmax > caps->max_T || Tmax > caps->tgt_tokens) {
        free(r), free(w);
        return tern_error(TERN_ERR_INVALID_ARG, "RL refinement: a sample of %d tokens exceeds the workspace's %d "
                          "target positions", max_len, TERN_MIN(caps->max_T, caps->tgt_tokens) - 1);
    }
    int *csrc = malloc((size_t)caps->src_tokens * sizeof *csrc);
    int *ctin = malloc((size_t)caps->tgt_tokens * sizeof *ctin);
    int *ctout = malloc((size_t)caps->tgt_tokens * sizeof *ctout);
    bleu_workspace_t bws;
    memset(&bws, 0, sizeof bws);
    char *buf = NULL;
    size_t cap = 0;
    if (!r || !w || !csrc || !ctin || !ctout) {
        st = tern_error(TERN_ERR_NOMEM, "RL refinement: out of memory");
        goto done;
    }
    /* rewards and baselines */
    for (int b = 0; b < B; b++) {
        const int *ref = ref_out + (size_t)b * T;
        int rl = 0;
        while (rl < T && ref[rl] != tok->eos && ref[rl] != tok->pad) rl++;
        double sum = 0;
        for (int j = 0; j < M; j++) {
            size_t i = (size_t)b * M + j;
            if ((st = rl_gleu_ids(&r[i], &bws, &buf, &cap, samp[i], slen[i], ref, rl))) goto done;
            sum += r[i];
        }
        double base = sum / M;
        for (int j = 0; j < M; j++) w[(size_t)b * M + j] = (float)(r[(size_t)b * M + j] - base);
        if (stats) stats->reward_sum += sum;
    }
    if (rewards) memcpy(rewards, r, n * sizeof *r);
    /* the samples, teacher-forced, in chunks of consecutive sentences that fit the workspace */
    for (size_t i0 = 0; i0 < n;) {
        size_t i1 = i0;
        int Tc = 0;
        while (i1 < n) {
            int T1 = TERN_MAX(Tc, slen[i1] + 1);
            size_t k = i1 - i0 + 1;
            if (k * (size_t)S > (size_t)caps->src_tokens || k * (size_t)T1 > (size_t)caps->tgt_tokens) break;
            Tc = T1;
            i1++;
        }
        int Bc = (int)(i1 - i0);
        for (int k = 0; k < Bc; k++) {
            size_t i = i0 + (size_t)k;
            memcpy(csrc + (size_t)k * S, src + (i / (size_t)M) * (size_t)S, (size_t)S * sizeof(int));
            int *ti = ctin + (size_t)k * Tc, *to = ctout + (size_t)k * Tc;
            ti[0] = tok->start;
            for (int t = 0; t < slen[i]; t++) ti[t + 1] = to[t] = samp[i][t];
            to[slen[i]] = tok->eos;
            for (int t = slen[i] + 1; t < Tc; t++) ti[t] = to[t] = tok->pad;
        }
        train_loss_t L;
        fam->set_sentence_weights(ws, w + i0);
        if ((st = fam->forward(m, ws, csrc, ctin, ctout, Bc, S, Tc, 0, 0, 0, &L)) ||
            (st = fam->backward(m, ws, scale)))
            goto done;
        if (stats) {
            stats->weighted_nll += L.nll;
            stats->sample_tokens += L.ntokens;
        }
        i0 = i1;
    }
    if (stats) stats->samples += (long)n;
done:
    fam->set_sentence_weights(ws, NULL);
    bleu_workspace_free(&bws);
    free(buf), free(r), free(w), free(csrc), free(ctin), free(ctout);
    return st;
}
