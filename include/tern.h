/*
 * tern.h — the public C API of Tern, a neural machine translation toolkit.
 *
 * This is the only header a user includes. Handles are opaque. A model (read-only weights,
 * vocabularies, tokenizers) is loaded once and may be shared by any number of translators, one
 * per thread; each translator owns its workspace. No function here calls exit() or aborts on bad
 * input: each returns a tern_status_t and, on failure, tern_last_error() (per thread) says what
 * went wrong, naming the file, tensor or input line at fault.
 *
 * Threads, in short: a model is read-only once loaded and may be used by any number of threads at
 * once; a translator is used by one thread at a time (one per thread); functions without a handle
 * are thread-safe. Each declaration below says which of these applies.
 *
 * Version and ABI. TERN_VERSION below is the one place Tern's version is written (the library's
 * file name libtern.so.MAJOR.MINOR.PATCH, its SONAME libtern.so.MAJOR, tern.pc, `tern --version`
 * and the Python package read it; CHANGELOG.md). Within one MAJOR version the ABI only grows:
 *   - Functions are never removed or changed; each exported one carries the symbol version
 *     TERN_<MAJOR> (a version script generated from this header), so that a function whose
 *     arguments must change gets a new symbol version while programs linked before keep the old.
 *   - Every struct passed by value between a program and the library starts with `size_t
 *     struct_size`: its size in bytes as the side that filled it knows the struct. New fields
 *     are only appended. tern_*_default_options() set it (to sizeof of the library's struct);
 *     functions taking an options struct read only struct_size bytes of it and give the fields
 *     beyond them their defaults, so a program built against an older tern.h runs unchanged
 *     against a newer library. struct_size 0 (a struct the caller zeroed and filled by hand) is
 *     read as the layout of version 0.3.0, the first with struct_size. A struct_size larger than
 *     the library knows (a program built against a newer tern.h than the libtern it runs with)
 *     is TERN_ERR_INVALID_ARG, naming the struct.
 *     tern_model_info() and tern_cpu_info() set struct_size in what they return. When a struct
 *     grows, the functions that return it by value (its defaults, tern_model_info(),
 *     tern_cpu_info()) get a new symbol version, and their old version keeps filling the old
 *     layout for programs linked before (a by-value return writes into the caller's storage).
 *   - Structs the caller allocates in arrays or as outputs (tern_result_t, tern_bleu_score_t) and
 *     the callback event tern_token_event_t keep their layout for the whole MAJOR version.
 *   Start options from the defaults and set fields by name (never positional initializers).
 */
#ifndef TERN_H
#define TERN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version, MAJOR.MINOR.PATCH: the only place it is written (see "Version and ABI" above). */
#define TERN_VERSION "0.3.0"

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
    TERN_ERR_INTERNAL,      /* a bug in Tern: please report it */
    TERN_ERR_CANCELLED      /* the caller's cancellation flag was set (tern_call_options_t.cancel)
                               or a callback asked to stop; nothing of the call is left allocated */
} tern_status_t;

/* A short constant description of a status ("I/O error", ...). Thread-safe. */
const char *tern_status_string(tern_status_t status);
/* The message of the last error set on this thread ("" if none). Valid until the next failing
 * call on the same thread. Thread-safe (per-thread storage). */
const char *tern_last_error(void);

/* Log verbosity for messages Tern writes to stderr (warnings about truncated lines, ...). */
typedef enum { TERN_LOG_QUIET = 0, TERN_LOG_ERROR, TERN_LOG_WARN, TERN_LOG_INFO, TERN_LOG_DEBUG } tern_log_level_t;
/* Process-wide; thread-safe (an atomic store). */
void tern_set_log_level(tern_log_level_t level);

/* A log message (NUL-terminated, without the "tern: level: " prefix or a newline), valid during
 * the call only. It may be called from any thread that calls into Tern, several at once: the
 * function must be thread-safe. */
typedef void (*tern_log_fn)(tern_log_level_t level, const char *message, void *user_data);
/* Sends Tern's log messages (those at or above the log level) to fn instead of stderr; NULL
 * restores stderr. Process-wide; thread-safe (a message is given either to the old or to the new
 * function, never half of it), but the old user_data may still be in use by a message being
 * logged while this returns. */
void tern_set_log_callback(tern_log_fn fn, void *user_data);

/* ---------------------------------------------------------------- model */

