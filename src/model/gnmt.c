/*
 * gnmt.c — the GNMT family (architecture "gnmt") behind the model family table (family.h).
 *
 * Legend: N sentences, S padded source length, R decoder rows, H hidden, A attention hidden, Dv
 * top encoder width, Vs / Vt vocabularies, Le / Ld layers. The model: gnmt_desc.h, docs/rnn.md.
 *
 * Every matrix (recurrent, input, attention, output) is a linear_t, so an int8 build
 * (TERN_COMPUTE_INT8) quantizes each per output row and linear_forward runs it in int8; the LSTM
 * biases b_ih + b_hh are fused into the input projection's bias. The encoder's input projections
 * of all N·S positions are one linear_forward per layer and direction; each step then multiplies
 * the N states by the recurrent matrix (M = N). A decoder step multiplies all R rows at once.
 * The nonlinearities (gates, attention scores and softmax) are computed in the order the training
 * layers (src/nn/rnn.c) compute them; tests/c/test_gnmt.c ties the two (parity).
 * GNMT's clips (gnmt/clip_delta, gnmt/clip_gamma: the cell state read clipped, residual outputs and
 * logits clipped) are the training forward's; an int8 model with a delta also stores its LSTM
 * states and layer outputs in 16-bit fixed point over [-delta, delta] (GNMT's quantized inference,
 * q16_store; docs/training.md "Quantization-aware training").
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/family.h"
#include "model/gnmt_desc.h"
#include "nn/rnn.h"

typedef struct {
    linear_t lin;
    float *w, *scale, *bias; /* owned */
    int8_t *q;
    int32_t *comp;
} glin_t;

typedef struct {
    gnmt_dims_t d;
    int Dv;
    float *enc_emb, *dec_emb; /* (Vs, H), (Vt, H) float copies (dec_emb == enc_emb when shared) */
    glin_t *enc_ih, *enc_hh;  /* Le + 1 (index Le: layer 0's reverse direction) */
    glin_t *dec_ih, *dec_hh;  /* Ld */
    glin_t att_q, att_k, proj;
    float *att_v;             /* (A) */
    float delta, gamma;       /* GNMT's clips (gnmt/clip_delta, gnmt/clip_gamma; 0: none) */
    int q16;                  /* GNMT's quantized inference (int8 with delta): states on a 16-bit grid */
    float q16_scale, q16_step; /* 32767 / delta, delta / 32767 */
    int int8;
    size_t weight_bytes;
    tern_hparam_t hparams[4]; /* what tern_model_info() tells of the shape */
} gnmt_net_t;

typedef struct {
    const gnmt_net_t *m;
    int N, S, R;
    int capNS, capN, capR, capRS;
    int *slen, *row_sent, *tmp_sent; /* (N), (R), (R) */
    /* encoder (N·S rows) */
    float *enc, *kp, *bufa, *bufb, *gx, *eh, *ec, *egh; /* enc (N,S,Dv) kp (N,S,A) buf (N,S,2H) gx (N,S,4H) eh/ec (N,H) egh (N,4H) */
    /* decoder (R rows) */
    float **h, **c, *htmp;    /* Ld x (R, H); htmp (R, H) for set_rows */
    float *e, *qp, *alpha, *ctx, *x, *g, *gh, *ya, *yb;
    void *lws;
    size_t lws_size;
    glin_t vm;                /* the restricted projection (set_vocab); vm.lin.N == 0: none */
    int vm_cap;
} gnmt_state_t;

/* ------------------------------------------------------------ network */

static void glin_free(glin_t *g) {
    aligned_free(g->w);
    aligned_free(g->q);
    free(g->scale);
    free(g->bias);
    free(g->comp);
    memset(g, 0, sizeof *g);
}

