/*
 * ensemble.c — an ensemble of models behind the model family table (see ensemble.h).
 *
 * Legend: K members, N sentences, R rows, V target vocabulary, S_k member k's padded source
 * length, S = max_k S_k.
 */
#include "model/ensemble.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

typedef struct {
    int K;
    tern_ensemble_mode_t mode;
    const model_family_t **fam; /* (K) */
    void **net;                 /* (K) */
    float *w;                   /* (K) normalized weights */
    float *logw;                /* (K) log w_k */
    int V;
} ensemble_t;

typedef struct {
    const ensemble_t *e;
    void **st;                  /* (K) member states */
    int R, S;
    int Vr;                     /* restricted vocabulary (set_vocab), 0: the whole one */
    int *S_k;                   /* (K) */
    /* encode: member k's sources are src[k * N_cap + i], len[k * N_cap + i] */
    const int **src;
    int *len;
    int N_cap;
    /* step workspace: one member's (R, V) scores and (R, S_k) attention */
    float *buf, *abuf;
    size_t buf_cap, abuf_cap;   /* floats */
} ensemble_state_t;

tern_status_t ensemble_new(void **out, const model_family_t *const *fams, void *const *nets, const float *weights,
                           int K, tern_ensemble_mode_t mode) {
    *out = NULL;
    if (K < 1) return tern_error(TERN_ERR_INVALID_ARG, "an ensemble needs at least one model");
    if (mode != TERN_ENSEMBLE_LOGPROB_MEAN && mode != TERN_ENSEMBLE_PROB_MEAN && mode != TERN_ENSEMBLE_LOGIT_MEAN)
        return tern_error(TERN_ERR_INVALID_ARG, "unknown ensemble mode %d", (int)mode);
    double sum = 0;
    for (int k = 0; k < K; k++) {
        float w = weights ? weights[k] : 1.0f;
        if (!(w > 0) || !isfinite(w))
            return tern_error(TERN_ERR_INVALID_ARG, "ensemble weight %d is %g (weights must be positive numbers)",
                              k + 1, (double)w);
        sum += w;
    }
    ensemble_t *e = calloc(1, sizeof *e);
    if (!e) return tern_error(TERN_ERR_NOMEM, "out of memory");
    e->fam = calloc((size_t)K, sizeof *e->fam);
    e->net = calloc((size_t)K, sizeof *e->net);
    e->w = calloc((size_t)K, sizeof *e->w);
    e->logw = calloc((size_t)K, sizeof *e->logw);
    if (!e->fam || !e->net || !e->w || !e->logw) {
        free(e->fam), free(e->net), free(e->w), free(e->logw), free(e);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    e->K = K;
    e->mode = mode;
    for (int k = 0; k < K; k++) {
        e->fam[k] = fams[k];
        e->net[k] = nets[k];
        e->w[k] = K == 1 ? 1.0f : (float)((weights ? weights[k] : 1.0f) / sum);
        e->logw[k] = logf(e->w[k]);
        tern_model_info_t in;
        memset(&in, 0, sizeof in);
        fams[k]->describe(nets[k], &in);
        if (k == 0) e->V = in.target_vocab_size;
        else if (in.target_vocab_size != e->V) {
            int V = e->V;
            free(e->fam), free(e->net), free(e->w), free(e->logw), free(e);
            return tern_error(TERN_ERR_MISMATCH, "ensemble: member %d has %d target tokens but member 1 has %d",
                              k + 1, in.target_vocab_size, V);
        }
    }
    *out = e;
    return TERN_OK;
}

static void ens_free(void *net) {
    ensemble_t *e = net;
    if (!e) return;
    free(e->fam), free(e->net), free(e->w), free(e->logw), free(e);
}

static void ens_describe(const void *net, tern_model_info_t *in) {
    const ensemble_t *e = net;
    size_t bytes = 0;
    int int8 = 1, max_src = 0, max_tgt = 0;
    for (int k = 0; k < e->K; k++) {
        tern_model_info_t m;
        memset(&m, 0, sizeof m);
        e->fam[k]->describe(e->net[k], &m);
        if (k == 0) {
            in->source_vocab_size = m.source_vocab_size;
            in->target_vocab_size = m.target_vocab_size;
        }
        bytes += m.weight_bytes;
        int8 &= m.int8 != 0;
        if (k == 0 || m.max_source_length < max_src) max_src = m.max_source_length;
        if (k == 0 || m.max_target_length < max_tgt) max_tgt = m.max_target_length;
    }
    in->family = "ensemble";
    in->max_source_length = max_src;
    in->max_target_length = max_tgt;
    in->int8 = int8;
    in->weight_bytes = bytes;
    in->num_members = e->K;
    in->ensemble.mode = e->mode;
    in->ensemble.weights = e->w;
}

static void ens_state_free(void *p) {
    ensemble_state_t *s = p;
    if (!s) return;
    for (int k = 0; s->st && k < s->e->K; k++) s->e->fam[k]->state_free(s->st[k]);
    free(s->st);
    free(s->S_k);
    free(s->src);
    free(s->len);
    aligned_free(s->buf);
    aligned_free(s->abuf);
    free(s);
}

static void *ens_state_new(const void *net) {
    const ensemble_t *e = net;
    ensemble_state_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->e = e;
    s->st = calloc((size_t)e->K, sizeof *s->st);
    s->S_k = calloc((size_t)e->K, sizeof *s->S_k);
    if (!s->st || !s->S_k) {
        ens_state_free(s);
        return NULL;
    }
    for (int k = 0; k < e->K; k++)
        if (!(s->st[k] = e->fam[k]->state_new(e->net[k]))) {
            ens_state_free(s);
            return NULL;
        }
    return s;
}

static int grow_floats(float **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 1024;
    while (n < need) n *= 2;
    float *p = aligned_alloc64(n * sizeof(float));
    if (!p) return -1;
    aligned_free(*buf);
    *buf = p;
    *cap = n;
    return 0;
}

static tern_status_t ens_encode(void *p, const int *const *src, const int *src_len, int N) {
    ensemble_state_t *s = p;
    const ensemble_t *e = s->e;
    if (N > s->N_cap) {
        free(s->src);
        free(s->len);
        s->src = malloc((size_t)e->K * N * sizeof *s->src);
        s->len = malloc((size_t)e->K * N * sizeof *s->len);
        s->N_cap = s->src && s->len ? N : 0;
        if (!s->src || !s->len) return tern_error(TERN_ERR_NOMEM, "ensemble: out of memory");
    }
    for (int i = 0; i < N; i++) {
        const int *q = src[i];
        for (int k = 0; k < e->K; k++) {
            int n = *q++;
            if (n < 1 || n > src_len[i])
                return tern_error(TERN_ERR_INVALID_ARG, "ensemble: source %d of member %d has length %d "
                                  "(must be 1..%d)", i, k + 1, n, src_len[i]);
            s->src[(size_t)k * s->N_cap + i] = q;
            s->len[(size_t)k * s->N_cap + i] = n;
            q += n;
        }
    }
    s->S = 0;
    for (int k = 0; k < e->K; k++) {
        tern_status_t st = e->fam[k]->encode(s->st[k], s->src + (size_t)k * s->N_cap, s->len + (size_t)k * s->N_cap, N);
        if (st) return st;
        s->S_k[k] = e->fam[k]->source_len(s->st[k]);
        if (s->S_k[k] > s->S) s->S = s->S_k[k];
    }
    s->R = N;
    return TERN_OK;
}

static int ens_source_len(const void *p) { return ((const ensemble_state_t *)p)->S; }

static tern_status_t ens_set_vocab(void *p, const int *ids, int n) {
    ensemble_state_t *s = p;
    for (int k = 0; k < s->e->K; k++) {
        if (!s->e->fam[k]->set_vocab)
            return tern_error(TERN_ERR_UNSUPPORTED, "ensemble member %d (%s) cannot restrict its vocabulary", k + 1,
                              s->e->fam[k]->name);
        tern_status_t st = s->e->fam[k]->set_vocab(s->st[k], ids, n);
        if (st) return st;
    }
    s->Vr = n > 0 && ids ? n : 0;
    return TERN_OK;
}

static tern_status_t ens_set_rows(void *p, const int *parent, const int *sent, int R) {
    ensemble_state_t *s = p;
    for (int k = 0; k < s->e->K; k++) {
        tern_status_t st = s->e->fam[k]->set_rows(s->st[k], parent, sent, R);
        if (st) return st;
    }
    s->R = R;
    return TERN_OK;
}

/* out = w out + ... : folds member k's log-probabilities lp (R, V) into out. prob-mean:
 * out = log(exp(out) + exp(log w_k + lp)), vectorized (logaddexp_inplace, AVX2 or AVX-512). */
static void combine(const ensemble_t *e, int k, float *out, const float *lp, size_t n) {
    const float w = e->w[k], lw = e->logw[k];
    if (e->mode != TERN_ENSEMBLE_PROB_MEAN) { /* logit-mean: the same sum, renormalized after the last member */
        if (k == 0) {
            if (w != 1.0f)
                for (size_t i = 0; i < n; i++) out[i] *= w;
        } else {
            for (size_t i = 0; i < n; i++) out[i] += w * lp[i];
        }
    } else {
        if (k == 0) {
            if (w != 1.0f)
                for (size_t i = 0; i < n; i++) out[i] += lw;
        } else {
            logaddexp_inplace(out, lp, lw, n);
        }
    }
}

static tern_status_t ens_step(void *p, const int *tokens, int t, float *out, float *attn) {
    ensemble_state_t *s = p;
    const ensemble_t *e = s->e;
    const int R = s->R, V = s->Vr ? s->Vr : e->V, S = s->S;
    if (e->K > 1 && grow_floats(&s->buf, &s->buf_cap, (size_t)R * V))
        return tern_error(TERN_ERR_NOMEM, "ensemble: out of memory");
    if (attn && grow_floats(&s->abuf, &s->abuf_cap, (size_t)R * (S ? S : 1)))
        return tern_error(TERN_ERR_NOMEM, "ensemble: out of memory");
    if (attn) memset(attn, 0, (size_t)R * S * sizeof(float));
    int nt = kernels_get_num_threads();
    for (int k = 0; k < e->K; k++) {
        float *lp = k == 0 ? out : s->buf;
        tern_status_t st = e->fam[k]->step(s->st[k], tokens, t, lp, attn ? s->abuf : NULL);
        if (st) return st;
        if (!e->fam[k]->step_logprobs) log_softmax_forward(lp, lp, R, V);
        /* rows on the translator's threads */
#pragma omp parallel for num_threads(nt) if (nt > 1 && (size_t)R * V >= 65536) schedule(static)
        for (int r = 0; r < R; r++)
            combine(e, k, out + (size_t)r * V, lp + (size_t)r * V, (size_t)V);
        if (attn) {
            const int Sk = s->S_k[k];
            const float w = e->w[k];
            for (int r = 0; r < R; r++)
                for (int j = 0; j < Sk; j++) attn[(size_t)r * S + j] += w * s->abuf[(size_t)r * Sk + j];
        }
    }
    /* logit-mean: sum_k w_k log p_k = sum_k w_k z_k - const per row, so its log-softmax is the softmax of
     * the mean logits (over a restricted vocabulary, of the restricted ones, as a member's own) */
    if (e->mode == TERN_ENSEMBLE_LOGIT_MEAN) log_softmax_forward(out, out, R, V);
    return TERN_OK;
}

const model_family_t model_family_ensemble = {
    .name = "ensemble",
    .desc = NULL /* its members' */,
    .step_logprobs = 1,
    .build = NULL, /* built by ensemble_new */
    .free = ens_free,
    .describe = ens_describe,
    .vocab_tensor = NULL,
    .state_new = ens_state_new,
    .state_free = ens_state_free,
    .encode = ens_encode,
    .source_len = ens_source_len,
    .step = ens_step,
    .set_rows = ens_set_rows,
    .set_vocab = ens_set_vocab,
};
