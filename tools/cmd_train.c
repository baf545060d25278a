/* cmd_train.c — `tern train`: trains a translation model of any registered family
 * (src/train/trainer.h, src/train/family.h: each family brings its own options). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "model/hf_format.h"
#include "model/marian_format.h"
#include "model/model_dir.h"
#include "train/dist.h"
#include "train/qat.h"
#include "train/trainer.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: tern train --vocab DIR --train-src F --train-tgt F [--valid-src F --valid-tgt F]\n"
"                  --save-dir DIR [options]\n"
"       tern train --plot-only SAVE_DIR\n"
"\n"
"Trains a translation model (a Transformer, an attention GRU or GNMT) on raw parallel text (one\n"
"sentence a line) and writes"
" checkpoints SAVE_DIR/checkpoint-NNNNNNNN that `tern translate -m` loads as they are.\n"
"\n"
"Data:\n"
"  --vocab DIR                 the vocabulary: a directory written by `tern vocab --model-dir`\n"
"  --spm FILE                  ... or one joint SentencePiece model (with a <pad> piece)\n"
"  --src-spm FILE, --tgt-spm FILE  ... or one per side\n"
"  --train-src F, --train-tgt F    training text\n"
"  --train SRC,TGT[:W]         ... or a corpus of a weighted mix (repeatable, instead of the two\n"
"                              above): W a positive real (default 1); every epoch takes floor(W)\n"
"                              copies of each kept pair and round(frac(W) x kept) distinct pairs\n"
"                              drawn anew (W 0.5: half the corpus, W 3: three times); a path with\n"
"                              ':' in TGT needs an explicit :W\n"
"  --valid-src F, --valid-tgt F    validation text (loss every --valid-interval-updates and at\n"
"                              epoch ends; BLEU at epoch ends)\n"
"  --cache-dir DIR             where the token caches go (default: the save directory)\n"
"  --max-tokens N              token budget of a batch: sentences x max(S, T) (default 4096)\n"
"  --max-sentences N           at most N sentences a batch (default: no limit)\n"
"  --valid-max-tokens N        token budget of validation batches (default: --max-tokens)\n"
"  --max-len N                 skip pairs longer than N tokens (special tokens included) on either\n"
"                              side (default 256); --max-source-len, --max-target-len for one side\n"
"  --max-ratio R               skip pairs whose token counts differ by more than R times\n"
"                              (default 9; 0: no ratio filter)\n"
"  --no-shuffle                batches in length order every epoch (for tests)\n"
"Model: --architecture A chooses the family (");
    for (int k = 0; train_family_at(k); k++)
        fprintf(f, "%s%s%s", k ? ", " : "", train_family_at(k)->architecture, k ? "" : " by default");
    fprintf(f, ");\neach takes the options of its section below:\n");
    for (int k = 0; train_family_at(k); k++) {
        const train_family_t *fam = train_family_at(k);
        fprintf(f, "%s\n", fam->options_title);
        for (const train_option_t *op = fam->options; op->name; op++)
            if (op->usage) fputs(op->usage, f);
    }
    fprintf(f,
"Optimization:\n"
"  --lr LR                     peak learning rate (default 5e-4)\n"
"  --lr-scheduler S            inverse_sqrt (default; fairseq's), constant, gnmt\n"
"  --warmup N                  inverse_sqrt warm-up updates (default 4000)\n"
"  --warmup-init-lr LR         rate at update 0 of the warm-up (default 1e-7)\n"
"  --sgd-start N --sgd-lr LR --decay-start N --decay-interval N --decay-times N\n"
"                              gnmt: Adam until update N, then SGD at LR halved every interval from\n"
"                              decay-start, decay-times times at most\n"
"  --adam-betas B1,B2          (default 0.9,0.98)\n"
"  --adam-eps E                (default 1e-8)\n"
"  --weight-decay W            decoupled (AdamW, fairseq's) weight decay (default 0)\n"
"  --l2                        weight decay as L2 on the gradient instead\n"
"  --clip-norm C               clip the gradient to global norm C (default 0: off)\n"
"  --update-freq K             accumulate K batches per update (default 1)\n"
"  --max-updates N             stop after N updates (default: no limit)\n"
"  --max-epochs N              stop after N epochs (default: no limit)\n"
"  --max-time T                stop once the run (resumes added up) has lasted T: seconds, or with\n"
"                              a suffix s, m, h (default: no limit)\n"
"  --seed N                    initialization, batch order, dropout (default 1)\n"
"  -t, --threads N             threads (default: all cores; per process under mpirun)\n"
"Data-parallel (mpirun -np N tern train ...; every process trains on its share of each update):\n"
"  --bucket-mb M               all-reduce the gradients in buckets of about M MB (default 2)\n"
"  --no-comm-overlap           all-reduce after the backward pass, not during it (for comparison)\n"
"Checkpoints:\n"
"  --save-dir DIR              where checkpoints, logs and curves go (required)\n"
"  --save-interval-updates N   also save every N updates (default: at epoch ends and the end)\n"
"  --keep-last K               keep the K newest checkpoints (default 10; 0: all)\n"
"  --resume                    continue from the newest checkpoint of the save directory (a fresh\n"
"                              start when there is none); exact: same losses as without a stop\n"
"  --resume-from DIR           continue from this checkpoint\n"
"Fine-tuning:\n"
"  --init-from DIR             start from a model Tern loads (Tern or CTranslate2 directory, a\n"
"                              checkpoint, an int8 model, a Hugging Face MarianMT checkpoint or\n"
"                              a Marian model directory (model.npz: given a \"<pad>\" token, as\n"
"                              tern convert --add-pad): converted into SAVE_DIR/imported-model\n"
"                              first): its family, shape\n"
"                              and parameters; its vocabulary, SentencePiece model and\n"
"                              generation_config.json unless --vocab is given; the optimizer and\n"
"                              the update count fresh\n"
"  --init-encoder-layers LIST  with --init-from: keep these of its encoder layers, in this order\n"
"  --init-decoder-layers LIST  (\"0,3\": its layers 0 and 3 become layers 0 and 1), drop the others:\n"
"                              a shallower student started from its teacher\n"
"  --freeze embeddings|encoder keep these parameters as they start: the token embeddings and\n"
"                              position tables (a tied projection with them), or the whole encoder\n"
"RL refinement with the GLEU reward (GNMT paper, section 5; docs/training.md):\n"
"  --rl-gleu                   refine the --init-from model: per source, --rl-samples translations\n"
"                              sampled from the current parameters, rewarded with sentence GLEU\n"
"                              against the reference (sample-mean baseline), REINFORCE mixed with\n"
"                              the likelihood: maximize alpha*O_ML + O_RL (label smoothing off);\n"
"                              validations every --valid-interval-updates also score BLEU\n"
"  --rl-alpha A                weight of the likelihood term (default 0.017)\n"
"  --rl-samples M              samples per source, >= 2 (default 15)\n"
"  --rl-temperature T          sampling temperature (default 1)\n"
"  --rl-topk K                 sample among the K most probable tokens (default 0: all)\n"
"Quantization-aware training (docs/training.md):\n"
"  --qat int8|int8-act|none    int8: every weight matrix int8 inference quantizes is fake-quantized\n"
"                              in the forward and backward passes (its per-row scale and rounding),\n"
"                              the straight-through gradient updates the float32 weights; the\n"
"                              validation loss of the fake-quantized weights, BLEU in int8;\n"
"                              int8-act (Transformer, rnn-gru): every linear layer's input rows\n"
"                              rounded as int8 inference rounds them too (default none)\n"
"Validation:\n"
"  --valid-interval-updates N  validation loss every N updates too (default: epoch ends only)\n"
"  --no-bleu                   no BLEU at epoch ends\n"
"  --bleu-beam N               beam size of the BLEU translation (default 5)\n"
"  --bleu-length-penalty A     its length penalty (default 0)\n"
"  --bleu-max-sentences N      translate only the first N validation sentences (default: all)\n"
"  --bleu-output FILE          write the last BLEU translation to FILE\n"
"  --patience N                stop after N validations without improvement (default: off)\n"
"  --early-stop-metric M       loss (default) or bleu\n"
"Watching:\n"
"  --log-interval N            a log line every N updates (default 100)\n"
"  --progress | --no-progress  a progress bar (default: when stderr is a terminal)\n"
"  --no-plot                   no curves.png at the end (gnuplot)\n"
"  -q, --quiet                 log lines only to SAVE_DIR/train.log\n"
"  -h, --help                  this help\n"
"\n"
"SIGINT/SIGTERM stop after the current update with a checkpoint (a second SIGINT kills); under\n"
"mpirun, a signal to any one process stops them all after the same update.\n"
"Data-parallel, as root on one machine:\n"
"  mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 tern train -t 1 ...\n"
"  (an update is then 2 x --update-freq batches; rank 0 writes the logs and checkpoints)\n"
"Files in SAVE_DIR: checkpoint-N/, train.log, train_curve.tsv (one row per update),\n"
"valid_curve.tsv, curves.png, train.cache (train.K.cache: the K-th --train corpus), valid.cache.\n");
}

enum {
    O_VOCAB = 1000, O_SPM, O_SRC_SPM, O_TGT_SPM, O_TRAIN_SRC, O_TRAIN_TGT, O_TRAIN, O_VALID_SRC, O_VALID_TGT, O_CACHE,
    O_MAX_TOKENS, O_MAX_SENT, O_VALID_MAX_TOKENS, O_MAX_LEN, O_MAX_SRC_LEN, O_MAX_TGT_LEN, O_MAX_RATIO, O_NO_SHUFFLE,
    O_LR, O_SCHED, O_WARMUP, O_WARMUP_INIT, O_SGD_START,
    O_SGD_LR, O_DECAY_START, O_DECAY_INTERVAL, O_DECAY_TIMES, O_BETAS, O_ADAM_EPS, O_WD, O_L2, O_CLIP,
    O_UPDATE_FREQ, O_MAX_UPDATES, O_MAX_EPOCHS, O_MAX_TIME, O_SEED,
    O_SAVE_DIR, O_SAVE_INTERVAL, O_KEEP_LAST, O_RESUME, O_RESUME_FROM, O_INIT_FROM, O_INIT_ENC_LAYERS, O_INIT_DEC_LAYERS, O_FREEZE, O_VALID_INTERVAL, O_NO_BLEU, O_BLEU_BEAM,
    O_BLEU_LP, O_BLEU_MAX, O_BLEU_OUT, O_PATIENCE, O_STOP_METRIC, O_LOG_INTERVAL, O_PROGRESS, O_NO_PROGRESS,
    O_NO_PLOT, O_PLOT_ONLY, O_BUCKET_MB, O_NO_OVERLAP, O_ARCH,
    O_RL_GLEU, O_RL_ALPHA, O_RL_SAMPLES, O_RL_TEMP, O_RL_TOPK, /* RL refinement (src/train/rl.h) */
    O_QAT, /* fake quantization (src/train/qat.h) */
    O_FAMILY /* the chosen family's options: O_FAMILY + their index in its table */
};

