/*
 * rnn_gru.c — the GRU family (`architecture: "rnn-gru"`, rnn_gru_desc.h) behind the model family
 * table (family.h): a bidirectional GRU encoder and the conditional GRU decoder with deep output
 * of src/nn/rnn.h. Inference calls the same layer functions as training
 * (nn_bigru_forward, nn_additive_keys_forward, nn_cgru_step_forward), so the two cannot drift;
 * tests/c/test_rnn_gru.c ties them together.
 *
 * Legend: N sentences, S padded source length, R decoder rows, E embedding, He encoder GRU width,
 * Hd decoder GRU width, Dv = 2·He, A attention hidden size, O deep-output width, V target vocab.
 *
 * Per batch: the source embeddings (N, S, E), the encoder's input projections of all steps in one
 * GEMM per direction (inside nn_bigru_forward), the attention keys' projection (N, S, A) once.
 * Per step: the recurrent matrices multiply all R rows at once; nothing allocates once the state
 * has seen R rows and S source positions.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/family.h"
#include "model/rnn_gru_desc.h"
#include "kernels/kernels.h"
#include "nn/rnn.h"

typedef struct {
    rnn_gru_dims_t d;
    float *buf;               /* owned float32 copies of every tensor */
    const float *t[RG_COUNT]; /* views into buf (aliases resolved) */
    rnn_cell_t enc_f, enc_b;
    cgru_weights_t dec;
    cgru_dims_t cd;
    size_t weight_bytes;
    /* int8 (compute type int8, or int8 weights stored): every matrix as a per-output-row int8
     * linear_t run by linear_forward; the float32 copies serve the embeddings' lookups */
    int int8;
    linear_t lin[RG_COUNT]; /* the matrices (rnn_gru_tensor_is_matrix), biases fused where the layer has one */
    int8_t *qbuf;
    float *sbuf;
    int32_t *cbuf;
    tern_hparam_t hparams[7]; /* what tern_model_info() tells of the shape */
} gru_net_t;

typedef struct {
    const gru_net_t *net;
    int N, S, capN, capS;
    float *emb;     /* (N, S, E) */
    float *gates;   /* (2, N, S, 4He) (and the normalization values: nn_gru_gates_size) */
    float *enc;     /* (N, S, Dv) */
    float *kp;      /* (N, S, A) */
    int *slen;      /* (N) */
    int R, capR;
    float *s, *s_new; /* (R, Hd) */
    float *e;         /* (R, E) */
    float *ctx;       /* (R, Dv) */
    float *alpha;     /* (R, S) */
    float *halpha;    /* (R, S) one head's weights (several attention heads) */
    int *src_of_row, *src_tmp; /* (R) */
    float *scratch;   /* nn_cgru_step_scratch(R) and the decoder's initial state's scratch */
    size_t scratch_n;
    /* vocabulary map (set_vocab) */
    int vn, capv;
    float *vw, *vb; /* (vn, O), (vn) the projection's rows for ids */
    float *u;       /* (R, O) */
    /* int8 path */
    int8_t *vq;     /* (vn, O) the quantized projection's rows for ids */
    float *vs;      /* (vn) their scales */
    linear_t vlin;
    float *i8;      /* scratch of the int8 path (i8_n floats) */
    size_t i8_n;
    void *lws;      /* linear_forward's workspace (lws_n bytes) */
    size_t lws_n;
} gru_state_t;

/* u (R, O) = tanh(W_s s + W_c ctx + W_e e + b): the deep output (as nn/rnn.c's cGRU step computes it),
 * for the projection restricted by a vocabulary map. */
static void deep_output(float *u, const float *s, const float *ctx, const float *e, const cgru_weights_t *w, int R,
                        cgru_dims_t d) {
    gemm_f32(0, 1, R, d.O, d.H, 1.0f, s, d.H, w->out_ws, d.H, 0.0f, u, d.O);
    gemm_f32(0, 1, R, d.O, d.Dv, 1.0f, ctx, d.Dv, w->out_wc, d.Dv, 1.0f, u, d.O);
    gemm_f32(0, 1, R, d.O, d.E, 1.0f, e, d.E, w->out_we, d.E, 1.0f, u, d.O);
    if (w->out_b)
        for (int r = 0; r < R; r++)
            for (int k = 0; k < d.O; k++) u[(size_t)r * d.O + k] += w->out_b[k];
    activation_forward(u, (size_t)R * d.O, ACT_TANH);
}