/* A linear layer from float weights w (N, K) (owned afterwards) and bias (N) (owned, may be NULL). */
static tern_status_t glin_make(glin_t *g, float *w, int N, int K, float *bias, int int8, size_t *bytes) {
    memset(g, 0, sizeof *g);
    g->bias = bias;
    g->lin.N = N;
    g->lin.K = K;
    g->lin.bias = bias;
    if (!int8) {
        g->w = w;
        g->lin.kind = WEIGHT_F32;
        g->lin.w = w;
        *bytes += (size_t)N * K * sizeof(float);
        return TERN_OK;
    }
    g->q = aligned_alloc64((size_t)N * K);
    g->scale = malloc((size_t)N * sizeof(float));
    g->comp = malloc((size_t)N * sizeof(int32_t));
    if (!g->q || !g->scale || !g->comp) {
        aligned_free(w);
        return tern_error(TERN_ERR_NOMEM, "gnmt: out of memory");
    }
    quantize_rows_s8(g->q, g->scale, w, N, K);
    aligned_free(w);
    g->lin.kind = WEIGHT_S8;
    g->lin.q = g->q;
    g->lin.scale = g->scale;
    linear_prepare(&g->lin, g->comp);
    *bytes += (size_t)N * K + (size_t)N * sizeof(float);
    return TERN_OK;
}

/* A tensor as a float32 copy (64-byte aligned), n elements expected (gnmt_desc_read checked it). */
static tern_status_t get_f32(float **out, const weights_t *w, const char *name, size_t n) {
    const tensor_t *t = weights_get(w, name);
    *out = NULL;
    if (!t) return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' is missing", weights_path(w), name);
    if ((size_t)t->numel != n)
        return tern_error(TERN_ERR_MISMATCH, "%s: tensor '%s' has %lld elements, %zu expected", weights_path(w), name,
                          (long long)t->numel, n);
    if (!t->data) return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' has no data", weights_path(w), name);
    float *p = aligned_alloc64(n * sizeof(float) + 64);
    if (!p) return tern_error(TERN_ERR_NOMEM, "out of memory for tensor '%s'", name);
    tern_status_t st = weights_read_f32(w, t, p); /* int8: divided by its per-row scales */
    if (st) {
        aligned_free(p);
        return st;
    }
    *out = p;
    return TERN_OK;
}

/* An LSTM module: ih (4H, K) with bias b_ih + b_hh, hh (4H, H) without. */
static tern_status_t load_lstm(gnmt_net_t *m, const weights_t *w, gnmt_module_t mod, int l, int K, glin_t *ih,
                               glin_t *hh) {
    int H = m->d.hidden;
    char n[96];
    float *wih = NULL, *whh = NULL, *bih = NULL, *bhh = NULL;
    tern_status_t st;
    if ((st = get_f32(&wih, w, gnmt_tensor_name(n, sizeof n, mod, l, GP_W_IH), (size_t)4 * H * K)) ||
        (st = get_f32(&whh, w, gnmt_tensor_name(n, sizeof n, mod, l, GP_W_HH), (size_t)4 * H * H)) ||
        (st = get_f32(&bih, w, gnmt_tensor_name(n, sizeof n, mod, l, GP_B_IH), (size_t)4 * H)) ||
        (st = get_f32(&bhh, w, gnmt_tensor_name(n, sizeof n, mod, l, GP_B_HH), (size_t)4 * H))) {
        aligned_free(wih), aligned_free(whh), aligned_free(bih), aligned_free(bhh);
        return st;
    }
    float *b = malloc((size_t)4 * H * sizeof(float));
    if (!b) {
        aligned_free(wih), aligned_free(whh), aligned_free(bih), aligned_free(bhh);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < 4 * H; i++) b[i] = bih[i] + bhh[i];
    aligned_free(bih), aligned_free(bhh);
    if ((st = glin_make(ih, wih, 4 * H, K, b, m->int8, &m->weight_bytes))) {
        free(b);
        aligned_free(whh);
        return st;
    }
    return glin_make(hh, whh, 4 * H, H, NULL, m->int8, &m->weight_bytes);
}

static void gn_free(void *net) {
    gnmt_net_t *m = net;
    if (!m) return;
    for (int l = 0; m->enc_ih && l <= m->d.enc_layers; l++) glin_free(&m->enc_ih[l]), glin_free(&m->enc_hh[l]);
    for (int l = 0; m->dec_ih && l < m->d.dec_layers; l++) glin_free(&m->dec_ih[l]), glin_free(&m->dec_hh[l]);
    free(m->enc_ih), free(m->enc_hh), free(m->dec_ih), free(m->dec_hh);
    glin_free(&m->att_q), glin_free(&m->att_k), glin_free(&m->proj);
    if (m->dec_emb != m->enc_emb) aligned_free(m->dec_emb);
    aligned_free(m->enc_emb);
    aligned_free(m->att_v);
    free(m);
}

