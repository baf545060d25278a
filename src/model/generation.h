/*
 * generation.h — the decoding defaults a model directory carries: `generation_config.json`, the
 * file and keys of Hugging Face's GenerationConfig (plus Tern's own keys for what it has and
 * transformers has not), read at load. A translator created without its own search parameters,
 * `tern translate` without the matching flags, and `tern serve` use them; `tern info` shows them.
 *
 * Keys read (others, e.g. the token ids transformers keeps there, are ignored):
 *   num_beams               beam_size
 *   num_return_sequences    num_hypotheses
 *   length_penalty          length_penalty (transformers' default 1.0 when the file has none:
 *                           the same formula, score / length^alpha, in beam search)
 *   max_length              max_decoding_length = max_length - 1 (transformers counts the
 *                           decoder's start token)
 *   max_new_tokens          max_decoding_length (over max_length, as in transformers)
 *   min_length              min_length = min_length - 1 (the start token again), at least 0
 *   coverage_penalty        coverage_penalty (Tern)
 *   length_norm             "plain" or "gnmt" (Tern)
 * A value of the wrong type or out of range is an error naming the file and the key.
 */
#ifndef TERN_MODEL_GENERATION_H
#define TERN_MODEL_GENERATION_H

#include <stddef.h>

#include "base/base.h"

#define MODEL_GENERATION_FILE "generation_config.json"

/* Reads dir/generation_config.json over *p (keys absent stay as they are); without it, the same
 * keys from a transformers config.json that has them (older checkpoints, e.g. OPUS-MT's: a
 * "model_type" and num_beams or max_length). source (n bytes) receives the file read, "" when
 * none (*p untouched). */
tern_status_t model_generation_load(tern_search_params_t *p, char *source, size_t n, const char *dir);

#endif
