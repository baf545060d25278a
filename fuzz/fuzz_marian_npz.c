/*
 * fuzz_marian_npz.c — libFuzzer target: bytes -> Marian's model.npz (a zip of .npy arrays and the
 * "special:model.yml" options) in a fixed temporary directory that also holds a decoder.yml and a
 * joint YAML vocabulary of 7 tokens -> marian_checkpoint_load (src/model/marian_format.c) -> on
 * success every tensor touched and the Transformer built (fuzz_exercise) -> freed. Nothing may
 * crash, overflow, leak or hit undefined behaviour on any input.
 * With MARIAN_FUZZ_BIN defined (fuzz_marian_bin.c) the bytes are Marian's binary model.bin instead.
 *
 * The CRC-32 of the archive's stored entries is set right before the load (fix_stored_crcs), so
 * that mutations inside an array reach the .npy reader and the model builder.
 *
 * Seeds (TERN_FUZZ_SEEDS=DIR): tiny valid post-norm Transformers written here (minizip's zip
 * writer; the binary format by hand), each loaded and built at seed time (abort when one does
 * not: a seed that does not load proves nothing). Run: scripts/fuzz_ci.sh, or
 * build-fuzz/fuzz_marian_npz CORPUS_DIR -dict=fuzz/marian_npz.dict
 */
/* fuzz_common.h's memfile and mini_model seeds, and one format's writer, go unused here */
#pragma clang diagnostic ignored "-Wunused-function"
#include <minizip/zip.h> /* minizip's writer (libzip's zip.h is another library) */
#include <string.h>
#include <sys/stat.h>

#include "fuzz_common.h"
#include "model/marian_format.h"
#include "tern.h"

#ifdef MARIAN_FUZZ_BIN
#define MODEL_FILE "model.bin"
#else
#define MODEL_FILE "model.npz"
#endif

static char fz_dir[128], fz_model[200];

/* ------------------------------------------------------------------ the seed model's arrays */

typedef struct {
    char name[64];
    int rank;
    int64_t shape[2];
    float *f;        /* float32 data, or NULL for the int8 options text */
    const char *txt; /* special:model.yml */
} sarr_t;

typedef struct {
    sarr_t a[64];
    int n;
} smodel_t;

static void s_add(smodel_t *m, const char *name, int64_t r, int64_t c, unsigned *seed, float base, int quant) {
    sarr_t *a = &m->a[m->n++];
    snprintf(a->name, sizeof a->name, "%s", name);
    a->rank = 2, a->shape[0] = r, a->shape[1] = c;
    a->f = calloc((size_t)(r * c), sizeof(float));
    for (int64_t i = 0; i < r * c; i++) {
        *seed = *seed * 1103515245u + 12345u;
        int v = (int)((*seed >> 16) % 9) - 4; /* a few distinct values: the deflated seed stays small */
        a->f[i] = base + (quant ? (float)v / 8.0f : (float)((*seed >> 8) & 0xffff) / 65536.0f - 0.5f) * 0.25f;
    }
}

static void s_attn(smodel_t *m, const char *p, int C, unsigned *seed, int q) {
    char n[64];
    for (int i = 0; i < 4; i++) {
        snprintf(n, sizeof n, "%s_W%c", p, "qkvo"[i]);
        s_add(m, n, C, C, seed, 0, q);
        snprintf(n, sizeof n, "%s_b%c", p, "qkvo"[i]);
        s_add(m, n, 1, C, seed, 0, q);
    }
    snprintf(n, sizeof n, "%s_Wo_ln_scale", p);
    s_add(m, n, 1, C, seed, 1, q);
    snprintf(n, sizeof n, "%s_Wo_ln_bias", p);
    s_add(m, n, 1, C, seed, 0, q);
}

static void s_ffn(smodel_t *m, const char *p, int C, int F, unsigned *seed, int q) {
    char n[64];
    snprintf(n, sizeof n, "%s_W1", p), s_add(m, n, C, F, seed, 0, q);
    snprintf(n, sizeof n, "%s_b1", p), s_add(m, n, 1, F, seed, 0, q);
    snprintf(n, sizeof n, "%s_W2", p), s_add(m, n, F, C, seed, 0, q);
    snprintf(n, sizeof n, "%s_b2", p), s_add(m, n, 1, C, seed, 0, q);
    snprintf(n, sizeof n, "%s_ffn_ln_scale", p), s_add(m, n, 1, C, seed, 1, q);
    snprintf(n, sizeof n, "%s_ffn_ln_bias", p), s_add(m, n, 1, C, seed, 0, q);
}