static tern_status_t gn_build(void **net, weights_t *w, const model_config_t *cfg, tern_compute_type_t compute,
                              unsigned flags) {
    (void)cfg;
    (void)flags;
    *net = NULL;
    gnmt_net_t *m = calloc(1, sizeof *m);
    if (!m) return tern_error(TERN_ERR_NOMEM, "out of memory");
    tern_status_t st = gnmt_desc_read(&m->d, w);
    if (st) {
        free(m);
        return st;
    }
    const gnmt_dims_t *d = &m->d;
    int H = d->hidden, A = d->att, Le = d->enc_layers, Ld = d->dec_layers;
    m->Dv = gnmt_enc_width(d);
    static const char *clip_keys[2] = {GNMT_CLIP_DELTA_KEY, GNMT_CLIP_GAMMA_KEY};
    float *clip_vals[2] = {&m->delta, &m->gamma};
    for (int k = 0; k < 2; k++) {
        const tensor_t *t = weights_get(w, clip_keys[k]);
        if (!t) continue;
        float v = t->numel == 1 && t->data ? tensor_get_f32(t, 0) : -1.0f;
        if (!(v >= (k == 0 ? 1.0f : 0.0f) && v <= 1e6f)) { /* also NaN */
            gn_free(m);
            return tern_error(TERN_ERR_FORMAT, "%s: '%s' must be one number in [%s, 1e6]", weights_path(w),
                              clip_keys[k], k == 0 ? "1" : "0");
        }
        *clip_vals[k] = v;
    }
    m->int8 = compute == TERN_COMPUTE_INT8 || (compute == TERN_COMPUTE_AUTO && desc_stored_int8(&GNMT_DESC, w));
    if (m->int8 && m->delta > 0) { /* GNMT's quantized inference (Wu et al. 2016, section 6) */
        m->q16 = 1;
        m->q16_scale = 32767.0f / m->delta;
        m->q16_step = m->delta / 32767.0f;
    }
    m->enc_ih = calloc((size_t)Le + 1, sizeof *m->enc_ih);
    m->enc_hh = calloc((size_t)Le + 1, sizeof *m->enc_hh);
    m->dec_ih = calloc((size_t)Ld, sizeof *m->dec_ih);
    m->dec_hh = calloc((size_t)Ld, sizeof *m->dec_hh);
    if (!m->enc_ih || !m->enc_hh || !m->dec_ih || !m->dec_hh) {
        gn_free(m);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    char n[96];
    st = get_f32(&m->enc_emb, w, gnmt_tensor_name(n, sizeof n, GN_ENC_EMB, -1, GP_NONE), (size_t)d->src_vocab * H);
    if (!st) {
        if (d->share_emb) m->dec_emb = m->enc_emb;
        else st = get_f32(&m->dec_emb, w, gnmt_tensor_name(n, sizeof n, GN_DEC_EMB, -1, GP_NONE),
                          (size_t)d->tgt_vocab * H);
    }
    m->weight_bytes += ((size_t)d->src_vocab + (d->share_emb ? 0 : (size_t)d->tgt_vocab)) * H * sizeof(float);
    for (int l = 0; !st && l < Le; l++) {
        st = load_lstm(m, w, GN_ENC_LSTM, l, gnmt_enc_input(d, l), &m->enc_ih[l], &m->enc_hh[l]);
        if (!st && l == 0) st = load_lstm(m, w, GN_ENC_LSTM_REV, 0, gnmt_enc_input(d, 0), &m->enc_ih[Le], &m->enc_hh[Le]);
    }
    for (int l = 0; !st && l < Ld; l++)
        st = load_lstm(m, w, GN_DEC_LSTM, l, gnmt_dec_input(d, l), &m->dec_ih[l], &m->dec_hh[l]);
    float *wq = NULL, *wk = NULL, *bk = NULL, *pw = NULL, *pb = NULL;
    if (!st && !(st = get_f32(&wq, w, gnmt_tensor_name(n, sizeof n, GN_ATT_WQ, -1, GP_NONE), (size_t)A * H)))
        st = glin_make(&m->att_q, wq, A, H, NULL, m->int8, &m->weight_bytes);
    if (!st && !(st = get_f32(&wk, w, gnmt_tensor_name(n, sizeof n, GN_ATT_WK, -1, GP_NONE), (size_t)A * m->Dv)) &&
        !(st = get_f32(&bk, w, gnmt_tensor_name(n, sizeof n, GN_ATT_B, -1, GP_NONE), (size_t)A))) {
        st = glin_make(&m->att_k, wk, A, m->Dv, bk, m->int8, &m->weight_bytes);
        if (st) aligned_free(bk);
    } else aligned_free(wk);
    if (!st) st = get_f32(&m->att_v, w, gnmt_tensor_name(n, sizeof n, GN_ATT_V, -1, GP_NONE), (size_t)A);
    if (!st && !(st = get_f32(&pw, w, gnmt_tensor_name(n, sizeof n, GN_PROJ_W, -1, GP_NONE), (size_t)d->tgt_vocab * H)) &&
        !(st = get_f32(&pb, w, gnmt_tensor_name(n, sizeof n, GN_PROJ_B, -1, GP_NONE), (size_t)d->tgt_vocab))) {
        st = glin_make(&m->proj, pw, d->tgt_vocab, H, pb, m->int8, &m->weight_bytes);
        if (st) aligned_free(pb);
    } else aligned_free(pw);
    /* the owned biases were malloc'd by get_f32 as aligned memory: keep them in aligned form */
    if (st) {
        gn_free(m);
        return st;
    }
    tern_hparam_t *h = m->hparams;
    h[0] = (tern_hparam_t){"encoder_layers", m->d.enc_layers, NULL};
    h[1] = (tern_hparam_t){"decoder_layers", m->d.dec_layers, NULL};
    h[2] = (tern_hparam_t){"hidden_size", m->d.hidden, NULL};
    h[3] = (tern_hparam_t){"attention_size", m->d.att, NULL};
    *net = m;
    return TERN_OK;
}

static void gn_describe(const void *net, tern_model_info_t *in) {
    const gnmt_net_t *m = net;
    in->family = "gnmt";
    in->source_vocab_size = m->d.src_vocab;
    in->target_vocab_size = m->d.tgt_vocab;
    in->max_source_length = 4096;
    in->max_target_length = 4096;
    in->int8 = m->int8;
    in->weight_bytes = m->weight_bytes;
    in->num_hparams = 4;
    in->hparams = m->hparams;
}

static const char *gn_vocab_tensor(const void *net, const weights_t *w, int target) {
    (void)net;
    (void)w;
    return desc_global_name(&GNMT_DESC, target ? GN_DEC_EMB : GN_ENC_EMB, GP_NONE);
}

/* ------------------------------------------------------------ state */

static void gn_state_free(void *p) {
    gnmt_state_t *s = p;
    if (!s) return;
    free(s->slen), free(s->row_sent), free(s->tmp_sent);
    float *bufs[] = {s->enc, s->kp, s->bufa, s->bufb, s->gx, s->eh, s->ec, s->egh, s->htmp, s->e, s->qp, s->alpha,
                     s->ctx, s->x, s->g, s->gh, s->ya, s->yb};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) aligned_free(bufs[i]);
    for (int l = 0; s->h && l < s->m->d.dec_layers; l++) aligned_free(s->h[l]), aligned_free(s->c[l]);
    free(s->h), free(s->c);
    aligned_free(s->lws);
    aligned_free(s->vm.w), aligned_free(s->vm.q);
    free(s->vm.scale), free(s->vm.bias), free(s->vm.comp);
    free(s);
}

