/*
 * shrink.c — unfolding a GRU ensemble into one model and shrinking it data-free (shrink.h).
 *
 * Legend: K members; per member E, He, Hd, A, O (equal across members), V target vocabulary;
 * the unfolded model has E' = K·E, He' = K·He, Hd' = K·Hd, A' = K·A, O' = K·O and K heads.
 * Member k's units of a layer of width W are [k·W, (k+1)·W) of the unfolded layer; a GRU's gate
 * rows g·W + i become g·W' + k·W + i; the encoder states' columns (forward | backward) become
 * k·He + i and He' + k·He + i.
 */
#include "train/shrink.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_dir.h"
#include "model/rnn_gru_desc.h"
#include "model/weights.h"

/* A tensor of the model being built: rows × cols floats (cols 1 for a vector). */
typedef struct {
    int rows, cols;
    float *x;
} mat_t;

typedef struct {
    rnn_gru_dims_t d;
    int share_emb;
    mat_t t[RG_COUNT];
} model_t;

static void model_free(model_t *m) {
    for (int i = 0; i < RG_COUNT; i++) free(m->t[i].x);
}

/* ------------------------------------------------------------ loading and checking the members */

static int files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int eq = fa && fb;
    while (eq) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) eq = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

/* Every vocabulary and SentencePiece model of member 1 must be in member k, byte for byte: the
 * unfolded model has one vocabulary. */
static tern_status_t check_side_files(const char *d0, const char *dk, int k) {
    static const char *names[] = {"shared_vocabulary.json", "source_vocabulary.json", "target_vocabulary.json",
                                  "shared_vocabulary.txt", "source_vocabulary.txt", "target_vocabulary.txt",
                                  "source.spm", "target.spm", "sentencepiece.model", "spm.model",
                                  "source.model", "target.model"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char a[4096], b[4096];
        path_join(a, sizeof a, d0, names[i]);
        path_join(b, sizeof b, dk, names[i]);
        int ea = file_exists(a), eb = file_exists(b);
        if (!ea && !eb) continue;
        if (ea != eb || !files_equal(a, b))
            return tern_error(TERN_ERR_MISMATCH, "shrink: member %d (%s): %s differs from member 1's (%s): the "
                              "members of an unfolded ensemble must share their vocabularies", k + 1, dk, names[i], d0);
    }
    return TERN_OK;
}

static tern_status_t load_member(weights_t **w, rnn_gru_dims_t *d, const char *dir, int k) {
    char p[4096];
    path_join(p, sizeof p, dir, "model.safetensors");
    if (!file_exists(p))
        return tern_error(TERN_ERR_IO, "shrink: member %d: %s not found (a Tern model directory is needed)", k + 1, p);
    tern_status_t st = weights_load_safetensors(w, p);
    if (st) return st;
    int64_t v;
    if (!weights_get_int(*w, rnn_gru_key_name(RGKEY_EMB), &v))
        return tern_error(TERN_ERR_UNSUPPORTED, "shrink: member %d (%s) is not an rnn-gru model (no config key '%s'): "
                          "tern shrink unfolds ensembles of GRU models", k + 1, dir, rnn_gru_key_name(RGKEY_EMB));
    if ((st = rnn_gru_desc_read(d, *w))) return st;
    if (d->layer_norm)
        return tern_error(TERN_ERR_UNSUPPORTED, "shrink: member %d (%s) is layer-normalized: the normalization of a "
                          "concatenated layer would mix the members' statistics, so it cannot be unfolded exactly",
                          k + 1, dir);
    if (d->att_heads > 1)
        return tern_error(TERN_ERR_UNSUPPORTED, "shrink: member %d (%s) already has %d attention heads (an unfolded "
                          "model): unfold the original members instead", k + 1, dir, d->att_heads);
    for (int i = 0; i < RG_COUNT; i++) {
        const tensor_t *t = rnn_gru_tensor_used(d, (rg_tensor_t)i) ? weights_get(*w, rnn_gru_tensor_name(i)) : NULL;
        if (t && t->dtype != DT_F32)
            return tern_error(TERN_ERR_UNSUPPORTED, "shrink: member %d (%s): tensor '%s' is not float32 (quantized "
                              "models cannot be unfolded: shrink the float32 models, then quantize)", k + 1, dir,
                              t->name);
    }
    return TERN_OK;
}

