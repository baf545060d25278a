/*
 * test_model_files.c — bad model files get the right status, a message naming the file and the
 * tensor at fault, and no crash or leak (this binary runs under ASan/UBSan/LSan in `make SAN=1
 * test-c`).
 *
 * Models are tiny Transformers built in memory (tests/c/mini_model.h) and written as CTranslate2
 * model.bin (binary versions 1..6, float32 / int8 / float16) or as Tern's model.safetensors,
 * then loaded both through the weights readers (weights_load_ct2 / weights_load_safetensors) and
 * through the public tern_model_load():
 *   - valid files of every version load, with every tensor's bytes, aliases and the model's shape
 *     as written;
 *   - truncation at every byte of model.bin (versions 6, 5, 3, 1, int8) and model.safetensors:
 *     TERN_ERR_FORMAT naming the file and the header, the tensor being read ("tensor 'NAME'", or
 *     "tensor #K" while its name itself is cut) or the aliases;
 *   - corrupt fields: version, spec name, name lengths and NULs, rank, dims (also dims whose
 *     product overflows), dtype ids, byte counts, variable count, duplicate names, aliases to
 *     missing tensors or onto used names;
 *   - mismatches found when the Transformer is built: missing tensors, wrong shapes and dtypes,
 *     int8 weights without (or with wrong) scales, head counts, activation ids, embedding and
 *     projection sizes, vocabulary sizes against embedding rows, unsupported variants;
 *   - config.json and vocabularies missing, garbage or inconsistent;
 *   - safetensors headers: bad JSON, lengths, dtypes, shapes, data offsets, overlaps, metadata.
 *
 * With arguments, `test_model_files --ct2-dir DIR...` runs the truncation and corruption sweep on
 * real CTranslate2 model directories (tests/test_model_files.py passes ones written by
 * ctranslate2 itself).
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "check.h"
#include "mini_model.h"
#include "kernels/gemm_packed.h"
#include "kernels/gemm_s8.h"
#include "kernels/gemm_s8v.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "model/transformer.h"
#include "model/weights.h"

static char tmp_root[256];

/* ------------------------------------------------------------ helpers */

static void make_dir(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", tmp_root, name);
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "mkdir %s: %s\n", out, strerror(errno));
        exit(2);
    }
}

static void remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (!d) {
        unlink(path);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(path);
}

static void file_in(char *out, size_t n, const char *dir, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static void write_or_die(const char *path, const void *data, size_t n) {
    if (mm_write_file(path, data, n)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

static int has(const char *msg, const char *sub) { return strstr(msg, sub) != NULL; }

/* Checks status and that the last error holds every substring (NULL-terminated list). */
static void expect_msg(const char *what, tern_status_t got, tern_status_t want, ...) {
    const char *msg = tern_last_error();
    int ok = got == want;
    va_list ap;
    va_start(ap, want);
    for (const char *sub; (sub = va_arg(ap, const char *));) ok = ok && has(msg, sub);
    va_end(ap);
    check_count++;
    if (!ok) {
        check_failures++;
        fprintf(stderr, "FAIL %s: status %s (want %s), message: %s\n  wanted substrings:", what,
                tern_status_string(got), tern_status_string(want), msg);
        va_start(ap, want);
        for (const char *sub; (sub = va_arg(ap, const char *));) fprintf(stderr, " [%s]", sub);
        va_end(ap);
        fputc('\n', stderr);
    }
}

/* tern_model_load(dir) must fail with want and a message holding the substrings; no model returned. */
#define EXPECT_LOAD_FAIL(what, dir, want, ...) do { \
    tern_model_t *m_ = (tern_model_t *)(uintptr_t)1; \
    tern_status_t st_ = tern_model_load(&m_, dir, NULL); \
    CHECK_MSG(m_ == NULL, "%s: a model was returned on failure", what); \
    if (st_ == TERN_OK) tern_model_free(m_); \
    expect_msg(what, st_, want, __VA_ARGS__, (const char *)NULL); } while (0)

static tern_model_t *load_ok(const char *what, const char *dir) {
    tern_model_t *m = NULL;
    tern_status_t st = tern_model_load(&m, dir, NULL);
    CHECK_MSG(st == TERN_OK && m, "%s: %s: %s", what, tern_status_string(st), tern_last_error());
    return st == TERN_OK ? m : NULL;
}

/* Writes a CTranslate2 model directory (model.bin of `version`, config, vocabularies). */
static void write_ct2_dir(const char *dir, const mm_model_t *m, const mm_shape_t *s, int version, mm_buf_t *keep,
                          mm_layout_t *lay) {
    mm_buf_t b;
    char p[1024];
    mm_serialize_ct2(m, version, &b, lay);
    file_in(p, sizeof p, dir, "model.bin");
    write_or_die(p, b.p, b.n);
    if (mm_write_side_files(dir, s->src_vocab, s->tgt_vocab)) exit(2);
    if (keep) *keep = b;
    else free(b.p);
}

static void write_tern_dir(const char *dir, const mm_model_t *m, const mm_shape_t *s, mm_buf_t *keep) {
    mm_buf_t b;
    char p[1024];
    mm_serialize_safetensors(m, &b);
    file_in(p, sizeof p, dir, "model.safetensors");
    write_or_die(p, b.p, b.n);
    if (mm_write_side_files(dir, s->src_vocab, s->tgt_vocab)) exit(2);
    if (keep) *keep = b;
    else free(b.p);
}

static void put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static int var_index(const mm_model_t *m, const char *name) {
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->v[i].name, name)) return i;
    fprintf(stderr, "no variable %s\n", name);
    exit(2);
}

/* ------------------------------------------------------------ valid files */

static void check_weights_match(const char *what, const weights_t *w, const mm_model_t *m, int with_aliases) {
    int bad = 0;
    for (int i = 0; i < m->n; i++) {
        const mm_var_t *v = &m->v[i];
        const tensor_t *t = weights_get(w, v->name);
        if (!t || t->dtype != v->dt || t->rank != v->rank || t->nbytes != v->nbytes ||
            (v->nbytes && memcmp(t->data, v->data, v->nbytes))) {
            if (bad < 3) fprintf(stderr, "%s: tensor %s differs from what was written\n", what, v->name);
            bad++;
            continue;
        }
        for (int r = 0; r < v->rank; r++) bad += t->shape[r] != v->shape[r];
        bad += ((uintptr_t)t->data % (dtype_size(t->dtype))) != 0; /* aligned to its dtype */
    }
    for (int a = 0; a < m->n_alias; a++) {
        const tensor_t *x = weights_get(w, m->alias[a][0]), *t = weights_get(w, m->alias[a][1]);
        bad += !x || !t || (with_aliases ? x != t : (x->nbytes != t->nbytes || memcmp(x->data, t->data, t->nbytes)));
    }
    CHECK_MSG(bad == 0, "%s: %d tensors differ", what, bad);
}

