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
 *     read as the struct's first layout in this MAJOR version, that of 1.0.0. A struct_size
 *     larger than the library knows (a program built against a newer tern.h than the libtern it
 *     runs with) is TERN_ERR_INVALID_ARG, naming the struct.
 *     tern_model_info() and tern_cpu_info() set struct_size in what they return. When a struct
 *     grows, the functions that return it by value (its defaults, tern_model_info(),
 *     tern_cpu_info()) get a new symbol version, and their old version keeps filling the old
 *     layout for programs linked before (a by-value return writes into the caller's storage).
 *   - Symbol versions: every function of 1.0.0 carries TERN_1. A declaration marked
 *     TERN_SINCE_1_1 was added in 1.1 and carries TERN_1.1; one marked TERN_CHANGED_1_1 changed
 *     its ABI in 1.1: TERN_1.1 is its default version (what programs linked from 1.1 on use)
 *     and its TERN_1 version stays, with the 1.0.0 behaviour, for programs linked before (the
 *     marks are empty macros that scripts/export_map.sh reads). In 1.1 tern_search_params_t
 *     (sampling, repetition), tern_request_t (source_index, attention, languages) and
 *     tern_model_info_t (languages) grew: the TERN_1 versions of tern_search_default_params(),
 *     tern_request_default() and tern_model_info() return their 1.0.0 layouts (struct_size 64,
 *     160 and 88 bytes on x86-64). A later minor version adds TERN_SINCE_1_<MINOR>.
 *   - Structs the caller allocates in arrays or as outputs (tern_result_t, tern_text_t,
 *     tern_bleu_score_t) and
 *     the callback event tern_token_event_t keep their layout for the whole MAJOR version.
 *   Start options from the defaults and set fields by name (never positional initializers).
 */
#ifndef TERN_H
#define TERN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks what 1.1 added (TERN_SINCE_1_1) or changed (TERN_CHANGED_1_1): their symbol versions
 * (see "Version and ABI" above). */
#define TERN_SINCE_1_1
#define TERN_CHANGED_1_1
/* ... and what 1.2 changed: tern_model_options_t grew (shortlist), so tern_model_default_options()
 * has a TERN_1.2 version; its TERN_1 version returns the 1.0.0/1.1.0 layout. */
#define TERN_CHANGED_1_2
/* ... and what the next minor release (1.3) changes: tern_request_t grew (no_sort, beams_apart), so
 * tern_request_default() has a TERN_1.3 version; its TERN_1.1 version returns the 1.2.0 layout
 * (struct_size 208 on x86-64, up to token_scores) and its TERN_1 version the 1.0.0 one. */
#define TERN_CHANGED_1_3

/* The version, MAJOR.MINOR.PATCH: the only place it is written (see "Version and ABI" above). */
#define TERN_VERSION "1.2.0"

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
    TERN_ERR_CANCELLED      /* the caller's cancellation flag was set (tern_request_t.cancel)
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
    const char *shortlist;            /* a Marian lexical shortlist, "FILE[,first,best[,threshold]]"
                                         (Marian's --shortlist values; text "lex.s2t" or the binary
                                         file of marian-conv --shortlist): restricts the output as
                                         a vocabulary map, with Marian's semantics; NULL: a Marian
                                         model directory's decoder.yml `shortlist` if any; "none":
                                         no shortlist (docs/models.md) */
} tern_model_options_t;

TERN_CHANGED_1_2 tern_model_options_t tern_model_default_options(void); /* thread-safe */

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
    TERN_ENSEMBLE_PROB_MEAN = 1,    /* log sum_k w_k p_k (fairseq): a log-probability */
    TERN_ENSEMBLE_LOGIT_MEAN = 2    /* log softmax(sum_k w_k log p_k): the renormalized weighted geometric mean,
                                     * = softmax of the members' weighted mean logits, what an ensemble
                                     * unfolded into one network (`tern shrink`) computes */
} tern_ensemble_mode_t;