/* ------------------------------------------------------------ unfolding */

typedef enum { K_ID, K_E, K_HE, K_3HE, K_HD, K_3HD, K_DV, K_A, K_O } kind_t;

/* Row and column kinds of each tensor (K_ID: the vocabulary, or none). */
static const kind_t ROWK[RG_COUNT] = {
    [RG_ENC_EMB] = K_ID, [RG_ENC_F_WIH] = K_3HE, [RG_ENC_F_WHH] = K_3HE, [RG_ENC_F_BIH] = K_3HE,
    [RG_ENC_F_BHH] = K_3HE, [RG_ENC_B_WIH] = K_3HE, [RG_ENC_B_WHH] = K_3HE, [RG_ENC_B_BIH] = K_3HE,
    [RG_ENC_B_BHH] = K_3HE, [RG_DEC_EMB] = K_ID, [RG_INIT_W] = K_HD, [RG_INIT_B] = K_HD,
    [RG_GRU1_WIH] = K_3HD, [RG_GRU1_WHH] = K_3HD, [RG_GRU1_BIH] = K_3HD, [RG_GRU1_BHH] = K_3HD,
    [RG_ATT_WQ] = K_A, [RG_ATT_WK] = K_A, [RG_ATT_B] = K_A, [RG_ATT_V] = K_A,
    [RG_GRU2_WIH] = K_3HD, [RG_GRU2_WHH] = K_3HD, [RG_GRU2_BIH] = K_3HD, [RG_GRU2_BHH] = K_3HD,
    [RG_OUT_WS] = K_O, [RG_OUT_WC] = K_O, [RG_OUT_WE] = K_O, [RG_OUT_B] = K_O,
    [RG_PROJ_W] = K_ID, [RG_PROJ_B] = K_ID,
};
static const kind_t COLK[RG_COUNT] = {
    [RG_ENC_EMB] = K_E, [RG_ENC_F_WIH] = K_E, [RG_ENC_F_WHH] = K_HE, [RG_ENC_B_WIH] = K_E, [RG_ENC_B_WHH] = K_HE,
    [RG_DEC_EMB] = K_E, [RG_INIT_W] = K_DV, [RG_GRU1_WIH] = K_E, [RG_GRU1_WHH] = K_HD, [RG_ATT_WQ] = K_HD,
    [RG_ATT_WK] = K_DV, [RG_GRU2_WIH] = K_DV, [RG_GRU2_WHH] = K_HD, [RG_OUT_WS] = K_HD, [RG_OUT_WC] = K_DV,
    [RG_OUT_WE] = K_E, [RG_PROJ_W] = K_O,
};

/* Member k's index i of a dimension of kind c in the unfolded model. */
static int map_index(kind_t c, int k, int i, int K, const rnn_gru_dims_t *d) {
    int W;
    switch (c) {
    case K_ID: return i;
    case K_E: return k * d->emb + i;
    case K_HE: return k * d->enc_hidden + i;
    case K_HD: return k * d->dec_hidden + i;
    case K_A: return k * d->att + i;
    case K_O: return k * d->out + i;
    case K_3HE: W = d->enc_hidden; return (i / W) * K * W + k * W + i % W;
    case K_3HD: W = d->dec_hidden; return (i / W) * K * W + k * W + i % W;
    case K_DV: W = d->enc_hidden; return i < W ? k * W + i : K * W + k * W + (i - W);
    }
    return i;
}