static void net_free(gru_net_t *n) {
    if (!n) return;
    free(n->qbuf), free(n->sbuf), free(n->cbuf);
    free(n->buf);
    free(n);
}

/* The bias fused into each matrix's linear layer (none for the GRU matrices of a layer-normalized
 * model: their biases come after the normalization, in gru_proj). */
static const float *matrix_bias(const gru_net_t *n, rg_tensor_t i) {
    if (n->d.layer_norm && (i == RG_ENC_F_WIH || i == RG_ENC_F_WHH || i == RG_ENC_B_WIH || i == RG_ENC_B_WHH ||
                            i == RG_GRU1_WIH || i == RG_GRU1_WHH || i == RG_GRU2_WIH || i == RG_GRU2_WHH))
        return NULL;
    switch (i) {
    case RG_ENC_F_WIH: return n->t[RG_ENC_F_BIH];
    case RG_ENC_F_WHH: return n->t[RG_ENC_F_BHH];
    case RG_ENC_B_WIH: return n->t[RG_ENC_B_BIH];
    case RG_ENC_B_WHH: return n->t[RG_ENC_B_BHH];
    case RG_INIT_W: return n->t[RG_INIT_B];
    case RG_GRU1_WIH: return n->t[RG_GRU1_BIH];
    case RG_GRU1_WHH: return n->t[RG_GRU1_BHH];
    case RG_GRU2_WIH: return n->t[RG_GRU2_BIH];
    case RG_GRU2_WHH: return n->t[RG_GRU2_BHH];
    case RG_ATT_WK: return n->t[RG_ATT_B];
    case RG_OUT_WS: return n->t[RG_OUT_B];
    case RG_PROJ_W: return n->t[RG_PROJ_B];
    default: return NULL;
    }
}

/* Every matrix to int8 with per-output-row scales (CTranslate2's quantization, quantize_rows_s8). */
static tern_status_t quantize_net(gru_net_t *n) {
    size_t nq = 0, ns = 0;
    for (int i = 0; i < RG_COUNT; i++) {
        if (!rnn_gru_tensor_is_matrix((rg_tensor_t)i)) continue;
        int r, c;
        rnn_gru_tensor_shape(&n->d, (rg_tensor_t)i, &r, &c);
        nq += (size_t)r * c;
        ns += (size_t)r;
    }
    n->qbuf = malloc(nq);
    n->sbuf = malloc(ns * sizeof(float));
    n->cbuf = malloc(ns * sizeof(int32_t));
    if (!n->qbuf || !n->sbuf || !n->cbuf) return tern_error(TERN_ERR_NOMEM, "rnn-gru: out of memory for int8 weights");
    size_t oq = 0, os = 0, bytes = 0;
    for (int i = 0; i < RG_COUNT; i++) {
        int r, c;
        rnn_gru_tensor_shape(&n->d, (rg_tensor_t)i, &r, &c);
        if (!rnn_gru_tensor_is_matrix((rg_tensor_t)i)) {
            if (rnn_gru_tensor_used(&n->d, (rg_tensor_t)i)) bytes += (size_t)r * (c ? c : 1) * sizeof(float);
            continue;
        }
        linear_t *l = &n->lin[i];
        memset(l, 0, sizeof *l);
        l->kind = WEIGHT_S8;
        l->N = r;
        l->K = c;
        quantize_rows_s8(n->qbuf + oq, n->sbuf + os, n->t[i], r, c);
        l->q = n->qbuf + oq;
        l->scale = n->sbuf + os;
        l->bias = matrix_bias(n, (rg_tensor_t)i);
        linear_prepare(l, n->cbuf + os);
        oq += (size_t)r * c;
        os += (size_t)r;
        bytes += (size_t)r * c + (size_t)r * 8;
    }
    n->weight_bytes = bytes;
    return TERN_OK;
}

