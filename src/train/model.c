/*
 * model.c — the training Transformer: parameter layout and names, initialization, loading,
 * and the forward and backward passes of a batch (see model.h).
 *
 * Legend: B sentences, S source length, T target length, C channels, H heads, F feed-forward
 * width, Vs/Vt vocabularies, Le/Ld layers, P position rows, Ms = B·S, Mt = B·T rows (the decoder
 * runs Mr <= Mt of them: target groups, below).
 *
 * A sublayer (self-attention, cross-attention, feed-forward) f with input x is, in
 *   pre-norm:  ln = LN(x);  sum = x + dropout(f(ln));  output sum
 *   post-norm:               sum = x + dropout(f(x));   ln = LN(sum);  output ln
 * The workspace keeps ln (with its mean and rstd), sum, and f's own activations per layer.
 * The backward pass keeps one gradient buffer for the residual stream of each side (g_res_*)
 * into which every branch accumulates (all backward layers add, never assign).
 *
 * Target groups: the decoder does not compute padded target positions. tmodel_forward sorts the
 * batch's sentences by target length (the last non-padding target + 1; stable, longest first;
 * the encoder runs on the sorted batch) and cuts them into groups g of B_g sentences padded to
 * T_g, the longest target of the group (group_batch: the cut that minimizes sum B_g·T_g +
 * GROUP_COST·G). The decoder's rows are the groups one after the other (group g's B_g x T_g rows
 * contiguous, Mr = sum B_g·T_g rows in all), so every row-wise operation (embedding, layer norms,
 * dropout, linear layers, output projection, loss) runs once over the Mr rows and only the
 * embedding's positions and the attention (causal self-attention within a group; cross-attention
 * of group g against the encoder rows of its sentences) run group by group. Rows past a
 * sentence's own length in its group are padding, computed as before and ignored by the loss.
 * The result is the same as over the padded B x T batch up to float summation order: with right
 * padding and causal self-attention, real positions never see later positions, and the loss
 * ignores padding targets. Dropout masks are keyed by element index in the grouped layout (and
 * group g > 0 of an attention site by its own key), so they differ from an ungrouped run's.
 * tmodel_ws_set_target_groups(ws, 0) turns grouping off: one group of the batch as given (B x T,
 * unsorted), today's computation exactly.
 */
#include "train/model.h"
#include "kernels/kernels.h"
#include "nn/lowp.h"
#include "nn/transformer.h"
#include "model/transformer_desc.h"

#include <stddef.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ configuration */

tmodel_config_t tmodel_default_config(void) {
    tmodel_config_t c;
    memset(&c, 0, sizeof c);
    c.src_vocab = c.tgt_vocab = 8000;
    c.d = 512;
    c.heads = 8;
    c.ff = 2048;
    c.enc_layers = c.dec_layers = 6;
    c.max_pos = 1024;
    c.pre_norm = 1;
    c.act = ACT_RELU;
    c.eps = 1e-6f;
    c.learned_pos = 0;
    c.scale_emb = 1;
    c.share_emb = 1;
    c.tie_proj = 1;
    c.proj_bias = 0;
    c.pad_id = 0;
    c.dropout = 0.1f;
    c.attn_dropout = 0.0f;
    c.act_dropout = 0.0f;
    c.label_smoothing = 0.1f;
    return c;
}

static tern_status_t check_config(const tmodel_config_t *c) {
    if (c->d <= 0 || c->heads <= 0 || c->d % c->heads || c->ff <= 0)
        return tern_error(TERN_ERR_INVALID_ARG, "model config: width %d, heads %d, ff %d (width must be a "
                          "positive multiple of heads)", c->d, c->heads, c->ff);
    if (c->enc_layers < 1 || c->dec_layers < 1)
        return tern_error(TERN_ERR_INVALID_ARG, "model config: %d encoder and %d decoder layers (need >= 1)",
                          c->enc_layers, c->dec_layers);
    if (c->src_vocab < 2 || c->tgt_vocab < 2 || c->max_pos < 1)
        return tern_error(TERN_ERR_INVALID_ARG, "model config: vocabularies %d/%d, positions %d",
                          c->src_vocab, c->tgt_vocab, c->max_pos);
    if (c->share_emb && c->src_vocab != c->tgt_vocab)
        return tern_error(TERN_ERR_INVALID_ARG, "model config: shared embeddings need equal vocabularies "
                          "(%d, %d)", c->src_vocab, c->tgt_vocab);
    if (c->pad_id < 0 || c->pad_id >= c->src_vocab || c->pad_id >= c->tgt_vocab)
        return tern_error(TERN_ERR_INVALID_ARG, "model config: pad id %d outside the vocabularies", c->pad_id);
    if (!c->learned_pos && c->d % 2)
        return tern_error(TERN_ERR_INVALID_ARG, "model config: sinusoidal positions need an even width (got %d)", c->d);
    if (c->act < ACT_RELU || c->act > ACT_TANH)
        return tern_error(TERN_ERR_INVALID_ARG, "model config: unknown activation %d", (int)c->act);
    if (!(c->eps > 0.0f))
        return tern_error(TERN_ERR_INVALID_ARG, "model config: layer norm epsilon must be > 0");
    float drops[3] = {c->dropout, c->attn_dropout, c->act_dropout};
    for (int i = 0; i < 3; i++)
        if (!(drops[i] >= 0.0f && drops[i] < 1.0f))
            return tern_error(TERN_ERR_INVALID_ARG, "model config: dropout %g outside [0, 1)", drops[i]);
    if (!(c->label_smoothing >= 0.0f && c->label_smoothing < 1.0f))
        return tern_error(TERN_ERR_INVALID_ARG, "model config: label smoothing %g outside [0, 1)", c->label_smoothing);
    return TERN_OK;
}

/* ------------------------------------------------------------------ layout */

/* The description's dims of a configuration. */
static transformer_dims_t dims_of(const tmodel_config_t *c) {
    transformer_dims_t d = {c->src_vocab, c->tgt_vocab, c->d, c->ff, c->enc_layers, c->dec_layers, c->max_pos,
                            c->pre_norm, c->learned_pos, c->share_emb, c->tie_proj, c->proj_bias,
                            0 /* ssru: Tern trains self-attention decoders (--init-from refuses an SSRU one) */};
    return d;
}

/* The field of tparams_t holding (module, part) (layer 0 of a stacked field), or -1. */
static long field_of(tmodule_t mod, tpart_t part) {
#define F2(m, a, b) case m: return (long)(part == TP_WEIGHT || part == TP_GAMMA ? offsetof(tparams_t, a) \
                                                                                : offsetof(tparams_t, b))
    switch (mod) {
    case TM_ENC_EMB: return (long)offsetof(tparams_t, enc_emb);
    case TM_DEC_EMB: return (long)offsetof(tparams_t, dec_emb);
    case TM_ENC_POS: return (long)offsetof(tparams_t, enc_pos);
    case TM_DEC_POS: return (long)offsetof(tparams_t, dec_pos);
    F2(TM_ENC_SELF_LN, e_ln1_g, e_ln1_b);
    F2(TM_ENC_SELF_QKV, e_qkv_w, e_qkv_b);
    F2(TM_ENC_SELF_OUT, e_o_w, e_o_b);
    F2(TM_ENC_FFN_LN, e_ln2_g, e_ln2_b);
    F2(TM_ENC_FFN1, e_fc1_w, e_fc1_b);
    F2(TM_ENC_FFN2, e_fc2_w, e_fc2_b);
    F2(TM_ENC_FINAL_LN, e_lnf_g, e_lnf_b);
    F2(TM_DEC_SELF_LN, d_ln1_g, d_ln1_b);
    F2(TM_DEC_SELF_QKV, d_qkv_w, d_qkv_b);
    F2(TM_DEC_SELF_OUT, d_so_w, d_so_b);
    F2(TM_DEC_CROSS_LN, d_ln2_g, d_ln2_b);
    F2(TM_DEC_CROSS_Q, d_cq_w, d_cq_b);
    F2(TM_DEC_CROSS_KV, d_ckv_w, d_ckv_b);
    F2(TM_DEC_CROSS_OUT, d_co_w, d_co_b);
    F2(TM_DEC_FFN_LN, d_ln3_g, d_ln3_b);
    F2(TM_DEC_FFN1, d_fc1_w, d_fc1_b);
    F2(TM_DEC_FFN2, d_fc2_w, d_fc2_b);
    F2(TM_DEC_FINAL_LN, d_lnf_g, d_lnf_b);
    F2(TM_PROJ, proj_w, proj_b);
    default: return -1;
    }
#undef F2
}

/* Lays the description's tensors out in one buffer, in its order: points every field of p into
 * base (NULL: only counts), fills tensors[0..n) when given, and returns the number of floats.
 * Tied fields point at their target. */
static size_t assign(const tmodel_config_t *c, float *base, tparams_t *p, const transformer_tensor_t *desc,
                     int n_desc, tmodel_tensor_t *tensors) {
    size_t off = 0;
    memset(p, 0, sizeof *p);
    for (int i = 0; i < n_desc; i++) {
        const transformer_tensor_t *d = &desc[i];
        size_t numel = (size_t)d->shape[0] * (size_t)(d->rank == 2 ? d->shape[1] : 1);
        if (d->layer <= 0) {
            long f = field_of(d->module, d->part);
            if (f >= 0) *(float **)((char *)p + f) = base ? base + off : NULL;
        }
        if (tensors) {
            tmodel_tensor_t *t = &tensors[i];
            snprintf(t->name, sizeof t->name, "%s", d->name);
            t->rank = d->rank;
            t->shape[0] = d->shape[0];
            t->shape[1] = d->shape[1];
            t->numel = numel;
            t->offset = off;
        }
        off += numel;
    }
    if (c->share_emb) p->dec_emb = p->enc_emb;
    if (c->tie_proj) p->proj_w = p->dec_emb;
    return off;
}