static tern_status_t unfold(model_t *u, weights_t *const *w, const rnn_gru_dims_t *d, int K, const float *wk) {
    memset(u, 0, sizeof *u);
    u->d = *d;
    u->d.emb *= K, u->d.enc_hidden *= K, u->d.dec_hidden *= K, u->d.att *= K, u->d.out *= K;
    u->d.att_heads = K;
    u->d.tie_proj = 0; /* the projection reads K deep outputs, scaled by w_k: never the embeddings */
    u->share_emb = d->share_emb;
    for (int i = 0; i < RG_COUNT; i++) {
        if (!rnn_gru_tensor_used(&u->d, (rg_tensor_t)i)) continue;
        int r, c;
        rnn_gru_tensor_shape(&u->d, (rg_tensor_t)i, &r, &c);
        u->t[i] = (mat_t){r, c ? c : 1, calloc((size_t)r * (c ? c : 1), sizeof(float))};
        if (!u->t[i].x) return tern_error(TERN_ERR_NOMEM, "shrink: out of memory for '%s'", rnn_gru_tensor_name(i));
        int mr, mc;
        rnn_gru_tensor_shape(d, (rg_tensor_t)i, &mr, &mc);
        /* a tied member's projection is its target embeddings (O == E) */
        const char *name = rnn_gru_tensor_name(i == RG_PROJ_W && d->tie_proj ? RG_DEC_EMB : (rg_tensor_t)i);
        int proj = i == RG_PROJ_W || i == RG_PROJ_B;
        for (int k = 0; k < K; k++) {
            const tensor_t *t = weights_get(w[k], name);
            if (!t) return tern_error(TERN_ERR_FORMAT, "shrink: member %d: tensor '%s' is missing", k + 1, name);
            const float *x = t->data;
            float s = proj ? wk[k] : 1.0f;
            for (int a = 0; a < mr; a++) {
                int ra = map_index(ROWK[i], k, a, K, d);
                for (int b = 0; b < (mc ? mc : 1); b++) {
                    int cb = mc ? map_index(COLK[i], k, b, K, d) : 0;
                    u->t[i].x[(size_t)ra * u->t[i].cols + cb] += s * x[(size_t)a * (mc ? mc : 1) + b];
                }
            }
        }
    }
    return TERN_OK;
}

/* ------------------------------------------------------------ data-free neuron removal */

/* Where a layer's unit j lives: rows g·n + off + j (g < gates) of a producer, column off + j of a
 * consumer. n is the layer's width in that tensor's layout. */
typedef struct {
    rg_tensor_t t;
    int gates, off, n;
} place_t;

/* Cholesky of the n × n matrix a (lower, in place); 0 when not positive definite. */
static int cholesky(double *a, int n) {
    for (int j = 0; j < n; j++) {
        double s = a[(size_t)j * n + j];
        for (int k = 0; k < j; k++) s -= a[(size_t)j * n + k] * a[(size_t)j * n + k];
        if (!(s > 0)) return 0;
        a[(size_t)j * n + j] = sqrt(s);
        for (int i = j + 1; i < n; i++) {
            double t = a[(size_t)i * n + j];
            for (int k = 0; k < j; k++) t -= a[(size_t)i * n + k] * a[(size_t)j * n + k];
            a[(size_t)i * n + j] = t / a[(size_t)j * n + j];
        }
    }
    return 1;
}

/* x = A^{-1} b with A's Cholesky factor l (n × n). */
static void chol_solve(const double *l, int n, double *x) {
    for (int i = 0; i < n; i++) {
        double s = x[i];
        for (int k = 0; k < i; k++) s -= l[(size_t)i * n + k] * x[k];
        x[i] = s / l[(size_t)i * n + i];
    }
    for (int i = n - 1; i >= 0; i--) {
        double s = x[i];
        for (int k = i + 1; k < n; k++) s -= l[(size_t)k * n + i] * x[k];
        x[i] = s / l[(size_t)i * n + i];
    }
}

/* Removes units of one group [g0, g0 + gn) of a layer down to keep units: chooses them by the
 * incoming vectors' reconstruction (greedy, through the inverse Gram matrix: regressing u_j on the
 * other remaining vectors leaves a squared residual 1 / (G^-1)_jj, and removing j downdates G^-1
 * in O(n²)), folds each removed unit's outgoing columns into the kept ones (lambda = G_KK^-1 G_Kj)
 * and marks the removed units in dead. */
