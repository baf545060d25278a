/*
 * rnn_gru_desc.h — the one description of the GRU family's stored tensors (`architecture:
 * "rnn-gru"`, the SDL papers' FNMT: Bahdanau attention, Nematus/Marian s2s form): names, shapes
 * and config keys. The inference family (rnn_gru.c), the training table (src/train/rnn_gru_train.c)
 * and the checkpoint writer read the names from here; nothing else spells them.
 *
 * The model (docs/rnn.md, "The GRU family"):
 *   encoder: x_j = Emb_s[src_j] (E); h_j = [GRU_f(x)_j ; GRU_b(x)_j] (Dv = 2·He), zero initial states
 *   decoder: s_0 = tanh(W_init · mean_{j<len} h_j + b_init) (Hd)
 *            the conditional GRU of nn/rnn.h (GRU1 over e_{t-1}, additive attention with
 *            s'_t as query over h, GRU2 over the context), deep output
 *            u_t = tanh(W_s s_t + W_c c_t + W_e e_{t-1} + b), logits = W_o u_t + b_o.
 * Recurrent cells are PyTorch's (torch.nn.GRUCell): w_ih (3H, K) rows [r; z; n], w_hh (3H, H),
 * b_ih, b_hh (3H).
 *
 * Legend: Vs/Vt source/target vocabulary, E embedding width, He encoder GRU width (per
 * direction), Hd decoder GRU width, Dv = 2·He, A attention hidden size, O deep-output width.
 */
#ifndef TERN_RNN_GRU_DESC_H
#define TERN_RNN_GRU_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "model/desc.h"
#include "model/weights.h"

#define RNN_GRU_ARCHITECTURE "rnn-gru"
/* model.safetensors' "ct2_spec" metadata */
#define RNN_GRU_SPEC_NAME "TernRnnGruSpec"

/* The stored tensors, in buffer order. */
typedef enum {
    RG_ENC_EMB = 0,              /* encoder/embeddings/weight             (Vs, E) */
    RG_ENC_F_WIH, RG_ENC_F_WHH,  /* encoder/forward/w_ih, w_hh            (3He, E), (3He, He) */
    RG_ENC_F_BIH, RG_ENC_F_BHH,  /* encoder/forward/b_ih, b_hh            (3He) */
    RG_ENC_B_WIH, RG_ENC_B_WHH,  /* encoder/backward/...                  as forward */
    RG_ENC_B_BIH, RG_ENC_B_BHH,
    RG_DEC_EMB,                  /* decoder/embeddings/weight             (Vt, E) */
    RG_INIT_W, RG_INIT_B,        /* decoder/init/weight, bias             (Hd, Dv), (Hd) */
    RG_GRU1_WIH, RG_GRU1_WHH,    /* decoder/gru1/w_ih, w_hh               (3Hd, E), (3Hd, Hd) */
    RG_GRU1_BIH, RG_GRU1_BHH,    /* decoder/gru1/b_ih, b_hh               (3Hd) */
    RG_ATT_WQ,                   /* decoder/attention/query/weight        (A, Hd) */
    RG_ATT_WK, RG_ATT_B,         /* decoder/attention/key/weight, bias    (A, Dv), (A) */
    RG_ATT_V,                    /* decoder/attention/v                   (A) */
    RG_GRU2_WIH, RG_GRU2_WHH,    /* decoder/gru2/w_ih, w_hh               (3Hd, Dv), (3Hd, Hd) */
    RG_GRU2_BIH, RG_GRU2_BHH,    /* decoder/gru2/b_ih, b_hh               (3Hd) */
    RG_OUT_WS,                   /* decoder/output/state/weight           (O, Hd) */
    RG_OUT_WC,                   /* decoder/output/context/weight         (O, Dv) */
    RG_OUT_WE,                   /* decoder/output/embedding/weight       (O, E) */
    RG_OUT_B,                    /* decoder/output/bias                   (O) */
    RG_PROJ_W,                   /* decoder/projection/weight             (Vt, O)  tied: decoder/embeddings */
    RG_PROJ_B,                   /* decoder/projection/bias               (Vt) */
    /* layer normalization (stored only when rnn/layer_norm = 1): per GRU cell <c> of
     * encoder/forward, encoder/backward, decoder/gru1, decoder/gru2, in that order:
     * <c>/ln_ih/gain, <c>/ln_ih/bias, <c>/ln_hh/gain, <c>/ln_hh/bias  (3H) each */
    RG_LN_FIRST,
    RG_LN_LAST = RG_LN_FIRST + 15,
    RG_COUNT
} rg_tensor_t;

