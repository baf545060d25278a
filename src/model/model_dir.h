/*
 * model_dir.h — writing Tern model directories (docs/model-format.md): config.json,
 * model.safetensors (Tern metadata, aliases as "alias:<name>" metadata), vocabularies as JSON
 * lists, SentencePiece models. Used by `tern convert`, training checkpoints and `tern average`.
 * Every file is written under a temporary name (".tmp" appended) and renamed into place; errors
 * name the file.
 */
#ifndef TERN_MODEL_DIR_H
#define TERN_MODEL_DIR_H

#include "base/base.h"
#include "text/vocab.h"
#include "model/weights.h"

/* Writes text and a final newline to path. */
tern_status_t model_dir_write_text(const char *path, const char *text);
/* Copies a file byte for byte. */
tern_status_t model_dir_copy_file(const char *from, const char *to);
/* Writes a vocabulary as a JSON list of its tokens (shared_vocabulary.json and the like). */
tern_status_t model_dir_write_vocab(const vocab_t *v, const char *path);
/* Rewrites a vocabulary file (.json or legacy .txt) as a JSON list. */
tern_status_t model_dir_convert_vocab(const char *from, const char *to);

/* out_dir/config.json: the keys of from_config (an existing config.json, validated; every key
 * kept) when given, else those of cfg (unk/bos/eos/decoder start tokens, add_source_bos/eos,
 * layer_norm_epsilon: null when < 0); pad_token (when not NULL) as "pad_token"; then
 * "format": "tern", "format_version": 1. */
tern_status_t model_dir_write_config(const char *out_dir, const char *from_config, const model_config_t *cfg,
                                     const char *pad_token);
/* The same for a CTranslate2 directory: without "format", "format_version" and "architecture". */
tern_status_t model_dir_write_ct2_config(const char *out_dir, const char *from_config, const model_config_t *cfg);

/* out_dir/model.safetensors: the tensors (written sorted by name; data as given), metadata
 * "format": "tern", then the n_meta given pairs, then one "alias:<alias_names[i]>":
 * "<alias_targets[i]>" per alias. */
tern_status_t model_dir_write_weights(const char *out_dir, const tensor_t *tensors, int n,
                                      const char *const *alias_names, const char *const *alias_targets,
                                      int n_aliases, const char *const *meta_keys,
                                      const char *const *meta_values, int n_meta);

/* Copies the vocabularies (shared_vocabulary, else source_ and target_vocabulary; .json or .txt,
 * written as .json) and the SentencePiece models (source.spm, target.spm, sentencepiece.model,
 * spm.model, source.model, target.model) and the decoding defaults (generation_config.json) found
 * in from_dir into out_dir. */
tern_status_t model_dir_copy_side_files(const char *from_dir, const char *out_dir);

/* Creates a directory (0755) and its missing parents, as mkdir -p; an existing one is fine. */
tern_status_t model_dir_mkdir(const char *dir);

#endif