tern_status_t tmodel_init(tmodel_t *m, const tmodel_config_t *cfg) {
    memset(m, 0, sizeof *m);
    tern_status_t st = check_config(cfg);
    if (st) return st;
    m->cfg = *cfg;
    transformer_dims_t dims = dims_of(cfg);
    m->n_tensors = transformer_desc_tensors(&dims, NULL);
    transformer_tensor_t *desc = calloc((size_t)m->n_tensors, sizeof *desc);
    m->tensors = calloc((size_t)m->n_tensors, sizeof *m->tensors);
    if (!desc || !m->tensors) {
        free(desc);
        tmodel_free(m);
        return tern_error(TERN_ERR_NOMEM, "model: out of memory");
    }
    transformer_desc_tensors(&dims, desc);
    tparams_t tmp;
    m->n_params = assign(cfg, NULL, &tmp, desc, m->n_tensors, m->tensors);
    m->params = aligned_alloc64(m->n_params * sizeof(float));
    m->grads = aligned_alloc64(m->n_params * sizeof(float));
    if (!m->params || !m->grads) {
        free(desc);
        tmodel_free(m);
        return tern_error(TERN_ERR_NOMEM, "model: out of memory for %zu parameters", m->n_params);
    }
    memset(m->params, 0, m->n_params * sizeof(float));
    memset(m->grads, 0, m->n_params * sizeof(float));
    assign(cfg, m->params, &m->p, desc, m->n_tensors, NULL);
    assign(cfg, m->grads, &m->g, desc, m->n_tensors, NULL);
    free(desc);
    if (cfg->precision == TPREC_BF16) {
        if ((st = bf16_check_cpu())) {
            tmodel_free(m);
            return st;
        }
        m->params_bf16 = aligned_alloc64(m->n_params * sizeof(uint16_t));
        if (!m->params_bf16) {
            tmodel_free(m);
            return tern_error(TERN_ERR_NOMEM, "model: out of memory for the bfloat16 weights");
        }
        m->bf16_stale = 1;
    } else if (cfg->precision != TPREC_F32) {
        tmodel_free(m);
        return tern_error(TERN_ERR_INVALID_ARG, "model config: unknown precision %d", (int)cfg->precision);
    }
    if (cfg->learned_pos) {
        m->enc_pos_table = m->p.enc_pos;
        m->dec_pos_table = m->p.dec_pos;
    } else {
        m->sinusoids = aligned_alloc64((size_t)cfg->max_pos * cfg->d * sizeof(float));
        if (!m->sinusoids) {
            tmodel_free(m);
            return tern_error(TERN_ERR_NOMEM, "model: out of memory");
        }
        nn_sinusoids(m->sinusoids, cfg->max_pos, cfg->d);
        m->enc_pos_table = m->dec_pos_table = m->sinusoids;
    }
    m->n_aliases = transformer_desc_aliases(&dims, m->alias_name, m->alias_target);
    return TERN_OK;
}

void tmodel_free(tmodel_t *m) {
    if (!m) return;
    aligned_free(m->params);
    aligned_free(m->grads);
    aligned_free(m->sinusoids);
    aligned_free(m->params_bf16);
    free(m->tensors);
    memset(m, 0, sizeof *m);
}

void tmodel_zero_grad(tmodel_t *m) { memset(m->grads, 0, m->n_params * sizeof(float)); }

void tmodel_params_changed(tmodel_t *m) { m->bf16_stale = 1; }

const tmodel_tensor_t *tmodel_find(const tmodel_t *m, const char *name) {
    for (int i = 0; i < m->n_aliases; i++)
        if (!strcmp(name, m->alias_name[i])) name = m->alias_target[i];
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
    return NULL;
}

void train_tensor_view(tensor_t *out, const char *name, int rank, int s0, int s1, size_t numel, const float *data) {
    memset(out, 0, sizeof *out);
    out->name = name;
    out->dtype = DT_F32;
    out->rank = rank;
    out->shape[0] = s0;
    out->shape[1] = s1;
    out->numel = (int64_t)numel;
    out->data = data;
    out->nbytes = numel * sizeof(float);
}

tern_status_t train_tensor_load(float *dst, const weights_t *w, const char *name, int rank, int s0, int s1,
                                size_t numel) {
    const tensor_t *src = weights_get(w, name);
    if (!src) return tern_error(TERN_ERR_FORMAT, "%s: missing tensor '%s'", weights_path(w), name);
    int ok = src->rank == rank && src->shape[0] == s0 && (rank == 1 || src->shape[1] == s1);
    if (!ok)
        return tern_error(TERN_ERR_MISMATCH, "%s: tensor '%s': expected shape [%d, %d] (rank %d), got rank %d "
                          "[%lld, %lld]", weights_path(w), name, s0, s1, rank, src->rank,
                          (long long)(src->rank > 0 ? src->shape[0] : 0), (long long)(src->rank > 1 ? src->shape[1] : 0));
    if (src->dtype != DT_F32 && src->dtype != DT_F16 && src->dtype != DT_BF16 && !(src->dtype == DT_I8 && rank == 2))
        return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s': expected a floating-point dtype, got %s", weights_path(w),
                          name, dtype_name(src->dtype));
    return weights_read_f32(w, src, dst); /* an int8 matrix (a quantized model): divided by its scales */
}

void tmodel_tensor_views(const tmodel_t *m, const float *buf, tensor_t *out) {
    for (int i = 0; i < m->n_tensors; i++) {
        const tmodel_tensor_t *t = &m->tensors[i];
        train_tensor_view(&out[i], t->name, t->rank, t->shape[0], t->shape[1], t->numel, buf + t->offset);
    }
}

tern_status_t tmodel_load(tmodel_t *m, const weights_t *w) {
    for (int i = 0; i < m->n_tensors; i++) {
        const tmodel_tensor_t *t = &m->tensors[i];
        tern_status_t st = train_tensor_load(m->params + t->offset, w, t->name, t->rank, t->shape[0], t->shape[1],
                                             t->numel);
        if (st) return st;
    }
    tmodel_params_changed(m);
    return TERN_OK;
}

/* ------------------------------------------------------------------ initialization */

static void fill_normal(float *x, size_t n, float std, uint64_t key) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(std * rng_normal(key, i));
}

static void fill_xavier(float *x, int rows, int cols, float gain, uint64_t key) {
    double bound = gain * sqrt(6.0 / (double)(rows + cols));
    for (size_t i = 0; i < (size_t)rows * cols; i++) x[i] = (float)((2.0 * rng_uniform(key, i) - 1.0) * bound);
}

static void fill_const(float *x, size_t n, float v) {
    for (size_t i = 0; i < n; i++) x[i] = v;
}

void tmodel_init_params(tmodel_t *m, uint64_t seed) {
    tmodel_params_changed(m);
    const tmodel_config_t *c = &m->cfg;
    int C = c->d;
    float std = 1.0f / sqrtf((float)C), g_qkv = 1.0f / sqrtf(2.0f);
    for (int i = 0; i < m->n_tensors; i++) {
        const tmodel_tensor_t *t = &m->tensors[i];
        float *x = m->params + t->offset;
        uint64_t key = rng_mix64(seed ^ rng_mix64((uint64_t)i + 1));
        tmodule_t mod = TM_COUNT;
        int layer;
        tpart_t part = TP_WEIGHT;
        if (!transformer_desc_parse(t->name, &mod, &layer, &part)) continue; /* (every tensor of the layout parses) */
        tmodule_kind_t kind = transformer_module_kind(mod);
        if (kind == TK_EMBEDDING || kind == TK_POSITIONS || (mod == TM_PROJ && part == TP_WEIGHT)) {
            fill_normal(x, t->numel, std, key);
            if (kind == TK_EMBEDDING) memset(x + (size_t)c->pad_id * C, 0, (size_t)C * sizeof(float));
        } else if (part == TP_GAMMA) {
            fill_const(x, t->numel, 1.0f);
        } else if (t->rank == 1) {
            fill_const(x, t->numel, 0.0f); /* biases, betas */
        } else if (mod == TM_ENC_SELF_QKV || mod == TM_DEC_SELF_QKV || mod == TM_DEC_CROSS_Q || mod == TM_DEC_CROSS_KV) {
            /* Q, K, V projections: each (C, C) block Xavier-uniform with gain 1/sqrt(2) */
            for (int blk = 0; blk < t->shape[0] / C; blk++)
                fill_xavier(x + (size_t)blk * C * C, C, C, g_qkv, rng_mix64(key + (uint64_t)blk));
        } else {
            fill_xavier(x, t->shape[0], t->shape[1], 1.0f, key);
        }
    }
}

/* ------------------------------------------------------------------ workspace */