static const struct option long_opts[] = {
    {"vocab", required_argument, 0, O_VOCAB},
    {"spm", required_argument, 0, O_SPM},
    {"src-spm", required_argument, 0, O_SRC_SPM},
    {"tgt-spm", required_argument, 0, O_TGT_SPM},
    {"train-src", required_argument, 0, O_TRAIN_SRC},
    {"train-tgt", required_argument, 0, O_TRAIN_TGT},
    {"train", required_argument, 0, O_TRAIN},
    {"valid-src", required_argument, 0, O_VALID_SRC},
    {"valid-tgt", required_argument, 0, O_VALID_TGT},
    {"cache-dir", required_argument, 0, O_CACHE},
    {"max-tokens", required_argument, 0, O_MAX_TOKENS},
    {"max-sentences", required_argument, 0, O_MAX_SENT},
    {"valid-max-tokens", required_argument, 0, O_VALID_MAX_TOKENS},
    {"max-len", required_argument, 0, O_MAX_LEN},
    {"max-source-len", required_argument, 0, O_MAX_SRC_LEN},
    {"max-target-len", required_argument, 0, O_MAX_TGT_LEN},
    {"max-ratio", required_argument, 0, O_MAX_RATIO},
    {"no-shuffle", no_argument, 0, O_NO_SHUFFLE},
    {"lr", required_argument, 0, O_LR},
    {"lr-scheduler", required_argument, 0, O_SCHED},
    {"warmup", required_argument, 0, O_WARMUP},
    {"warmup-init-lr", required_argument, 0, O_WARMUP_INIT},
    {"sgd-start", required_argument, 0, O_SGD_START},
    {"sgd-lr", required_argument, 0, O_SGD_LR},
    {"decay-start", required_argument, 0, O_DECAY_START},
    {"decay-interval", required_argument, 0, O_DECAY_INTERVAL},
    {"decay-times", required_argument, 0, O_DECAY_TIMES},
    {"adam-betas", required_argument, 0, O_BETAS},
    {"adam-eps", required_argument, 0, O_ADAM_EPS},
    {"weight-decay", required_argument, 0, O_WD},
    {"l2", no_argument, 0, O_L2},
    {"clip-norm", required_argument, 0, O_CLIP},
    {"update-freq", required_argument, 0, O_UPDATE_FREQ},
    {"max-updates", required_argument, 0, O_MAX_UPDATES},
    {"max-epochs", required_argument, 0, O_MAX_EPOCHS},
    {"max-time", required_argument, 0, O_MAX_TIME},
    {"seed", required_argument, 0, O_SEED},
    {"threads", required_argument, 0, 't'},
    {"save-dir", required_argument, 0, O_SAVE_DIR},
    {"save-interval-updates", required_argument, 0, O_SAVE_INTERVAL},
    {"keep-last", required_argument, 0, O_KEEP_LAST},
    {"resume", no_argument, 0, O_RESUME},
    {"resume-from", required_argument, 0, O_RESUME_FROM},
    {"init-from", required_argument, 0, O_INIT_FROM},
    {"init-encoder-layers", required_argument, 0, O_INIT_ENC_LAYERS},
    {"init-decoder-layers", required_argument, 0, O_INIT_DEC_LAYERS},
    {"freeze", required_argument, 0, O_FREEZE},
    {"valid-interval-updates", required_argument, 0, O_VALID_INTERVAL},
    {"no-bleu", no_argument, 0, O_NO_BLEU},
    {"bleu-beam", required_argument, 0, O_BLEU_BEAM},
    {"bleu-length-penalty", required_argument, 0, O_BLEU_LP},
    {"bleu-max-sentences", required_argument, 0, O_BLEU_MAX},
    {"bleu-output", required_argument, 0, O_BLEU_OUT},
    {"patience", required_argument, 0, O_PATIENCE},
    {"early-stop-metric", required_argument, 0, O_STOP_METRIC},
    {"log-interval", required_argument, 0, O_LOG_INTERVAL},
    {"progress", no_argument, 0, O_PROGRESS},
    {"no-progress", no_argument, 0, O_NO_PROGRESS},
    {"no-plot", no_argument, 0, O_NO_PLOT},
    {"plot-only", required_argument, 0, O_PLOT_ONLY},
    {"bucket-mb", required_argument, 0, O_BUCKET_MB},
    {"no-comm-overlap", no_argument, 0, O_NO_OVERLAP},
    {"architecture", required_argument, 0, O_ARCH},
    {"rl-gleu", no_argument, 0, O_RL_GLEU},
    {"qat", required_argument, 0, O_QAT},
    {"rl-alpha", required_argument, 0, O_RL_ALPHA},
    {"rl-samples", required_argument, 0, O_RL_SAMPLES},
    {"rl-temperature", required_argument, 0, O_RL_TEMP},
    {"rl-topk", required_argument, 0, O_RL_TOPK},
    {"quiet", no_argument, 0, 'q'},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

static volatile sig_atomic_t g_stop = 0;

/* --architecture: the family whose options the command line takes, scanned before the others
 * (they depend on it). The name as given goes to *arch. */
static const train_family_t *find_family(int argc, char **argv, const char **arch) {
    static model_config_t mc; /* --init-from's config.json: the family when --architecture is not given */
    const char *given = NULL, *init = NULL;
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        if (!strcmp(argv[i], "--architecture") && i + 1 < argc) given = argv[++i];
        else if (!strncmp(argv[i], "--architecture=", 15)) given = argv[i] + 15;
        else if (!strcmp(argv[i], "--init-from") && i + 1 < argc) init = argv[++i];
    }
    *arch = given ? given : TRAIN_DEFAULT_ARCHITECTURE;
    if (!given && init) {
        char p[4096];
        model_config_defaults(&mc);
        path_join(p, sizeof p, init, "config.json");
        if (file_exists(p) && !model_config_load(&mc, p) && mc.architecture[0]) *arch = mc.architecture;
    }
    return train_family_find(*arch);
}

