/*
 * family.h — the one table of operations every model family implements for inference, and the
 * registry that chooses a family by the "architecture" key of config.json.
 *
 * The translator, the stream, the search adapter, `tern rescore` and `tern info` see a model only
 * through this table (model_family_t) and its opaque objects: the network (read-only after build,
 * shared by every thread) and a per-translator state (encoder output, caches, workspace). An
 * ensemble (ensemble.h) is one more implementation of the table, so the search does not change.
 * docs/model-families.md says how to add a family.
 *
 * Legend: N sentences, R decoder rows (sentences x beams, flattened, grouped by sentence), S the
 * padded source length of the batch, V the target vocabulary.
 */
#ifndef TERN_MODEL_FAMILY_H
#define TERN_MODEL_FAMILY_H

#include "base/base.h"
#include "text/vocab.h"
#include "model/weights.h"
#include "model/desc.h"

typedef struct model_family {
    const char *name;  /* the config.json "architecture" value that selects it, e.g. "transformer" */
    /* Its stored tensors and config keys (desc.h): what `tern convert` quantizes and `tern info
     * --tensors` lists. */
    const model_desc_t *desc;
    /* What step() writes: 0: logits (the caller normalizes them with a log-softmax); 1: token
     * scores already in log space, used as they are (an ensemble's combination). */
    int step_logprobs;
    /* 1: build() reads the weights through weights_need()/weights_bytes() (weights.h), so the
     * table may hold large unaligned tensors uncopied (WEIGHTS_DEFER_COPIES); 0: every tensor's
     * data is valid when build() runs. */
    int deferred_weights;

    /* Builds the network from the weights and config.json (cfg). It may keep pointers into w
     * (w outlives the network) and give back memory of tensors it copied (weights_release).
     * Errors name the weights file and the tensor at fault. */
    tern_status_t (*build)(void **net, weights_t *w, const model_config_t *cfg, tern_compute_type_t compute,
                           unsigned flags);
    void (*free)(void *net);
    /* Fills the common fields (family, vocabulary sizes, maximum lengths, int8, weight_bytes) and
     * the family's own part of info; format, has_spm and num_members are set by the caller. */
    void (*describe)(const void *net, tern_model_info_t *info);
    /* The tensor whose rows give the source (target = 0) or target (1) vocabulary size, for the
     * message when a vocabulary file disagrees with the weights. */
    const char *(*vocab_tensor)(const void *net, const weights_t *w, int target);

    /* Per-translator state (NULL when out of memory). */
    void *(*state_new)(const void *net);
    void (*state_free)(void *state);
    /* Encodes N sentences (src[i]: src_len[i] >= 1 source ids, as model_encode_source gives them)
     * and prepares one decoder row per sentence (row i -> sentence i). */
    tern_status_t (*encode)(void *state, const int *const *src, const int *src_len, int N);
    /* S of the current batch (the width of the attention rows step() writes). */
    int (*source_len)(const void *state);
    /* One decoder step for the current R rows: tokens (R) are the previous tokens, t the step (0:
     * the start token). Writes out (R, V) (logits or log-probs, see step_logprobs) and, when attn
     * is not NULL, the cross-attention row (R, S) used for the coverage penalty (zeros past each
     * sentence's length). No allocation once the state has seen rows of this size. */
    tern_status_t (*step)(void *state, const int *tokens, int t, float *out, float *attn);
    /* GETMATRIXBYROWS: new row i continues old row parent[i] and belongs to sentence sent[i]. R
     * may grow (beam expansion after step 0) or shrink (finished sentences). */
    tern_status_t (*set_rows)(void *state, const int *parent, const int *sent, int R);
    /* Target vocabulary reduction (a vocabulary map, search/vmap.h): the following steps write
     * (R, n) instead of (R, V), column i for target id ids[i] (increasing); n = 0: the whole
     * vocabulary again. NULL when the family cannot (a vocabulary map is then refused at load).
     * The network was built with MODEL_BUILD_VOCAB_MAP. */
    tern_status_t (*set_vocab)(void *state, const int *ids, int n);
    /* Optional (NULL: the family has no shortcut, step() always writes full rows). on = 1: the
     * following steps are read only for each row's argmax (greedy search with no scores, no
     * processors): step() may then write, for tokens that cannot be the largest, any value below
     * the row's largest (-inf, or an upper bound of theirs), provided the argmax (first index on
     * ties) is that of the full row; on = 0: full rows again. The
     * Transformer's float32 output projection uses it (an int8 pre-screen, kernels/screen.h). */
    tern_status_t (*set_argmax_only)(void *state, int on);
    /* Optional (NULL: the family decodes whole batches only). Continuous batching for greedy and beam
     * search (search.h's greedy_search_stream, beam_search_stream): encodes n more sentences (src_len[i] >= 1) and appends one
     * row per sentence after the current rows, at its own step 0, as sentences N, N+1, ... after
     * those encoded so far (since the last encode()). Rows then keep their own step: step()'s t
     * counts the state's steps, each row's position is its own. No row's outputs depend on the
     * other rows (the same tokens as a whole-batch decode), and sentences no row belongs to give
     * their memory back. */
    tern_status_t (*admit)(void *state, const int *const *src, const int *src_len, int n);
    /* Optional (NULL: none): for the next step only, in argmax-only mode (set_argmax_only), rows r
     * with rows[r] set need their argmax over the tokens other than tok (a minimum length on
     * those rows): step() then writes, for them, values whose argmax without tok is that of the
     * full row (their full logits where tok would be the largest). rows stays valid until then. An
     * error (nothing set) where it cannot: the search then reads full logits at such steps. */
    tern_status_t (*set_argmax_ban)(void *state, int tok, const unsigned char *rows);
    /* Optional (NULL: none): in argmax-only mode, until called again (n = 0: none), step() writes
     * for every row values whose argmax without toks (n <= 8) is that of the full row (the row's
     * full logits where one of toks would be its largest): tokens the model never outputs (a
     * Hugging Face checkpoint's pad), removed by the search after the step. An error where it
     * cannot (nothing set). toks stays valid until the next call. */
    tern_status_t (*set_argmax_never)(void *state, const int *toks, int n);
    /* Optional (NULL: the family runs a step's rows as one batch only). on = 1: the following
     * steps run each row alone through the decoder (one-row GEMMs: the SDL paper's unbatched
     * baseline, tern_request_t.beams_apart), the same outputs; on = 0: as one batch again. */
    tern_status_t (*set_rows_apart)(void *state, int on);
} model_family_t;

/* build() flags */
#define MODEL_BUILD_VOCAB_MAP 1u /* set_vocab will be used: keep what it needs (e.g. unpacked rows) */

/* The registry: each family's table model_family_<name>, defined in the family's own files
 * (transformer_family.c, gnmt.c, rnn_gru.c). A new family is one more X(name) here
 * (docs/model-families.md); family.c and these declarations follow from the list. */
#define MODEL_FAMILIES(X) X(transformer) X(gnmt) X(rnn_gru)
#define MODEL_FAMILY_DECLARE(name) extern const model_family_t model_family_##name;
MODEL_FAMILIES(MODEL_FAMILY_DECLARE)

/* The family named by config.json's "architecture" (cfg->architecture; "" -> "transformer"), or
 * TERN_ERR_UNSUPPORTED naming config_path and the value. */
tern_status_t model_family_find(const model_family_t **fam, const model_config_t *cfg, const char *config_path);

#endif