static tern_status_t shrink_group(model_t *m, const place_t *prod, int np, const place_t *cons, int nc, int g0,
                                  int gn, int keep, unsigned char *dead) {
    if (keep >= gn) return TERN_OK;
    int n = gn;
    /* Gram matrix of the incoming vectors (rows of every producer, all gates) */
    double *G = calloc((size_t)n * n, sizeof(double)), *Gi = calloc((size_t)n * n, sizeof(double));
    int *alive = malloc(sizeof(int) * n);
    if (!G || !Gi || !alive) {
        free(G), free(Gi), free(alive);
        return tern_error(TERN_ERR_NOMEM, "shrink: out of memory");
    }
    for (int p = 0; p < np; p++) {
        const mat_t *t = &m->t[prod[p].t];
        for (int g = 0; g < prod[p].gates; g++)
            for (int a = 0; a < n; a++) {
                const float *ra = t->x + (size_t)(g * prod[p].n + prod[p].off + g0 + a) * t->cols;
                for (int b = 0; b <= a; b++) {
                    const float *rb = t->x + (size_t)(g * prod[p].n + prod[p].off + g0 + b) * t->cols;
                    double s = 0;
                    for (int c = 0; c < t->cols; c++) s += (double)ra[c] * rb[c];
                    G[(size_t)a * n + b] += s;
                }
            }
    }
    double tr = 0;
    for (int a = 0; a < n; a++) {
        for (int b = 0; b < a; b++) G[(size_t)b * n + a] = G[(size_t)a * n + b];
        tr += G[(size_t)a * n + a];
    }
    /* a small ridge keeps G invertible where incoming vectors are linearly dependent */
    const double ridge = 1e-6 * (tr > 0 ? tr / n : 1.0);
    for (int a = 0; a < n; a++) G[(size_t)a * n + a] += ridge;
    /* Gi = G^-1 through its Cholesky factor, column by column */
    memcpy(Gi, G, sizeof(double) * n * n);
    double *L = malloc(sizeof(double) * n * n), *col = malloc(sizeof(double) * n);
    if (!L || !col || (memcpy(L, G, sizeof(double) * n * n), !cholesky(L, n))) {
        free(G), free(Gi), free(alive), free(L), free(col);
        return tern_error(TERN_ERR_INVALID_ARG, "shrink: a layer's Gram matrix is not positive definite");
    }
    for (int j = 0; j < n; j++) {
        memset(col, 0, sizeof(double) * n);
        col[j] = 1;
        chol_solve(L, n, col);
        for (int i = 0; i < n; i++) Gi[(size_t)i * n + j] = col[i];
    }
    for (int a = 0; a < n; a++) alive[a] = 1;
    for (int left = n; left > keep; left--) {
        int best = -1;
        double bres = INFINITY;
        for (int a = 0; a < n; a++)
            if (alive[a] && 1.0 / Gi[(size_t)a * n + a] < bres) bres = 1.0 / Gi[(size_t)a * n + a], best = a;
        alive[best] = 0;
        const double piv = Gi[(size_t)best * n + best];
        for (int a = 0; a < n; a++) {
            if (!alive[a]) continue;
            const double f = Gi[(size_t)a * n + best] / piv;
            for (int b = 0; b < n; b++)
                if (alive[b]) Gi[(size_t)a * n + b] -= f * Gi[(size_t)best * n + b];
        }
    }
    /* lambda for each removed unit over the kept ones: G_KK lambda = G_Kj */
    int *kp = malloc(sizeof(int) * keep), nk = 0;
    double *GK = malloc(sizeof(double) * keep * keep), *lam = malloc(sizeof(double) * keep);
    if (!kp || !GK || !lam) {
        free(G), free(Gi), free(alive), free(L), free(col), free(kp), free(GK), free(lam);
        return tern_error(TERN_ERR_NOMEM, "shrink: out of memory");
    }
    for (int a = 0; a < n; a++)
        if (alive[a]) kp[nk++] = a;
    for (int a = 0; a < keep; a++)
        for (int b = 0; b < keep; b++) GK[(size_t)a * keep + b] = G[(size_t)kp[a] * n + kp[b]];
    tern_status_t st = TERN_OK;
    if (!cholesky(GK, keep)) st = tern_error(TERN_ERR_INVALID_ARG, "shrink: the kept units' Gram matrix is singular");
    for (int j = 0; !st && j < n; j++) {
        if (alive[j]) continue;
        for (int a = 0; a < keep; a++) lam[a] = G[(size_t)kp[a] * n + j];
        chol_solve(GK, keep, lam);
        for (int c = 0; c < nc; c++) {
            mat_t *t = &m->t[cons[c].t];
            for (int r = 0; r < t->rows; r++) {
                float *row = t->x + (size_t)r * t->cols + cons[c].off + g0;
                const float x = row[j];
                for (int a = 0; a < keep; a++) row[kp[a]] += (float)(lam[a] * x);
            }
        }
        dead[g0 + j] = 1;
    }
    free(G), free(Gi), free(alive), free(L), free(col), free(kp), free(GK), free(lam);
    return st;
}