static void *gn_state_new(const void *net) {
    gnmt_state_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->m = net;
    s->h = calloc((size_t)s->m->d.dec_layers, sizeof *s->h);
    s->c = calloc((size_t)s->m->d.dec_layers, sizeof *s->c);
    if (!s->h || !s->c) {
        gn_state_free(s);
        return NULL;
    }
    return s;
}

/* (Re)allocates *p to n floats when cap < need (contents lost). */
static int grow(float **p, size_t n) {
    aligned_free(*p);
    *p = aligned_alloc64((n ? n : 1) * sizeof(float));
    return *p != NULL;
}

static tern_status_t ensure_lws(gnmt_state_t *s, int M) {
    const gnmt_net_t *m = s->m;
    size_t need = linear_workspace_size(&m->proj.lin, M);
    for (int l = 0; l <= m->d.enc_layers; l++) {
        size_t a = linear_workspace_size(&m->enc_ih[l].lin, M), b = linear_workspace_size(&m->enc_hh[l].lin, M);
        if (a > need) need = a;
        if (b > need) need = b;
    }
    for (int l = 0; l < m->d.dec_layers; l++) {
        size_t a = linear_workspace_size(&m->dec_ih[l].lin, M), b = linear_workspace_size(&m->dec_hh[l].lin, M);
        if (a > need) need = a;
        if (b > need) need = b;
    }
    size_t a = linear_workspace_size(&m->att_q.lin, M), b = linear_workspace_size(&m->att_k.lin, M);
    if (a > need) need = a;
    if (b > need) need = b;
    if (need <= s->lws_size) return TERN_OK;
    aligned_free(s->lws);
    s->lws = aligned_alloc64(need);
    s->lws_size = s->lws ? need : 0;
    return s->lws ? TERN_OK : tern_error(TERN_ERR_NOMEM, "gnmt: out of memory");
}