static tern_status_t gru_build(void **out, weights_t *w, const model_config_t *cfg, tern_compute_type_t compute,
                               unsigned flags) {
    (void)cfg, (void)compute, (void)flags;
    *out = NULL;
    gru_net_t *n = calloc(1, sizeof *n);
    if (!n) return tern_error(TERN_ERR_NOMEM, "out of memory");
    tern_status_t st = rnn_gru_desc_read(&n->d, w);
    if (st) {
        free(n);
        return st;
    }
    size_t off[RG_COUNT], total = 0;
    for (int i = 0; i < RG_COUNT; i++) {
        int r, c;
        off[i] = total;
        if (!rnn_gru_tensor_used(&n->d, (rg_tensor_t)i)) continue;
        rnn_gru_tensor_shape(&n->d, (rg_tensor_t)i, &r, &c);
        total += (size_t)r * (c ? c : 1);
    }
    n->buf = malloc(total * sizeof(float));
    if (!n->buf) {
        free(n);
        return tern_error(TERN_ERR_NOMEM, "%s: out of memory for the weights", weights_path(w));
    }
    for (int i = 0; i < RG_COUNT; i++) {
        if (!rnn_gru_tensor_used(&n->d, (rg_tensor_t)i)) continue;
        const tensor_t *t = weights_get(w, rnn_gru_tensor_name((rg_tensor_t)i));
        float *dst = n->buf + off[i];
        if ((st = weights_read_f32(w, t, dst))) { /* int8: divided by its per-row scales */
            free(n->buf);
            free(n);
            return st;
        }
        n->t[i] = dst;
    }
    n->weight_bytes = total * sizeof(float);
    const float *const *T = n->t;
    float *F[RG_COUNT];
    for (int i = 0; i < RG_COUNT; i++) F[i] = (float *)T[i];
    rnn_gru_views(&n->d, F, &n->enc_f, &n->enc_b, &n->dec);
    n->cd = (cgru_dims_t){.H = n->d.dec_hidden, .E = n->d.emb, .Dv = 2 * n->d.enc_hidden, .A = n->d.att,
                          .O = n->d.out, .V = n->d.tgt_vocab, .ln = n->d.layer_norm};
    int stored_int8 = desc_stored_int8(&RNN_GRU_DESC, w);
    n->int8 = compute == TERN_COMPUTE_INT8 || (compute == TERN_COMPUTE_AUTO && stored_int8);
    if (n->int8 && (st = quantize_net(n))) {
        net_free(n);
        return st;
    }
    tern_hparam_t *h = n->hparams;
    h[0] = (tern_hparam_t){"embedding_size", n->d.emb, NULL};
    h[1] = (tern_hparam_t){"encoder_hidden_size", n->d.enc_hidden, NULL};
    h[2] = (tern_hparam_t){"decoder_hidden_size", n->d.dec_hidden, NULL};
    h[3] = (tern_hparam_t){"attention_size", n->d.att, NULL};
    h[4] = (tern_hparam_t){"output_size", n->d.out, NULL};
    h[5] = (tern_hparam_t){"layer_norm", n->d.layer_norm, n->d.layer_norm ? "yes" : "no"};
    h[6] = (tern_hparam_t){"attention_heads", n->d.att_heads > 1 ? n->d.att_heads : 1, NULL};
    *out = n;
    return TERN_OK;
}

static void gru_free(void *net) { net_free(net); }

static void gru_describe(const void *net, tern_model_info_t *in) {
    const gru_net_t *n = net;
    in->family = RNN_GRU_ARCHITECTURE;
    in->source_vocab_size = n->d.src_vocab;
    in->target_vocab_size = n->d.tgt_vocab;
    in->max_source_length = 1024;
    in->max_target_length = 1024;
    in->int8 = n->int8;
    in->weight_bytes = n->weight_bytes;
    in->num_hparams = n->d.att_heads > 1 ? 7 : 6; /* heads only where an unfolded ensemble has several */
    in->hparams = n->hparams;
}

static const char *gru_vocab_tensor(const void *net, const weights_t *w, int target) {
    (void)net, (void)w;
    return rnn_gru_tensor_name(target ? RG_DEC_EMB : RG_ENC_EMB);
}

static void *gru_state_new(const void *net) {
    gru_state_t *s = calloc(1, sizeof *s);
    if (s) s->net = net;
    return s;
}

static void gru_state_free(void *p) {
    gru_state_t *s = p;
    if (!s) return;
    free(s->emb), free(s->gates), free(s->enc), free(s->kp), free(s->slen);
    free(s->s), free(s->s_new), free(s->e), free(s->ctx), free(s->alpha), free(s->halpha), free(s->src_of_row), free(s->src_tmp);
    free(s->scratch), free(s->vw), free(s->vb), free(s->u);
    free(s->vq), free(s->vs), free(s->i8), free(s->lws);
    free(s);
}

static int grow(void **p, size_t bytes) {
    void *q = realloc(*p, bytes ? bytes : 1);
    if (!q) return 0;
    *p = q;
    return 1;
}

