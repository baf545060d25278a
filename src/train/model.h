/*
 * model.h — the Transformer encoder-decoder for training: forward and backward of a whole batch
 * with teacher forcing, on the layers of layers.h.
 *
 * Legend: B sentences in a batch, S source length, T target length (both padded), C channels
 * (model width), H heads, D = C / H, F feed-forward width, Vs/Vt source/target vocabulary,
 * Le/Ld encoder/decoder layers, P rows of the position tables (longest sentence),
 * Ms = B·S and Mt = B·T rows (the decoder computes Mr <= Mt of them, below).
 *
 * The parameters are those of CTranslate2's TransformerSpec, with its names and shapes
 * (fused QKV [3C, C] in self-attention, cross-attention Q [C, C] and fused KV [2C, C]), so that a
 * checkpoint loads in `tern translate`: tmodel_tensor() names every tensor. Parameters,
 * gradients (and the optimizer's moments) each live in ONE contiguous float buffer of n_params
 * floats; tparams_t points into it, the same layout for each buffer (a tensor's offset is the
 * same in all of them). Per-layer tensors are stacked: field (L, N, K) holds layer l at
 * l·N·K.
 *
 * The workspace (activations saved for the backward pass, gradient scratch) is sized once for
 * the largest batch and reused: no allocation per batch.
 *
 * Padded target positions are not computed: the forward pass sorts the batch's sentences by
 * target length and runs the decoder on groups of sentences each padded only to its own longest
 * target (Mr = sum B_g·T_g <= B·T rows; model.c explains the layout). Loss and gradients are
 * those of the padded batch up to float summation order; dropout masks follow the grouped layout.
 */
#ifndef TERN_TRAIN_MODEL_H
#define TERN_TRAIN_MODEL_H

#include "base/base.h"
#include "model/weights.h"
#include "train/family.h"
#include "nn/layers.h"

/* bfloat16 compute in training (tmodel_config_t.precision, `tern train --precision`). */
#define TERN_HAVE_BF16_TRAIN 1

/* Compute precision of the linear layers. float32 master weights, gradients and optimizer in
 * both; TPREC_BF16 runs the linear layers' GEMMs with bfloat16 operands and float32
 * accumulation (needs AVX512_BF16; see src/nn/lowp.h). */
typedef enum { TPREC_F32 = 0, TPREC_BF16 = 1 } tprecision_t;

typedef struct {
    int src_vocab, tgt_vocab;   /* Vs, Vt */
    int d, heads, ff;           /* C, H, F */
    int enc_layers, dec_layers; /* Le, Ld */
    int max_pos;                /* P: rows of the position tables = longest S or T accepted */
    int pre_norm;               /* 1: x + f(LN(x)) with final layer norms; 0: LN(x + f(x)) */
    activation_t act;           /* feed-forward activation (ACT_RELU, ACT_GELU, ACT_GELU_TANH...) */
    float eps;                  /* layer norm epsilon */
    int learned_pos;            /* 1: learned position tables; 0: CTranslate2's sinusoids */
    int scale_emb;              /* multiply token embeddings by sqrt(C) */
    int share_emb;              /* encoder and decoder embeddings are one tensor (Vs == Vt) */
    int tie_proj;               /* the output projection is the decoder embedding */
    int proj_bias;              /* the output projection has a bias */
    int pad_id;                 /* padding token (both sides) */
    float dropout;              /* on embeddings and on every sublayer output before the residual */
    float attn_dropout;         /* on attention weights */
    float act_dropout;          /* on the feed-forward activation */
    float label_smoothing;      /* eps of the label-smoothed cross-entropy */
    int never_unk;              /* carried into the checkpoints: decoder/marian_never_unk of an imported
                                 * Marian model (decoding only: <unk> is never output) */
    tprecision_t precision;     /* TPREC_F32 (default) or TPREC_BF16 (a run option, not saved) */
} tmodel_config_t;

/* Base-like defaults: C 512, H 8, F 2048, 6 + 6 layers, pre-norm ReLU, eps 1e-6, sinusoids,
 * scaled embeddings, shared and tied embeddings, pad 0, P 1024, dropouts 0.1/0/0,
 * label smoothing 0.1, precision float32. */
tmodel_config_t tmodel_default_config(void);