/* The rows' buffers for R rows (and R·S attention entries); keeps the decoder state's contents. */
static tern_status_t ensure_rows(gnmt_state_t *s, int R) {
    const gnmt_net_t *m = s->m;
    size_t H = (size_t)m->d.hidden, A = (size_t)m->d.att, Dv = (size_t)m->Dv;
    if (R > s->capR) {
        int cap = s->capR ? s->capR : 8;
        while (cap < R) cap *= 2;
        size_t C = (size_t)cap;
        for (int l = 0; l < m->d.dec_layers; l++) {
            float *nh = aligned_alloc64(C * H * sizeof(float)), *nc = aligned_alloc64(C * H * sizeof(float));
            if (!nh || !nc) {
                aligned_free(nh), aligned_free(nc);
                return tern_error(TERN_ERR_NOMEM, "gnmt: out of memory");
            }
            if (s->h[l]) memcpy(nh, s->h[l], (size_t)s->R * H * sizeof(float)), memcpy(nc, s->c[l], (size_t)s->R * H * sizeof(float));
            aligned_free(s->h[l]), aligned_free(s->c[l]);
            s->h[l] = nh, s->c[l] = nc;
        }
        int *rs = malloc(C * sizeof(int)), *ts = malloc(C * sizeof(int));
        if (!rs || !ts) {
            free(rs), free(ts);
            return tern_error(TERN_ERR_NOMEM, "gnmt: out of memory");
        }
        if (s->row_sent) memcpy(rs, s->row_sent, (size_t)s->R * sizeof(int));
        free(s->row_sent), free(s->tmp_sent);
        s->row_sent = rs, s->tmp_sent = ts;
        if (!grow(&s->htmp, C * H) || !grow(&s->e, C * H) || !grow(&s->qp, C * A) || !grow(&s->ctx, C * Dv) ||
            !grow(&s->x, C * (H + Dv)) || !grow(&s->g, C * 4 * H) || !grow(&s->gh, C * 4 * H) || !grow(&s->ya, C * H) ||
            !grow(&s->yb, C * H))
            return tern_error(TERN_ERR_NOMEM, "gnmt: out of memory");
        s->capR = cap;
        s->capRS = 0;
    }
    if ((size_t)R * s->S > (size_t)s->capRS) {
        if (!grow(&s->alpha, (size_t)s->capR * s->S)) return tern_error(TERN_ERR_NOMEM, "gnmt: out of memory");
        s->capRS = s->capR * s->S;
    }
    return ensure_lws(s, R);
}

/* ------------------------------------------------------------ the computations */


/* The LSTM's pointwise part for one row: training's own (nn/rnn.h). */
/* GNMT's quantized inference: v clipped to [-δ, δ] and stored as the 16-bit integer
 * q = nearbyint(v · (32767 / δ)) (|q| <= 32767), read back as q · (δ / 32767) (each step a float
 * operation of its own; the float holds exactly what the int16 stands for). */
static void q16_store(const gnmt_net_t *m, float *v, size_t n) {
    if (!m->q16) return;
    for (size_t i = 0; i < n; i++) {
        float x = v[i] > m->delta ? m->delta : v[i] < -m->delta ? -m->delta : v[i];
        float q = nearbyintf(x * m->q16_scale);
        v[i] = q * m->q16_step;
    }
}

static void lstm_point(const gnmt_net_t *m, float *h, float *c, float *g, const float *cp, int H) {
    nn_lstm_point(h, c, g, cp, H, m->delta);
    q16_store(m, c, (size_t)H);
    q16_store(m, h, (size_t)H);
}

/* One encoder direction over the N·S rows of x (K wide): out[b, t] (row stride ldo) = h after
 * step t (carried past len). */