struct tmodel_ws {
    int cap_ms, cap_mt, max_S, max_T;
    float *mem;
    size_t n_floats;
    /* per-layer strides (floats) */
    size_t s_msc, s_ms, s_ms3c, s_msf, s_eatt, s_mtc, s_mt, s_mt3c, s_mtf, s_datt, s_catt, s_kv;
    /* encoder activations (stacked over Le) */
    float *e_x0;                       /* (Ms, C) embeddings after dropout */
    float *e_ln1, *e_ln1_mean, *e_ln1_rstd; /* (Le, Ms, C), (Le, Ms), (Le, Ms) */
    float *e_qkv;                      /* (Le, Ms, 3C) */
    float *e_att;                      /* (Le, B, H, S, S) */
    float *e_ctx;                      /* (Le, Ms, C) */
    float *e_sum1;                     /* (Le, Ms, C) */
    float *e_ln2, *e_ln2_mean, *e_ln2_rstd;
    float *e_fc;                       /* (Le, Ms, F) before the activation */
    float *e_h;                        /* (Le, Ms, F) after activation and dropout */
    float *e_sum2;                     /* (Le, Ms, C) */
    float *e_lnf, *e_lnf_mean, *e_lnf_rstd; /* (Ms, C), (Ms), (Ms): pre-norm encoder output */
    /* decoder activations (stacked over Ld) */
    float *d_x0;                       /* (Mt, C) */
    float *d_ln1, *d_ln1_mean, *d_ln1_rstd;
    float *d_qkv;                      /* (Ld, Mt, 3C) */
    float *d_att;                      /* (Ld, groups g: (B_g, H, T_g, T_g)) */
    float *d_ctx, *d_sum1;             /* (Ld, Mt, C) */
    float *d_ln2, *d_ln2_mean, *d_ln2_rstd;
    float *d_q;                        /* (Ld, Mt, C) cross-attention queries */
    float *d_kv;                       /* (Ld, Ms, 2C) cross-attention keys, values */
    float *d_catt;                     /* (Ld, groups g: (B_g, H, T_g, S)) */
    float *d_cctx, *d_sum2;            /* (Ld, Mt, C) */
    float *d_ln3, *d_ln3_mean, *d_ln3_rstd;
    float *d_fc, *d_h;                 /* (Ld, Mt, F) */
    float *d_sum3;                     /* (Ld, Mt, C) */
    float *d_lnf, *d_lnf_mean, *d_lnf_rstd; /* (Mt, C), (Mt), (Mt) */
    float *probs;                      /* (Mt, Vt) logits, then probabilities, then their gradient */
    float *losses, *nlls;              /* (Mt) */
    /* backward scratch */
    float *g_res_e;                    /* (Ms, C) gradient of the encoder residual stream */
    float *g_res_d;                    /* (Mt, C) gradient of the decoder residual stream */
    float *g_enc;                      /* (Ms, C) gradient of the encoder output */
    float *g_a, *g_b, *g_ctx;          /* (max(Ms, Mt), C) */
    float *g_big1, *g_big2;            /* (max(Ms, Mt), max(3C, F)) */
    float *g_kv;                       /* (Ms, 2C) */
    float *g_att;                      /* the largest attention (B, H, Tq, Tk); dropout scratch too */
    /* the batch of the last forward, sentences in sorted order */
    int *src, *tgt_in, *tgt_out;       /* (Ms) sorted (B, S); (Mt), (Mt) decoder rows (Mr used) */
    int *src_len;                      /* (cap_b) source lengths, sorted order */
    int B, S, T, train, ready;
    int Vt;                            /* the model's target vocabulary (rows of probs) */
    /* target groups (see the top of this file) */
    int grouping;                      /* 1 (default) or 0: one group, the batch as given */
    int cap_b;                         /* sentences: min(max_src_tokens, max_tgt_tokens) */
    int *perm;                         /* (cap_b) sorted position k -> the caller's sentence */
    int *tlen;                         /* (cap_b) decoder rows each caller's sentence needs */
    int *src_len0;                     /* (cap_b) source lengths, the caller's order */
    int *sent_row, *sent_T;            /* (cap_b) caller's sentence b: first decoder row, rows (T_g) */
    int G, Mr;                         /* groups; decoder rows sum B_g·T_g */
    int *grp_b0, *grp_B, *grp_T, *grp_row; /* (max_T + 1) group g: first sorted sentence, B_g, T_g, first row */
    size_t *grp_att, *grp_catt;        /* (max_T + 1) offsets of group g's self-/cross-attention (H·B_g·T_g·Tk) */
    int *len_cnt, *run0, *dp_from;     /* (max_T + 2) scratch of group_batch */
    long long *dp_cost;                /* (max_T + 2) */
    uint64_t seed, step;
    const float *sent_w;               /* (B) per-sentence loss weights, the caller's order, or NULL */
    tmodel_backward_hook_t hook;       /* backward progress (dist.h), or NULL */
    void *hook_user;
    lowp_ws_t *lowp;                   /* bfloat16 scratch (TPREC_BF16), else NULL */
    float *fq_buf;                     /* --qat int8-act: a linear layer's fake-quantized input rows
                                          (tmodel_ws_set_act_fq), else NULL */
};

/* The capacities and the per-layer block sizes (s_*) the forward and backward passes index by. */
static void set_block_sizes(tmodel_ws_t *ws, const tmodel_config_t *c, int max_src_tokens, int max_tgt_tokens,
                            int max_S, int max_T) {
    size_t C = (size_t)c->d, F = (size_t)c->ff, H = (size_t)c->heads;
    size_t Ms = (size_t)max_src_tokens, Mt = (size_t)max_tgt_tokens, S = (size_t)max_S, T = (size_t)max_T;
    ws->cap_ms = max_src_tokens;
    ws->cap_mt = max_tgt_tokens;
    ws->max_S = max_S;
    ws->max_T = max_T;
    ws->s_msc = Ms * C; ws->s_ms = Ms; ws->s_ms3c = Ms * 3 * C; ws->s_msf = Ms * F; ws->s_eatt = H * Ms * S;
    ws->s_mtc = Mt * C; ws->s_mt = Mt; ws->s_mt3c = Mt * 3 * C; ws->s_mtf = Mt * F; ws->s_datt = H * Mt * T;
    ws->s_catt = H * Mt * S; ws->s_kv = Ms * 2 * C;
}

/* The float blocks, in one 64-byte aligned allocation: two passes, count, then point (each block
 * rounded to 16 floats = 64 bytes). */
static tern_status_t alloc_float_blocks(tmodel_ws_t *ws, const tmodel_config_t *c) {
    size_t C = (size_t)c->d, F = (size_t)c->ff, Le = (size_t)c->enc_layers, Ld = (size_t)c->dec_layers,
           Vt = (size_t)c->tgt_vocab;
    size_t Ms = (size_t)ws->cap_ms, Mt = (size_t)ws->cap_mt;
    size_t Mx = Ms > Mt ? Ms : Mt, W = 3 * C > F ? 3 * C : F;
    size_t att_max = ws->s_eatt;
    if (ws->s_datt > att_max) att_max = ws->s_datt;
    if (ws->s_catt > att_max) att_max = ws->s_catt;
    for (int pass = 0; pass < 2; pass++) {
        size_t off = 0;
#define W_(field, n) do { ws->field = pass ? ws->mem + off : NULL; off += ((n) + 15) / 16 * 16; } while (0)
        W_(e_x0, Ms * C);
        W_(e_ln1, Le * Ms * C); W_(e_ln1_mean, Le * Ms); W_(e_ln1_rstd, Le * Ms);
        W_(e_qkv, Le * Ms * 3 * C); W_(e_att, Le * ws->s_eatt); W_(e_ctx, Le * Ms * C); W_(e_sum1, Le * Ms * C);
        W_(e_ln2, Le * Ms * C); W_(e_ln2_mean, Le * Ms); W_(e_ln2_rstd, Le * Ms);
        W_(e_fc, Le * Ms * F); W_(e_h, Le * Ms * F); W_(e_sum2, Le * Ms * C);
        if (c->pre_norm) { W_(e_lnf, Ms * C); W_(e_lnf_mean, Ms); W_(e_lnf_rstd, Ms); }
        W_(d_x0, Mt * C);
        W_(d_ln1, Ld * Mt * C); W_(d_ln1_mean, Ld * Mt); W_(d_ln1_rstd, Ld * Mt);
        W_(d_qkv, Ld * Mt * 3 * C); W_(d_att, Ld * ws->s_datt); W_(d_ctx, Ld * Mt * C); W_(d_sum1, Ld * Mt * C);
        W_(d_ln2, Ld * Mt * C); W_(d_ln2_mean, Ld * Mt); W_(d_ln2_rstd, Ld * Mt);
        W_(d_q, Ld * Mt * C); W_(d_kv, Ld * Ms * 2 * C); W_(d_catt, Ld * ws->s_catt);
        W_(d_cctx, Ld * Mt * C); W_(d_sum2, Ld * Mt * C);
        W_(d_ln3, Ld * Mt * C); W_(d_ln3_mean, Ld * Mt); W_(d_ln3_rstd, Ld * Mt);
        W_(d_fc, Ld * Mt * F); W_(d_h, Ld * Mt * F); W_(d_sum3, Ld * Mt * C);
        if (c->pre_norm) { W_(d_lnf, Mt * C); W_(d_lnf_mean, Mt); W_(d_lnf_rstd, Mt); }
        W_(probs, Mt * Vt); W_(losses, Mt); W_(nlls, Mt);
        W_(g_res_e, Ms * C); W_(g_res_d, Mt * C); W_(g_enc, Ms * C);
        W_(g_a, Mx * C); W_(g_b, Mx * C); W_(g_ctx, Mx * C);
        W_(g_big1, Mx * W); W_(g_big2, Mx * W); W_(g_kv, Ms * 2 * C); W_(g_att, att_max);
#undef W_
        if (!pass) {
            ws->n_floats = off;
            ws->mem = aligned_alloc64(off * sizeof(float));
            if (!ws->mem)
                return tern_error(TERN_ERR_NOMEM, "training workspace: out of memory (%.1f MB)",
                                  (double)off * 4 / 1e6);
        }
    }
    return TERN_OK;
}

/* The batch's token buffers and the per-sentence and per-group arrays of target grouping; 0 when
 * one is out of memory. */
static int alloc_batch_arrays(tmodel_ws_t *ws, const tmodel_config_t *c) {
    size_t Ms = (size_t)ws->cap_ms, Mt = (size_t)ws->cap_mt, T = (size_t)ws->max_T;
    ws->src = malloc(Ms * sizeof(int));
    ws->tgt_in = malloc(Mt * sizeof(int));
    ws->tgt_out = malloc(Mt * sizeof(int));
    ws->grouping = 1;
    ws->Vt = c->tgt_vocab;
    ws->cap_b = ws->cap_ms < ws->cap_mt ? ws->cap_ms : ws->cap_mt;
    size_t nb = (size_t)ws->cap_b, ng = T + 2;
    ws->src_len = malloc(nb * sizeof(int));
    ws->perm = malloc(nb * sizeof(int));
    ws->tlen = malloc(nb * sizeof(int));
    ws->src_len0 = malloc(nb * sizeof(int));
    ws->sent_row = malloc(nb * sizeof(int));
    ws->sent_T = malloc(nb * sizeof(int));
    ws->grp_b0 = malloc(ng * sizeof(int));
    ws->grp_B = malloc(ng * sizeof(int));
    ws->grp_T = malloc(ng * sizeof(int));
    ws->grp_row = malloc(ng * sizeof(int));
    ws->grp_att = malloc(ng * sizeof(size_t));
    ws->grp_catt = malloc(ng * sizeof(size_t));
    ws->len_cnt = malloc(ng * sizeof(int));
    ws->run0 = malloc(ng * sizeof(int));
    ws->dp_from = malloc(ng * sizeof(int));
    ws->dp_cost = malloc(ng * sizeof(long long));
    return ws->src && ws->tgt_in && ws->tgt_out && ws->src_len && ws->perm && ws->tlen && ws->src_len0 &&
           ws->sent_row && ws->sent_T && ws->grp_b0 && ws->grp_B && ws->grp_T && ws->grp_row && ws->grp_att &&
           ws->grp_catt && ws->len_cnt && ws->run0 && ws->dp_from && ws->dp_cost;
}

/* The bfloat16 scratch of TPREC_BF16: inputs of a linear layer are C or F wide (W >= both);
 * outputs C, 2C, 3C, F or Vt. */
