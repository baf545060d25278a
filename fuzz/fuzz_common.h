/*
 * fuzz_common.h — what the model-loader fuzz targets share: the input bytes go to an in-memory
 * file (memfd, opened by path as /proc/self/fd/N, so the loaders run exactly as on disk, mmap
 * included, without touching the disk), a successful load is exercised (every tensor's first and
 * last element, aliases, scalar helpers, then the Transformer built from the variables with the
 * compute type chosen by the last input byte), and everything is freed: ASan/UBSan/LSan report
 * any crash, overflow, undefined behaviour or leak.
 *
 * TERN_FUZZ_SEEDS=DIR makes LLVMFuzzerInitialize write the seed corpus (tiny valid models from
 * tests/c/mini_model.h) into DIR; scripts/fuzz_ci.sh uses it.
 */
#ifndef TERN_FUZZ_COMMON_H
#define TERN_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mini_model.h"
#include "model/transformer.h"
#include "model/weights.h"

static char fuzz_path[64];
static int fuzz_fd = -1;

static void fuzz_open_memfile(void) {
    fuzz_fd = memfd_create("tern-fuzz", 0);
    if (fuzz_fd < 0) {
        perror("memfd_create");
        abort();
    }
    snprintf(fuzz_path, sizeof fuzz_path, "/proc/self/fd/%d", fuzz_fd);
}

static void fuzz_set_input(const uint8_t *data, size_t size) {
    if (ftruncate(fuzz_fd, 0) != 0 || (size && pwrite(fuzz_fd, data, size, 0) != (ssize_t)size)) {
        perror("memfd write");
        abort();
    }
}

static volatile float fuzz_sink;

/* Touches what a successful load promises: every tensor's bytes, names and aliases resolve. */
static void fuzz_exercise(weights_t *w, int compute) {
    for (int i = 0; i < weights_count(w); i++) {
        const tensor_t *t = weights_at(w, i);
        if (t->numel > 0) fuzz_sink += tensor_get_f32(t, 0) + tensor_get_f32(t, t->numel - 1);
        if ((size_t)t->numel * dtype_size(t->dtype) != t->nbytes) abort(); /* the loader's promise */
        if (weights_get(w, t->name) != t) abort();
        int64_t iv;
        weights_get_int(w, t->name, &iv);
        if (t->numel == 1) fuzz_sink += tensor_get_f32(t, 0); /* a scalar read as a float */
    }
    for (int i = 0; i < weights_alias_count(w); i++) {
        const char *target = NULL, *a = weights_alias_at(w, i, &target);
        if (!a || !target || weights_get(w, a) != weights_get(w, target)) abort();
    }
    transformer_t tf;
    tern_compute_type_t ct = compute == 0 ? TERN_COMPUTE_AUTO : compute == 1 ? TERN_COMPUTE_FLOAT32 : TERN_COMPUTE_INT8;
    if (transformer_build(&tf, w, ct, -1.0f) == TERN_OK) fuzz_sink += (float)tf.d;
    transformer_free(&tf);
}

static void fuzz_write_seed(const char *dir, const char *name, const mm_buf_t *b) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (mm_write_file(p, b->p, b->n)) {
        fprintf(stderr, "cannot write %s\n", p);
        exit(1);
    }
}

/* The seed models: tiny valid Transformers in several forms. */
static const struct {
    const char *name;
    int int8, float16, tie, pre_norm, learned_pos, src_vocab, tgt_vocab;
} fuzz_seed_shapes[] = {
    {"tiny", 0, 0, 1, 1, 0, 7, 7},       {"int8", 1, 0, 1, 1, 0, 7, 7},
    {"float16", 0, 1, 1, 1, 0, 7, 7},    {"untied-postnorm-learnedpos", 0, 0, 0, 0, 1, 5, 9},
};

static void fuzz_seed_model(mm_model_t *m, int i) {
    mm_shape_t s = MM_TINY;
    s.int8 = fuzz_seed_shapes[i].int8;
    s.float16 = fuzz_seed_shapes[i].float16;
    s.tie_output = fuzz_seed_shapes[i].tie;
    s.pre_norm = fuzz_seed_shapes[i].pre_norm;
    s.learned_pos = fuzz_seed_shapes[i].learned_pos;
    s.src_vocab = fuzz_seed_shapes[i].src_vocab;
    s.tgt_vocab = fuzz_seed_shapes[i].tgt_vocab;
    mm_build(m, &s);
}

#define FUZZ_N_SEED_SHAPES ((int)(sizeof fuzz_seed_shapes / sizeof fuzz_seed_shapes[0]))

#endif
