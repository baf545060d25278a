/* cmd_info.c — `tern info`: a model's format, shape, vocabulary sizes and weight size. */
#include <string.h>

#include "cli.h"

int cmd_info(int argc, char **argv) {
    const char *dir = NULL;
    tern_model_options_t mo = tern_model_default_options();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: tern info -m MODEL [--compute-type auto|float32|int8]\n\n"
                   "Prints the model's format, layers, dimensions, vocabulary sizes and the bytes of\n"
                   "its weights as run with the given compute type.\n\n"
                   "  -m, --model DIR         model directory (Tern or CTranslate2)\n"
                   "  --compute-type TYPE     auto (as stored; default), float32, int8\n"
                   "  -h, --help              this help\n");
            return 0;
        } else if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) {
            dir = argv[++i];
        } else if (!strcmp(argv[i], "--compute-type") && i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(v, "auto")) mo.compute_type = TERN_COMPUTE_AUTO;
            else if (!strcmp(v, "float32")) mo.compute_type = TERN_COMPUTE_FLOAT32;
            else if (!strcmp(v, "int8")) mo.compute_type = TERN_COMPUTE_INT8;
            else {
                fprintf(stderr, "tern info: --compute-type is auto, float32 or int8, got '%s'\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "tern info: unexpected argument '%s'; see tern info --help\n", argv[i]);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "tern info: no model (-m DIR)\n");
        return 2;
    }
    tern_model_t *m = NULL;
    tern_status_t st = tern_model_load(&m, dir, &mo);
    if (st) return cli_fail("info", st);
    tern_model_info_t in = tern_model_info(m);
    printf("format: %s\n", in.format);
    printf("encoder_layers: %d\ndecoder_layers: %d\n", in.encoder_layers, in.decoder_layers);
    printf("d_model: %d\nnum_heads: %d\nffn_dim: %d\n", in.d_model, in.num_heads, in.ffn_dim);
    printf("norm: %s\n", in.pre_norm ? "pre" : "post");
    printf("source_vocab_size: %d\ntarget_vocab_size: %d\n", in.source_vocab_size, in.target_vocab_size);
    printf("compute: %s\n", in.int8 ? "int8" : "float32");
    printf("sentencepiece: %s\n", in.has_spm ? "yes" : "no");
    printf("weight_bytes: %zu\n", in.weight_bytes);
    tern_model_free(m);
    return 0;
}