/* Room for R rows over S source positions. */
static tern_status_t ensure_rows(gru_state_t *s, int R, int S) {
    const gru_net_t *n = s->net;
    const cgru_dims_t d = n->cd;
    if (R <= s->capR && S <= s->capS && s->scratch_n >= nn_cgru_step_scratch(R, d)) return TERN_OK;
    int cR = R > s->capR ? R : s->capR, cS = S > s->capS ? S : s->capS;
    size_t ns = nn_cgru_step_scratch(cR, d);
    if (ns < (size_t)cR * (d.Dv + d.H)) ns = (size_t)cR * (d.Dv + d.H);
    if (!grow((void **)&s->s, sizeof(float) * cR * d.H) || !grow((void **)&s->s_new, sizeof(float) * cR * d.H) ||
        !grow((void **)&s->e, sizeof(float) * cR * d.E) || !grow((void **)&s->ctx, sizeof(float) * cR * d.Dv) ||
        !grow((void **)&s->alpha, sizeof(float) * cR * cS) || !grow((void **)&s->halpha, sizeof(float) * cR * cS) || !grow((void **)&s->src_of_row, sizeof(int) * cR) ||
        !grow((void **)&s->src_tmp, sizeof(int) * cR) || !grow((void **)&s->scratch, sizeof(float) * ns) ||
        !grow((void **)&s->u, sizeof(float) * cR * d.O))
        return tern_error(TERN_ERR_NOMEM, "rnn-gru: out of memory for %d decoder rows", R);
    s->capR = cR;
    s->capS = cS > s->capS ? cS : s->capS;
    s->scratch_n = ns;
    return TERN_OK;
}

/* ------------------------------------------------------------ the int8 path
 * The same functions as nn/rnn.c's (checked against the float32 path in tests/c/test_rnn_gru.c),
 * with every matrix product a linear_forward of per-row int8 weights. */

static size_t i8_floats(const gru_net_t *n, int N, int S, int R) {
    const cgru_dims_t d = n->cd;
    int He = n->d.enc_hidden, Hd = d.H;
    size_t NS = (size_t)N * S;
    size_t enc = NS * 3 * He + (size_t)N * 3 * He + (size_t)2 * N * He + (size_t)N * (d.Dv + Hd);
    size_t step = (size_t)R * (6 * (size_t)Hd + Hd + d.A + 2 * (size_t)d.O);
    return enc > step ? enc : step;
}

static tern_status_t ensure_i8(gru_state_t *s, int N, int S, int R) {
    const gru_net_t *n = s->net;
    if (!n->int8) return TERN_OK;
    size_t need = i8_floats(n, N, S, R);
    if (need > s->i8_n) {
        float *p = realloc(s->i8, need * sizeof(float));
        if (!p) return tern_error(TERN_ERR_NOMEM, "rnn-gru: out of memory");
        s->i8 = p;
        s->i8_n = need;
    }
    int M = N * S > R ? N * S : R;
    size_t lw = 0;
    for (int i = 0; i < RG_COUNT; i++)
        if (rnn_gru_tensor_is_matrix((rg_tensor_t)i)) {
            size_t b = linear_workspace_size(&n->lin[i], M);
            if (b > lw) lw = b;
        }
    if (lw > s->lws_n) {
        free(s->lws);
        s->lws = aligned_alloc64(lw);
        if (!s->lws) {
            s->lws_n = 0;
            return tern_error(TERN_ERR_NOMEM, "rnn-gru: out of memory");
        }
        s->lws_n = lw;
    }
    return TERN_OK;
}

/* h (R, H) from gi = W_ih x + b_ih and gh = W_hh h_prev + b_hh (R, 3H, gates [r; z; n]) and h_prev
 * (NULL: zeros): torch.nn.GRUCell's combination, with the kernels' vectorized tanh (sigmoid(x) =
 * 0.5 + 0.5 tanh(x / 2), as the float32 layers compute it). gi is overwritten. */