enum { S_V = 7 }; /* the vocabulary's tokens (vocab.yml below) */

/* A tiny post-norm Transformer (1 + 1 layers, width C, 2 heads, ffn F, relu) as Marian saves it:
 * tied: Wemb shared and the output tied to it (tied-embeddings-all); else encoder_Wemb,
 * decoder_Wemb and decoder_ff_logit_out_W. */
static void s_build(smodel_t *m, int C, int F, int tied, int q) {
    memset(m, 0, sizeof *m);
    static char yml[2][512];
    char *y = yml[tied ? 1 : 0];
    snprintf(y, 512,
             "type: transformer\ndim-emb: %d\nenc-depth: 1\ndec-depth: 1\ntransformer-heads: 2\n"
             "transformer-dim-ffn: %d\ntransformer-ffn-activation: relu\ntransformer-preprocess: \"\"\n"
             "transformer-postprocess: dan\ntransformer-postprocess-emb: d\n"
             "transformer-decoder-autoreg: self-attention\ntied-embeddings-all: %s\ntied-embeddings: %s\n"
             "dim-vocabs:\n  - %d\n  - %d\n",
             C, F, tied ? "true" : "false", tied ? "true" : "false", S_V, S_V);
    unsigned seed = 12345u + (unsigned)C;
    sarr_t *o = &m->a[m->n++];
    snprintf(o->name, sizeof o->name, "special:model.yml");
    o->rank = 1, o->shape[0] = (int64_t)strlen(y) + 1, o->txt = y;
    if (tied) s_add(m, "Wemb", S_V, C, &seed, 0, q);
    else {
        s_add(m, "encoder_Wemb", S_V, C, &seed, 0, q);
        s_add(m, "decoder_Wemb", S_V, C, &seed, 0, q);
        s_add(m, "decoder_ff_logit_out_W", C, S_V, &seed, 0, q);
    }
    s_add(m, "decoder_ff_logit_out_b", 1, S_V, &seed, 0, q);
    s_attn(m, "encoder_l1_self", C, &seed, q);
    s_ffn(m, "encoder_l1_ffn", C, F, &seed, q);
    s_attn(m, "decoder_l1_self", C, &seed, q);
    s_attn(m, "decoder_l1_context", C, &seed, q);
    s_ffn(m, "decoder_l1_ffn", C, F, &seed, q);
}

static void s_free(smodel_t *m) {
    for (int i = 0; i < m->n; i++) free(m->a[i].f);
}

static size_t s_nbytes(const sarr_t *a) { return a->f ? (size_t)(a->shape[0] * a->shape[1]) * 4 : (size_t)a->shape[0]; }

/* One array as a NumPy .npy file (version 1.0). */
static void s_npy(const sarr_t *a, mm_buf_t *b) {
    char h[160];
    int hl = a->rank == 2 ? snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': (%lld, %lld), }",
                                     a->f ? "<f4" : "|i1", (long long)a->shape[0], (long long)a->shape[1])
                          : snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': (%lld,), }",
                                     a->f ? "<f4" : "|i1", (long long)a->shape[0]);
    while ((10 + hl + 1) % 16) h[hl++] = ' '; /* numpy pads the header (to 64; 16 keeps the seed small) */
    h[hl++] = '\n';
    size_t nd = s_nbytes(a);
    b->n = 10 + (size_t)hl + nd;
    b->p = malloc(b->n);
    memcpy(b->p, "\x93NUMPY\x01\x00", 8);
    b->p[8] = (uint8_t)(hl & 0xff), b->p[9] = (uint8_t)(hl >> 8);
    memcpy(b->p + 10, h, (size_t)hl);
    memcpy(b->p + 10 + hl, a->f ? (const void *)a->f : (const void *)a->txt, nd);
}

