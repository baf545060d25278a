/*
 * data.c — the training data pipeline (see data.h): vocabularies and special tokens, the binary
 * token cache (streamed build, mapped reads, staleness by input hash), length filters, batches by
 * a token budget from length-sorted order, per-epoch seeded shuffles, a restorable iterator.
 *
 * Cache layout (little-endian; docs/training-data.md):
 *   0   char[8] "TERNDATA"      8  u32 version (1)       12 u32 header bytes (128)
 *   16  u64 input hash          24 u64 pairs (N)         32 u64 index offset (128)
 *   40  u64 tokens offset (128 + 16 N)                   48 u64 tokens (int32 count)
 *   56  u64 file size           64 u64 source unk        72 u64 target unk
 *   80  reserved, zero          120 u64 XXH3-64 of bytes 0..119
 *   index: N x {u64 first token; u32 source length; u32 target length}, pairs back to back
 *   tokens: int32 vocabulary ids; pair i = its source ids then its target ids
 */
#include "train/data.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define CACHE_MAGIC "TERNDATA"
#define CACHE_VERSION 1u
#define HDR_BYTES 128u
#define CHUNK 4096 /* line pairs encoded per round of the streaming build */

/* ------------------------------------------------------------ little-endian helpers */

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* splitmix64: the generator of the shuffles and the mixer of the tie-break keys. */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n), n >= 1, without bias (Lemire's multiply-and-reject). */
static uint64_t rand_below(uint64_t *s, uint64_t n) {
    uint64_t x = splitmix64(s);
    __uint128_t m = (__uint128_t)x * n;
    uint64_t l = (uint64_t)m;
    if (l < n) {
        uint64_t t = (0 - n) % n;
        while (l < t) {
            x = splitmix64(s);
            m = (__uint128_t)x * n;
            l = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

/* ------------------------------------------------------------ vocabularies */

static const char *find_file(char *buf, size_t n, const char *dir, const char *const *names) {
    for (int i = 0; names[i]; i++) {
        path_join(buf, n, dir, names[i]);
        if (file_exists(buf)) return buf;
    }
    return NULL;
}

void data_vocab_free(data_vocab_t *v) {
    if (!v) return;
    if (v->tgt_vocab != v->src_vocab) vocab_free(v->tgt_vocab);
    vocab_free(v->src_vocab);
    if (v->tgt_spm != v->src_spm) spm_free(v->tgt_spm);
    spm_free(v->src_spm);
    memset(v, 0, sizeof *v);
}

tern_status_t data_vocab_init(data_vocab_t *v, vocab_t *src_vocab, vocab_t *tgt_vocab, const char *src_spm,
                              const char *tgt_spm, const model_config_t *cfg, const char *pad_token) {
    memset(v, 0, sizeof *v);
    v->src_vocab = src_vocab;
    v->tgt_vocab = tgt_vocab ? tgt_vocab : src_vocab;
    tern_status_t st;
    if (!v->src_vocab) {
        data_vocab_free(v);
        return tern_error(TERN_ERR_INVALID_ARG, "data_vocab_init: no vocabulary");
    }
    if (cfg) v->cfg = *cfg;
    else model_config_defaults(&v->cfg);
    snprintf(v->pad_token, sizeof v->pad_token, "%s", pad_token ? pad_token : "<pad>");
    if (!src_spm) src_spm = tgt_spm;
    if (!tgt_spm) tgt_spm = src_spm;
    if (src_spm) {
        snprintf(v->src_spm_path, sizeof v->src_spm_path, "%s", src_spm);
        snprintf(v->tgt_spm_path, sizeof v->tgt_spm_path, "%s", tgt_spm);
        if ((st = spm_load(&v->src_spm, src_spm))) goto fail;
        if (!strcmp(src_spm, tgt_spm)) v->tgt_spm = v->src_spm;
        else if ((st = spm_load(&v->tgt_spm, tgt_spm))) goto fail;
    }
    v->src_bos = vocab_lookup(v->src_vocab, v->cfg.bos_token);
    v->src_eos = vocab_lookup(v->src_vocab, v->cfg.eos_token);
    v->src_unk = vocab_lookup(v->src_vocab, v->cfg.unk_token);
    v->tgt_start = vocab_lookup(v->tgt_vocab, v->cfg.decoder_start_token);
    v->tgt_eos = vocab_lookup(v->tgt_vocab, v->cfg.eos_token);
    v->tgt_unk = vocab_lookup(v->tgt_vocab, v->cfg.unk_token);
    v->pad_id = vocab_lookup(v->src_vocab, v->pad_token);
    int tpad = vocab_lookup(v->tgt_vocab, v->pad_token);
    if (v->tgt_start < 0 || v->tgt_eos < 0) {
        st = tern_error(TERN_ERR_MISMATCH, "the target vocabulary lacks the decoder start token '%s' or the "
                        "end token '%s'", v->cfg.decoder_start_token, v->cfg.eos_token);
        goto fail;
    }
    if ((v->cfg.add_source_bos && v->src_bos < 0) || (v->cfg.add_source_eos && v->src_eos < 0)) {
        st = tern_error(TERN_ERR_MISMATCH, "the source vocabulary lacks '%s' or '%s' (add_source_bos/eos)",
                        v->cfg.bos_token, v->cfg.eos_token);
        goto fail;
    }
    if (v->pad_id < 0 || tpad != v->pad_id) {
        st = tern_error(TERN_ERR_MISMATCH, "the padding token '%s' must be in both vocabularies with the same "
                        "id (source %d, target %d)", v->pad_token, v->pad_id, tpad);
        goto fail;
    }
    return TERN_OK;
fail:
    data_vocab_free(v);
    return st;
}

tern_status_t data_vocab_load(data_vocab_t *v, const char *dir) {
    static const char *const shared[] = {"shared_vocabulary.json", "shared_vocabulary.txt", NULL};
    static const char *const srcv[] = {"source_vocabulary.json", "source_vocabulary.txt", NULL};
    static const char *const tgtv[] = {"target_vocabulary.json", "target_vocabulary.txt", NULL};
    static const char *const srcs[] = {"source.spm", "sentencepiece.model", "spm.model", "source.model", NULL};
    static const char *const tgts[] = {"target.spm", "target.model", NULL};
    memset(v, 0, sizeof *v);
    char p[2048], q[2048];
    tern_status_t st;
    model_config_t cfg;
    model_config_defaults(&cfg);
    char pad[64] = "<pad>";
    path_join(p, sizeof p, dir, "config.json");
    if (file_exists(p)) {
        if ((st = model_config_load(&cfg, p))) return st;
        char *text;
        size_t size;
        if ((st = file_read_all(p, &text, &size))) return st;
        cJSON *root = cJSON_ParseWithLength(text, size);
        free(text);
        const cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "pad_token");
        if (pt && !cJSON_IsNull(pt)) {
            if (!cJSON_IsString(pt) || strlen(pt->valuestring) >= sizeof pad) {
                cJSON_Delete(root);
                return tern_error(TERN_ERR_FORMAT, "%s: \"pad_token\" must be a string (< 64 bytes)", p);
            }
            snprintf(pad, sizeof pad, "%s", pt->valuestring);
        }
        cJSON_Delete(root);
    }
    vocab_t *sv = NULL, *tv = NULL;
    if (find_file(p, sizeof p, dir, shared)) {
        if ((st = vocab_load(&sv, p))) return st;
        tv = sv;
    } else {
        if (!find_file(p, sizeof p, dir, srcv) || !find_file(q, sizeof q, dir, tgtv))
            return tern_error(TERN_ERR_IO, "%s: no vocabulary found (shared_vocabulary.json, or "
                              "source_vocabulary.json and target_vocabulary.json)", dir);
        if ((st = vocab_load(&sv, p))) return st;
        if ((st = vocab_load(&tv, q))) {
            vocab_free(sv);
            return st;
        }
    }
    char sp[2048], tp[2048];
    const char *s = find_file(sp, sizeof sp, dir, srcs), *t = find_file(tp, sizeof tp, dir, tgts);
    if ((st = data_vocab_init(v, sv, tv, s, t, &cfg, pad)) == TERN_ERR_MISMATCH)
        return tern_error_prefix(st, "%s", dir);
    /* the model's decoding defaults and never-generated tokens travel with its fine-tuned checkpoints */
    if (!st && file_exists(path_join(p, sizeof p, dir, "generation_config.json")))
        snprintf(v->generation_path, sizeof v->generation_path, "%s", p);
    return st;
}

/* Splits on ASCII whitespace and looks pieces up (pre-tokenized text). */
static tern_status_t lookup_pieces(const vocab_t *vocab, int unk, char **pieces, int np, int32_t **ids, int *n,
                                   int *n_unk) {
    int32_t *out = malloc(sizeof(int32_t) * (size_t)(np > 0 ? np : 1));
    if (!out) return tern_error(TERN_ERR_NOMEM, "out of memory");
    int u = 0;
    for (int i = 0; i < np; i++) {
        int id = vocab_lookup(vocab, pieces[i]);
        if (id < 0) {
            u++;
            id = unk >= 0 ? unk : 0;
        }
        out[i] = id;
    }
    *ids = out;
    *n = np;
    *n_unk = u;
    return TERN_OK;
}

tern_status_t data_vocab_encode(const data_vocab_t *v, int side, const char *text, size_t len, int32_t **ids,
                                int *n, int *n_unk) {
    *ids = NULL;
    *n = 0;
    *n_unk = 0;
    const spm_t *sp = side ? v->tgt_spm : v->src_spm;
    const vocab_t *vocab = side ? v->tgt_vocab : v->src_vocab;
    int unk = side ? v->tgt_unk : v->src_unk;
    char **pieces = NULL;
    int np = 0;
    tern_status_t st;
    if (sp) {
        if ((st = spm_encode(sp, text, len, &pieces, &np))) return st;
    } else {
        int count = 0;
        for (size_t i = 0; i < len;) {
            while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n')) i++;
            if (i >= len) break;
            count++;
            while (i < len && !(text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n')) i++;
        }
        pieces = malloc(sizeof(char *) * (size_t)(count + 1) + len + 1);
        if (!pieces) return tern_error(TERN_ERR_NOMEM, "out of memory");
        char *s = (char *)(pieces + count + 1);
        for (size_t i = 0; i < len;) {
            while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n')) i++;
            if (i >= len) break;
            pieces[np++] = s;
            while (i < len && !(text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n'))
                *s++ = text[i++];
            *s++ = 0;
        }
        pieces[np] = NULL;
    }
    st = lookup_pieces(vocab, unk, pieces, np, ids, n, n_unk);
    free(pieces);
    return st;
}

/* ------------------------------------------------------------ options */

data_options_t data_default_options(void) {
    data_options_t o;
    memset(&o, 0, sizeof o);
    o.max_src_len = 256;
    o.max_tgt_len = 256;
    o.max_ratio = 9.0f;
    o.threads = 0;
    return o;
}

data_batching_t data_default_batching(void) {
    data_batching_t b;
    memset(&b, 0, sizeof b);
    b.max_tokens = 4096;
    b.shuffle = 1;
    b.seed = 1;
    b.rank = 0;
    b.world = 1;
    return b;
}

/* ------------------------------------------------------------ input hash */

static tern_status_t hash_file_bytes(XXH3_state_t *h, const char *path) {
    mapped_file_t f;
    tern_status_t st = file_map(&f, path);
    if (st) return st;
    uint64_t d = XXH3_64bits(f.data, f.size), size = f.size;
    XXH3_64bits_update(h, &size, sizeof size);
    XXH3_64bits_update(h, &d, sizeof d);
    file_unmap(&f);
    return TERN_OK;
}

static void hash_vocab(XXH3_state_t *h, const vocab_t *v) {
    int64_t n = vocab_size(v);
    XXH3_64bits_update(h, &n, sizeof n);
    for (int i = 0; i < n; i++) {
        const char *t = vocab_token(v, i);
        XXH3_64bits_update(h, t, strlen(t) + 1);
    }
}

static tern_status_t input_hash(const char *src, const char *tgt, const data_vocab_t *v, uint64_t *out) {
    XXH3_state_t *h = XXH3_createState();
    if (!h) return tern_error(TERN_ERR_NOMEM, "out of memory");
    XXH3_64bits_reset(h);
    static const char tag[] = "tern-data-cache-1";
    XXH3_64bits_update(h, tag, sizeof tag);
    const char *files[2] = {src, tgt};
    tern_status_t st = TERN_OK;
    for (int i = 0; i < 2; i++) {
        struct stat s;
        if (stat(files[i], &s) != 0 || !S_ISREG(s.st_mode)) {
            st = tern_error(TERN_ERR_IO, "%s: cannot open: %s", files[i],
                            errno ? strerror(errno) : "not a regular file");
            goto done;
        }
        int64_t f[3] = {(int64_t)s.st_size, (int64_t)s.st_mtim.tv_sec, (int64_t)s.st_mtim.tv_nsec};
        XXH3_64bits_update(h, f, sizeof f);
    }
    for (int side = 0; side < 2; side++) {
        const char *sp = side ? v->tgt_spm_path : v->src_spm_path;
        int32_t has = sp[0] != 0;
        XXH3_64bits_update(h, &has, sizeof has);
        if (has && (st = hash_file_bytes(h, sp))) goto done;
        hash_vocab(h, side ? v->tgt_vocab : v->src_vocab);
    }
    *out = XXH3_64bits_digest(h);
done:
    XXH3_freeState(h);
    return st;
}

/* ------------------------------------------------------------ cache build (streaming) */

static tern_status_t count_lines(const char *path, int64_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return tern_error(TERN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    static const size_t BUF = 1 << 20;
    char *buf = malloc(BUF);
    if (!buf) {
        fclose(f);
        return tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
    }
    int64_t lines = 0;
    char last = '\n';
    size_t r;
    while ((r = fread(buf, 1, BUF, f)) > 0) {
        for (const char *p = buf, *e = buf + r; (p = memchr(p, '\n', (size_t)(e - p))); p++) lines++;
        last = buf[r - 1];
    }
    int err = ferror(f);
    fclose(f);
    free(buf);
    if (err) return tern_error(TERN_ERR_IO, "%s: read failed", path);
    *n = lines + (last != '\n');
    return TERN_OK;
}

static tern_status_t pwrite_all(int fd, const void *data, size_t n, uint64_t off, const char *path) {
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return tern_error(TERN_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return TERN_OK;
}

/* Reads one line (without "\n" / "\r\n") into *buf; -1 at EOF. */
static ssize_t read_line(char **buf, size_t *cap, FILE *f) {
    ssize_t r = getline(buf, cap, f);
    if (r < 0) return -1;
    while (r > 0 && ((*buf)[r - 1] == '\n' || (*buf)[r - 1] == '\r')) r--;
    (*buf)[r] = 0;
    return r;
}

typedef struct {
    char *line[2];
    size_t cap[2];
    ssize_t len[2];
    int32_t *ids[2];
    int n[2], unk[2];
} slot_t;

/* One streaming build: the text files are read CHUNK pairs at a time, encoded in parallel, and
 * their index entries and tokens written in place into a temporary file, renamed at the end. */
typedef struct {
    const char *cache_path;
    const char *path[2];      /* source and target text */
    const data_vocab_t *v;
    int64_t pairs;
    char *tmp;                /* the temporary file's path */
    FILE *text[2];
    int fd;
    slot_t *slots;            /* (CHUNK) */
    uint8_t *index;           /* (CHUNK x 16) a chunk's index entries */
    int32_t *tok;             /* (tok_cap) a chunk's tokens */
    size_t tok_cap;
    uint64_t tokens_off, n_tokens, unk[2];
} cache_build_t;

static tern_status_t count_pairs(const char *src_path, const char *tgt_path, int64_t *pairs) {
    int64_t ns, nt;
    tern_status_t st;
    if ((st = count_lines(src_path, &ns)) || (st = count_lines(tgt_path, &nt))) return st;
    if (ns != nt)
        return tern_error(TERN_ERR_INPUT, "%s has %lld lines but %s has %lld", src_path, (long long)ns, tgt_path,
                          (long long)nt);
    *pairs = ns;
    return TERN_OK;
}

/* Allocates the chunk's buffers, opens both text files and creates the temporary file. */
static tern_status_t build_open(cache_build_t *b) {
    size_t pl = strlen(b->cache_path) + 32;
    b->tmp = malloc(pl);
    b->slots = calloc(CHUNK, sizeof *b->slots);
    b->index = malloc((size_t)CHUNK * 16);
    if (!b->tmp || !b->slots || !b->index) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", b->cache_path);
    snprintf(b->tmp, pl, "%s.tmp.%ld", b->cache_path, (long)getpid());
    for (int side = 0; side < 2; side++)
        if (!(b->text[side] = fopen(b->path[side], "rb")))
            return tern_error(TERN_ERR_IO, "%s: cannot open: %s", b->path[side], strerror(errno));
    b->fd = open(b->tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (b->fd < 0) return tern_error(TERN_ERR_IO, "%s: cannot create: %s", b->tmp, strerror(errno));
    return TERN_OK;
}

/* Reads the next chunk, *cnt pairs from pair `line` on, into the slots. */
static tern_status_t read_chunk(cache_build_t *b, int64_t line, int *cnt) {
    int n = 0;
    while (n < CHUNK && line + n < b->pairs) {
        slot_t *s = &b->slots[n];
        for (int side = 0; side < 2; side++) s->len[side] = read_line(&s->line[side], &s->cap[side], b->text[side]);
        if (s->len[0] < 0 || s->len[1] < 0)
            return tern_error(TERN_ERR_INPUT, "%s: ended at line %lld while encoding (changed while read?)",
                              s->len[0] < 0 ? b->path[0] : b->path[1], (long long)(line + n + 1));
        n++;
    }
    *cnt = n;
    return TERN_OK;
}

/* Encodes the chunk's cnt pairs (the first is pair `base`) on nth threads; the first error found
 * names its file and line. */
static tern_status_t encode_chunk(cache_build_t *b, int cnt, int64_t base, int nth) {
    tern_status_t err = TERN_OK;
    char msg[768] = "";
#pragma omp parallel for num_threads(nth) schedule(dynamic, 16)
    for (int i = 0; i < cnt; i++) {
        tern_status_t e;
#pragma omp atomic read
        e = err;
        if (e) continue;
        slot_t *s = &b->slots[i];
        for (int side = 0; side < 2; side++) {
            e = data_vocab_encode(b->v, side, s->line[side], (size_t)s->len[side], &s->ids[side], &s->n[side],
                                  &s->unk[side]);
            if (e) {
#pragma omp critical(data_build_error)
                if (!err) {
                    snprintf(msg, sizeof msg, "%s:%lld: %s", b->path[side], (long long)(base + i + 1),
                             tern_last_error());
                    err = e;
                }
                break;
            }
        }
    }
    return err ? tern_error(err, "%s", msg) : TERN_OK;
}

/* Writes the chunk's index entries and tokens (cnt pairs, the first is pair `line`) in place. */
static tern_status_t write_chunk(cache_build_t *b, int cnt, int64_t line) {
    size_t chunk_tokens = 0;
    for (int i = 0; i < cnt; i++) chunk_tokens += (size_t)b->slots[i].n[0] + (size_t)b->slots[i].n[1];
    if (chunk_tokens > b->tok_cap) {
        int32_t *nt2 = realloc(b->tok, chunk_tokens * sizeof *b->tok);
        if (!nt2) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", b->cache_path);
        b->tok = nt2;
        b->tok_cap = chunk_tokens;
    }
    size_t k = 0;
    for (int i = 0; i < cnt; i++) {
        slot_t *s = &b->slots[i];
        put_u64(b->index + 16 * i, b->n_tokens + k);
        put_u32(b->index + 16 * i + 8, (uint32_t)s->n[0]);
        put_u32(b->index + 16 * i + 12, (uint32_t)s->n[1]);
        for (int side = 0; side < 2; side++) {
            memcpy(b->tok + k, s->ids[side], sizeof *b->tok * (size_t)s->n[side]);
            k += (size_t)s->n[side];
            b->unk[side] += (uint64_t)s->unk[side];
            free(s->ids[side]);
            s->ids[side] = NULL;
        }
    }
    tern_status_t st;
    if ((st = pwrite_all(b->fd, b->index, (size_t)cnt * 16, HDR_BYTES + 16 * (uint64_t)line, b->tmp)) ||
        (st = pwrite_all(b->fd, b->tok, k * sizeof *b->tok, b->tokens_off + 4 * b->n_tokens, b->tmp)))
        return st;
    b->n_tokens += k;
    return TERN_OK;
}

/* Writes the header (the layout at the top of this file), syncs, and renames the file into place. */
static tern_status_t write_header_and_rename(cache_build_t *b, uint64_t hash) {
    uint64_t size = b->tokens_off + 4 * b->n_tokens;
    uint8_t h[HDR_BYTES];
    memset(h, 0, sizeof h);
    memcpy(h, CACHE_MAGIC, 8);
    put_u32(h + 8, CACHE_VERSION);
    put_u32(h + 12, HDR_BYTES);
    put_u64(h + 16, hash);
    put_u64(h + 24, (uint64_t)b->pairs);
    put_u64(h + 32, HDR_BYTES);
    put_u64(h + 40, b->tokens_off);
    put_u64(h + 48, b->n_tokens);
    put_u64(h + 56, size);
    put_u64(h + 64, b->unk[0]);
    put_u64(h + 72, b->unk[1]);
    put_u64(h + 120, XXH3_64bits(h, 120));
    tern_status_t st = pwrite_all(b->fd, h, sizeof h, 0, b->tmp);
    if (st) return st;
    if (ftruncate(b->fd, (off_t)size) != 0 || fsync(b->fd) != 0)
        return tern_error(TERN_ERR_IO, "%s: write failed: %s", b->tmp, strerror(errno));
    int rc = close(b->fd);
    b->fd = -1;
    if (rc != 0 || rename(b->tmp, b->cache_path) != 0)
        return tern_error(TERN_ERR_IO, "%s: cannot write: %s", b->cache_path, strerror(errno));
    return TERN_OK;
}

/* Frees the build; after a failure (st), removes the temporary file. */
static void build_close(cache_build_t *b, tern_status_t st) {
    if (b->fd >= 0) close(b->fd);
    if (st && b->tmp) unlink(b->tmp);
    for (int side = 0; side < 2; side++)
        if (b->text[side]) fclose(b->text[side]);
    for (int i = 0; b->slots && i < CHUNK; i++)
        for (int side = 0; side < 2; side++) {
            free(b->slots[i].line[side]);
            free(b->slots[i].ids[side]);
        }
    free(b->slots);
    free(b->index);
    free(b->tok);
    free(b->tmp);
}

static tern_status_t build_cache(const char *cache_path, const char *src_path, const char *tgt_path,
                                 const data_vocab_t *v, uint64_t hash, int threads) {
    cache_build_t b = {.cache_path = cache_path, .path = {src_path, tgt_path}, .v = v, .fd = -1};
    tern_status_t st = count_pairs(src_path, tgt_path, &b.pairs);
    if (st) return st;
    b.tokens_off = HDR_BYTES + 16 * (uint64_t)b.pairs;
    int nth = threads > 0 ? threads : omp_get_max_threads();
    st = build_open(&b);
    for (int64_t line = 0; !st && line < b.pairs;) {
        int cnt = 0;
        if (!(st = read_chunk(&b, line, &cnt)) && !(st = encode_chunk(&b, cnt, line, nth)))
            st = write_chunk(&b, cnt, line);
        line += cnt;
    }
    if (!st) st = write_header_and_rename(&b, hash);
    build_close(&b, st);
    return st;
}

/* ------------------------------------------------------------ corpus: mapping and filters */

struct data_corpus {
    char path[1024];
    mapped_file_t file;
    int64_t n;                 /* pairs */
    const uint8_t *index;      /* (n, 16 bytes) */
    const int32_t *tokens;
    uint64_t n_tokens;
    int add_bos, add_eos;      /* source special tokens */
    int src_bos, src_eos, tgt_start, tgt_eos, pad_id;
    int src_vocab, tgt_vocab;  /* sizes, to check ids */
    uint32_t *kept;            /* (n_kept) line numbers of the kept pairs, ascending */
    int64_t n_kept;
    uint8_t *kept_bits;        /* (n / 8 + 1) */
};

static void pair_at(const data_corpus_t *c, int64_t i, uint64_t *first, uint32_t *ns, uint32_t *nt) {
    const uint8_t *e = c->index + 16 * i;
    *first = get_u64(e);
    *ns = get_u32(e + 8);
    *nt = get_u32(e + 12);
}

/* Streaming: what the process has read of the map stays resident (the kernel maps pages around
 * each fault too) until it lets go of it. The walks over the index and the batch reads therefore
 * hand their pages back (MADV_DONTNEED: a read-only file mapping drops its page-table entries;
 * the page cache keeps the data, a later read maps it again), so that resident memory stays
 * bounded whatever the corpus's size. [p, p + n) widened to whole pages. */
static void release_range(const data_corpus_t *c, const void *p, size_t n) {
    if (!c->file.is_mmap || n == 0) return;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p & ~(pg - 1);
    uintptr_t e = ((uintptr_t)p + n + pg - 1) & ~(pg - 1), lo = (uintptr_t)c->file.data & ~(pg - 1);
    uintptr_t hi = ((uintptr_t)c->file.data + c->file.size + pg - 1) & ~(pg - 1);
    if (a < lo) a = lo;
    if (e > hi) e = hi;
    if (e > a) madvise((void *)a, e - a, MADV_DONTNEED);
}

static void release_all(const data_corpus_t *c) { release_range(c, c->file.data, c->file.size); }

#define RELEASE_PAIRS (1 << 20) /* index entries (16 MB) walked between two releases */
#define RELEASE_BATCHES 1       /* batches read between two releases of the whole map (fault-around maps 64 KB per touched page) */

/* Maps and checks the cache; 0 with *why set when it is stale or corrupt (to be rebuilt). */
static int map_cache(data_corpus_t *c, uint64_t hash, char *why, size_t nw, uint64_t unk[2]) {
    if (file_map(&c->file, c->path)) {
        snprintf(why, nw, "%s", tern_last_error());
        return 0;
    }
    const uint8_t *h = c->file.data;
    uint64_t size = c->file.size;
    if (size < HDR_BYTES || memcmp(h, CACHE_MAGIC, 8)) {
        snprintf(why, nw, "not a Tern data cache");
        return 0;
    }
    if (get_u32(h + 8) != CACHE_VERSION || get_u32(h + 12) != HDR_BYTES) {
        snprintf(why, nw, "cache version %u (this build writes %u)", get_u32(h + 8), CACHE_VERSION);
        return 0;
    }
    if (get_u64(h + 120) != XXH3_64bits(h, 120)) {
        snprintf(why, nw, "header checksum mismatch");
        return 0;
    }
    if (get_u64(h + 16) != hash) {
        snprintf(why, nw, "the text files, SentencePiece models or vocabularies changed");
        return 0;
    }
    uint64_t n = get_u64(h + 24), io = get_u64(h + 32), to = get_u64(h + 40), nt = get_u64(h + 48);
    if (io != HDR_BYTES || n > (size - HDR_BYTES) / 16 || to != HDR_BYTES + 16 * n || nt > (size - to) / 4 ||
        to + 4 * nt != size || get_u64(h + 56) != size) {
        snprintf(why, nw, "sizes in the header disagree with the file (%llu bytes)", (unsigned long long)size);
        return 0;
    }
    c->n = (int64_t)n;
    c->index = h + io;
    c->tokens = (const int32_t *)(h + to);
    c->n_tokens = nt;
    unk[0] = get_u64(h + 64);
    unk[1] = get_u64(h + 72);
    return 1;
}

/* The filter pass: also checks that the pairs are back to back (0 with *why when not). */
static int apply_filters(data_corpus_t *c, const data_options_t *o, data_stats_t *s, char *why, size_t nw) {
    free(c->kept);
    free(c->kept_bits);
    c->kept = malloc(sizeof *c->kept * (size_t)(c->n > 0 ? c->n : 1));
    c->kept_bits = calloc((size_t)(c->n / 8 + 1), 1);
    if (!c->kept || !c->kept_bits) {
        snprintf(why, nw, "out of memory");
        return -1;
    }
    uint64_t next = 0;
    c->n_kept = 0;
    int extra = c->add_bos + c->add_eos;
    for (int64_t i = 0; i < c->n; i++) {
        uint64_t first;
        uint32_t ns, nt;
        pair_at(c, i, &first, &ns, &nt);
        if (first != next || (uint64_t)ns + nt > c->n_tokens - first) {
            snprintf(why, nw, "index entry %lld is inconsistent", (long long)i);
            return 0;
        }
        next = first + ns + nt;
        if ((i + 1) % RELEASE_PAIRS == 0) release_range(c, c->index + 16 * (i + 1 - RELEASE_PAIRS), 16 * RELEASE_PAIRS);
        int64_t S = (int64_t)ns + extra, T = (int64_t)nt + 1;
        if (ns == 0 || nt == 0) s->empty++;
        else if (S > o->max_src_len || T > o->max_tgt_len) s->too_long++;
        else if (o->max_ratio > 0 && (double)TERN_MAX(ns, nt) > (double)o->max_ratio * (double)TERN_MIN(ns, nt))
            s->bad_ratio++;
        else {
            c->kept[c->n_kept++] = (uint32_t)i;
            c->kept_bits[i / 8] |= (uint8_t)(1u << (i % 8));
            s->src_tokens += S;
            s->tgt_tokens += T;
        }
    }
    if (next != c->n_tokens) {
        snprintf(why, nw, "the index covers %llu of %llu tokens", (unsigned long long)next,
                 (unsigned long long)c->n_tokens);
        return 0;
    }
    s->kept = c->n_kept;
    s->pairs = c->n;
    release_all(c);
    return 1;
}

void data_corpus_free(data_corpus_t *c) {
    if (!c) return;
    file_unmap(&c->file);
    free(c->kept);
    free(c->kept_bits);
    free(c);
}

tern_status_t data_corpus_open(data_corpus_t **out, const char *cache_path, const char *src_path,
                               const char *tgt_path, const data_vocab_t *v, const data_options_t *opt,
                               data_stats_t *stats) {
    *out = NULL;
    data_options_t o = opt ? *opt : data_default_options();
    if (o.max_src_len < 1 || o.max_tgt_len < 2 || o.max_src_len > 65535 || o.max_tgt_len > 65535 ||
        o.max_ratio < 0)
        return tern_error(TERN_ERR_INVALID_ARG, "data: max_src_len must be in 1..65535, max_tgt_len in "
                          "2..65535 and max_ratio >= 0 (got %d, %d, %g)", o.max_src_len, o.max_tgt_len,
                          (double)o.max_ratio);
    if (strlen(cache_path) >= sizeof((data_corpus_t *)0)->path)
        return tern_error(TERN_ERR_INVALID_ARG, "%s: path too long", cache_path);
    uint64_t hash = 0;
    tern_status_t st = input_hash(src_path, tgt_path, v, &hash);
    if (st) return st;
    data_corpus_t *c = calloc(1, sizeof *c);
    if (!c) return tern_error(TERN_ERR_NOMEM, "out of memory");
    snprintf(c->path, sizeof c->path, "%s", cache_path);
    c->add_bos = v->cfg.add_source_bos != 0;
    c->add_eos = v->cfg.add_source_eos != 0;
    c->src_bos = v->src_bos;
    c->src_eos = v->src_eos;
    c->tgt_start = v->tgt_start;
    c->tgt_eos = v->tgt_eos;
    c->pad_id = v->pad_id;
    c->src_vocab = vocab_size(v->src_vocab);
    c->tgt_vocab = vocab_size(v->tgt_vocab);
    data_stats_t s;
    char why[512] = "";
    uint64_t unk[2];
    double build_seconds = -1;
    for (int attempt = 0;; attempt++) {
        memset(&s, 0, sizeof s);
        int ok = map_cache(c, hash, why, sizeof why, unk);
        if (ok) {
            ok = apply_filters(c, &o, &s, why, sizeof why);
            if (ok < 0) {
                st = tern_error(TERN_ERR_NOMEM, "%s: out of memory", cache_path);
                goto fail;
            }
        }
        if (ok) break;
        file_unmap(&c->file);
        if (attempt > 0) {
            st = tern_error(TERN_ERR_FORMAT, "%s: the cache just built does not read back: %s", cache_path, why);
            goto fail;
        }
        if (file_exists(cache_path)) TERN_INFO("%s: rebuilding the data cache: %s", cache_path, why);
        double t0 = time_now();
        if ((st = build_cache(cache_path, src_path, tgt_path, v, hash, o.threads))) goto fail;
        build_seconds = time_now() - t0;
    }
    if (c->n > (int64_t)UINT32_MAX) {
        st = tern_error(TERN_ERR_UNSUPPORTED, "%s: %lld pairs: at most 2^32 - 1 are supported", cache_path,
                        (long long)c->n);
        goto fail;
    }
    s.rebuilt = build_seconds >= 0;
    s.build_seconds = build_seconds >= 0 ? build_seconds : 0;
    s.src_unk = (int64_t)unk[0];
    s.tgt_unk = (int64_t)unk[1];
    s.cache_bytes = c->file.size;
    if (stats) *stats = s;
    *out = c;
    return TERN_OK;
fail:
    data_corpus_free(c);
    return st;
}

int64_t data_corpus_pairs(const data_corpus_t *c) { return c->n; }

void data_corpus_pair(const data_corpus_t *c, int64_t i, const int32_t **src, int *ns, const int32_t **tgt,
                      int *nt) {
    uint64_t first;
    uint32_t a, b;
    pair_at(c, i, &first, &a, &b);
    *src = c->tokens + first;
    *ns = (int)a;
    *tgt = c->tokens + first + a;
    *nt = (int)b;
}

int data_corpus_kept(const data_corpus_t *c, int64_t i) {
    return i >= 0 && i < c->n && (c->kept_bits[i / 8] >> (i % 8)) & 1;
}

/* ------------------------------------------------------------ batches */

struct data_iter {
    const data_corpus_t *c;      /* the first corpus (named in messages) */
    const data_corpus_t **cs;    /* (n_corp) */
    double *w;                   /* (n_corp) weights */
    int n_corp;
    int mixed;                   /* 1: the plan is drawn again every epoch (several corpora or a weight
                                    other than 1); 0: one plan for every epoch */
    data_batching_t opt;
    uint64_t *order;        /* (cap) pairs in length order: corpus << 32 | line */
    int64_t *bstart;        /* (cap + 1) batch b = order[bstart[b] .. bstart[b + 1]) */
    int64_t cap;
    int64_t n_items;        /* pairs in this epoch's plan */
    int64_t *counts;        /* (n_corp) pairs of each corpus in this epoch's plan */
    uint64_t mix_hash;      /* mixed: the corpora's kept pairs and the weights */
    int64_t n_batches;
    int64_t epoch_len;      /* n_batches / world */
    int64_t *perm;          /* (n_batches) this epoch's batch order */
    int64_t perm_cap;
    data_iter_state_t st;
    uint64_t rng_next;      /* generator state after this epoch's shuffle */
    uint64_t served;        /* batches returned (the map's pages are released every RELEASE_BATCHES) */
    int max_B, max_S, max_T, max_src_tokens, max_tgt_tokens;
    int32_t *src, *src_len, *tgt_in, *tgt_out, *tgt_len, *corpus;
    int64_t *ids;
    data_batch_t batch;
};

typedef struct {
    uint64_t key;
    uint64_t idx;
} sort_rec_t;

static int rec_cmp(const void *a, const void *b) {
    const sort_rec_t *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static void pair_shape(const data_corpus_t *c, uint32_t i, int *S, int *T) {
    uint64_t first;
    uint32_t ns, nt;
    pair_at(c, i, &first, &ns, &nt);
    *S = (int)ns + c->add_bos + c->add_eos;
    *T = (int)nt + 1;
}

static void item_shape(const data_iter_t *it, uint64_t item, int *S, int *T) {
    pair_shape(it->cs[item >> 32], (uint32_t)item, S, T);
}

static void shuffle_epoch(data_iter_t *it) {
    for (int64_t i = 0; i < it->n_batches; i++) it->perm[i] = i;
    uint64_t r = it->st.rng;
    if (it->opt.shuffle)
        for (int64_t i = it->n_batches - 1; i > 0; i--) {
            int64_t j = (int64_t)rand_below(&r, (uint64_t)i + 1);
            int64_t t = it->perm[i];
            it->perm[i] = it->perm[j];
            it->perm[j] = t;
        }
    it->rng_next = r;
}

void data_iter_free(data_iter_t *it) {
    if (!it) return;
    free(it->cs);
    free(it->w);
    free(it->counts);
    free(it->order);
    free(it->bstart);
    free(it->perm);
    free(it->src);
    free(it->src_len);
    free(it->tgt_in);
    free(it->tgt_out);
    free(it->tgt_len);
    free(it->corpus);
    free(it->ids);
    free(it);
}

/* Room for n items in order/bstart and n batches in perm. */
static tern_status_t reserve(data_iter_t *it, int64_t n) {
    if (n > it->cap) {
        uint64_t *o = realloc(it->order, sizeof *o * (size_t)n);
        if (o) it->order = o;
        int64_t *b = o ? realloc(it->bstart, sizeof *b * (size_t)(n + 1)) : NULL;
        if (b) it->bstart = b;
        int64_t *p = b ? realloc(it->perm, sizeof *p * (size_t)n) : NULL;
        if (p) it->perm = p;
        if (!p) return tern_error(TERN_ERR_NOMEM, "%s: out of memory planning %lld batches", it->c->path, (long long)n);
        it->cap = n;
    }
    return TERN_OK;
}

/* The sort record of one drawn pair: by source length, target length, then a seeded hash of the
 * line (ties broken by line); copy > 0 and corpus > 0 only change the hash. */
static tern_status_t make_rec(const data_iter_t *it, int k, uint32_t i, uint64_t copy, sort_rec_t *rec) {
    const data_batching_t *o = &it->opt;
    const data_corpus_t *c = it->cs[k];
    int S, T;
    pair_shape(c, i, &S, &T);
    if (S > o->max_tokens || T > o->max_tokens)
        return tern_error(TERN_ERR_INVALID_ARG, "%s: line %u has %d source and %d target tokens, more than "
                          "max_tokens %d: raise max_tokens or lower the length limits", c->path, i + 1, S, T,
                          o->max_tokens);
    uint64_t r = o->seed ^ (0xd1b54a32d192ed03ull * ((uint64_t)i + 1));
    if (k || copy) r ^= 0x8cb92ba72f3d8dd7ull * (((uint64_t)k << 40 | copy) + 1);
    rec->key = (uint64_t)S << 48 | (uint64_t)T << 32 | (splitmix64(&r) >> 32);
    rec->idx = (uint64_t)k << 32 | i;
    return TERN_OK;
}

/* Pairs of corpus k in an epoch: floor(w) times every kept pair, plus round(frac(w) x kept) pairs
 * drawn without replacement. */
static int64_t mix_count(const data_iter_t *it, int k, int64_t *whole, int64_t *extra) {
    int64_t n = it->cs[k]->n_kept;
    double w = it->w[k], f = floor(w);
    *whole = (int64_t)f;
    *extra = (int64_t)llround((w - f) * (double)n);
    if (*extra > n) *extra = n;
    return *whole * n + *extra;
}

/* it->order for the epoch: every drawn pair in length order (order_by_length's keys). Mixed
 * plans draw the fractional part of each weight with selection sampling (Knuth's algorithm S:
 * exactly `extra` of the kept pairs, each subset equally likely) from a generator keyed by the
 * seed, the epoch and the corpus. */
/* A seeded bijection of 32-bit line numbers (and its inverse): the tie order of equal lengths in
 * a single corpus's plan, packed with the lengths into one 64-bit key that sorts in place. */
static uint32_t inv_odd(uint32_t a) {
    uint32_t x = a;
    for (int i = 0; i < 5; i++) x *= 2u - a * x;
    return x;
}
static uint32_t line_perm(uint32_t x, uint32_t salt) {
    x ^= salt;
    x *= 0x9e3779b1u;
    x ^= x >> 16;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    return x;
}
static uint32_t line_unperm(uint32_t y, uint32_t salt) {
    y ^= (y >> 13) ^ (y >> 26);
    y *= inv_odd(0x85ebca6bu);
    y ^= y >> 16;
    y *= inv_odd(0x9e3779b1u);
    return y ^ salt;
}

/* In-place ascending sort (glibc's qsort takes a buffer as large as the array): quicksort with a
 * median-of-three pivot, recursing into the smaller side, insertion sort below 16; heapsort when
 * the depth runs out. */
static void sift_u64(uint64_t *a, int64_t i, int64_t n) {
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && a[c + 1] > a[c]) c++;
        if (a[i] >= a[c]) return;
        uint64_t t = a[i];
        a[i] = a[c];
        a[c] = t;
        i = c;
    }
}

static void sort_u64_depth(uint64_t *a, int64_t n, int depth) {
    while (n > 16) {
        if (depth-- == 0) { /* heapsort */
            for (int64_t i = n / 2 - 1; i >= 0; i--) sift_u64(a, i, n);
            for (int64_t e = n - 1; e > 0; e--) {
                uint64_t t = a[0];
                a[0] = a[e];
                a[e] = t;
                sift_u64(a, 0, e);
            }
            return;
        }
        uint64_t x = a[0], y = a[n / 2], z = a[n - 1];
        uint64_t p = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        int64_t i = 0, j = n - 1;
        for (;;) {
            while (a[i] < p) i++;
            while (a[j] > p) j--;
            if (i >= j) break;
            uint64_t t = a[i];
            a[i] = a[j];
            a[j] = t;
            i++;
            j--;
        }
        int64_t left = j + 1; /* [0, left) <= p <= [left, n) */
        if (left < n - left) {
            sort_u64_depth(a, left, depth);
            a += left;
            n -= left;
        } else {
            sort_u64_depth(a + left, n - left, depth);
            n = left;
        }
    }
    for (int64_t i = 1; i < n; i++) {
        uint64_t v = a[i];
        int64_t j = i;
        for (; j > 0 && a[j - 1] > v; j--) a[j] = a[j - 1];
        a[j] = v;
    }
}

static void sort_u64(uint64_t *a, int64_t n) { sort_u64_depth(a, n, 128); }

static int64_t cut_batches(data_iter_t *it, int64_t n, const uint64_t *keys, size_t stride);

/* One corpus, weight 1: it->order sorted in place (8 bytes a pair, no side array). */
static tern_status_t order_single(data_iter_t *it) {
    const data_corpus_t *c = it->cs[0];
    const data_batching_t *o = &it->opt;
    int64_t n = c->n_kept;
    it->counts[0] = n;
    tern_status_t st = reserve(it, n > 0 ? n : 1);
    if (st) return st;
    uint64_t r = o->seed;
    uint32_t salt = (uint32_t)(splitmix64(&r) >> 32);
    for (int64_t j = 0; j < n; j++) {
        uint32_t i = c->kept[j];
        int S, T;
        pair_shape(c, i, &S, &T);
        if (S > o->max_tokens || T > o->max_tokens)
            return tern_error(TERN_ERR_INVALID_ARG, "%s: line %u has %d source and %d target tokens, more than "
                              "max_tokens %d: raise max_tokens or lower the length limits", c->path, i + 1, S, T,
                              o->max_tokens);
        it->order[j] = (uint64_t)S << 48 | (uint64_t)T << 32 | line_perm(i, salt);
        if ((j + 1) % RELEASE_PAIRS == 0) release_all(c);
    }
    sort_u64(it->order, n);
    it->n_batches = cut_batches(it, n, it->order, 1);
    for (int64_t j = 0; j < n; j++) it->order[j] = line_unperm((uint32_t)it->order[j], salt);
    it->n_items = n;
    return TERN_OK;
}

static tern_status_t order_items(data_iter_t *it, int64_t epoch) {
    if (!it->mixed) return order_single(it);
    int64_t n = 0;
    for (int k = 0; k < it->n_corp; k++) {
        int64_t whole, extra;
        it->counts[k] = mix_count(it, k, &whole, &extra);
        n += it->counts[k];
    }
    tern_status_t st = reserve(it, n > 0 ? n : 1);
    if (st) return st;
    sort_rec_t *rec = malloc(sizeof *rec * (size_t)(n > 0 ? n : 1));
    if (!rec) return tern_error(TERN_ERR_NOMEM, "%s: out of memory planning batches", it->c->path);
    int64_t m = 0;
    for (int k = 0; k < it->n_corp && !st; k++) {
        const data_corpus_t *c = it->cs[k];
        int64_t whole, extra;
        mix_count(it, k, &whole, &extra);
        for (int64_t copy = 0; copy < whole && !st; copy++)
            for (int64_t j = 0; j < c->n_kept && !st; j++) {
                st = make_rec(it, k, c->kept[j], (uint64_t)copy, &rec[m++]);
                if ((j + 1) % RELEASE_PAIRS == 0) release_all(c);
            }
        if (extra > 0 && !st) {
            uint64_t r = it->opt.seed ^ 0x9e3779b97f4a7c15ull * ((uint64_t)epoch + 1) ^
                         0xbf58476d1ce4e5b9ull * ((uint64_t)k + 1);
            splitmix64(&r);
            int64_t need = extra;
            for (int64_t j = 0; j < c->n_kept && need > 0 && !st; j++)
                if ((int64_t)rand_below(&r, (uint64_t)(c->n_kept - j)) < need) {
                    st = make_rec(it, k, c->kept[j], (uint64_t)whole, &rec[m++]);
                    need--;
                }
        }
    }
    if (!st) {
        qsort(rec, (size_t)n, sizeof *rec, rec_cmp);
        it->n_batches = cut_batches(it, n, &rec[0].key, sizeof *rec / sizeof(uint64_t));
        for (int64_t j = 0; j < n; j++) it->order[j] = rec[j].idx;
        it->n_items = n;
    }
    free(rec);
    return st;
}

/* Greedy cut, as fairseq's batch_by_size: a batch grows while (B + 1) * max(S, T) fits. Fills
 * it->bstart and the largest batch's sizes; returns the number of batches. keys[j * stride]: the
 * sort key of the j-th pair in length order (S << 48 | T << 32 | ...). */
static int64_t cut_batches(data_iter_t *it, int64_t n, const uint64_t *keys, size_t stride) {
    const data_batching_t *o = &it->opt;
    int64_t nb = 0, start = 0;
    int mS = 0, mT = 0;
    for (int64_t j = 0; j <= n; j++) {
        int S = 0, T = 0;
        if (j < n) { /* the sort key holds the shape: no read of the index */
            uint64_t key = keys[(size_t)j * stride];
            S = (int)(key >> 48);
            T = (int)(key >> 32 & 0xffff);
        }
        int nS = TERN_MAX(mS, S), nT = TERN_MAX(mT, T);
        int64_t cnt = j - start + 1;
        int cut = j == n || (cnt > 1 && (cnt * TERN_MAX(nS, nT) > o->max_tokens ||
                                         (o->max_sentences > 0 && cnt > o->max_sentences)));
        if (cut && j > start) {
            int B = (int)(j - start);
            it->bstart[nb++] = start;
            it->max_B = TERN_MAX(it->max_B, B);
            it->max_S = TERN_MAX(it->max_S, mS);
            it->max_T = TERN_MAX(it->max_T, mT);
            it->max_src_tokens = TERN_MAX(it->max_src_tokens, B * mS);
            it->max_tgt_tokens = TERN_MAX(it->max_tgt_tokens, B * mT);
            start = j;
            mS = S;
            mT = T;
        } else {
            mS = nS;
            mT = nT;
        }
    }
    it->bstart[nb] = n;
    return nb;
}

/* Plans epoch `epoch`: order, batches, n_batches and epoch_len (mixed plans: every epoch). */
static tern_status_t plan_epoch(data_iter_t *it, int64_t epoch) {
    tern_status_t st = order_items(it, epoch);
    if (st) return st;
    for (int k = 0; k < it->n_corp; k++) release_all(it->cs[k]);
    int64_t nb = it->n_batches;
    it->epoch_len = nb / it->opt.world;
    if (it->epoch_len < 1)
        return tern_error(TERN_ERR_INPUT, "%s: %lld pairs kept make %lld batches, too few for %d process(es)",
                          it->c->path, (long long)it->n_items, (long long)nb, it->opt.world);
    return TERN_OK;
}

/* The iterator's starting state: the plan's hash (fixed plans: its order and batch starts; mixed
 * ones: the corpora's kept pairs and the weights), the seed, epoch 0. */
static tern_status_t init_state(data_iter_t *it) {
    XXH3_state_t *h = XXH3_createState();
    if (!h) return tern_error(TERN_ERR_NOMEM, "out of memory");
    XXH3_64bits_reset(h);
    if (!it->mixed) { /* as the 32-bit line order of earlier builds hashed it */
        uint32_t buf[1024];
        for (int64_t j = 0; j < it->n_items;) {
            int m = 0;
            for (; m < 1024 && j < it->n_items; m++, j++) buf[m] = (uint32_t)it->order[j];
            XXH3_64bits_update(h, buf, sizeof *buf * (size_t)m);
        }
        XXH3_64bits_update(h, it->bstart, sizeof *it->bstart * (size_t)(it->n_batches + 1));
    } else {
        static const char tag[] = "tern-data-mix-1";
        XXH3_64bits_update(h, tag, sizeof tag);
        for (int k = 0; k < it->n_corp; k++) {
            XXH3_64bits_update(h, &it->cs[k]->n_kept, sizeof it->cs[k]->n_kept);
            XXH3_64bits_update(h, it->cs[k]->kept, sizeof *it->cs[k]->kept * (size_t)it->cs[k]->n_kept);
            XXH3_64bits_update(h, &it->w[k], sizeof it->w[k]);
        }
    }
    it->st.plan_hash = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    it->st.seed = it->opt.seed;
    it->st.epoch = 0;
    it->st.pos = 0;
    it->st.rng = it->opt.seed;
    it->st.n_batches = it->n_batches;
    return TERN_OK;
}

/* The buffers of the largest batch. */
static tern_status_t alloc_batch_buffers(data_iter_t *it) {
    size_t sb = (size_t)it->max_src_tokens, tb = (size_t)it->max_tgt_tokens, B = (size_t)it->max_B;
    it->src = malloc(sizeof(int32_t) * sb);
    it->tgt_in = malloc(sizeof(int32_t) * tb);
    it->tgt_out = malloc(sizeof(int32_t) * tb);
    it->src_len = malloc(sizeof(int32_t) * B);
    it->tgt_len = malloc(sizeof(int32_t) * B);
    it->corpus = malloc(sizeof(int32_t) * B);
    it->ids = malloc(sizeof(int64_t) * B);
    if (!it->src || !it->tgt_in || !it->tgt_out || !it->src_len || !it->tgt_len || !it->corpus || !it->ids)
        return tern_error(TERN_ERR_NOMEM, "%s: out of memory for batch buffers", it->c->path);
    return TERN_OK;
}

/* Mixed plans change every epoch: the buffers and the workspace are sized for any of them. A batch
 * of B > 1 pairs has B x max(S, T) <= max_tokens, one of a single pair S, T <= max_tokens; S and T
 * are at most the longest kept pair's; B is at most max_tokens over the shortest pair's max(S, T). */
static void mixed_bounds(data_iter_t *it) {
    const data_batching_t *o = &it->opt;
    int mS = 0, mT = 0, mn = INT32_MAX;
    for (int k = 0; k < it->n_corp; k++)
        for (int64_t j = 0; j < it->cs[k]->n_kept; j++) {
            int S, T;
            pair_shape(it->cs[k], it->cs[k]->kept[j], &S, &T);
            mS = TERN_MAX(mS, S);
            mT = TERN_MAX(mT, T);
            mn = TERN_MIN(mn, TERN_MAX(S, T));
        }
    for (int k = 0; k < it->n_corp; k++) release_all(it->cs[k]);
    if (mn == INT32_MAX) mn = 1;
    int B = TERN_MAX(1, o->max_tokens / mn);
    if (o->max_sentences > 0) B = TERN_MIN(B, o->max_sentences);
    it->max_B = TERN_MAX(it->max_B, B);
    it->max_S = TERN_MAX(it->max_S, mS);
    it->max_T = TERN_MAX(it->max_T, mT);
    it->max_src_tokens = TERN_MAX(it->max_src_tokens, TERN_MIN(o->max_tokens, B * mS));
    it->max_tgt_tokens = TERN_MAX(it->max_tgt_tokens, TERN_MIN(o->max_tokens, B * mT));
}

tern_status_t data_iter_new_mix(data_iter_t **out, const data_corpus_t *const *corpora, const double *weights,
                                int n_corpora, const data_batching_t *b) {
    *out = NULL;
    data_batching_t o = b ? *b : data_default_batching();
    if (o.max_tokens < 1 || o.max_sentences < 0 || o.world < 1 || o.rank < 0 || o.rank >= o.world)
        return tern_error(TERN_ERR_INVALID_ARG, "data: max_tokens must be >= 1, max_sentences >= 0 and "
                          "0 <= rank < world (got %d, %d, %d, %d)", o.max_tokens, o.max_sentences, o.rank, o.world);
    if (n_corpora < 1 || n_corpora > 65535)
        return tern_error(TERN_ERR_INVALID_ARG, "data: 1 to 65535 corpora (got %d)", n_corpora);
    for (int k = 0; k < n_corpora; k++) {
        double w = weights ? weights[k] : 1.0;
        if (!(w > 0) || !isfinite(w) || w > 1e6)
            return tern_error(TERN_ERR_INVALID_ARG, "%s: weight %g: a weight must be a positive real number "
                              "(at most 1e6)", corpora[k]->path, w);
    }
    data_iter_t *it = calloc(1, sizeof *it);
    if (!it) return tern_error(TERN_ERR_NOMEM, "out of memory");
    it->c = corpora[0];
    it->opt = o;
    it->n_corp = n_corpora;
    tern_status_t st = TERN_OK;
    it->cs = malloc(sizeof *it->cs * (size_t)n_corpora);
    it->w = malloc(sizeof *it->w * (size_t)n_corpora);
    it->counts = calloc((size_t)n_corpora, sizeof *it->counts);
    if (!it->cs || !it->w || !it->counts) {
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int k = 0; k < n_corpora; k++) {
        it->cs[k] = corpora[k];
        it->w[k] = weights ? weights[k] : 1.0;
    }
    it->mixed = n_corpora > 1 || it->w[0] != 1.0;
    if ((st = plan_epoch(it, 0))) goto fail;
    if (it->mixed) mixed_bounds(it);
    if ((st = init_state(it)) || (st = alloc_batch_buffers(it))) goto fail;
    shuffle_epoch(it);
    *out = it;
    return TERN_OK;
fail:
    data_iter_free(it);
    return st;
}

tern_status_t data_iter_new(data_iter_t **out, const data_corpus_t *c, const data_batching_t *b) {
    return data_iter_new_mix(out, &c, NULL, 1, b);
}

int data_iter_corpora(const data_iter_t *it) { return it->n_corp; }

int64_t data_iter_epoch_count(const data_iter_t *it, int k) {
    return k >= 0 && k < it->n_corp ? it->counts[k] : 0;
}

static tern_status_t fill_batch(data_iter_t *it, int64_t b) {
    int64_t s0 = it->bstart[b], s1 = it->bstart[b + 1];
    int B = (int)(s1 - s0), S = 0, T = 0;
    for (int64_t j = s0; j < s1; j++) {
        int s, t;
        item_shape(it, it->order[j], &s, &t);
        S = TERN_MAX(S, s);
        T = TERN_MAX(T, t);
    }
    data_batch_t *bt = &it->batch;
    bt->B = B;
    bt->S = S;
    bt->T = T;
    bt->pad_id = it->c->pad_id;
    bt->n_src_tokens = bt->n_tgt_tokens = 0;
    for (int r = 0; r < B; r++) {
        uint64_t item = it->order[s0 + r];
        const data_corpus_t *c = it->cs[item >> 32];
        uint32_t i = (uint32_t)item;
        const int32_t *sx, *tx;
        int ns, nt;
        data_corpus_pair(c, i, &sx, &ns, &tx, &nt);
        int32_t *srow = it->src + (size_t)r * S, *in = it->tgt_in + (size_t)r * T, *o = it->tgt_out + (size_t)r * T;
        int k = 0;
        if (c->add_bos) srow[k++] = c->src_bos;
        for (int q = 0; q < ns; q++) {
            if ((uint32_t)sx[q] >= (uint32_t)c->src_vocab)
                return tern_error(TERN_ERR_FORMAT, "%s: line %u: source id %d out of the vocabulary (%d)", c->path,
                                  i + 1, sx[q], c->src_vocab);
            srow[k++] = sx[q];
        }
        if (c->add_eos) srow[k++] = c->src_eos;
        it->src_len[r] = k;
        bt->n_src_tokens += k;
        for (; k < S; k++) srow[k] = c->pad_id;
        in[0] = c->tgt_start;
        for (int q = 0; q < nt; q++) {
            if ((uint32_t)tx[q] >= (uint32_t)c->tgt_vocab)
                return tern_error(TERN_ERR_FORMAT, "%s: line %u: target id %d out of the vocabulary (%d)", c->path,
                                  i + 1, tx[q], c->tgt_vocab);
            in[q + 1] = tx[q];
            o[q] = tx[q];
        }
        o[nt] = c->tgt_eos;
        for (k = nt + 1; k < T; k++) in[k] = o[k] = c->pad_id;
        it->tgt_len[r] = nt + 1;
        bt->n_tgt_tokens += nt + 1;
        it->ids[r] = i;
        it->corpus[r] = (int32_t)(item >> 32);
    }
    bt->src = it->src;
    bt->src_len = it->src_len;
    bt->tgt_in = it->tgt_in;
    bt->tgt_out = it->tgt_out;
    bt->tgt_len = it->tgt_len;
    bt->ids = it->ids;
    bt->corpus = it->corpus;
    return TERN_OK;
}

tern_status_t data_iter_next(data_iter_t *it, const data_batch_t **batch) {
    *batch = NULL;
    if (it->st.pos >= it->epoch_len) {
        it->st.epoch++;
        it->st.pos = 0;
        it->st.rng = it->rng_next;
        if (it->mixed) {
            tern_status_t st = plan_epoch(it, it->st.epoch);
            if (st) return st;
            it->st.n_batches = it->n_batches;
        }
        shuffle_epoch(it);
        return TERN_OK;
    }
    int64_t b = it->perm[it->st.pos * it->opt.world + it->opt.rank];
    if (++it->served % RELEASE_BATCHES == 0)
        for (int k = 0; k < it->n_corp; k++) release_all(it->cs[k]);
    tern_status_t st = fill_batch(it, b);
    if (st) return st;
    it->st.pos++;
    *batch = &it->batch;
    return TERN_OK;
}

data_iter_state_t data_iter_state(const data_iter_t *it) { return it->st; }

tern_status_t data_iter_restore(data_iter_t *it, const data_iter_state_t *s) {
    if (s->seed != it->st.seed || s->plan_hash != it->st.plan_hash || (!it->mixed && s->n_batches != it->st.n_batches))
        return tern_error(TERN_ERR_MISMATCH, "%s: the saved data state does not match this corpus and batching "
                          "(seed %llu vs %llu, %lld vs %lld batches, plan %016llx vs %016llx): the data, weights, "
                          "length limits or max_tokens changed", it->c->path, (unsigned long long)s->seed,
                          (unsigned long long)it->st.seed, (long long)s->n_batches, (long long)it->st.n_batches,
                          (unsigned long long)s->plan_hash, (unsigned long long)it->st.plan_hash);
    if (s->epoch < 0 || s->pos < 0)
        return tern_error(TERN_ERR_INVALID_ARG, "%s: saved data state out of range (epoch %lld, position %lld)",
                          it->c->path, (long long)s->epoch, (long long)s->pos);
    if (it->mixed) { /* the saved epoch's draw */
        tern_status_t st = plan_epoch(it, s->epoch);
        if (st) return st;
        if (s->n_batches != it->n_batches)
            return tern_error(TERN_ERR_MISMATCH, "%s: the saved data state's epoch %lld had %lld batches, this plan "
                              "%lld: max_tokens or the length limits changed", it->c->path, (long long)s->epoch,
                              (long long)s->n_batches, (long long)it->n_batches);
    }
    if (s->pos > it->epoch_len)
        return tern_error(TERN_ERR_INVALID_ARG, "%s: saved data state out of range (epoch %lld, position %lld of %lld)",
                          it->c->path, (long long)s->epoch, (long long)s->pos, (long long)it->epoch_len);
    it->st = *s;
    shuffle_epoch(it);
    return TERN_OK;
}

int64_t data_iter_batches_per_epoch(const data_iter_t *it) { return it->epoch_len; }

void data_iter_max_shape(const data_iter_t *it, int *max_B, int *max_S, int *max_T, int *max_src_tokens,
                         int *max_tgt_tokens) {
    if (max_B) *max_B = it->max_B;
    if (max_S) *max_S = it->max_S;
    if (max_T) *max_T = it->max_T;
    if (max_src_tokens) *max_src_tokens = it->max_src_tokens;
    if (max_tgt_tokens) *max_tgt_tokens = it->max_tgt_tokens;
}