/* Pointers into one buffer (parameters, gradients, or a moment). */
typedef struct {
    float *enc_emb;   /* (Vs, C) encoder/embeddings_0/weight */
    float *dec_emb;   /* (Vt, C) decoder/embeddings/weight (== enc_emb when shared) */
    float *enc_pos;   /* (P, C) encoder/position_encodings/encodings, learned only, else NULL */
    float *dec_pos;   /* (P, C) decoder/position_encodings/encodings, learned only, else NULL */
    /* encoder layers: encoder/layer_l/... */
    float *e_ln1_g, *e_ln1_b; /* (Le, C) self_attention/layer_norm/{gamma,beta} */
    float *e_qkv_w;   /* (Le, 3C, C) self_attention/linear_0/weight */
    float *e_qkv_b;   /* (Le, 3C) self_attention/linear_0/bias */
    float *e_o_w;     /* (Le, C, C) self_attention/linear_1/weight */
    float *e_o_b;     /* (Le, C) self_attention/linear_1/bias */
    float *e_ln2_g, *e_ln2_b; /* (Le, C) ffn/layer_norm/{gamma,beta} */
    float *e_fc1_w;   /* (Le, F, C) ffn/linear_0/weight */
    float *e_fc1_b;   /* (Le, F) ffn/linear_0/bias */
    float *e_fc2_w;   /* (Le, C, F) ffn/linear_1/weight */
    float *e_fc2_b;   /* (Le, C) ffn/linear_1/bias */
    float *e_lnf_g, *e_lnf_b; /* (C) encoder/layer_norm/{gamma,beta}, pre-norm only, else NULL */
    /* decoder layers: decoder/layer_l/... */
    float *d_ln1_g, *d_ln1_b; /* (Ld, C) self_attention/layer_norm */
    float *d_qkv_w;   /* (Ld, 3C, C) self_attention/linear_0/weight */
    float *d_qkv_b;   /* (Ld, 3C) */
    float *d_so_w;    /* (Ld, C, C) self_attention/linear_1/weight */
    float *d_so_b;    /* (Ld, C) */
    float *d_ln2_g, *d_ln2_b; /* (Ld, C) attention/layer_norm */
    float *d_cq_w;    /* (Ld, C, C) attention/linear_0/weight (cross Q) */
    float *d_cq_b;    /* (Ld, C) */
    float *d_ckv_w;   /* (Ld, 2C, C) attention/linear_1/weight (cross K, V) */
    float *d_ckv_b;   /* (Ld, 2C) */
    float *d_co_w;    /* (Ld, C, C) attention/linear_2/weight (cross output) */
    float *d_co_b;    /* (Ld, C) */
    float *d_ln3_g, *d_ln3_b; /* (Ld, C) ffn/layer_norm */
    float *d_fc1_w;   /* (Ld, F, C) ffn/linear_0/weight */
    float *d_fc1_b;   /* (Ld, F) */
    float *d_fc2_w;   /* (Ld, C, F) ffn/linear_1/weight */
    float *d_fc2_b;   /* (Ld, C) */
    float *d_lnf_g, *d_lnf_b; /* (C) decoder/layer_norm, pre-norm only, else NULL */
    float *proj_w;    /* (Vt, C) decoder/projection/weight (== dec_emb when tied) */
    float *proj_b;    /* (Vt) decoder/projection/bias, or NULL */
} tparams_t;

/* One named tensor of the layout (names: CTranslate2 TransformerSpec, transformer_desc.h). */
typedef train_tensor_t tmodel_tensor_t;

typedef struct {
    tmodel_config_t cfg;
    size_t n_params;          /* floats in each buffer */
    float *params;            /* (n_params) */
    float *grads;             /* (n_params) */
    tparams_t p, g;           /* pointers into params / grads */
    const float *enc_pos_table, *dec_pos_table; /* (P, C): p.enc_pos/p.dec_pos, or the sinusoids */
    float *sinusoids;         /* (P, C) owned, when not learned */
    int n_tensors;
    tmodel_tensor_t *tensors; /* (n_tensors) every stored tensor, each once */
    int n_aliases;            /* tied names: alias_name[i] is the tensor alias_target[i] */
    const char *alias_name[2], *alias_target[2];
    uint16_t *params_bf16;    /* (n_params) bfloat16 copy of params, TPREC_BF16 only, else NULL */
    int bf16_stale;           /* params changed since params_bf16 was made */
} tmodel_t;

/* Allocates the buffers (parameters zero) for a configuration; checks it (TPREC_BF16: also
 * that the CPU has AVX512_BF16, with a clear error when it does not). */
tern_status_t tmodel_init(tmodel_t *m, const tmodel_config_t *cfg);
void tmodel_free(tmodel_t *m);

/* fairseq's initialization: embeddings N(0, C^-1/2) with the padding row 0, attention Q/K/V
 * weights Xavier-uniform with gain 1/sqrt(2), other linear weights Xavier-uniform, untied
 * projection N(0, C^-1/2), biases 0, layer norms (1, 0). Deterministic in seed. */
void tmodel_init_params(tmodel_t *m, uint64_t seed);

/* Parameters from named tensors (CTranslate2 names; any float dtype is converted). Every tensor
 * of the layout must be present with its shape. */
tern_status_t tmodel_load(tmodel_t *m, const weights_t *w);

/* Shared by every family's flat parameter buffer: a float32 view of numel floats at data
 * (rank 1 or 2, shape s0 x s1) named name; and loading the tensor name of w (float32, float16 or
 * bfloat16, of that shape) into dst, with errors naming the file and the tensor. */
void train_tensor_view(tensor_t *out, const char *name, int rank, int s0, int s1, size_t numel, const float *data);
tern_status_t train_tensor_load(float *dst, const weights_t *w, const char *name, int rank, int s0, int s1,
                                size_t numel);
/* Fills out[0..n_tensors) with views of buf (m->params, m->grads or a moment) for
 * safetensors_write. */