static void test_valid(void) {
    char dir[512], p[1024];
    mm_model_t m;
    mm_shape_t s = MM_TINY;
    mm_build(&m, &s);
    for (int version = 1; version <= 6; version++) {
        char name[32], what[64];
        snprintf(name, sizeof name, "valid-v%d", version);
        snprintf(what, sizeof what, "model.bin v%d", version);
        make_dir(dir, sizeof dir, name);
        write_ct2_dir(dir, &m, &s, version, NULL, NULL);
        file_in(p, sizeof p, dir, "model.bin");
        weights_t *w = NULL;
        tern_status_t st = weights_load_ct2(&w, p);
        CHECK_MSG(st == TERN_OK, "%s: %s", what, tern_last_error());
        if (w) {
            CHECK_EQ_INT(weights_binary_version(w), version);
            CHECK(!strcmp(weights_spec_name(w), version >= 2 ? "TransformerSpec" : ""));
            CHECK_EQ_INT(weights_spec_revision(w), version >= 2 ? 7 : 0);
            CHECK_EQ_INT(weights_count(w), m.n + (version < 3 ? m.n_alias : 0));
            CHECK_EQ_INT(weights_alias_count(w), version >= 3 ? m.n_alias : 0);
            check_weights_match(what, w, &m, version >= 3);
            weights_free(w);
        }
        tern_model_t *tm = load_ok(what, dir);
        if (tm) {
            tern_model_info_t in = tern_model_info(tm);
            CHECK(tern_model_hparam(&in, "encoder_layers", -1) == 1 && tern_model_hparam(&in, "decoder_layers", -1) == 1 && tern_model_hparam(&in, "d_model", -1) == 4 && tern_model_hparam(&in, "num_heads", -1) == 2 &&
                  tern_model_hparam(&in, "ffn_dim", -1) == 6 && in.source_vocab_size == 7 && in.target_vocab_size == 7 && tern_model_hparam(&in, "norm", -1) == 1 &&
                  in.int8 == 0 && !strcmp(in.format, "ctranslate2"));
            const transformer_t *net = tm->net;
            if (version == 6) {
                /* float32, the projection tied to the target embeddings (an alias): packed, the
                 * target embedding reading its rows from that copy (pkw), the plain rows given
                 * back; every row the same floats as the plain table of the file loaded unpacked */
                CHECK(net->pk_proj && net->proj.w == NULL && net->dec_emb.w == NULL && net->dec_emb.pkw != NULL &&
                      net->dec_emb.pk_off_k && net->dec_emb.pk_off_n);
                setenv("TERN_GEMM_PACKED", "0", 1);
                tern_model_t *plain = load_ok("model.bin v6, unpacked", dir);
                unsetenv("TERN_GEMM_PACKED");
                if (plain && net->dec_emb.pkw) {
                    const transformer_t *pn = plain->net;
                    CHECK(pn->dec_emb.w != NULL && pn->dec_emb.pkw == NULL && pn->dec_emb.V == net->dec_emb.V);
                    int bad = 0;
                    for (int n = 0; pn->dec_emb.w && n < net->dec_emb.V; n++)
                        for (int k = 0; k < net->dec_emb.d; k++)
                            bad += net->dec_emb.pkw[net->dec_emb.pk_off_k[k] + net->dec_emb.pk_off_n[n]] !=
                                   pn->dec_emb.w[(size_t)n * net->dec_emb.d + k];
                    CHECK_EQ_INT(bad, 0);
                }
                tern_model_free(plain);
            }
            tern_model_free(tm);
        }
    }
    mm_free(&m);

    /* int8 (with per-row scales; derived scale alias for the tied projection) and float16 */
    for (int kind = 0; kind < 2; kind++) {
        mm_shape_t q = MM_TINY;
        if (kind == 0) q.int8 = 1;
        else q.float16 = 1;
        mm_build(&m, &q);
        make_dir(dir, sizeof dir, kind == 0 ? "valid-int8" : "valid-float16");
        write_ct2_dir(dir, &m, &q, 6, NULL, NULL);
        file_in(p, sizeof p, dir, "model.bin");
        weights_t *w = NULL;
        CHECK(weights_load_ct2(&w, p) == TERN_OK);
        if (w) {
            check_weights_match(kind == 0 ? "int8" : "float16", w, &m, 1);
            if (kind == 0) {
                const tensor_t *a = weights_get(w, "decoder/projection/weight_scale");
                CHECK(a && a == weights_get(w, "decoder/embeddings/weight_scale"));
                int derived = 0;
                for (int i = 0; i < weights_alias_count(w); i++) derived += weights_alias_is_derived(w, i);
                CHECK_EQ_INT(derived, 1);
            }
            weights_free(w);
        }
        tern_model_t *tm = load_ok(kind == 0 ? "int8 model" : "float16 model", dir);
        if (tm) {
            CHECK_EQ_INT(tern_model_info(tm).int8, kind == 0);
            const transformer_t *net = tm->net;
            if (kind == 0 && linear_int8_packs_own()) {
                /* the tied int8 projection packed (Tern's layout), the target embedding reading
                 * its rows from that copy, the plain rows given back */
                CHECK(net->pk_proj && net->proj.q == NULL && net->dec_emb.pk == net->pk_proj && net->dec_emb.q == NULL);
                int8_t row[4];
                CHECK(linear_packed_row_s8(net->dec_emb.pk, 6, 0, 4, row) == 0);
            }
            tern_model_free(tm);
        }
        mm_free(&m);
    }

    /* separate vocabularies of different sizes, untied projection, post-norm, learned positions */
    mm_shape_t u = MM_TINY;
    u.src_vocab = 9;
    u.tgt_vocab = 11;
    u.tie_output = 0;
    u.pre_norm = 0;
    u.learned_pos = 1;
    u.enc_layers = 2;
    u.dec_layers = 3;
    mm_build(&m, &u);
    make_dir(dir, sizeof dir, "valid-separate");
    write_ct2_dir(dir, &m, &u, 6, NULL, NULL);
    tern_model_t *tm = load_ok("separate vocabularies", dir);
    if (tm) {
        tern_model_info_t in = tern_model_info(tm);
        CHECK(in.source_vocab_size == 9 && in.target_vocab_size == 11 && tern_model_hparam(&in, "norm", -1) == 0 && tern_model_hparam(&in, "encoder_layers", -1) == 2 &&
              tern_model_hparam(&in, "decoder_layers", -1) == 3);
        tern_model_free(tm);
    }
    /* the same as Tern's format, by hand (unaligned float32 data: copied) */
    make_dir(dir, sizeof dir, "valid-tern");
    write_tern_dir(dir, &m, &u, NULL);
    file_in(p, sizeof p, dir, "model.safetensors");
    weights_t *w = NULL;
    CHECK_MSG(weights_load_safetensors(&w, p) == TERN_OK, "%s", tern_last_error());
    if (w) {
        check_weights_match("safetensors", w, &m, 1);
        weights_free(w);
    }
    tm = load_ok("Tern format", dir);
    if (tm) {
        CHECK(!strcmp(tern_model_info(tm).format, "tern") && tern_model_info(tm).target_vocab_size == 11);
        tern_model_free(tm);
    }
    mm_free(&m);

    /* safetensors_write (what `tern convert` uses) of a loaded model.bin reads back the same */
    mm_build(&m, &s);
    make_dir(dir, sizeof dir, "valid-roundtrip");
    write_ct2_dir(dir, &m, &s, 6, NULL, NULL);
    file_in(p, sizeof p, dir, "model.bin");
    w = NULL;
    CHECK(weights_load_ct2(&w, p) == TERN_OK);
    if (w) {
        int n = weights_count(w);
        tensor_t *ts = calloc((size_t)n, sizeof *ts);
        for (int i = 0; i < n; i++) ts[i] = *weights_at(w, i);
        const char *ak = "alias:decoder/projection/weight", *av = "decoder/embeddings/weight";
        char q[1024];
        file_in(q, sizeof q, dir, "model.safetensors");
        CHECK_MSG(safetensors_write(q, ts, n, &ak, &av, 1) == TERN_OK, "%s", tern_last_error());
        weights_t *w2 = NULL;
        CHECK(weights_load_safetensors(&w2, q) == TERN_OK);
        if (w2) {
            check_weights_match("safetensors_write", w2, &m, 1);
            weights_free(w2);
        }
        free(ts);
        weights_free(w);
        tm = load_ok("roundtrip (model.safetensors preferred)", dir);
        if (tm) {
            CHECK(!strcmp(tern_model_info(tm).format, "tern"));
            tern_model_free(tm);
        }
    }
    mm_free(&m);
}

/* ------------------------------------------------------------ deferred copies
 * Loaded with WEIGHTS_DEFER_COPIES, a tensor of a page or more that is not aligned in model.bin is
 * not copied: weights_bytes() gives its bytes as written, weights_need()/weights_settle() copy it
 * (aligned, the same bytes); tern_model_load() quantizes float32 weights to int8 straight from the
 * file (through a small aligned buffer): the int8 rows and scales equal the reference quantizer
 * (quantize_rows_s8_ref, kernels_ref.c) run on the floats the test wrote. */
static void test_deferred(void) {
    char dir[512], p[1024];
    mm_model_t m;
    mm_shape_t s = {1, 1, 64, 2, 128, 40, 50, 1, 0, 1, 0, 0, 7};
    mm_build(&m, &s);
    make_dir(dir, sizeof dir, "deferred");
    write_ct2_dir(dir, &m, &s, 6, NULL, NULL);
    file_in(p, sizeof p, dir, "model.bin");
    weights_t *w = NULL;
    tern_status_t st = weights_load_ct2_flags(&w, p, WEIGHTS_DEFER_COPIES);
    CHECK_MSG(st == TERN_OK, "deferred load: %s", tern_last_error());
    if (!w) return;
    int pending = 0, bad = 0;
    const tensor_t *first = NULL;
    for (int i = 0; i < m.n; i++) {
        const mm_var_t *v = &m.v[i];
        const tensor_t *t = weights_get(w, v->name);
        const void *b = t ? weights_bytes(w, t) : NULL;
        if (!t || !b || t->nbytes != v->nbytes || (v->nbytes && memcmp(b, v->data, v->nbytes))) {
            bad++;
            continue;
        }
        if (!t->data) {
            pending++;
            bad += t->nbytes < WEIGHTS_DEFER_MIN_BYTES; /* only large ones wait */
            if (!first) first = t;
        }
    }
    CHECK_MSG(bad == 0, "deferred load: %d tensors' bytes differ from what was written", bad);
    CHECK_MSG(pending >= 3, "deferred load: %d tensors pending (the test needs unaligned large ones)", pending);
    if (first) {
        CHECK(weights_need(w, first) == TERN_OK);
        CHECK(first->data && (uintptr_t)first->data % dtype_size(first->dtype) == 0);
    }
    CHECK(weights_settle(w) == TERN_OK);
    check_weights_match("deferred load, settled", w, &m, 1);
    weights_free(w);

    tern_model_options_t o = tern_model_default_options();
    o.compute_type = TERN_COMPUTE_INT8;
    tern_model_t *tm = NULL;
    st = tern_model_load(&tm, dir, &o);
    CHECK_MSG(st == TERN_OK, "int8 load: %s", tern_last_error());
    if (tm) {
        const transformer_t *net = tm->net;
        struct {
            const char *name;
            const linear_t *lin;
            const void *pk; /* packed at load (linear_pack_s8: oneDNN with VNNI, else gemm_s8p): q given back */
        } mats[] = {{"encoder/layer_0/ffn/linear_0/weight", &net->enc[0].ffn1, net->enc[0].pk_ffn1},
                    {"encoder/layer_0/ffn/linear_1/weight", &net->enc[0].ffn2, net->enc[0].pk_ffn2},
                    {"decoder/layer_0/self_attention/linear_0/weight", &net->dec[0].qkv, net->dec[0].pk_qkv},
                    {"decoder/projection/weight", &net->proj, net->pk_proj}};
        for (size_t k = 0; k < sizeof mats / sizeof mats[0]; k++) {
            const mm_var_t *v = &m.v[var_index(&m, mats[k].name)];
            int N = (int)v->shape[0], K = (int)v->shape[1];
            int8_t *q = malloc((size_t)N * K);
            float *sc = malloc((size_t)N * sizeof(float)), *f = malloc((size_t)N * K * sizeof(float));
            memcpy(f, v->data, (size_t)N * K * sizeof(float));
            quantize_rows_s8_ref(q, sc, f, N, K);
            const linear_t *L = mats[k].lin;
            int same_q = 0;
            if (L->q) {
                same_q = !memcmp(L->q, q, (size_t)N * K);
            } else if (mats[k].pk && !strncmp(linear_int8_packed_kernel_name(), "Tern", 4)) {
                /* packed for Tern's kernels (VNNI gemm_s8v, AVX2 gemm_s8p): the whole buffer as the
                 * reference rows packed */
                int vnni = strstr(linear_int8_packed_kernel_name(), "gemm_s8v") != NULL;
                size_t bytes = vnni ? gemm_s8v_size(N, K) : gemm_s8p_size(N, K);
                void *ref = aligned_alloc64(bytes);
                same_q = ref && (vnni ? gemm_s8v_pack(ref, q, N, K) : gemm_s8p_pack(ref, q, N, K)) == 0 &&
                         !memcmp(ref, mats[k].pk, bytes);
                aligned_free(ref);
            } else if (mats[k].pk) { /* packed: the same bytes as the reference rows packed */
                size_t bytes = gemm_packed_size_s8(N, K), wb = 0, rb = 0;
                void *ref = aligned_alloc64(bytes);
                if (ref && gemm_pack_s8(ref, q, N, K) == 0) {
                    const void *a = gemm_packed_weights(mats[k].pk, &wb), *r = gemm_packed_weights(ref, &rb);
                    same_q = wb == rb && !memcmp(a, r, wb);
                }
                aligned_free(ref);
            }
            CHECK_MSG(L->kind == WEIGHT_S8 && same_q && !memcmp(L->scale, sc, (size_t)N * sizeof(float)),
                      "int8 from the file: %s differs from quantize_rows_s8_ref (%s)", mats[k].name,
                      L->q ? "plain" : "packed");
            free(q);
            free(sc);
            free(f);
        }
        tern_model_free(tm);
    }
    mm_free(&m);
}