/* One of a model's own facts, as its family names them (tern_model_info_t.hparams): a layer
 * count, a width, a switch. Every family describes itself this way, so that a new family needs
 * nothing new here. */
typedef struct {
    const char *name;                   /* e.g. "encoder_layers", "d_model" */
    long value;
    const char *text;                   /* the value in words where it is a choice ("pre", "yes"),
                                           else NULL */
} tern_hparam_t;

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
    int num_hparams;                    /* the family's own facts: [num_hparams] of them, valid */
    const tern_hparam_t *hparams;       /* while the model lives (a Transformer: encoder_layers,
                                           decoder_layers, d_model, num_heads, ffn_dim, norm; an
                                           attention GRU: embedding_size, encoder_hidden_size,
                                           decoder_hidden_size, attention_size, output_size,
                                           layer_norm; GNMT: encoder_layers, decoder_layers,
                                           hidden_size, attention_size) */
    tern_ensemble_info_t ensemble;      /* family "ensemble": how it combines its members */
    int num_languages;                  /* a multilingual model (M2M-100, NLLB): its language codes, */
    const char *const *languages;       /* [num_languages] tokens such as "deu_Latn" or "__de__" that
                                           tern_request_t's source_lang/target_lang take (0, NULL:
                                           one language pair); valid while the model lives */
} tern_model_info_t;
TERN_CHANGED_1_1 tern_model_info_t tern_model_info(const tern_model_t *model); /* thread-safe (the model is
                                                                                 read-only) */
/* The value of the fact called name in info->hparams, or missing when the family has none. */
long tern_model_hparam(const tern_model_info_t *info, const char *name, long missing);

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

/* ---------------------------------------------------------------- the request API
 *
 * Translation is one call, tern_translate(translator, request, results), and scoring one more,
 * tern_score(translator, request with targets, ...); tern_translate_stream() runs a request over
 * an input of any length in constant memory. Three kinds of settings, kept apart:
 *   - tern_search_params_t: what the search does (beam, penalties, lengths, pruning). A
 *     translator holds default ones (tern_translator_options_t.search, copied at creation); a
 *     request may point at its own, used for that request only: the translator's state is never
 *     changed by a request, so requests with different parameters may follow each other (or
 *     share batches in a server) without saving and restoring anything.
 *   - tern_translator_options_t: what a translator is (threads, batch budget, input cap,
 *     workers and read-ahead of the stream mode, <unk> in the output); set once, at creation.
 *   - tern_request_t: one call's inputs (sources, optional targets, per-source prefixes,
 *     constraints, restrictions and LMBR evidence, suppressed sequences), its parameters, its
 *     callbacks and its cancellation flag. Everything is in memory: the library opens no file for
 *     a request and prints nothing (file paths and output formats belong to the CLI, tools/).
 * Why pointers and not embedded structs: every struct here starts with struct_size and grows
 * by appending (see "Version and ABI"); a struct embedded by value in another would move the
 * outer struct's later fields when it grows, a pointer never does. */

typedef enum {
    TERN_EOS_COMMON = 0,  /* finished hypotheses leave the beam; B live ones continue
                             (CTranslate2 and fairseq) */
    TERN_EOS_PAPER = 1,   /* an EOS candidate takes one of the B slots (Iglesias et al., Alg. 1) */
    TERN_EOS_MARIAN = 2   /* as PAPER, and each finished hypothesis shrinks the beam for good
                             (Marian's beam search: B - finished live ones; the sentence ends when
                             none is left) (TERN_SINCE_1_1) */
} tern_eos_policy_t;

typedef enum {
    TERN_LENPEN_PLAIN = 0, /* score / |Y|^alpha (CTranslate2's length_penalty) */
    TERN_LENPEN_GNMT = 1   /* score / ((5 + |Y|) / 6)^alpha (Wu et al.) */
} tern_length_norm_t;

