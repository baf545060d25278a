/*
 * fuzz_shortlist.c — libFuzzer target: bytes -> Marian lexical shortlist reader (shortlist_load:
 * the text "target source probability" format, or the binary one when the bytes start with its
 * magic) over a 12-word vocabulary -> on success, the candidates of a few sources computed
 * (vmap_candidates: every id in range, sorted) -> freed. The last input byte picks first/best/
 * threshold and the check flag. Seeds: a text shortlist and the binary file of the same lists.
 * Run: scripts/fuzz_ci.sh, or build-fuzz/fuzz_shortlist CORPUS_DIR -dict=fuzz/shortlist.dict
 */
#include <string.h>

#include "fuzz_common.h"
#include "search/shortlist.h"
#include "text/vocab.h"

static vocab_t *voc;
static const char *const words[] = {"</s>", "<unk>", "a", "b", "c", "d", "e", "f", "g", "h", "der", "Mann"};
enum { NW = (int)(sizeof words / sizeof words[0]) };

static const char seed_text[] = "der a 0.5\nMann b 0.25\nNULL c 0.1\nd d 1\ne g 0.001\nh zzz 0.9\n";

static void write_binary_seed(const char *dir) {
    /* source ids 2 and 3 propose {10} and {11, 5} */
    uint64_t w[6 + 5 + 2];
    uint64_t off[5] = {0, 0, 1, 3, 3};
    uint32_t ids[3] = {10, 11, 5};
    memset(w, 0, sizeof w);
    w[0] = SHORTLIST_BINARY_MAGIC, w[2] = 4, w[3] = 2, w[4] = 5, w[5] = 3;
    memcpy(w + 6, off, sizeof off);
    memcpy(w + 11, ids, sizeof ids);
    size_t n = 48 + sizeof off + sizeof ids;
    w[1] = shortlist_checksum(w + 2, (n - 16) / 8);
    mm_buf_t b = {(uint8_t *)w, n, n};
    fuzz_write_seed(dir, "seed-binary", &b);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    (void)fuzz_exercise; /* fuzz_common.h's model helpers: not used here */
    (void)fuzz_seed_model;
    tern_set_log_level(TERN_LOG_QUIET);
    fuzz_open_memfile();
    if (vocab_from_tokens(&voc, words, NW)) abort();
    const char *dir = getenv("TERN_FUZZ_SEEDS");
    if (dir) {
        mm_buf_t b = {(uint8_t *)seed_text, sizeof seed_text - 1, sizeof seed_text - 1};
        fuzz_write_seed(dir, "seed-text", &b);
        write_binary_seed(dir);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_set_input(data, size);
    int k = size ? data[size - 1] : 0;
    shortlist_spec_t sp;
    char text[128];
    if (k & 1) snprintf(text, sizeof text, "%s,%d", fuzz_path, (k >> 1) & 1); /* binary: the check flag */
    else snprintf(text, sizeof text, "%s,%d,%d,%s", fuzz_path, (k >> 1) & 15, (k >> 5) & 7, k & 0x80 ? "0.2" : "0");
    if (shortlist_spec_parse(&sp, text, "fuzz")) abort();
    vmap_t *v = NULL;
    if (shortlist_load(&v, &sp, voc, voc, k & 0x40 ? 1 : 0, 0, NULL) == TERN_OK) {
        if (!v) abort();
        static const int s0[] = {2, 3, 11, 0}, s1[] = {10, 1, 0};
        const int *src[2] = {s0, s1};
        int len[2] = {4, 3}, out[NW];
        uint8_t mark[NW] = {0};
        int n = vmap_candidates(v, src, len, 2, out, mark);
        if (n < 1 || n > NW) abort();
        for (int i = 0; i < n; i++)
            if (out[i] < 0 || out[i] >= NW || (i && out[i] <= out[i - 1])) abort();
        for (int i = 0; i < NW; i++)
            if (mark[i]) abort();
        vmap_free(v);
    } else if (v) {
        abort();
    }
    return 0;
}
