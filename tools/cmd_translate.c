#include <errno.h>
/* cmd_translate.c — `tern translate`: translate a text file or stdin with a model. A thin user of
 * tern_translate_stream() (through cli_translate_file(), which also reads the steering files). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batch/translator.h"
#include "cli.h"
#include "serve/docfile.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: tern translate -m MODEL [options] [INPUT [OUTPUT]]\n"
"\n"
"Translates INPUT (default: stdin) into OUTPUT (default: stdout), one output line per input line,\n"
"in the input's order. An empty input line gives an empty output line; a line longer than\n"
"--max-input-length tokens is truncated with a warning naming its line.\n"
"\n"
"model:\n"
"  -m, --model DIR             model directory: Tern (config.json + model.safetensors) or\n"
"                              CTranslate2 (model.bin + config.json + vocabularies) or a\n"
"                              Hugging Face MarianMT, M2M-100 or NLLB checkpoint (config.json with\n"
"                              \"model_type\", model.safetensors, the tokenizer files: docs/models.md);\n"
"                              several -m: an ensemble of them. A name that is not a path\n"
"                              (e.g. en-de) is an installed model: looked up in TERN_MODELS_DIR,\n"
"                              then PREFIX/share/tern/models\n"
"  --ensemble-weights W1,W2,.. one positive weight per -m (normalized to sum 1; default equal)\n"
"  --ensemble-mode MODE        logprob-mean (default: weighted mean of log-probabilities, Marian)\n"
"                              or prob-mean (log of the weighted mean of probabilities, fairseq)\n"
"                              or logit-mean (log-softmax of the weighted mean of log-probabilities:\n"
"                              an ensemble unfolded by `tern shrink`)\n"
"  --compute-type TYPE         auto (as stored; default), float32, int8\n"
"  --source-spm FILE           SentencePiece model of the source side (default: found in DIR)\n"
"  --vmap FILE                 vocabulary map (`tern vmap`, CTranslate2's format): the output and the\n"
"                              search are restricted to the candidates of each batch's source n-grams\n"
"                              and the pieces prefixes, --restrict-to, --constraints and LMBR\n"
"                              evidence need (docs/vmap.md)\n"
"  --use-vmap                  the model directory's vmap.txt (as CTranslate2's use_vmap)\n"
"  --shortlist FILE[,first,best[,threshold]]\n"
"                              a Marian lexical shortlist (text lex.s2t or marian-conv's binary; the\n"
"                              binary's values are in it): the first target words, the best\n"
"                              translations of each source word above threshold (defaults 100, 100,\n"
"                              0, as Marian's --shortlist); a Marian model's decoder.yml shortlist is\n"
"                              used without it; 'none': no shortlist (docs/models.md)\n"
"  --target-spm FILE           SentencePiece model of the target side (default: found in DIR)\n"
"  --pretokenized              input and output are space-separated vocabulary pieces\n"
"                              (no SentencePiece even when the model ships one)\n"
"  --source-lang CODE          a multilingual model's (M2M-100, NLLB) source language, e.g.\n"
"                              eng_Latn (NLLB) or __en__ (M2M-100): its code is the first source\n"
"                              token; `tern info -m MODEL` lists the codes\n"
"  --target-lang CODE          its target language, e.g. deu_Latn: the code is forced as the first\n"
"                              output token and left out of the output (both are needed for raw\n"
"                              text; with --pretokenized the pieces may carry the codes instead)\n"
"\n"
"search (a default marked * is the model's own when its directory has a generation_config.json:\n"
"`tern info -m MODEL` shows it; a flag given here wins):\n"
"  -b, --beam-size N           1: greedy search (argmax, no softmax); >1: beam search (default* 4)\n"
"  -n, --num-hypotheses N      n-best list of N hypotheses per input (<= beam size; default* 1).\n"
"                              With N > 1 each input line i (counted from 0) gives N lines\n"
"                              \"i ||| HYPOTHESIS ||| SCORE\", best first\n"
"  --length-penalty A          length normalization exponent alpha (default* 0: none)\n"
"  --length-norm NAME          plain: score / |Y|^A (CTranslate2, default);\n"
"                              gnmt: score / ((5 + |Y|) / 6)^A (Wu et al.)\n"
"  --coverage-penalty B        GNMT coverage penalty beta (default* 0)\n"
"  --eos-policy NAME           common: finished hypotheses leave the beam and B live ones go on\n"
"                              (CTranslate2, fairseq; default); paper: an EOS candidate takes one\n"
"                              of the B slots (Iglesias et al., Algorithm 1); marian: as paper,\n"
"                              and each finished hypothesis shrinks the beam for good (Marian's)\n"
"  --no-early-stop             decode until no live hypothesis can beat the n-th best finished\n"
"                              one (exact n-best lists; default: stop as CTranslate2 does)\n"
"  --max-length-a A, --max-length-b B\n"
"                              maximum output length A * source length + B (default: only\n"
"                              --max-decoding-length)\n"
"  --max-decoding-length N     hard cap on output tokens (default* 256)\n"
"  --min-length N              no end of sentence before N output tokens (default* 1, as\n"
"                              CTranslate2: a non-empty input never gets an empty translation)\n"
"  --max-input-length N        longer inputs are truncated with a warning (default 1024)\n"
"  --scores                    print \"i ||| HYPOTHESIS ||| SCORE\" lines even for one hypothesis\n"
"  --format text|html          html: the whole input is one HTML document: the text between tags is\n"
"                              translated, inline tags (b, i, a, span, ...) carried into the\n"
"                              translation by the attention, everything else kept (default text)\n"
"  --file-format txt|html|docx|odt|auto\n"
"                              INPUT is a document, translated as `tern serve`'s POST /translate_file\n"
"                              does (docs/serving.md): txt line by line, html as --format html,\n"
"                              docx/odt each paragraph with its formatting runs as inline tags, the\n"
"                              other zip members copied; OUTPUT the translated document (auto: by\n"
"                              INPUT's extension)\n"
"  --quality[=tsv|json]        quality estimates: \"TRANSLATION<TAB>SCORE\" lines (SCORE: the mean\n"
"                              token log-probability, end token included), or =json: one object\n"
"                              a line with \"words\" (each word's mean log-prob and byte span)\n"
"  --drop-unk                  remove unknown tokens from the output\n"
"  --replace-unknowns          write in place of each unknown output token the source token the\n"
"                              decoder attended to most at that step (CTranslate2's\n"
"                              replace_unknowns; raw text: the source piece, as text)\n"
"\n"
"constraints and posteriors:\n"
"  --suppress FILE             pieces or piece sequences (one per line, text or pieces) never\n"
"                              output: a sequence's last piece is removed after the others\n"
"  --target-prefix FILE        one line per input line: the output starts with it (forced), then\n"
"                              the search goes on freely (CTranslate2's target_prefix)\n"
"  --restrict-to FILE          n-best list (i ||| hypothesis ||| score, Moses, or one hypothesis\n"
"                              per line): input i is decoded along its hypotheses' paths only; the\n"
"                              scores are exact model scores (as tern rescore's); sets\n"
"                              --min-length 0 unless given\n"
"  --constraints FILE          one JSON list of target phrases per input line (text, or pieces\n"
"                              with --pretokenized), e.g. [\"Haus\", \"am See\"]: each appears in the\n"
"                              output whenever the maximum length allows (constrained beam search\n"
"                              with dynamic beam allocation, Post & Vilar 2018)\n"
"  --lmbr-evidence FILE        n-best list of a system (repeat for several): LMBR n-gram\n"
"                              posteriors added at every step (Iglesias et al. 2018)\n"
"  --lmbr-weights W1,W2,...    per-system weights of the evidence (default: all 1)\n"
"  --lmbr-alpha A              posteriors p(e) ~ exp(A * score) (default 1)\n"
"  --lmbr-p P, --lmbr-r R      linear-BLEU weights theta_n = 1 / (4 P R^(n-1)) (0.85, 0.7)\n"
"  --lmbr-lambda L             weight of the NMT log-probability (default 0.5 divided by the\n"
"                              number of models: 0.5 for one -m, 0.25 for two, as the paper)\n"
"  --lmbr-clip                 an evidence n-gram earns its posterior once per hypothesis (its\n"
"                              count clipped to 1), so repeating it gains nothing (default: at\n"
"                              every occurrence, Tromble's linear gain)\n"
"  --lmbr-sum-gain             the length penalty divides only the NMT log-probability; the LMBR\n"
"                              gain stays a sum (default: the whole score is divided)\n"
"  --patience P                beam search with a length or coverage penalty: a sentence stops\n"
"                              once round(beam * P) hypotheses finished (CTranslate2's patience;\n"
"                              default 1)\n"
"  --prefix-bias-beta B        with --target-prefix and beam search: bias towards the prefix\n"
"                              instead of forcing it, (1 - B) p + B on its next token while a\n"
"                              hypothesis follows it (CTranslate2's prefix_bias_beta); 0 <= B < 1\n"
"  --prune-width W             GNMT beam pruning: drop candidates more than W below the step's\n"
"                              best and live hypotheses more than W below the best finished one\n"
"                              (normalized); default off\n"
"  --prune-threshold P         drop candidates whose token probability is below P (default off)\n"
"\n"
"sampling (greedy search; docs/decoding.md):\n"
"  --sampling-topk K           draw each token from the K most probable (0: all; 1: argmax, the\n"
"                              default, no sampling); sampling implies -b 1 unless -b is given\n"
"  --sampling-topp P           and from the fewest best ones whose probability sums to >= P,\n"
"                              in (0, 1] (default 1: off)\n"
"  --sampling-temperature T    divide the log-probabilities by T > 0 before drawing (default 1)\n"
"  --num-samples M             M samples per input, written as an n-best list, best first (1)\n"
"  --seed N                    the draws depend only on N, the input line, the sample and the\n"
"                              step: the same N, the same output at any -t, -w or batch size (12345)\n"
"  --repetition-penalty R      logits of tokens already output divided by R (multiplied when\n"
"                              negative), CTranslate2's penalty; R > 0 (default 1: off)\n"
"  --no-repeat-ngram-size N    no n-gram of N tokens twice in an output (default 0: off)\n"
"\n"
"input:\n"
"  --split-sentences[=LANG]    translate each sentence of a line apart (ICU's sentence break\n"
"                              iterator, with LANG's abbreviations, e.g. =en; default ICU's root\n"
"                              rules) and join the translations with the line's own spaces: one\n"
"                              output line per input line still (one hypothesis, no --scores)\n"
"\n"
"throughput:\n"
"  --max-batch-tokens N        token budget of a batch: sentences x longest source (default 4096)\n"
"  --max-batch-size N          cap on sentences per batch (default 0: none)\n"
"  --read-ahead N              batches read ahead and sorted by length together (default 16)\n"
"  --no-sort                   cut batches from consecutive input lines in their order instead\n"
"                              of sorted by length (the same translations; no continuous\n"
"                              batching; the SDL paper's unsorted batches, bench/bench_sdl.py)\n"
"  --batch-beams on|off        off: every hypothesis of a decoding step runs its own forward\n"
"                              through the decoder, a batch of one row (the SDL paper's\n"
"                              unbatched baseline; the same translations, slower; a Transformer\n"
"                              only); default on: the step's rows as one batch\n"
"  -w, --workers N             translators running in parallel, sharing one model (default 1)\n"
"  -t, --threads N             intra-op threads of each translator (default: cores / workers)\n"
"\n"
"other:\n"
"  -q, --quiet                 no progress and no warnings on stderr\n"
"  -v, --verbose               informational messages on stderr\n"
"  --progress                  show progress (sentences, tokens/s) even when stderr is not a\n"
"                              terminal (default: only on a terminal)\n"
"  -h, --help                  this help\n");
}

enum {
    O_COMPUTE = 1000, O_VMAP, O_USE_VMAP, O_SHORTLIST, O_SRC_SPM, O_TGT_SPM, O_PRETOK, O_LP, O_LNORM, O_CP, O_EOS, O_NO_EARLY,
    O_MAXA, O_MAXB, O_MAXDEC, O_MINLEN, O_MAXIN, O_SCORES, O_DROP_UNK, O_REPL_UNK, O_MBT, O_MBS, O_READ_AHEAD,
    O_SPLIT, O_PROGRESS, O_ENS_W, O_ENS_MODE, O_SUPPRESS, O_PREFIX, O_RESTRICT, O_LMBR_EV, O_LMBR_W, O_LMBR_A, O_LMBR_P,
    O_LMBR_R, O_LMBR_L, O_LMBR_CLIP, O_LMBR_SUM, O_PRUNE_W, O_PRUNE_T, O_PATIENCE, O_PREFIX_BIAS, O_CONSTRAINTS,
    O_TOPK, O_TOPP, O_TEMP, O_NSAMP, O_SEED, O_REPPEN, O_NOREP, O_SRC_LANG, O_TGT_LANG, O_QUALITY, O_FORMAT, O_FILEFMT, O_NO_SORT, O_BATCH_BEAMS
};

static const struct option long_opts[] = {
    {"model", required_argument, 0, 'm'},
    {"ensemble-weights", required_argument, 0, O_ENS_W},
    {"ensemble-mode", required_argument, 0, O_ENS_MODE},
    {"compute-type", required_argument, 0, O_COMPUTE},
    {"source-spm", required_argument, 0, O_SRC_SPM},
    {"vmap", required_argument, 0, O_VMAP},
    {"use-vmap", no_argument, 0, O_USE_VMAP},
    {"shortlist", required_argument, 0, O_SHORTLIST},
    {"target-spm", required_argument, 0, O_TGT_SPM},
    {"pretokenized", no_argument, 0, O_PRETOK},
    {"source-lang", required_argument, 0, O_SRC_LANG},
    {"target-lang", required_argument, 0, O_TGT_LANG},
    {"beam-size", required_argument, 0, 'b'},
    {"num-hypotheses", required_argument, 0, 'n'},
    {"length-penalty", required_argument, 0, O_LP},
    {"length-norm", required_argument, 0, O_LNORM},
    {"coverage-penalty", required_argument, 0, O_CP},
    {"eos-policy", required_argument, 0, O_EOS},
    {"no-early-stop", no_argument, 0, O_NO_EARLY},
    {"max-length-a", required_argument, 0, O_MAXA},
    {"max-length-b", required_argument, 0, O_MAXB},
    {"max-decoding-length", required_argument, 0, O_MAXDEC},
    {"min-length", required_argument, 0, O_MINLEN},
    {"max-input-length", required_argument, 0, O_MAXIN},
    {"scores", no_argument, 0, O_SCORES},
    {"quality", optional_argument, 0, O_QUALITY},
    {"format", required_argument, 0, O_FORMAT},
    {"file-format", required_argument, 0, O_FILEFMT},
    {"drop-unk", no_argument, 0, O_DROP_UNK},
    {"replace-unknowns", no_argument, 0, O_REPL_UNK},
    {"max-batch-tokens", required_argument, 0, O_MBT},
    {"max-batch-size", required_argument, 0, O_MBS},
    {"read-ahead", required_argument, 0, O_READ_AHEAD},
    {"no-sort", no_argument, 0, O_NO_SORT},
    {"batch-beams", required_argument, 0, O_BATCH_BEAMS},
    {"workers", required_argument, 0, 'w'},
    {"threads", required_argument, 0, 't'},
    {"quiet", no_argument, 0, 'q'},
    {"verbose", no_argument, 0, 'v'},
    {"progress", no_argument, 0, O_PROGRESS},
    {"split-sentences", optional_argument, 0, O_SPLIT},
    {"suppress", required_argument, 0, O_SUPPRESS},
    {"target-prefix", required_argument, 0, O_PREFIX},
    {"restrict-to", required_argument, 0, O_RESTRICT},
    {"constraints", required_argument, 0, O_CONSTRAINTS},
    {"lmbr-evidence", required_argument, 0, O_LMBR_EV},
    {"lmbr-weights", required_argument, 0, O_LMBR_W},
    {"lmbr-alpha", required_argument, 0, O_LMBR_A},
    {"lmbr-p", required_argument, 0, O_LMBR_P},
    {"lmbr-r", required_argument, 0, O_LMBR_R},
    {"lmbr-lambda", required_argument, 0, O_LMBR_L},
    {"lmbr-clip", no_argument, 0, O_LMBR_CLIP}, {"lmbr-sum-gain", no_argument, 0, O_LMBR_SUM},
    {"prune-width", required_argument, 0, O_PRUNE_W},
    {"patience", required_argument, 0, O_PATIENCE},
    {"prefix-bias-beta", required_argument, 0, O_PREFIX_BIAS},
    {"prune-threshold", required_argument, 0, O_PRUNE_T},
    {"sampling-topk", required_argument, 0, O_TOPK},
    {"sampling-topp", required_argument, 0, O_TOPP},
    {"sampling-temperature", required_argument, 0, O_TEMP},
    {"num-samples", required_argument, 0, O_NSAMP},
    {"seed", required_argument, 0, O_SEED},
    {"repetition-penalty", required_argument, 0, O_REPPEN},
    {"no-repeat-ngram-size", required_argument, 0, O_NOREP},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

/* A search-parameter message with the fields named as this command's flags (in place). */
static const char *as_flags(char *msg) {
    static const char *const names[][2] = {{"sampling_topk", "--sampling-topk"}, {"sampling_topp", "--sampling-topp"},
        {"sampling_temperature", "--sampling-temperature"}, {"num_samples", "--num-samples"},
        {"repetition_penalty", "--repetition-penalty"}, {"no_repeat_ngram_size", "--no-repeat-ngram-size"},
        {"beam_size", "-b/--beam-size"}};
    char out[512];
    size_t o = 0;
    for (const char *p = msg; *p && o + 32 < sizeof out;) {
        size_t k = 0;
        while (k < sizeof names / sizeof names[0] && strncmp(p, names[k][0], strlen(names[k][0])) != 0) k++;
        if (k < sizeof names / sizeof names[0]) {
            o += (size_t)snprintf(out + o, sizeof out - o, "%s", names[k][1]);
            p += strlen(names[k][0]);
        } else out[o++] = *p++;
    }
    out[o] = 0;
    snprintf(msg, 512, "%s", out);
    return msg;
}

