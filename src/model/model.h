/* model.h — the loaded model behind tern_model_t: its family table and network (family.h),
 * weights, vocabularies and tokenizers; or an ensemble of such models (ensemble.h). */
#ifndef TERN_MODEL_H
#define TERN_MODEL_H

#include "model/family.h"
#include "search/vmap.h"
#include "text/spm.h"
#include "text/vocab.h"
#include "model/weights.h"

/* tern_model_options_t's size in 1.0.0 and 1.1.0 (it grew in 1.2: shortlist) */
#define MODEL_OPTIONS_SIZE_1_0 ABI_SIZE_UPTO(tern_model_options_t, use_vmap)

struct tern_model {
    char dir[1024];
    char format[16];             /* "ctranslate2", "tern", "huggingface", "marian" or "ensemble" */
    const model_family_t *fam;   /* the family table the translator and the search use */
    void *net;                   /* the family's network (read-only, shared by translators) */
    tern_model_info_t info;      /* described once at load */
    weights_t *weights;          /* NULL for an ensemble */
    vocab_t *src_vocab, *tgt_vocab; /* may be the same object; NULL for an ensemble */
    char src_vocab_path[1024], tgt_vocab_path[1024];
    spm_t *src_spm, *tgt_spm;       /* NULL: pre-tokenized input/output */
    model_config_t cfg;
    int src_bos, src_eos, src_unk;  /* ids in the source vocabulary (-1: absent) */
    int tgt_start, tgt_eos, tgt_unk;/* an ensemble: its members' (all equal) */
    /* an ensemble: its members (owned), whose target side (member 0's) decodes the output */
    tern_model_t **members;
    int n_members;
    vmap_t *vmap;                /* the vocabulary map, or NULL (an ensemble: member 0's, not owned) */
    /* its decoding defaults: the library's, with generation_config.json's over them (generation.h);
     * an ensemble: member 0's */
    tern_search_params_t search;
    /* target token sequences it never outputs (a Hugging Face checkpoint's pad token and
     * bad_words_ids; the search suppresses them in every request): sequence i is
     * never_tok[never_off[i] .. never_off[i + 1]); an ensemble: member 0's (not owned) */
    int *never_tok, *never_off;
    int n_never;
    int never_on_logprobs;       /* 1: they are removed after the softmax (Marian's <unk>), not renormalized */
    /* a multilingual model's language codes (M2M-100/NLLB: tokens of both vocabularies, "deu_Latn");
     * an ensemble: member 0's (not owned) */
    char **langs;
    int n_langs;
    /* NULL, or (target vocabulary) 1 for the special tokens text output leaves out (a multilingual
     * model's language codes, <s>, <pad>, <mask>: what transformers' skip_special_tokens drops; <unk>
     * as keep_unk says); an ensemble: member 0's (not owned) */
    uint8_t *tgt_skip;
    int marian_codes;            /* raw source text may start with a language code ">>fra<<" (MarianTokenizer's) */
    char search_source[1040];    /* the file they came from; "" when the model has none */
    char spm_path[2][1100];      /* a Marian model's SentencePiece vocabularies (source, target); "" otherwise */
    char shortlist[1300];        /* a Marian model's decoder.yml shortlist values ("" when none); the
                                    shortlist in use is vmap (shortlist.h) */
};

/* Source text -> token ids (SentencePiece or space-separated pieces, unknown pieces -> unk,
 * bos/eos added as the config says), truncated to max_len with *truncated set. An ensemble's
 * source is its members' sources packed as ensemble.h says, *n the longest of them.
 * *ids is malloc'd (free it); *n may be 0 for an empty line. */
tern_status_t model_encode_source(const tern_model_t *m, const char *text, size_t len, int max_len,
                                  int **ids, int *n, int *truncated);
/* Target token ids -> text (SentencePiece decoding or pieces joined by spaces), malloc'd. */
tern_status_t model_decode_target(const tern_model_t *m, const int *ids, int n, int keep_unk, char **text);
/* Target text -> ids (for force decoding), without start/end tokens. */
tern_status_t model_encode_target(const tern_model_t *m, const char *text, size_t len, int **ids, int *n);
/* The same with pretok = 1: text is space-separated pieces even when the model has SentencePiece
 * (and the output is pieces joined by spaces), as CTranslate2 takes and gives tokens. */
tern_status_t model_encode_source_ex(const tern_model_t *m, const char *text, size_t len, int max_len, int pretok,
                                     int **ids, int *n, int *truncated);
/* The same with a language code (NULL: none) as the first token (M2M-100/NLLB's tokenizers). */
tern_status_t model_encode_source_lang(const tern_model_t *m, const char *text, size_t len, int max_len, int pretok,
                                       const char *lang, int **ids, int *n, int *truncated);
tern_status_t model_encode_target_ex(const tern_model_t *m, const char *text, size_t len, int pretok, int **ids,
                                     int *n);
tern_status_t model_decode_target_ex(const tern_model_t *m, const int *ids, int n, int keep_unk, int pretok,
                                     char **text);
/* model_decode_target_ex with replacements: repl NULL, or n entries (NULL: the token's own piece)
 * written in place of the tokens' pieces (replace_unknowns). */
tern_status_t model_decode_target_repl(const tern_model_t *m, const int *ids, int n, int keep_unk, int pretok,
                                       const char *const *repl, char **text);

#endif