/* Drops the dead units (of a layer of width n) from the producers' rows and consumers' columns. */
static void compact(model_t *m, const place_t *prod, int np, const place_t *cons, int nc, int n,
                    const unsigned char *dead) {
    for (int p = 0; p < np; p++) {
        mat_t *t = &m->t[prod[p].t];
        int w = 0;
        for (int r = 0; r < t->rows; r++) {
            int g = r / prod[p].n, j = r % prod[p].n - prod[p].off; /* unit j of this layer, or outside it */
            (void)g;
            if (j >= 0 && j < n && dead[j]) continue;
            if (w != r) memmove(t->x + (size_t)w * t->cols, t->x + (size_t)r * t->cols, sizeof(float) * t->cols);
            w++;
        }
        t->rows = w;
    }
    for (int c = 0; c < nc; c++) {
        mat_t *t = &m->t[cons[c].t];
        int cols = 0;
        for (int j = 0; j < t->cols; j++) {
            int u = j - cons[c].off;
            cols += !(u >= 0 && u < n && dead[u]);
        }
        for (int r = 0; r < t->rows; r++) {
            float *row = t->x + (size_t)r * t->cols, *dst = t->x + (size_t)r * cols;
            int w = 0;
            for (int j = 0; j < t->cols; j++) {
                int u = j - cons[c].off;
                if (u >= 0 && u < n && dead[u]) continue;
                dst[w++] = row[j];
            }
        }
        t->cols = cols;
    }
}

/* Shrinks one layer of width n, in `groups` equal groups, to keep_per_group units each. */
static tern_status_t shrink_layer(model_t *m, const place_t *prod, int np, const place_t *cons, int nc, int n,
                                  int groups, int keep_per_group) {
    unsigned char *dead = calloc((size_t)n, 1);
    if (!dead) return tern_error(TERN_ERR_NOMEM, "shrink: out of memory");
    tern_status_t st = TERN_OK;
    for (int g = 0; !st && g < groups; g++)
        st = shrink_group(m, prod, np, cons, nc, g * (n / groups), n / groups, keep_per_group, dead);
    if (!st) compact(m, prod, np, cons, nc, n, dead);
    free(dead);
    return st;
}

static int keep_of(int width, double size) {
    int k = (int)floor(width * size + 0.5);
    return k < 1 ? 1 : k > width ? width : k;
}