static tern_status_t alloc_lowp(tmodel_ws_t *ws, const tmodel_config_t *c) {
    size_t C = (size_t)c->d, F = (size_t)c->ff, Vt = (size_t)c->tgt_vocab;
    size_t Ms = (size_t)ws->cap_ms, Mt = (size_t)ws->cap_mt;
    size_t Mx = Ms > Mt ? Ms : Mt, W = 3 * C > F ? 3 * C : F;
    size_t N = Vt > W ? Vt : W;
    if (!(ws->lowp = calloc(1, sizeof *ws->lowp))) return tern_error(TERN_ERR_NOMEM, "training workspace: out of memory");
    return lowp_ws_init(ws->lowp, Mx * W, Mx * N);
}

tern_status_t tmodel_ws_new(tmodel_ws_t **out, const tmodel_t *m, int max_src_tokens, int max_tgt_tokens,
                            int max_S, int max_T) {
    *out = NULL;
    const tmodel_config_t *c = &m->cfg;
    tern_status_t st;
    if (max_src_tokens < 1 || max_tgt_tokens < 1 || max_S < 1 || max_T < 1 || max_S > c->max_pos ||
        max_T > c->max_pos)
        return tern_error(TERN_ERR_INVALID_ARG, "training workspace: bad capacity (%d source tokens, %d target "
                          "tokens, lengths %d/%d; positions %d)", max_src_tokens, max_tgt_tokens, max_S, max_T,
                          c->max_pos);
    tmodel_ws_t *ws = calloc(1, sizeof *ws);
    if (!ws) return tern_error(TERN_ERR_NOMEM, "training workspace: out of memory");
    set_block_sizes(ws, c, max_src_tokens, max_tgt_tokens, max_S, max_T);
    if ((st = alloc_float_blocks(ws, c))) {
        free(ws);
        return st;
    }
    if (!alloc_batch_arrays(ws, c)) {
        tmodel_ws_free(ws);
        return tern_error(TERN_ERR_NOMEM, "training workspace: out of memory");
    }
    if (c->precision == TPREC_BF16 && (st = alloc_lowp(ws, c))) {
        tmodel_ws_free(ws);
        return st;
    }
    *out = ws;
    return TERN_OK;
}

tern_status_t tmodel_ws_set_act_fq(tmodel_ws_t *ws, const tmodel_t *m, int on) {
    aligned_free(ws->fq_buf);
    ws->fq_buf = NULL;
    if (!on) return TERN_OK;
    const tmodel_config_t *c = &m->cfg;
    size_t Ms = (size_t)ws->cap_ms, Mt = (size_t)ws->cap_mt, Mx = Ms > Mt ? Ms : Mt;
    size_t W = (size_t)(c->d > c->ff ? c->d : c->ff); /* a linear layer's input: C or F wide */
    if (!(ws->fq_buf = aligned_alloc64(Mx * W * sizeof(float))))
        return tern_error(TERN_ERR_NOMEM, "training workspace: out of memory for the fake-quantized activations");
    return TERN_OK;
}

void tmodel_ws_free(tmodel_ws_t *ws) {
    if (!ws) return;
    aligned_free(ws->fq_buf);
    if (ws->lowp) lowp_ws_free(ws->lowp);
    free(ws->lowp);
    aligned_free(ws->mem);
    free(ws->src);
    free(ws->tgt_in);
    free(ws->tgt_out);
    free(ws->src_len);
    free(ws->perm);
    free(ws->tlen);
    free(ws->src_len0);
    free(ws->sent_row);
    free(ws->sent_T);
    free(ws->grp_b0);
    free(ws->grp_B);
    free(ws->grp_T);
    free(ws->grp_row);
    free(ws->grp_att);
    free(ws->grp_catt);
    free(ws->len_cnt);
    free(ws->run0);
    free(ws->dp_from);
    free(ws->dp_cost);
    free(ws);
}

size_t tmodel_ws_bytes(const tmodel_ws_t *ws) {
    return ws->n_floats * sizeof(float) + (ws->lowp ? lowp_ws_bytes(ws->lowp) : 0);
}

const float *tmodel_ws_prob_row(const tmodel_ws_t *ws, int b, int t) {
    if (b < 0 || b >= ws->B || t < 0 || t >= ws->sent_T[b]) return NULL;
    return ws->probs + (size_t)(ws->sent_row[b] + t) * (size_t)ws->Vt;
}

void tmodel_ws_set_target_groups(tmodel_ws_t *ws, int on) { ws->grouping = on != 0; }

int tmodel_ws_decoder_rows(const tmodel_ws_t *ws, int *groups) {
    if (groups) *groups = ws->G;
    return ws->Mr;
}

/* ------------------------------------------------------------------ sublayer helpers */

enum { SITE_EMB = 0, SITE_ATT = 1, SITE_ATT_OUT = 2, SITE_CATT = 3, SITE_CATT_OUT = 4, SITE_ACT = 5,
       SITE_FFN_OUT = 6 };

static uint64_t site_key(const tmodel_ws_t *ws, int decoder, int layer, int kind) {
    uint64_t site = ((uint64_t)decoder << 32) | ((uint64_t)(layer + 1) << 8) | (uint64_t)kind;
    return dropout_key(ws->seed, ws->step, site);
}

typedef struct {
    const float *g, *b;   /* layer norm parameters (C) */
    float *dg, *db;       /* their gradients */
    float *ln, *mean, *rstd; /* saved: LN output (M, C), statistics (M) */
    float *sum;           /* saved: x + dropout(f) (M, C) */
} sub_t;

/* The input of the sublayer's transformation (nn_sublayer_in). */
static const float *sub_pre(const tmodel_t *m, const sub_t *s, const float *x, int M) {
    nn_norm_t n = {s->g, s->b};
    return nn_sublayer_in(s->ln, s->mean, s->rstd, x, &n, M, m->cfg.d, m->cfg.eps, m->cfg.pre_norm);
}

/* s->sum holds f's output: dropout, residual, (post-norm) layer norm (nn_sublayer_out). Returns the
 * sublayer output. */
static const float *sub_post(const tmodel_t *m, const sub_t *s, const float *x, int M, float p, uint64_t key) {
    nn_norm_t n = {s->g, s->b};
    return nn_sublayer_out(s->sum, s->ln, s->mean, s->rstd, s->sum, x, &n, M, m->cfg.d, m->cfg.eps, m->cfg.pre_norm,
                           p, key);
}

/* dres holds the gradient of the sublayer output. Returns the gradient of f's output, and leaves in
 * dres the residual path's part of the gradient of x. *db: the bias gradient of f's last linear
 * layer (its column sums): added here in the dropout's pass when there is one (*db then NULL). */
static const float *sub_post_backward(const tmodel_t *m, tmodel_ws_t *ws, const sub_t *s, float *dres, int M,
                                      float p, uint64_t key, float **db) {
    size_t n = (size_t)M * m->cfg.d;
    const float *dsum = dres;
    if (!m->cfg.pre_norm) {
        memset(ws->g_b, 0, n * sizeof(float));
        nn_layernorm_backward(ws->g_b, s->dg, s->db, dres, s->sum, s->g, s->mean, s->rstd, M, m->cfg.d);
        memcpy(dres, ws->g_b, n * sizeof(float));
        dsum = ws->g_b;
    }
    if (p <= 0.0f) return dsum;
    /* the dropout's backward into a fresh buffer: the same mask applied to dsum */
    if (*db) {
        nn_dropout_forward_bias(ws->g_a, dsum, M, m->cfg.d, p, key, *db);
        *db = NULL;
    } else {
        nn_dropout_forward(ws->g_a, dsum, n, p, key);
    }
    return ws->g_a;
}

/* Where f's backward puts the gradient of its input: pre-norm, ws->g_b, which f's last linear
 * layer overwrites (*set = 1: the only term); post-norm, added into dres (*set = 0). */
static float *sub_in_grad(const tmodel_t *m, tmodel_ws_t *ws, float *dres, int *set) {
    *set = m->cfg.pre_norm;
    return m->cfg.pre_norm ? ws->g_b : dres;
}

static void sub_pre_backward(const tmodel_t *m, tmodel_ws_t *ws, const sub_t *s, float *dres, const float *x,
                             int M) {
    if (!m->cfg.pre_norm) return;
    nn_layernorm_backward(dres, s->dg, s->db, ws->g_b, x, s->g, s->mean, s->rstd, M, m->cfg.d);
}

/* The sublayers of encoder layer l (k = 0 self-attention, 1 feed-forward). */
static sub_t enc_sub(const tmodel_t *m, const tmodel_ws_t *ws, int l, int k) {
    size_t C = (size_t)m->cfg.d;
    sub_t s;
    if (k == 0) {
        s.g = m->p.e_ln1_g + l * C; s.b = m->p.e_ln1_b + l * C;
        s.dg = m->g.e_ln1_g + l * C; s.db = m->g.e_ln1_b + l * C;
        s.ln = ws->e_ln1 + l * ws->s_msc; s.mean = ws->e_ln1_mean + l * ws->s_ms; s.rstd = ws->e_ln1_rstd + l * ws->s_ms;
        s.sum = ws->e_sum1 + l * ws->s_msc;
    } else {
        s.g = m->p.e_ln2_g + l * C; s.b = m->p.e_ln2_b + l * C;
        s.dg = m->g.e_ln2_g + l * C; s.db = m->g.e_ln2_b + l * C;
        s.ln = ws->e_ln2 + l * ws->s_msc; s.mean = ws->e_ln2_mean + l * ws->s_ms; s.rstd = ws->e_ln2_rstd + l * ws->s_ms;
        s.sum = ws->e_sum2 + l * ws->s_msc;
    }
    return s;
}

/* The sublayers of decoder layer l (k = 0 self-attention, 1 cross-attention, 2 feed-forward). */
static sub_t dec_sub(const tmodel_t *m, const tmodel_ws_t *ws, int l, int k) {
    size_t C = (size_t)m->cfg.d;
    sub_t s;
    const float *g[3] = {m->p.d_ln1_g, m->p.d_ln2_g, m->p.d_ln3_g}, *b[3] = {m->p.d_ln1_b, m->p.d_ln2_b, m->p.d_ln3_b};
    float *dg[3] = {m->g.d_ln1_g, m->g.d_ln2_g, m->g.d_ln3_g}, *db[3] = {m->g.d_ln1_b, m->g.d_ln2_b, m->g.d_ln3_b};
    float *ln[3] = {ws->d_ln1, ws->d_ln2, ws->d_ln3}, *mean[3] = {ws->d_ln1_mean, ws->d_ln2_mean, ws->d_ln3_mean};
    float *rstd[3] = {ws->d_ln1_rstd, ws->d_ln2_rstd, ws->d_ln3_rstd}, *sum[3] = {ws->d_sum1, ws->d_sum2, ws->d_sum3};
    s.g = g[k] + l * C; s.b = b[k] + l * C; s.dg = dg[k] + l * C; s.db = db[k] + l * C;
    s.ln = ln[k] + l * ws->s_mtc; s.mean = mean[k] + l * ws->s_mt; s.rstd = rstd[k] + l * ws->s_mt;
    s.sum = sum[k] + l * ws->s_mtc;
    return s;
}

