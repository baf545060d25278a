/*
 * tern.h — the public C API of Tern, a neural machine translation toolkit.
 *
 * This is the only header a user includes. Handles are opaque. A model (read-only weights,
 * vocabularies, tokenizers) is loaded once and may be shared by any number of translators, one
 * per thread; each translator owns its workspace. No function here calls exit() or aborts on bad
 * input: each returns a tern_status_t and, on failure, tern_last_error() (per thread) says what
 * went wrong, naming the file, tensor or input line at fault.
 */
#ifndef TERN_H
#define TERN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TERN_VERSION "0.1.0"

/* ---------------------------------------------------------------- status */

typedef enum {
    TERN_OK = 0,
    TERN_ERR_IO,            /* a file could not be opened, read or written */
    TERN_ERR_FORMAT,        /* a file is truncated, corrupt or not of the expected format */
    TERN_ERR_MISMATCH,      /* files are valid but disagree (tensor shapes, vocabulary sizes) */
    TERN_ERR_UNSUPPORTED,   /* a valid model or option this build does not support */
    TERN_ERR_INVALID_ARG,   /* a caller passed a bad argument or option value */
    TERN_ERR_INPUT,         /* bad input data (e.g. line counts differ between files) */
    TERN_ERR_NOMEM,         /* an allocation failed */
    TERN_ERR_INTERNAL       /* a bug in Tern: please report it */
} tern_status_t;

/* A short constant description of a status ("I/O error", ...). */
const char *tern_status_string(tern_status_t status);
/* The message of the last error set on this thread ("" if none). Valid until the next failing
 * call on the same thread. */
const char *tern_last_error(void);

/* Log verbosity for messages Tern writes to stderr (warnings about truncated lines, ...). */
typedef enum { TERN_LOG_QUIET = 0, TERN_LOG_ERROR, TERN_LOG_WARN, TERN_LOG_INFO, TERN_LOG_DEBUG } tern_log_level_t;
void tern_set_log_level(tern_log_level_t level);

/* ---------------------------------------------------------------- model */

typedef enum {
    TERN_COMPUTE_AUTO = 0,  /* as stored: int8 weights run int8, float16/bfloat16/float32 run float32 */
    TERN_COMPUTE_FLOAT32,   /* dequantize/convert everything to float32 */
    TERN_COMPUTE_INT8       /* quantize linear weights to int8 with per-row scales at load time */
} tern_compute_type_t;

typedef struct tern_model tern_model_t;

typedef struct {
    tern_compute_type_t compute_type; /* how the weights are run (see tern_compute_type_t) */
    const char *source_spm;           /* SentencePiece model for the source side; NULL: look in the
                                         model directory (source.spm, sentencepiece.model, spm.model) */
    const char *target_spm;           /* SentencePiece model for the target side; NULL: look in the
                                         model directory (target.spm, else the source one) */
    int use_spm;                      /* 1: raw text goes through SentencePiece (error if none found);
                                         0: input is pre-tokenized, space-separated pieces;
                                         -1 (default): SentencePiece when a model is found */
} tern_model_options_t;

tern_model_options_t tern_model_default_options(void);

/* Loads a model directory: Tern's own format (config.json + model.safetensors) or a CTranslate2
 * Transformer model directory (model.bin + config.json + vocabularies). */
tern_status_t tern_model_load(tern_model_t **model, const char *dir, const tern_model_options_t *options);
void tern_model_free(tern_model_t *model);

/* Facts about a loaded model, for tools and tests. */
typedef struct {
    int encoder_layers, decoder_layers; /* number of layers */
    int d_model, num_heads, ffn_dim;    /* dimensions */
    int source_vocab_size, target_vocab_size;
    int pre_norm;                       /* 1 pre-norm, 0 post-norm */
    int int8;                           /* 1 when the linear layers run in int8 */
    int has_spm;                        /* 1 when raw text goes through SentencePiece */
    size_t weight_bytes;                /* bytes of weights as run */
    const char *format;                 /* "ctranslate2" or "tern" */
} tern_model_info_t;
tern_model_info_t tern_model_info(const tern_model_t *model);

