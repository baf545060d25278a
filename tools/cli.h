/* cli.h — the subcommands of the `tern` command-line tool and the helpers they share. Each
 * subcommand returns the process exit code (0 ok, 1 error, 2 usage error). The CLI is a thin user
 * of the library (include/tern.h). */
#ifndef TERN_CLI_H
#define TERN_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "tern.h"

int cmd_translate(int argc, char **argv);
int cmd_rescore(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_filter(int argc, char **argv);
int cmd_convert(int argc, char **argv);
/* `tern convert --to hf` (convert_hf.c): the Transformer in from as a Hugging Face MarianMT
 * checkpoint in out (a new or empty directory); *dequantized set when int8 weights were
 * dequantized. */
tern_status_t convert_to_hf(const char *from, const char *out, int *dequantized);
int cmd_vocab(int argc, char **argv);
int cmd_average(int argc, char **argv);
int cmd_shrink(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_cpu(int argc, char **argv);
int cmd_vmap(int argc, char **argv);
int cmd_mbr(int argc, char **argv);
int cmd_lmbr_tune(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_distill(int argc, char **argv);

/* Strict parsing of an option's value in [lo, hi]; prints "tern CMD: OPT expects ..." and
 * returns 0 on a bad value. */
int cli_int(const char *cmd, const char *opt, const char *s, int lo, int hi, int *out);
int cli_float(const char *cmd, const char *opt, const char *s, float lo, float hi, float *out);

/* Opens path ("-" or NULL: stdin/stdout by mode); prints the error naming the file on failure. */
FILE *cli_open(const char *cmd, const char *path, const char *mode);
void cli_close(FILE *f);
/* Plots save_dir's train_curve.tsv and valid_curve.tsv into out_png with gnuplot (through popen);
 * TERN_ERR_UNSUPPORTED when gnuplot is not installed (tools/train_plot.c). */
tern_status_t train_plot(const char *save_dir, const char *out_png);
/* The files that steer `tern translate`'s search (NULL: none), read into the request API's
 * in-memory form (tools/cli_extras.c). */
typedef struct {
    const char *suppress, *target_prefix, *restrict_to, *constraints;
    const char *const *evidence; /* LMBR evidence n-best lists */
    int n_evidence;
} cli_extras_files_t;
typedef struct cli_extras cli_extras_t;
/* Reads the suppress and n-best files whole and opens the per-line ones (*out NULL: no file). */
tern_status_t cli_extras_open(cli_extras_t **out, const cli_extras_files_t *files);
/* The suppressed sequences (NULL: no --suppress file). */
const tern_text_t *cli_extras_suppress(const cli_extras_t *x, int *n);
/* 1 when some file has one entry per input line (prefixes, constraints, restrictions, evidence). */
int cli_extras_per_line(const cli_extras_t *x);
/* Input line i's extras (lines in order; *out NULL when no file is per line), valid until the
 * next call. */
tern_status_t cli_extras_line(cli_extras_t *x, long i, const tern_source_extras_t **out);
/* Warns about file lines beyond the input's `lines` (-1: after an error, no warning), then frees. */
void cli_extras_close(cli_extras_t *x, long lines);
/* Translates in into out with tern_translate_stream(): one line per input line, or num_hypotheses
 * lines "i ||| hypothesis ||| score" (also for one with print_scores); base gives the parameters,
 * the LMBR parameters, pretokenized and progress; x (may be NULL; closed here) the files' data.
 * split_lang (NULL: off): each line's sentences in that language (tern_split_sentences()) are
 * translated apart and joined again with the line's own white space between them, one output
 * line per input line still (one hypothesis, no scores, no per-line files). */
tern_status_t cli_translate_file(const tern_model_t *model, const tern_translator_options_t *options,
                                 const tern_request_t *base, cli_extras_t *x, FILE *in, FILE *out, int print_scores,
                                 const char *split_lang);

/* --quality: in's lines translated (base's parameters, languages and pretokenized; one hypothesis)
 * with their quality estimates (src/serve/quality.h), "TRANSLATION<TAB>SCORE" lines or (json) one
 * JSON object a line with the word scores (docs/decoding.md). */
tern_status_t cli_translate_quality(const tern_model_t *model, const tern_translator_options_t *options,
                                    const tern_request_t *base, FILE *in, FILE *out, int json);

/* --format html: all of in as one HTML document (as `tern serve`'s format "html": the text between
 * tags translated, inline tags carried into their sentence's translation by the attention, all
 * else kept), written to out. split_lang (NULL: off; "": ICU's root rules): sentences translated
 * apart. */
tern_status_t cli_translate_html(const tern_model_t *model, const tern_translator_options_t *options,
                                 const tern_request_t *base, FILE *in, FILE *out, const char *split_lang);

/* --file-format: in as a document of kind (src/serve/docfile.h: DOC_TXT, DOC_HTML, DOC_DOCX,
 * DOC_ODT) translated as `tern serve`'s POST /translate_file translates it (each item as format
 * text or html), the rebuilt document written to out. */
tern_status_t cli_translate_document(const tern_model_t *model, const tern_translator_options_t *options,
                                     const tern_request_t *base, int kind, FILE *in, FILE *out,
                                     const char *split_lang);

/* Prints "tern CMD: <status>: <last error>" and returns 1. */
int cli_fail(const char *cmd, tern_status_t st);

/* The models of -m DIR (given once, or several times for an ensemble), --ensemble-weights and
 * --ensemble-mode. */
#define CLI_MAX_MODELS 64
typedef struct {
    const char *dirs[CLI_MAX_MODELS];
    int n;
    float weights[CLI_MAX_MODELS];
    int n_weights;               /* 0: not given (equal weights) */
    tern_ensemble_mode_t mode;
    int ensemble;                /* 1: load as an ensemble even with one model (weights/mode given) */
} cli_models_t;
#define CLI_MODELS_HELP \
"  -m, --model DIR             model directory; give -m several times for an ensemble (members may\n" \
"                              differ in family and size; identical target vocabularies); a name\n" \
"                              that is not a path (en-de) is an installed model (TERN_MODELS_DIR,\n" \
"                              then PREFIX/share/tern/models)\n" \
"  --ensemble-weights W1,W2,.. one positive weight per -m (normalized to sum 1; default equal)\n" \
"  --ensemble-mode MODE        logprob-mean (default: weighted mean of log-probabilities, Marian)\n" \
"                              or prob-mean (log of the weighted mean of probabilities, fairseq)\n" \
"                              or logit-mean (log-softmax of the weighted mean of log-probabilities:\n" \
"                              an ensemble unfolded by `tern shrink`)\n"
/* Option handlers; print "tern CMD: ..." and return 0 on a bad value. */
int cli_models_add(const char *cmd, cli_models_t *m, const char *dir);
int cli_models_weights(const char *cmd, cli_models_t *m, const char *list);
int cli_models_mode(const char *cmd, cli_models_t *m, const char *s);
/* A -m value as a model directory: name itself when it exists or is a path (has a '/'); else the
 * installed model of that name (TERN_MODELS_DIR, BIN/../share/tern/models, the build's DATADIR;
 * tools/cli_models.c), written into buf. NULL, after printing where it looked and the models
 * found there, when there is none. */
const char *cli_model_dir(const char *cmd, const char *name, char *buf, size_t size);
/* Loads them: one model (tern_model_load), or an ensemble (tern_model_load_ensemble) when -m was
 * given more than once or weights/mode were. Prints the error; returns the exit code (0, 1, 2). */
int cli_models_load(const char *cmd, const cli_models_t *m, const tern_model_options_t *o, tern_model_t **out);

#endif
