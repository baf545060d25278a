/*
 * fuzz_model_bin.c — libFuzzer target: bytes -> CTranslate2 model.bin reader (weights_load_ct2)
 * -> on success, every tensor touched and the Transformer built (transformer_build) -> freed.
 * Seeds: tiny valid models of binary versions 1..6, float32 / int8 / float16 (fuzz_common.h).
 * Run: scripts/fuzz_ci.sh, or build-fuzz/fuzz_model_bin CORPUS_DIR -dict=fuzz/model_bin.dict
 */
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    tern_set_log_level(TERN_LOG_QUIET);
    kernels_set_num_threads(1);
    fuzz_open_memfile();
    const char *dir = getenv("TERN_FUZZ_SEEDS");
    if (dir) {
        for (int i = 0; i < FUZZ_N_SEED_SHAPES; i++) {
            mm_model_t m;
            fuzz_seed_model(&m, i);
            for (int version = 6; version >= 1; version--) {
                if (version < 6 && i > 0 && version != 5) continue; /* older versions: the float32 model */
                if (version < 4 && (fuzz_seed_shapes[i].float16)) continue;
                mm_buf_t b;
                mm_serialize_ct2(&m, version, &b, NULL);
                char name[128];
                snprintf(name, sizeof name, "seed-%s-v%d.bin", fuzz_seed_shapes[i].name, version);
                fuzz_write_seed(dir, name, &b);
                free(b.p);
            }
            mm_free(&m);
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_set_input(data, size);
    weights_t *w = NULL;
    if (weights_load_ct2(&w, fuzz_path) == TERN_OK) {
        fuzz_exercise(w, size ? data[size - 1] % 3 : 0);
        weights_free(w);
    } else if (w) {
        abort(); /* a failed load returns no table */
    }
    return 0;
}