/* The option list: the trainer's own, then the family's (O_FAMILY + i). */
static struct option *all_options(const train_family_t *fam) {
    int ng = 0, nf = 0;
    while (long_opts[ng].name) ng++;
    while (fam->options[nf].name) nf++;
    struct option *all = calloc((size_t)(ng + nf + 1), sizeof *all);
    if (!all) return NULL;
    memcpy(all, long_opts, (size_t)ng * sizeof *all);
    for (int i = 0; i < nf; i++)
        all[ng + i] = (struct option){fam->options[i].name,
                                      fam->options[i].kind == TRAIN_OPT_SET ? no_argument : required_argument, 0,
                                      O_FAMILY + i};
    return all;
}

/* An option of another family than fam (named in the message), or 0. */
static int foreign_option(int argc, char **argv, const struct option *all, const train_family_t *fam) {
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        if (strncmp(argv[i], "--", 2)) continue;
        size_t n = strcspn(argv[i] + 2, "=");
        int known = 0;
        for (const struct option *o = all; o->name && !known; o++)
            known = strlen(o->name) == n && !strncmp(o->name, argv[i] + 2, n);
        for (int k = 0; !known && train_family_at(k); k++) {
            const train_family_t *other = train_family_at(k);
            for (const train_option_t *op = other->options; op->name; op++)
                if (strlen(op->name) == n && !strncmp(op->name, argv[i] + 2, n)) {
                    fprintf(stderr, "tern train: --%s is an option of --architecture %s (this run: %s)\n", op->name,
                            other->architecture, fam->architecture);
                    return 1;
                }
        }
    }
    return 0;
}