/* ------------------------------------------------------------ truncation */

/* What the error for a model.bin cut at `cut` must name: the header, tensor #k (its name is cut),
 * tensor 'NAME', or the aliases. */
static void expected_region(char *out, size_t n, const mm_layout_t *L, const char *const *names, size_t cut) {
    if (cut < L->header_end) {
        snprintf(out, n, "header");
        return;
    }
    for (int k = 0; k < L->n; k++) {
        if (cut < L->rec[k] || cut >= L->rec_end[k]) continue;
        if (cut < L->name_end[k]) snprintf(out, n, "tensor #%d ", k);
        else snprintf(out, n, "tensor '%s'", names[k]);
        return;
    }
    snprintf(out, n, "alias");
}

/* Cuts path's model.bin (full content buf) at every byte (or at the given cut points) and checks
 * weights_load_ct2; every `model_every`-th cut also through tern_model_load(dir). Returns failures. */
static int sweep_truncation(const char *what, const char *dir, const uint8_t *buf, const mm_layout_t *L,
                            const char *const *names, const size_t *cuts, size_t n_cuts, int model_every) {
    char p[1024], want[256];
    file_in(p, sizeof p, dir, "model.bin");
    int bad = 0;
    /* Cuts in decreasing order, each one a truncate() of the longer file (rewriting a file on ext4
     * costs milliseconds, truncating it microseconds). */
    write_or_die(p, buf, L->size);
    size_t last = L->size;
    for (size_t j = n_cuts; j-- > 0;) {
        size_t i = j, cut = cuts ? cuts[i] : i;
        if (cut > last) {
            write_or_die(p, buf, L->size);
            last = L->size;
        }
        if (truncate(p, (off_t)cut) != 0) {
            perror("truncate");
            exit(2);
        }
        last = cut;
        expected_region(want, sizeof want, L, names, cut);
        weights_t *w = (weights_t *)(uintptr_t)1;
        tern_status_t st = weights_load_ct2(&w, p);
        const char *msg = tern_last_error();
        int ok = st == TERN_ERR_FORMAT && w == NULL && !strncmp(msg, p, strlen(p)) && has(msg, want);
        if (st == TERN_OK) weights_free(w);
        if (ok && model_every && i % (size_t)model_every == 0) {
            tern_model_t *m = (tern_model_t *)(uintptr_t)1;
            st = tern_model_load(&m, dir, NULL);
            msg = tern_last_error();
            ok = st == TERN_ERR_FORMAT && m == NULL && has(msg, p) && has(msg, want);
            if (st == TERN_OK) tern_model_free(m);
        }
        if (!ok) {
            if (bad < 5)
                fprintf(stderr, "%s cut at %zu of %zu: %s (want format error with '%s'): %s\n", what, cut, L->size,
                        tern_status_string(st), want, msg);
            bad++;
        }
    }
    write_or_die(p, buf, L->size);
    return bad;
}

