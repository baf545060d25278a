/*
 * transformer.c — Transformer forward pass for inference: encoder over a packed batch, decoder
 * one step at a time with a tree-shaped self-attention cache.
 *
 * Legend: N sentences, R decoder rows, P packed source tokens (sum of lengths), S padded source
 * length, T steps, d width, H heads, dh = d / H, F feed-forward width, V target vocabulary.
 */
#include "model/transformer.h"
#include "nn/attention.h"
#include "model/transformer_desc.h"
#include "nn/transformer.h"

#include "kernels/gemm_packed.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct transformer_state {
    const transformer_t *m;
    /* batch */
    int N, S, P;
    int *src_len, *src_off;    /* (N) */
    float **cross_kv;          /* [dec_layers] (P, 2d): per sentence, head-major (cross_head_major) */
    size_t cross_cap;          /* floats per layer allocated */
    /* rows */
    int R, t;                  /* live rows, steps done (of the state: transformer_step's t) */
    int rows_cap, t_cap;
    int *row_sent;             /* (rows_cap) */
    int *row_t, *tmp_t;        /* (rows_cap) steps done by each row (its position; all t unless
                                  rows were admitted later: transformer_admit) */
    int sent_cap;              /* src_len, src_off allocated (transformer_admit) */
    unsigned char *live;       /* (sent_cap) transformer_admit's scratch */
    int *path, *path_tmp;      /* (rows_cap, t_cap) slot ids */
    int *tmp_sent;
    int *chunk;                /* (rows_cap + 1) attention chunks of a step: the runs of up to
                                * ATT_GMAX adjacent rows of one sentence (decoder_workspace) */
    /* self-attention cache: slots of (d) keys and values per layer; slots no live row's path
     * reaches are reclaimed (compact_slots) before the cache grows */
    float **k_cache, **v_cache;
    int n_slots, slot_cap;
    int *slot_map;             /* (slot_cap) compact_slots' old -> new slot ids */
    /* SSRU decoder (m->dec_ssru): each row's cell state c of every layer, and set_rows' gather */
    float *ssru_c, *ssru_tmp;  /* (rows_cap, dec_layers, d) */
    /* workspace */
    float *x, *h, *big, *ctx, *scores, *raw;
    size_t x_cap, h_cap, big_cap, ctx_cap, scores_cap, raw_cap; /* in floats */
    nn_scratch_t lin_ws;       /* the linear layers' (int8 activations) and the encoder attention's */
    /* the output projection's pre-screen (transformer_set_argmax_only) and its workspace */
    int argmax_only;
    /* rows whose next argmax must not be ban_tok (transformer_set_argmax_ban): the next step only */
    const unsigned char *ban_rows;
    int ban_tok;
    /* tokens no row's argmax may be (transformer_set_argmax_never): until set again */
    const int *never;
    int n_never;
    void *scr_ws;
    size_t scr_ws_cap;
    /* target vocabulary restriction (transformer_set_vocab): the output projection's rows of the
     * candidates, gathered once per batch; vm.N == 0: the whole vocabulary */
    linear_t vm;
    float *vm_w, *vm_scale, *vm_bias;
    int8_t *vm_q;
    int32_t *vm_comp;
    int vm_cap;
    /* int8 where the GEMM is Tern's own (AVX2): vm's rows packed for it once per batch (NULL: none) */
    void *vm_pk;
    size_t vm_pk_cap, vm_pk_bytes;
    /* transformer_set_rows_apart: the decoder step's layers run each row alone, a GEMM of one row
     * per row (the SDL paper's unbatched baseline: every hypothesis its own forward); rows_now:
     * inside such a step */
    int rowwise, rows_now;
};

/* ------------------------------------------------------------------ profiling
 * Built with -DTERN_PROF (e.g. make BUILD=build-prof OPT="-O3 -DTERN_PROF"), the encoder and the
 * decoder step time their parts (thread CPU time; wall time with TERN_PROFILE_WALL set) and print
 * the sums at exit. Without it PROF(id, name, stmt) is just stmt. */