static void enc_direction(gnmt_state_t *s, float *out, int ldo, const float *x, const glin_t *ih, const glin_t *hh,
                          int reverse) {
    const gnmt_net_t *m = s->m;
    int H = m->d.hidden, N = s->N, S = s->S;
    size_t G = (size_t)4 * H;
    linear_forward(s->gx, x, &ih->lin, N * S, s->lws);
    memset(s->eh, 0, (size_t)N * H * sizeof(float));
    memset(s->ec, 0, (size_t)N * H * sizeof(float));
    for (int k = 0; k < S; k++) {
        int t = reverse ? S - 1 - k : k;
        if (k) linear_forward(s->egh, s->eh, &hh->lin, N, s->lws);
        else memset(s->egh, 0, (size_t)N * G * sizeof(float));
        for (int b = 0; b < N; b++) {
            float *hb = s->eh + (size_t)b * H, *cb = s->ec + (size_t)b * H;
            if (t < s->slen[b]) {
                float *g = s->gx + ((size_t)b * S + t) * G;
                const float *gh = s->egh + (size_t)b * G;
                for (size_t j = 0; j < G; j++) g[j] += gh[j];
                lstm_point(m, hb, cb, g, cb, H);
            }
            memcpy(out + ((size_t)b * S + t) * ldo, hb, (size_t)H * sizeof(float));
        }
    }
}

static tern_status_t gn_encode(void *state, const int *const *src, const int *src_len, int N) {
    gnmt_state_t *s = state;
    const gnmt_net_t *m = s->m;
    int H = m->d.hidden, A = m->d.att, Le = m->d.enc_layers, S = 1;
    for (int i = 0; i < N; i++) {
        if (src_len[i] < 1) return tern_error(TERN_ERR_INVALID_ARG, "gnmt: sentence %d is empty", i);
        if (src_len[i] > S) S = src_len[i];
        for (int j = 0; j < src_len[i]; j++)
            if (src[i][j] < 0 || src[i][j] >= m->d.src_vocab)
                return tern_error(TERN_ERR_INVALID_ARG, "gnmt: source id %d outside the vocabulary (%d)", src[i][j],
                                  m->d.src_vocab);
    }
    size_t NS = (size_t)N * S;
    if (NS > (size_t)s->capNS) {
        if (!grow(&s->enc, NS * (size_t)m->Dv) || !grow(&s->kp, NS * A) || !grow(&s->bufa, NS * 2 * H) ||
            !grow(&s->bufb, NS * 2 * H) || !grow(&s->gx, NS * 4 * H))
            return tern_error(TERN_ERR_NOMEM, "gnmt: out of memory");
        s->capNS = (int)NS;
    }
    if (N > s->capN) {
        free(s->slen);
        s->slen = malloc((size_t)N * sizeof(int));
        if (!s->slen || !grow(&s->eh, (size_t)N * H) || !grow(&s->ec, (size_t)N * H) || !grow(&s->egh, (size_t)N * 4 * H))
            return tern_error(TERN_ERR_NOMEM, "gnmt: out of memory");
        s->capN = N;
    }
    s->N = N, s->S = S, s->R = 0;
    tern_status_t st = ensure_lws(s, (int)NS);
    if (st) return st;
    for (int i = 0; i < N; i++) s->slen[i] = src_len[i];
    /* embeddings (positions past a sentence's end: zeros, never read by an active step) */
    float *x = s->bufb;
    for (int b = 0; b < N; b++)
        for (int t = 0; t < S; t++) {
            float *r = x + ((size_t)b * S + t) * H;
            if (t < src_len[b]) memcpy(r, m->enc_emb + (size_t)src[b][t] * H, (size_t)H * sizeof(float));
            else memset(r, 0, (size_t)H * sizeof(float));
        }
    /* layer 0: bidirectional into bufa (N, S, 2H) */
    enc_direction(s, s->bufa, 2 * H, x, &m->enc_ih[0], &m->enc_hh[0], 0);
    enc_direction(s, s->bufa + H, 2 * H, x, &m->enc_ih[Le], &m->enc_hh[Le], 1);
    float *in = s->bufa, *out = s->bufb;
    for (int l = 1; l < Le; l++) {
        enc_direction(s, out, H, in, &m->enc_ih[l], &m->enc_hh[l], 0);
        if (l >= 2) {
            for (size_t i = 0; i < NS * H; i++) out[i] += in[i];
            nn_clip_forward(out, NS * H, m->delta);
            q16_store(m, out, NS * H);
        }
        float *t = in;
        in = out;
        out = t;
    }
    memcpy(s->enc, in, NS * (size_t)m->Dv * sizeof(float));
    linear_forward(s->kp, s->enc, &m->att_k.lin, (int)NS, s->lws);
    /* one row per sentence, zero states */
    if ((st = ensure_rows(s, N))) return st;
    for (int l = 0; l < m->d.dec_layers; l++) {
        memset(s->h[l], 0, (size_t)N * H * sizeof(float));
        memset(s->c[l], 0, (size_t)N * H * sizeof(float));
    }
    for (int i = 0; i < N; i++) s->row_sent[i] = i;
    s->R = N;
    return TERN_OK;
}