static void test_truncation_ct2(void) {
    static const struct { int version, int8; } cases[] = {{6, 0}, {5, 0}, {4, 0}, {3, 0}, {2, 0}, {1, 0}, {6, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        mm_shape_t s = MM_TINY;
        s.int8 = cases[c].int8;
        mm_model_t m, sorted = {0};
        mm_build(&m, &s);
        char dir[512], name[64];
        snprintf(name, sizeof name, "trunc-v%d%s", cases[c].version, cases[c].int8 ? "-int8" : "");
        make_dir(dir, sizeof dir, name);
        mm_buf_t b;
        mm_layout_t L;
        write_ct2_dir(dir, &m, &s, cases[c].version, &b, &L);
        /* the names in file order (versions < 3 store aliases as variables) */
        for (int i = 0; i < m.n; i++) mm_add(&sorted, m.v[i].name, m.v[i].dt, m.v[i].rank, m.v[i].shape, NULL);
        if (cases[c].version < 3)
            for (int a = 0; a < m.n_alias; a++) mm_add(&sorted, m.alias[a][0], DT_I8, 0, NULL, NULL);
        mm_sort(&sorted);
        const char **names = malloc(sizeof(char *) * (size_t)sorted.n);
        for (int i = 0; i < sorted.n; i++) names[i] = sorted.v[i].name;
        CHECK_EQ_INT(sorted.n, L.n);
        int bad = sweep_truncation(name, dir, b.p, &L, names, NULL, L.size, 37);
        CHECK_MSG(bad == 0, "%s: %d of %zu cut points gave a wrong error", name, bad, L.size);
        tern_model_t *tm = load_ok("restored", dir);
        tern_model_free(tm);
        free(names);
        mm_free(&sorted);
        mm_layout_free(&L);
        free(b.p);
        mm_free(&m);
    }
}

/* The tensor named in a message "...tensor 'NAME'..." (first occurrence). */
static int named_tensor(const char *msg, char *out, size_t n) {
    const char *a = strstr(msg, "tensor '");
    if (!a) return 0;
    a += 8;
    const char *e = strchr(a, '\'');
    if (!e || (size_t)(e - a) >= n) return 0;
    memcpy(out, a, (size_t)(e - a));
    out[e - a] = 0;
    return 1;
}

static void test_truncation_safetensors(void) {
    mm_shape_t s = MM_TINY;
    mm_model_t m;
    mm_build(&m, &s);
    char dir[512], p[1024];
    make_dir(dir, sizeof dir, "trunc-safetensors");
    mm_buf_t b;
    write_tern_dir(dir, &m, &s, &b);
    file_in(p, sizeof p, dir, "model.safetensors");
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b.p[i];
    int bad = 0;
    for (size_t cut = b.n; cut-- > 0;) {
        if (truncate(p, (off_t)cut) != 0) { /* shrinking, one byte at a time */
            perror("truncate");
            exit(2);
        }
        weights_t *w = (weights_t *)(uintptr_t)1;
        tern_status_t st = weights_load_safetensors(&w, p);
        const char *msg = tern_last_error();
        int ok = st == TERN_ERR_FORMAT && w == NULL && !strncmp(msg, p, strlen(p));
        if (cut < 8) ok = ok && has(msg, "header: file too short");
        else if (cut < 8 + hlen) ok = ok && has(msg, "header: length");
        else {
            /* a tensor whose data lies past the cut */
            char t[MM_NAME_MAX];
            ok = ok && named_tensor(msg, t, sizeof t) && has(msg, "out of the data section");
            if (ok) {
                size_t off = 0, end = 0;
                for (int i = 0; i < m.n; i++) {
                    off += m.v[i].nbytes;
                    if (!strcmp(m.v[i].name, t)) end = off;
                }
                ok = end > cut - 8 - hlen;
            }
        }
        if (st == TERN_OK) weights_free(w);
        if (ok && cut % 41 == 0) {
            tern_model_t *tm = (tern_model_t *)(uintptr_t)1;
            st = tern_model_load(&tm, dir, NULL);
            ok = st == TERN_ERR_FORMAT && tm == NULL && has(tern_last_error(), p);
            if (st == TERN_OK) tern_model_free(tm);
        }
        if (!ok) {
            if (bad < 5) fprintf(stderr, "safetensors cut at %zu of %zu: %s: %s\n", cut, b.n, tern_status_string(st), msg);
            bad++;
        }
    }
    CHECK_MSG(bad == 0, "safetensors: %d of %zu cut points gave a wrong error", bad, b.n);
    free(b.p);
    mm_free(&m);
}

/* ------------------------------------------------------------ corrupt model.bin fields */

/* Writes buf (patched) as dir/model.bin and checks weights_load_ct2's status and message. */
static void expect_ct2_bytes(const char *what, const char *dir, const uint8_t *buf, size_t n, tern_status_t want,
                             const char *sub1, const char *sub2) {
    char p[1024];
    file_in(p, sizeof p, dir, "model.bin");
    write_or_die(p, buf, n);
    weights_t *w = (weights_t *)(uintptr_t)1;
    tern_status_t st = weights_load_ct2(&w, p);
    CHECK_MSG(st == TERN_OK ? 1 : w == NULL, "%s: weights returned on failure", what);
    if (st == TERN_OK) weights_free(w);
    if (want == TERN_OK) {
        CHECK_MSG(st == TERN_OK, "%s: %s", what, tern_last_error());
        return;
    }
    expect_msg(what, st, want, p, sub1 ? sub1 : p, sub2 ? sub2 : p, (const char *)NULL);
    /* and the same error through the public API */
    if (st != TERN_OK) EXPECT_LOAD_FAIL(what, dir, want, p, sub1 ? sub1 : p);
}

static void test_corrupt_ct2(void) {
    mm_shape_t s = MM_TINY;
    mm_model_t m;
    mm_build(&m, &s);
    char dir[512];
    make_dir(dir, sizeof dir, "corrupt-ct2");
    mm_buf_t b;
    mm_layout_t L;
    write_ct2_dir(dir, &m, &s, 6, &b, &L);
    uint8_t *x = malloc(b.n);
    char q[256];
#define FRESH() memcpy(x, b.p, b.n)

    FRESH(); put_u32(x, 0);
    expect_ct2_bytes("version 0", dir, x, b.n, TERN_ERR_FORMAT, "header: binary version 0 is invalid", NULL);
    FRESH(); put_u32(x, 7);
    expect_ct2_bytes("version 7", dir, x, b.n, TERN_ERR_UNSUPPORTED, "binary version 7 is newer than 6", NULL);
    FRESH(); memcpy(x, "PK\3\4", 4);
    expect_ct2_bytes("not a model.bin", dir, x, b.n, TERN_ERR_FORMAT, "is invalid (not a CTranslate2 model.bin?)", NULL);
    FRESH(); x[4] = 0; x[5] = 0;
    expect_ct2_bytes("spec name length 0", dir, x, b.n, TERN_ERR_FORMAT, "header: spec name: string length 0", NULL);
    FRESH(); x[4 + 2 + 15] = 'X'; /* "TransformerSpec" NUL replaced */
    expect_ct2_bytes("spec name without NUL", dir, x, b.n, TERN_ERR_FORMAT, "header: spec name: string is not NUL", NULL);
    FRESH(); x[4] = 0xff; x[5] = 0xff;
    expect_ct2_bytes("spec name past the end", dir, x, b.n, TERN_ERR_FORMAT, "header: spec name: string runs past", NULL);

    int k = var_index(&m, "encoder/layer_0/ffn/linear_0/weight");
    snprintf(q, sizeof q, "tensor '%s'", m.v[k].name);
    FRESH(); x[L.rank_at[k]] = 9;
    expect_ct2_bytes("rank 9", dir, x, b.n, TERN_ERR_FORMAT, q, "rank exceeds 8");
    FRESH(); x[L.rank_at[k]] = 3;
    expect_ct2_bytes("rank 3 (reads into the dtype)", dir, x, b.n, TERN_ERR_FORMAT, q, NULL);
    FRESH(); put_u32(x + L.rank_at[k] + 1, 7);
    expect_ct2_bytes("dim +1", dir, x, b.n, TERN_ERR_FORMAT, q, "bytes stored but its shape and dtype float32 need");
    FRESH(); put_u32(x + L.rank_at[k] + 1, 0x80000000u); put_u32(x + L.rank_at[k] + 5, 0x80000000u);
    expect_ct2_bytes("dims overflowing", dir, x, b.n, TERN_ERR_FORMAT, q, "shape is too large");
    FRESH(); put_u32(x + L.rank_at[k] + 1, 0x40000000u); put_u32(x + L.rank_at[k] + 5, 0x00000010u);
    expect_ct2_bytes("numel * 4 wrapping to 0", dir, x, b.n, TERN_ERR_FORMAT, q, NULL);
    FRESH(); x[L.dtype_at[k]] = 6;
    expect_ct2_bytes("dtype 6", dir, x, b.n, TERN_ERR_FORMAT, q, "unknown dtype id 6");
    FRESH(); x[L.dtype_at[k]] = 4;
    expect_ct2_bytes("float32 bytes as float16", dir, x, b.n, TERN_ERR_FORMAT, q, "need");
    FRESH(); put_u32(x + L.size_at[k], 0xffffffffu);
    expect_ct2_bytes("byte count 2^32-1", dir, x, b.n, TERN_ERR_FORMAT, q, "4294967295 bytes stored");
    FRESH(); put_u32(x + L.size_at[k], (uint32_t)m.v[k].nbytes - 4);
    expect_ct2_bytes("byte count -4", dir, x, b.n, TERN_ERR_FORMAT, q, "bytes stored");
    FRESH(); x[L.rec[k]] = 0; x[L.rec[k] + 1] = 0;
    snprintf(q, sizeof q, "tensor #%d ", k);
    expect_ct2_bytes("name length 0", dir, x, b.n, TERN_ERR_FORMAT, q, "string length 0");
    FRESH(); x[L.rec[k]] = 0xff; x[L.rec[k] + 1] = 0xff;
    /* (a 65535-byte name fits in no tensor record of this small file) */
    expect_ct2_bytes("name length 65535", dir, x, b.n, TERN_ERR_FORMAT, q, NULL);
    FRESH(); x[L.rec[k] + 2 + 7] = 0;
    expect_ct2_bytes("NUL inside a name", dir, x, b.n, TERN_ERR_FORMAT, q, "string contains a NUL byte");
    FRESH(); x[L.name_end[k] - 1] = 'Z';
    expect_ct2_bytes("name without NUL", dir, x, b.n, TERN_ERR_FORMAT, q, "not NUL-terminated");

    /* a zero dimension after huge ones: 0 elements, 0 bytes, no overflow on the way (fuzz find) */
    {
        mm_model_t z;
        mm_build(&z, &s);
        int64_t sh[4] = {0x80000000LL, 0x80000000LL, 0x80000000LL, 0};
        mm_add(&z, "encoder/extra_empty", DT_F32, 4, sh, NULL);
        mm_buf_t zb;
        mm_serialize_ct2(&z, 6, &zb, NULL);
        expect_ct2_bytes("[2^31, 2^31, 2^31, 0]", dir, zb.p, zb.n, TERN_OK, NULL, NULL);
        char zp[1024];
        file_in(zp, sizeof zp, dir, "model.bin");
        weights_t *zw = NULL;
        CHECK(weights_load_ct2(&zw, zp) == TERN_OK);
        const tensor_t *zt = zw ? weights_get(zw, "encoder/extra_empty") : NULL;
        CHECK(zt && zt->numel == 0 && zt->nbytes == 0 && zt->rank == 4 && zt->shape[0] == 0x80000000LL);
        weights_free(zw);
        free(zb.p);
        mm_free(&z);
    }

    /* float32 stored as int32 (same size): the reader accepts it, the Transformer refuses it */
    FRESH(); x[L.dtype_at[k]] = 3;
    snprintf(q, sizeof q, "tensor '%s'", m.v[k].name);
    expect_ct2_bytes("float32 as int32 (weights)", dir, x, b.n, TERN_OK, NULL, NULL);
    EXPECT_LOAD_FAIL("float32 as int32 (model)", dir, TERN_ERR_FORMAT, "model.bin", q, "expected a floating-point dtype");

    /* duplicate names: ffn/linear_1/bias renamed to ffn/linear_0/bias */
    int k0 = var_index(&m, "encoder/layer_0/ffn/linear_0/bias"), k1 = var_index(&m, "encoder/layer_0/ffn/linear_1/bias");
    (void)k0;
    FRESH(); x[L.rec[k1] + 2 + strlen("encoder/layer_0/ffn/linear_")] = '0';
    expect_ct2_bytes("duplicate name", dir, x, b.n, TERN_ERR_FORMAT, "tensor 'encoder/layer_0/ffn/linear_0/bias'",
                     "duplicate name");

    /* variable count off by one either way */
    FRESH(); put_u32(x + L.header_end - 4, (uint32_t)L.n + 1);
    expect_ct2_bytes("count + 1", dir, x, b.n, TERN_ERR_FORMAT, NULL, NULL);
    FRESH(); put_u32(x + L.header_end - 4, (uint32_t)L.n - 1);
    expect_ct2_bytes("count - 1", dir, x, b.n, TERN_ERR_FORMAT, NULL, NULL);
    FRESH(); put_u32(x + L.header_end - 4, 0xffffffffu);
    expect_ct2_bytes("count 2^32-1", dir, x, b.n, TERN_ERR_FORMAT, NULL, NULL);
    FRESH(); put_u32(x + L.alias_at, 1000000);
    expect_ct2_bytes("alias count 10^6", dir, x, b.n, TERN_ERR_FORMAT, "alias #1 of 1000000", NULL);
    /* trailing bytes after the aliases are ignored, as CTranslate2 ignores them */
    uint8_t *y = malloc(b.n + 3);
    memcpy(y, b.p, b.n);
    memset(y + b.n, 0xab, 3);
    expect_ct2_bytes("trailing bytes", dir, y, b.n + 3, TERN_OK, NULL, NULL);
    free(y);
    free(x);
    mm_layout_free(&L);
    free(b.p);

    /* aliases to a missing tensor, onto a used name, and to an alias */
    mm_model_t a;
    mm_build(&a, &s);
    snprintf(a.alias[0][1], MM_NAME_MAX, "decoder/embeddings/weigth");
    write_ct2_dir(dir, &a, &s, 6, NULL, NULL);
    EXPECT_LOAD_FAIL("alias to a missing tensor", dir, TERN_ERR_FORMAT, "model.bin",
                     "alias 'decoder/projection/weight' -> unknown 'decoder/embeddings/weigth'");
    snprintf(a.alias[0][0], MM_NAME_MAX, "decoder/projection/bias");
    snprintf(a.alias[0][1], MM_NAME_MAX, "decoder/embeddings/weight");
    write_ct2_dir(dir, &a, &s, 6, NULL, NULL);
    EXPECT_LOAD_FAIL("alias onto a tensor name", dir, TERN_ERR_FORMAT, "model.bin",
                     "alias 'decoder/projection/bias': name already used");
    mm_free(&a);
    mm_build(&a, &s);
    mm_add_alias(&a, "decoder/extra", "decoder/projection/weight"); /* an alias of an alias resolves */
    write_ct2_dir(dir, &a, &s, 6, NULL, NULL);
    char p[1024];
    file_in(p, sizeof p, dir, "model.bin");
    weights_t *w = NULL;
    CHECK(weights_load_ct2(&w, p) == TERN_OK);
    if (w) {
        CHECK(weights_get(w, "decoder/extra") == weights_get(w, "decoder/embeddings/weight"));
        weights_free(w);
    }
    mm_free(&a);

    /* empty file, a directory in its place, no file at all */
    write_ct2_dir(dir, &m, &s, 6, NULL, NULL);
    mm_free(&m);
    file_in(p, sizeof p, dir, "model.bin");
    write_or_die(p, "", 0);
    EXPECT_LOAD_FAIL("empty model.bin", dir, TERN_ERR_FORMAT, p, "header: truncated binary version");
    unlink(p);
    EXPECT_LOAD_FAIL("no model.bin", dir, TERN_ERR_IO, dir, "no model.safetensors or model.bin");
    mkdir(p, 0755);
    EXPECT_LOAD_FAIL("model.bin is a directory", dir, TERN_ERR_IO, dir, "no model.safetensors or model.bin");
    rmdir(p);
    file_in(p, sizeof p, tmp_root, "does-not-exist");
    EXPECT_LOAD_FAIL("no such directory", p, TERN_ERR_IO, p);
}

/* ------------------------------------------------------------ Transformer mismatches */

typedef void (*mutate_fn)(mm_model_t *m, mm_shape_t *s);

/* Builds MM_TINY (or the shape set by mutate), applies mutate, writes model.bin v6 and the side
 * files, and expects tern_model_load to fail with want and the substrings. */
static void expect_model(const char *what, void (*mutate)(mm_model_t *, mm_shape_t *), tern_status_t want,
                         const char *sub1, const char *sub2) {
    mm_shape_t s = MM_TINY;
    mm_model_t m;
    mutate(NULL, &s); /* shape changes first */
    mm_build(&m, &s);
    mutate(&m, &s);
    char dir[512], p[1024];
    make_dir(dir, sizeof dir, "mismatch");
    write_ct2_dir(dir, &m, &s, 6, NULL, NULL);
    file_in(p, sizeof p, dir, "model.bin");
    EXPECT_LOAD_FAIL(what, dir, want, p, sub1, sub2 ? sub2 : sub1);
    mm_free(&m);
}

static void resize(mm_model_t *m, const char *name, int rank, int64_t d0, int64_t d1, int64_t d2) {
    mm_var_t *v = mm_find(m, name);
    if (!v) {
        fprintf(stderr, "no %s\n", name);
        exit(2);
    }
    int64_t shape[3] = {d0, d1, d2};
    mm_add(m, name, v->dt, rank, shape, NULL);
}

#define MUTATION(fn, body) static void fn(mm_model_t *m, mm_shape_t *s) { (void)s; if (!m) return; body; }
#define SHAPE_MUTATION(fn, shape_body, body) \
    static void fn(mm_model_t *m, mm_shape_t *s) { if (!m) { shape_body; return; } body; }

MUTATION(mut_missing, mm_remove(m, "decoder/layer_0/ffn/linear_1/weight"))
MUTATION(mut_ffn_shape, resize(m, "encoder/layer_0/ffn/linear_1/weight", 2, 4, 7, 0))
MUTATION(mut_gamma_shape, resize(m, "decoder/layer_norm/gamma", 1, 5, 0, 0))
MUTATION(mut_bias_shape, resize(m, "decoder/layer_0/attention/linear_1/bias", 1, 9, 0, 0))
MUTATION(mut_rank3, resize(m, "encoder/layer_0/self_attention/linear_0/weight", 3, 3, 4, 4))
MUTATION(mut_dec_emb_width, resize(m, "decoder/embeddings/weight", 2, 7, 6, 0))
MUTATION(mut_enc_emb_rows0, resize(m, "encoder/embeddings_0/weight", 2, 0, 4, 0))
MUTATION(mut_enc_emb_rank1, resize(m, "encoder/embeddings_0/weight", 1, 28, 0, 0))
MUTATION(mut_enc_emb_missing, mm_remove(m, "encoder/embeddings_0/weight"))
MUTATION(mut_heads3, mm_scalar(m, "encoder/num_heads", DT_I16, 3))
MUTATION(mut_heads0, mm_scalar(m, "encoder/num_heads", DT_I16, 0))
MUTATION(mut_heads_nan, { float f = NAN; mm_add(m, "encoder/num_heads", DT_F32, 0, NULL, &f); })
MUTATION(mut_heads_big, { float f = 1e30f; mm_add(m, "encoder/num_heads", DT_F32, 0, NULL, &f); })
MUTATION(mut_heads_f16, { uint16_t h = 0x4000; mm_add(m, "encoder/num_heads", DT_F16, 0, NULL, &h); })
MUTATION(mut_dec_heads, mm_scalar(m, "decoder/num_heads", DT_I16, 4))
MUTATION(mut_activation, mm_scalar(m, "encoder/activation", DT_I8, 9))
MUTATION(mut_final_ln, mm_remove(m, "encoder/layer_norm/gamma"); mm_remove(m, "encoder/layer_norm/beta"))
MUTATION(mut_beta_missing, mm_remove(m, "decoder/layer_0/ffn/layer_norm/beta"))
MUTATION(mut_multi_query, mm_scalar(m, "decoder/multi_query_attention", DT_I8, 1))
MUTATION(mut_variant, mm_weight(m, s, &s->seed, "encoder/layer_0/self_attention/relative_position_keys", 3, 2, 1, 0, 0))
MUTATION(mut_weight_i32, { mm_var_t *v = mm_find(m, "decoder/layer_0/self_attention/linear_1/weight"); v->dt = DT_I32; })
MUTATION(mut_gamma_i16, { int64_t sh[1] = {4}; mm_add(m, "encoder/layer_norm/gamma", DT_I16, 1, sh, NULL); })
MUTATION(mut_ffn_f0, resize(m, "encoder/layer_0/ffn/linear_0/weight", 2, 0, 4, 0))
SHAPE_MUTATION(mut_proj_rows, s->tie_output = 0, resize(m, "decoder/projection/weight", 2, 8, 4, 0))
SHAPE_MUTATION(mut_pos_width, s->learned_pos = 1, resize(m, "decoder/position_encodings/encodings", 2, 16, 5, 0))
SHAPE_MUTATION(mut_odd_width, (s->d = 3, s->heads = 1), (void)0)
SHAPE_MUTATION(mut_int8_no_scale, s->int8 = 1, mm_remove(m, "encoder/layer_0/ffn/linear_0/weight_scale"))
SHAPE_MUTATION(mut_int8_scale_len, s->int8 = 1, resize(m, "decoder/layer_0/ffn/linear_1/weight_scale", 1, 3, 0, 0))
SHAPE_MUTATION(mut_int8_scale_dtype, s->int8 = 1,
               { mm_var_t *v = mm_find(m, "decoder/layer_0/ffn/linear_1/weight_scale"); v->dt = DT_I32; })
static void mut_layer_gap(mm_model_t *m, mm_shape_t *s) { /* layers 0 and 2, no layer 1 */
    if (!m) {
        s->enc_layers = 3;
        return;
    }
    for (int i = m->n - 1; i >= 0; i--)
        if (!strncmp(m->v[i].name, "encoder/layer_1/", 16)) mm_remove(m, m->v[i].name);
}

static void mut_int16_no_scale(mm_model_t *m, mm_shape_t *s) {
    if (!m) {
        s->int8 = 1;
        return;
    }
    int64_t sh[2] = {6, 4};
    mm_add(m, "encoder/layer_0/ffn/linear_0/weight", DT_I16, 2, sh, NULL);
    mm_remove(m, "encoder/layer_0/ffn/linear_0/weight_scale");
}

static void test_mismatch(void) {
    expect_model("missing tensor", mut_missing, TERN_ERR_FORMAT, "missing tensor 'decoder/layer_0/ffn/linear_1/weight'", NULL);
    expect_model("ffn weight shape", mut_ffn_shape, TERN_ERR_MISMATCH,
                 "tensor 'encoder/layer_0/ffn/linear_1/weight': expected shape [4, 6], got [4, 7]", NULL);
    expect_model("gamma shape", mut_gamma_shape, TERN_ERR_MISMATCH,
                 "tensor 'decoder/layer_norm/gamma': expected shape [4], got [5]", NULL);
    expect_model("bias shape", mut_bias_shape, TERN_ERR_MISMATCH,
                 "tensor 'decoder/layer_0/attention/linear_1/bias': expected shape [8], got [9]", NULL);
    expect_model("rank 3 weight", mut_rank3, TERN_ERR_MISMATCH,
                 "tensor 'encoder/layer_0/self_attention/linear_0/weight': expected shape [12, 4], got [3, 4, 4]", NULL);
    expect_model("decoder embedding width", mut_dec_emb_width, TERN_ERR_MISMATCH, "tensor 'decoder/embeddings/weight'",
                 "got [7, 6]");
    expect_model("encoder embedding with 0 rows", mut_enc_emb_rows0, TERN_ERR_MISMATCH,
                 "tensor 'encoder/embeddings_0/weight'", "[0, 4]");
    expect_model("encoder embedding rank 1", mut_enc_emb_rank1, TERN_ERR_MISMATCH, "tensor 'encoder/embeddings_0/weight'",
                 "rank 1");
    expect_model("encoder embedding missing", mut_enc_emb_missing, TERN_ERR_FORMAT,
                 "missing tensor 'encoder/embeddings_0/weight'", NULL);
    expect_model("3 heads for width 4", mut_heads3, TERN_ERR_MISMATCH, "tensor 'encoder/num_heads'",
                 "3 heads do not divide the width 4");
    expect_model("0 heads", mut_heads0, TERN_ERR_MISMATCH, "tensor 'encoder/num_heads'", "0 heads");
    expect_model("NaN heads (float scalar)", mut_heads_nan, TERN_ERR_MISMATCH, "tensor 'encoder/num_heads'",
                 "heads do not divide");
    expect_model("1e30 heads (float scalar)", mut_heads_big, TERN_ERR_MISMATCH, "tensor 'encoder/num_heads'",
                 "heads do not divide");
    expect_model("decoder heads differ", mut_dec_heads, TERN_ERR_UNSUPPORTED, "tensor 'decoder/num_heads'", NULL);
    expect_model("activation 9", mut_activation, TERN_ERR_FORMAT, "tensor 'encoder/activation'", "unknown activation 9");
    expect_model("pre-norm without final norm", mut_final_ln, TERN_ERR_FORMAT, "'encoder/layer_norm'", NULL);
    expect_model("layer norm beta missing", mut_beta_missing, TERN_ERR_FORMAT,
                 "missing tensor 'decoder/layer_0/ffn/layer_norm/beta'", NULL);
    expect_model("multi-query attention set", mut_multi_query, TERN_ERR_UNSUPPORTED,
                 "'decoder/multi_query_attention' is set", "not supported by Tern's transformer yet");
    expect_model("unsupported variant", mut_variant, TERN_ERR_UNSUPPORTED,
                 "tensor 'encoder/layer_0/self_attention/relative_position_keys'", "not supported");
    expect_model("int32 weight", mut_weight_i32, TERN_ERR_FORMAT,
                 "tensor 'decoder/layer_0/self_attention/linear_1/weight'", "expected a floating-point dtype, got int32");
    expect_model("int16 gamma", mut_gamma_i16, TERN_ERR_FORMAT, "tensor 'encoder/layer_norm/gamma'",
                 "expected a floating-point dtype, got int16");
    expect_model("ffn width 0", mut_ffn_f0, TERN_ERR_MISMATCH, "tensor 'encoder/layer_0/ffn/linear_0/weight'", NULL);
    expect_model("projection rows", mut_proj_rows, TERN_ERR_MISMATCH,
                 "tensor 'decoder/projection/weight': expected shape [7, 4], got [8, 4]", NULL);
    expect_model("position table width", mut_pos_width, TERN_ERR_MISMATCH,
                 "tensor 'decoder/position_encodings/encodings'", "got [16, 5]");
    expect_model("odd width, sinusoidal", mut_odd_width, TERN_ERR_UNSUPPORTED, "'encoder/position_encodings/encodings'",
                 "even model width");
    expect_model("int8 without scale", mut_int8_no_scale, TERN_ERR_FORMAT,
                 "tensor 'encoder/layer_0/ffn/linear_0/weight' is int8 but 'encoder/layer_0/ffn/linear_0/weight_scale' is missing",
                 NULL);
    expect_model("int8 scale length", mut_int8_scale_len, TERN_ERR_MISMATCH,
                 "tensor 'decoder/layer_0/ffn/linear_1/weight_scale': expected 4 scales or 1, got 3", NULL);
    expect_model("int8 scale dtype", mut_int8_scale_dtype, TERN_ERR_FORMAT,
                 "tensor 'decoder/layer_0/ffn/linear_1/weight_scale'", "floating-point");
    expect_model("layer gap", mut_layer_gap, TERN_ERR_FORMAT, "tensor 'encoder/layer_2/",
                 "no tensors of layer 1 before it");
    expect_model("int16 without scale", mut_int16_no_scale, TERN_ERR_FORMAT,
                 "'encoder/layer_0/ffn/linear_0/weight_scale' is missing", "int16");

    /* scalars of any dtype are read by value: num_heads 2.0 as float16 is fine */
    mm_shape_t s = MM_TINY;
    mm_model_t m;
    mm_build(&m, &s);
    mut_heads_f16(&m, &s);
    char dir[512];
    make_dir(dir, sizeof dir, "heads-f16");
    write_ct2_dir(dir, &m, &s, 6, NULL, NULL);
    tern_model_t *tm = load_ok("float16 num_heads", dir);
    if (tm) {
        tern_model_info_t tmi = tern_model_info(tm);
        CHECK_EQ_INT(tern_model_hparam(&tmi, "num_heads", -1), 2);
        tern_model_free(tm);
    }
    mm_free(&m);
}

/* ------------------------------------------------------------ config.json and vocabularies */

static void test_side_files(void) {
    mm_shape_t s = MM_TINY;
    mm_model_t m;
    mm_build(&m, &s);
    char dir[512], cfg[1024], voc[1024];
    make_dir(dir, sizeof dir, "side");
    write_ct2_dir(dir, &m, &s, 6, NULL, NULL);
    file_in(cfg, sizeof cfg, dir, "config.json");
    file_in(voc, sizeof voc, dir, "shared_vocabulary.json");

    unlink(cfg); /* CTranslate2's defaults apply (<unk> <s> </s>) */
    tern_model_t *tm = load_ok("no config.json", dir);
    tern_model_free(tm);
    const char *c0 = "{\"unk_token\": \"<unk>\", ";
    write_or_die(cfg, c0, strlen(c0));
    EXPECT_LOAD_FAIL("truncated config.json", dir, TERN_ERR_FORMAT, cfg, "not valid JSON");
    write_or_die(cfg, "\x89PNG\r\n\x1a\n\0\0", 10);
    EXPECT_LOAD_FAIL("binary config.json", dir, TERN_ERR_FORMAT, cfg, "not valid JSON");
    write_or_die(cfg, "[1, 2]", 6);
    EXPECT_LOAD_FAIL("config.json a list", dir, TERN_ERR_FORMAT, cfg, "expected a JSON object");
    const char *c1 = "{\"add_source_bos\": \"yes\"}";
    write_or_die(cfg, c1, strlen(c1));
    EXPECT_LOAD_FAIL("config.json bool as string", dir, TERN_ERR_FORMAT, cfg, "'add_source_bos' must be true or false");
    const char *c2 = "{\"eos_token\": 5}";
    write_or_die(cfg, c2, strlen(c2));
    EXPECT_LOAD_FAIL("config.json token as number", dir, TERN_ERR_FORMAT, cfg, "'eos_token' must be a string");
    const char *c3 = "{\"eos_token\": \"</eos>\"}";
    write_or_die(cfg, c3, strlen(c3));
    EXPECT_LOAD_FAIL("eos token not in the vocabulary", dir, TERN_ERR_MISMATCH, dir, "'</eos>'");
    const char *c4 = "{\"layer_norm_epsilon\": -1}";
    write_or_die(cfg, c4, strlen(c4));
    EXPECT_LOAD_FAIL("negative epsilon", dir, TERN_ERR_FORMAT, cfg, "'layer_norm_epsilon'");
    const char *c5 = "{\"add_source_bos\": true, \"bos_token\": \"<bos>\"}";
    write_or_die(cfg, c5, strlen(c5));
    EXPECT_LOAD_FAIL("source bos not in the vocabulary", dir, TERN_ERR_MISMATCH, dir, "'<bos>'");
    write_or_die(cfg, MM_CONFIG, strlen(MM_CONFIG));

    /* vocabularies */
    const char *v6 = "[\"<unk>\", \"<s>\", \"</s>\", \"a\", \"b\", \"c\"]";
    write_or_die(voc, v6, strlen(v6));
    EXPECT_LOAD_FAIL("vocabulary one token short", dir, TERN_ERR_MISMATCH, voc,
                     "source vocabulary has 6 tokens but tensor 'encoder/embeddings_0/weight'", "model.bin has 7 rows");
    write_or_die(voc, "[\"<unk>\", \"<s>\"", 15);
    EXPECT_LOAD_FAIL("truncated vocabulary", dir, TERN_ERR_FORMAT, voc, "not valid JSON");
    const char *v7 = "[\"<unk>\", \"<s>\", \"</s>\", 4, \"b\", \"c\", \"d\"]";
    write_or_die(voc, v7, strlen(v7));
    EXPECT_LOAD_FAIL("vocabulary entry not a string", dir, TERN_ERR_FORMAT, voc, "entry 3 is not a string");
    write_or_die(voc, "{\"a\": 1}", 8);
    EXPECT_LOAD_FAIL("vocabulary an object", dir, TERN_ERR_FORMAT, voc, "expected a JSON list");
    unlink(voc);
    EXPECT_LOAD_FAIL("no vocabulary", dir, TERN_ERR_IO, dir, "no vocabulary found");
    char sv[1024], tv[1024], buf[512];
    file_in(sv, sizeof sv, dir, "source_vocabulary.json");
    file_in(tv, sizeof tv, dir, "target_vocabulary.json");
    mm_vocab_json(buf, sizeof buf, 7);
    write_or_die(sv, buf, strlen(buf));
    EXPECT_LOAD_FAIL("source vocabulary only", dir, TERN_ERR_IO, dir, "no target_vocabulary");
    mm_vocab_json(buf, sizeof buf, 8);
    write_or_die(tv, buf, strlen(buf));
    EXPECT_LOAD_FAIL("target vocabulary one token long", dir, TERN_ERR_MISMATCH, tv,
                     "target vocabulary has 8 tokens but tensor 'decoder/embeddings/weight'");
    mm_vocab_json(buf, sizeof buf, 7);
    write_or_die(tv, buf, strlen(buf));
    tm = load_ok("separate vocabulary files", dir);
    tern_model_free(tm);
    /* legacy one-token-per-line vocabularies */
    unlink(sv);
    unlink(tv);
    char txt[1024];
    file_in(txt, sizeof txt, dir, "shared_vocabulary.txt");
    const char *lines = "<unk>\n<s>\n</s>\nt3\nt4\nt5\nt6\n";
    write_or_die(txt, lines, strlen(lines));
    tm = load_ok("shared_vocabulary.txt", dir);
    tern_model_free(tm);
    write_or_die(txt, lines, strlen(lines) - 3);
    EXPECT_LOAD_FAIL("shared_vocabulary.txt one short", dir, TERN_ERR_MISMATCH, txt, "has 6 tokens");
    mm_free(&m);
}

/* ------------------------------------------------------------ safetensors headers */

static void write_st(const char *path, const char *json, const void *data, size_t n) {
    size_t jl = strlen(json);
    uint8_t *b = malloc(8 + jl + n + 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)jl >> (8 * i));
    memcpy(b + 8, json, jl);
    if (n) memcpy(b + 8 + jl, data, n);
    write_or_die(path, b, 8 + jl + n);
    free(b);
}