/* ---------------------------------------------------------------- translation options */

typedef enum {
    TERN_EOS_COMMON = 0,  /* finished hypotheses leave the beam; B live ones continue
                             (CTranslate2 and fairseq) */
    TERN_EOS_PAPER = 1    /* an EOS candidate takes one of the B slots (Iglesias et al., Alg. 1) */
} tern_eos_policy_t;

typedef enum {
    TERN_LENPEN_PLAIN = 0, /* score / |Y|^alpha (CTranslate2's length_penalty) */
    TERN_LENPEN_GNMT = 1   /* score / ((5 + |Y|) / 6)^alpha (Wu et al.) */
} tern_length_norm_t;

typedef struct {
    int beam_size;              /* 1: greedy search (argmax, no softmax); >1: beam search */
    int num_hypotheses;         /* n-best: hypotheses returned per input (<= beam_size) */
    float length_penalty;       /* alpha of the length normalization; 0 disables it */
    tern_length_norm_t length_norm; /* formula used when length_penalty != 0 */
    float coverage_penalty;     /* beta of GNMT's coverage penalty; 0 disables it */
    tern_eos_policy_t eos_policy; /* what an EOS candidate does to the beam */
    int early_stop;             /* 1 (default): stop a sentence as CTranslate2 does -- without
                                   penalties once the best candidate of a step was EOS and enough
                                   hypotheses finished (the best one is then exact), with penalties
                                   once B hypotheses finished; 0: decode until no live hypothesis
                                   can beat the n-th best finished one (an exact n-best list) */
    float max_length_a;         /* max output length = a * source length + b ... */
    int max_length_b;           /* ... (b alone when a = 0), never above max_decoding_length */
    int max_decoding_length;    /* hard cap on output tokens (default 256) */
    int min_length;             /* no EOS before this many output tokens (default 1, as CTranslate2) */
    int max_input_length;       /* longer inputs are truncated with a warning (default 1024) */
    int return_scores;          /* 1: fill scores in the results */
    int max_batch_tokens;       /* token budget of one batch (source tokens, padded) */
    int max_batch_size;         /* cap on sentences in a batch (0: no cap) */
    int read_ahead;             /* file mode: batches read ahead and sorted together */
    int workers;                /* translators running in parallel (file mode); 0: auto */
    int threads_per_worker;     /* intra-op threads of each translator; 0: auto */
    int keep_unk;               /* 1: keep <unk> tokens in the output text */
    int print_scores;           /* stream mode: "LINE ||| HYPOTHESIS ||| SCORE" lines even for
                                   one hypothesis per input */
} tern_translate_options_t;

tern_translate_options_t tern_translate_default_options(void);

/* ---------------------------------------------------------------- translator */

typedef struct tern_translator tern_translator_t;

/* A translator holds the per-thread state (workspace, caches) for one model. Create one per thread. */
tern_status_t tern_translator_create(tern_translator_t **translator, const tern_model_t *model,
                                     const tern_translate_options_t *options);
void tern_translator_free(tern_translator_t *translator);

/* One input's result: num_hypotheses outputs, best first. */
typedef struct {
    int num_hypotheses;
    char **hypotheses;   /* [num_hypotheses] UTF-8 strings (detokenized when SentencePiece is used) */
    float *scores;       /* [num_hypotheses] search scores (normalized when a length penalty is set),
                            or NULL when return_scores is 0 */
} tern_result_t;

/* Translates n source strings (raw text, or space-separated pieces without SentencePiece).
 * results must point to n tern_result_t; free each with tern_result_free(). */
tern_status_t tern_translate_batch(tern_translator_t *translator, const char *const *sources, int n,
                                   tern_result_t *results);
void tern_result_free(tern_result_t *result);

/* Force decoding: the log-probability of each target token (and of the final EOS) given the
 * source. token_logprobs[i] has token_counts[i] entries; free with tern_score_results_free(). */