/* A family option's value into the family's configuration; 0 on a usage error (printed). */
static int family_option(const train_option_t *op, const char *arg, void *config) {
    char flag[80];
    snprintf(flag, sizeof flag, "--%s", op->name);
    char *base = config;
    int iv;
    float fv;
    switch (op->kind) {
    case TRAIN_OPT_INT:
        if (!cli_int("train", flag, arg, (int)op->min, (int)op->max, &iv)) return 0;
        *(int *)(base + op->field) = iv;
        if (op->field2 != TRAIN_OPT_NO_FIELD2) *(int *)(base + op->field2) = iv;
        return 1;
    case TRAIN_OPT_FLOAT:
        if (!cli_float("train", flag, arg, (float)op->min, (float)op->max, &fv)) return 0;
        *(float *)(base + op->field) = fv;
        return 1;
    case TRAIN_OPT_SET:
        *(int *)(base + op->field) = op->value;
        return 1;
    case TRAIN_OPT_CHOICE:
        for (int i = 0; op->choices[i]; i++)
            if (!strcmp(arg, op->choices[i])) {
                *(int *)(base + op->field) = op->values[i];
                return 1;
            }
        fprintf(stderr, "tern train: %s must be ", flag);
        for (int i = 0; op->choices[i]; i++)
            fprintf(stderr, "%s%s", i == 0 ? "" : op->choices[i + 1] ? ", " : " or ", op->choices[i]);
        fprintf(stderr, " (got '%s')\n", arg);
        return 0;
    }
    return 0;
}

/* Stop signals. The first SIGINT or SIGTERM asks for a stop after the current update with a
 * checkpoint; a second SIGINT kills the process the default way.
 *
 * They are blocked in the main thread before it starts any thread (OpenMP's, oneDNN's and
 * OpenMPI's threads all inherit the mask), so that no compute thread is ever interrupted by them (no
 * EINTR inside a library, no signal frame pushed onto a thread inside a JIT kernel). One thread
 * takes them with sigwait. Threads that libraries started before main (OpenBLAS's idle server
 * threads) keep them unblocked: there the handler runs, with the same effect. The handler is
 * installed in any case, so that a signal ignored by the parent (SIGINT for a background job of a
 * shell) still stops the run, as it did before. */
static sigset_t g_stop_sigs;

static void on_stop_signal(int sig) {
    if (g_stop && sig == SIGINT) {
        signal(SIGINT, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, SIGINT);
        pthread_sigmask(SIG_UNBLOCK, &one, NULL);
        raise(SIGINT); /* unblocked in this thread: the default action ends the process */
        return;
    }
    g_stop = 1;
}

static void block_stop_signals(void) {
    sigemptyset(&g_stop_sigs);
    sigaddset(&g_stop_sigs, SIGINT);
    sigaddset(&g_stop_sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &g_stop_sigs, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static void *signal_thread(void *arg) {
    (void)arg;
    for (;;) {
        int sig;
        if (sigwait(&g_stop_sigs, &sig) == 0) on_stop_signal(sig);
    }
    return NULL;
}

/* "3600", "90m", "2.5h", "45s" -> seconds. */
static int parse_time(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v >= 0) || !isfinite(v)) return 0;
    if (!strcmp(end, "h")) v *= 3600;
    else if (!strcmp(end, "m")) v *= 60;
    else if (*end && strcmp(end, "s")) return 0;
    *out = v;
    return 1;
}