static void expect_st(const char *what, const char *path, const char *json, size_t ndata, tern_status_t want,
                      const char *sub1, const char *sub2) {
    static const float data[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    write_st(path, json, data, ndata);
    weights_t *w = (weights_t *)(uintptr_t)1;
    tern_status_t st = weights_load_safetensors(&w, path);
    CHECK_MSG(st == TERN_OK ? 1 : w == NULL, "%s: weights returned on failure", what);
    if (st == TERN_OK) weights_free(w);
    if (want == TERN_OK) {
        CHECK_MSG(st == TERN_OK, "%s: %s", what, tern_last_error());
        return;
    }
    expect_msg(what, st, want, path, sub1 ? sub1 : path, sub2 ? sub2 : path, (const char *)NULL);
}

static void test_corrupt_safetensors(void) {
    char dir[512], p[1024];
    make_dir(dir, sizeof dir, "st");
    file_in(p, sizeof p, dir, "model.safetensors");
    const size_t D = 64; /* bytes of data after the header (16 floats) */

    expect_st("valid", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
              "\"b\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[16,19]},"
              "\"__metadata__\":{\"format\":\"pt\",\"alias:c\":\"a\"}}", D, TERN_OK, NULL, NULL);
    weights_t *w = NULL;
    CHECK(weights_load_safetensors(&w, p) == TERN_OK);
    if (w) {
        const tensor_t *a = weights_get(w, "a"), *c = weights_get(w, "c");
        CHECK(a && c == a && a->rank == 2 && a->shape[1] == 2 && ((const float *)a->data)[3] == 4.0f);
        CHECK(weights_metadata(w, "format") && !strcmp(weights_metadata(w, "format"), "pt"));
        weights_free(w);
    }
    /* float32 at an odd offset: copied to aligned memory, values intact */
    expect_st("unaligned", p, "{\"b\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[1,9]}}", D, TERN_OK, NULL, NULL);
    w = NULL;
    CHECK(weights_load_safetensors(&w, p) == TERN_OK);
    if (w) {
        const tensor_t *a = weights_get(w, "a");
        float want[2];
        memcpy(want, (const uint8_t *)(const float[]){1, 2, 3} + 1, 8);
        CHECK(a && (uintptr_t)a->data % 4 == 0 && !memcmp(a->data, want, 8));
        weights_free(w);
    }

    write_or_die(p, "\x10\0\0", 3);
    w = (weights_t *)(uintptr_t)1;
    expect_msg("3-byte file", weights_load_safetensors(&w, p), TERN_ERR_FORMAT, p, "header: file too short",
               (const char *)NULL);
    uint8_t big[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
    write_or_die(p, big, sizeof big);
    expect_msg("header length 2^63", weights_load_safetensors(&w, p), TERN_ERR_FORMAT, p,
               "header: length 9223372036854775807 exceeds the file", (const char *)NULL);
    expect_st("empty header", p, "", 0, TERN_ERR_FORMAT, "header: not a JSON object", NULL);
    expect_st("header garbage", p, "{\"a\":{\"dtype\":", D, TERN_ERR_FORMAT, "header: not a JSON object", NULL);
    expect_st("header a list", p, "[1,2]", D, TERN_ERR_FORMAT, "header: not a JSON object", NULL);
    expect_st("tensor not an object", p, "{\"a\":5}", D, TERN_ERR_FORMAT, "tensor 'a': not a JSON object", NULL);
    expect_st("dtype missing", p, "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", D, TERN_ERR_FORMAT,
              "tensor 'a': missing dtype", NULL);
    expect_st("dtype a number", p, "{\"a\":{\"dtype\":0,\"shape\":[1],\"data_offsets\":[0,4]}}", D, TERN_ERR_FORMAT,
              "tensor 'a': missing dtype", NULL);
    expect_st("dtype F64", p, "{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", D,
              TERN_ERR_UNSUPPORTED, "tensor 'a': dtype 'F64' is not supported", NULL);
    expect_st("shape missing", p, "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", D, TERN_ERR_FORMAT,
              "tensor 'a': missing shape", NULL);
    expect_st("negative dim", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,4]}}", D,
              TERN_ERR_FORMAT, "tensor 'a': invalid dimension 1", NULL);
    expect_st("fractional dim", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", D,
              TERN_ERR_FORMAT, "tensor 'a': invalid dimension 0", NULL);
    expect_st("string dim", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", D,
              TERN_ERR_FORMAT, "tensor 'a': invalid dimension 0", NULL);
    expect_st("rank 9", p, "{\"a\":{\"dtype\":\"I8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", D,
              TERN_ERR_FORMAT, "tensor 'a': rank 9 exceeds 8", NULL);
    expect_st("dims overflowing", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
              "\"data_offsets\":[0,0]}}", D, TERN_ERR_FORMAT, "tensor 'a': shape is too large", NULL);
    expect_st("offsets missing", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", D, TERN_ERR_FORMAT,
              "tensor 'a': missing data_offsets", NULL);
    expect_st("one offset", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", D, TERN_ERR_FORMAT,
              "tensor 'a': missing data_offsets", NULL);
    expect_st("three offsets", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", D,
              TERN_ERR_FORMAT, "tensor 'a': missing data_offsets", NULL);
    expect_st("begin > end", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", D, TERN_ERR_FORMAT,
              "tensor 'a': data_offsets [8, 4] out of the data section", NULL);
    expect_st("end past the data", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[17],\"data_offsets\":[0,68]}}", D,
              TERN_ERR_FORMAT, "tensor 'a': data_offsets [0, 68] out of the data section (64 bytes)", NULL);
    expect_st("negative offset", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", D,
              TERN_ERR_FORMAT, "tensor 'a': data_offsets", NULL);
    expect_st("string offset", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",4]}}", D,
              TERN_ERR_FORMAT, "tensor 'a': data_offsets", NULL);
    expect_st("huge offset", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1e300,4]}}", D,
              TERN_ERR_FORMAT, "tensor 'a': data_offsets", NULL);
    expect_st("size mismatch", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", D,
              TERN_ERR_FORMAT, "tensor 'a': 4 bytes stored but shape and dtype F32 need 8", NULL);
    expect_st("overlap", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", D, TERN_ERR_FORMAT,
              "tensor 'b': data overlaps tensor 'a'", NULL);
    expect_st("overlap inside", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", D, TERN_ERR_FORMAT,
              "data overlaps tensor", NULL);
    expect_st("empty tensors share an offset", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", D, TERN_OK, NULL, NULL);
    expect_st("duplicate key", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", D, TERN_ERR_FORMAT,
              "tensor 'a': duplicate name", NULL);
    expect_st("metadata not an object", p, "{\"__metadata__\":[1]}", D, TERN_ERR_FORMAT,
              "header: __metadata__ is not an object", NULL);
    expect_st("metadata value not a string", p, "{\"__metadata__\":{\"k\":1}}", D, TERN_ERR_FORMAT,
              "__metadata__ value of 'k' is not a string", NULL);
    expect_st("alias to a missing tensor", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"__metadata__\":{\"alias:x\":\"nope\"}}", D, TERN_ERR_FORMAT, "alias 'x' -> unknown 'nope'", NULL);
    expect_st("alias onto a tensor", p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
              "\"__metadata__\":{\"alias:b\":\"a\"}}", D, TERN_ERR_FORMAT, "alias 'b': name already used", NULL);

    /* a Tern model directory whose model.safetensors lost a tensor: named by the Transformer */
    mm_shape_t s = MM_TINY;
    mm_model_t m;
    mm_build(&m, &s);
    mm_remove(&m, "decoder/layer_0/attention/linear_2/bias"); /* optional: still loads */
    mm_remove(&m, "decoder/layer_0/attention/linear_2/weight");
    make_dir(dir, sizeof dir, "st-model");
    write_tern_dir(dir, &m, &s, NULL);
    file_in(p, sizeof p, dir, "model.safetensors");
    EXPECT_LOAD_FAIL("Tern model missing a tensor", dir, TERN_ERR_FORMAT, p,
                     "missing tensor 'decoder/layer_0/attention/linear_2/weight'");
    mm_free(&m);
}