tern_status_t tern_score_batch(tern_translator_t *translator, const char *const *sources,
                               const char *const *targets, int n, float **token_logprobs,
                               int *token_counts);

/* Progress callback of file translation: sentences and target tokens done so far. */
typedef void (*tern_progress_fn)(long sentences, long target_tokens, double seconds, void *user_data);

/* Translates a stream, one output line per input line in the input's order, in constant memory.
 * With num_hypotheses > 1 each input line gives num_hypotheses lines "i ||| hypothesis ||| score"
 * (i counts input lines from 0). Runs options->workers translators in parallel. */
tern_status_t tern_translate_stream(const tern_model_t *model, FILE *in, FILE *out,
                                    const tern_translate_options_t *options,
                                    tern_progress_fn progress, void *user_data);

/* The instruction sets Tern runs with on this CPU. One build runs on every x86-64-v3 CPU (AVX2 +
 * FMA); faster paths are chosen at run time. TERN_MAX_CPU_ISA caps Tern's own choice and
 * ONEDNN_MAX_CPU_ISA oneDNN's (names: AVX2, AVX512_CORE, AVX512_CORE_VNNI, AVX512_CORE_BF16,
 * AVX512_CORE_AMX, ALL). All strings are static. Thread-safe. */
typedef struct {
    const char *detected;  /* what the CPU supports, e.g. "AVX512_CORE_VNNI" */
    const char *effective; /* after TERN_MAX_CPU_ISA */
    const char *onednn;    /* oneDNN's effective ISA (after ONEDNN_MAX_CPU_ISA), e.g. "avx2" */
    const char *int8_gemm; /* the int8 GEMM the linear layers use */
    const char *caps;      /* the TERN_MAX_CPU_ISA values this CPU can run, space-separated,
                              lowest first: "AVX2 AVX512_CORE ..." */
} tern_cpu_info_t;

tern_cpu_info_t tern_cpu_info(void);

/* ---------------------------------------------------------------- per-call options (server, bindings) */

/* The search options that may change from one call to the next on the same translator, apart
 * from the translator's set-up options (threads, batch budget, file mode). Start from
 * tern_call_options_from(&translator_options) and change what a call needs. */
typedef struct {
    int beam_size;                  /* 1: greedy; >1: beam search */
    int num_hypotheses;             /* n-best size (1..beam_size) */
    float length_penalty;           /* alpha; 0 disables it */
    tern_length_norm_t length_norm; /* formula used when length_penalty != 0 */
    float coverage_penalty;         /* beta; 0 disables it */
    float max_length_a;             /* max output length = a * source length + b ... */
    int max_length_b;               /* ... (b alone when a = 0), never above max_decoding_length */
    int max_decoding_length;        /* hard cap on output tokens */
    int min_length;                 /* no EOS before this many output tokens */
    int return_scores;              /* 1: fill scores in the results */
} tern_call_options_t;

/* The per-call part of a translator's options. Thread-safe. */
tern_call_options_t tern_call_options_from(const tern_translate_options_t *options);
/* Checks per-call options (ranges, num_hypotheses <= beam_size); TERN_ERR_INVALID_ARG with a
 * message naming the field otherwise. Thread-safe. */
tern_status_t tern_call_options_check(const tern_call_options_t *call);

/* tern_translate_batch() with these per-call options instead of the translator's own (which
 * are left as they were). Not thread-safe for one translator (one translator per thread). */
tern_status_t tern_translate_batch_with(tern_translator_t *translator, const char *const *sources, int n,
                                        const tern_call_options_t *call, tern_result_t *results);

/* Number of source tokens the model's tokenizer gives for text (with the end-of-sentence token
 * the model adds, before any truncation): what a batch's token budget counts. Thread-safe. */
tern_status_t tern_model_source_tokens(const tern_model_t *model, const char *text, int *count);

/* The library's version string, e.g. "0.1.0" (TERN_VERSION of the build). Thread-safe. */
const char *tern_version(void);

#ifdef __cplusplus
}
#endif
#endif /* TERN_H */