static void gru_combine(float *h, float *gi, const float *gh, const float *hp, int R, int H) {
    for (int r = 0; r < R; r++) {
        float *a = gi + (size_t)r * 3 * H;
        const float *b = gh + (size_t)r * 3 * H, *p = hp ? hp + (size_t)r * H : NULL;
        float *o = h + (size_t)r * H, *rz = a, *n = a + 2 * H;
        for (int j = 0; j < 2 * H; j++) rz[j] = 0.5f * (a[j] + b[j]);
        activation_forward(rz, (size_t)2 * H, ACT_TANH);
        for (int j = 0; j < 2 * H; j++) rz[j] = 0.5f + 0.5f * rz[j];
        for (int j = 0; j < H; j++) n[j] += rz[j] * b[2 * H + j];
        activation_forward(n, (size_t)H, ACT_TANH);
        const float *z = rz + H;
        for (int j = 0; j < H; j++) o[j] = (1.0f - z[j]) * n[j] + z[j] * (p ? p[j] : 0.0f);
    }
}

/* g (M, 3H) = the GRU projection lin · x of M rows, then (layer-normalized model) its normalization
 * with the cell's gains, shifts and bias (the same function as the float32 layers'). */
static void gru_proj(float *g, const float *x, const linear_t *lin, int M, const float *gain, const float *beta,
                     const float *bias, int H, void *lws) {
    linear_forward(g, x, lin, M, lws);
    if (gain) nn_gru_ln_apply(g, 3 * H, M, H, gain, beta, bias);
}

/* One direction of the encoder over the projected inputs gi (N, S, 3He; used up as scratch by the gate
 * activations): out[n, t, off..off+He). */
static void enc_dir_i8(gru_state_t *s, float *gi, const linear_t *whh, const rnn_cell_t *cell, int reverse,
                       int off, float *h, float *hn, float *gh) {
    const gru_net_t *n = s->net;
    int N = s->N, S = s->S, He = n->d.enc_hidden, Dv = 2 * He;
    memset(h, 0, sizeof(float) * (size_t)N * He);
    for (int k = 0; k < S; k++) {
        int t = reverse ? S - 1 - k : k;
        gru_proj(gh, h, whh, N, cell->ln_hh_g, cell->ln_hh_b, cell->b_hh, He, s->lws);
        for (int b = 0; b < N; b++) {
            float *hb = h + (size_t)b * He;
            if (t < s->slen[b]) {
                gru_combine(hn + (size_t)b * He, gi + ((size_t)b * S + t) * 3 * He, gh + (size_t)b * 3 * He, hb, 1,
                            He);
                memcpy(hb, hn + (size_t)b * He, sizeof(float) * He);
            }
            memcpy(s->enc + ((size_t)b * S + t) * Dv + off, hb, sizeof(float) * He);
        }
    }
}

static void encode_i8(gru_state_t *s) {
    const gru_net_t *n = s->net;
    const cgru_dims_t d = n->cd;
    int N = s->N, S = s->S, He = n->d.enc_hidden;
    size_t NS = (size_t)N * S;
    float *gi = s->i8, *gh = gi + NS * 3 * He, *h = gh + (size_t)N * 3 * He, *hn = h + (size_t)N * He;
    float *mean = hn + (size_t)N * He, *pre = mean + (size_t)N * d.Dv;
    const rnn_cell_t *cf = &n->enc_f, *cb = &n->enc_b;
    gru_proj(gi, s->emb, &n->lin[RG_ENC_F_WIH], (int)NS, cf->ln_ih_g, cf->ln_ih_b, cf->b_ih, He, s->lws); /* all steps */
    enc_dir_i8(s, gi, &n->lin[RG_ENC_F_WHH], cf, 0, 0, h, hn, gh);
    gru_proj(gi, s->emb, &n->lin[RG_ENC_B_WIH], (int)NS, cb->ln_ih_g, cb->ln_ih_b, cb->b_ih, He, s->lws);
    enc_dir_i8(s, gi, &n->lin[RG_ENC_B_WHH], cb, 1, He, h, hn, gh);
    linear_forward(s->kp, s->enc, &n->lin[RG_ATT_WK], (int)NS, s->lws); /* keys, once */
    for (int b = 0; b < N; b++) {
        float *m = mean + (size_t)b * d.Dv;
        memset(m, 0, sizeof(float) * d.Dv);
        for (int j = 0; j < s->slen[b]; j++)
            for (int k = 0; k < d.Dv; k++) m[k] += s->enc[((size_t)b * S + j) * d.Dv + k];
        for (int k = 0; k < d.Dv; k++) m[k] *= 1.0f / (float)s->slen[b];
    }
    linear_forward(pre, mean, &n->lin[RG_INIT_W], N, s->lws);
    memcpy(s->s, pre, sizeof(float) * (size_t)N * d.H);
    activation_forward(s->s, (size_t)N * d.H, ACT_TANH);
}