/* Search parameters (defaults from tern_search_default_params() in parentheses). */
typedef struct {
    size_t struct_size;         /* sizeof this struct (set by the defaults; see "Version and ABI") */
    int beam_size;              /* 1: greedy search (argmax of the logits, no softmax; of the
                                   combined scores for an ensemble); >1: beam search (4) */
    int num_hypotheses;         /* n-best: hypotheses returned per input, 1..beam_size (1) */
    float length_penalty;       /* alpha of the length normalization; 0 disables it (0) */
    tern_length_norm_t length_norm; /* formula used when length_penalty != 0 (plain) */
    float coverage_penalty;     /* beta of GNMT's coverage penalty; 0 disables it (0) */
    tern_eos_policy_t eos_policy; /* what an EOS candidate does to the beam (common) */
    int early_stop;             /* 1 (default): stop a sentence as CTranslate2 does -- without
                                   penalties once the best candidate of a step was EOS and enough
                                   hypotheses finished (the best one is then exact), with penalties
                                   once B hypotheses finished; 0: decode until no live hypothesis
                                   can beat the n-th best finished one (an exact n-best list) */
    float max_length_a;         /* max output length = a * source length + b ... (0) */
    int max_length_b;           /* ... (b alone when a = 0), never above max_decoding_length (0) */
    int max_decoding_length;    /* hard cap on output tokens (256) */
    int min_length;             /* no EOS before this many output tokens (1, as CTranslate2) */
    int return_scores;          /* 1: fill scores in the results (1) */
    /* beam pruning, off by default: */
    float prune_width;          /* GNMT's beam width: candidates more than this below the best one of
                                   the step, and live hypotheses whose normalized score is more than
                                   this below the best finished one's, are dropped (0: off) */
    float prune_threshold;      /* candidates whose token probability is below this are dropped,
                                   except the best of the step (0: off) */
    /* random sampling (greedy search only, beam_size 1; CTranslate2's names and semantics): the
     * token of each step is drawn from the model's distribution, divided by the temperature,
     * restricted to the top-k tokens and then to the top-p nucleus. Reproducible: the draw of a
     * step depends only on (seed, the sentence's index in the input, the sample index, the step). */
    int sampling_topk;          /* 1: off, argmax (1); 0: the whole vocabulary; K: the K best tokens */
    float sampling_topp;        /* nucleus: the fewest best tokens whose probability sums to >= P,
                                   in (0, 1]; 1: off (1) */
    float sampling_temperature; /* > 0 (1) */
    int num_samples;            /* hypotheses sampled per input, returned best score first, 1..1024;
                                   > 1 needs sampling (1) */
    uint64_t seed;              /* of the sampling (12345) */
    /* repetition controls (any search): */
    float repetition_penalty;   /* logits of tokens the hypothesis already has are divided by it
                                   when positive, multiplied when negative (CTranslate2); > 0, 1: off (1) */
    int no_repeat_ngram_size;   /* no n-gram of this size twice in a hypothesis (0: off) */
    /* beam search with a length or coverage penalty and early_stop: a sentence stops once
     * round(beam_size * patience) hypotheses finished (CTranslate2's patience, Kasai et al. 2022,
     * "The Beam Search Patience Factor"); > 0 (1). Without penalties the best finished
     * hypothesis is exact when the step's best candidate ends, and patience changes nothing. */
    float patience;
    /* target prefixes (tern_source_extras_t.target_prefix) as a bias instead of forced tokens
     * (CTranslate2's prefix_bias_beta, Arivazhagan et al. 2020): while a beam hypothesis still
     * follows its prefix, its next-token distribution is (1 - beta) p + beta on the prefix's next
     * token; a hypothesis that left the prefix decodes freely. In [0, 1); 0: forced prefixes (0).
     * Beam search only (beam_size > 1); not with target_lang. */
    float prefix_bias_beta;
} tern_search_params_t;

