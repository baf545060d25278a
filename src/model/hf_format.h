/*
 * hf_format.h — Hugging Face transformers checkpoints read as they are (docs/models.md): a
 * directory whose config.json has a "model_type" (and no "format": "tern") holds a
 * MarianMTModel: config.json (transformers' MarianConfig), model.safetensors (transformers'
 * tensor names, with or without the "model." prefix), vocab.json (a dict piece -> id; a
 * target_vocab.json beside it for separate vocabularies), source.spm and target.spm, and
 * perhaps generation_config.json (read by generation.h as for every model).
 *
 * hf_checkpoint_load presents it as a Tern Transformer: the tensors under the Transformer
 * description's names (transformer_desc.h; q, k, v fused where the description fuses them), the
 * description's config keys (heads, norm placement, activation, embedding scale), the position
 * table computed with transformers' formula as a learned table, final_logits_bias as the output
 * projection's bias, the layer-norm epsilon 1e-5 (torch's default), the special tokens as
 * config.json names them by id, and the tokens never generated (the pad token, as transformers'
 * bad_words_ids; bad_words_ids of config.json and generation_config.json too).
 */
#ifndef TERN_HF_FORMAT_H
#define TERN_HF_FORMAT_H

#include "model/weights.h"
#include "text/vocab.h"

/* 1 when config_path (a config.json) is a Hugging Face one: it has "model_type" and is not
 * Tern's ("format": "tern"); 0 otherwise (also when it cannot be read: its reader says why). */
int hf_is_checkpoint(const char *config_path);

enum { HF_MAX_NEVER = 64 };

typedef struct {
    weights_t *weights;             /* the tensors under the Transformer description's names */
    vocab_t *src_vocab, *tgt_vocab; /* the same object for a joint vocab.json */
    char src_vocab_path[1024], tgt_vocab_path[1024];
    model_config_t cfg;             /* special tokens, add_source_eos, layer_norm_epsilon */
    char model_type[32];
    /* token sequences never generated (transformers' bad_words_ids; the pad token first): the
     * tokens of sequence i are never[never_off[i] .. never_off[i + 1]) */
    int never[HF_MAX_NEVER], never_off[HF_MAX_NEVER + 1], n_never;
    /* M2M-100/NLLB: the language codes (tokens of the vocabulary: "deu_Latn", "__de__"), as the
     * tokenizer files list them (additional_special_tokens), from langs_path */
    char **langs;
    int n_langs;
    char langs_path[1100];
    /* a Marian model (marian_format.h): its SentencePiece vocabularies ("" when not SentencePiece) */
    char src_spm_path[1100], tgt_spm_path[1100];
    /* a Marian model: decoder.yml's `shortlist` values ("FILE,first,best,threshold", the file
     * resolved as the model's), "" when it has none */
    char shortlist[1300];
} hf_checkpoint_t;

/* bad_words_ids of DIR/generation_config.json (nothing when there is none) added to out's never
 * lists (out zeroed by the caller, or a checkpoint's): what a directory converted from a Hugging
 * Face checkpoint (`tern convert --to ct2`) or fine-tuned from one (`tern train --init-from`)
 * keeps of the tokens transformers never generates. V: the target vocabulary's size. */
tern_status_t hf_generation_never(hf_checkpoint_t *out, const char *dir, int V);

/* Reads the checkpoint in dir. need_spm: source.spm and target.spm must be there (an error
 * naming the missing one otherwise). Errors name the file and the key or tensor at fault: an
 * unknown model_type, a missing or wrong key, a missing or mis-shaped tensor, a vocabulary that
 * does not match the embedding rows, a truncated model.safetensors. On success the caller owns
 * out's weights and vocabularies (hf_checkpoint_free frees them). */
tern_status_t hf_checkpoint_load(hf_checkpoint_t *out, const char *dir, int need_spm);
void hf_checkpoint_free(hf_checkpoint_t *c);

#endif