/* ------------------------------------------------------------ real CTranslate2 models (--ct2-dir) */

/* Scans a valid model.bin (independently of the loader) into a layout and names. */
static int scan_ct2(const uint8_t *d, size_t n, mm_layout_t *L, char ***names_out) {
    size_t p = 0;
#define NEED(k) do { if (p + (k) > n) return -1; } while (0)
#define U32() (p += 4, (uint32_t)d[p - 4] | (uint32_t)d[p - 3] << 8 | (uint32_t)d[p - 2] << 16 | (uint32_t)d[p - 1] << 24)
#define U16() (p += 2, (uint32_t)d[p - 2] | (uint32_t)d[p - 1] << 8)
    memset(L, 0, sizeof *L);
    NEED(4);
    uint32_t version = U32();
    if (version >= 2) {
        NEED(2);
        uint32_t l = U16();
        NEED(l + 4);
        p += l + 4;
    }
    NEED(4);
    uint32_t count = U32();
    L->header_end = p;
    L->n = (int)count;
    L->rec = mm_xalloc(sizeof(size_t) * count);
    L->name_end = mm_xalloc(sizeof(size_t) * count);
    L->rank_at = mm_xalloc(sizeof(size_t) * count);
    L->dtype_at = mm_xalloc(sizeof(size_t) * count);
    L->size_at = mm_xalloc(sizeof(size_t) * count);
    L->data_at = mm_xalloc(sizeof(size_t) * count);
    L->rec_end = mm_xalloc(sizeof(size_t) * count);
    char **names = mm_xalloc(sizeof(char *) * count);
    *names_out = names;
    for (uint32_t k = 0; k < count; k++) {
        L->rec[k] = p;
        NEED(2);
        uint32_t l = U16();
        NEED(l);
        names[k] = mm_xalloc(l + 1);
        memcpy(names[k], d + p, l);
        p += l;
        L->name_end[k] = p;
        L->rank_at[k] = p;
        NEED(1);
        uint32_t rank = d[p++];
        uint64_t numel = 1;
        for (uint32_t r = 0; r < rank; r++) {
            NEED(4);
            numel *= U32();
        }
        L->dtype_at[k] = p;
        NEED(5);
        uint32_t tag = d[p++];
        L->size_at[k] = p;
        uint32_t sz = U32();
        uint64_t nbytes = version >= 4 ? sz : (uint64_t)sz * tag;
        (void)numel;
        L->data_at[k] = p;
        NEED(nbytes);
        p += nbytes;
        L->rec_end[k] = p;
    }
    L->alias_at = p;
    L->size = n;
#undef NEED
#undef U32
#undef U16
    return 0;
}