/* The output of a sublayer (the input of the next one). */
static const float *sub_out(const tmodel_t *m, const sub_t *s) { return m->cfg.pre_norm ? s->sum : s->ln; }

/* ------------------------------------------------------------------ linear layers by precision */

/* nn_linear_forward/backward in float32, or with bfloat16 operands (lowp.h) where the weight w
 * (a pointer into m->params) is read from its bfloat16 copy at the same offset. */
static nn_dense_t dense(const tmodel_t *m, tmodel_ws_t *ws, const float *w, const float *b, int K, int N) {
    nn_dense_t d = nn_dense_f32(w, b, ws->lowp ? m->params_bf16 + (w - m->params) : NULL, ws->lowp, K, N);
    d.fq_buf = ws->fq_buf; /* --qat int8-act: the input rows as int8 inference rounds them */
    return d;
}
/* --qat int8-act: the weight gradient is taken against the input the forward multiplied (its
 * fake-quantized rows, recomputed here: the same function of the same rows); the input's gradient
 * passes straight through. Without it, inp itself. */
static const float *bwd_input(tmodel_ws_t *ws, const float *inp, int M, int K) {
    if (!ws->fq_buf) return inp;
    fake_quantize_rows_act(ws->fq_buf, inp, M, K);
    return ws->fq_buf;
}
static void lin_fwd(const tmodel_t *m, tmodel_ws_t *ws, float *out, const float *inp, const float *w, const float *b,
                    int M, int K, int N) {
    nn_dense_t d = dense(m, ws, w, b, K, N);
    nn_dense_forward(out, inp, &d, M, NULL);
}
static void lin_bwd(const tmodel_t *m, tmodel_ws_t *ws, float *dinp, float *dw, float *db, const float *dout,
                    const float *inp, const float *w, int M, int K, int N) {
    inp = bwd_input(ws, inp, M, K);
    if (ws->lowp) lowp_linear_backward(ws->lowp, dinp, dw, db, dout, inp, m->params_bf16 + (w - m->params), M, K, N);
    else nn_linear_backward(dinp, dw, db, dout, inp, w, M, K, N);
}
/* lin_bwd with dinp overwritten (dinp = dout · w) rather than accumulated into. */
static void lin_bwd_set(const tmodel_t *m, tmodel_ws_t *ws, float *dinp, float *dw, float *db, const float *dout,
                        const float *inp, const float *w, int M, int K, int N) {
    inp = bwd_input(ws, inp, M, K);
    if (ws->lowp) {
        memset(dinp, 0, (size_t)M * K * sizeof(float));
        lowp_linear_backward(ws->lowp, dinp, dw, db, dout, inp, m->params_bf16 + (w - m->params), M, K, N);
    } else {
        nn_linear_backward_set(dinp, dw, db, dout, inp, w, M, K, N);
    }
}
/* lin_bwd (set 0) or lin_bwd_set (set 1). */
static void lin_bwd_to(const tmodel_t *m, tmodel_ws_t *ws, int set, float *dinp, float *dw, float *db,
                       const float *dout, const float *inp, const float *w, int M, int K, int N) {
    if (set) lin_bwd_set(m, ws, dinp, dw, db, dout, inp, w, M, K, N);
    else lin_bwd(m, ws, dinp, dw, db, dout, inp, w, M, K, N);
}

/* ------------------------------------------------------------------ target groups */

/* The cost of a group in decoder rows, TMODEL_GROUP_COST (its attention and embedding calls): small
 * beside a row's GEMM work, it only keeps the cut from making a group of every distinct length for
 * nothing. */
#define GROUP_COST TMODEL_GROUP_COST

/* Sorts the batch's sentences by target length, cuts them into groups and lays out the decoder's
 * rows group after group (see the top of this file): fills ws->perm, src (sorted), src_len,
 * tlen, the groups, sent_row/sent_T, tgt_in/tgt_out (rows) and Mr. With grouping off: the batch
 * as given, one group of B x T. */
static void group_batch(const tmodel_t *m, tmodel_ws_t *ws, const int *src, const int *tgt_in, const int *tgt_out,
                        int B, int S, int T) {
    int pad = m->cfg.pad_id;
    for (int b = 0; b < B; b++) { /* rows sentence b needs: through its last non-padding target (>= 1) */
        int L = T;
        while (L > 1 && tgt_out[(size_t)b * T + L - 1] == pad) L--;
        ws->tlen[b] = L;
    }
    if (!ws->grouping) {
        for (int b = 0; b < B; b++) ws->perm[b] = b;
        ws->G = 1;
        ws->grp_b0[0] = 0; ws->grp_B[0] = B; ws->grp_T[0] = T;
    } else {
        /* stable counting sort, longest first */
        int *cnt = ws->len_cnt;
        memset(cnt, 0, (size_t)(T + 1) * sizeof(int));
        for (int b = 0; b < B; b++) cnt[ws->tlen[b]]++;
        for (int L = T, pos = 0; L >= 1; L--) {
            int n = cnt[L];
            cnt[L] = pos;
            pos += n;
        }
        for (int b = 0; b < B; b++) ws->perm[cnt[ws->tlen[b]]++] = b;
        /* Runs of equal length (some optimal cut starts its groups at run starts only: moving a
         * boundary inside a run to the run's start moves sentences into a group no longer than
         * theirs). run r covers sorted sentences [run0[r], run0[r + 1]). */
        int R = 0;
        for (int k = 0; k < B; k++)
            if (k == 0 || ws->tlen[ws->perm[k]] != ws->tlen[ws->perm[k - 1]]) ws->run0[R++] = k;
        ws->run0[R] = B;
        /* dp_cost[r]: the cheapest cut of runs [0, r); a group of runs [q, r) costs
         * (run0[r] - run0[q]) · (length of run q) + GROUP_COST */
        long long *cost = ws->dp_cost;
        cost[0] = 0;
        for (int r = 1; r <= R; r++) {
            cost[r] = -1;
            for (int q = 0; q < r; q++) {
                long long cq = cost[q] + (long long)(ws->run0[r] - ws->run0[q]) * ws->tlen[ws->perm[ws->run0[q]]] +
                               GROUP_COST;
                if (cost[r] < 0 || cq < cost[r]) cost[r] = cq, ws->dp_from[r] = q;
            }
        }
        int G = 0;
        for (int r = R; r > 0; r = ws->dp_from[r]) G++;
        ws->G = G;
        for (int r = R, g = G - 1; r > 0; r = ws->dp_from[r], g--) {
            int q = ws->dp_from[r];
            ws->grp_b0[g] = ws->run0[q];
            ws->grp_B[g] = ws->run0[r] - ws->run0[q];
            ws->grp_T[g] = ws->tlen[ws->perm[ws->run0[q]]];
        }
    }
    /* the sorted sources; the decoder rows */
    int H = m->cfg.heads, row = 0;
    size_t att = 0, catt = 0;
    for (int g = 0; g < ws->G; g++) {
        int Tg = ws->grp_T[g];
        ws->grp_row[g] = row;
        ws->grp_att[g] = att;
        ws->grp_catt[g] = catt;
        att += (size_t)H * ws->grp_B[g] * Tg * Tg;
        catt += (size_t)H * ws->grp_B[g] * Tg * S;
        for (int k = ws->grp_b0[g]; k < ws->grp_b0[g] + ws->grp_B[g]; k++) {
            int b = ws->perm[k];
            memcpy(ws->src + (size_t)k * S, src + (size_t)b * S, (size_t)S * sizeof(int));
            ws->src_len[k] = ws->src_len0[b];
            ws->sent_row[b] = row;
            ws->sent_T[b] = Tg;
            memcpy(ws->tgt_in + row, tgt_in + (size_t)b * T, (size_t)Tg * sizeof(int));
            memcpy(ws->tgt_out + row, tgt_out + (size_t)b * T, (size_t)Tg * sizeof(int));
            row += Tg;
        }
    }
    ws->Mr = row;
}

/* The dropout key of group g of an attention site: group 0 keeps the site's key (one group is the
 * ungrouped computation), the others get their own (each call numbers its elements from 0). */
static uint64_t group_key(uint64_t key, int g) { return g ? rng_mix64(key ^ rng_mix64((uint64_t)g)) : key; }

typedef enum { ATT_ENC, ATT_DEC_SELF, ATT_DEC_CROSS } att_kind_t;

/* nn_attention_forward over the decoder's rows: its causal self-attention and its cross-attention
 * (q: decoder rows, k/v: encoder rows) group by group. att: this layer's saved probabilities. (The
 * encoder's self-attention is nn_encoder_layer_forward's.) */
static void attention_fwd(const tmodel_t *m, tmodel_ws_t *ws, att_kind_t kind, float *out, float *att,
                          const float *q, int ldq, const float *k, const float *v, int ldkv, float p, uint64_t key) {
    int C = m->cfg.d, H = m->cfg.heads, S = ws->S;
    int self = kind == ATT_DEC_SELF;
    for (int g = 0; g < ws->G; g++) {
        size_t r0 = (size_t)ws->grp_row[g], a0 = self ? ws->grp_att[g] : ws->grp_catt[g];
        size_t k0 = self ? r0 : (size_t)ws->grp_b0[g] * S;
        int Tg = ws->grp_T[g];
        nn_attention_forward(out + r0 * C, att + a0, ws->g_att + a0, q + r0 * ldq, ldq, k + k0 * ldkv, v + k0 * ldkv,
                             ldkv, self ? NULL : ws->src_len + ws->grp_b0[g], ws->grp_B[g], Tg, self ? Tg : S, C, H,
                             self, p, group_key(key, g));
    }
}