/* The context and weights of R rows from their query projection qp (R, A): one additive attention,
 * or an unfolded ensemble's heads (nn_additive_attention_heads_apply). */
static void attend(gru_state_t *s, const float *qp) {
    const gru_net_t *n = s->net;
    const cgru_dims_t d = n->cd;
    if (n->d.att_heads > 1)
        nn_additive_attention_heads_apply(s->ctx, d.Dv, s->alpha, s->halpha, qp, s->kp, s->enc, s->slen,
                                          s->src_of_row, n->t[RG_ATT_V], s->R, s->S, d.A, d.Dv, n->d.att_heads);
    else
        nn_additive_attention_apply(s->ctx, d.Dv, s->alpha, qp, s->kp, s->enc, s->slen, s->src_of_row,
                                    n->t[RG_ATT_V], s->R, 1, s->S, d.A, d.Dv);
}

/* One float32 step of a model with several attention heads: nn_cgru_step_forward's layers with the
 * heads' attention between GRU1 and GRU2; the deep output and projection as with a vocabulary map. */
static void step_heads(gru_state_t *s, float *out) {
    const gru_net_t *n = s->net;
    const cgru_dims_t d = n->cd;
    const int R = s->R, H = d.H;
    size_t GL = nn_gru_gates_size((size_t)R, H, d.ln);
    float *g1 = s->scratch, *g2 = g1 + GL, *s1 = g2 + GL, *qp = s1 + (size_t)R * H;
    nn_gru_cell_forward(s1, g1, s->e, s->s, &n->dec.gru1, R, d.E, H);
    gemm_f32(0, 1, R, d.A, H, 1.0f, s1, H, n->dec.att_wq, H, 0.0f, qp, d.A);
    attend(s, qp);
    nn_gru_cell_forward(s->s_new, g2, s->ctx, s1, &n->dec.gru2, R, d.Dv, H);
    deep_output(s->u, s->s_new, s->ctx, s->e, &n->dec, R, d);
    if (s->vn) nn_linear_forward(out, s->u, s->vw, n->dec.out_bo ? s->vb : NULL, R, d.O, s->vn);
    else nn_linear_forward(out, s->u, n->dec.out_wo, n->dec.out_bo, R, d.O, d.V);
}

static void step_i8(gru_state_t *s, float *out) {
    const gru_net_t *n = s->net;
    const cgru_dims_t d = n->cd;
    int R = s->R, H = d.H;
    float *gi = s->i8, *gh = gi + (size_t)R * 3 * H, *s1 = gh + (size_t)R * 3 * H, *qp = s1 + (size_t)R * H;
    float *u2 = qp + (size_t)R * d.A, *u3 = u2 + (size_t)R * d.O;
    const rnn_cell_t *c1 = &n->dec.gru1, *c2 = &n->dec.gru2;
    gru_proj(gi, s->e, &n->lin[RG_GRU1_WIH], R, c1->ln_ih_g, c1->ln_ih_b, c1->b_ih, H, s->lws);
    gru_proj(gh, s->s, &n->lin[RG_GRU1_WHH], R, c1->ln_hh_g, c1->ln_hh_b, c1->b_hh, H, s->lws);
    gru_combine(s1, gi, gh, s->s, R, H);
    linear_forward(qp, s1, &n->lin[RG_ATT_WQ], R, s->lws);
    attend(s, qp);
    gru_proj(gi, s->ctx, &n->lin[RG_GRU2_WIH], R, c2->ln_ih_g, c2->ln_ih_b, c2->b_ih, H, s->lws);
    gru_proj(gh, s1, &n->lin[RG_GRU2_WHH], R, c2->ln_hh_g, c2->ln_hh_b, c2->b_hh, H, s->lws);
    gru_combine(s->s_new, gi, gh, s1, R, H);
    linear_forward(s->u, s->s_new, &n->lin[RG_OUT_WS], R, s->lws); /* + b */
    linear_forward(u2, s->ctx, &n->lin[RG_OUT_WC], R, s->lws);
    linear_forward(u3, s->e, &n->lin[RG_OUT_WE], R, s->lws);
    for (size_t i = 0; i < (size_t)R * d.O; i++) s->u[i] += u2[i] + u3[i];
    activation_forward(s->u, (size_t)R * d.O, ACT_TANH);
    linear_forward(out, s->u, s->vn ? &s->vlin : &n->lin[RG_PROJ_W], R, s->lws);
}

