/*
 * fuzz_safetensors.c — libFuzzer target: bytes -> safetensors reader (weights_load_safetensors)
 * -> on success, every tensor touched and the Transformer built (transformer_build) -> freed.
 * Seeds: tiny valid Tern models (float32 / int8 / float16, tied through an "alias:" metadata key).
 * Run: scripts/fuzz_ci.sh, or build-fuzz/fuzz_safetensors CORPUS_DIR -dict=fuzz/safetensors.dict
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
            mm_buf_t b;
            mm_serialize_safetensors(&m, &b);
            char name[128];
            snprintf(name, sizeof name, "seed-%s.safetensors", fuzz_seed_shapes[i].name);
            fuzz_write_seed(dir, name, &b);
            free(b.p);
            mm_free(&m);
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_set_input(data, size);
    weights_t *w = NULL;
    if (weights_load_safetensors(&w, fuzz_path) == TERN_OK) {
        fuzz_exercise(w, size ? data[size - 1] % 3 : 0);
        weights_free(w);
    } else if (w) {
        abort();
    }
    return 0;
}