/* nn_attention_backward over the batch, the calls of attention_fwd: dq, dk, dv += (dout: ws->g_ctx). */
static void attention_bwd(const tmodel_t *m, tmodel_ws_t *ws, att_kind_t kind, float *dq, float *dk, float *dv,
                          const float *q, int ldq, const float *k, const float *v, int ldkv, const float *att, float p,
                          uint64_t key) {
    int C = m->cfg.d, H = m->cfg.heads, S = ws->S;
    if (kind == ATT_ENC) {
        nn_attention_backward(dq, dk, dv, ws->g_att, ws->g_ctx, q, ldq, k, v, ldkv, att, ws->B, S, S, C, H, p, key);
        return;
    }
    int self = kind == ATT_DEC_SELF;
    for (int g = 0; g < ws->G; g++) {
        size_t r0 = (size_t)ws->grp_row[g], a0 = self ? ws->grp_att[g] : ws->grp_catt[g];
        size_t k0 = self ? r0 : (size_t)ws->grp_b0[g] * S;
        int Tg = ws->grp_T[g];
        nn_attention_backward(dq + r0 * ldq, dk + k0 * ldkv, dv + k0 * ldkv, ws->g_att + a0, ws->g_ctx + r0 * C,
                              q + r0 * ldq, ldq, k + k0 * ldkv, v + k0 * ldkv, ldkv, att + a0, ws->grp_B[g], Tg,
                              self ? Tg : S, C, H, p, group_key(key, g));
    }
}

/* ------------------------------------------------------------------ forward */

static tern_status_t check_batch(const tmodel_t *m, tmodel_ws_t *ws, const int *src, const int *tgt_in,
                                 const int *tgt_out, int B, int S, int T) {
    const tmodel_config_t *c = &m->cfg;
    if (B < 1 || S < 1 || T < 1)
        return tern_error(TERN_ERR_INVALID_ARG, "training batch: bad shape B %d, S %d, T %d", B, S, T);
    if ((long long)B * S > ws->cap_ms || (long long)B * T > ws->cap_mt || S > ws->max_S || T > ws->max_T)
        return tern_error(TERN_ERR_INVALID_ARG, "training batch: B %d x S %d / T %d exceeds the workspace "
                          "(%d source tokens, %d target tokens, lengths %d/%d)", B, S, T, ws->cap_ms,
                          ws->cap_mt, ws->max_S, ws->max_T);
    int pad = c->pad_id;
    for (int b = 0; b < B; b++) {
        int len = 0;
        while (len < S && src[b * S + len] != pad) len++;
        if (len == 0) return tern_error(TERN_ERR_INVALID_ARG, "training batch: source sentence %d is empty", b);
        for (int i = 0; i < S; i++) {
            int tok = src[b * S + i];
            if (tok < 0 || tok >= c->src_vocab)
                return tern_error(TERN_ERR_INVALID_ARG, "training batch: source token %d of sentence %d is %d, "
                                  "outside [0, %d)", i, b, tok, c->src_vocab);
            if (i > len && tok != pad)
                return tern_error(TERN_ERR_INVALID_ARG, "training batch: source sentence %d is not right-padded", b);
        }
        ws->src_len0[b] = len;
        for (int t = 0; t < T; t++) {
            int a = tgt_in[b * T + t], y = tgt_out[b * T + t];
            if (a < 0 || a >= c->tgt_vocab || y < 0 || y >= c->tgt_vocab)
                return tern_error(TERN_ERR_INVALID_ARG, "training batch: target token %d of sentence %d "
                                  "(%d -> %d) outside [0, %d)", t, b, a, y, c->tgt_vocab);
        }
    }
    group_batch(m, ws, src, tgt_in, tgt_out, B, S, T);
    return TERN_OK;
}

tern_status_t tmodel_forward(tmodel_t *m, tmodel_ws_t *ws, const int *src, const int *tgt_in, const int *tgt_out,
                             int B, int S, int T, int train, uint64_t seed, uint64_t step, tmodel_loss_t *loss) {
    ws->ready = 0;
    tern_status_t st = check_batch(m, ws, src, tgt_in, tgt_out, B, S, T);
    if (st) return st;
    if (!ws->lowp != !m->params_bf16)
        return tern_error(TERN_ERR_INVALID_ARG, "training: the workspace and the model differ in precision");
    if (m->params_bf16 && m->bf16_stale) { /* once per update: the bfloat16 copy of the master weights */
        lowp_sync_weights(m->params_bf16, m->params, m->n_params);
        m->bf16_stale = 0;
    }
    const tmodel_config_t *c = &m->cfg;
    const tparams_t *p = &m->p;
    int C = c->d, F = c->ff, Ms = B * S, Mt = ws->Mr, Vt = c->tgt_vocab;
    size_t C1 = (size_t)C;
    ws->B = B; ws->S = S; ws->T = T; ws->train = train; ws->seed = seed; ws->step = step;
    float drop = train ? c->dropout : 0.0f, adrop = train ? c->attn_dropout : 0.0f, hdrop = train ? c->act_dropout : 0.0f;
    float escale = c->scale_emb ? sqrtf((float)C) : 1.0f;

    /* encoder */
    nn_embedding_forward(ws->e_x0, ws->src, p->enc_emb, m->enc_pos_table, B, S, C, escale, c->pad_id);
    nn_dropout_forward(ws->e_x0, ws->e_x0, (size_t)Ms * C, drop, site_key(ws, 0, -1, SITE_EMB));
    const float *x = ws->e_x0;
    nn_batch_t bt = {.B = B, .S = S, .len = ws->src_len, .off = NULL}; /* the sorted batch, padded */
    nn_tdims_t dims = {.C = C, .H = c->heads, .F = F, .act = c->act, .eps = c->eps, .pre_norm = c->pre_norm};
    for (int l = 0; l < c->enc_layers; l++) { /* inference's encoder layer (nn_encoder_layer_forward) */
        sub_t s0 = enc_sub(m, ws, l, 0), s1 = enc_sub(m, ws, l, 1);
        nn_encoder_layer_t w = {
            .ln_att = {s0.g, s0.b}, .ln_ffn = {s1.g, s1.b},
            .qkv = dense(m, ws, p->e_qkv_w + l * 3 * C1 * C1, p->e_qkv_b + l * 3 * C1, C, 3 * C),
            .out = dense(m, ws, p->e_o_w + l * C1 * C1, p->e_o_b + l * C1, C, C),
            .ffn1 = dense(m, ws, p->e_fc1_w + l * (size_t)F * C, p->e_fc1_b + l * (size_t)F, C, F),
            .ffn2 = dense(m, ws, p->e_fc2_w + l * (size_t)C * F, p->e_fc2_b + l * C1, F, C)};
        nn_encoder_acts_t a = {
            .ln1 = s0.ln, .mean1 = s0.mean, .rstd1 = s0.rstd, .qkv = ws->e_qkv + l * ws->s_ms3c,
            .att = ws->e_att + l * ws->s_eatt, .att_scratch = ws->g_att, .ctx = ws->e_ctx + l * ws->s_msc,
            .sum1 = s0.sum, .ln2 = s1.ln, .mean2 = s1.mean, .rstd2 = s1.rstd, .fc = ws->e_fc + l * ws->s_msf,
            .h = ws->e_h + l * ws->s_msf, .sum2 = s1.sum};
        nn_tdrop_t dr = {.p = drop, .p_att = adrop, .p_act = hdrop, .k_att = site_key(ws, 0, l, SITE_ATT),
                         .k_att_out = site_key(ws, 0, l, SITE_ATT_OUT), .k_act = site_key(ws, 0, l, SITE_ACT),
                         .k_ffn_out = site_key(ws, 0, l, SITE_FFN_OUT)};
        if ((st = nn_encoder_layer_forward(&x, &a, x, &w, &bt, Ms, &dims, &dr, NULL))) return st;
    }
    const float *enc_out = x;
    if (c->pre_norm) {
        nn_layernorm_forward(ws->e_lnf, ws->e_lnf_mean, ws->e_lnf_rstd, x, p->e_lnf_g, p->e_lnf_b, Ms, C, c->eps);
        enc_out = ws->e_lnf;
    }

    /* decoder: Mt = Mr rows, the groups one after the other */
    for (int g = 0; g < ws->G; g++) {
        float *x0 = ws->d_x0 + (size_t)ws->grp_row[g] * C;
        const int *tin = ws->tgt_in + ws->grp_row[g];
        nn_embedding_forward(x0, tin, p->dec_emb, m->dec_pos_table, ws->grp_B[g], ws->grp_T[g], C, escale, c->pad_id);
        /* A decoder that starts from the pad token (MarianMT's decoder_start_token_id, and Marian's
         * zero start imported as a zero "<pad>" row) reads its row and position 0 there, as
         * inference does; the row itself gets no gradient (nn.Embedding's padding_idx). */
        for (int b = 0; b < ws->grp_B[g]; b++)
            if (tin[(size_t)b * ws->grp_T[g]] == c->pad_id)
                nn_embed_row(x0 + (size_t)b * ws->grp_T[g] * C, p->dec_emb + (size_t)c->pad_id * C, escale,
                             m->dec_pos_table, C);
    }
    nn_dropout_forward(ws->d_x0, ws->d_x0, (size_t)Mt * C, drop, site_key(ws, 1, -1, SITE_EMB));
    x = ws->d_x0;
    for (int l = 0; l < c->dec_layers; l++) {
        sub_t s0 = dec_sub(m, ws, l, 0), s1 = dec_sub(m, ws, l, 1), s2 = dec_sub(m, ws, l, 2);
        /* causal self-attention */
        float *qkv = ws->d_qkv + l * ws->s_mt3c, *att = ws->d_att + l * ws->s_datt, *ctx = ws->d_ctx + l * ws->s_mtc;
        const float *in = sub_pre(m, &s0, x, Mt);
        lin_fwd(m, ws, qkv, in, p->d_qkv_w + l * 3 * C1 * C1, p->d_qkv_b + l * 3 * C1, Mt, C, 3 * C);
        attention_fwd(m, ws, ATT_DEC_SELF, ctx, att, qkv, 3 * C, qkv + C, qkv + 2 * C, 3 * C, adrop,
                      site_key(ws, 1, l, SITE_ATT));
        lin_fwd(m, ws, s0.sum, ctx, p->d_so_w + l * C1 * C1, p->d_so_b + l * C1, Mt, C, C);
        x = sub_post(m, &s0, x, Mt, drop, site_key(ws, 1, l, SITE_ATT_OUT));
        /* cross-attention */
        float *q = ws->d_q + l * ws->s_mtc, *kv = ws->d_kv + l * ws->s_kv, *catt = ws->d_catt + l * ws->s_catt;
        float *cctx = ws->d_cctx + l * ws->s_mtc;
        in = sub_pre(m, &s1, x, Mt);
        lin_fwd(m, ws, q, in, p->d_cq_w + l * C1 * C1, p->d_cq_b + l * C1, Mt, C, C);
        lin_fwd(m, ws, kv, enc_out, p->d_ckv_w + l * 2 * C1 * C1, p->d_ckv_b + l * 2 * C1, Ms, C, 2 * C);
        attention_fwd(m, ws, ATT_DEC_CROSS, cctx, catt, q, C, kv, kv + C, 2 * C, adrop, site_key(ws, 1, l, SITE_CATT));
        lin_fwd(m, ws, s1.sum, cctx, p->d_co_w + l * C1 * C1, p->d_co_b + l * C1, Mt, C, C);
        x = sub_post(m, &s1, x, Mt, drop, site_key(ws, 1, l, SITE_CATT_OUT));
        /* feed-forward */
        in = sub_pre(m, &s2, x, Mt);
        nn_dense_t f1 = dense(m, ws, p->d_fc1_w + l * (size_t)F * C, p->d_fc1_b + l * (size_t)F, C, F);
        nn_dense_t f2 = dense(m, ws, p->d_fc2_w + l * (size_t)C * F, p->d_fc2_b + l * C1, F, C);
        nn_ffn_forward(s2.sum, ws->d_fc + l * ws->s_mtf, ws->d_h + l * ws->s_mtf, in, &f1, &f2, c->act, hdrop,
                       site_key(ws, 1, l, SITE_ACT), Mt, NULL);
        x = sub_post(m, &s2, x, Mt, drop, site_key(ws, 1, l, SITE_FFN_OUT));
    }
    const float *dec_out = x;
    if (c->pre_norm) {
        nn_layernorm_forward(ws->d_lnf, ws->d_lnf_mean, ws->d_lnf_rstd, x, p->d_lnf_g, p->d_lnf_b, Mt, C, c->eps);
        dec_out = ws->d_lnf;
    }
    lin_fwd(m, ws, ws->probs, dec_out, p->proj_w, p->proj_b, Mt, C, Vt);
    double ls = 0, ns = 0;
    int count = nn_crossentropy_forward(ws->probs, ws->losses, ws->nlls, &ls, &ns, ws->probs, ws->tgt_out, Mt, Vt,
                                        c->label_smoothing, c->pad_id);
    if (ws->sent_w) { /* the weighted sums: sentence b's rows are [sent_row[b], + sent_T[b]) */
        ls = ns = 0;
        for (int b = 0; b < B; b++) {
            double l1 = 0, n1 = 0;
            for (int r = ws->sent_row[b]; r < ws->sent_row[b] + ws->sent_T[b]; r++) l1 += ws->losses[r], n1 += ws->nlls[r];
            ls += (double)ws->sent_w[b] * l1;
            ns += (double)ws->sent_w[b] * n1;
        }
    }
    if (loss) {
        loss->loss = ls;
        loss->nll = ns;
        loss->ntokens = count;
    }
    if (ws->lowp && (st = lowp_take_error(ws->lowp))) return st;
    ws->ready = 1;
    return TERN_OK;
}