static int parse_long(const char *opt, const char *s, long *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 0) {
        fprintf(stderr, "tern train: %s expects a non-negative integer, got '%s'\n", opt, s);
        return 0;
    }
    *out = v;
    return 1;
}

/* --train SRC,TGT[:W] specs, in order. */
#define MAX_TRAIN 256
static char *g_spec_src[MAX_TRAIN], *g_spec_tgt[MAX_TRAIN], *g_spec_arg[MAX_TRAIN];
static double g_spec_w[MAX_TRAIN];
static int g_n_spec;

static int spec_fail(const char *arg, const char *why) {
    fprintf(stderr, "tern train: --train '%s': %s\n", arg, why);
    return 0;
}

static int train_spec(const char *arg, trainer_options_t *o) {
    if (g_n_spec >= MAX_TRAIN) return spec_fail(arg, "too many corpora (at most 256)");
    const char *comma = strchr(arg, ',');
    if (!comma) return spec_fail(arg, "expected SRC,TGT or SRC,TGT:W (no comma)");
    if (comma == arg) return spec_fail(arg, "the source file name is empty");
    const char *tgt = comma + 1, *colon = strrchr(tgt, ':');
    size_t tl = colon ? (size_t)(colon - tgt) : strlen(tgt);
    if (tl == 0) return spec_fail(arg, "the target file name is empty");
    double w = 1.0;
    if (colon) {
        const char *ws = colon + 1;
        char *end;
        errno = 0;
        w = strtod(ws, &end);
        if (!*ws) return spec_fail(arg, "the weight after ':' is empty (give a positive number, e.g. :1)");
        if (errno || end == ws || *end || !isfinite(w))
            return spec_fail(arg, "the weight after ':' is not a number (a TGT path with ':' needs an explicit "
                             ":W)");
        if (!(w > 0)) return spec_fail(arg, "the weight must be positive (a corpus of weight 0: leave it out)");
        if (w > 1e6) return spec_fail(arg, "the weight must be at most 1e6");
    }
    int k = g_n_spec;
    g_spec_src[k] = strndup(arg, (size_t)(comma - arg));
    g_spec_tgt[k] = strndup(tgt, tl);
    g_spec_arg[k] = strdup(arg);
    if (!g_spec_src[k] || !g_spec_tgt[k] || !g_spec_arg[k]) return spec_fail(arg, "out of memory");
    g_spec_w[k] = w;
    g_n_spec++;
    o->n_train = g_n_spec;
    o->train_srcs = (const char *const *)g_spec_src;
    o->train_tgts = (const char *const *)g_spec_tgt;
    o->train_weights = g_spec_w;
    return 1;
}

/* Lines of a text file (a last line without "\n" counts); -1 when it cannot be read. */
static long long text_lines(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    static char buf[1 << 20];
    long long n = 0;
    char last = '\n';
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, f)) > 0) {
        for (const char *p = buf, *e = buf + r; (p = memchr(p, '\n', (size_t)(e - p))); p++) n++;
        last = buf[r - 1];
    }
    int err = ferror(f);
    fclose(f);
    return err ? -1 : n + (last != '\n');
}

/* Each --train corpus: both files readable, non-empty and of equal line counts (a message naming
 * the argument; 0 when one is not). */
static int check_train_specs(void) {
    for (int k = 0; k < g_n_spec; k++) {
        const char *f[2] = {g_spec_src[k], g_spec_tgt[k]};
        long long n[2];
        for (int i = 0; i < 2; i++) {
            struct stat st;
            if (stat(f[i], &st) != 0 || !S_ISREG(st.st_mode)) {
                fprintf(stderr, "tern train: --train '%s': %s: %s\n", g_spec_arg[k], f[i],
                        errno ? strerror(errno) : "not a regular file");
                return 0;
            }
            if ((n[i] = text_lines(f[i])) < 0) {
                fprintf(stderr, "tern train: --train '%s': %s: cannot read: %s\n", g_spec_arg[k], f[i], strerror(errno));
                return 0;
            }
            if (n[i] == 0) {
                fprintf(stderr, "tern train: --train '%s': %s is empty (no line)\n", g_spec_arg[k], f[i]);
                return 0;
            }
        }
        if (n[0] != n[1]) {
            fprintf(stderr, "tern train: --train '%s': %s has %lld lines but %s has %lld\n", g_spec_arg[k], f[0],
                    n[0], f[1], n[1]);
            return 0;
        }
    }
    return 1;
}

/* Parses the options into o; returns 1 when they parse, 0 on a usage error (message printed),
 * 2 after --help. */
