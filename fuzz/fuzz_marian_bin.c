/*
 * fuzz_marian_bin.c — libFuzzer target: bytes -> Marian's binary model.bin (u64 version 1, item
 * headers, names, int32 shapes, padding, data) in a directory with decoder.yml and a YAML
 * vocabulary -> marian_checkpoint_load -> exercised -> freed: fuzz_marian_npz.c with the binary
 * format (seeds: the same tiny post-norm Transformers, loaded at seed time).
 * Run: scripts/fuzz_ci.sh, or build-fuzz/fuzz_marian_bin CORPUS_DIR -dict=fuzz/marian_bin.dict
 */
#define MARIAN_FUZZ_BIN 1
#include "fuzz_marian_npz.c"