/* --seed: a decimal uint64. */
static int cli_seed(const char *cmd, const char *s, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || errno || *s == '-') {
        fprintf(stderr, "tern %s: --seed must be an unsigned 64-bit integer (got '%s')\n", cmd, s);
        return 0;
    }
    *out = (uint64_t)v;
    return 1;
}

static void show_progress(long sentences, long tokens, double seconds, void *user_data) {
    (void)user_data;
    fprintf(stderr, "\rtern translate: %ld sentences, %ld target tokens, %.1f tokens/s   ", sentences, tokens,
            seconds > 0 ? (double)tokens / seconds : 0.0);
    fflush(stderr);
}

int cmd_translate(int argc, char **argv) {
    const char *C = "translate";
    cli_models_t models = {0};
    tern_model_options_t mo = tern_model_default_options();
    tern_translator_options_t to = tern_translator_default_options();
    tern_search_params_t o = tern_search_default_params();
    tern_lmbr_params_t lm = tern_lmbr_default_params();
    cli_extras_files_t files = {0};
    to.workers = 1;
    int quiet = 0, verbose = 0, progress = 0, ok = 1, c, print_scores = 0;
    int repl_unk = 0;                /* --replace-unknowns */
    int no_sort = 0;                 /* --no-sort */
    int beams_apart = 0;             /* --batch-beams off */
    int quality = 0;                 /* --quality: 1 TSV, 2 JSON lines */
    int html = 0;                    /* --format html */
    int file_kind = -1;              /* --file-format: a DOC_* kind (docfile.h); -2 auto */
    const char *split_lang = NULL; /* --split-sentences: the source language ("": ICU's root rules) */
    unsigned set = 0; /* the search flags given (SP_*), over the model's own defaults */
    const char *evidence[64];
    float ev_weights[64];
    int n_ev = 0, n_w = 0;
    const char *src_lang = NULL, *tgt_lang = NULL;
    optind = 1;
    while (ok && (c = getopt_long(argc, argv, "m:b:n:w:t:qvh", long_opts, NULL)) != -1) {
        switch (c) {
        case 'm': ok = cli_models_add(C, &models, optarg); break;
        case O_ENS_W: ok = cli_models_weights(C, &models, optarg); break;
        case O_ENS_MODE: ok = cli_models_mode(C, &models, optarg); break;
        case O_COMPUTE:
            if (!strcmp(optarg, "auto") || !strcmp(optarg, "default")) mo.compute_type = TERN_COMPUTE_AUTO;
            else if (!strcmp(optarg, "float32")) mo.compute_type = TERN_COMPUTE_FLOAT32;
            else if (!strcmp(optarg, "int8")) mo.compute_type = TERN_COMPUTE_INT8;
            else {
                fprintf(stderr, "tern translate: --compute-type is auto, float32 or int8, got '%s'\n", optarg);
                ok = 0;
            }
            break;
        case O_SRC_SPM: mo.source_spm = optarg; break;
        case O_VMAP: mo.vmap = optarg; break;
        case O_USE_VMAP: mo.use_vmap = 1; break;
        case O_SHORTLIST: mo.shortlist = optarg; break;
        case O_TGT_SPM: mo.target_spm = optarg; break;
        case O_PRETOK: mo.use_spm = 0; break;
        case O_SRC_LANG: src_lang = optarg; break;
        case O_TGT_LANG: tgt_lang = optarg; break;
        case 'b': ok = cli_int(C, "--beam-size", optarg, 1, 1024, &o.beam_size), set |= SP_BEAM; break;
        case 'n': ok = cli_int(C, "--num-hypotheses", optarg, 1, 1024, &o.num_hypotheses), set |= SP_NHYP; break;
        case O_LP: ok = cli_float(C, "--length-penalty", optarg, 0, 100, &o.length_penalty), set |= SP_LP; break;
        case O_LNORM:
            set |= SP_LNORM;
            if (!strcmp(optarg, "plain")) o.length_norm = TERN_LENPEN_PLAIN;
            else if (!strcmp(optarg, "gnmt")) o.length_norm = TERN_LENPEN_GNMT;
            else {
                fprintf(stderr, "tern translate: --length-norm is plain or gnmt, got '%s'\n", optarg);
                ok = 0;
            }
            break;
        case O_CP: ok = cli_float(C, "--coverage-penalty", optarg, 0, 100, &o.coverage_penalty), set |= SP_CP; break;
        case O_EOS:
            set |= SP_EOS;
            if (!strcmp(optarg, "common")) o.eos_policy = TERN_EOS_COMMON;
            else if (!strcmp(optarg, "paper")) o.eos_policy = TERN_EOS_PAPER;
            else if (!strcmp(optarg, "marian")) o.eos_policy = TERN_EOS_MARIAN;
            else {
                fprintf(stderr, "tern translate: --eos-policy is common, paper or marian, got '%s'\n", optarg);
                ok = 0;
            }
            break;
        case O_NO_EARLY: o.early_stop = 0, set |= SP_EARLY; break;
        case O_MAXA: ok = cli_float(C, "--max-length-a", optarg, 0, 1000, &o.max_length_a), set |= SP_MAXA; break;
        case O_MAXB: ok = cli_int(C, "--max-length-b", optarg, 0, 1 << 20, &o.max_length_b), set |= SP_MAXB; break;
        case O_MAXDEC: ok = cli_int(C, "--max-decoding-length", optarg, 1, 1 << 20, &o.max_decoding_length), set |= SP_MAXDEC; break;
        case O_MINLEN: ok = cli_int(C, "--min-length", optarg, 0, 1 << 20, &o.min_length), set |= SP_MINLEN; break;
        case O_SUPPRESS: files.suppress = optarg; break;
        case O_PREFIX: files.target_prefix = optarg; break;
        case O_RESTRICT: files.restrict_to = optarg; break;
        case O_CONSTRAINTS: files.constraints = optarg; break;
        case O_LMBR_EV:
            if (n_ev == 64) {
                fprintf(stderr, "tern translate: at most 64 --lmbr-evidence files\n");
                ok = 0;
            } else evidence[n_ev++] = optarg;
            break;
        case O_LMBR_W:
            for (char *p = optarg, *q; ok && *p; p = *q ? q + 1 : q) {
                q = p + strcspn(p, ",");
                char tmp[64];
                snprintf(tmp, sizeof tmp, "%.*s", (int)(q - p), p);
                if (n_w == 64) ok = 0;
                else ok = cli_float(C, "--lmbr-weights", tmp, 0, 1e6f, &ev_weights[n_w++]);
            }
            break;
        case O_LMBR_A: ok = cli_float(C, "--lmbr-alpha", optarg, 0, 1e6f, &lm.alpha); break;
        case O_LMBR_P: ok = cli_float(C, "--lmbr-p", optarg, 1e-6f, 1e6f, &lm.p); break;
        case O_LMBR_R: ok = cli_float(C, "--lmbr-r", optarg, 1e-6f, 1e6f, &lm.r); break;
        case O_LMBR_L: ok = cli_float(C, "--lmbr-lambda", optarg, 1e-9f, 1e9f, &lm.lambda); break;
        case O_LMBR_CLIP: lm.clip = 1; break;
        case O_LMBR_SUM: lm.sum_gain = 1; break;
        case O_PRUNE_W: ok = cli_float(C, "--prune-width", optarg, 0, 1e30f, &o.prune_width), set |= SP_PRUNE_W; break;
        case O_PREFIX_BIAS:
            ok = cli_float(C, "--prefix-bias-beta", optarg, 0, 0.999999f, &o.prefix_bias_beta), set |= SP_PREFIX_BIAS;
            break;
        case O_PATIENCE:
            ok = cli_float(C, "--patience", optarg, 1e-6f, 1e6f, &o.patience), set |= SP_PATIENCE;
            break;
        case O_PRUNE_T: ok = cli_float(C, "--prune-threshold", optarg, 0, 1, &o.prune_threshold), set |= SP_PRUNE_T; break;
        case O_TOPK: ok = cli_int(C, "--sampling-topk", optarg, 0, 1 << 30, &o.sampling_topk), set |= SP_TOPK; break;
        case O_TOPP: ok = cli_float(C, "--sampling-topp", optarg, -1e30f, 1e30f, &o.sampling_topp), set |= SP_TOPP; break;
        case O_TEMP:
            ok = cli_float(C, "--sampling-temperature", optarg, -1e30f, 1e30f, &o.sampling_temperature), set |= SP_TEMP;
            break;
        case O_NSAMP: ok = cli_int(C, "--num-samples", optarg, 1, 1024, &o.num_samples), set |= SP_NSAMP; break;
        case O_SEED: ok = cli_seed(C, optarg, &o.seed), set |= SP_SEED; break;
        case O_REPPEN:
            ok = cli_float(C, "--repetition-penalty", optarg, -1e30f, 1e30f, &o.repetition_penalty), set |= SP_REPPEN;
            break;
        case O_NOREP: ok = cli_int(C, "--no-repeat-ngram-size", optarg, 0, 1 << 20, &o.no_repeat_ngram_size), set |= SP_NOREP; break;
        case O_MAXIN: ok = cli_int(C, "--max-input-length", optarg, 1, 1 << 20, &to.max_input_length); break;
        case O_SCORES: print_scores = 1; break;
        case O_FORMAT:
            if (!strcmp(optarg, "text")) html = 0;
            else if (!strcmp(optarg, "html")) html = 1;
            else {
                fprintf(stderr, "tern translate: --format is text or html, got '%s'\n", optarg);
                ok = 0;
            }
            break;
        case O_FILEFMT:
            if (!strcmp(optarg, "auto")) file_kind = -2;
            else {
                char name[32];
                snprintf(name, sizeof name, ".%s", optarg);
                if ((file_kind = doc_kind_of(name)) < 0 || !strcmp(optarg, "htm")) {
                    fprintf(stderr, "tern translate: --file-format is txt, html, docx, odt or auto, got '%s'\n", optarg);
                    ok = 0;
                }
            }
            break;
        case O_QUALITY:
            if (!optarg || !strcmp(optarg, "tsv")) quality = 1;
            else if (!strcmp(optarg, "json")) quality = 2;
            else {
                fprintf(stderr, "tern translate: --quality is tsv or json, got '%s'\n", optarg);
                ok = 0;
            }
            break;
        case O_DROP_UNK: to.keep_unk = 0; break;
        case O_REPL_UNK: repl_unk = 1; break;
        case O_NO_SORT: no_sort = 1; break;
        case O_BATCH_BEAMS:
            if (!strcmp(optarg, "on")) beams_apart = 0;
            else if (!strcmp(optarg, "off")) beams_apart = 1;
            else {
                fprintf(stderr, "tern translate: --batch-beams is on or off, got '%s'\n", optarg);
                ok = 0;
            }
            break;
        case O_MBT: ok = cli_int(C, "--max-batch-tokens", optarg, 1, 1 << 24, &to.max_batch_tokens); break;
        case O_MBS: ok = cli_int(C, "--max-batch-size", optarg, 0, 1 << 24, &to.max_batch_size); break;
        case O_READ_AHEAD: ok = cli_int(C, "--read-ahead", optarg, 1, 1 << 16, &to.read_ahead); break;
        case 'w': ok = cli_int(C, "--workers", optarg, 1, 256, &to.workers); break;
        case 't': ok = cli_int(C, "--threads", optarg, 1, 256, &to.threads_per_worker); break;
        case 'q': quiet = 1; break;
        case 'v': verbose = 1; break;
        case O_PROGRESS: progress = 1; break;
        case O_SPLIT: split_lang = optarg ? optarg : ""; break;
        case 'h': usage(stdout); return 0;
        default: ok = 0; break;
        }
    }
    if (!ok) {
        fprintf(stderr, "see tern translate --help\n");
        return 2;
    }
    if (models.n == 0) {
        fprintf(stderr, "tern translate: no model (-m DIR); see tern translate --help\n");
        return 2;
    }
    if (argc - optind > 2) {
        fprintf(stderr, "tern translate: at most two file arguments: INPUT [OUTPUT]\n");
        return 2;
    }
    if (n_w && n_w != n_ev) {
        fprintf(stderr, "tern translate: --lmbr-weights has %d values for %d --lmbr-evidence files\n", n_w, n_ev);
        return 2;
    }
    if (quality && (print_scores || split_lang || n_ev || files.suppress || files.target_prefix || files.restrict_to ||
                    files.constraints)) {
        fprintf(stderr, "tern translate: --quality cannot go with --scores, --split-sentences, --lmbr-evidence or "
                        "per-line files (--suppress, --target-prefix, --restrict-to, --constraints)\n");
        return 2;
    }
    if (html && (quality || print_scores || n_ev || files.suppress || files.target_prefix || files.restrict_to ||
                 files.constraints || o.num_hypotheses > 1 || o.num_samples > 1)) {
        fprintf(stderr, "tern translate: --format html gives one translated document: it cannot go with --quality, "
                        "--scores, n-best lists, --lmbr-evidence or per-line files\n");
        return 2;
    }
    if (file_kind != -1 && (html || quality || print_scores || n_ev || files.suppress || files.target_prefix ||
                            files.restrict_to || files.constraints || o.num_hypotheses > 1 || o.num_samples > 1)) {
        fprintf(stderr, "tern translate: --file-format gives one translated document: it cannot go with --format, "
                        "--quality, --scores, n-best lists, --lmbr-evidence or per-line files\n");
        return 2;
    }
    if (file_kind == -2) {
        const char *ip = optind < argc ? argv[optind] : NULL;
        if (!ip || !strcmp(ip, "-") || (file_kind = doc_kind_of(ip)) < 0) {
            fprintf(stderr, "tern translate: --file-format auto: %s%s%s has no extension .txt, .html, .docx or .odt\n",
                    ip ? "'" : "", ip ? ip : "the standard input", ip ? "'" : "");
            return 2;
        }
    }
    files.evidence = evidence;
    files.n_evidence = n_ev;
    lm.num_systems = n_ev;
    lm.weights = n_w ? ev_weights : NULL;
    tern_set_log_level(quiet ? TERN_LOG_ERROR : verbose ? TERN_LOG_INFO : TERN_LOG_WARN);
    const char *in_path = optind < argc ? argv[optind] : NULL;
    const char *out_path = optind + 1 < argc ? argv[optind + 1] : NULL;

    tern_model_t *model = NULL;
    int lrc = cli_models_load(C, &models, &mo, &model);
    if (lrc) return lrc;
    o = search_params_over(&o, set, tern_model_search_params(model, NULL));
    if (files.restrict_to && !(set & SP_MINLEN)) o.min_length = 0;
    if (o.sampling_topk != 1 && !(set & SP_BEAM)) o.beam_size = 1, o.num_hypotheses = 1; /* sampling: greedy */
    if (tern_search_params_check(&o) || o.sampling_topk > tern_model_info(model).target_vocab_size) {
        char msg[512];
        if (o.sampling_topk > tern_model_info(model).target_vocab_size)
            snprintf(msg, sizeof msg, "sampling_topk %d is larger than the target vocabulary (%d)", o.sampling_topk,
                     tern_model_info(model).target_vocab_size);
        else snprintf(msg, sizeof msg, "%s", tern_last_error());
        fprintf(stderr, "tern translate: %s\n", as_flags(msg));
        tern_model_free(model);
        return 2;
    }
    if (o.num_hypotheses > o.beam_size) {
        fprintf(stderr, "tern translate: --num-hypotheses (%d) cannot exceed the beam size (%d%s)\n", o.num_hypotheses,
                o.beam_size, set & SP_BEAM ? "" : ", the model's default: see tern info");
        tern_model_free(model);
        return 2;
    }
    tern_status_t st;
    FILE *in = cli_open(C, in_path, "r");
    FILE *out = in ? cli_open(C, out_path, "w") : NULL;
    int rc = 1;
    cli_extras_t *x = NULL;
    if (in && out && (st = cli_extras_open(&x, &files))) {
        fprintf(stderr, "tern translate: %s: %s\n", tern_status_string(st), tern_last_error());
    } else if (in && out) {
        int show = !quiet && (progress || isatty(fileno(stderr)));
        tern_request_t req = tern_request_default();
        req.params = &o;
        req.lmbr = n_ev ? &lm : NULL;
        req.progress = show ? show_progress : NULL;
        req.source_lang = src_lang;
        req.target_lang = tgt_lang;
        req.replace_unknowns = repl_unk;
        req.no_sort = no_sort;
        req.beams_apart = beams_apart;
        if (file_kind >= 0) {
            cli_extras_close(x, 0);
            x = NULL;
            req.progress = NULL;
            st = cli_translate_document(model, &to, &req, file_kind, in, out, split_lang);
        } else if (html) {
            cli_extras_close(x, 0);
            x = NULL;
            req.progress = NULL;
            st = cli_translate_html(model, &to, &req, in, out, split_lang);
        } else if (quality) {
            if (o.num_hypotheses > 1 || o.num_samples > 1) {
                cli_extras_close(x, -1);
                x = NULL;
                st = tern_error(TERN_ERR_INVALID_ARG, "--quality estimates the best translation: it cannot go with "
                                "--num-hypotheses or --num-samples above 1");
            } else {
                cli_extras_close(x, 0);
                x = NULL;
                req.progress = NULL;
                st = cli_translate_quality(model, &to, &req, in, out, quality == 2);
            }
        } else
            st = cli_translate_file(model, &to, &req, x, in, out, print_scores, split_lang);
        if (show) fputc('\n', stderr);
        if (st) {
            const char *where = in_path && strcmp(in_path, "-") ? in_path : "stdin";
            fprintf(stderr, "tern translate: %s: %s: %s\n", where, tern_status_string(st), tern_last_error());
        } else if (out != stdout && fclose(out) != 0) {
            fprintf(stderr, "tern translate: cannot write '%s'\n", out_path);
            out = NULL;
        } else {
            if (out != stdout) out = NULL;
            rc = 0;
        }
    }
    cli_close(in);
    cli_close(out);
    tern_model_free(model);
    return rc;
}