/* The model as model.npz at path (level 0: stored, else deflated). */
static void s_write_npz(const smodel_t *m, const char *path, int level) {
    zipFile zf = zipOpen64(path, APPEND_STATUS_CREATE);
    if (!zf) {
        fprintf(stderr, "fuzz_marian: cannot create %s\n", path);
        abort();
    }
    for (int i = 0; i < m->n; i++) {
        mm_buf_t b;
        s_npy(&m->a[i], &b);
        char name[80];
        snprintf(name, sizeof name, "%s.npy", m->a[i].name);
        zip_fileinfo zi;
        memset(&zi, 0, sizeof zi);
        if (zipOpenNewFileInZip64(zf, name, &zi, NULL, 0, NULL, 0, NULL, level ? Z_DEFLATED : 0, level, 0) != ZIP_OK ||
            zipWriteInFileInZip(zf, b.p, (unsigned)b.n) != ZIP_OK || zipCloseFileInZip(zf) != ZIP_OK) {
            fprintf(stderr, "fuzz_marian: cannot write %s in %s\n", name, path);
            abort();
        }
        free(b.p);
    }
    if (zipClose(zf, NULL) != ZIP_OK) abort();
}

static void put_u64(mm_buf_t *b, size_t *k, uint64_t v) { memcpy(b->p + *k, &v, 8), *k += 8; }

/* The model in Marian's binary format (see bin_load in marian_format.c): the options text as an
 * int8 item, as Marian writes it. */
static void s_bin(const smodel_t *m, mm_buf_t *b) {
    size_t n = 16 + (size_t)m->n * 32 + 8, pad = 0;
    for (int i = 0; i < m->n; i++) n += strlen(m->a[i].name) + 1 + (size_t)m->a[i].rank * 4 + s_nbytes(&m->a[i]);
    b->p = calloc(1, n + 1);
    b->n = n;
    size_t k = 0;
    put_u64(b, &k, 1);
    put_u64(b, &k, (uint64_t)m->n);
    for (int i = 0; i < m->n; i++) {
        const sarr_t *a = &m->a[i];
        put_u64(b, &k, strlen(a->name) + 1);
        put_u64(b, &k, a->f ? 0x0404 : 0x0101);
        put_u64(b, &k, (uint64_t)a->rank);
        put_u64(b, &k, s_nbytes(a));
    }
    for (int i = 0; i < m->n; i++) memcpy(b->p + k, m->a[i].name, strlen(m->a[i].name) + 1), k += strlen(m->a[i].name) + 1;
    for (int i = 0; i < m->n; i++)
        for (int r = 0; r < m->a[i].rank; r++) {
            int32_t v = (int32_t)m->a[i].shape[r];
            memcpy(b->p + k, &v, 4), k += 4;
        }
    put_u64(b, &k, pad);
    for (int i = 0; i < m->n; i++) {
        const sarr_t *a = &m->a[i];
        memcpy(b->p + k, a->f ? (const void *)a->f : (const void *)a->txt, s_nbytes(a));
        k += s_nbytes(a);
    }
    if (k != n) abort();
}

/* ------------------------------------------------------------------ the directory */

static void write_text(const char *name, const char *text) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", fz_dir, name);
    if (mm_write_file(p, text, strlen(text))) {
        fprintf(stderr, "fuzz_marian: cannot write %s\n", p);
        abort();
    }
}

static void cleanup(void) {
    const char *names[] = {MODEL_FILE, "decoder.yml", "vocab.yml"};
    char p[256];
    for (int i = 0; i < 3; i++) snprintf(p, sizeof p, "%s/%s", fz_dir, names[i]), unlink(p);
    rmdir(fz_dir);
}

/* Loads the directory; on success exercises and frees the model. Returns the load's status. */
static tern_status_t load_and_exercise(int compute, int must_build) {
    hf_checkpoint_t ck;
    tern_status_t st = marian_checkpoint_load(&ck, fz_dir);
    if (st == TERN_OK) {
        if (!ck.weights || !ck.src_vocab || !ck.tgt_vocab) abort(); /* the loader's promise */
        fuzz_sink += (float)vocab_size(ck.tgt_vocab) + (float)vocab_lookup(ck.src_vocab, "</s>");
        if (must_build) {
            transformer_t tf;
            if (transformer_build(&tf, ck.weights, TERN_COMPUTE_FLOAT32, -1.0f) != TERN_OK) {
                fprintf(stderr, "fuzz_marian: the seed model does not build: %s\n", tern_last_error());
                abort();
            }
            transformer_free(&tf);
        }
        fuzz_exercise(ck.weights, compute);
        hf_checkpoint_free(&ck);
    } else if (ck.weights || ck.src_vocab || ck.tgt_vocab) {
        abort(); /* a failed load leaves nothing behind */
    }
    return st;
}