typedef enum {
    TERN_COMPUTE_AUTO = 0,  /* as stored: int8 weights run int8, float16/bfloat16/float32 run float32 */
    TERN_COMPUTE_FLOAT32,   /* dequantize/convert everything to float32 */
    TERN_COMPUTE_INT8       /* quantize linear weights to int8 with per-row scales at load time */
} tern_compute_type_t;

typedef struct tern_model tern_model_t;

typedef struct {
    size_t struct_size;               /* sizeof this struct (set by the defaults; see "Version and ABI") */
    tern_compute_type_t compute_type; /* how the weights are run (see tern_compute_type_t) */
    const char *source_spm;           /* SentencePiece model for the source side; NULL: look in the
                                         model directory (source.spm, sentencepiece.model, spm.model) */
    const char *target_spm;           /* SentencePiece model for the target side; NULL: look in the
                                         model directory (target.spm, else the source one) */
    int use_spm;                      /* 1: raw text goes through SentencePiece (error if none found);
                                         0: input is pre-tokenized, space-separated pieces;
                                         -1 (default): SentencePiece when a model is found */
    const char *vmap;                 /* a vocabulary map (CTranslate2's vmap format, `tern vmap`): the
                                         translators restrict the output projection and the search
                                         to the candidates of each batch's source n-grams; NULL: none */
    int use_vmap;                     /* 1: the model directory's vmap.txt (as CTranslate2's use_vmap;
                                         an error when absent), unless vmap is given (0) */
} tern_model_options_t;

tern_model_options_t tern_model_default_options(void); /* thread-safe */

/* Loads a model directory: Tern's own format (config.json + model.safetensors) or a CTranslate2
 * Transformer model directory (model.bin + config.json + vocabularies). Thread-safe: several
 * models may load at once (one-time library set-up is guarded). */
tern_status_t tern_model_load(tern_model_t **model, const char *dir, const tern_model_options_t *options);
/* Frees a model. Not thread-safe for that model: only once no thread uses it and every translator
 * created on it has been freed. */
void tern_model_free(tern_model_t *model);

/* How an ensemble combines its members' next-token distributions (weights w_k, normalized to sum 1). */
typedef enum {
    TERN_ENSEMBLE_LOGPROB_MEAN = 0, /* sum_k w_k log p_k (Marian): scores as they are, not renormalized */
    TERN_ENSEMBLE_PROB_MEAN = 1     /* log sum_k w_k p_k (fairseq): a log-probability */
} tern_ensemble_mode_t;

/* The Transformer's own facts (family "transformer"). */
typedef struct {
    int encoder_layers, decoder_layers; /* number of layers */
    int d_model, num_heads, ffn_dim;    /* dimensions */
    int pre_norm;                       /* 1 pre-norm, 0 post-norm */
} tern_transformer_info_t;

/* The GRU family's own facts (family "rnn-gru", docs/rnn.md). */
typedef struct {
    int embedding_size;                 /* E */
    int encoder_hidden_size;            /* per direction */
    int decoder_hidden_size;
    int attention_size, output_size;    /* attention hidden size, deep-output width */
    int layer_norm;                     /* 1: layer-normalized GRU cells */
} tern_rnn_gru_info_t;

/* An ensemble's own facts (family "ensemble"); each member's with tern_model_member(). */
typedef struct {
    tern_ensemble_mode_t mode;
    const float *weights;               /* [num_members] normalized weights (sum 1), valid while
                                           the model lives */
} tern_ensemble_info_t;

/* Facts about a loaded model, for tools and tests: common fields, then the family's own part. */
typedef struct {
    size_t struct_size;                 /* sizeof this struct (set by tern_model_info()) */
    const char *family;                 /* "transformer", "rnn-gru", "gnmt", "ensemble" */
    const char *format;                 /* "ctranslate2" or "tern" ("ensemble" for an ensemble) */
    int source_vocab_size, target_vocab_size; /* an ensemble: its first member's source vocabulary */
    int max_source_length;              /* longest source (tokens) the model encodes */
    int max_target_length;              /* longest output (tokens, EOS included) it decodes */
    int int8;                           /* 1 when the linear layers run in int8 (every member's) */
    int has_spm;                        /* 1 when raw text goes through SentencePiece */
    size_t weight_bytes;                /* bytes of weights as run (all members) */
    int num_members;                    /* 1, or the members of an ensemble */
    union {                             /* by family */
        tern_transformer_info_t transformer;
        tern_ensemble_info_t ensemble;
        tern_rnn_gru_info_t rnn_gru;
    };
} tern_model_info_t;
tern_model_info_t tern_model_info(const tern_model_t *model); /* thread-safe (the model is read-only) */