/* ------------------------------------------------------------------ backward */

/* Feed-forward backward: dsub the gradient of f's output; accumulates into din. */
static void ffn_backward(const tmodel_t *m, tmodel_ws_t *ws, float *din, int din_set, const float *dsub,
                         const float *in, const float *fc, const float *h, const float *w1, const float *w2,
                         float *dw1, float *db1, float *dw2, float *db2, int M, float hdrop, uint64_t key) {
    int C = m->cfg.d, F = m->cfg.ff;
    size_t n = (size_t)M * F;
    float *d = ws->g_big1; /* dh, then through the dropout and the activation in place: dfc */
    lin_bwd_set(m, ws, d, dw2, db2, dsub, h, w2, M, F, C);
    if (db1) { /* with fc1's bias gradient in the same pass */
        nn_activation_backward_bias(d, fc, M, F, m->cfg.act, hdrop, key, db1);
    } else {
        if (hdrop > 0.0f) nn_dropout_forward(d, d, n, hdrop, key); /* the dropout's backward: the same mask */
        nn_activation_backward_set(d, d, fc, n, m->cfg.act);
    }
    lin_bwd_to(m, ws, din_set, din, dw1, NULL, d, in, w1, M, C, F);
}

/* The input of a sublayer's transformation, as the forward saw it. */
static const float *sub_input(const tmodel_t *m, const sub_t *s, const float *x) {
    return m->cfg.pre_norm ? s->ln : x;
}

void tmodel_ws_set_backward_hook(tmodel_ws_t *ws, tmodel_backward_hook_t hook, void *user) {
    ws->hook = hook;
    ws->hook_user = user;
}

void tmodel_ws_set_sentence_weights(tmodel_ws_t *ws, const float *w) { ws->sent_w = w; }

int tmodel_backward_stages(const tmodel_t *m) { return m->cfg.dec_layers + m->cfg.enc_layers + 4; }

int tmodel_tensor_stage(const tmodel_t *m, int i) {
    int Ld = m->cfg.dec_layers, Le = m->cfg.enc_layers, l;
    tmodule_t mod;
    tpart_t part;
    if (m->tensors[i].offset == (size_t)(m->p.enc_emb - m->params)) return Ld + Le + 3; /* maybe shared */
    if (!transformer_desc_parse(m->tensors[i].name, &mod, &l, &part)) return Ld + Le + 3;
    int side = transformer_module_side(mod);
    if (side == 2) return 1 + (Ld - 1 - l);
    if (side == 1) return Ld + 3 + (Le - 1 - l);
    if (mod == TM_DEC_FINAL_LN || mod == TM_PROJ) return 0;
    if (mod == TM_DEC_EMB || mod == TM_DEC_POS) return Ld + 1; /* embeddings (maybe tied), positions */
    if (mod == TM_ENC_FINAL_LN) return Ld + 2;
    return Ld + Le + 3;
}

#define HOOK(stage) do { if (ws->hook) ws->hook(ws->hook_user, (stage)); } while (0)

/* Stage 0: the loss, the output projection and the final decoder layer norm; leaves the gradient
 * of the decoder's residual stream in ws->g_res_d. */
static void head_backward(tmodel_t *m, tmodel_ws_t *ws, const float *dec_last, float grad_scale) {
    const tmodel_config_t *c = &m->cfg;
    const tparams_t *p = &m->p;
    tparams_t *g = &m->g;
    int C = c->d, Mt = ws->Mr, Vt = c->tgt_vocab;
    float *dlogits = ws->probs;
    nn_crossentropy_backward(dlogits, ws->probs, ws->tgt_out, Mt, Vt, c->label_smoothing, c->pad_id, grad_scale);
    for (int b = 0; ws->sent_w && b < ws->B; b++) { /* per-sentence weights: scale the sentence's rows */
        float wb = ws->sent_w[b];
        float *d = dlogits + (size_t)ws->sent_row[b] * Vt;
        for (size_t i = 0; i < (size_t)ws->sent_T[b] * Vt; i++) d[i] *= wb;
    }
    float *gd = ws->g_res_d;
    memset(gd, 0, (size_t)Mt * C * sizeof(float));
    if (c->pre_norm) {
        lin_bwd_set(m, ws, ws->g_b, g->proj_w, g->proj_b, dlogits, ws->d_lnf, p->proj_w, Mt, C, Vt);
        nn_layernorm_backward(gd, g->d_lnf_g, g->d_lnf_b, ws->g_b, dec_last, p->d_lnf_g, ws->d_lnf_mean,
                              ws->d_lnf_rstd, Mt, C);
    } else {
        lin_bwd(m, ws, gd, g->proj_w, g->proj_b, dlogits, dec_last, p->proj_w, Mt, C, Vt);
    }
}

/* Self-attention backward (encoder or decoder layer l): dsub the gradient of the sublayer's
 * output projection; accumulates the gradient of its input into din. */
static void self_attention_backward(tmodel_t *m, tmodel_ws_t *ws, float *din, int din_set, const float *dsub,
                                    const float *in,
                                    const float *qkv, const float *att, const float *ctx, const float *w_qkv,
                                    const float *w_o, float *dw_qkv, float *db_qkv, float *dw_o, float *db_o, int M,
                                    att_kind_t kind, int l) {
    int C = m->cfg.d;
    float adrop = ws->train ? m->cfg.attn_dropout : 0.0f;
    lin_bwd_set(m, ws, ws->g_ctx, dw_o, db_o, dsub, ctx, w_o, M, C, C);
    float *dqkv = ws->g_big1;
    memset(dqkv, 0, (size_t)M * 3 * C * sizeof(float));
    attention_bwd(m, ws, kind, dqkv, dqkv + C, dqkv + 2 * C, qkv, 3 * C, qkv + C, qkv + 2 * C, 3 * C, att, adrop,
                  site_key(ws, kind == ATT_DEC_SELF, l, SITE_ATT));
    lin_bwd_to(m, ws, din_set, din, dw_qkv, db_qkv, dqkv, in, w_qkv, M, C, 3 * C);
}

/* Decoder layer l backward: ws->g_res_d holds the gradient of its output and gets that of its
 * input; the cross-attention adds the gradient of the encoder output into ws->g_enc. */