void tmodel_tensor_views(const tmodel_t *m, const float *buf, tensor_t *out);
/* The tensor with this name (aliases resolved), or NULL. */
const tmodel_tensor_t *tmodel_find(const tmodel_t *m, const char *name);

void tmodel_zero_grad(tmodel_t *m);
/* Tells the model that m->params changed (after an optimizer step, or any direct write): in
 * bfloat16 mode the next forward pass remakes the bfloat16 copy, once. tmodel_init_params and
 * tmodel_load call it themselves. */
void tmodel_params_changed(tmodel_t *m);

/* ------------------------------------------------------------ workspace and steps */

typedef struct tmodel_ws tmodel_ws_t;

/* A workspace for batches with B·S <= max_src_tokens, B·T <= max_tgt_tokens, S <= max_S,
 * T <= max_T (max_S, max_T <= P). */
tern_status_t tmodel_ws_new(tmodel_ws_t **ws, const tmodel_t *m, int max_src_tokens,
                            int max_tgt_tokens, int max_S, int max_T);
/* --qat int8-act (on 1): every linear layer's input rows fake-quantized as int8 inference rounds
 * them (kernels.h fake_quantize_rows_act) in the forward, the weight gradients taken against those
 * rows, the input gradients straight through; 0: off. */
tern_status_t tmodel_ws_set_act_fq(tmodel_ws_t *ws, const tmodel_t *m, int on);
void tmodel_ws_free(tmodel_ws_t *ws);
size_t tmodel_ws_bytes(const tmodel_ws_t *ws);
/* The (Vt) output probabilities of the last forward pass at sentence b (the caller's order),
 * position t; 0 where the target is padding; NULL for a padded position that was not computed
 * (past the longest target of b's group, so every such position has a padding target). Valid
 * until tmodel_backward, which overwrites them with their gradient. */
const float *tmodel_ws_prob_row(const tmodel_ws_t *ws, int b, int t);
/* The cost of one target group, in decoder rows: the forward pass picks the cut into groups of
 * the length-sorted batch that minimizes sum B_g·T_g + TMODEL_GROUP_COST·G. */
#define TMODEL_GROUP_COST 4
/* Target groups on (1, the default) or off (0: the decoder runs on the whole B x T batch as given,
 * unsorted; for tests and benchmarks). Takes effect at the next tmodel_forward. */
void tmodel_ws_set_target_groups(tmodel_ws_t *ws, int on);
/* The decoder rows of the last forward pass (sum B_g·T_g; B·T without groups), and in *groups
 * (may be NULL) the number of groups. */
int tmodel_ws_decoder_rows(const tmodel_ws_t *ws, int *groups);

/* loss: sum over target tokens of the label-smoothed loss; nll: of -log p(y); ntokens: non-padding
 * target tokens. */
typedef train_loss_t tmodel_loss_t;

/* Forward pass with teacher forcing. src (B, S), tgt_in (B, T) decoder inputs (starting with the
 * decoder start token), tgt_out (B, T) targets; right-padded with pad_id (src: each sentence at
 * least 1 token; tgt_out: pad where no loss). train != 0 applies dropout with the masks of
 * dropout_key(seed, step, site). Saves what the backward pass needs in ws. */
tern_status_t tmodel_forward(tmodel_t *m, tmodel_ws_t *ws, const int *src, const int *tgt_in,
                             const int *tgt_out, int B, int S, int T, int train, uint64_t seed,
                             uint64_t step, tmodel_loss_t *loss);
/* Backward pass of the last forward: m->grads += d(grad_scale · loss.loss)/dθ (grad_scale is
 * typically 1 / ntokens of the whole update, times the loss scale). */
tern_status_t tmodel_backward(tmodel_t *m, tmodel_ws_t *ws, float grad_scale);

/* Backward progress, for the data-parallel all-reduce (dist.h): tmodel_backward runs in stages,
 * 0 the loss, output projection and final decoder layer norm; 1..Ld the decoder layers from the
 * top (stage 1 + Ld-1-l is layer l); Ld+1 the decoder embeddings; Ld+2 the final encoder layer
 * norm; Ld+3..Ld+Le+2 the encoder layers from the top; Ld+Le+3 the encoder embeddings (the last).
 * When a hook is set, it is called with s after stage s, for every stage but the last (the
 * caller knows when tmodel_backward returned). A tensor's gradient is final after the stage of
 * tmodel_tensor_stage (a shared or tied embedding: the last stage). */
typedef train_backward_hook_t tmodel_backward_hook_t;
void tmodel_ws_set_backward_hook(tmodel_ws_t *ws, tmodel_backward_hook_t hook, void *user);
/* Per-sentence loss weights of the following forward/backward passes (family.h's
 * set_sentence_weights): w (B, the caller's order; caller-owned) or NULL (all 1). */
void tmodel_ws_set_sentence_weights(tmodel_ws_t *ws, const float *w);
int tmodel_backward_stages(const tmodel_t *m);
int tmodel_tensor_stage(const tmodel_t *m, int i); /* of m->tensors[i] */

#endif
