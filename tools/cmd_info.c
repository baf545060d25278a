/* cmd_info.c — `tern info`: a model's family, format, shape, vocabulary sizes and weight size
 * (an ensemble's: its own facts, then each member's); with --tensors, each stored tensor as its
 * family's description (model/desc.h) reads it. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model/family.h"
#include "model/weights.h"

static void print_info(const tern_model_info_t *in, const char *indent) {
    printf("%sfamily: %s\n", indent, in->family);
    printf("%sformat: %s\n", indent, in->format);
    for (int k = 0; k < in->num_hparams; k++) {
        const tern_hparam_t *h = &in->hparams[k];
        if (h->text) printf("%s%s: %s\n", indent, h->name, h->text);
        else printf("%s%s: %ld\n", indent, h->name, h->value);
    }
    printf("%ssource_vocab_size: %d\n%starget_vocab_size: %d\n", indent, in->source_vocab_size, indent,
           in->target_vocab_size);
    printf("%smax_source_length: %d\n%smax_target_length: %d\n", indent, in->max_source_length, indent,
           in->max_target_length);
    printf("%scompute: %s\n", indent, in->int8 ? "int8" : "float32");
    printf("%ssentencepiece: %s\n", indent, in->has_spm ? "yes" : "no");
    printf("%sweight_bytes: %zu\n", indent, in->weight_bytes);
    if (in->num_languages > 0) { /* a multilingual model: the codes --source-lang/--target-lang take */
        printf("%slanguages (%d):", indent, in->num_languages);
        for (int k = 0; k < in->num_languages; k++) printf(" %s", in->languages[k]);
        printf("\n");
    }
}

/* What the family's description says of a stored tensor. */
static const char *tensor_role(const model_desc_t *md, const tensor_t *t) {
    int spec, layer;
    for (int k = 0; k < md->n_keys; k++)
        if (!strcmp(md->keys[k].name, t->name)) return "config key";
    if (desc_parse(md, t->name, &spec, &layer)) return md->specs[spec].dtype == DESC_Q8 ? "matrix (int8-able)" : "float32 only";
    size_t n = strlen(t->name);
    if (n > 6 && !strcmp(t->name + n - 6, "_scale")) {
        char base[512];
        snprintf(base, sizeof base, "%.*s", (int)(n - 6), t->name);
        if (desc_parse(md, base, &spec, &layer)) return "int8 scales";
    }
    return "not in the description";
}

/* `tern info --tensors`: dir's stored tensors (name, dtype, shape, role) and tied names. */
static int print_tensors(const char *dir) {
    char p[4096];
    weights_t *w = NULL;
    model_config_t cfg;
    model_config_defaults(&cfg);
    const model_family_t *fam;
    path_join(p, sizeof p, dir, "config.json");
    if ((file_exists(p) && model_config_load(&cfg, p)) || model_family_find(&fam, &cfg, p)) goto fail;
    path_join(p, sizeof p, dir, "model.safetensors");
    if (!file_exists(p)) path_join(p, sizeof p, dir, "model.bin");
    if (!strcmp(p + strlen(p) - 4, ".bin") ? weights_load_ct2(&w, p) : weights_load_safetensors(&w, p)) goto fail;
    printf("%s: %s, %d tensors\n", p, fam->name, weights_count(w));
    for (int i = 0; i < weights_count(w); i++) {
        const tensor_t *t = weights_at(w, i);
        char shape[64] = "";
        for (int r = 0, o = 0; r < t->rank && o < (int)sizeof shape; r++)
            o += snprintf(shape + o, sizeof shape - (size_t)o, "%s%lld", r ? ", " : "", (long long)t->shape[r]);
        printf("  %-48s %-8s [%s]  %s\n", t->name, dtype_name(t->dtype), shape, tensor_role(fam->desc, t));
    }
    for (int i = 0; i < weights_alias_count(w); i++) {
        const char *target;
        const char *name = weights_alias_at(w, i, &target);
        if (!weights_alias_is_derived(w, i)) printf("  %-48s = %s\n", name, target);
    }
    weights_free(w);
    return 0;
fail:
    fprintf(stderr, "tern info: %s\n", tern_last_error());
    weights_free(w);
    return 1;
}

int cmd_info(int argc, char **argv) {
    const char *C = "info";
    cli_models_t models = {0};
    tern_model_options_t mo = tern_model_default_options();
    int tensors = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: tern info -m MODEL [-m MODEL ...] [--compute-type auto|float32|int8] [--tensors]\n\n"
                   "Prints the model's family, format, layers, dimensions, vocabulary sizes, the bytes\n"
                   "of its weights as run with the given compute type and its decoding defaults (its\n"
                   "generation_config.json over Tern's: what tern translate uses without flags); with\n"
                   "several -m (or\n"
                   "--ensemble-weights/--ensemble-mode), the ensemble's, then each member's.\n\n" CLI_MODELS_HELP
                   "  --compute-type TYPE         auto (as stored; default), float32, int8\n"
                   "  --tensors                   each model's stored tensors: name, dtype, shape and what\n"
                   "                              its family's description makes of it; tied names last\n"
                   "  -h, --help                  this help\n");
            return 0;
        } else if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) {
            if (!cli_models_add(C, &models, argv[++i])) return 2;
        } else if (!strcmp(argv[i], "--ensemble-weights") && i + 1 < argc) {
            if (!cli_models_weights(C, &models, argv[++i])) return 2;
        } else if (!strcmp(argv[i], "--ensemble-mode") && i + 1 < argc) {
            if (!cli_models_mode(C, &models, argv[++i])) return 2;
        } else if (!strcmp(argv[i], "--tensors")) {
            tensors = 1;
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
    tern_model_t *m = NULL;
    int rc = cli_models_load(C, &models, &mo, &m);
    if (rc) return rc;
    tern_model_info_t in = tern_model_info(m);
    print_info(&in, "");
    const char *src;
    tern_search_params_t sp = tern_model_search_params(m, &src);
    printf("decoding_defaults: %s\n", src ? src : "Tern's (no generation_config.json)");
    printf("beam_size: %d\nnum_hypotheses: %d\nlength_penalty: %g\nlength_norm: %s\ncoverage_penalty: %g\n"
           "max_decoding_length: %d\nmin_length: %d\n", sp.beam_size, sp.num_hypotheses, (double)sp.length_penalty,
           sp.length_norm == TERN_LENPEN_GNMT ? "gnmt" : "plain", (double)sp.coverage_penalty, sp.max_decoding_length,
           sp.min_length);
    if (!strcmp(in.family, "ensemble")) {
        printf("ensemble_mode: %s\nmembers: %d\n", in.ensemble.mode == TERN_ENSEMBLE_PROB_MEAN    ? "prob-mean"
                                              : in.ensemble.mode == TERN_ENSEMBLE_LOGIT_MEAN ? "logit-mean"
                                                                                            : "logprob-mean",
               in.num_members);
        for (int k = 0; k < in.num_members; k++) {
            tern_model_info_t mk = tern_model_info(tern_model_member(m, k));
            printf("member %d: %s (weight %g)\n", k + 1, models.dirs[k], (double)in.ensemble.weights[k]);
            print_info(&mk, "  ");
        }
    }
    tern_model_free(m);
    for (int k = 0; tensors && k < models.n; k++)
        if ((rc = print_tensors(models.dirs[k]))) return rc;
    return 0;
}