static void decoder_layer_backward(tmodel_t *m, tmodel_ws_t *ws, int l, const float *enc_out) {
    const tmodel_config_t *c = &m->cfg;
    const tparams_t *p = &m->p;
    tparams_t *g = &m->g;
    int C = c->d, F = c->ff, Ms = ws->B * ws->S, Mt = ws->Mr;
    size_t C1 = (size_t)C;
    float drop = ws->train ? c->dropout : 0.0f, adrop = ws->train ? c->attn_dropout : 0.0f;
    float hdrop = ws->train ? c->act_dropout : 0.0f;
    float *gd = ws->g_res_d;
    sub_t s0 = dec_sub(m, ws, l, 0), s1 = dec_sub(m, ws, l, 1), s2 = dec_sub(m, ws, l, 2);
    const float *x_in0 = ws->d_x0;
    if (l > 0) {
        sub_t prev = dec_sub(m, ws, l - 1, 2);
        x_in0 = sub_out(m, &prev);
    }
    const float *x_in1 = sub_out(m, &s0), *x_in2 = sub_out(m, &s1);

    /* feed-forward */
    float *db = g->d_fc2_b + l * C1; /* NULL once sub_post_backward has added it */
    const float *dsub = sub_post_backward(m, ws, &s2, gd, Mt, drop, site_key(ws, 1, l, SITE_FFN_OUT), &db);
    int set;
    float *din = sub_in_grad(m, ws, gd, &set);
    ffn_backward(m, ws, din, set, dsub, sub_input(m, &s2, x_in2), ws->d_fc + l * ws->s_mtf, ws->d_h + l * ws->s_mtf,
                 p->d_fc1_w + l * (size_t)F * C, p->d_fc2_w + l * (size_t)C * F, g->d_fc1_w + l * (size_t)F * C,
                 g->d_fc1_b + l * (size_t)F, g->d_fc2_w + l * (size_t)C * F, db, Mt, hdrop,
                 site_key(ws, 1, l, SITE_ACT));
    sub_pre_backward(m, ws, &s2, gd, x_in2, Mt);

    /* cross-attention */
    float *q = ws->d_q + l * ws->s_mtc, *kv = ws->d_kv + l * ws->s_kv, *catt = ws->d_catt + l * ws->s_catt;
    db = g->d_co_b + l * C1;
    dsub = sub_post_backward(m, ws, &s1, gd, Mt, drop, site_key(ws, 1, l, SITE_CATT_OUT), &db);
    din = sub_in_grad(m, ws, gd, &set);
    lin_bwd_set(m, ws, ws->g_ctx, g->d_co_w + l * C1 * C1, db, dsub, ws->d_cctx + l * ws->s_mtc,
            p->d_co_w + l * C1 * C1, Mt, C, C);
    float *dq = ws->g_big1;
    memset(dq, 0, (size_t)Mt * C * sizeof(float));
    memset(ws->g_kv, 0, (size_t)Ms * 2 * C * sizeof(float));
    attention_bwd(m, ws, ATT_DEC_CROSS, dq, ws->g_kv, ws->g_kv + C, q, C, kv, kv + C, 2 * C, catt, adrop,
                  site_key(ws, 1, l, SITE_CATT));
    lin_bwd_to(m, ws, set, din, g->d_cq_w + l * C1 * C1, g->d_cq_b + l * C1, dq, sub_input(m, &s1, x_in1),
            p->d_cq_w + l * C1 * C1, Mt, C, C);
    lin_bwd(m, ws, ws->g_enc, g->d_ckv_w + l * 2 * C1 * C1, g->d_ckv_b + l * 2 * C1, ws->g_kv, enc_out,
            p->d_ckv_w + l * 2 * C1 * C1, Ms, C, 2 * C);
    sub_pre_backward(m, ws, &s1, gd, x_in1, Mt);

    /* causal self-attention */
    db = g->d_so_b + l * C1;
    dsub = sub_post_backward(m, ws, &s0, gd, Mt, drop, site_key(ws, 1, l, SITE_ATT_OUT), &db);
    din = sub_in_grad(m, ws, gd, &set);
    self_attention_backward(m, ws, din, set, dsub, sub_input(m, &s0, x_in0), ws->d_qkv + l * ws->s_mt3c,
                            ws->d_att + l * ws->s_datt, ws->d_ctx + l * ws->s_mtc, p->d_qkv_w + l * 3 * C1 * C1,
                            p->d_so_w + l * C1 * C1, g->d_qkv_w + l * 3 * C1 * C1, g->d_qkv_b + l * 3 * C1,
                            g->d_so_w + l * C1 * C1, db, Mt, ATT_DEC_SELF, l);
    sub_pre_backward(m, ws, &s0, gd, x_in0, Mt);
}

/* Encoder layer l backward: ge holds the gradient of its output and gets that of its input. */
static void encoder_layer_backward(tmodel_t *m, tmodel_ws_t *ws, int l, float *ge) {
    const tmodel_config_t *c = &m->cfg;
    const tparams_t *p = &m->p;
    tparams_t *g = &m->g;
    int S = ws->S, C = c->d, F = c->ff, Ms = ws->B * S;
    size_t C1 = (size_t)C;
    float drop = ws->train ? c->dropout : 0.0f, hdrop = ws->train ? c->act_dropout : 0.0f;
    sub_t s0 = enc_sub(m, ws, l, 0), s1 = enc_sub(m, ws, l, 1);
    const float *x_in0 = ws->e_x0;
    if (l > 0) {
        sub_t prev = enc_sub(m, ws, l - 1, 1);
        x_in0 = sub_out(m, &prev);
    }
    const float *x_in1 = sub_out(m, &s0);
    /* feed-forward */
    float *db = g->e_fc2_b + l * C1; /* NULL once sub_post_backward has added it */
    const float *dsub = sub_post_backward(m, ws, &s1, ge, Ms, drop, site_key(ws, 0, l, SITE_FFN_OUT), &db);
    int set;
    float *din = sub_in_grad(m, ws, ge, &set);
    ffn_backward(m, ws, din, set, dsub, sub_input(m, &s1, x_in1), ws->e_fc + l * ws->s_msf, ws->e_h + l * ws->s_msf,
                 p->e_fc1_w + l * (size_t)F * C, p->e_fc2_w + l * (size_t)C * F, g->e_fc1_w + l * (size_t)F * C,
                 g->e_fc1_b + l * (size_t)F, g->e_fc2_w + l * (size_t)C * F, db, Ms, hdrop,
                 site_key(ws, 0, l, SITE_ACT));
    sub_pre_backward(m, ws, &s1, ge, x_in1, Ms);
    /* self-attention */
    db = g->e_o_b + l * C1;
    dsub = sub_post_backward(m, ws, &s0, ge, Ms, drop, site_key(ws, 0, l, SITE_ATT_OUT), &db);
    din = sub_in_grad(m, ws, ge, &set);
    self_attention_backward(m, ws, din, set, dsub, sub_input(m, &s0, x_in0), ws->e_qkv + l * ws->s_ms3c,
                            ws->e_att + l * ws->s_eatt, ws->e_ctx + l * ws->s_msc, p->e_qkv_w + l * 3 * C1 * C1,
                            p->e_o_w + l * C1 * C1, g->e_qkv_w + l * 3 * C1 * C1, g->e_qkv_b + l * 3 * C1,
                            g->e_o_w + l * C1 * C1, db, Ms, ATT_ENC, l);
    sub_pre_backward(m, ws, &s0, ge, x_in0, Ms);
}

/* Embedding (and learned position) backward of one side from the gradient of its dropout output. */
static void embedding_backward(tmodel_t *m, tmodel_ws_t *ws, int decoder, const float *dx) {
    const tmodel_config_t *c = &m->cfg;
    int C = c->d, M = decoder ? ws->Mr : ws->B * ws->S;
    float drop = ws->train ? c->dropout : 0.0f, escale = c->scale_emb ? sqrtf((float)C) : 1.0f;
    if (drop > 0.0f) {
        nn_dropout_forward(ws->g_a, dx, (size_t)M * C, drop, site_key(ws, decoder, -1, SITE_EMB)); /* backward */
        dx = ws->g_a;
    }
    float *dpos = !c->learned_pos ? NULL : decoder ? m->g.dec_pos : m->g.enc_pos;
    if (!decoder) {
        nn_embedding_backward(m->g.enc_emb, dpos, dx, ws->src, ws->B, ws->S, C, escale, c->pad_id);
        return;
    }
    for (int g = 0; g < ws->G; g++) { /* positions t within each sentence: group by group */
        const float *gx = dx + (size_t)ws->grp_row[g] * C;
        const int *tin = ws->tgt_in + ws->grp_row[g];
        nn_embedding_backward(m->g.dec_emb, dpos, gx, tin, ws->grp_B[g], ws->grp_T[g], C, escale, c->pad_id);
        if (dpos) /* a pad start (see the forward): its position 0 learns, its row does not */
            for (int b = 0; b < ws->grp_B[g]; b++)
                if (tin[(size_t)b * ws->grp_T[g]] == c->pad_id)
                    for (int k = 0; k < C; k++) dpos[k] += gx[(size_t)b * ws->grp_T[g] * C + k];
    }
}

tern_status_t tmodel_backward(tmodel_t *m, tmodel_ws_t *ws, float grad_scale) {
    if (!ws->ready) return tern_error(TERN_ERR_INVALID_ARG, "training: backward pass without a forward pass");
    const tmodel_config_t *c = &m->cfg;
    int C = c->d, Ms = ws->B * ws->S, Le = c->enc_layers, Ld = c->dec_layers;
    const float *enc_last = c->pre_norm ? ws->e_sum2 + (Le - 1) * ws->s_msc : ws->e_ln2 + (Le - 1) * ws->s_msc;
    const float *enc_out = c->pre_norm ? ws->e_lnf : enc_last;
    const float *dec_last = c->pre_norm ? ws->d_sum3 + (Ld - 1) * ws->s_mtc : ws->d_ln3 + (Ld - 1) * ws->s_mtc;

    head_backward(m, ws, dec_last, grad_scale);
    HOOK(0);
    memset(ws->g_enc, 0, (size_t)Ms * C * sizeof(float));
    for (int l = Ld - 1; l >= 0; l--) {
        decoder_layer_backward(m, ws, l, enc_out);
        HOOK(1 + (Ld - 1 - l));
    }
    embedding_backward(m, ws, 1, ws->g_res_d);
    HOOK(Ld + 1);

    /* encoder output */
    float *ge = ws->g_enc;
    if (c->pre_norm) {
        ge = ws->g_res_e;
        memset(ge, 0, (size_t)Ms * C * sizeof(float));
        nn_layernorm_backward(ge, m->g.e_lnf_g, m->g.e_lnf_b, ws->g_enc, enc_last, m->p.e_lnf_g, ws->e_lnf_mean,
                              ws->e_lnf_rstd, Ms, C);
    }
    HOOK(Ld + 2);
    for (int l = Le - 1; l >= 0; l--) {
        encoder_layer_backward(m, ws, l, ge);
        HOOK(Ld + 3 + (Le - 1 - l));
    }
    embedding_backward(m, ws, 0, ge);
    ws->ready = 0; /* the probabilities now hold their gradient */
    if (ws->lowp) return lowp_take_error(ws->lowp);
    return TERN_OK;
}