/* Loads n model directories as one model, an ensemble: at each step its next-token scores are the
 * members' distributions combined by mode with weights (n entries > 0, normalized to sum 1; NULL:
 * equal weights). Members may be of different families and sizes; their target vocabularies must
 * be identical piece for piece (else TERN_ERR_MISMATCH naming the first differing piece and both
 * files), as must their decoder start and end tokens. Each member keeps its own source vocabulary
 * and SentencePiece model (the source is encoded once per member) and its own weights (members
 * share nothing; the same directory twice is loaded twice). The coverage penalty uses the
 * weighted mean of the members' attention rows. options apply to every member. Free with
 * tern_model_free(). Thread-safe, as tern_model_load(). */
tern_status_t tern_model_load_ensemble(tern_model_t **model, const char *const *dirs, int n,
                                       const float *weights, tern_ensemble_mode_t mode,
                                       const tern_model_options_t *options);
/* Member i (0 <= i < num_members) of an ensemble, or NULL; a single model is its own member 0.
 * Thread-safe. */
const tern_model_t *tern_model_member(const tern_model_t *model, int i);

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
    size_t struct_size;         /* sizeof this struct (set by the defaults; see "Version and ABI") */
    int beam_size;              /* 1: greedy search (argmax of the logits, no softmax; of the
                                   combined scores for an ensemble); >1: beam search */
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
    /* beam pruning, off by default: */
    float prune_width;          /* GNMT's beam width: candidates more than this below the best one of
                                   the step, and live hypotheses whose normalized score is more than
                                   this below the best finished one's, are dropped (0: off) */
    float prune_threshold;      /* candidates whose token probability is below this are dropped,
                                   except the best of the step (0: off) */
    /* stream mode: decoding under constraints and posteriors, from files (NULL: none) */
    const char *suppress_file;      /* pieces or piece sequences never output, one per line */
    const char *target_prefix_file; /* one line per input line: forced first target tokens */
    const char *restrict_file;      /* n-best list ("i ||| hypothesis ||| score", Moses, or one
                                       hypothesis per line): decoding of input i follows only the
                                       paths of its hypotheses (exact model scores) */
    const char *constraints_file;   /* one JSON list of target phrases per input line, each of which
                                       must appear in the output (constrained beam search, dynamic
                                       beam allocation) */
    const char *const *lmbr_evidence; /* n-best lists of one or more systems: LMBR posteriors */
    int num_lmbr_evidence;
    const float *lmbr_weights;  /* (num_lmbr_evidence) per-system weights (NULL: all 1) */
    float lmbr_alpha;           /* posteriors p(e) ∝ exp(alpha * score) (default 1) */
    float lmbr_p, lmbr_r;       /* Tromble's linear-BLEU: theta_n = 1 / (4 p r^(n-1)) (0.85, 0.7) */
    float lmbr_lambda;          /* weight of the NMT log-probability (default 0: 0.5 divided by the
                                   number of models, the paper's setting: 0.5 for one model, 0.25
                                   for an ensemble of two) */
    int lmbr_clip;              /* 1: each evidence n-gram earns its posterior once per hypothesis
                                   (its count in the hypothesis clipped to 1); 0 (default): at every
                                   occurrence, as Tromble's linear gain */
    int lmbr_sum_gain;          /* 1: the length penalty divides only the NMT part of the score; the
                                   LMBR gain is added as a sum (theta_0 = -1 per word stays the
                                   length term); 0 (default): the whole score is divided */
} tern_translate_options_t;

tern_translate_options_t tern_translate_default_options(void); /* thread-safe */

/* ---------------------------------------------------------------- translator */

typedef struct tern_translator tern_translator_t;

/* A translator holds the per-thread state (workspace, caches) for one model. Create one per thread.
 * Thread-safe: translators on one model may be created at once from several threads. */
tern_status_t tern_translator_create(tern_translator_t **translator, const tern_model_t *model,
                                     const tern_translate_options_t *options);
/* Not thread-safe for that translator (no call on it may be running). */
void tern_translator_free(tern_translator_t *translator);