typedef struct {
    int src_vocab, tgt_vocab; /* Vs, Vt */
    int emb;                  /* E */
    int enc_hidden;           /* He */
    int dec_hidden;           /* Hd */
    int att;                  /* A */
    int out;                  /* O */
    int share_emb;            /* decoder/embeddings is encoder/embeddings (an alias; Vs == Vt) */
    int tie_proj;             /* decoder/projection/weight is decoder/embeddings (an alias; O == E) */
    int layer_norm;           /* layer-normalized GRU cells (rnn/layer_norm; absent: 0) */
    int att_heads;            /* attention heads (rnn/attention_heads; absent or 0: 1): head i scores with
                               * the attention units [i·A/h, (i+1)·A/h) and averages the encoder columns
                               * [i·He/h, (i+1)·He/h) of each direction. Written only by `tern shrink`:
                               * an unfolded ensemble keeps each member's own attention (src/train/shrink.c);
                               * training supports one head. */
} rnn_gru_dims_t;

/* The stored name of tensor i. */
const char *rnn_gru_tensor_name(rg_tensor_t i);
/* Its shape under dims: rows, cols (cols 0 for rank 1). */
void rnn_gru_tensor_shape(const rnn_gru_dims_t *d, rg_tensor_t i, int *rows, int *cols);
/* Whether tensor i is part of the model under dims (the normalization's only with layer_norm). */
int rnn_gru_tensor_used(const rnn_gru_dims_t *d, rg_tensor_t i);
/* Whether tensor i is stored (used, and not an alias) under dims. */
int rnn_gru_tensor_stored(const rnn_gru_dims_t *d, rg_tensor_t i);
/* The views of a buffer's tensors P[RG_COUNT] (weights or gradients) as the layers' structs
 * (src/nn/rnn.h): the encoder's two cells and the decoder's weights; the normalization
 * pointers are set only with layer_norm. Training and inference both build their views here. */
void rnn_gru_views(const rnn_gru_dims_t *d, float *const *P, void *enc_f, void *enc_b, void *dec);
/* Tied names: names[i] is stored as targets[i] (at most 2). Returns the count. */
int rnn_gru_desc_aliases(const rnn_gru_dims_t *d, const char *names[2], const char *targets[2]);
/* Whether tensor i is a layer normalization's gain (initialized to 1). */
int rnn_gru_tensor_is_gain(rg_tensor_t i);
/* Whether the matrix is multiplied by linear_forward at inference (int8 per output row). */
int rnn_gru_tensor_is_matrix(rg_tensor_t i);

/* ------------------------------------------------------------ config keys
 * Rank-0 int32 tensors of model.safetensors: the sizes that the tensors' shapes must match. */
typedef enum {
    RGKEY_EMB = 0,    /* rnn/embedding_size */
    RGKEY_ENC_HIDDEN, /* rnn/encoder_hidden_size */
    RGKEY_DEC_HIDDEN, /* rnn/decoder_hidden_size */
    RGKEY_ATT,        /* rnn/attention_size */
    RGKEY_OUT,        /* rnn/output_size */
    RGKEY_LAYER_NORM, /* rnn/layer_norm (0 or 1; optional when reading: absent means 0) */
    RGKEY_HEADS,      /* rnn/attention_heads (optional: absent means 1; never written by training) */
    RGKEY_COUNT
} rg_key_t;

const char *rnn_gru_key_name(rg_key_t k);

typedef desc_scalars_t rnn_gru_scalars_t;

/* Fills s with the RGKEY_COUNT rank-0 tensors of dims (pointing into s); returns RGKEY_COUNT. */
int rnn_gru_desc_scalars(rnn_gru_scalars_t *s, const rnn_gru_dims_t *d);

/* The family's description in the common form (desc.h): its specs are indexed by rg_tensor_t,
 * its dimensions by rg_dim_t. */
typedef enum {
    RGD_VS = 0, RGD_VT, RGD_E, RGD_HE, RGD_HD, RGD_A, RGD_O, RGD_LAYER_NORM, RGD_SHARE_EMB, RGD_TIE_PROJ,
    RGD_HEADS,
    RGD_DV, /* derived: 2·He */
    RGD_COUNT
} rg_dim_t;
extern const model_desc_t RNN_GRU_DESC;
/* dims as the description's dimension array (derived ones filled). */
void rnn_gru_dims_array(const rnn_gru_dims_t *d, int out[RGD_COUNT]);

/* Reads dims from model weights: the config keys, vocabularies from the embeddings, the aliases
 * from the weights' tied names; then checks every tensor's presence and shape. Errors
 * (TERN_ERR_FORMAT) name the weights file and the tensor at fault. */
tern_status_t rnn_gru_desc_read(rnn_gru_dims_t *d, const weights_t *w);

#endif