static tern_status_t gru_encode(void *p, const int *const *src, const int *src_len, int N) {
    gru_state_t *s = p;
    const gru_net_t *n = s->net;
    const rnn_gru_dims_t *D = &n->d;
    const cgru_dims_t d = n->cd;
    int S = 1;
    for (int i = 0; i < N; i++) {
        if (src_len[i] < 1) return tern_error(TERN_ERR_INVALID_ARG, "rnn-gru: empty source %d", i);
        if (src_len[i] > S) S = src_len[i];
        for (int j = 0; j < src_len[i]; j++)
            if (src[i][j] < 0 || src[i][j] >= D->src_vocab)
                return tern_error(TERN_ERR_INVALID_ARG, "rnn-gru: source id %d out of range [0, %d)", src[i][j],
                                  D->src_vocab);
    }
    int E = D->emb, He = D->enc_hidden;
    if (N > s->capN || S > s->capS || (size_t)N * S > (size_t)s->capN * s->capS) {
        int cN = N > s->capN ? N : s->capN, cS = S > s->capS ? S : s->capS;
        size_t NS = (size_t)cN * cS;
        if (!grow((void **)&s->emb, sizeof(float) * NS * E) || !grow((void **)&s->gates, sizeof(float) * 2 * nn_gru_gates_size(NS, He, D->layer_norm)) ||
            !grow((void **)&s->enc, sizeof(float) * NS * d.Dv) || !grow((void **)&s->kp, sizeof(float) * NS * d.A) ||
            !grow((void **)&s->slen, sizeof(int) * cN))
            return tern_error(TERN_ERR_NOMEM, "rnn-gru: out of memory for %d sentences of %d tokens", N, S);
        s->capN = cN;
        if (cS > s->capS) {
            s->capS = cS;
            s->capR = 0; /* the attention rows are S wide: regrow them */
        }
    }
    tern_status_t st = ensure_rows(s, N, S);
    if (!st) st = ensure_i8(s, N, S, N);
    if (st) return st;
    s->N = N;
    s->S = S;
    for (int i = 0; i < N; i++) {
        s->slen[i] = src_len[i];
        for (int j = 0; j < S; j++) {
            float *row = s->emb + ((size_t)i * S + j) * E;
            if (j < src_len[i]) memcpy(row, n->t[RG_ENC_EMB] + (size_t)src[i][j] * E, sizeof(float) * E);
            else memset(row, 0, sizeof(float) * E);
        }
    }
    size_t NS = (size_t)N * S;
    if (n->int8) {
        encode_i8(s);
        for (int i = 0; i < N; i++) s->src_of_row[i] = i;
        s->R = N;
        return TERN_OK;
    }
    nn_bigru_forward(s->enc, s->gates, s->gates + nn_gru_gates_size(NS, He, D->layer_norm), s->emb, &n->enc_f, &n->enc_b, s->slen, N, S, E, He);
    nn_additive_keys_forward(s->kp, s->enc, n->dec.att_wk, n->dec.att_b, N, S, d.Dv, d.A);
    nn_gru_init_state_forward(s->s, s->scratch, s->enc, s->slen, n->t[RG_INIT_W], n->t[RG_INIT_B], N, S, d.Dv, d.H);
    for (int i = 0; i < N; i++) s->src_of_row[i] = i;
    s->R = N;
    return TERN_OK;
}

static int gru_source_len(const void *p) { return ((const gru_state_t *)p)->S; }

static tern_status_t gru_step(void *p, const int *tokens, int t, float *out, float *attn) {
    (void)t;
    gru_state_t *s = p;
    const gru_net_t *n = s->net;
    const cgru_dims_t d = n->cd;
    int R = s->R, S = s->S;
    for (int r = 0; r < R; r++) {
        if (tokens[r] < 0 || tokens[r] >= d.V)
            return tern_error(TERN_ERR_INVALID_ARG, "rnn-gru: target id %d out of range [0, %d)", tokens[r], d.V);
        memcpy(s->e + (size_t)r * d.E, n->t[RG_DEC_EMB] + (size_t)tokens[r] * d.E, sizeof(float) * d.E);
    }
    if (n->int8) {
        step_i8(s, out);
    } else if (n->d.att_heads > 1) {
        step_heads(s, out);
    } else if (!s->vn) {
        nn_cgru_step_forward(s->s_new, s->ctx, s->alpha, out, s->scratch, s->e, s->s, s->kp, s->enc, s->slen,
                             s->src_of_row, &n->dec, R, S, d);
    } else {
        nn_cgru_step_forward(s->s_new, s->ctx, s->alpha, NULL, s->scratch, s->e, s->s, s->kp, s->enc, s->slen,
                             s->src_of_row, &n->dec, R, S, d);
        deep_output(s->u, s->s_new, s->ctx, s->e, &n->dec, R, d);
        nn_linear_forward(out, s->u, s->vw, n->dec.out_bo ? s->vb : NULL, R, d.O, s->vn);
    }
    float *tmp = s->s;
    s->s = s->s_new;
    s->s_new = tmp;
    if (attn) memcpy(attn, s->alpha, sizeof(float) * (size_t)R * S);
    return TERN_OK;
}

