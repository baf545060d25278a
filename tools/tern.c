/* tern.c — entry point of the `tern` CLI: dispatches to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "process_env.h"
#include "tern.h"

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} command_t;

static const command_t commands[] = {
    {"translate", cmd_translate, "translate text with a model (greedy or beam search)"},
    {"rescore", cmd_rescore, "force-decode: log-probability of given translations"},
    {"mbr", cmd_mbr, "minimum Bayes-risk reranking of n-best lists (sentence BLEU or chrF)"},
    {"lmbr-tune", cmd_lmbr_tune, "tune LMBR's alpha, p, r, lambda on a development set for BLEU"},
    {"info", cmd_info, "print a model's shape, vocabulary sizes and format"},
    {"score", cmd_score, "corpus BLEU / chrF / GLEU, sacreBLEU-exact"},
    {"filter", cmd_filter, "clean a parallel corpus (empty, long, ratio, copies, duplicates)"},
    {"convert", cmd_convert, "write a CTranslate2 or Tern model in Tern's format, optionally quantized"},
    {"vocab", cmd_vocab, "train a SentencePiece vocabulary (joint or per side)"},
    {"average", cmd_average, "average the parameters of checkpoints into a model directory"},
    {"shrink", cmd_shrink, "unfold a GRU ensemble into one model and shrink it data-free"},
    {"train", cmd_train, "train a Transformer translation model on parallel text"},
    {"distill", cmd_distill, "sequence-level distillation: a teacher translates a corpus into a training corpus"},
    {"vmap", cmd_vmap, "build a vocabulary map (target vocabulary reduction) from a parallel corpus"},
    {"serve", cmd_serve, "HTTP translation server (LibreTranslate API, batching across requests)"},
    {"cpu", cmd_cpu, "the instruction sets Tern uses on this CPU (and the caps it can run)"},
};

static void usage(FILE *f) {
    fprintf(f, "tern %s — neural machine translation\n\nusage: tern COMMAND [options]\n\ncommands:\n",
            TERN_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`tern COMMAND --help` documents each command's options.\n");
}

int main(int argc, char **argv) {
    cli_process_defaults(argv); /* OpenMP spin, malloc threshold: may re-execute (process_env.h) */
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("tern %s\n", TERN_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "tern: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