TERN_CHANGED_1_1 tern_search_params_t tern_search_default_params(void); /* thread-safe */
/* A model's decoding defaults: tern_search_default_params() with the keys of the model directory's
 * generation_config.json over them (transformers' file: num_beams, length_penalty, max_length, ...;
 * docs/translate.md); an ensemble's are its first member's. *source (when source is not NULL)
 * receives that file's path, or NULL when the model carries none. A translator created without
 * search parameters uses them. Thread-safe. */
TERN_SINCE_1_1 tern_search_params_t tern_model_search_params(const tern_model_t *model, const char **source);
/* Checks search parameters (ranges, num_hypotheses <= beam_size); TERN_ERR_INVALID_ARG with a
 * message naming the field otherwise. Thread-safe. */
tern_status_t tern_search_params_check(const tern_search_params_t *params);

/* A translator's set-up (defaults from tern_translator_default_options() in parentheses). */
typedef struct {
    size_t struct_size;         /* sizeof this struct (set by the defaults; see "Version and ABI") */
    const tern_search_params_t *search; /* the translator's default search parameters, copied at
                                   creation; requests without their own use them (NULL: the
                                   model's, tern_model_search_params()) */
    int max_input_length;       /* longer inputs are truncated with a warning (1024) */
    int max_batch_tokens;       /* token budget of one batch: sentences x longest source (4096) */
    int max_batch_size;         /* cap on sentences in a batch (0: no cap) */
    int workers;                /* tern_translate_stream(): translators running in parallel (0: 1);
                                   elsewhere: how many translators share the cores, for the
                                   default of threads_per_worker */
    int threads_per_worker;     /* intra-op threads of each translator (0: cores / workers) */
    int read_ahead;             /* tern_translate_stream(): batches read ahead and sorted by length
                                   together (16) */
    int keep_unk;               /* 1: keep <unk> tokens in the output text (1) */
} tern_translator_options_t;

tern_translator_options_t tern_translator_default_options(void); /* thread-safe */

/* ---------------------------------------------------------------- translator */

typedef struct tern_translator tern_translator_t;

/* A translator holds the per-thread state (workspace, caches) for one model. Create one per thread.
 * Thread-safe: translators on one model may be created at once from several threads. */
tern_status_t tern_translator_create(tern_translator_t **translator, const tern_model_t *model,
                                     const tern_translator_options_t *options);
/* Not thread-safe for that translator (no call on it may be running). */
void tern_translator_free(tern_translator_t *translator);

/* One input's result: num_hypotheses outputs, best first. */
typedef struct {
    int num_hypotheses;
    char **hypotheses;   /* [num_hypotheses] UTF-8 strings (detokenized when SentencePiece is used) */
    float *scores;       /* [num_hypotheses] search scores (normalized when a length penalty is set),
                            or NULL when return_scores is 0 */
} tern_result_t;

/* Frees one result's strings and arrays (and zeroes it). Thread-safe (touches only its argument). */
void tern_result_free(tern_result_t *result);

/* Per-sentence completion callback: input index (0..n-1 in the request) and its result, exactly
 * what tern_translate() gives for it (valid during the call only; results[index] when the call
 * has a results array). Called once per input, on the calling thread, as soon as the input's
 * search is finished (so in no particular order; empty inputs first). Return 0 to go on, nonzero
 * to stop the call with TERN_ERR_CANCELLED. */
typedef int (*tern_result_fn)(int index, const tern_result_t *result, void *user_data);