static tern_status_t shrink_model(model_t *m, double size) {
    if (size >= 1.0) return TERN_OK;
    rnn_gru_dims_t *d = &m->d;
    const int h = d->att_heads > 1 ? d->att_heads : 1;
    tern_status_t st;
    /* the deep output (O) */
    {
        int O = d->out, k = keep_of(O, size);
        place_t P[] = {{RG_OUT_WS, 1, 0, O}, {RG_OUT_WC, 1, 0, O}, {RG_OUT_WE, 1, 0, O}, {RG_OUT_B, 1, 0, O}};
        place_t C[] = {{RG_PROJ_W, 1, 0, O}};
        if ((st = shrink_layer(m, P, 4, C, 1, O, 1, k))) return st;
        d->out = k;
    }
    /* the attention units (A), within each head */
    {
        int A = d->att, k = keep_of(A / h, size);
        place_t P[] = {{RG_ATT_WQ, 1, 0, A}, {RG_ATT_WK, 1, 0, A}, {RG_ATT_B, 1, 0, A}};
        place_t C[] = {{RG_ATT_V, 1, 0, A}};
        /* v is a vector (A rows × 1): as a consumer it is the row vector (1, A) */
        mat_t *v = &m->t[RG_ATT_V];
        v->cols = v->rows, v->rows = 1;
        st = shrink_layer(m, P, 3, C, 1, A, h, k);
        v->rows = v->cols, v->cols = 1;
        if (st) return st;
        d->att = k * h;
    }
    /* the decoder's GRU units (Hd): s_0, GRU1's s' and GRU2's s share them */
    {
        int H = d->dec_hidden, k = keep_of(H, size);
        place_t P[] = {{RG_INIT_W, 1, 0, H},   {RG_INIT_B, 1, 0, H},   {RG_GRU1_WIH, 3, 0, H}, {RG_GRU1_WHH, 3, 0, H},
                       {RG_GRU1_BIH, 3, 0, H}, {RG_GRU1_BHH, 3, 0, H}, {RG_GRU2_WIH, 3, 0, H}, {RG_GRU2_WHH, 3, 0, H},
                       {RG_GRU2_BIH, 3, 0, H}, {RG_GRU2_BHH, 3, 0, H}};
        place_t C[] = {{RG_GRU1_WHH, 1, 0, H}, {RG_GRU2_WHH, 1, 0, H}, {RG_ATT_WQ, 1, 0, H}, {RG_OUT_WS, 1, 0, H}};
        if ((st = shrink_layer(m, P, 10, C, 4, H, 1, k))) return st;
        d->dec_hidden = k;
    }
    /* the encoder's GRU units (He), forward then backward, within each head: the encoder states'
     * columns are [forward | backward], so the backward's consumers start after the forward's */
    {
        int H = d->enc_hidden, k = keep_of(H / h, size);
        for (int dir = 0; dir < 2; dir++) {
            rg_tensor_t wih = dir ? RG_ENC_B_WIH : RG_ENC_F_WIH, whh = dir ? RG_ENC_B_WHH : RG_ENC_F_WHH;
            rg_tensor_t bih = dir ? RG_ENC_B_BIH : RG_ENC_F_BIH, bhh = dir ? RG_ENC_B_BHH : RG_ENC_F_BHH;
            int off = dir ? k * h : 0; /* the forward has been shrunk when the backward is */
            place_t P[] = {{wih, 3, 0, H}, {whh, 3, 0, H}, {bih, 3, 0, H}, {bhh, 3, 0, H}};
            place_t C[] = {{whh, 1, 0, H},        {RG_INIT_W, 1, off, H},   {RG_ATT_WK, 1, off, H},
                           {RG_GRU2_WIH, 1, off, H}, {RG_OUT_WC, 1, off, H}};
            if ((st = shrink_layer(m, P, 4, C, 5, H, h, k))) return st;
        }
        d->enc_hidden = k * h;
    }
    return TERN_OK;
}

/* ------------------------------------------------------------ writing */

static tern_status_t write_model(const model_t *m, const char *out_dir, const char *first_dir, int K) {
    tensor_t t[RG_COUNT + RGKEY_COUNT];
    int nt = 0;
    for (int i = 0; i < RG_COUNT; i++) {
        if (!m->t[i].x || (i == RG_DEC_EMB && m->share_emb)) continue;
        const mat_t *x = &m->t[i];
        int r, c;
        rnn_gru_tensor_shape(&m->d, (rg_tensor_t)i, &r, &c);
        if (r != x->rows || (c ? c : 1) != x->cols) /* the layers' bookkeeping must give the description's shapes */
            return tern_error(TERN_ERR_INTERNAL, "shrink: '%s' is %d x %d, the shape says %d x %d",
                              rnn_gru_tensor_name(i), x->rows, x->cols, r, c);
        int vec = c == 0;
        t[nt] = (tensor_t){.name = rnn_gru_tensor_name(i), .dtype = DT_F32, .rank = vec ? 1 : 2,
                           .shape = {x->rows, vec ? 0 : x->cols}, .numel = (int64_t)x->rows * x->cols,
                           .data = x->x, .nbytes = (size_t)x->rows * x->cols * sizeof(float)};
        nt++;
    }
    /* the config keys: every size, layer_norm 0, and the heads */
    int32_t kv[RGKEY_COUNT] = {[RGKEY_EMB] = m->d.emb, [RGKEY_ENC_HIDDEN] = m->d.enc_hidden,
                               [RGKEY_DEC_HIDDEN] = m->d.dec_hidden, [RGKEY_ATT] = m->d.att,
                               [RGKEY_OUT] = m->d.out, [RGKEY_LAYER_NORM] = 0, [RGKEY_HEADS] = m->d.att_heads};
    for (int k = 0; k < RGKEY_COUNT; k++)
        t[nt++] = (tensor_t){.name = rnn_gru_key_name((rg_key_t)k), .dtype = DT_I32, .rank = 0, .numel = 1,
                             .data = &kv[k], .nbytes = sizeof(int32_t)};
    const char *an[1] = {rnn_gru_tensor_name(RG_DEC_EMB)}, *at[1] = {rnn_gru_tensor_name(RG_ENC_EMB)};
    char cnt[32];
    snprintf(cnt, sizeof cnt, "%d", K);
    const char *mk[] = {"ct2_spec", "unfolded_models"}, *mv[] = {RNN_GRU_SPEC_NAME, cnt};
    char p[4096];
    path_join(p, sizeof p, first_dir, "config.json");
    tern_status_t st = model_dir_mkdir(out_dir);
    if (!st) st = model_dir_write_weights(out_dir, t, nt, an, at, m->share_emb ? 1 : 0, mk, mv, 2);
    if (!st) st = model_dir_write_config(out_dir, p, NULL, NULL);
    if (!st) st = model_dir_copy_side_files(first_dir, out_dir);
    return st;
}