#ifdef TERN_PROF
#include <stdio.h>
#include <time.h>
static double prof_acc[32];
static const char *prof_name[32];
static double prof_now(void) {
    struct timespec ts;
    clock_gettime(getenv("TERN_PROFILE_WALL") ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static long prof_rows, prof_steps; /* decoder rows and steps run (GEMM rows: FLOP counts) */
static void prof_dump(void) {
    for (int i = 0; i < 32; i++)
        if (prof_name[i]) fprintf(stderr, "prof %-14s %8.3f s\n", prof_name[i], prof_acc[i]);
    fprintf(stderr, "prof decoder rows %ld in %ld steps\n", prof_rows, prof_steps);
}
static void prof_register(void) {
    static int done;
    if (!done) {
        done = 1;
        atexit(prof_dump);
    }
}
#define PROF(id, name, stmt)                                                                       \
    do {                                                                                           \
        double _t = prof_now();                                                                    \
        stmt;                                                                                      \
        prof_acc[id] += prof_now() - _t;                                                           \
        prof_name[id] = name;                                                                      \
        prof_register();                                                                           \
    } while (0)
#else
#define PROF(id, name, stmt) do { stmt; } while (0)
#endif

/* ------------------------------------------------------------------ small helpers */

static int grow(void **buf, size_t *cap, size_t need_bytes) {
    if (need_bytes <= *cap) return 0;
    size_t n = *cap ? *cap : 4096;
    while (n < need_bytes) n *= 2;
    void *p = aligned_alloc64(n);
    if (!p) return -1;
    aligned_free(*buf);
    *buf = p;
    *cap = n;
    return 0;
}

/* The self-attention cache grows by remapping its pages: no copy, and never two copies at once
 * (a beam batch's cache reaches hundreds of MB). NULL on failure, p then unchanged. */
static float *cache_resize(float *p, size_t old_bytes, size_t new_bytes) {
    void *q = p ? mremap(p, old_bytes, new_bytes, MREMAP_MAYMOVE)
                : mmap(NULL, new_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    /* transparent huge pages where the system offers them on request: far fewer page faults as a
     * batch fills the cache again (its pages are given back between batches, drop_pages) and
     * fewer TLB misses in the attention's scattered reads of the slots (a hint: failure is fine) */
    madvise(q, new_bytes, MADV_HUGEPAGE);
#endif
    return q;
}

/* Back from new_bytes to old_bytes (0: unmapped, NULL). Shrinking in place does not fail. */
static float *cache_shrink(float *p, size_t new_bytes, size_t old_bytes) {
    if (!old_bytes) {
        munmap(p, new_bytes);
        return NULL;
    }
    void *q = mremap(p, new_bytes, old_bytes, 0);
    return q == MAP_FAILED ? p : q;
}

/* Gives back the resident pages inside [p, p + bytes) (whole pages; ranges under 1 MB are left
 * alone). The memory stays allocated: a page written again is a fresh zero page. For workspaces
 * whose contents are dead and that the next user will fill before reading. */
static void drop_pages(void *p, size_t bytes) {
    if (!p || bytes < ((size_t)1 << 20)) return;
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return;
    uintptr_t a = ((uintptr_t)p + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
    uintptr_t b = ((uintptr_t)p + bytes) & ~((uintptr_t)pg - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

#define GROW_F(st, field, nfloats)                                                                 \
    do {                                                                                           \
        size_t _capb = (st)->field##_cap * sizeof(float);                                          \
        if (grow((void **)&(st)->field, &_capb, (size_t)(nfloats) * sizeof(float)))                \
            return tern_error(TERN_ERR_NOMEM, "transformer workspace: out of memory");             \
        (st)->field##_cap = _capb / sizeof(float);                                                 \
    } while (0)

/* Threads for a loop of n independent tasks: the intra-op threads of this translator, at most n. */
static int team_size(int n) {
    int t = kernels_get_num_threads();
    return t < n ? (t > 0 ? t : 1) : (n > 0 ? n : 1);
}

/* out (M, N) = inp (M, K) . W^T + bias: the layer's one forward (nn/dense.h). */
static tern_status_t linear(transformer_state_t *st, float *out, const float *inp, const linear_t *lin,
                            const void *pk, int M) {
    nn_dense_t d = nn_dense_of(lin, pk);
    if (st->rows_now && M > 1) { /* row by row (set_rows_apart): no row of a GEMM depends on the others */
        for (int r = 0; r < M; r++) {
            tern_status_t s = nn_dense_forward(out + (size_t)r * d.N, inp + (size_t)r * d.K, &d, 1, &st->lin_ws);
            if (s) return s;
        }
        return TERN_OK;
    }
    return nn_dense_forward(out, inp, &d, M, &st->lin_ws);
}

/* A token's input row: scale · embedding + position (float32 rows: the function training uses). */
static void embed_row(float *out, const embedding_t *e, int id, float scale, const float *pos) {
    if (e->w) {
        nn_embed_row(out, e->w + (size_t)id * e->d, scale, pos, e->d);
    } else if (e->pkw) { /* the same floats, gathered from the packed output projection (tied) */
        float r[256];
        const float *base = e->pkw + e->pk_off_n[id];
        for (int i0 = 0; i0 < e->d; i0 += 256) {
            int n = e->d - i0 < 256 ? e->d - i0 : 256;
            for (int i = 0; i < n; i++) r[i] = base[e->pk_off_k[i0 + i]];
            nn_embed_row(out + i0, r, scale, pos + i0, n);
        }
    } else if (e->q) {
        const int8_t *r = e->q + (size_t)id * e->d;
        float s = scale / e->scale[id];
        for (int i = 0; i < e->d; i++) out[i] = (float)r[i] * s + pos[i];
    } else { /* the same values, the row read from the packed output projection (tied) */
        float s = scale / e->scale[id];
        int8_t r[256];
        for (int i0 = 0; i0 < e->d; i0 += 256) {
            int n = e->d - i0 < 256 ? e->d - i0 : 256;
            if (linear_packed_row_s8(e->pk, id, i0, i0 + n, r)) memset(r, 0, sizeof r); /* not reached: checked at packing */
            for (int i = 0; i < n; i++) out[i0 + i] = (float)r[i] * s + pos[i0 + i];
        }
    }
}

static nn_norm_t norm_of(const layernorm_t *ln) { return (nn_norm_t){ln->gamma, ln->beta}; }

/* ------------------------------------------------------------------ state */

transformer_state_t *transformer_state_new(const transformer_t *m) {
    transformer_state_t *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->m = m;
    st->cross_kv = calloc((size_t)m->dec_layers, sizeof(float *));
    st->k_cache = calloc((size_t)m->dec_layers, sizeof(float *));
    st->v_cache = calloc((size_t)m->dec_layers, sizeof(float *));
    if (!st->cross_kv || !st->k_cache || !st->v_cache) {
        transformer_state_free(st);
        return NULL;
    }
    return st;
}

void transformer_state_free(transformer_state_t *st) {
    if (!st) return;
    for (int l = 0; st->m && l < st->m->dec_layers; l++) {
        if (st->cross_kv) aligned_free(st->cross_kv[l]);
        size_t bytes = (size_t)st->slot_cap * st->m->d * sizeof(float);
        if (st->k_cache && st->k_cache[l]) munmap(st->k_cache[l], bytes);
        if (st->v_cache && st->v_cache[l]) munmap(st->v_cache[l], bytes);
    }
    aligned_free(st->vm_w);
    aligned_free(st->vm_q);
    aligned_free(st->vm_pk);
    free(st->vm_scale);
    free(st->vm_bias);
    free(st->vm_comp);
    free(st->cross_kv);
    free(st->k_cache);
    free(st->v_cache);
    free(st->src_len);
    free(st->src_off);
    free(st->row_sent);
    free(st->chunk);
    free(st->path);
    free(st->path_tmp);
    free(st->tmp_sent);
    free(st->row_t);
    free(st->tmp_t);
    free(st->live);
    free(st->slot_map);
    free(st->ssru_c);
    free(st->ssru_tmp);
    aligned_free(st->x);
    aligned_free(st->h);
    aligned_free(st->big);
    aligned_free(st->raw);
    aligned_free(st->ctx);
    aligned_free(st->scores);
    nn_scratch_free(&st->lin_ws);
    aligned_free(st->scr_ws);
    free(st);
}

int transformer_source_len(const transformer_state_t *st) { return st->S; }

static tern_status_t ensure_rows(transformer_state_t *st, int R, int T) {
    if (R <= st->rows_cap && T <= st->t_cap) return TERN_OK;
    int rc = R > st->rows_cap ? R : st->rows_cap;
    int tc = st->t_cap ? st->t_cap : 64;
    while (tc < T) tc *= 2;
    int *path = malloc((size_t)rc * tc * sizeof(int));
    int *tmp = malloc((size_t)rc * tc * sizeof(int));
    int *sent = malloc((size_t)rc * sizeof(int));
    int *tsent = malloc((size_t)rc * sizeof(int));
    int *chunk = malloc(((size_t)rc + 1) * sizeof(int));
    int *rt = malloc((size_t)rc * sizeof(int));
    int *trt = malloc((size_t)rc * sizeof(int));
    size_t sw = st->m->dec_ssru ? (size_t)st->m->dec_layers * st->m->d : 0; /* SSRU state floats per row */
    float *sc = sw ? malloc((size_t)rc * sw * sizeof(float)) : NULL, *stmp = sw ? malloc((size_t)rc * sw * sizeof(float)) : NULL;
    if (!path || !tmp || !sent || !tsent || !chunk || !rt || !trt || (sw && (!sc || !stmp))) {
        free(path), free(tmp), free(sent), free(tsent), free(chunk), free(rt), free(trt), free(sc), free(stmp);
        return tern_error(TERN_ERR_NOMEM, "decoder rows: out of memory");
    }
    if (sw) {
        if (st->R) memcpy(sc, st->ssru_c, (size_t)st->R * sw * sizeof(float));
        free(st->ssru_c), free(st->ssru_tmp);
        st->ssru_c = sc, st->ssru_tmp = stmp;
    }
    for (int r = 0; r < st->R; r++) {
        memcpy(path + (size_t)r * tc, st->path + (size_t)r * st->t_cap, (size_t)st->row_t[r] * sizeof(int));
        sent[r] = st->row_sent[r];
        rt[r] = st->row_t[r];
    }
    free(st->path), free(st->path_tmp), free(st->row_sent), free(st->tmp_sent), free(st->chunk);
    free(st->row_t), free(st->tmp_t);
    st->chunk = chunk;
    st->path = path;
    st->path_tmp = tmp;
    st->row_sent = sent;
    st->tmp_sent = tsent;
    st->row_t = rt;
    st->tmp_t = trt;
    st->rows_cap = rc;
    st->t_cap = tc;
    return TERN_OK;
}

/* ------------------------------------------------------------------ encoder */

/* The weights of encoder layer l as the shared forward reads them (nn/transformer.h). */
static nn_encoder_layer_t encoder_layer_of(const transformer_t *m, int l) {
    const enc_layer_t *L = &m->enc[l];
    nn_encoder_layer_t w = {.ln_att = norm_of(&L->ln_attn), .ln_ffn = norm_of(&L->ln_ffn),
                            .qkv = nn_dense_of(&L->qkv, L->pk_qkv), .out = nn_dense_of(&L->attn_out, L->pk_attn_out),
                            .ffn1 = nn_dense_of(&L->ffn1, L->pk_ffn1), .ffn2 = nn_dense_of(&L->ffn2, L->pk_ffn2)};
    w.ffn1.act_packed = m->ffn1_relu_packed;
    return w;
}

/* The encoder over N sentences packed at offs (P tokens, the longest S): its output in st->x.
 * Each layer is nn_encoder_layer_forward, training's own, on a packed batch with four buffers:
 * the residual stream x, h, big (Q, K, V; the feed-forward's hidden rows) and ctx, the layer
 * norms' and sums' outputs placed where the value they overwrite is dead, so that every layer's
 * output lands in x again. */
static tern_status_t encoder_layers(transformer_state_t *st, const int *const *src, const int *src_len, const int *offs,
                                    int N, int P, int S) {
    const transformer_t *m = st->m;
    int d = m->d, F = m->F;
    tern_status_t s;
    size_t wide = (size_t)P * (size_t)(3 * d > F ? 3 * d : F);
    GROW_F(st, x, (size_t)P * d);
    GROW_F(st, h, (size_t)P * d);
    GROW_F(st, ctx, (size_t)P * d);
    GROW_F(st, big, wide);
    float *x = st->x, *h = st->h;
    float emb_scale = m->enc_scale_emb ? sqrtf((float)d) : 1.0f;
    for (int n = 0; n < N; n++)
        for (int i = 0; i < src_len[n]; i++) {
            int id = src[n][i];
            if (id < 0 || id >= m->src_vocab)
                return tern_error(TERN_ERR_INVALID_ARG, "encoder: token id %d out of range [0, %d)", id, m->src_vocab);
            float *row = x + (size_t)(offs[n] + i) * d;
            embed_row(row, &m->enc_emb, id, emb_scale, m->enc_pos + (size_t)i * d);
        }
    nn_batch_t bt = {.B = N, .S = S, .len = src_len, .off = offs};
    nn_tdims_t dims = {.C = d, .H = m->H, .F = F, .act = m->act, .eps = m->eps, .pre_norm = m->pre_norm};
    nn_tdrop_t nodrop = {0};
    /* pre-norm: LN(x) -> h, attention output -> h, h += x; LN(h) -> x, feed-forward output -> x,
     * x += h. post-norm: attention output -> h, h += x, LN(h) -> x; the same for the feed-forward */
    nn_encoder_acts_t a = {.ln1 = m->pre_norm ? h : x, .qkv = st->big, .ctx = st->ctx, .sum1 = h, .ln2 = x,
                           .h = st->big, .sum2 = m->pre_norm ? x : h};
    for (int l = 0; l < m->enc_layers; l++) {
        nn_encoder_layer_t w = encoder_layer_of(m, l);
        const float *y;
        PROF(0, "enc_layer", s = nn_encoder_layer_forward(&y, &a, x, &w, &bt, P, &dims, &nodrop, &st->lin_ws));
        if (s) return s;
        if (y != x) return tern_error(TERN_ERR_INTERNAL, "encoder layer %d: output not in place", l);
    }
    if (m->enc_ln.gamma) nn_layernorm_forward(x, NULL, NULL, x, m->enc_ln.gamma, m->enc_ln.beta, P, d, m->eps);
    return TERN_OK;
}

/* Room for P tokens of cross-attention keys and values per layer, the first keep of them kept. */
static tern_status_t cross_reserve(transformer_state_t *st, int P, int keep) {
    const transformer_t *m = st->m;
    size_t need = (size_t)P * 2 * m->d;
    if (need <= st->cross_cap) return TERN_OK;
    size_t cap = need * 2;
    float **nw = calloc((size_t)m->dec_layers, sizeof(float *));
    int ok = nw != NULL;
    for (int l = 0; ok && l < m->dec_layers; l++) ok = (nw[l] = aligned_alloc64(cap * sizeof(float))) != NULL;
    if (!ok) {
        for (int l = 0; nw && l < m->dec_layers; l++) aligned_free(nw[l]);
        free(nw);
        return tern_error(TERN_ERR_NOMEM, "encoder: out of memory");
    }
    for (int l = 0; l < m->dec_layers; l++) {
        if (keep > 0) memcpy(nw[l], st->cross_kv[l], (size_t)keep * 2 * m->d * sizeof(float));
        aligned_free(st->cross_kv[l]);
        st->cross_kv[l] = nw[l];
    }
    free(nw);
    st->cross_cap = cap;
    return TERN_OK;
}

/* Head-major order of a sentence's cross-attention keys and values: in its block of L positions
 * (L x 2d floats at its offset), head h's keys and values are L rows of 2 dh floats (key, then
 * value) at h · L · 2 dh. Copied from kv (L rows of 2d: the d keys, then the d values). One head of
 * a sentence is then one contiguous run that the hardware prefetchers follow; in position-major
 * order each of its 256-byte key or value slices sat on a 4 KB row of its own. */
static void cross_head_major(float *dst, const float *kv, int L, int d, int H) {
    int dh = d / H;
    for (int h = 0; h < H; h++)
        for (int j = 0; j < L; j++) {
            float *o = dst + ((size_t)h * L + j) * 2 * dh;
            memcpy(o, kv + (size_t)j * 2 * d + h * dh, (size_t)dh * sizeof(float));
            memcpy(o + dh, kv + (size_t)j * 2 * d + d + h * dh, (size_t)dh * sizeof(float));
        }
}

/* Cross-attention keys and values of every decoder layer for the n sentences (lengths len, P tokens
 * packed in order) of the encoder's output (st->x), written head-major (cross_head_major) from
 * token offset at on. */
static tern_status_t cross_project(transformer_state_t *st, int P, int at, const int *len, int n) {
    const transformer_t *m = st->m;
    int d = m->d;
    tern_status_t s;
    GROW_F(st, big, (size_t)P * 2 * d);
    for (int l = 0; l < m->dec_layers; l++) {
        PROF(5, "cross_kv", s = linear(st, st->big, st->x, &m->dec[l].cross_kv, m->dec[l].pk_cross_kv, P));
        if (s) return s;
        for (int i = 0, o = 0; i < n; o += len[i], i++)
            cross_head_major(st->cross_kv[l] + (size_t)(at + o) * 2 * d, st->big + (size_t)o * 2 * d, len[i], d, m->H);
    }
    return TERN_OK;
}

static tern_status_t ensure_sents(transformer_state_t *st, int N) {
    if (N <= st->sent_cap && st->src_len) return TERN_OK;
    int cap = st->sent_cap > 0 ? st->sent_cap : 16;
    while (cap < N) cap *= 2;
    int *len = realloc(st->src_len, (size_t)cap * sizeof(int));
    if (len) st->src_len = len;
    int *off = len ? realloc(st->src_off, (size_t)cap * sizeof(int)) : NULL;
    if (off) st->src_off = off;
    unsigned char *live = off ? realloc(st->live, (size_t)cap) : NULL;
    if (live) st->live = live;
    if (!live) return tern_error(TERN_ERR_NOMEM, "encoder: out of memory");
    st->sent_cap = cap;
    return TERN_OK;
}

tern_status_t transformer_encode(transformer_state_t *st, const int *const *src, const int *src_len, int N) {
    const transformer_t *m = st->m;
    int d = m->d;
    tern_status_t s;
    st->N = 0;
    if ((s = ensure_sents(st, N ? N : 1))) return s;
    st->S = 0;
    st->P = 0;
    for (int n = 0; n < N; n++) {
        if (src_len[n] < 1 || src_len[n] > m->enc_max_pos)
            return tern_error(TERN_ERR_INVALID_ARG, "encoder: source %d has length %d (must be 1..%d)",
                              n, src_len[n], m->enc_max_pos);
        st->src_len[n] = src_len[n];
        st->src_off[n] = st->P;
        st->P += src_len[n];
        if (src_len[n] > st->S) st->S = src_len[n];
    }
    st->N = N;
    int P = st->P;
    /* The previous batch's self-attention cache is dead (this batch starts from slot 0): its pages
     * go back before this batch's encoder workspace and cross-attention keys and values are
     * written, so the peak holds one of the two, not both. */
    for (int l = 0; l < m->dec_layers && st->slot_cap > 0; l++) {
        drop_pages(st->k_cache[l], (size_t)st->slot_cap * d * sizeof(float));
        drop_pages(st->v_cache[l], (size_t)st->slot_cap * d * sizeof(float));
    }
    if ((s = encoder_layers(st, src, src_len, st->src_off, N, P, st->S))) return s;
    /* Cross-attention keys and values of every decoder layer, projected once. */
    if ((s = cross_reserve(st, P, 0))) return s;
    if ((s = cross_project(st, P, 0, st->src_len, N))) return s;
    /* The encoder's activations are dead now (the cross-attention keys and values hold what the
     * decoder reads): their pages go back, so the decoder's caches do not grow on top of the
     * workspace of the batch's longest encoder pass (the decoder fills the few rows it uses). */
    drop_pages(st->x, st->x_cap * sizeof(float));
    drop_pages(st->h, st->h_cap * sizeof(float));
    drop_pages(st->ctx, st->ctx_cap * sizeof(float));
    drop_pages(st->big, st->big_cap * sizeof(float));
    drop_pages(st->scores, st->scores_cap * sizeof(float));
    drop_pages(st->lin_ws.p, st->lin_ws.cap);
    /* One decoder row per sentence. */
    st->t = 0;
    st->n_slots = 0;
    st->R = 0;
    if ((s = ensure_rows(st, N, 64))) return s;
    for (int n = 0; n < N; n++) st->row_sent[n] = n, st->row_t[n] = 0;
    if (m->dec_ssru) memset(st->ssru_c, 0, (size_t)N * m->dec_layers * d * sizeof(float)); /* c = 0 at step 0 */
    st->R = N;
    return TERN_OK;
}

tern_status_t transformer_admit(transformer_state_t *st, const int *const *src, const int *src_len, int n) {
    const transformer_t *m = st->m;
    int d = m->d, N0 = st->N;
    tern_status_t s;
    if (n <= 0) return TERN_OK;
    int Pn = 0, S = st->S, Sn = 0;
    for (int i = 0; i < n; i++) {
        if (src_len[i] < 1 || src_len[i] > m->enc_max_pos)
            return tern_error(TERN_ERR_INVALID_ARG, "encoder: source %d has length %d (must be 1..%d)", N0 + i,
                              src_len[i], m->enc_max_pos);
        Pn += src_len[i];
        if (src_len[i] > S) S = src_len[i];
        if (src_len[i] > Sn) Sn = src_len[i];
    }
    if ((s = ensure_sents(st, N0 + n))) return s;
    if ((s = ensure_rows(st, st->R + n, 1))) return s;
    /* the sentences no row reads any more give their keys and values back: the live ones move to
     * the front, in order (offsets increase with the sentence index: moving down never overwrites
     * a source) */
    memset(st->live, 0, (size_t)N0);
    for (int r = 0; r < st->R; r++) st->live[st->row_sent[r]] = 1;
    int P = 0;
    for (int j = 0; j < N0; j++) {
        if (!st->live[j]) {
            st->src_off[j] = -1;
            continue;
        }
        if (st->src_off[j] != P)
            for (int l = 0; l < m->dec_layers; l++)
                memmove(st->cross_kv[l] + (size_t)P * 2 * d, st->cross_kv[l] + (size_t)st->src_off[j] * 2 * d,
                        (size_t)st->src_len[j] * 2 * d * sizeof(float));
        st->src_off[j] = P;
        P += st->src_len[j];
    }
    st->P = P;
    /* the new sentences: encoded together (packed at 0 in the workspace), their keys and values
     * after the live ones' */
    for (int i = 0; i < n; i++) {
        st->src_len[N0 + i] = src_len[i];
        st->src_off[N0 + i] = i ? st->src_off[N0 + i - 1] + src_len[i - 1] : 0;
    }
    if ((s = encoder_layers(st, src, src_len, st->src_off + N0, n, Pn, Sn))) return s;
    if ((s = cross_reserve(st, P + Pn, P))) return s;
    if ((s = cross_project(st, Pn, P, src_len, n))) return s;
    for (int i = 0; i < n; i++) {
        st->src_off[N0 + i] += P;
        st->row_sent[st->R + i] = N0 + i;
        st->row_t[st->R + i] = 0;
        if (m->dec_ssru) memset(st->ssru_c + (size_t)(st->R + i) * m->dec_layers * d, 0, (size_t)m->dec_layers * d * sizeof(float));
    }
    st->P = P + Pn;
    st->S = S;
    st->N = N0 + n;
    st->R += n;
    return TERN_OK;
}

/* ------------------------------------------------------------------ decoder */

tern_status_t transformer_set_rows(transformer_state_t *st, const int *parent, const int *sent, int R) {
    int tmax = 0; /* the longest path (not st->t: rows admitted later have shorter ones) */
    for (int r = 0; r < st->R; r++) tmax = st->row_t[r] > tmax ? st->row_t[r] : tmax;
    tern_status_t s = ensure_rows(st, R, tmax + 1);
    if (s) return s;
    int tc = st->t_cap;
    for (int i = 0; i < R; i++) {
        if (parent[i] < 0 || parent[i] >= st->R || sent[i] < 0 || sent[i] >= st->N)
            return tern_error(TERN_ERR_INTERNAL, "set_rows: bad parent %d or sentence %d", parent[i], sent[i]);
        int t = st->row_t[parent[i]];
        memcpy(st->path_tmp + (size_t)i * tc, st->path + (size_t)parent[i] * tc, (size_t)t * sizeof(int));
        st->tmp_sent[i] = sent[i];
        st->tmp_t[i] = t;
        if (st->m->dec_ssru) { /* the row's SSRU states: its parent's */
            size_t sw = (size_t)st->m->dec_layers * st->m->d;
            memcpy(st->ssru_tmp + (size_t)i * sw, st->ssru_c + (size_t)parent[i] * sw, sw * sizeof(float));
        }
    }
    if (st->m->dec_ssru) {
        float *f = st->ssru_c;
        st->ssru_c = st->ssru_tmp;
        st->ssru_tmp = f;
    }
    int *p = st->path;
    st->path = st->path_tmp;
    st->path_tmp = p;
    p = st->row_sent;
    st->row_sent = st->tmp_sent;
    st->tmp_sent = p;
    p = st->row_t;
    st->row_t = st->tmp_t;
    st->tmp_t = p;
    st->R = R;
    return TERN_OK;
}

/* Moves the cache slots on the paths of the live rows (steps 0..t-1) to the front, in their
 * order, rewrites the paths, and returns the number kept. Slots of dropped hypotheses and finished
 * sentences go: a beam's rows share most of their prefixes, so this keeps far fewer slots than
 * rows × steps. Values are moved, never changed (the outputs stay bit for bit the same). */
static int compact_slots(transformer_state_t *st) {
    const transformer_t *m = st->m;
    int *map = st->slot_map, tc = st->t_cap, d = m->d;
    for (int i = 0; i < st->n_slots; i++) map[i] = -1;
    for (int r = 0; r < st->R; r++)
        for (int tau = 0; tau < st->row_t[r]; tau++) map[st->path[(size_t)r * tc + tau]] = 0;
    int kept = 0;
    for (int i = 0; i < st->n_slots; i++)
        if (map[i] == 0) map[i] = kept++;
    if (kept == st->n_slots) return kept;
    for (int l = 0; l < m->dec_layers; l++) {
        float *K = st->k_cache[l], *Vc = st->v_cache[l];
        for (int i = 0; i < st->n_slots; i++) /* map[i] <= i: moving down in order never overwrites a source */
            if (map[i] >= 0 && map[i] != i) {
                memcpy(K + (size_t)map[i] * d, K + (size_t)i * d, (size_t)d * sizeof(float));
                memcpy(Vc + (size_t)map[i] * d, Vc + (size_t)i * d, (size_t)d * sizeof(float));
            }
    }
    for (int r = 0; r < st->R; r++)
        for (int tau = 0; tau < st->row_t[r]; tau++) {
            int *p = &st->path[(size_t)r * tc + tau];
            *p = map[*p];
        }
    st->n_slots = kept;
    return kept;
}

/* Room for R more slots: reclaims unreachable slots first, and grows the cache (doubling) only
 * when the kept ones and R fill more than half of it (so a compaction frees at least half the
 * cache: its cost, a copy of each kept slot, stays below one slot copy per slot written). */
static tern_status_t ensure_slots(transformer_state_t *st, int R) {
    if (st->n_slots + R <= st->slot_cap) return TERN_OK;
    if (st->n_slots > 0 && compact_slots(st) + R <= st->slot_cap / 2) return TERN_OK;
    int need = st->n_slots + R;
    if (need <= st->slot_cap) return TERN_OK;
    const transformer_t *m = st->m;
    int cap = st->slot_cap ? st->slot_cap : 256;
    while (cap < need) cap *= 2;
    int *map = malloc((size_t)cap * sizeof(int));
    if (!map) return tern_error(TERN_ERR_NOMEM, "decoder cache: out of memory");
    size_t row = (size_t)m->d * sizeof(float), old = (size_t)st->slot_cap * row, new = (size_t)cap * row;
    for (int l = 0; l < m->dec_layers; l++) {
        float *k = cache_resize(st->k_cache[l], old, new);
        float *v = k ? cache_resize(st->v_cache[l], old, new) : NULL;
        if (k) st->k_cache[l] = k;
        if (v) st->v_cache[l] = v;
        if (!v) { /* undo: every layer keeps slot_cap slots */
            for (int j = 0; j <= l; j++) {
                if (j < l || k) st->k_cache[j] = cache_shrink(st->k_cache[j], new, old);
                if (j < l) st->v_cache[j] = cache_shrink(st->v_cache[j], new, old);
            }
            free(map);
            return tern_error(TERN_ERR_NOMEM, "decoder cache: out of memory");
        }
    }
    free(st->slot_map);
    st->slot_map = map;
    st->slot_cap = cap;
    return TERN_OK;
}

/* Per-step context of decoder_step's parts: the widths, the row count and the workspaces. */
typedef struct {
    transformer_state_t *st;
    int d, H, dh, R, t, nt, tc, base;
    int nchunk;             /* attention chunks (st->chunk[0..nchunk]: their first rows) */
    size_t sc_stride;       /* floats of one row of attention scores */
    size_t sc_rows;         /* rows of scores per thread: max(ATT_GMAX, H) */
    float qscale;
    float *x, *h, *ctx, *big, *scores;
    float *raw;             /* dec_raw_self_kv: q, k, v of the un-normed rows (R, 3d) */
} dstep_t;

/* Workspaces for R rows at step t (grown once, kept between steps). */
static tern_status_t decoder_workspace(transformer_state_t *st, int t, dstep_t *c) {
    const transformer_t *m = st->m;
    int d = m->d, F = m->F, R = st->R;
    tern_status_t s;
    int tmax = 0; /* the rows' largest step: t, or less when rows were admitted later */
    for (int r = 0; r < R; r++) tmax = st->row_t[r] > tmax ? st->row_t[r] : tmax;
    if (tmax >= m->dec_max_pos)
        return tern_error(TERN_ERR_INVALID_ARG, "decoder: step %d beyond the %d positions of the model", tmax, m->dec_max_pos);
    t = tmax;
    if ((s = ensure_rows(st, R, t + 1))) return s;
    if (!m->dec_ssru && (s = ensure_slots(st, R))) return s;
    size_t wide = (size_t)R * (size_t)(3 * d > F ? 3 * d : F);
    GROW_F(st, x, (size_t)R * d);
    GROW_F(st, h, (size_t)R * d);
    GROW_F(st, ctx, (size_t)R * d);
    GROW_F(st, big, wide);
    if (m->dec_raw_self_kv) GROW_F(st, raw, (size_t)R * 3 * d);
    /* Attention runs on chunks of up to ATT_GMAX adjacent rows of one sentence (the beams the
     * search keeps together: they read the same source keys and share their tree-cache prefix),
     * the chunks in parallel, each thread with its own scores (ATT_GMAX × max(t + 1, S)). */
    int nchunk = 0;
    for (int r = 0; r < R; r++)
        if (r == 0 || st->row_sent[r] != st->row_sent[r - 1] || r - st->chunk[nchunk - 1] == ATT_GMAX)
            st->chunk[nchunk++] = r;
    st->chunk[nchunk] = R;
    int nt = team_size(R > nchunk ? R : nchunk);
    size_t sc_stride = ((size_t)(t + 1 > st->S ? t + 1 : st->S) + 15) & ~(size_t)15;
    size_t sc_rows = m->H > ATT_GMAX ? (size_t)m->H : ATT_GMAX;
    GROW_F(st, scores, sc_stride * sc_rows * nt);
    *c = (dstep_t){.st = st, .d = d, .H = m->H, .dh = d / m->H, .R = R, .t = t, .nt = nt, .tc = st->t_cap,
                   .nchunk = nchunk,
                   .base = st->n_slots, .sc_stride = sc_stride, .sc_rows = sc_rows, .qscale = 1.0f / sqrtf((float)(d / m->H)),
                   .x = st->x, .h = st->h, .ctx = st->ctx, .big = st->big, .scores = st->scores,
                   .raw = m->dec_raw_self_kv ? st->raw : NULL};
    return TERN_OK;
}

/* The rows' inputs (embedding + position) and their new cache slots on their paths. */
static tern_status_t decoder_embed(const dstep_t *c, const int *tokens) {
    transformer_state_t *st = c->st;
    const transformer_t *m = st->m;
    int d = c->d;
    float emb_scale = m->dec_scale_emb ? sqrtf((float)d) : 1.0f;
    for (int r = 0; r < c->R; r++) {
        int t = st->row_t[r];
        float *row = c->x + (size_t)r * d;
        if (tokens[r] < 0 || tokens[r] >= m->tgt_vocab)
            return tern_error(TERN_ERR_INVALID_ARG, "decoder: token id %d out of range [0, %d)", tokens[r], m->tgt_vocab);
        const float *pos = m->dec_pos + (size_t)t * d;
        if (t == 0 && m->dec_zero_start) memcpy(row, pos, (size_t)d * sizeof(float));
        else embed_row(row, &m->dec_emb, tokens[r], emb_scale, pos);
        st->path[(size_t)r * c->tc + t] = c->base + r;
    }
    return TERN_OK;
}

/* Input of a sub-layer: the layer-normed rows (pre-norm, in h) or the rows themselves. */
static const float *sublayer_in(const dstep_t *c, const layernorm_t *ln) {
    const transformer_t *m = c->st->m;
    nn_norm_t n = norm_of(ln);
    return nn_sublayer_in(c->h, NULL, NULL, c->x, &n, c->R, c->d, m->eps, m->pre_norm);
}

/* Residual connection of a sub-layer's output (in h), then the post-norm: x in place. */
static void sublayer_out(const dstep_t *c, const layernorm_t *ln) {
    const transformer_t *m = c->st->m;
    nn_norm_t n = norm_of(ln);
    nn_sublayer_out(c->x, c->x, NULL, NULL, c->h, c->x, &n, c->R, c->d, m->eps, m->pre_norm, 0.0f, 0);
}

/* Masked self-attention of each row over the cached keys and values of its path (the tree
 * cache): this step's keys and values go into the rows' new slots; q, k, v in big (R, 3d).
 * (Row by row, all heads of a row together: grouping a sentence's beams over their common path
 * prefix (att_group) measured slower here — docs/benchmarks.md.) */
static void decoder_self_attention(const dstep_t *c, int l) {
    transformer_state_t *st = c->st;
    int d = c->d, dh = c->dh, H = c->H, R = c->R, nt = team_size(R);
    float *K = st->k_cache[l], *Vc = st->v_cache[l], *big = c->big;
    /* rows in turn, a few at a time: their paths differ in length (rows admitted at other steps) */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 4) if (nt > 1)
    for (int r = 0; r < R; r++) {
        /* this step's key and value into the row's new slot (base + r), by the thread that reads
         * it: no other row's path holds that slot */
        memcpy(K + (size_t)(c->base + r) * d, big + (size_t)r * 3 * d + d, (size_t)d * sizeof(float));
        memcpy(Vc + (size_t)(c->base + r) * d, big + (size_t)r * 3 * d + 2 * d, (size_t)d * sizeof(float));
        float *sc = c->scores + c->sc_stride * c->sc_rows * (size_t)omp_get_thread_num();
        const int *path = st->path + (size_t)r * c->tc;
        int t = st->row_t[r];
        float *q = big + (size_t)r * 3 * d;
        for (int i = 0; i < d; i++) q[i] *= c->qscale;
        if (c->raw && t > 0) { /* Marian: the un-normed rows' keys and values from step 1 on */
            memcpy(K + (size_t)(c->base + r) * d, c->raw + (size_t)r * 3 * d + d, (size_t)d * sizeof(float));
            memcpy(Vc + (size_t)(c->base + r) * d, c->raw + (size_t)r * 3 * d + 2 * d, (size_t)d * sizeof(float));
        }
        att_heads(c->ctx + (size_t)r * d, sc, c->sc_stride, q, K, Vc, path, (size_t)d, t + 1, H, dh);
        if (c->raw && t == 0) { /* step 0 attended to the normed row; later steps read the un-normed one */
            memcpy(K + (size_t)(c->base + r) * d, c->raw + (size_t)r * 3 * d + d, (size_t)d * sizeof(float));
            memcpy(Vc + (size_t)(c->base + r) * d, c->raw + (size_t)r * 3 * d + 2 * d, (size_t)d * sizeof(float));
        }
    }
}

/* Attention of each row over its sentence's encoder output (keys and values projected once per
 * batch, cross_kv); queries in big (R, d). With attn, the alignment layer's mean over heads. The
 * rows of a chunk (one sentence) read the keys and values together (att_group). */
static void decoder_cross_attention(const dstep_t *c, int l, float *attn) {
    transformer_state_t *st = c->st;
    const transformer_t *m = st->m;
    int d = c->d, dh = c->dh, H = c->H, nt = team_size(c->nchunk);
    const float *kv = st->cross_kv[l];
    int want_attn = attn && l == m->alignment_layer;
    int nheads_avg = m->alignment_heads ? m->alignment_heads : H;
    /* runs of chunks in turn (their sources differ in length), about 4 per thread: within a run
     * the next chunk is this thread's, so prefetching its sentence below pays */
#pragma omp parallel for num_threads(nt) schedule(dynamic, kernels_chunk(c->nchunk, nt, 4)) if (nt > 1)
    for (int ch = 0; ch < c->nchunk; ch++) {
        float *sc = c->scores + c->sc_stride * c->sc_rows * (size_t)omp_get_thread_num();
        int r0 = st->chunk[ch], g = st->chunk[ch + 1] - r0;
        int n = st->row_sent[r0], Ln = st->src_len[n], off = st->src_off[n];
        /* the next chunk's sentence (when it is another) comes into L2 head by head, each head's
         * part while this chunk computes the same head: spread over the chunk's work, where all at
         * once the prefetches stalled on each other (docs/benchmarks.md) */
        int n1 = ch + 1 < c->nchunk ? st->row_sent[st->chunk[ch + 1]] : n;
        for (int r = r0; r < r0 + g; r++) {
            float *q = c->big + (size_t)r * d;
            for (int i = 0; i < d; i++) q[i] *= c->qscale;
        }
        for (int hh = 0; hh < H; hh++) { /* head-major: cross_head_major */
            const float *Kb = kv + (size_t)off * 2 * d + (size_t)hh * Ln * 2 * dh;
            const float *Vb = Kb + dh;
            if (n1 != n)
                att_prefetch(kv + (size_t)st->src_off[n1] * 2 * d + (size_t)hh * st->src_len[n1] * 2 * dh, NULL,
                             (size_t)2 * dh, st->src_len[n1], 2 * dh);
            att_group(c->ctx + (size_t)r0 * d + hh * dh, (size_t)d, sc, c->sc_stride, c->big + (size_t)r0 * d + hh * dh,
                      (size_t)d, g, Kb, Vb, NULL, 0, (size_t)2 * dh, Ln, Ln, dh);
            if (want_attn && hh < nheads_avg) {
                float wgt = 1.0f / (float)nheads_avg;
                for (int u = 0; u < g; u++) {
                    float *a = attn + (size_t)(r0 + u) * st->S;
                    const float *su = sc + (size_t)u * c->sc_stride;
                    for (int j = 0; j < Ln; j++) a[j] += wgt * su[j];
                }
            }
        }
    }
}

/* The SSRU in place of layer l's self-attention (Marian's --dec-cell ssru: src/rnn/cells.h SSRU):
 * from big (R, 2d) = u | f of the sub-layer's input, each row's cell state c = sigmoid(f) c' +
 * (1 - sigmoid(f)) u replaces its previous c' (its own: set_rows gathered them), and h = relu(c) is
 * the sub-layer's output. */
static void decoder_ssru(const dstep_t *c, int l) {
    const transformer_t *m = c->st->m;
    int d = c->d;
    for (int r = 0; r < c->R; r++) {
        const float *u = c->big + (size_t)r * 2 * d, *f = u + d;
        float *cs = c->st->ssru_c + ((size_t)r * m->dec_layers + l) * d, *h = c->h + (size_t)r * d;
        for (int i = 0; i < d; i++) {
            float g = 1.0f / (1.0f + expf(-f[i]));
            cs[i] = g * cs[i] + (1.0f - g) * u[i];
            h[i] = cs[i] > 0.0f ? cs[i] : 0.0f;
        }
    }
}

/* One decoder layer on the rows x: self-attention (or SSRU), cross-attention, feed-forward. */
static tern_status_t decoder_layer(const dstep_t *c, int l, float *attn) {
    transformer_state_t *st = c->st;
    const dec_layer_t *L = &st->m->dec[l];
    int R = c->R;
    float *big = c->big, *h = c->h, *ctx = c->ctx;
    tern_status_t s;
    const float *in = sublayer_in(c, &L->ln_self);
    if (st->m->dec_ssru) {
        PROF(6, "dec_ssru", s = linear(st, big, in, &L->ssru, L->pk_ssru, R));
        if (s) return s;
        decoder_ssru(c, l);
    } else {
        PROF(6, "dec_qkv", s = linear(st, big, in, &L->qkv, L->pk_qkv, R));
        if (s) return s;
        if (c->raw && (s = linear(st, c->raw, c->x, &L->qkv, L->pk_qkv, R))) return s;
        PROF(7, "dec_selfattn", decoder_self_attention(c, l));
        PROF(8, "dec_selfout", s = linear(st, h, ctx, &L->self_out, L->pk_self_out, R));
        if (s) return s;
    }
    sublayer_out(c, &L->ln_self);

    in = sublayer_in(c, &L->ln_cross);
    PROF(9, "dec_crossq", s = linear(st, big, in, &L->cross_q, L->pk_cross_q, R));
    if (s) return s;
    PROF(10, "dec_crossattn", decoder_cross_attention(c, l, attn));
    PROF(11, "dec_crossout", s = linear(st, h, ctx, &L->cross_out, L->pk_cross_out, R));
    if (s) return s;
    sublayer_out(c, &L->ln_cross);

    in = sublayer_in(c, &L->ln_ffn);
    nn_dense_t f1 = nn_dense_of(&L->ffn1, L->pk_ffn1), f2 = nn_dense_of(&L->ffn2, L->pk_ffn2);
    f1.act_packed = st->m->ffn1_relu_packed;
    s = TERN_OK;
    if (st->rows_now) /* row by row: big is the one row's scratch */
        for (int r = 0; r < R && !s; r++)
            s = nn_ffn_forward(h + (size_t)r * c->d, NULL, big, in + (size_t)r * c->d, &f1, &f2, st->m->act, 0.0f, 0, 1,
                               &st->lin_ws);
    else PROF(12, "dec_ffn", s = nn_ffn_forward(h, NULL, big, in, &f1, &f2, st->m->act, 0.0f, 0, R, &st->lin_ws));
    if (s) return s;
    sublayer_out(c, &L->ln_ffn);
    return TERN_OK;
}

/* The output projection when only the argmax of each row is needed: the int8 pre-screen (exact
 * logits of the candidates, values below the row's largest elsewhere), or the float32 layer where
 * it declines. */
static tern_status_t screened_proj(transformer_state_t *st, float *logits, const float *inp, int R) {
    const transformer_t *m = st->m;
    if (st->rows_now && R > 1) { /* row by row (set_rows_apart) */
        for (int r = 0; r < R; r++) {
            tern_status_t s = screened_proj(st, logits + (size_t)r * m->tgt_vocab, inp + (size_t)r * m->d, 1);
            if (s) return s;
        }
        return TERN_OK;
    }
    if (grow(&st->scr_ws, &st->scr_ws_cap, linear_screen_workspace_size(m->screen, R)))
        return tern_error(TERN_ERR_NOMEM, "output projection screen workspace: out of memory");
    if (linear_screen_forward(logits, inp, m->screen, R, st->scr_ws) >= 0) return TERN_OK;
    return linear(st, logits, inp, &m->proj, m->pk_proj, R);
}

void transformer_set_argmax_only(transformer_state_t *st, int on) { st->argmax_only = on != 0; }

void transformer_set_rows_apart(transformer_state_t *st, int on) { st->rowwise = on != 0; }

int transformer_set_argmax_ban(transformer_state_t *st, int tok, const unsigned char *rows) {
    /* a screen's exact values are those of the packed layer: where the layer runs unpacked
     * (sgemm, last bits apart) a screened step would not give the full step's argmax bit for bit */
    if (st->m->screen && !st->m->pk_proj) return -1;
    st->ban_tok = tok;
    st->ban_rows = rows;
    return 0;
}

int transformer_set_argmax_never(transformer_state_t *st, const int *toks, int n) {
    if (n > 0 && ((st->m->screen && !st->m->pk_proj) || n > 8)) return -1;
    st->never = n > 0 ? toks : NULL;
    st->n_never = n > 0 ? n : 0;
    return 0;
}

/* After a screened projection: a banned row whose largest value is the banned token needs its
 * runner-up, which the screen does not give: that row's full logits (the float32 layer on it alone,
 * its values those of the whole layer's: no row of a GEMM depends on the others). */
static tern_status_t unscreen_banned(transformer_state_t *st, float *logits, const float *inp, int R) {
    const transformer_t *m = st->m;
    int V = m->tgt_vocab, d = m->d;
    for (int r = 0; r < R; r++) {
        int banned = st->ban_rows && st->ban_rows[r];
        if (!banned && !st->n_never) continue;
        const float *x = logits + (size_t)r * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (x[v] > x[best]) best = v;
        int out = banned && best == st->ban_tok;
        for (int i = 0; i < st->n_never && !out; i++) out = best == st->never[i];
        if (!out) continue;
        tern_status_t s = linear(st, logits + (size_t)r * V, inp + (size_t)r * d, &m->proj, m->pk_proj, 1);
        if (s) return s;
    }
    return TERN_OK;
}

static tern_status_t decoder_step(transformer_state_t *st, const int *tokens, int t, float *logits, float *attn);
tern_status_t transformer_step(transformer_state_t *st, const int *tokens, int t, float *logits, float *attn) {
    tern_status_t s;
#ifdef TERN_PROF
    prof_rows += st->R, prof_steps++;
#endif
    st->rows_now = st->rowwise;
    PROF(15, "step (total)", s = decoder_step(st, tokens, t, logits, attn));
    st->rows_now = 0;
    return s;
}

static tern_status_t decoder_step(transformer_state_t *st, const int *tokens, int t, float *logits, float *attn) {
    const transformer_t *m = st->m;
    tern_status_t s;
    if (t != st->t) return tern_error(TERN_ERR_INTERNAL, "decoder step %d, expected %d", t, st->t);
    dstep_t c;
    if ((s = decoder_workspace(st, t, &c))) return s;
    if ((s = decoder_embed(&c, tokens))) return s;
    if (attn) memset(attn, 0, (size_t)c.R * st->S * sizeof(float));
    for (int l = 0; l < m->dec_layers; l++)
        if ((s = decoder_layer(&c, l, attn))) return s;
    /* output projection (of the final layer norm's output where the model has one) */
    const float *out = c.x;
    if (m->dec_ln.gamma) {
        nn_layernorm_forward(c.h, NULL, NULL, c.x, m->dec_ln.gamma, m->dec_ln.beta, c.R, c.d, m->eps);
        out = c.h;
    }
    if (st->vm.N) PROF(14, "proj", s = linear(st, logits, out, &st->vm, st->vm_pk_bytes ? st->vm_pk : NULL, c.R));
    else if (st->argmax_only && m->screen) {
        PROF(14, "proj", s = screened_proj(st, logits, out, c.R));
        if (!s && (st->ban_rows || st->n_never)) s = unscreen_banned(st, logits, out, c.R);
    }
    else {
#ifdef TERN_PROF
        double t0 = prof_now(); /* TERN_PROF_ROWS set: each projection's rows and seconds on stderr */
#endif
        PROF(14, "proj", s = linear(st, logits, out, &m->proj, m->pk_proj, c.R));
#ifdef TERN_PROF
        if (getenv("TERN_PROF_ROWS")) fprintf(stderr, "projrows %d %.6f\n", c.R, prof_now() - t0);
#endif
    }
    if (s) return s;
    st->ban_rows = NULL;
    if (!m->dec_ssru) st->n_slots += c.R;
    for (int r = 0; r < c.R; r++) st->row_t[r]++;
    st->t = t + 1;
    return TERN_OK;
}

/* ------------------------------------------------------------------ vocabulary restriction */

tern_status_t transformer_set_vocab(transformer_state_t *st, const int *ids, int n) {
    const transformer_t *m = st->m;
    const linear_t *P = &m->proj;
    st->vm_pk_bytes = 0;
    if (n <= 0 || !ids) {
        st->vm.N = 0;
        return TERN_OK;
    }
    if (P->kind == WEIGHT_F32 ? !P->w : !P->q)
        return tern_error(TERN_ERR_UNSUPPORTED, "the output projection was packed and its plain weights given back: "
                                                "load the model with the vocabulary map (tern_model_options_t.vmap)");
    const int K = P->K;
    if (n > st->vm_cap) {
        aligned_free(st->vm_w);
        aligned_free(st->vm_q);
        free(st->vm_scale);
        free(st->vm_bias);
        free(st->vm_comp);
        st->vm_w = NULL, st->vm_q = NULL, st->vm_scale = st->vm_bias = NULL, st->vm_comp = NULL;
        st->vm_cap = 0;
        int ok = 1;
        if (P->kind == WEIGHT_F32) ok &= (st->vm_w = aligned_alloc64((size_t)n * K * sizeof(float))) != NULL;
        else {
            ok &= (st->vm_q = aligned_alloc64((size_t)n * K)) != NULL;
            ok &= (st->vm_scale = malloc((size_t)n * sizeof(float))) != NULL;
            ok &= (st->vm_comp = malloc((size_t)n * sizeof(int32_t))) != NULL;
        }
        if (P->bias) ok &= (st->vm_bias = malloc((size_t)n * sizeof(float))) != NULL;
        if (!ok) return tern_error(TERN_ERR_NOMEM, "vocabulary restriction to %d pieces: out of memory", n);
        st->vm_cap = n;
    }
    linear_t *L = &st->vm;
    memset(L, 0, sizeof *L);
    L->kind = P->kind;
    L->K = K;
    for (int i = 0; i < n; i++) {
        int id = ids[i];
        if (id < 0 || id >= P->N || (i && id <= ids[i - 1]))
            return tern_error(TERN_ERR_INVALID_ARG, "vocabulary restriction: id %d at %d (ids must be increasing, "
                                                    "in [0, %d))", id, i, P->N);
        if (P->kind == WEIGHT_F32) memcpy(st->vm_w + (size_t)i * K, P->w + (size_t)id * K, (size_t)K * sizeof(float));
        else {
            memcpy(st->vm_q + (size_t)i * K, P->q + (size_t)id * K, (size_t)K);
            st->vm_scale[i] = P->scale[id];
        }
        if (P->bias) st->vm_bias[i] = P->bias[id];
    }
    L->N = n;
    L->w = st->vm_w;
    L->q = st->vm_q;
    L->scale = st->vm_scale;
    L->bias = P->bias ? st->vm_bias : NULL;
    /* The gathered rows packed once per batch, where that gives the kernel the whole projection
     * runs on: float32 on Tern's panels (then a map holding every piece gives the same logits, bit
     * for bit, as no map: one FMA chain per output), int8 on Tern's AVX2 kernel (packing costs one
     * pass over the rows, less than one step's product on them; oneDNN's packed form is not made
     * per batch: it would make kernels for every restricted size). */
    size_t bytes = 0;
    if (P->kind == WEIGHT_S8) {
        linear_prepare(L, st->vm_comp);
        if (linear_int8_packs_own()) bytes = linear_packed_size_s8(L);
    } else if (gemm_packed_f32_is_tern(P->N, K)) {
        bytes = gemm_packed_size_tern(n, K);
    }
    if (bytes > st->vm_pk_cap) {
        aligned_free(st->vm_pk);
        st->vm_pk_cap = 0;
        if (!(st->vm_pk = aligned_alloc64(bytes)))
            return tern_error(TERN_ERR_NOMEM, "vocabulary restriction to %d pieces: out of memory", n);
        st->vm_pk_cap = bytes;
    }
    int packed = bytes && (P->kind == WEIGHT_S8 ? linear_pack_s8(st->vm_pk, L)
                                                : gemm_pack_linear_tern(st->vm_pk, st->vm_w, L->bias, n, K, 0)) == 0;
    if (packed) st->vm_pk_bytes = bytes;
    return TERN_OK;
}

/* ------------------------------------------------------------------ packed weights */

/* Registers p in the model's owned memory (freed by transformer_free). */
static int own_packed(transformer_t *m, void *p) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? m->cap_owned * 2 : 64;
        void **n = realloc(m->owned, (size_t)cap * sizeof *n);
        if (!n) return -1;
        m->owned = n;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = p;
    return 0;
}

/* Uses of a linear weight (float32 w or int8 q) by embeddings and layers: 1 when only its layer
 * reads it. */
static int weight_uses(const transformer_t *m, const void *w) {
#define U(l) (((const void *)(l).w == w) + ((const void *)(l).q == w))
    int n = U(m->enc_emb) + U(m->dec_emb) + U(m->proj);
    for (int l = 0; l < m->enc_layers; l++) {
        const enc_layer_t *L = &m->enc[l];
        n += U(L->qkv) + U(L->attn_out) + U(L->ffn1) + U(L->ffn2);
    }
    for (int l = 0; l < m->dec_layers; l++) {
        const dec_layer_t *L = &m->dec[l];
        n += U(L->qkv) + U(L->self_out) + U(L->cross_q) + U(L->cross_kv) + U(L->cross_out) + U(L->ffn1) + U(L->ffn2) +
             U(L->ssru);
    }
    return n;
#undef U
}

/* Gives back the plain weight p of a packed layer: to the weights table, or, for a converted copy
 * (float16 / bfloat16 / dequantized / quantized at load), to the model's own memory. */
static void release_plain(transformer_t *m, weights_t *w, const void *p) {
    for (int i = 0; i < m->n_owned; i++)
        if (m->owned[i] == p) {
            aligned_free(m->owned[i]);
            m->owned[i] = NULL;
            return;
        }
    weights_release(w, p);
}

/* Returns freed heap pages to the system (glibc keeps freed chunks below its mmap threshold, which
 * grows to the size of the tensors freed: without this the released weights stay resident). */
static void trim_heap(void) {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

/* int8: the weights packed once for the int8 GEMM of this CPU (Tern's gemm_s8v with AVX512_VNNI, or
 * oneDNN's matmul with TERN_INT8_PACKED=onednn; else Tern's exact AVX2 kernel gemm_s8p:
 * linear_pack_s8), only where nothing else reads the plain ones, or where the only other readers
 * are the embeddings of a tied projection and the layout is Tern's (they then read their rows from
 * the packed copy): the plain ones are given back, so the model never holds both (w NULL: the
 * caller keeps them; nothing is packed then). */
static tern_status_t pack_one_s8(transformer_t *m, weights_t *w, linear_t *lin, const void **out) {
    int uses = w && lin->q ? weight_uses(m, lin->q) : 0;
    /* an output projection tied to the embeddings: packed all the same where the packed layout is
     * Tern's, whose rows the embeddings then read (linear_packed_row_s8): one copy, and the
     * vocabulary projection on the packed kernel (plain, it re-packed on every call) */
    embedding_t *emb[2] = {&m->enc_emb, &m->dec_emb};
    int tied = 0;
    for (int i = 0; i < 2; i++)
        tied += emb[i]->q == lin->q && emb[i]->w == NULL && emb[i]->V == lin->N && emb[i]->d == lin->K;
    int ok = uses == 1 || (tied > 0 && uses == 1 + tied && linear_int8_packs_own());
    size_t bytes = ok ? linear_packed_size_s8(lin) : 0;
    if (!bytes) return TERN_OK;
    void *buf = aligned_alloc64(bytes);
    if (!buf || own_packed(m, buf)) {
        aligned_free(buf);
        return tern_error(TERN_ERR_NOMEM, "packing weights: out of memory");
    }
    if (linear_pack_s8(buf, lin) == 0) {
        int8_t probe;
        for (int i = 0; tied && i < 2; i++)
            if (emb[i]->q == lin->q) {
                if (linear_packed_row_s8(buf, 0, 0, 1, &probe))
                    return tern_error(TERN_ERR_INTERNAL, "packing a tied output projection: unreadable rows");
                emb[i]->pk = buf, emb[i]->q = NULL;
            }
        *out = buf;
        m->packed_bytes += bytes;
        if (m->last_q == lin->q) m->last_q = NULL, m->last_quantized = NULL;
        release_plain(m, w, lin->q);
        lin->q = NULL;
        trim_heap();
    }
    return TERN_OK;
}

/* TERN_PACK_SHARED_MB=N: a matrix read elsewhere too over N MB stays plain (default: none does).
 * Packing such a matrix holds it twice (NLLB-600M's tied 256k x 1024 projection: +1 GB at load);
 * plain, it runs on sgemm and greedy loses the int8 pre-screen wherever tokens are banned
 * (transformer_set_argmax_never): NLLB float32 greedy 36.7 -> 23.6 tokens/s, beam 4 15.4 -> 18.4. */
static size_t pack_shared_max(void) {
    const char *e = getenv("TERN_PACK_SHARED_MB");
    if (!e || !*e) return SIZE_MAX;
    long mb = strtol(e, NULL, 10);
    return (size_t)(mb < 0 ? 0 : mb) << 20;
}

static tern_status_t pack_one(transformer_t *m, weights_t *w, linear_t *lin, int relu, const void **out) {
    *out = NULL;
    if (lin->kind == WEIGHT_S8) return pack_one_s8(m, w, lin, out);
    if (lin->kind != WEIGHT_F32 || !lin->w) return TERN_OK;
    size_t bytes = gemm_packed_size(lin->N, lin->K);
    if (!bytes) return TERN_OK;
    int uses = weight_uses(m, lin->w), alone = uses == 1;
    /* An output projection tied to the embeddings: packed, its embeddings then read their rows from
     * the packed copy (gemm_packed_offsets: the same floats), so the plain rows are given back and
     * the model holds one copy. TERN_PACK_SHARED_MB keeps such a matrix plain instead (above). */
    embedding_t *emb[2] = {&m->enc_emb, &m->dec_emb};
    int tied = 0;
    for (int i = 0; i < 2; i++) tied += emb[i]->w == lin->w && emb[i]->V == lin->N && emb[i]->d == lin->K;
    int tied_only = !alone && uses == 1 + tied;
    if (!alone && bytes > pack_shared_max()) return TERN_OK;
    void *buf = aligned_alloc64(bytes);
    if (!buf || own_packed(m, buf)) {
        aligned_free(buf);
        return tern_error(TERN_ERR_NOMEM, "packing weights: out of memory");
    }
    if (gemm_pack_linear(buf, lin->w, lin->bias, lin->N, lin->K, relu) == 0) {
        *out = buf;
        m->packed_bytes += bytes;
        int64_t *ok = NULL, *on = NULL;
        if (w && tied_only) {
            ok = aligned_alloc64((size_t)lin->K * sizeof(int64_t));
            if (!ok || own_packed(m, ok)) { /* (what own_packed registered, the model frees) */
                aligned_free(ok);
                return tern_error(TERN_ERR_NOMEM, "packing weights: out of memory");
            }
            on = aligned_alloc64((size_t)lin->N * sizeof(int64_t));
            if (!on || own_packed(m, on)) {
                aligned_free(on);
                return tern_error(TERN_ERR_NOMEM, "packing weights: out of memory");
            }
            if (gemm_packed_offsets(buf, ok, on)) tied_only = 0; /* unreadable layout: both kept */
        }
        if (w && (alone || tied_only)) {
            size_t wb;
            const float *base = gemm_packed_weights(buf, &wb);
            for (int i = 0; tied_only && i < 2; i++)
                if (emb[i]->w == lin->w) emb[i]->w = NULL, emb[i]->pkw = base, emb[i]->pk_off_k = ok, emb[i]->pk_off_n = on;
            release_plain(m, w, lin->w);
            lin->w = NULL;
            trim_heap();
        }
    }
    return TERN_OK;
}

/* Whether the model reads memory p (one of its weights, scales, biases, tables). */
static int model_uses(const transformer_t *m, const void *p) {
#define USES_LIN(l) ((l).w == p || (const void *)(l).q == p || (l).scale == p || (const void *)(l).comp == p || (l).bias == p)
#define USES_LN(n) ((n).gamma == p || (n).beta == p)
    if (m->enc_emb.w == p || (const void *)m->enc_emb.q == p || m->enc_emb.scale == p || m->dec_emb.w == p ||
        (const void *)m->dec_emb.q == p || m->dec_emb.scale == p || m->enc_pos == p || m->dec_pos == p ||
        USES_LN(m->enc_ln) || USES_LN(m->dec_ln) || USES_LIN(m->proj))
        return 1;
    for (int l = 0; l < m->enc_layers; l++) {
        const enc_layer_t *L = &m->enc[l];
        if (USES_LN(L->ln_attn) || USES_LN(L->ln_ffn) || USES_LIN(L->qkv) || USES_LIN(L->attn_out) ||
            USES_LIN(L->ffn1) || USES_LIN(L->ffn2))
            return 1;
    }
    for (int l = 0; l < m->dec_layers; l++) {
        const dec_layer_t *L = &m->dec[l];
        if (USES_LN(L->ln_self) || USES_LN(L->ln_cross) || USES_LN(L->ln_ffn) || USES_LIN(L->qkv) ||
            USES_LIN(L->self_out) || USES_LIN(L->cross_q) || USES_LIN(L->cross_kv) || USES_LIN(L->cross_out) ||
            USES_LIN(L->ffn1) || USES_LIN(L->ffn2) || USES_LIN(L->ssru))
            return 1;
    }
    return 0;
#undef USES_LIN
#undef USES_LN
}

/* Gives back every large tensor the model does not read: float32 originals of layers packed or
 * quantized to int8 at load. */
static void release_unused(const transformer_t *m, weights_t *w) {
    for (int i = 0; i < weights_count(w); i++) {
        const tensor_t *t = weights_at(w, i);
        if (t->data && t->nbytes >= (1u << 20) && !model_uses(m, t->data)) weights_release(w, t->data);
    }
    weights_release_pending(w); /* read in place at load (quantized), never copied: the model holds none */
    trim_heap();
}

/* The float32 output projection's int8 pre-screen (kernels/screen.h), built after the projection
 * was packed (so the plain rows, given back then, and the screen never coexist: the load's peak
 * stays) from the rows the step reads: plain if they stayed, else packed. TERN_SCREEN=0 turns it off
 * (A/B runs). None for a projection kept for a vocabulary map (its rows are gathered per batch:
 * transformer_set_vocab). Out of memory, or weights that are not finite: no screen, the float32
 * layer runs as always. */
static void screen_build(transformer_t *m) {
    const char *env = getenv("TERN_SCREEN");
    if ((env && !strcmp(env, "0")) || m->keep_proj || m->proj.kind != WEIGHT_F32) return;
    m->screen = linear_screen_new(m->proj.w, m->proj.w ? NULL : m->pk_proj, m->proj.bias, m->proj.N, m->proj.K);
    if (m->screen) m->weight_bytes += linear_screen_bytes(m->screen);
}

tern_status_t transformer_pack(transformer_t *m, weights_t *w) {
    const char *env = getenv("TERN_GEMM_PACKED");
    if (env && !strcmp(env, "0")) {
        screen_build(m);
        if (w) release_unused(m, w);
        return TERN_OK;
    }
    tern_status_t s;
    int relu = m->act == ACT_RELU;
    m->ffn1_relu_packed = relu;
    for (int l = 0; l < m->enc_layers; l++) {
        enc_layer_t *L = &m->enc[l];
        if ((s = pack_one(m, w, &L->qkv, 0, &L->pk_qkv)) || (s = pack_one(m, w, &L->attn_out, 0, &L->pk_attn_out)) ||
            (s = pack_one(m, w, &L->ffn1, relu, &L->pk_ffn1)) || (s = pack_one(m, w, &L->ffn2, 0, &L->pk_ffn2)))
            return s;
    }
    for (int l = 0; l < m->dec_layers; l++) {
        dec_layer_t *L = &m->dec[l];
        if ((s = pack_one(m, w, &L->qkv, 0, &L->pk_qkv)) || (s = pack_one(m, w, &L->self_out, 0, &L->pk_self_out)) ||
            (s = pack_one(m, w, &L->cross_q, 0, &L->pk_cross_q)) ||
            (s = pack_one(m, w, &L->cross_kv, 0, &L->pk_cross_kv)) ||
            (s = pack_one(m, w, &L->cross_out, 0, &L->pk_cross_out)) ||
            (s = pack_one(m, w, &L->ffn1, relu, &L->pk_ffn1)) || (s = pack_one(m, w, &L->ffn2, 0, &L->pk_ffn2)) ||
            (s = pack_one(m, w, &L->ssru, 0, &L->pk_ssru)))
            return s;
    }
    if (!m->keep_proj && (s = pack_one(m, w, &m->proj, 0, &m->pk_proj))) return s;
    screen_build(m);
    if (w) release_unused(m, w);
    return TERN_OK;
}