/* One input's result: num_hypotheses outputs, best first. */
typedef struct {
    int num_hypotheses;
    char **hypotheses;   /* [num_hypotheses] UTF-8 strings (detokenized when SentencePiece is used) */
    float *scores;       /* [num_hypotheses] search scores (normalized when a length penalty is set),
                            or NULL when return_scores is 0 */
} tern_result_t;

/* Translates n source strings (raw text, or space-separated pieces without SentencePiece).
 * results must point to n tern_result_t; free each with tern_result_free(). This and every other
 * function taking a translator: not thread-safe for one translator (one call at a time on it);
 * different translators, on one model or several, run in parallel from different threads.
 * tern_result_free() and tern_score_results_free() touch only their arguments: thread-safe. */
tern_status_t tern_translate_batch(tern_translator_t *translator, const char *const *sources, int n,
                                   tern_result_t *results);
void tern_result_free(tern_result_t *result);

/* As tern_translate_batch, with a target prefix per source (target_prefixes[i] NULL or "": none;
 * text, or space-separated pieces without SentencePiece): the output starts with the prefix's
 * tokens, forced, and the search goes on freely from there (CTranslate2's target_prefix). */
tern_status_t tern_translate_batch_prefix(tern_translator_t *translator, const char *const *sources,
                                          const char *const *target_prefixes, int n, tern_result_t *results);

/* Force decoding: the log-probability of each target token (and of the final EOS) given the
 * source (an ensemble's: its combined score of each token). token_logprobs[i] (malloc'd) has
 * token_counts[i] entries (0 for an empty source); free them with tern_score_results_free(). */
tern_status_t tern_score_batch(tern_translator_t *translator, const char *const *sources,
                               const char *const *targets, int n, float **token_logprobs,
                               int *token_counts);
/* Frees the n arrays tern_score_batch() gave (and sets them to NULL). */
void tern_score_results_free(float **token_logprobs, int n);

/* Progress callback of file translation: sentences and target tokens done so far. */
typedef void (*tern_progress_fn)(long sentences, long target_tokens, double seconds, void *user_data);

/* Translates a stream, one output line per input line in the input's order, in constant memory.
 * With num_hypotheses > 1 each input line gives num_hypotheses lines "i ||| hypothesis ||| score"
 * (i counts input lines from 0). Runs options->workers translators in parallel. Thread-safe (it
 * creates its own translators; the progress callback runs on the calling thread); in and out
 * must not be used by another thread meanwhile. */
tern_status_t tern_translate_stream(const tern_model_t *model, FILE *in, FILE *out,
                                    const tern_translate_options_t *options,
                                    tern_progress_fn progress, void *user_data);

/* ---------------------------------------------------------------- vocabulary map */

/* Options of tern_vmap_build() (defaults from tern_vmap_default_options() in parentheses). */
typedef struct {
    size_t struct_size; /* sizeof this struct (set by the defaults; see "Version and ABI") */
    int max_ngram;    /* longest source n-gram with a rule (3) */
    int top_n;        /* aligned target pieces kept per source n-gram, 1..256 (20) */
    int top_k;        /* most frequent target pieces that are always candidates (200) */
    int min_count;    /* n-grams of 2+ pieces seen in fewer sentence pairs get no rule (2) */
    int iterations;   /* EM iterations of the aligner (5) */
    float p0;         /* aligner: probability of aligning to nothing (0.08) */
    float tension;    /* aligner: pull towards the diagonal; 0 gives IBM Model 1 (4) */
    long max_pairs;   /* read at most this many sentence pairs; 0: all (0) */
} tern_vmap_options_t;

tern_vmap_options_t tern_vmap_default_options(void); /* thread-safe */

/* Builds a vocabulary map (CTranslate2's vmap format: "source n-gram<TAB>target pieces" lines)
 * for model from a parallel corpus (two files, one sentence a line, raw text through the model's
 * SentencePiece models or pre-tokenized pieces as the model takes them): aligns the pieces with
 * Tern's aligner (IBM Model 2, fast_align's diagonal prior), keeps for each source 1..max_ngram-gram
 * the top_n target pieces aligned to it and the top_k most frequent target pieces, and writes
 * out_path (atomically). A line of progress goes to report when not NULL. Thread-safe (the model
 * is only read); two builds must not write the same out_path at once. */
tern_status_t tern_vmap_build(const tern_model_t *model, const char *source_path, const char *target_path,
                              const char *out_path, const tern_vmap_options_t *options, FILE *report);