/* One step of one input's search, for streaming (tern_token_fn). */
typedef struct {
    int index;              /* input index (0..n-1 in the request) */
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

/* One piece of target-side text a request steers the search with: a hypothesis of an n-best list
 * (restrictions, LMBR evidence) or a suppressed sequence. Kept in this layout for the whole MAJOR
 * version (it is allocated in arrays). */
typedef struct {
    const char *text;       /* text, or space-separated pieces (as the request's pretokenized and
                               the model's use_spm say) */
    float score;            /* its score in its n-best list (LMBR's posteriors read it) */
    const char *origin;     /* where it comes from, named in warnings about it (an unknown piece, a
                               hypothesis longer than the maximum length), e.g. "sys1.nbest line
                               12"; NULL: no such warning */
} tern_text_t;

/* What steers the search of one source, beyond its text (tern_request_t.extras). Every field is
 * optional. A bad entry (an unknown piece, a phrase or prefix longer than max_decoding_length) is
 * warned about, naming its origin, and the source is still translated. */
typedef struct {
    size_t struct_size;            /* sizeof this struct (see "Version and ABI") */
    const char *target_prefix;     /* NULL or "": none; else the output starts with its tokens,
                                      forced, and the search goes on freely (CTranslate2's
                                      target_prefix) */
    const char *prefix_origin;     /* named in warnings about the prefix (NULL: none given) */
    const char *const *constraints; /* num_constraints target phrases (NULL entries are skipped), each
                                      of which must appear in the output whenever the maximum
                                      length allows (constrained beam search with dynamic beam
                                      allocation, Post & Vilar 2018) */
    int num_constraints;
    const char *constraints_origin; /* named in warnings about the phrases (NULL: none given) */
    const tern_text_t *restrict_to; /* num_restrict hypotheses: the search follows only their paths
                                      (their exact model scores; 0: unrestricted) */
    int num_restrict;
    const tern_text_t *const *lmbr_evidence; /* [request lmbr->num_systems]: system k's n-best list
                                      for this source (lmbr_evidence_count[k] entries; NULL: none) */
    const int *lmbr_evidence_count;
} tern_source_extras_t;

/* LMBR (Iglesias et al. 2018): n-gram posteriors from the evidence n-best lists of one or more
 * systems, added to the NMT score at every step. Defaults from tern_lmbr_default_params(). */
typedef struct {
    size_t struct_size;         /* sizeof this struct (set by the defaults; see "Version and ABI") */
    int num_systems;            /* evidence systems (each source's extras give one list each) */
    const float *weights;       /* [num_systems] per-system weights (NULL: all 1) */
    float alpha;                /* posteriors p(e) ∝ exp(alpha * score) (1) */
    float p, r;                 /* Tromble's linear-BLEU: theta_n = 1 / (4 p r^(n-1)) (0.85, 0.7) */
    float lambda;               /* weight of the NMT log-probability (0: 0.5 divided by the model's
                                   number of members, the paper's setting: 0.5 for one model, 0.25
                                   for an ensemble of two) */
    int clip;                   /* 1: each evidence n-gram earns its posterior once per hypothesis;
                                   0 (default): at every occurrence, as Tromble's linear gain */
    int sum_gain;               /* 1: the length penalty divides only the NMT part of the score; the
                                   LMBR gain is added as a sum; 0 (default): the whole score */
} tern_lmbr_params_t;

tern_lmbr_params_t tern_lmbr_default_params(void); /* thread-safe */
/* LMBR's lambda as run for model: params->lambda, or when it is 0 0.5 divided by the model's
 * number of members. Thread-safe. */
float tern_lmbr_lambda(const tern_model_t *model, const tern_lmbr_params_t *params);

/* One source's attention (tern_request_t.attention): for each hypothesis of its result, the
 * decoder's attention over the source tokens at each output token. Transformer: the cross-attention
 * of the model's alignment layer (decoder/alignment_layer, default the last) averaged over its
 * first decoder/alignment_heads heads (default 1: head 0), as CTranslate2 returns it; GRU and GNMT:
 * their attention; an ensemble: the members' weighted mean. Kept in this layout for the whole MAJOR
 * version (allocated in arrays); zeroed on failure. */
typedef struct {
    int num_hypotheses;    /* as the source's result */
    int source_length;     /* S: the source tokens attended to (its pieces, then the end token where
                              the model's sources end with one), after truncation */
    int *target_lengths;   /* [num_hypotheses] T_h: the output tokens of hypothesis h (no end token) */
    float **weights;       /* [num_hypotheses] T_h x S, row-major: row t is the attention of the step
                              that output token t (NULL when T_h is 0) */
} tern_attention_t;

/* Frees one attention's arrays (and zeroes it). Thread-safe (touches only its argument). */
TERN_SINCE_1_1 void tern_attention_free(tern_attention_t *attention);

/* One source's token log-probabilities (tern_request_t.token_scores), for quality estimation: its
 * best hypothesis force-decoded by the model (what tern_score() gives for that hypothesis, as
 * token ids, so no re-tokenization): log_probs[t] is log p(token t | source, tokens before t), the
 * model's log-probability (an ensemble's combined score), never length-normalized or penalized
 * and never restricted by a vocabulary map. The last entry is the end token's (the hypothesis is
 * scored as ending there, whether or not the search stopped at max_decoding_length); the
 * target language code of a multilingual model is left out. Kept in this layout for the whole
 * MAJOR version (allocated in arrays); zeroed on failure and for an empty source. */
typedef struct {
    int num_tokens;        /* T + 1: the best hypothesis's T output tokens, then the end token */
    char **tokens;         /* [num_tokens] the target vocabulary's pieces ("</s>"-like last) */
    float *log_probs;      /* [num_tokens] */
} tern_token_scores_t;

/* Frees one token_scores entry's arrays (and zeroes it). Thread-safe (touches only its argument). */
TERN_SINCE_1_1 void tern_token_scores_free(tern_token_scores_t *scores);

/* tern_translate_stream()'s input: sets *text (valid until the next call; *len bytes, no newline
 * needed) and *extras (NULL: none; valid during the call only) for input line `line` (from 0);
 * returns 1 for a line, 0 at the end of the input, negative on an error (the stream stops with
 * TERN_ERR_IO). */
typedef int (*tern_read_fn)(long line, const char **text, size_t *len, const tern_source_extras_t **extras,
                            void *user_data);
/* tern_translate_stream()'s output: the result of input line `line`, called once per line in the
 * input's order (num_hypotheses entries, or fewer when the search found fewer). Return 0 to go
 * on, nonzero to stop the stream with TERN_ERR_CANCELLED. */
typedef int (*tern_line_fn)(long line, const tern_result_t *result, void *user_data);
/* tern_translate_stream()'s progress: sentences and target tokens done so far. */
typedef void (*tern_progress_fn)(long sentences, long target_tokens, double seconds, void *user_data);

/* One request (defaults from tern_request_default(): everything empty, NULL or 0). */
typedef struct {
    size_t struct_size;            /* sizeof this struct (set by the defaults; see "Version and ABI") */
    const char *const *sources;    /* num_sources texts (raw text, or space-separated pieces without
                                      SentencePiece or with pretokenized); NULL entries read as "" */
    int num_sources;
    const char *const *targets;    /* tern_score(): num_sources targets to force-decode */
    const tern_source_extras_t *const *extras; /* NULL, or num_sources entries (NULL: none) */
    const tern_text_t *suppress;   /* num_suppress pieces or piece sequences never output (a
                                      sequence's last piece is removed after the others) */
    int num_suppress;
    const tern_lmbr_params_t *lmbr; /* LMBR with the evidence in extras (NULL: none) */
    const tern_search_params_t *params; /* this request's search parameters (NULL: the translator's) */
    int pretokenized;              /* 1: sources, prefixes and targets are space-separated pieces
                                      even when the model has SentencePiece, and the hypotheses
                                      are pieces joined by spaces (CTranslate2's token lists) */
    int max_batch_size;            /* > 0: cap on sentences per batch for this request (else the
                                      translator's) */
    int max_batch_tokens;          /* > 0: token budget of a batch for this request (else the
                                      translator's) */
    int max_input_length;          /* > 0: longer inputs are truncated for this request (else the
                                      translator's) */
    tern_result_fn on_result;      /* tern_translate(): per-sentence completion callback (NULL: none) */
    void *on_result_data;          /* its user_data */
    tern_token_fn on_token;        /* tern_translate(): per-token streaming callback (NULL: none) */
    void *on_token_data;           /* its user_data */
    const volatile int *cancel;    /* NULL, or a flag another thread may set to nonzero: the call
                                      checks it before each batch and each decoding step, stops
                                      with TERN_ERR_CANCELLED and frees everything it allocated
                                      (the results are left empty) */
    /* tern_translate_stream() only (sources is then NULL): */
    tern_read_fn read_source;      /* the input, line by line */
    tern_line_fn on_line;          /* the results, line by line in the input's order */
    tern_progress_fn progress;     /* after each chunk (NULL: none) */
    void *stream_data;             /* user_data of the three */
    /* tern_translate(): each source's index for the sampling generator (tern_search_params_t's
     * sampling: a draw depends on (seed, this index, the sample, the step)), e.g. its position in
     * a larger input the caller cuts into requests; NULL: its position in sources */
    const long *source_index;
    /* tern_translate(): NULL, or num_sources entries that get each source's attention (CTranslate2's
     * return_attention; free each with tern_attention_free()). Decoding then runs in batches
     * without continuous batching (the same results). */
    tern_attention_t *attention;
    /* a multilingual model (tern_model_info_t.languages: M2M-100, NLLB), as its tokenizer does:
     * source_lang's code is the first source token, target_lang's is forced as the first output
     * token (transformers' forced_bos_token_id) and left out of the results; tern_score() puts it
     * before each target (its log-probability is not returned). Raw text (pretokenized 0) needs
     * both; pretokenized pieces may carry the codes themselves, as CTranslate2 takes them (the
     * source's code first, the target's as target_prefix, kept in the output). An unknown code is
     * TERN_ERR_INVALID_ARG naming it; a model without languages refuses both. */
    const char *source_lang;
    const char *target_lang;
    /* tern_translate(): 1 replaces each unknown target token of the hypotheses (the target
     * vocabulary's <unk>) by the source token that the decoder attended to most at that step
     * (CTranslate2's replace_unknowns; the attention of tern_attention_t): with pretokenized
     * input, the source's space-separated token itself (an unknown source word is copied); with
     * raw text, the source piece of that position (left unknown when the source piece is unknown
     * too, or the position is the end token or a language code). Decoding then runs as with
     * attention (batches without continuous batching). */
    int replace_unknowns;
    /* tern_translate(): NULL, or num_sources entries that get the token log-probabilities of each
     * source's best hypothesis (tern_token_scores_t; free each with tern_token_scores_free()):
     * the mean of log_probs is the sentence's quality estimate (docs/decoding.md). Costs one
     * force-decoding pass over the best hypotheses after the search. */
    tern_token_scores_t *token_scores;
    /* 1: batches are cut from consecutive sources in the input's order (under the same token
     * budget and max_batch_size, a batch's padded width its longest source) instead of from the
     * sources sorted by length, longest first; results still come back in the input's order, the
     * same translations. Continuous batching is then off (fixed batches). 0 (default): sorted.
     * Other values are TERN_ERR_INVALID_ARG. (The SDL paper's unsorted batches: bench/bench_sdl.py.) */
    int no_sort;
    /* 1: every row of a decoding step (each hypothesis of each beam) runs its own forward through
     * the decoder, a batch of one row (the SDL paper's unbatched baseline, for measurements: the
     * same translations, slower); 0 (default): the step's rows as one batch. A Transformer only
     * (another family, or an ensemble, gives TERN_ERR_UNSUPPORTED); other values are
     * TERN_ERR_INVALID_ARG. */
    int beams_apart;
} tern_request_t;

TERN_CHANGED_1_1 TERN_CHANGED_1_3 tern_request_t tern_request_default(void); /* thread-safe */

/* Translates request->sources (num_sources of them) with request->params (NULL: the
 * translator's), target prefixes, constraints, restrictions and LMBR evidence from
 * request->extras, and the callbacks and cancellation flag of the request. results points to
 * num_sources tern_result_t (free each with tern_result_free()), or is NULL when on_result is set:
 * each result is then given to the callback only (and freed after it). On any failure
 * (TERN_ERR_CANCELLED included) the results are left empty (zeroed). Empty sources give
 * num_hypotheses empty hypotheses without decoding. This and every other function taking a
 * translator: not thread-safe for one translator (one call at a time on it); different
 * translators, on one model or several, run in parallel from different threads. */
tern_status_t tern_translate(tern_translator_t *translator, const tern_request_t *request, tern_result_t *results);

/* The simplest form, a thin wrapper: tern_translate() of n sources with the translator's
 * parameters and nothing else. */
tern_status_t tern_translate_batch(tern_translator_t *translator, const char *const *sources, int n,
                                   tern_result_t *results);

/* Force decoding: the log-probability of each of request->targets' tokens (and of the final EOS)
 * given its source (an ensemble's: its combined score of each token); honours pretokenized,
 * max_input_length and cancel (the search parameters and extras are unused). token_logprobs[i]
 * (malloc'd) has token_counts[i] entries (0 for an empty source); free them with
 * tern_score_results_free(). */
tern_status_t tern_score(tern_translator_t *translator, const tern_request_t *request, float **token_logprobs,
                         int *token_counts);
/* Frees the n arrays tern_score() gave (and sets them to NULL). Thread-safe. */
void tern_score_results_free(float **token_logprobs, int n);

/* Translates a stream in constant memory: input lines come from request->read_source, are read
 * ahead (read_ahead x max_batch_tokens source tokens), sorted by length and batched, and their
 * results go to request->on_line in the input's order, one per input line (an empty line gives
 * empty hypotheses). options->workers translators run in parallel, sharing the model. The request
 * gives the search parameters (NULL: options->search), the suppressed sequences, LMBR parameters,
 * pretokenized and cancel; sources, targets, extras, on_result and on_token must be NULL (each
 * line's extras come from read_source). Thread-safe (it creates its own translators; the
 * callbacks run on the calling thread). */
tern_status_t tern_translate_stream(const tern_model_t *model, const tern_translator_options_t *options,
                                    const tern_request_t *request);

/* Number of source tokens the model's tokenizer gives for text (with the end-of-sentence token
 * the model adds, before any truncation): what a batch's token budget counts. Thread-safe. */
tern_status_t tern_model_source_tokens(const tern_model_t *model, const char *text, int *count);

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
 * out_path (atomically). A line of statistics (no newline) goes to report(line, user_data) when
 * report is not NULL. Thread-safe (the model is only read); two builds must not write the same
 * out_path at once. */
typedef void (*tern_report_fn)(const char *line, void *user_data);
tern_status_t tern_vmap_build(const tern_model_t *model, const char *source_path, const char *target_path,
                              const char *out_path, const tern_vmap_options_t *options, tern_report_fn report,
                              void *user_data);

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

/* ---------------------------------------------------------------- sentences */

/* Splits text (len bytes of UTF-8; invalid bytes never crash) into sentences with ICU's sentence
 * break iterator for language lang (an ICU locale or BCP 47 tag: "en", "de", "zh"; NULL or "":
 * ICU's root rules), with ICU's standard abbreviation suppressions of that language ("Mr. Smith"
 * stays one sentence in English). *spans (2 * *count entries; free with tern_sentences_free()) gets each sentence's
 * [begin, end) byte offsets in text, in order, without the white space around it: what lies
 * between two sentences (spaces, line breaks) is left to the caller to keep. A line break ends a
 * sentence. White space alone makes no sentence (*count 0, *spans NULL). A lang that is not a
 * language tag is TERN_ERR_INVALID_ARG. Thread-safe. */
TERN_SINCE_1_1 tern_status_t tern_split_sentences(const char *text, size_t len, const char *lang, size_t **spans,
                                                  int *count);
TERN_SINCE_1_1 void tern_sentences_free(size_t *spans);

/* The library's version string, e.g. "0.1.0" (TERN_VERSION of the build). Thread-safe. */
const char *tern_version(void);

#ifdef __cplusplus
}
#endif
#endif /* TERN_H */
