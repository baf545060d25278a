/*
 * marian_format.h — Marian's own model files read as they are (docs/models.md): a directory
 * holding a model.npz that Marian wrote (a zip of .npy arrays under Marian's parameter names:
 * Wemb, encoder_l1_self_Wq, decoder_ff_logit_out_b, ...; its options as the "special:model.yml"
 * array) or the same items in Marian's binary model.bin, perhaps the decoder.yml Marian writes
 * beside it (model.npz.decoder.yml, model.bin.decoder.yml or decoder.yml:
 * "models" and "vocabs"), and the vocabularies: SentencePiece models (.spm), or Marian's YAML
 * (.yml) or JSON (.json) token -> id maps, joint or one per side.
 *
 * marian_checkpoint_load presents the model as a Tern Transformer (hf_checkpoint_t, as a Hugging
 * Face checkpoint is): Marian's (in, out) matrices transposed to the description's (out, in),
 * q, k, v fused, the layer norms of post-norm ("_ln_scale") or pre-norm ("_ln_scale_pre", final
 * "encoder_top_ln_scale") layers, the embeddings tied as tied-embeddings-all / -src / tied-embeddings
 * say, the positions as Marian computes them (its sinusoids, in float32, with embeddings times
 * sqrt(dim-emb)) or its learned table "Wpos" (embeddings unscaled), the decoder started from a zero
 * embedding, layer-norm epsilon 1e-6, and <unk> never generated (Marian's default, without
 * --allow-unk).
 */
#ifndef TERN_MARIAN_FORMAT_H
#define TERN_MARIAN_FORMAT_H

#include "model/hf_format.h"

/* 1 when dir holds a Marian model: a decoder.yml (model.npz.decoder.yml, model.bin.decoder.yml,
 * decoder.yml), model.npz, or a model.bin in Marian's binary format (and no config.json or
 * model.safetensors, and no CTranslate2 model.bin). */
int marian_is_dir(const char *dir);

/* Reads the Marian model in dir (out->model_type "marian-native"; out->src_spm_path and
 * tgt_spm_path set when the vocabularies are SentencePiece models). Errors name the file and the
 * option, tensor or token at fault: a truncated or corrupt .npz, a missing tensor, a shape that
 * does not match model.yml, an option Tern does not support, a vocabulary that does not match the
 * embedding rows. */
tern_status_t marian_checkpoint_load(hf_checkpoint_t *out, const char *dir);

#endif