tern_status_t shrink_ensemble(const char *out_dir, const char *const *dirs, int K, const shrink_options_t *opt,
                              char *info, size_t info_n) {
    if (K < 1) return tern_error(TERN_ERR_INVALID_ARG, "shrink: no models");
    if (!(opt->size > 0 && opt->size <= 1))
        return tern_error(TERN_ERR_INVALID_ARG, "shrink: size %g is not in (0, 1] (a fraction of the unfolded "
                          "model's width)", opt->size);
    weights_t **w = calloc((size_t)K, sizeof *w);
    float *wk = malloc(sizeof(float) * K);
    if (!w || !wk) {
        free(w), free(wk);
        return tern_error(TERN_ERR_NOMEM, "shrink: out of memory");
    }
    rnn_gru_dims_t d0, d;
    tern_status_t st = TERN_OK;
    double sum = 0;
    for (int k = 0; k < K; k++) sum += opt->weights ? opt->weights[k] : 1.0;
    for (int k = 0; k < K; k++) wk[k] = (float)((opt->weights ? opt->weights[k] : 1.0) / sum);
    for (int k = 0; !st && k < K; k++) {
        st = load_member(&w[k], k ? &d : &d0, dirs[k], k);
        if (!st && k) st = check_side_files(dirs[0], dirs[k], k);
        if (!st && k &&
            (d.src_vocab != d0.src_vocab || d.tgt_vocab != d0.tgt_vocab || d.emb != d0.emb ||
             d.enc_hidden != d0.enc_hidden || d.dec_hidden != d0.dec_hidden || d.att != d0.att || d.out != d0.out ||
             d.share_emb != d0.share_emb || d.tie_proj != d0.tie_proj))
            st = tern_error(TERN_ERR_MISMATCH, "shrink: member %d (%s) has shape Vs %d Vt %d E %d He %d Hd %d A %d O %d "
                            "(shared %d tied %d), member 1 Vs %d Vt %d E %d He %d Hd %d A %d O %d (shared %d tied %d): "
                            "the members must have one shape", k + 1, dirs[k], d.src_vocab, d.tgt_vocab, d.emb,
                            d.enc_hidden, d.dec_hidden, d.att, d.out, d.share_emb, d.tie_proj, d0.src_vocab,
                            d0.tgt_vocab, d0.emb, d0.enc_hidden, d0.dec_hidden, d0.att, d0.out, d0.share_emb,
                            d0.tie_proj);
    }
    model_t m;
    memset(&m, 0, sizeof m);
    if (!st) st = unfold(&m, w, &d0, K, wk);
    for (int k = 0; k < K; k++) weights_free(w[k]);
    free(w), free(wk);
    rnn_gru_dims_t du = m.d;
    if (!st) st = shrink_model(&m, opt->size);
    if (!st) st = write_model(&m, out_dir, dirs[0], K);
    if (!st && info)
        snprintf(info, info_n, "%d member(s) of E %d He %d Hd %d A %d O %d; unfolded: He %d Hd %d A %d O %d, %d heads; "
                 "written at size %g: He %d Hd %d A %d O %d", K, d0.emb, d0.enc_hidden, d0.dec_hidden, d0.att, d0.out,
                 du.enc_hidden, du.dec_hidden, du.att, du.out, du.att_heads, opt->size, m.d.enc_hidden,
                 m.d.dec_hidden, m.d.att, m.d.out);
    model_free(&m);
    return st;
}