static int gn_source_len(const void *state) { return ((const gnmt_state_t *)state)->S; }

/* One LSTM layer over the R rows: gates = ih(x) + hh(h); h, c updated in place. */
static void dec_layer(gnmt_state_t *s, int l, const float *x, int R) {
    const gnmt_net_t *m = s->m;
    int H = m->d.hidden;
    size_t G = (size_t)4 * H;
    linear_forward(s->g, x, &m->dec_ih[l].lin, R, s->lws);
    linear_forward(s->gh, s->h[l], &m->dec_hh[l].lin, R, s->lws);
    for (int r = 0; r < R; r++) {
        float *g = s->g + (size_t)r * G;
        const float *gh = s->gh + (size_t)r * G;
        for (size_t j = 0; j < G; j++) g[j] += gh[j];
        lstm_point(m, s->h[l] + (size_t)r * H, s->c[l] + (size_t)r * H, g, s->c[l] + (size_t)r * H, H);
    }
}

static tern_status_t gn_step(void *state, const int *tokens, int t, float *out, float *attn) {
    (void)t;
    gnmt_state_t *s = state;
    const gnmt_net_t *m = s->m;
    int R = s->R, H = m->d.hidden, A = m->d.att, Dv = m->Dv, S = s->S, KI = H + Dv;
    for (int r = 0; r < R; r++) {
        if (tokens[r] < 0 || tokens[r] >= m->d.tgt_vocab)
            return tern_error(TERN_ERR_INVALID_ARG, "gnmt: target id %d outside the vocabulary (%d)", tokens[r],
                              m->d.tgt_vocab);
        memcpy(s->e + (size_t)r * H, m->dec_emb + (size_t)tokens[r] * H, (size_t)H * sizeof(float));
    }
    /* the attention from the bottom layer's previous output h[0] */
    linear_forward(s->qp, s->h[0], &m->att_q.lin, R, s->lws);
    nn_additive_attention_apply(s->ctx, Dv, s->alpha, s->qp, s->kp, s->enc, s->slen, s->row_sent, m->att_v, R, 1, S,
                                A, Dv);
    /* layer 0 over [e; a] */
    for (int r = 0; r < R; r++) {
        memcpy(s->x + (size_t)r * KI, s->e + (size_t)r * H, (size_t)H * sizeof(float));
        memcpy(s->x + (size_t)r * KI + H, s->ctx + (size_t)r * Dv, (size_t)Dv * sizeof(float));
    }
    dec_layer(s, 0, s->x, R);
    const float *y = s->h[0];
    for (int l = 1; l < m->d.dec_layers; l++) {
        for (int r = 0; r < R; r++) {
            memcpy(s->x + (size_t)r * KI, y + (size_t)r * H, (size_t)H * sizeof(float));
            memcpy(s->x + (size_t)r * KI + H, s->ctx + (size_t)r * Dv, (size_t)Dv * sizeof(float));
        }
        dec_layer(s, l, s->x, R);
        if (l == 1) y = s->h[1];
        else {
            float *ny = y == s->ya ? s->yb : s->ya;
            const float *hl = s->h[l];
            for (size_t i = 0; i < (size_t)R * H; i++) ny[i] = hl[i] + y[i];
            nn_clip_forward(ny, (size_t)R * H, m->delta);
            q16_store(m, ny, (size_t)R * H);
            y = ny;
        }
    }
    linear_forward(out, y, s->vm.lin.N ? &s->vm.lin : &m->proj.lin, R, s->lws);
    nn_clip_forward(out, (size_t)R * (size_t)(s->vm.lin.N ? s->vm.lin.N : m->proj.lin.N), m->gamma);
    if (attn) memcpy(attn, s->alpha, (size_t)R * S * sizeof(float));
    return TERN_OK;
}

