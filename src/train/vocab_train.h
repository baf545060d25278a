/*
 * vocab_train.h — training SentencePiece vocabularies for `tern vocab` and `tern train`: one
 * model over both sides (joint) or one per side, written as SentencePiece files and as the
 * vocabulary JSON lists a Tern model directory carries (docs/model-format.md).
 */
#ifndef TERN_TRAIN_VOCAB_TRAIN_H
#define TERN_TRAIN_VOCAB_TRAIN_H

#include "base/base.h"
#include "text/spm.h"

/* Trains PREFIX.model and PREFIX.vocab on the inputs (o->inputs and o->model_prefix are ignored).
 * The trainer writes under a temporary prefix; both files are renamed into place at the end. */
tern_status_t vocab_train_spm(const char *prefix, const char *const *inputs, int n,
                              const spm_train_options_t *o);

/* Writes the pieces of a SentencePiece model, in id order, as a JSON list of strings. */
tern_status_t vocab_write_json(const char *spm_path, const char *json_path);

/* Trains the vocabulary of a model directory dir (created when absent):
 *   joint (separate = 0): one model on the source and target files:
 *       sentencepiece.model, sentencepiece.vocab, shared_vocabulary.json
 *   separate: source.spm (+ source.vocab) and source_vocabulary.json on the source files,
 *       target.spm (+ target.vocab) and target_vocabulary.json on the target files;
 * and config.json: unk/bos/eos tokens and "pad_token" (the pieces of the model's special ids,
 * which must all be enabled), decoder_start_token = the bos piece, add_source_bos/eos as given,
 * "format": "tern". data_vocab_load() reads such a directory. */
tern_status_t vocab_train_model_dir(const char *dir, const char *const *src_inputs, int n_src,
                                    const char *const *tgt_inputs, int n_tgt, int separate,
                                    const spm_train_options_t *o, int add_source_bos, int add_source_eos);

#endif
