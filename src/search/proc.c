/*
 * proc.c — the processor chain of the search (proc.h) and its built-in first member, the minimum
 * length: no EOS before min_length output tokens (the EOS logit is removed before the softmax, so
 * the other tokens renormalize, as CTranslate2 does).
 */
#include "search/proc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static void minlen_apply(void *self, float *x, const search_rows_t *rows) {
    const proc_chain_t *c = self;
    if (rows->t >= c->min_length) return;
    for (int r = 0; r < rows->R; r++) x[(size_t)r * rows->V + c->eos] = -INFINITY;
}

tern_status_t proc_chain_init(proc_chain_t *c, const search_proc_t *procs, int np, int min_length, int eos,
                              int max_rows) {
    memset(c, 0, sizeof *c);
    if (np < 0 || np + 1 > SEARCH_MAX_PROCS)
        return tern_error(TERN_ERR_INVALID_ARG, "search: at most %d score processors (got %d)", SEARCH_MAX_PROCS - 1, np);
    c->min_length = min_length;
    c->eos = eos;
    if (min_length > 0) {
        search_proc_t m = {0};
        m.self = c;
        m.stage = SEARCH_STAGE_LOGITS;
        m.apply = minlen_apply;
        c->p[c->np++] = m;
    }
    for (int i = 0; i < np; i++) {
        const search_proc_t *p = &procs[i];
        if (p->history < 0 || p->history > SEARCH_MAX_HISTORY_LONG || p->state_ints < 0 || p->state_ints > SEARCH_MAX_STATE ||
            (p->stage != SEARCH_STAGE_LOGITS && p->stage != SEARCH_STAGE_LOGPROBS) || !p->apply ||
            (p->state_ints > 0 && (!p->init_state || !p->advance)))
            return tern_error(TERN_ERR_INVALID_ARG, "search: score processor %d is malformed", i);
        c->off[c->np] = c->W;
        c->W += p->state_ints;
        if (p->history > c->H) c->H = p->history;
        c->p[c->np++] = *p;
    }
    c->sel = -1;
    for (int i = 0; i < c->np; i++) {
        c->has_stage[c->p[i].stage] = 1;
        c->may_raise |= c->p[i].may_raise;
        if ((c->p[i].select || c->p[i].unmet) && c->sel < 0) c->sel = i;
    }
    size_t rows = (size_t)(max_rows > 0 ? max_rows : 1);
    if (c->H) {
        c->hist = malloc(rows * c->H * sizeof(int));
        c->hist2 = malloc(rows * c->H * sizeof(int));
    }
    if (c->W) {
        c->state = malloc(rows * c->W * sizeof(int));
        c->state2 = malloc(rows * c->W * sizeof(int));
    }
    if ((c->H && (!c->hist || !c->hist2)) || (c->W && (!c->state || !c->state2))) {
        proc_chain_free(c);
        return tern_error(TERN_ERR_NOMEM, "search: out of memory");
    }
    return TERN_OK;
}

void proc_chain_free(proc_chain_t *c) {
    free(c->hist), free(c->hist2), free(c->state), free(c->state2);
    c->hist = c->hist2 = c->state = c->state2 = NULL;
}

void proc_chain_start(proc_chain_t *c, int N) {
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < c->H; j++) c->hist[(size_t)n * c->H + j] = -1;
        for (int i = 0; i < c->np; i++)
            if (c->p[i].state_ints) c->p[i].init_state(c->p[i].self, n, c->state + (size_t)n * c->W + c->off[i]);
    }
}

void proc_chain_apply(proc_chain_t *c, int stage, float *x, int R, int V, int t, const int *sent) {
    if (!c->has_stage[stage]) return;
    search_rows_t rows = {t, R, V, sent, c->hist, c->H, c->state, c->W, 0};
    for (int i = 0; i < c->np; i++) {
        if (c->p[i].stage != stage) continue;
        rows.off = c->off[i];
        c->p[i].apply(c->p[i].self, x, &rows);
    }
}

void proc_chain_advance(proc_chain_t *c, const int *parent, const int *sent2, const int *tok2, int R2, int in_place) {
    const int H = c->H, W = c->W;
    if (!H && !W) return;
    int *h2 = in_place ? c->hist : c->hist2, *s2 = in_place ? c->state : c->state2;
    for (int i = 0; i < R2; i++) {
        int p = parent[i];
        if (H) {
            const int *src = c->hist + (size_t)p * H;
            int *dst = h2 + (size_t)i * H;
            for (int j = 0; j + 1 < H; j++) dst[j] = src[j + 1]; /* dst <= src in place: forward copy */
            dst[H - 1] = tok2[i];
        }
        if (W) {
            int *dst = s2 + (size_t)i * W;
            if (dst != c->state + (size_t)p * W) memmove(dst, c->state + (size_t)p * W, (size_t)W * sizeof(int));
            for (int k = 0; k < c->np; k++)
                if (c->p[k].state_ints) c->p[k].advance(c->p[k].self, sent2[i], dst + c->off[k], tok2[i]);
        }
    }
    if (!in_place) {
        int *t;
        t = c->hist, c->hist = c->hist2, c->hist2 = t;
        t = c->state, c->state = c->state2, c->state2 = t;
    }
}

float proc_chain_unnormalized(const proc_chain_t *c, int r, int n, int tok) {
    float u = 0.0f;
    for (int k = 0; k < c->np; k++) {
        const search_proc_t *p = &c->p[k];
        if (!p->unnormalized) continue;
        int tmp[SEARCH_MAX_STATE];
        memcpy(tmp, c->state + (size_t)r * c->W + c->off[k], (size_t)p->state_ints * sizeof(int));
        if (tok >= 0 && p->advance) p->advance(p->self, n, tmp, tok);
        u += p->unnormalized(p->self, n, tmp);
    }
    return u;
}

int proc_chain_unmet(const proc_chain_t *c, int r, int n, int tok) {
    if (c->sel < 0 || !c->p[c->sel].unmet) return 0;
    const search_proc_t *p = &c->p[c->sel];
    int tmp[SEARCH_MAX_STATE];
    memcpy(tmp, c->state + (size_t)r * c->W + c->off[c->sel], (size_t)p->state_ints * sizeof(int));
    if (tok >= 0 && p->advance) p->advance(p->self, n, tmp, tok);
    return p->unmet(p->self, n, tmp);
}

int search_procs_only_bans(const search_proc_t *procs, int np) {
    for (int i = 0; i < np; i++) {
        const search_proc_t *p = &procs[i];
        if (p->n_bans <= 0 || !p->bans || p->history || p->state_ints || p->may_raise || p->select || p->unmet ||
            p->unnormalized)
            return 0;
    }
    return 1;
}