static int parse_options(int argc, char **argv, const struct option *all, const train_family_t *fam, void *config,
                         trainer_options_t *o, int *plot, const char **plot_only) {
    const char *C = "train";
    int ok = 1, c, iv;
    long lv = 0;
    const char *scheds[] = {"constant", "inverse_sqrt", "gnmt"};
    optind = 1;
    while (ok && (c = getopt_long(argc, argv, "t:qh", all, NULL)) != -1) {
        if (c >= O_FAMILY) {
            ok = family_option(&fam->options[c - O_FAMILY], optarg, config);
            continue;
        }
        switch (c) {
        case O_VOCAB: o->vocab_dir = optarg; break;
        case O_SPM: o->src_spm = optarg; o->tgt_spm = NULL; break;
        case O_SRC_SPM: o->src_spm = optarg; break;
        case O_TGT_SPM: o->tgt_spm = optarg; break;
        case O_TRAIN_SRC: o->train_src = optarg; break;
        case O_TRAIN_TGT: o->train_tgt = optarg; break;
        case O_TRAIN: ok = train_spec(optarg, o); break;
        case O_VALID_SRC: o->valid_src = optarg; break;
        case O_VALID_TGT: o->valid_tgt = optarg; break;
        case O_CACHE: o->cache_dir = optarg; break;
        case O_MAX_TOKENS: ok = cli_int(C, "--max-tokens", optarg, 1, 1 << 30, &o->max_tokens); break;
        case O_MAX_SENT: ok = cli_int(C, "--max-sentences", optarg, 0, 1 << 30, &o->max_sentences); break;
        case O_VALID_MAX_TOKENS: ok = cli_int(C, "--valid-max-tokens", optarg, 1, 1 << 30, &o->valid_max_tokens); break;
        case O_MAX_LEN:
            ok = cli_int(C, "--max-len", optarg, 2, 65535, &iv);
            o->data.max_src_len = o->data.max_tgt_len = iv;
            break;
        case O_MAX_SRC_LEN: ok = cli_int(C, "--max-source-len", optarg, 1, 65535, &o->data.max_src_len); break;
        case O_MAX_TGT_LEN: ok = cli_int(C, "--max-target-len", optarg, 2, 65535, &o->data.max_tgt_len); break;
        case O_MAX_RATIO: ok = cli_float(C, "--max-ratio", optarg, 0, 1e9f, &o->data.max_ratio); break;
        case O_NO_SHUFFLE: o->shuffle = 0; break;
        case O_LR: ok = cli_float(C, "--lr", optarg, 0, 1e3f, &o->sched.lr); break;
        case O_SCHED:
            o->sched.kind = (lr_kind_t)-1;
            for (int i = 0; i < 3; i++)
                if (!strcmp(optarg, scheds[i])) o->sched.kind = (lr_kind_t)i;
            if ((int)o->sched.kind < 0) {
                fprintf(stderr, "tern train: --lr-scheduler must be inverse_sqrt, constant or gnmt (got '%s')\n",
                        optarg);
                ok = 0;
            }
            break;
        case O_WARMUP: ok = cli_int(C, "--warmup", optarg, 0, 1 << 30, &o->sched.warmup); break;
        case O_WARMUP_INIT: ok = cli_float(C, "--warmup-init-lr", optarg, 0, 1e3f, &o->sched.warmup_init_lr); break;
        case O_SGD_START: ok = parse_long("--sgd-start", optarg, &o->sched.sgd_start); break;
        case O_SGD_LR: ok = cli_float(C, "--sgd-lr", optarg, 0, 1e3f, &o->sched.sgd_lr); break;
        case O_DECAY_START: ok = parse_long("--decay-start", optarg, &o->sched.decay_start); break;
        case O_DECAY_INTERVAL: ok = parse_long("--decay-interval", optarg, &o->sched.decay_interval); break;
        case O_DECAY_TIMES: ok = cli_int(C, "--decay-times", optarg, 0, 1000, &o->sched.decay_times); break;
        case O_BETAS: {
            char *e;
            o->adam.beta1 = strtof(optarg, &e);
            ok = *e == ',';
            if (ok) {
                char *e2;
                o->adam.beta2 = strtof(e + 1, &e2);
                ok = e2 != e + 1 && !*e2;
            }
            ok = ok && o->adam.beta1 >= 0 && o->adam.beta1 < 1 && o->adam.beta2 >= 0 && o->adam.beta2 < 1;
            if (!ok) fprintf(stderr, "tern train: --adam-betas expects B1,B2 in [0, 1), got '%s'\n", optarg);
            break;
        }
        case O_ADAM_EPS: ok = cli_float(C, "--adam-eps", optarg, 0, 1, &o->adam.eps); break;
        case O_WD: ok = cli_float(C, "--weight-decay", optarg, 0, 1, &o->adam.weight_decay); break;
        case O_L2: o->adam.decoupled = 0; break;
        case O_CLIP: ok = cli_float(C, "--clip-norm", optarg, 0, 1e9f, &o->clip_norm); break;
        case O_UPDATE_FREQ: ok = cli_int(C, "--update-freq", optarg, 1, 1 << 20, &o->update_freq); break;
        case O_MAX_UPDATES: ok = parse_long("--max-updates", optarg, &o->max_updates); break;
        case O_MAX_EPOCHS: ok = cli_int(C, "--max-epochs", optarg, 0, 1 << 30, &o->max_epochs); break;
        case O_MAX_TIME:
            ok = parse_time(optarg, &o->max_time);
            if (!ok) fprintf(stderr, "tern train: --max-time expects seconds or a number with s, m or h, got '%s'\n",
                             optarg);
            break;
        case O_SEED:
            ok = parse_long("--seed", optarg, &lv);
            o->seed = (uint64_t)lv;
            break;
        case 't': ok = cli_int(C, "--threads", optarg, 1, 1024, &o->threads); break;
        case O_SAVE_DIR: o->save_dir = optarg; break;
        case O_SAVE_INTERVAL: ok = cli_int(C, "--save-interval-updates", optarg, 0, 1 << 30, &o->save_interval_updates); break;
        case O_KEEP_LAST: ok = cli_int(C, "--keep-last", optarg, 0, 1 << 20, &o->keep_last); break;
        case O_RESUME: o->resume = 1; break;
        case O_RESUME_FROM: o->resume_from = optarg; o->resume = 1; break;
        case O_INIT_FROM: o->init_from = optarg; break;
        case O_INIT_ENC_LAYERS: o->init_enc_layers = optarg; break;
        case O_INIT_DEC_LAYERS: o->init_dec_layers = optarg; break;
        case O_FREEZE:
            if (strcmp(optarg, "embeddings") && strcmp(optarg, "encoder")) {
                fprintf(stderr, "tern train: --freeze must be embeddings or encoder, got '%s'\n", optarg);
                ok = 0;
            }
            o->freeze = optarg;
            break;
        case O_VALID_INTERVAL:
            ok = cli_int(C, "--valid-interval-updates", optarg, 0, 1 << 30, &o->valid_interval_updates);
            break;
        case O_NO_BLEU: o->bleu = 0; break;
        case O_BLEU_BEAM: ok = cli_int(C, "--bleu-beam", optarg, 1, 1024, &o->bleu_beam); break;
        case O_BLEU_LP: ok = cli_float(C, "--bleu-length-penalty", optarg, 0, 100, &o->bleu_length_penalty); break;
        case O_BLEU_MAX: ok = cli_int(C, "--bleu-max-sentences", optarg, 0, 1 << 30, &o->bleu_max_sentences); break;
        case O_BLEU_OUT: o->bleu_output = optarg; break;
        case O_PATIENCE: ok = cli_int(C, "--patience", optarg, 0, 1 << 30, &o->patience); break;
        case O_STOP_METRIC:
            if (!strcmp(optarg, "loss")) o->stop_metric = STOP_ON_LOSS;
            else if (!strcmp(optarg, "bleu")) o->stop_metric = STOP_ON_BLEU;
            else {
                fprintf(stderr, "tern train: --early-stop-metric must be loss or bleu (got '%s')\n", optarg);
                ok = 0;
            }
            break;
        case O_LOG_INTERVAL: ok = cli_int(C, "--log-interval", optarg, 0, 1 << 30, &o->log_interval); break;
        case O_PROGRESS: o->progress = 1; break;
        case O_NO_PROGRESS: o->progress = 0; break;
        case O_NO_PLOT: *plot = 0; break;
        case O_PLOT_ONLY: *plot_only = optarg; break;
        case O_BUCKET_MB: {
            float mb;
            ok = cli_float(C, "--bucket-mb", optarg, 1e-6f, 1e6f, &mb);
            o->bucket_mb = mb;
            break;
        }
        case O_NO_OVERLAP: o->comm_overlap = 0; break;
        case O_ARCH: o->architecture = optarg; break;
        case O_RL_GLEU: o->rl_gleu = 1; break;
        case O_QAT:
            if (qat_mode_parse(optarg) < 0) {
                fprintf(stderr, "tern train: --qat must be int8, int8-act or none, got '%s'\n", optarg);
                ok = 0;
            } else {
                o->qat = qat_mode_parse(optarg);
            }
            break;
        case O_RL_ALPHA: ok = cli_float(C, "--rl-alpha", optarg, 0, 1e6f, &o->rl_alpha); break;
        case O_RL_SAMPLES: ok = cli_int(C, "--rl-samples", optarg, 2, 1024, &o->rl_samples); break;
        case O_RL_TEMP: ok = cli_float(C, "--rl-temperature", optarg, 1e-6f, 1e6f, &o->rl_temperature); break;
        case O_RL_TOPK: ok = cli_int(C, "--rl-topk", optarg, 0, 1 << 30, &o->rl_topk); break;
        case 'q': o->quiet = 1; break;
        case 'h': usage(stdout); return 2;
        default: ok = 0; break;
        }
    }
    return ok;
}