static tern_status_t gru_set_rows(void *p, const int *parent, const int *sent, int R) {
    gru_state_t *s = p;
    const int H = s->net->cd.H;
    tern_status_t st = ensure_rows(s, R, s->S);
    if (!st) st = ensure_i8(s, s->N, s->S, R);
    if (st) return st;
    for (int i = 0; i < R; i++) {
        if (parent[i] < 0 || parent[i] >= s->R || sent[i] < 0 || sent[i] >= s->N)
            return tern_error(TERN_ERR_INVALID_ARG, "rnn-gru: set_rows: row %d: parent %d (of %d rows), sentence %d "
                              "(of %d)", i, parent[i], s->R, sent[i], s->N);
        memcpy(s->s_new + (size_t)i * H, s->s + (size_t)parent[i] * H, sizeof(float) * H);
        s->src_tmp[i] = sent[i];
    }
    float *tmp = s->s;
    s->s = s->s_new;
    s->s_new = tmp;
    memcpy(s->src_of_row, s->src_tmp, sizeof(int) * R);
    s->R = R;
    return TERN_OK;
}

static tern_status_t gru_set_vocab(void *p, const int *ids, int vn) {
    gru_state_t *s = p;
    const gru_net_t *n = s->net;
    const cgru_dims_t d = n->cd;
    if (vn > s->capv) {
        if (!grow((void **)&s->vw, sizeof(float) * vn * d.O) || !grow((void **)&s->vb, sizeof(float) * vn) ||
            !grow((void **)&s->vq, (size_t)vn * d.O) || !grow((void **)&s->vs, sizeof(float) * vn))
            return tern_error(TERN_ERR_NOMEM, "rnn-gru: out of memory for a vocabulary of %d", vn);
        s->capv = vn;
    }
    for (int i = 0; i < vn; i++) {
        if (ids[i] < 0 || ids[i] >= d.V)
            return tern_error(TERN_ERR_INVALID_ARG, "rnn-gru: vocabulary map id %d out of range [0, %d)", ids[i], d.V);
        memcpy(s->vw + (size_t)i * d.O, n->dec.out_wo + (size_t)ids[i] * d.O, sizeof(float) * d.O);
        s->vb[i] = n->dec.out_bo ? n->dec.out_bo[ids[i]] : 0.0f;
    }
    if (n->int8) {
        const linear_t *P = &n->lin[RG_PROJ_W];
        for (int i = 0; i < vn; i++) {
            memcpy(s->vq + (size_t)i * d.O, P->q + (size_t)ids[i] * d.O, (size_t)d.O);
            s->vs[i] = P->scale[ids[i]];
        }
        s->vlin = (linear_t){.kind = WEIGHT_S8, .N = vn, .K = d.O, .q = s->vq, .scale = s->vs,
                             .bias = n->dec.out_bo ? s->vb : NULL, .comp = NULL};
        s->vlin.q_has_min = 0;
        for (size_t i = 0; i < (size_t)vn * d.O; i++) s->vlin.q_has_min |= s->vq[i] == -128;
    }
    s->vn = vn;
    return TERN_OK;
}

const model_family_t model_family_rnn_gru = {
    .name = RNN_GRU_ARCHITECTURE,
    .desc = &RNN_GRU_DESC,
    .step_logprobs = 0,
    .build = gru_build,
    .free = gru_free,
    .describe = gru_describe,
    .vocab_tensor = gru_vocab_tensor,
    .state_new = gru_state_new,
    .state_free = gru_state_free,
    .encode = gru_encode,
    .source_len = gru_source_len,
    .step = gru_step,
    .set_rows = gru_set_rows,
    .set_vocab = gru_set_vocab,
};
