/*
 * gnmt_desc.h — the one description of the GNMT family's stored tensors (architecture "gnmt"):
 * names, shapes and config keys. The inference family (gnmt.c), the training table
 * (src/train/gnmt_table.c) and the checkpoint writer (through the training table) read the names
 * from here; nothing else spells them.
 *
 * The model (Wu et al. 2016, "Google's Neural Machine Translation System"), docs/rnn.md:
 *   encoder: Le LSTM layers; layer 0 bidirectional (output 2H), layer 1 over 2H, layers l >= 2
 *            over H with a residual (y_l = LSTM_l(y_{l-1}) + y_{l-1}); Dv = H (2H when Le == 1).
 *   decoder: Ld LSTM layers; a_t = Att(query y^0_{t-1}; keys = values = the top encoder layer)
 *            (GNMT's feed-forward attention with one hidden layer); layer 0 reads [e_t; a_t],
 *            layer l >= 1 reads [y^{l-1}_t; a_t], layers l >= 2 add y^{l-1}_t (residual);
 *            logits_t = W_p y^{Ld-1}_t + b_p.
 *
 * Legend: H hidden size (= embedding width), A attention hidden size, Vs / Vt source / target
 * vocabulary, Le / Ld encoder / decoder layers, Dv width of the top encoder layer.
 *
 * Recurrent weights are PyTorch's (nn.LSTM, gates [i; f; g; o]) under PyTorch's own names:
 *   encoder/layer_<l>/{weight_ih, weight_hh, bias_ih, bias_hh}, encoder/layer_0_reverse/...,
 *   decoder/layer_<l>/...; the decoder's weight_ih columns are [input | context].
 */
#ifndef TERN_GNMT_DESC_H
#define TERN_GNMT_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "model/desc.h"
#include "model/weights.h"

typedef enum {
    GN_ENC_EMB = 0, /* encoder/embeddings/weight            (Vs, H) */
    GN_DEC_EMB,     /* decoder/embeddings/weight            (Vt, H)  alias of the encoder's when shared */
    GN_ENC_LSTM,    /* encoder/layer_<l>/<part>             (4H, K) (4H, H) (4H) (4H) */
    GN_ENC_LSTM_REV,/* encoder/layer_0_reverse/<part>       (4H, H) ... */
    GN_DEC_LSTM,    /* decoder/layer_<l>/<part>             (4H, H + Dv) (4H, H) (4H) (4H) */
    GN_ATT_WQ,      /* decoder/attention/linear_query/weight (A, H) */
    GN_ATT_WK,      /* decoder/attention/linear_key/weight  (A, Dv) */
    GN_ATT_B,       /* decoder/attention/linear_key/bias    (A) */
    GN_ATT_V,       /* decoder/attention/v                  (A) */
    GN_PROJ_W,      /* decoder/projection/weight            (Vt, H)  alias of decoder/embeddings when tied */
    GN_PROJ_B,      /* decoder/projection/bias              (Vt) */
    GN_COUNT
} gnmt_module_t;

/* The parts of an LSTM module, in PyTorch's names. */
typedef enum { GP_W_IH = 0, GP_W_HH, GP_B_IH, GP_B_HH, GP_NONE } gnmt_part_t;

typedef struct {
    int src_vocab, tgt_vocab; /* Vs, Vt */
    int hidden;               /* H (also the embedding width) */
    int att;                  /* A */
    int enc_layers, dec_layers;
    int share_emb;            /* decoder/embeddings is encoder/embeddings (Vs == Vt) */
    int tie_proj;             /* decoder/projection/weight is decoder/embeddings */
} gnmt_dims_t;

/* Dv: the width of the top encoder layer. */
int gnmt_enc_width(const gnmt_dims_t *d);
/* K of encoder layer l (reverse: the same) and of decoder layer l. */
int gnmt_enc_input(const gnmt_dims_t *d, int l);
int gnmt_dec_input(const gnmt_dims_t *d, int l);

typedef struct {
    char name[96];
    int rank;          /* 1 or 2 */
    int shape[2];      /* shape[1] 0 for rank 1 */
    gnmt_module_t module;
    gnmt_part_t part;  /* GP_NONE outside the LSTMs */
    int layer;         /* -1 outside the LSTMs */
} gnmt_tensor_t;

/* Every stored tensor (aliases excluded) in a fixed order; out NULL: count only. */
int gnmt_desc_tensors(const gnmt_dims_t *d, gnmt_tensor_t *out);
/* Tied names: names[i] is stored as targets[i] (at most 2). */
int gnmt_desc_aliases(const gnmt_dims_t *d, const char *names[2], const char *targets[2]);
/* The name of a module's tensor into buf (layer/part ignored where they do not apply). */
const char *gnmt_tensor_name(char *buf, size_t n, gnmt_module_t mod, int layer, gnmt_part_t part);
/* Whether `tern convert --quantize int8` / an int8 build quantizes it per row: the matrices. */
int gnmt_desc_quantizable(const char *name);

/* ------------------------------------------------------------ config keys (rank-0 int32 tensors) */
typedef enum {
    GKEY_HIDDEN = 0, /* gnmt/hidden_size */
    GKEY_ATT,        /* gnmt/attention_size */
    GKEY_ENC_LAYERS, /* gnmt/encoder_layers */
    GKEY_DEC_LAYERS, /* gnmt/decoder_layers */
    GKEY_COUNT
} gnmt_key_t;
const char *gnmt_key_name(gnmt_key_t k);

typedef desc_scalars_t gnmt_scalars_t;
/* Fills s with the GKEY_COUNT rank-0 tensors of d (pointing into s); returns GKEY_COUNT. */
int gnmt_desc_scalars(gnmt_scalars_t *s, const gnmt_dims_t *d);

/* The dims of a stored model: the config keys, the vocabulary sizes from the embeddings, sharing
 * and tying from the aliases; then every tensor of the description is checked present with its
 * shape. Errors name the weights file and the tensor. */
tern_status_t gnmt_desc_read(gnmt_dims_t *d, const weights_t *w);

/* The family's description in the common form (desc.h): each spec's module and part are a
 * gnmt_module_t and a gnmt_part_t; dimensions are indexed by gnmt_dim_t. */
typedef enum {
    GND_VS = 0, GND_VT, GND_H, GND_A, GND_LE, GND_LD, GND_SHARE_EMB, GND_TIE_PROJ,
    GND_DV,     /* derived: the top encoder layer's width */
    GND_DEC_IN, /* derived: H + Dv, the decoder layers' input */
    GND_COUNT
} gnmt_dim_t;
extern const model_desc_t GNMT_DESC;
/* dims as the description's dimension array (derived ones filled). */
void gnmt_dims_array(const gnmt_dims_t *d, int out[GND_COUNT]);

/* Optional float32 scalars of a model trained with GNMT's clipping (`tern train --gnmt-clip-delta`,
 * `--gnmt-clip-gamma`): inference clips every LSTM cell state and residual layer output to
 * [-δ, δ] and the logits to [-γ, γ]. Absent: no clipping. */
#define GNMT_CLIP_DELTA_KEY "gnmt/clip_delta"
#define GNMT_CLIP_GAMMA_KEY "gnmt/clip_gamma"
#define GNMT_SPEC_NAME "GnmtSpec"
#define GNMT_ARCHITECTURE "gnmt"

#endif