/* --init-from a Hugging Face checkpoint (config.json with "model_type") or a Marian model directory:
 * converted first, as `tern convert` writes it (Hugging Face: its CTranslate2 form, the pad token and
 * bad_words_ids kept in generation_config.json; Marian: Tern's form with a zero "<pad>" row the decoder
 * starts from, as `tern convert --add-pad` writes it), into SAVE_DIR/imported-model
 * (imported-model.rankN for the other ranks under mpirun: each process writes its own), which then
 * is the run's --init-from and, unless --vocab or --spm says otherwise, its vocabulary. Returns 0,
 * or the command's exit code. */
static int import_foreign_model(trainer_options_t *o, char *buf, size_t n) {
    char p[4096];
    const char *dir = o->init_from;
    int marian = marian_is_dir(dir);
    if (!marian && !hf_is_checkpoint(path_join(p, sizeof p, dir, "config.json"))) return 0;
    tern_status_t st = model_dir_mkdir(o->save_dir);
    if (st) return cli_fail("train", st);
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    int other = rank && strcmp(rank, "0");
    snprintf(buf, n, "%s/imported-model%s%s", o->save_dir, other ? ".rank" : "", other ? rank : "");
    /* Marian: a "<pad>" row appended, the decoder started from it (convert --add-pad) */
    char *av[] = {"convert", "--from", (char *)dir, "-o", buf, "--to", marian ? "tern" : "ct2", "--add-pad", NULL};
    if (cmd_convert(marian ? 8 : 7, av)) {
        fprintf(stderr, "tern train: --init-from %s: the model could not be imported (above)\n", dir);
        return 1;
    }
    if (o->vocab_dir == dir) o->vocab_dir = buf;
    o->init_from = buf;
    return 0;
}