static tern_status_t gn_set_rows(void *state, const int *parent, const int *sent, int R) {
    gnmt_state_t *s = state;
    const gnmt_net_t *m = s->m;
    int H = m->d.hidden, oldR = s->R;
    for (int i = 0; i < R; i++)
        if (parent[i] < 0 || parent[i] >= oldR || sent[i] < 0 || sent[i] >= s->N)
            return tern_error(TERN_ERR_INTERNAL, "gnmt set_rows: bad parent %d or sentence %d", parent[i], sent[i]);
    tern_status_t st = ensure_rows(s, R > oldR ? R : oldR);
    if (st) return st;
    for (int l = 0; l < m->d.dec_layers; l++) {
        float *bufs[2] = {s->h[l], s->c[l]};
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < R; i++)
                memcpy(s->htmp + (size_t)i * H, bufs[k] + (size_t)parent[i] * H, (size_t)H * sizeof(float));
            memcpy(bufs[k], s->htmp, (size_t)R * H * sizeof(float));
        }
    }
    for (int i = 0; i < R; i++) s->row_sent[i] = sent[i];
    s->R = R;
    return TERN_OK;
}

static tern_status_t gn_set_vocab(void *state, const int *ids, int n) {
    gnmt_state_t *s = state;
    const linear_t *P = &s->m->proj.lin;
    if (n <= 0 || !ids) {
        s->vm.lin.N = 0;
        return TERN_OK;
    }
    int K = P->K;
    if (n > s->vm_cap) {
        aligned_free(s->vm.w), aligned_free(s->vm.q);
        free(s->vm.scale), free(s->vm.bias), free(s->vm.comp);
        memset(&s->vm, 0, sizeof s->vm);
        s->vm_cap = 0;
        int ok = 1;
        if (P->kind == WEIGHT_F32) ok &= (s->vm.w = aligned_alloc64((size_t)n * K * sizeof(float))) != NULL;
        else {
            ok &= (s->vm.q = aligned_alloc64((size_t)n * K)) != NULL;
            ok &= (s->vm.scale = malloc((size_t)n * sizeof(float))) != NULL;
            ok &= (s->vm.comp = malloc((size_t)n * sizeof(int32_t))) != NULL;
        }
        ok &= (s->vm.bias = malloc((size_t)n * sizeof(float))) != NULL;
        if (!ok) return tern_error(TERN_ERR_NOMEM, "vocabulary restriction to %d pieces: out of memory", n);
        s->vm_cap = n;
    }
    for (int i = 0; i < n; i++) {
        int id = ids[i];
        if (id < 0 || id >= P->N || (i && id <= ids[i - 1]))
            return tern_error(TERN_ERR_INVALID_ARG, "vocabulary restriction: id %d at %d (ids must be increasing, in "
                                                    "[0, %d))", id, i, P->N);
        if (P->kind == WEIGHT_F32) memcpy(s->vm.w + (size_t)i * K, P->w + (size_t)id * K, (size_t)K * sizeof(float));
        else {
            memcpy(s->vm.q + (size_t)i * K, P->q + (size_t)id * K, (size_t)K);
            s->vm.scale[i] = P->scale[id];
        }
        s->vm.bias[i] = P->bias ? P->bias[id] : 0.0f;
    }
    linear_t *L = &s->vm.lin;
    memset(L, 0, sizeof *L);
    L->kind = P->kind;
    L->K = K;
    L->N = n;
    L->w = s->vm.w;
    L->q = s->vm.q;
    L->scale = s->vm.scale;
    L->bias = s->vm.bias;
    if (P->kind == WEIGHT_S8) linear_prepare(L, s->vm.comp);
    return TERN_OK;
}

const model_family_t model_family_gnmt = {
    .name = GNMT_ARCHITECTURE,
    .desc = &GNMT_DESC,
    .step_logprobs = 0,
    .build = gn_build,
    .free = gn_free,
    .describe = gn_describe,
    .vocab_tensor = gn_vocab_tensor,
    .state_new = gn_state_new,
    .state_free = gn_state_free,
    .encode = gn_encode,
    .source_len = gn_source_len,
    .step = gn_step,
    .set_rows = gn_set_rows,
    .set_vocab = gn_set_vocab,
};