static void seed_out(const char *dir, const char *name, const mm_buf_t *b) {
    fuzz_write_seed(dir, name, b);
    if (mm_write_file(fz_model, b->p, b->n)) abort();
    if (load_and_exercise(1, 1) != TERN_OK) {
        fprintf(stderr, "fuzz_marian: seed %s does not load: %s\n", name, tern_last_error());
        abort();
    }
}

static int read_file_buf(const char *path, mm_buf_t *b) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    b->n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    b->p = malloc(b->n + 1);
    size_t got = fread(b->p, 1, b->n, f);
    fclose(f);
    return got == b->n ? 0 : -1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    tern_set_log_level(TERN_LOG_QUIET);
    kernels_set_num_threads(1);
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(fz_dir, sizeof fz_dir, "%s/tern-fuzz-marian-XXXXXX", base);
    if (!mkdtemp(fz_dir)) {
        perror("mkdtemp");
        abort();
    }
    atexit(cleanup);
    snprintf(fz_model, sizeof fz_model, "%s/%s", fz_dir, MODEL_FILE);
    write_text("decoder.yml", "models:\n  - " MODEL_FILE "\nvocabs:\n  - vocab.yml\n  - vocab.yml\nbeam-size: 4\n");
    write_text("vocab.yml", "</s>: 0\n<unk>: 1\n\"a\": 2\nman: 3\n\"\\u00e9t\\u00e9\": 4\n\"'\": 5\n\"\\u2581x\": 6\n");
    const char *dir = getenv("TERN_FUZZ_SEEDS");
    if (dir) {
        static const struct {
            const char *name;
            int C, F, tied, quant, level;
        } seeds[] = {{"tied-stored", 4, 8, 1, 1, 0}, {"tied-deflated", 8, 16, 1, 1, 9},
                     {"untied-deflated", 4, 8, 0, 0, 6}};
        for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
            smodel_t m;
            s_build(&m, seeds[i].C, seeds[i].F, seeds[i].tied, seeds[i].quant);
            char name[96];
            mm_buf_t b;
#ifdef MARIAN_FUZZ_BIN
            if (seeds[i].level) { /* the binary format is not compressed: one seed per model */
                s_free(&m);
                continue;
            }
            s_bin(&m, &b);
            snprintf(name, sizeof name, "seed-%s.bin", seeds[i].tied ? "tied" : "untied");
#else
            s_write_npz(&m, fz_model, seeds[i].level);
            if (read_file_buf(fz_model, &b)) abort();
            snprintf(name, sizeof name, "seed-%s.npz", seeds[i].name);
#endif
            seed_out(dir, name, &b);
            free(b.p);
            s_free(&m);
        }
#ifdef MARIAN_FUZZ_BIN
        smodel_t m; /* the untied model too */
        mm_buf_t b;
        s_build(&m, 4, 8, 0, 1);
        s_bin(&m, &b);
        seed_out(dir, "seed-untied.bin", &b);
        free(b.p);
        s_free(&m);
#endif
    }
    return 0;
}

#ifndef MARIAN_FUZZ_BIN
static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* The CRC-32 of every stored (uncompressed) entry set to its bytes' (in the central directory and
 * the local header): a mutation of an array's .npy header or data would otherwise only meet
 * minizip's CRC check, never the .npy reader and the model builder behind it. */
static void fix_stored_crcs(uint8_t *d, size_t n) {
    for (size_t c = 0; c + 46 <= n; c++) {
        if (memcmp(d + c, "PK\x01\x02", 4) || rd16(d + c + 10) != 0) continue;
        size_t lh = rd32(d + c + 42), len = rd32(d + c + 24);
        if (lh > n || n - lh < 30 || memcmp(d + lh, "PK\x03\x04", 4)) continue;
        size_t off = lh + 30 + rd16(d + lh + 26) + rd16(d + lh + 28);
        if (off > n || n - off < len) continue;
        uint32_t crc = (uint32_t)crc32(0L, d + off, (uInt)len);
        for (int k = 0; k < 4; k++) d[c + 16 + k] = d[lh + 14 + k] = (uint8_t)(crc >> (8 * k));
    }
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
#ifndef MARIAN_FUZZ_BIN
    uint8_t *fixed = malloc(size + 1);
    if (size) memcpy(fixed, data, size);
    fix_stored_crcs(fixed, size);
    if (mm_write_file(fz_model, fixed, size)) abort();
    free(fixed);
#else
    if (mm_write_file(fz_model, data, size)) abort();
#endif
    load_and_exercise(size ? data[size - 1] % 3 : 0, 0);
    return 0;
}