/* The instruction sets Tern runs with on this CPU. One build runs on every x86-64-v3 CPU (AVX2 +
 * FMA); faster paths are chosen at run time. TERN_MAX_CPU_ISA caps Tern's own choice and
 * ONEDNN_MAX_CPU_ISA oneDNN's (names: AVX2, AVX512_CORE, AVX512_CORE_VNNI, AVX512_CORE_BF16,
 * AVX512_CORE_AMX, ALL). All strings are static. Thread-safe. */
typedef struct {
    size_t struct_size;    /* sizeof this struct (set by tern_cpu_info()) */
    const char *detected;  /* what the CPU supports, e.g. "AVX512_CORE_VNNI" */
    const char *effective; /* after TERN_MAX_CPU_ISA */
    const char *onednn;    /* oneDNN's effective ISA (after ONEDNN_MAX_CPU_ISA), e.g. "avx2" */
    const char *int8_gemm; /* the int8 GEMM the linear layers use */
    const char *caps;      /* the TERN_MAX_CPU_ISA values this CPU can run, space-separated,
                              lowest first: "AVX2 AVX512_CORE ..." */
} tern_cpu_info_t;

tern_cpu_info_t tern_cpu_info(void);

/* ---------------------------------------------------------------- per-call options (server, bindings) */

/* Per-sentence completion callback: input index (0..n-1 in the call) and its result, exactly what
 * tern_translate_batch() gives for it (valid during the call only; results[index] when the call
 * has a results array). Called once per input, on the calling thread, as soon as the input's
 * search is finished (so in no particular order; empty inputs first). Return 0 to go on, nonzero
 * to stop the call with TERN_ERR_CANCELLED. */
typedef int (*tern_result_fn)(int index, const tern_result_t *result, void *user_data);

/* One step of one input's search, for streaming (tern_token_fn). */
typedef struct {
    int index;              /* input index (0..n-1 in the call) */
    int step;               /* decoding step, from 0 (the step that chose output token `step`);
                               -1 in beam search's final event */
    const int *token_ids;   /* the hypothesis so far: target vocabulary ids, without start or end
                               token (num_tokens of them); valid during the call only */
    int num_tokens;
    const char *text;       /* the hypothesis so far as the result will give it (detokenized, or
                               pieces joined by spaces) */
    const char *delta;      /* greedy search: the text this event adds to what the previous events
                               of this input gave, so the deltas of an input concatenate to its
                               final hypothesis (when the detokenized prefix of a step is not a
                               prefix of the next one, e.g. an incomplete UTF-8 byte sequence,
                               the delta waits until it is); beam search: NULL */
    int is_last;            /* 1: the input's last event (its search is finished; text is its
                               final best hypothesis) */
} tern_token_event_t;

/* Per-token streaming callback, called on the calling thread. Greedy search (beam_size 1): one
 * event per input per decoding step, the token chosen at that step appended (an end token adds
 * nothing; is_last on the step that ends the hypothesis). Beam search: one event per input per
 * step while it has live hypotheses, giving the best live hypothesis (the highest sum of token
 * log-probabilities among the beams kept at that step, no length penalty: it may change from one
 * step to the next and need not be a prefix of the final result), then one event with is_last = 1
 * giving the final best hypothesis. Return 0 to go on, nonzero to stop the call with
 * TERN_ERR_CANCELLED. */
typedef int (*tern_token_fn)(const tern_token_event_t *event, void *user_data);

/* The search options that may change from one call to the next on the same translator, apart
 * from the translator's set-up options (threads, batch budget, file mode). Start from
 * tern_call_options_from(&translator_options) and change what a call needs. */
