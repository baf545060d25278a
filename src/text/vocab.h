/* vocab.h — token vocabularies (CTranslate2 .json lists or .txt one token per line) and
 * the model directory's config.json. */
#ifndef TERN_VOCAB_H
#define TERN_VOCAB_H

#include "base/base.h"

typedef struct vocab vocab_t;

/* Loads a vocabulary: a JSON list of strings (.json) or one token per line (.txt; a trailing
 * "\r" is dropped, empty lines are tokens too, except a final newline). Token ids are positions. */
tern_status_t vocab_load(vocab_t **out, const char *path);
/* Builds a vocabulary from an array of tokens (copied). */
tern_status_t vocab_from_tokens(vocab_t **out, const char *const *tokens, int n);
void vocab_free(vocab_t *v);
int vocab_size(const vocab_t *v);
const char *vocab_token(const vocab_t *v, int id);           /* NULL when out of range */
int vocab_lookup(const vocab_t *v, const char *token);       /* -1 when absent */
int vocab_lookup_n(const vocab_t *v, const char *token, size_t len);

/* The keys of a CTranslate2/Tern config.json that the engine needs. Absent keys keep the
 * defaults set by model_config_defaults(). */
typedef struct {
    char unk_token[64], bos_token[64], eos_token[64], decoder_start_token[64];
    int add_source_bos, add_source_eos;
    float layer_norm_epsilon;        /* < 0 when absent: the model's own default applies */
    char architecture[64];           /* the model family (src/model/family.h); "" when absent */
} model_config_t;
void model_config_defaults(model_config_t *c);   /* <unk>, <s>, </s>, <s>, 0, 0, -1, "" */
tern_status_t model_config_load(model_config_t *c, const char *path);
/* path's contents as a JSON object (cJSON, freed with cJSON_Delete) into *root; an error naming
 * path when it cannot be read or is not a JSON object (*root NULL then). */
struct cJSON;
tern_status_t json_read_object(const char *path, struct cJSON **root);

#endif