static void copy_file(const char *from, const char *to) {
    char *data;
    size_t n;
    if (file_read_all(from, &data, &n) != TERN_OK) return;
    write_or_die(to, data, n);
    free(data);
}

static void test_real_model(const char *src_dir) {
    char p[1024], dir[512];
    tern_model_t *tm = load_ok(src_dir, src_dir);
    tern_model_free(tm);
    file_in(p, sizeof p, src_dir, "model.bin");
    char *data;
    size_t n;
    if (file_read_all(p, &data, &n) != TERN_OK) {
        CHECK_MSG(0, "cannot read %s", p);
        return;
    }
    mm_layout_t L;
    char **names = NULL;
    CHECK_MSG(scan_ct2((const uint8_t *)data, n, &L, &names) == 0, "%s: cannot scan", p);
    make_dir(dir, sizeof dir, "real");
    static const char *side[] = {"config.json", "shared_vocabulary.json", "source_vocabulary.json",
                                 "target_vocabulary.json", "shared_vocabulary.txt", "source_vocabulary.txt",
                                 "target_vocabulary.txt"};
    for (size_t i = 0; i < sizeof side / sizeof side[0]; i++) {
        char a[1024], b[1024];
        file_in(a, sizeof a, src_dir, side[i]);
        file_in(b, sizeof b, dir, side[i]);
        unlink(b);
        if (file_exists(a)) copy_file(a, b);
    }
    /* cut points: every byte of the header and of each record's name, rank, dims, dtype and size
     * fields, the first, middle and last bytes of each tensor's data, every byte of the aliases */
    size_t cap = n + 16, nc = 0;
    size_t *cuts = mm_xalloc(sizeof(size_t) * cap);
    for (size_t c = 0; c < L.header_end; c++) cuts[nc++] = c;
    for (int k = 0; k < L.n; k++) {
        for (size_t c = L.rec[k]; c < L.data_at[k] && nc < cap; c++) cuts[nc++] = c;
        size_t len = L.rec_end[k] - L.data_at[k];
        if (len) {
            cuts[nc++] = L.data_at[k] + len / 2;
            cuts[nc++] = L.rec_end[k] - 1;
        }
    }
    for (size_t c = L.alias_at; c < n && nc < cap; c++) cuts[nc++] = c;
    int bad = sweep_truncation(src_dir, dir, (const uint8_t *)data, &L, (const char *const *)names, cuts, nc, 13);
    CHECK_MSG(bad == 0, "%s: %d of %zu cut points gave a wrong error", src_dir, bad, nc);
    printf("%s: %zu cut points of %zu bytes checked\n", src_dir, nc, n);

    /* corrupt fields of a tensor in the middle */
    uint8_t *x = malloc(n);
    int k = L.n / 2;
    char q[512];
    snprintf(q, sizeof q, "tensor '%s'", names[k]);
    memcpy(x, data, n);
    x[L.rank_at[k]] = 9;
    expect_ct2_bytes("real: rank 9", dir, x, n, TERN_ERR_FORMAT, q, "rank exceeds 8");
    memcpy(x, data, n);
    x[L.dtype_at[k]] = 7;
    expect_ct2_bytes("real: dtype 7", dir, x, n, TERN_ERR_FORMAT, q, NULL);
    memcpy(x, data, n);
    put_u32(x + L.size_at[k], (uint32_t)(L.rec_end[k] - L.data_at[k]) + 1);
    expect_ct2_bytes("real: byte count + 1", dir, x, n, TERN_ERR_FORMAT, q, NULL);
    free(x);
    free(cuts);
    for (int i = 0; i < L.n; i++) free(names[i]);
    free(names);
    mm_layout_free(&L);
    free(data);
}

int main(int argc, char **argv) {
    tern_set_log_level(TERN_LOG_QUIET);
    snprintf(tmp_root, sizeof tmp_root, "%s/tern-test-model-files-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 2;
    }
    if (argc >= 3 && !strcmp(argv[1], "--ct2-dir")) {
        for (int i = 2; i < argc; i++) test_real_model(argv[i]);
    } else {
        test_valid();
        test_deferred();
        test_truncation_ct2();
        test_truncation_safetensors();
        test_corrupt_ct2();
        test_mismatch();
        test_side_files();
        test_corrupt_safetensors();
    }
    remove_tree(tmp_root);
    return check_report("test_model_files");
}