typedef struct {
    size_t struct_size;             /* sizeof this struct (set by tern_call_options_from(); see
                                       "Version and ABI") */
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
    /* what a binding or a server needs (tern_call_options_from() sets them to 0 / NULL): */
    int pretokenized;               /* 1: sources, prefixes and targets are space-separated pieces
                                       even when the model has SentencePiece, and the hypotheses
                                       are pieces joined by spaces (CTranslate2's token lists) */
    int max_batch_size;             /* > 0: cap on sentences per batch for this call (else the
                                       translator's max_batch_size) */
    int max_batch_tokens;           /* > 0: token budget of a batch for this call (else the
                                       translator's max_batch_tokens) */
    int max_input_length;           /* > 0: longer inputs are truncated for this call (else the
                                       translator's max_input_length) */
    tern_result_fn on_result;       /* per-sentence completion callback (NULL: none) */
    void *on_result_data;           /* its user_data */
    tern_token_fn on_token;         /* per-token streaming callback (NULL: none) */
    void *on_token_data;            /* its user_data */
    const volatile int *cancel;     /* NULL, or a flag another thread may set to nonzero: the call
                                       checks it before each batch and each decoding step, stops
                                       with TERN_ERR_CANCELLED and frees everything it allocated
                                       (the results are left empty) */
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

/* The general form: tern_translate_batch_with() with target prefixes (NULL, or n entries each
 * NULL/"" or a prefix, as tern_translate_batch_prefix()). results may be NULL when call->on_result
 * is set: each result is then given to the callback only (and freed after it). On any failure
 * (TERN_ERR_CANCELLED included) the results are left empty (zeroed). Not thread-safe for one
 * translator. */
tern_status_t tern_translate_batch_ex(tern_translator_t *translator, const char *const *sources,
                                      const char *const *target_prefixes, int n,
                                      const tern_call_options_t *call, tern_result_t *results);

/* tern_score_batch() honouring call->pretokenized and call->cancel (the other fields are unused;
 * call may be NULL). Not thread-safe for one translator. */
tern_status_t tern_score_batch_with(tern_translator_t *translator, const char *const *sources,
                                    const char *const *targets, int n, const tern_call_options_t *call,
                                    float **token_logprobs, int *token_counts);

/* Number of source tokens the model's tokenizer gives for text (with the end-of-sentence token
 * the model adds, before any truncation): what a batch's token budget counts. Thread-safe. */
tern_status_t tern_model_source_tokens(const tern_model_t *model, const char *text, int *count);

/* ---------------------------------------------------------------- evaluation (sacreBLEU-exact) */

/* BLEU options, as sacreBLEU's BLEU() arguments (defaults from tern_bleu_default_options()). */
typedef struct {
    size_t struct_size;        /* sizeof this struct (set by the defaults; see "Version and ABI") */
    const char *tokenize;      /* "13a" (default), "intl", "char", "none" */
    int lowercase;             /* 1: case-insensitive */
    const char *smooth_method; /* "exp" (default), "none", "floor", "add-k" */
    double smooth_value;       /* < 0: the method's default (floor 0.1, add-k 1) */
    int max_ngram_order;       /* 1..4 (4) */
    int effective_order;       /* 1: stop at the first order without n-grams (sentence BLEU) */
} tern_bleu_options_t;

typedef struct {
    double score;              /* 0..100 */
    double precisions[4];      /* percent, orders 1..max_ngram_order */
    double bp, ratio;          /* brevity penalty, hypothesis length / reference length */
    long long sys_len, ref_len;
} tern_bleu_score_t;

tern_bleu_options_t tern_bleu_default_options(void); /* thread-safe */
/* Corpus BLEU of n hypotheses against num_refs reference streams (refs[r][i]: reference r of
 * hypothesis i), equal to sacrebleu.corpus_bleu's (same floating-point operations). Thread-safe. */
tern_status_t tern_corpus_bleu(tern_bleu_score_t *out, const char *const *hyps, const char *const *const *refs,
                               size_t n, int num_refs, const tern_bleu_options_t *options);

/* chrF options, as sacreBLEU's CHRF() arguments (defaults from tern_chrf_default_options()). */
typedef struct {
    size_t struct_size;        /* sizeof this struct (set by the defaults) */
    int char_order;            /* 6 */
    int word_order;            /* 0 (2: chrF++) */
    int beta;                  /* 2 */
    int lowercase;             /* 0 */
    int whitespace;            /* 0 */
    int eps_smoothing;         /* 0 */
} tern_chrf_options_t;

tern_chrf_options_t tern_chrf_default_options(void); /* thread-safe */
/* Corpus chrF (0..100), equal to sacrebleu.corpus_chrf's. Thread-safe. */
tern_status_t tern_corpus_chrf(double *score, const char *const *hyps, const char *const *const *refs, size_t n,
                               int num_refs, const tern_chrf_options_t *options);

/* The library's version string, e.g. "0.1.0" (TERN_VERSION of the build). Thread-safe. */
const char *tern_version(void);

#ifdef __cplusplus
}
#endif
#endif /* TERN_H */