/* The combination errors of parsed options, or NULL. */
static const char *options_error(trainer_options_t *o, int argc) {
    if (o->init_from && !o->vocab_dir && !o->src_spm) o->vocab_dir = o->init_from; /* the model's vocabulary */
    if (optind < argc) return "unexpected argument (every input is given by an option)";
    if ((o->init_enc_layers || o->init_dec_layers) && !o->init_from)
        return "--init-encoder-layers and --init-decoder-layers choose layers of the --init-from model: give it";
    if (o->rl_gleu && !o->init_from) return "--rl-gleu refines a trained model: give it with --init-from MODEL_DIR";
    if (o->rl_gleu && !o->train_tgt && o->n_train == 0)
        return "--rl-gleu needs target references for its GLEU reward: --train-tgt FILE (or --train SRC,TGT)";
    if (!o->save_dir) return "--save-dir is required";
    if (o->n_train > 0 && (o->train_src || o->train_tgt))
        return "give the training text either as --train-src/--train-tgt or as --train SRC,TGT[:W], not both";
    if (o->n_train == 0 && (!o->train_src || !o->train_tgt))
        return "--train-src and --train-tgt are required (or --train SRC,TGT[:W], repeatable)";
    if (!o->valid_src != !o->valid_tgt) return "give both --valid-src and --valid-tgt, or neither";
    if (!o->vocab_dir == !o->src_spm)
        return "give the vocabulary: --vocab DIR, or --spm FILE (or --src-spm and --tgt-spm), one of the two";
    if (o->tgt_spm && !o->src_spm) return "--tgt-spm goes with --src-spm";
    if (o->patience && !o->valid_src) return "--patience needs validation files";
    return NULL;
}

/* Trains (data-parallel under mpirun), then plots the curves; returns the exit code. */
static int run_training(trainer_options_t *o, int plot) {
    const char *C = "train";
    /* data-parallel when launched by mpirun (MPI is initialized here only) */
    tern_status_t st = dist_init();
    if (st) {
        cli_fail(C, st);
        dist_abort(1);
        dist_finalize();
        return 1;
    }
    pthread_t sig_thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&sig_thread, &attr, signal_thread, NULL) != 0)
        pthread_sigmask(SIG_UNBLOCK, &g_stop_sigs, NULL); /* no stop flag then: signals kill as usual */
    else
        o->stop = &g_stop;
    pthread_attr_destroy(&attr);
    trainer_result_t r;
    st = trainer_run(o, &r);
    if (st) {
        int rc = cli_fail(C, st);
        if (dist_world() > 1) {
            fprintf(stderr, "tern train: rank %d of %d failed: aborting the data-parallel job\n", dist_rank(),
                    dist_world());
            dist_abort(rc ? rc : 1);
        }
        dist_finalize();
        return rc;
    }
    if (plot && dist_rank() == 0) {
        char png[4096];
        snprintf(png, sizeof png, "%s/curves.png", o->save_dir);
        if (train_plot(o->save_dir, png)) {
            if (!o->quiet) fprintf(stderr, "tern train: no plot: %s\n", tern_last_error());
        } else if (!o->quiet) {
            fprintf(stderr, "tern train: plot: %s\n", png);
        }
    }
    dist_finalize();
    return 0;
}

int cmd_train(int argc, char **argv) {
    block_stop_signals(); /* before any thread is started (see signal_thread) */
    trainer_options_t o = trainer_default_options();
    const char *arch;
    const train_family_t *fam = find_family(argc, argv, &arch);
    if (!fam) {
        fprintf(stderr, "tern train: --architecture '%s': no such family (", arch);
        for (int k = 0; train_family_at(k); k++) fprintf(stderr, "%s%s", k ? ", " : "", train_family_at(k)->architecture);
        fprintf(stderr, ")\n");
        return 2;
    }
    void *config = calloc(1, fam->config_size);
    struct option *all = all_options(fam);
    if (!config || !all) {
        free(config), free(all);
        fprintf(stderr, "tern train: out of memory\n");
        return 1;
    }
    fam->default_config(config);
    const char *plot_only = NULL;
    int plot = 1; /* curves.png at the end */
    int foreign = foreign_option(argc, argv, all, fam);
    int ok = foreign ? 0 : parse_options(argc, argv, all, fam, config, &o, &plot, &plot_only);
    int rc = -1;
    if (ok == 2) rc = 0;
    if (ok == 1 && plot_only) {
        char png[4096];
        snprintf(png, sizeof png, "%s/curves.png", plot_only);
        tern_status_t st = train_plot(plot_only, png);
        rc = st ? cli_fail("train", st) : 0;
        if (!st) fprintf(stderr, "tern train: wrote %s\n", png);
    }
    if (rc < 0) {
        const char *err = ok ? options_error(&o, argc) : NULL;
        if (ok && !err && o.architecture && strcmp(o.architecture, fam->architecture))
            err = "give --architecture in full (it chooses the options the command line takes)";
        if (ok && !err && fam->check_options) err = fam->check_options(config);
        if (ok && !err && !check_train_specs()) err = "";
        if (!ok || err) {
            if (err && *err) fprintf(stderr, "tern train: %s\n", err);
            else if (!foreign) usage(stderr);
            rc = 2;
        }
    }
    char imported[4096];
    if (rc < 0 && o.init_from) {
        int r = import_foreign_model(&o, imported, sizeof imported);
        if (r) rc = r;
    }
    if (rc < 0) {
        o.architecture = fam->architecture;
        o.model_config = config;
        rc = run_training(&o, plot);
    }
    free(all);
    free(config);
    return rc;
}
