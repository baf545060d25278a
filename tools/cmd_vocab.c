/* cmd_vocab.c — `tern vocab`: trains SentencePiece vocabularies (src/train/vocab_train.h). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "train/vocab_train.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: tern vocab -o PREFIX [options] FILE...\n"
"       tern vocab --model-dir DIR [--separate] --source FILE... --target FILE... [options]\n"
"\n"
"Trains a SentencePiece model (libsentencepiece's trainer) on raw text, one sentence a line.\n"
"\n"
"Output (one of):\n"
"  -o, --output PREFIX         PREFIX.model and PREFIX.vocab, one model over every FILE and every\n"
"                              --source/--target file; with --separate, PREFIX.source.model/.vocab\n"
"                              and PREFIX.target.model/.vocab\n"
"  --model-dir DIR             the vocabulary of a Tern model directory, what `tern train` starts\n"
"                              from: sentencepiece.model + shared_vocabulary.json (joint) or\n"
"                              source.spm + source_vocabulary.json and target.spm +\n"
"                              target_vocabulary.json (--separate), and config.json (special\n"
"                              tokens, pad_token, add_source_bos/eos)\n"
"  --json FILE                 with -o (joint): also write the pieces as a JSON vocabulary list\n"
"                              (what a model directory holds as shared_vocabulary.json)\n"
"Input:\n"
"  FILE...                     text files for a joint model\n"
"  --source FILE, --target FILE  source-side / target-side files (repeat the option for more)\n"
"  --separate                  one model per side instead of one joint model\n"
"Training:\n"
"  --vocab-size N              pieces, special pieces included (default 8000)\n"
"  --model-type TYPE           unigram (default), bpe, char, word\n"
"  --character-coverage F      share of characters kept, the rarest map to <unk> (default 1.0;\n"
"                              0.9995 suits languages with large alphabets)\n"
"  --input-sentence-size N     train on a random sample of N sentences (default 0: all)\n"
"  --seed N                    random seed of the sampling (default 1)\n"
"  -t, --threads N             trainer threads (default 1)\n"
"  --pad-id N, --unk-id N, --bos-id N, --eos-id N\n"
"                              ids of <pad> <unk> <s> </s> (defaults 0 1 2 3; -1 disables one,\n"
"                              except <unk>; --model-dir needs all four)\n"
"  --user-symbols A,B,...      pieces always kept whole\n"
"  --max-sentence-length N     longer sentences (bytes) are skipped (default 4192)\n"
"config.json of --model-dir:\n"
"  --source-bos                add <s> to every source sentence (default: no)\n"
"  --no-source-eos             do not add </s> to source sentences (default: add, as fairseq)\n"
"Other:\n"
"  -v, --verbose               SentencePiece's training log on stderr\n"
"  -h, --help                  this help\n");
}

enum {
    O_JSON = 1000, O_MODEL_DIR, O_SOURCE, O_TARGET, O_SEPARATE, O_VOCAB_SIZE, O_MODEL_TYPE, O_COVERAGE,
    O_ISS, O_SEED, O_PAD, O_UNK, O_BOS, O_EOS, O_USER, O_MAXLEN, O_SRC_BOS, O_NO_SRC_EOS
};
static const struct option long_opts[] = {
    {"output", required_argument, 0, 'o'},
    {"json", required_argument, 0, O_JSON},
    {"model-dir", required_argument, 0, O_MODEL_DIR},
    {"source", required_argument, 0, O_SOURCE},
    {"target", required_argument, 0, O_TARGET},
    {"separate", no_argument, 0, O_SEPARATE},
    {"vocab-size", required_argument, 0, O_VOCAB_SIZE},
    {"model-type", required_argument, 0, O_MODEL_TYPE},
    {"character-coverage", required_argument, 0, O_COVERAGE},
    {"input-sentence-size", required_argument, 0, O_ISS},
    {"seed", required_argument, 0, O_SEED},
    {"threads", required_argument, 0, 't'},
    {"pad-id", required_argument, 0, O_PAD},
    {"unk-id", required_argument, 0, O_UNK},
    {"bos-id", required_argument, 0, O_BOS},
    {"eos-id", required_argument, 0, O_EOS},
    {"user-symbols", required_argument, 0, O_USER},
    {"max-sentence-length", required_argument, 0, O_MAXLEN},
    {"source-bos", no_argument, 0, O_SRC_BOS},
    {"no-source-eos", no_argument, 0, O_NO_SRC_EOS},
    {"verbose", no_argument, 0, 'v'},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

int cmd_vocab(int argc, char **argv) {
    const char *C = "vocab";
    const char *prefix = NULL, *json = NULL, *dir = NULL;
    spm_train_options_t o = spm_train_default_options();
    int separate = 0, src_bos = 0, src_eos = 1, ok = 1, c, iss = 0, seed = 1;
    int n_src = 0, n_tgt = 0, n_joint = 0;
    const char **src = calloc((size_t)argc + 1, sizeof *src), **tgt = calloc((size_t)argc + 1, sizeof *tgt);
    const char **joint = calloc((size_t)argc + 1, sizeof *joint);
    if (!src || !tgt || !joint) {
        fprintf(stderr, "tern vocab: out of memory\n");
        return 1;
    }
    static const char *types[] = {"unigram", "bpe", "char", "word"};
    optind = 1;
    while (ok && (c = getopt_long(argc, argv, "o:t:vh", long_opts, NULL)) != -1) {
        switch (c) {
        case 'o': prefix = optarg; break;
        case O_JSON: json = optarg; break;
        case O_MODEL_DIR: dir = optarg; break;
        case O_SOURCE: src[n_src++] = optarg; break;
        case O_TARGET: tgt[n_tgt++] = optarg; break;
        case O_SEPARATE: separate = 1; break;
        case O_VOCAB_SIZE: ok = cli_int(C, "--vocab-size", optarg, 2, 1 << 24, &o.vocab_size); break;
        case O_MODEL_TYPE:
            o.model_type = NULL;
            for (int i = 0; i < 4; i++)
                if (!strcmp(optarg, types[i])) o.model_type = types[i];
            if (!o.model_type) {
                fprintf(stderr, "tern vocab: --model-type must be unigram, bpe, char or word (got '%s')\n", optarg);
                ok = 0;
            }
            break;
        case O_COVERAGE:
            ok = cli_float(C, "--character-coverage", optarg, 0.5f, 1.0f, &o.character_coverage);
            break;
        case O_ISS: ok = cli_int(C, "--input-sentence-size", optarg, 0, 2000000000, &iss); break;
        case O_SEED: ok = cli_int(C, "--seed", optarg, 0, 2147483647, &seed); break;
        case 't': ok = cli_int(C, "--threads", optarg, 1, 1024, &o.threads); break;
        case O_PAD: ok = cli_int(C, "--pad-id", optarg, -1, 1 << 24, &o.pad_id); break;
        case O_UNK: ok = cli_int(C, "--unk-id", optarg, 0, 1 << 24, &o.unk_id); break;
        case O_BOS: ok = cli_int(C, "--bos-id", optarg, -1, 1 << 24, &o.bos_id); break;
        case O_EOS: ok = cli_int(C, "--eos-id", optarg, -1, 1 << 24, &o.eos_id); break;
        case O_USER: o.user_symbols = optarg; break;
        case O_MAXLEN: ok = cli_int(C, "--max-sentence-length", optarg, 1, 1 << 30, &o.max_sentence_length); break;
        case O_SRC_BOS: src_bos = 1; break;
        case O_NO_SRC_EOS: src_eos = 0; break;
        case 'v': o.verbose = 1; break;
        case 'h':
            usage(stdout);
            free(src), free(tgt), free(joint);
            return 0;
        default: ok = 0; break;
        }
    }
    for (int i = optind; ok && i < argc; i++) joint[n_joint++] = argv[i];
    o.input_sentence_size = iss;
    o.seed = (unsigned)seed;
    const char *err = NULL;
    if (ok) {
        if (!prefix == !dir) err = "give exactly one of -o PREFIX and --model-dir DIR";
        else if (dir && n_joint) err = "--model-dir takes its files through --source and --target";
        else if (dir && (!n_src || !n_tgt)) err = "--model-dir needs --source and --target files";
        else if (separate && (n_joint || !n_src || !n_tgt)) err = "--separate needs --source and --target files "
                                                                  "(and no other FILE)";
        else if (json && (dir || separate)) err = "--json goes with -o for a joint model (--model-dir writes its "
                                                  "own vocabulary lists)";
        else if (!n_joint && !n_src && !n_tgt) err = "no input files";
    }
    if (!ok || err) {
        if (err) fprintf(stderr, "tern vocab: %s\n", err);
        usage(stderr);
        free(src), free(tgt), free(joint);
        return 2;
    }
    tern_status_t st = TERN_OK;
    if (dir) {
        st = vocab_train_model_dir(dir, src, n_src, tgt, n_tgt, separate, &o, src_bos, src_eos);
        if (!st) fprintf(stderr, "tern vocab: wrote %s (%s, %d pieces%s)\n", dir, o.model_type, o.vocab_size,
                         separate ? " per side" : ", joint");
    } else if (separate) {
        size_t n = strlen(prefix) + 16;
        char *p = malloc(n);
        if (!p) st = tern_error(TERN_ERR_NOMEM, "out of memory");
        if (!st) {
            snprintf(p, n, "%s.source", prefix);
            st = vocab_train_spm(p, src, n_src, &o);
        }
        if (!st) {
            snprintf(p, n, "%s.target", prefix);
            st = vocab_train_spm(p, tgt, n_tgt, &o);
        }
        if (!st) fprintf(stderr, "tern vocab: wrote %s.source.model/.vocab and %s.target.model/.vocab\n", prefix,
                         prefix);
        free(p);
    } else {
        for (int i = 0; i < n_src; i++) joint[n_joint++] = src[i];
        for (int i = 0; i < n_tgt; i++) joint[n_joint++] = tgt[i];
        st = vocab_train_spm(prefix, joint, n_joint, &o);
        if (!st && json) {
            size_t n = strlen(prefix) + 8;
            char *p = malloc(n);
            if (!p) st = tern_error(TERN_ERR_NOMEM, "out of memory");
            else {
                snprintf(p, n, "%s.model", prefix);
                st = vocab_write_json(p, json);
                free(p);
            }
        }
        if (!st) fprintf(stderr, "tern vocab: wrote %s.model and %s.vocab%s%s\n", prefix, prefix,
                         json ? " and " : "", json ? json : "");
    }
    free(src), free(tgt), free(joint);
    return st ? cli_fail(C, st) : 0;
}
