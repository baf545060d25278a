/*
 * checkpoint.c — atomic checkpoint directories, keep-last-K, resume reading, averaging
 * (see checkpoint.h).
 */
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model_dir.h"

#define CKPT_PREFIX "checkpoint-"
#define TMP_PREFIX ".tmp-"

void ckpt_path(char *buf, size_t n, const char *save_dir, int64_t update) {
    char name[64];
    snprintf(name, sizeof name, CKPT_PREFIX "%08lld", (long long)update);
    path_join(buf, n, save_dir, name);
}

/* ------------------------------------------------------------ file system helpers */

static tern_status_t fsync_path(const char *path, int dir) {
    int fd = open(path, O_RDONLY | (dir ? O_DIRECTORY : 0));
    if (fd < 0) return tern_error(TERN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc != 0 && err != EINVAL) return tern_error(TERN_ERR_IO, "%s: fsync failed: %s", path, strerror(err));
    return TERN_OK;
}

/* fsyncs every regular file of dir, then dir. */
static tern_status_t fsync_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return tern_error(TERN_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
    struct dirent *e;
    char p[4096];
    tern_status_t st = TERN_OK;
    while (!st && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        path_join(p, sizeof p, dir, e->d_name);
        struct stat s;
        if (lstat(p, &s) == 0 && S_ISREG(s.st_mode)) st = fsync_path(p, 0);
    }
    closedir(d);
    return st ? st : fsync_path(dir, 1);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static tern_status_t remove_tree(const char *path) {
    struct stat s;
    if (lstat(path, &s) != 0) return TERN_OK;
    if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return tern_error(TERN_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    return TERN_OK;
}

static int is_dir(const char *path) {
    struct stat s;
    return stat(path, &s) == 0 && S_ISDIR(s.st_mode);
}

/* Deletes a checkpoint: renamed out of the checkpoint names first, so a kill mid-way never
 * leaves a partial directory under a checkpoint's name. */
static tern_status_t delete_dir(const char *save_dir, const char *path) {
    char tmp[4096], name[128];
    snprintf(name, sizeof name, TMP_PREFIX "delete-%ld-%lld", (long)getpid(), (long long)(time_now() * 1e9));
    path_join(tmp, sizeof tmp, save_dir, name);
    if (rename(path, tmp) != 0) return tern_error(TERN_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    return remove_tree(tmp);
}

/* Moves the finished temporary directory tmp to final: atomically swapped with an existing
 * final (renameat2 RENAME_EXCHANGE), the old one deleted afterwards. */
static tern_status_t publish_dir(const char *parent, const char *tmp, const char *final) {
    tern_status_t st;
    if ((st = fsync_tree(tmp))) return st;
    if (rename(tmp, final) != 0) {
        if (errno != ENOTEMPTY && errno != EEXIST)
            return tern_error(TERN_ERR_IO, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) != 0)
            return tern_error(TERN_ERR_IO, "%s: cannot replace %s: %s", tmp, final, strerror(errno));
        if ((st = fsync_path(parent, 1))) return st;
        return remove_tree(tmp); /* now the old directory */
    }
    return fsync_path(parent, 1);
}

/* "checkpoint-<digits>" -> update, else -1. */
static int64_t parse_name(const char *name) {
    size_t l = strlen(CKPT_PREFIX);
    if (strncmp(name, CKPT_PREFIX, l) || !name[l]) return -1;
    int64_t v = 0;
    for (const char *p = name + l; *p; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

static int i64_cmp(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

tern_status_t ckpt_list(const char *save_dir, int64_t **updates, int *n) {
    *updates = NULL;
    *n = 0;
    DIR *d = opendir(save_dir);
    if (!d) {
        if (errno == ENOENT) return TERN_OK;
        return tern_error(TERN_ERR_IO, "%s: cannot open: %s", save_dir, strerror(errno));
    }
    int cap = 16, k = 0;
    int64_t *u = malloc(sizeof *u * (size_t)cap);
    struct dirent *e;
    char p[4096];
    while (u && (e = readdir(d))) {
        int64_t v = parse_name(e->d_name);
        if (v < 0) continue;
        path_join(p, sizeof p, save_dir, e->d_name);
        if (!is_dir(p)) continue;
        if (k == cap) {
            int64_t *g = realloc(u, sizeof *u * (size_t)(cap *= 2));
            if (!g) {
                free(u);
                u = NULL;
                break;
            }
            u = g;
        }
        u[k++] = v;
    }
    closedir(d);
    if (!u) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", save_dir);
    qsort(u, (size_t)k, sizeof *u, i64_cmp);
    *updates = u;
    *n = k;
    return TERN_OK;
}

tern_status_t ckpt_latest(const char *save_dir, char *path, size_t n) {
    int64_t *u;
    int k;
    tern_status_t st = ckpt_list(save_dir, &u, &k);
    if (st) return st;
    if (k == 0) {
        free(u);
        return tern_error(TERN_ERR_IO, "%s: no checkpoint (" CKPT_PREFIX "N directory) found", save_dir);
    }
    ckpt_path(path, n, save_dir, u[k - 1]);
    free(u);
    return TERN_OK;
}

/* Removes leftover temporary directories (killed saves and deletions) of save_dir. */
static tern_status_t clean_tmp(const char *save_dir) {
    DIR *d = opendir(save_dir);
    if (!d) return tern_error(TERN_ERR_IO, "%s: cannot open: %s", save_dir, strerror(errno));
    struct dirent *e;
    char p[4096];
    tern_status_t st = TERN_OK;
    while (!st && (e = readdir(d))) {
        if (strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX))) continue;
        path_join(p, sizeof p, save_dir, e->d_name);
        st = remove_tree(p);
    }
    closedir(d);
    return st;
}

static tern_status_t keep_last(const char *save_dir, int k) {
    if (k <= 0) return TERN_OK;
    int64_t *u;
    int n;
    tern_status_t st = ckpt_list(save_dir, &u, &n);
    char p[4096];
    for (int i = 0; !st && i < n - k; i++) {
        ckpt_path(p, sizeof p, save_dir, u[i]);
        st = delete_dir(save_dir, p);
    }
    free(u);
    return st;
}

/* ------------------------------------------------------------ writing */

static tern_status_t write_model_files(const char *dir, const ckpt_contents_t *c) {
    tern_status_t st;
    int n = c->n_params + c->n_scalars;
    tensor_t *t = malloc(sizeof *t * (size_t)(n > 0 ? n : 1));
    if (!t) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", dir);
    if (c->n_params > 0) memcpy(t, c->params, sizeof *t * (size_t)c->n_params);
    if (c->n_scalars > 0) memcpy(t + c->n_params, c->scalars, sizeof *t * (size_t)c->n_scalars);
    const char *mk[] = {"ct2_spec"}, *mv[] = {c->spec_name};
    st = model_dir_write_weights(dir, t, n, c->alias_names, c->alias_targets, c->n_aliases, mk, mv,
                                 c->spec_name ? 1 : 0);
    free(t);
    if (st) return st;
    const data_vocab_t *v = c->vocab;
    if (!v) return TERN_OK;
    model_config_t cfg = v->cfg;
    cfg.layer_norm_epsilon = c->layer_norm_epsilon > 0 ? c->layer_norm_epsilon : -1.0f;
    if (c->architecture) snprintf(cfg.architecture, sizeof cfg.architecture, "%s", c->architecture);
    if ((st = model_dir_write_config(dir, NULL, &cfg, v->pad_token))) return st;
    char p[4096];
    if (v->tgt_vocab == v->src_vocab) {
        if ((st = model_dir_write_vocab(v->src_vocab, path_join(p, sizeof p, dir, "shared_vocabulary.json"))))
            return st;
    } else {
        if ((st = model_dir_write_vocab(v->src_vocab, path_join(p, sizeof p, dir, "source_vocabulary.json"))) ||
            (st = model_dir_write_vocab(v->tgt_vocab, path_join(p, sizeof p, dir, "target_vocabulary.json"))))
            return st;
    }
    if (v->src_spm_path[0]) {
        if (!strcmp(v->src_spm_path, v->tgt_spm_path)) {
            if ((st = model_dir_copy_file(v->src_spm_path, path_join(p, sizeof p, dir, "sentencepiece.model"))))
                return st;
        } else {
            if ((st = model_dir_copy_file(v->src_spm_path, path_join(p, sizeof p, dir, "source.spm"))) ||
                (st = model_dir_copy_file(v->tgt_spm_path, path_join(p, sizeof p, dir, "target.spm"))))
                return st;
        }
    }
    if (v->generation_path[0] &&
        (st = model_dir_copy_file(v->generation_path, path_join(p, sizeof p, dir, "generation_config.json"))))
        return st;
    return TERN_OK;
}

/* A growing list of owned strings (metadata keys/values, tensor names). */
typedef struct {
    char **s;
    int n, cap;
} strs_t;

static const char *strs_add(strs_t *l, const char *fmt, ...) TERN_PRINTF(2, 3);
static const char *strs_add(strs_t *l, const char *fmt, ...) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 32;
        char **g = realloc(l->s, sizeof *g * (size_t)cap);
        if (!g) return NULL;
        l->s = g;
        l->cap = cap;
    }
    va_list ap, aq;
    va_start(ap, fmt);
    va_copy(aq, ap);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (s) vsnprintf(s, (size_t)len + 1, fmt, aq);
    va_end(aq);
    if (!s) return NULL;
    return l->s[l->n++] = s;
}

static void strs_free(strs_t *l) {
    for (int i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
}

static tern_status_t write_state(const char *dir, int64_t update, const ckpt_contents_t *c) {
    char p[4096];
    path_join(p, sizeof p, dir, "trainer_state.safetensors");
    int nt = 0;
    for (int g = 0; g < c->n_groups; g++) nt += c->groups[g].n;
    int nm = 1 + c->n_values + (c->data ? 6 : 0);
    tensor_t *t = malloc(sizeof *t * (size_t)(nt > 0 ? nt : 1));
    const char **mk = malloc(sizeof *mk * (size_t)nm), **mv = malloc(sizeof *mv * (size_t)nm);
    strs_t s = {0};
    tern_status_t st = TERN_OK;
    int k = 0, m = 0;
    if (!t || !mk || !mv) goto nomem;
    for (int g = 0; g < c->n_groups; g++)
        for (int i = 0; i < c->groups[g].n; i++) {
            t[k] = c->groups[g].tensors[i];
            if (!(t[k].name = strs_add(&s, "%s%s", c->groups[g].prefix ? c->groups[g].prefix : "",
                                       c->groups[g].tensors[i].name)))
                goto nomem;
            k++;
        }
#define META(key, ...) do { mk[m] = (key); if (!(mv[m] = strs_add(&s, __VA_ARGS__))) goto nomem; m++; } while (0)
    META("update", "%lld", (long long)update);
    for (int i = 0; i < c->n_values; i++) {
        const ckpt_value_t *v = &c->values[i];
        const char *key = strs_add(&s, "value:%s", v->name);
        if (!key) goto nomem;
        if (v->type == CKPT_INT) META(key, "i:%lld", (long long)v->i);
        else if (v->type == CKPT_UINT) META(key, "u:%llu", (unsigned long long)v->u);
        else META(key, "f:%.17g", v->f);
    }
    if (c->data) {
        const data_iter_state_t *d = c->data;
        META("data:seed", "%llu", (unsigned long long)d->seed);
        META("data:epoch", "%lld", (long long)d->epoch);
        META("data:pos", "%lld", (long long)d->pos);
        META("data:rng", "%llu", (unsigned long long)d->rng);
        META("data:n_batches", "%lld", (long long)d->n_batches);
        META("data:plan_hash", "%llu", (unsigned long long)d->plan_hash);
    }
#undef META
    st = safetensors_write(p, t, k, mk, mv, m);
    goto done;
nomem:
    st = tern_error(TERN_ERR_NOMEM, "%s: out of memory", p);
done:
    strs_free(&s);
    free(t);
    free(mk);
    free(mv);
    return st;
}

tern_status_t ckpt_save(const char *save_dir, int64_t update, const ckpt_contents_t *c, int keep, char *path_out,
                        size_t path_n) {
    if (update < 0) return tern_error(TERN_ERR_INVALID_ARG, "ckpt_save: negative update count %lld", (long long)update);
    tern_status_t st = model_dir_mkdir(save_dir);
    if (st) return st;
    if ((st = clean_tmp(save_dir))) return st;
    char tmp[4096], final[4096], name[128];
    snprintf(name, sizeof name, TMP_PREFIX CKPT_PREFIX "%08lld-%ld", (long long)update, (long)getpid());
    path_join(tmp, sizeof tmp, save_dir, name);
    ckpt_path(final, sizeof final, save_dir, update);
    if (mkdir(tmp, 0755) != 0) return tern_error(TERN_ERR_IO, "%s: cannot create directory: %s", tmp, strerror(errno));
    if ((st = write_model_files(tmp, c)) || (st = write_state(tmp, update, c)) ||
        (st = publish_dir(save_dir, tmp, final))) {
        char keep_msg[1024];
        snprintf(keep_msg, sizeof keep_msg, "%s", tern_last_error());
        remove_tree(tmp);
        return tern_error(st, "saving checkpoint %s: %s", final, keep_msg);
    }
    if (path_out) snprintf(path_out, path_n, "%s", final);
    return keep_last(save_dir, keep);
}

tern_status_t ckpt_write_model(const char *dir, const ckpt_contents_t *c) {
    tern_status_t st = model_dir_mkdir(dir);
    if (st) return st;
    return write_model_files(dir, c);
}

/* ------------------------------------------------------------ reading */

struct ckpt {
    char dir[2048];
    weights_t *model, *state;
    int64_t update;
};

void ckpt_close(ckpt_t *c) {
    if (!c) return;
    weights_free(c->model);
    weights_free(c->state);
    free(c);
}

static int parse_i64(const char *s, int64_t *v) {
    char *e;
    errno = 0;
    long long x = strtoll(s, &e, 10);
    if (errno || e == s || *e) return 0;
    *v = x;
    return 1;
}

static int parse_u64(const char *s, uint64_t *v) {
    char *e;
    errno = 0;
    if (*s == '-') return 0;
    unsigned long long x = strtoull(s, &e, 10);
    if (errno || e == s || *e) return 0;
    *v = x;
    return 1;
}

tern_status_t ckpt_open(ckpt_t **out, const char *dir) {
    *out = NULL;
    ckpt_t *c = calloc(1, sizeof *c);
    if (!c) return tern_error(TERN_ERR_NOMEM, "out of memory");
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    char p[4096];
    tern_status_t st;
    if ((st = weights_load_safetensors(&c->model, path_join(p, sizeof p, dir, "model.safetensors"))) ||
        (st = weights_load_safetensors(&c->state, path_join(p, sizeof p, dir, "trainer_state.safetensors")))) {
        ckpt_close(c);
        return st;
    }
    const char *u = weights_metadata(c->state, "update");
    if (!u || !parse_i64(u, &c->update) || c->update < 0) {
        ckpt_close(c);
        return tern_error(TERN_ERR_FORMAT, "%s: metadata \"update\" missing or not a count", p);
    }
    *out = c;
    return TERN_OK;
}

const weights_t *ckpt_model(const ckpt_t *c) { return c->model; }
const weights_t *ckpt_state(const ckpt_t *c) { return c->state; }
int64_t ckpt_update(const ckpt_t *c) { return c->update; }

tern_status_t ckpt_read_group(const ckpt_t *c, const char *prefix, const tensor_t *dst, int n) {
    char name[1024];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "%s%s", prefix ? prefix : "", dst[i].name);
        const tensor_t *s = weights_get(c->state, name);
        if (!s)
            return tern_error(TERN_ERR_FORMAT, "%s: tensor '%s' missing", weights_path(c->state), name);
        int same = s->dtype == DT_F32 && dst[i].dtype == DT_F32 && s->rank == dst[i].rank && s->numel == dst[i].numel;
        for (int r = 0; same && r < s->rank; r++) same = s->shape[r] == dst[i].shape[r];
        if (!same)
            return tern_error(TERN_ERR_MISMATCH, "%s: tensor '%s': stored as %s rank %d (%lld elements), expected "
                              "float32 rank %d (%lld elements)", weights_path(c->state), name, dtype_name(s->dtype),
                              s->rank, (long long)s->numel, dst[i].rank, (long long)dst[i].numel);
        memcpy((void *)dst[i].data, s->data, s->nbytes);
    }
    return TERN_OK;
}

tern_status_t ckpt_get_value(const ckpt_t *c, ckpt_value_t *v) {
    char key[512];
    snprintf(key, sizeof key, "value:%s", v->name);
    const char *s = weights_metadata(c->state, key);
    static const char tags[] = "iuf";
    int ok = s && s[0] == tags[v->type] && s[1] == ':';
    if (ok) {
        if (v->type == CKPT_INT) ok = parse_i64(s + 2, &v->i);
        else if (v->type == CKPT_UINT) ok = parse_u64(s + 2, &v->u);
        else {
            char *e;
            v->f = strtod(s + 2, &e);
            ok = e != s + 2 && !*e;
        }
    }
    if (!ok)
        return tern_error(TERN_ERR_FORMAT, "%s: value '%s' missing or not %s (\"%s\")", weights_path(c->state),
                          v->name, v->type == CKPT_INT ? "an integer" : v->type == CKPT_UINT ? "unsigned" : "a float",
                          s ? s : "");
    return TERN_OK;
}

tern_status_t ckpt_get_data_state(const ckpt_t *c, data_iter_state_t *d) {
    static const char *keys[] = {"data:seed", "data:epoch", "data:pos", "data:rng", "data:n_batches",
                                 "data:plan_hash"};
    const char *v[6];
    for (int i = 0; i < 6; i++)
        if (!(v[i] = weights_metadata(c->state, keys[i])))
            return tern_error(TERN_ERR_FORMAT, "%s: no data iterator state (metadata '%s')", weights_path(c->state),
                              keys[i]);
    if (!parse_u64(v[0], &d->seed) || !parse_i64(v[1], &d->epoch) || !parse_i64(v[2], &d->pos) ||
        !parse_u64(v[3], &d->rng) || !parse_i64(v[4], &d->n_batches) || !parse_u64(v[5], &d->plan_hash))
        return tern_error(TERN_ERR_FORMAT, "%s: malformed data iterator state", weights_path(c->state));
    return TERN_OK;
}

/* ------------------------------------------------------------ averaging */

static int is_float_dt(dtype_t d) { return d == DT_F32 || d == DT_F16 || d == DT_BF16; }

static int same_shape(const tensor_t *a, const tensor_t *b) {
    if (a->rank != b->rank) return 0;
    for (int r = 0; r < a->rank; r++)
        if (a->shape[r] != b->shape[r]) return 0;
    return 1;
}

/* An averaging: the n inputs, and the output's nt tensors (the averaged ones in buffers of their
 * own) and aliases. */
typedef struct {
    weights_t **w;          /* (n) */
    int n;
    tensor_t *t;            /* (nt) */
    int nt;
    void **bufs;            /* (nb) the averaged tensors' data */
    int nb;
    double *acc;            /* (the largest tensor's numel) */
    const char **an, **at;  /* (n_alias) the aliases written: names and targets */
    int n_alias;
} average_t;

static tern_status_t load_inputs(average_t *avg, const char *const *dirs) {
    char p[4096];
    tern_status_t st;
    for (int k = 0; k < avg->n; k++)
        if ((st = weights_load_safetensors(&avg->w[k], path_join(p, sizeof p, dirs[k], "model.safetensors"))))
            return st;
    avg->nt = weights_count(avg->w[0]);
    int nt = avg->nt > 0 ? avg->nt : 1;
    avg->t = calloc((size_t)nt, sizeof *avg->t);
    avg->bufs = calloc((size_t)nt, sizeof *avg->bufs);
    int64_t max_numel = 1;
    for (int i = 0; i < avg->nt; i++) max_numel = TERN_MAX(max_numel, weights_at(avg->w[0], i)->numel);
    avg->acc = malloc(sizeof *avg->acc * (size_t)max_numel);
    if (!avg->t || !avg->bufs || !avg->acc) return tern_error(TERN_ERR_NOMEM, "average: out of memory");
    return TERN_OK;
}

/* No input is quantized, and all have as many tensors as the first. */
static tern_status_t check_inputs(const average_t *avg) {
    for (int k = 0; k < avg->n; k++)
        for (int i = 0; i < weights_count(avg->w[k]); i++) {
            const tensor_t *q = weights_at(avg->w[k], i);
            if (q->rank > 0 && (q->dtype == DT_I8 || q->dtype == DT_I16))
                return tern_error(TERN_ERR_UNSUPPORTED, "%s: tensor '%s' is quantized (%s): quantized models cannot "
                                  "be averaged (average float checkpoints, then quantize)", weights_path(avg->w[k]),
                                  q->name, dtype_name(q->dtype));
        }
    for (int k = 1; k < avg->n; k++)
        if (weights_count(avg->w[k]) != avg->nt)
            return tern_error(TERN_ERR_MISMATCH, "%s has %d tensors but %s has %d", weights_path(avg->w[k]),
                              weights_count(avg->w[k]), weights_path(avg->w[0]), avg->nt);
    return TERN_OK;
}

/* Every other input holds the first's tensor a with its shape and kind (float or not), and an
 * integer tensor equal to it. */
static tern_status_t check_same_tensor(const average_t *avg, const tensor_t *a) {
    for (int k = 1; k < avg->n; k++) {
        const tensor_t *b = weights_get(avg->w[k], a->name);
        if (!b || !same_shape(a, b) || is_float_dt(a->dtype) != is_float_dt(b->dtype))
            return tern_error(TERN_ERR_MISMATCH, "%s: tensor '%s' %s (as in %s)", weights_path(avg->w[k]), a->name,
                              b ? "has another shape or dtype" : "missing", weights_path(avg->w[0]));
        if (!is_float_dt(a->dtype) && (b->dtype != a->dtype || memcmp(a->data, b->data, a->nbytes)))
            return tern_error(TERN_ERR_MISMATCH, "%s: integer tensor '%s' differs from %s's", weights_path(avg->w[k]),
                              a->name, weights_path(avg->w[0]));
    }
    return TERN_OK;
}

/* Output tensor i: a float tensor becomes the inputs' mean (accumulated in float64, written as
 * float32); another is the first input's. */
static tern_status_t average_tensor(average_t *avg, int i) {
    const tensor_t *a = weights_at(avg->w[0], i);
    avg->t[i] = *a;
    tern_status_t st = check_same_tensor(avg, a);
    if (st || !is_float_dt(a->dtype)) return st;
    double *acc = avg->acc;
    for (int64_t j = 0; j < a->numel; j++) acc[j] = 0.0;
    for (int k = 0; k < avg->n; k++) {
        const tensor_t *b = k ? weights_get(avg->w[k], a->name) : a;
        if (b->dtype == DT_F32) {
            const float *x = b->data;
            for (int64_t j = 0; j < a->numel; j++) acc[j] += (double)x[j];
        } else {
            for (int64_t j = 0; j < a->numel; j++) acc[j] += (double)tensor_get_f32(b, j);
        }
    }
    float *o = aligned_alloc64((size_t)a->numel * sizeof(float));
    if (!o) return tern_error(TERN_ERR_NOMEM, "average: tensor '%s': out of memory", a->name);
    avg->bufs[avg->nb++] = o;
    for (int64_t j = 0; j < a->numel; j++) o[j] = (float)(acc[j] / (double)avg->n);
    avg->t[i].dtype = DT_F32;
    avg->t[i].data = o;
    avg->t[i].nbytes = (size_t)a->numel * sizeof(float);
    return TERN_OK;
}

/* The first input's aliases, less the derived ones. */
static tern_status_t collect_aliases(average_t *avg) {
    int na = weights_alias_count(avg->w[0]);
    avg->an = calloc((size_t)na + 1, sizeof *avg->an);
    avg->at = calloc((size_t)na + 1, sizeof *avg->at);
    if (!avg->an || !avg->at) return tern_error(TERN_ERR_NOMEM, "average: out of memory");
    for (int i = 0; i < na; i++) {
        if (weights_alias_is_derived(avg->w[0], i)) continue;
        avg->an[avg->n_alias] = weights_alias_at(avg->w[0], i, &avg->at[avg->n_alias]);
        avg->n_alias++;
    }
    return TERN_OK;
}

/* The directory that holds a path (its first l bytes, trailing slashes left out). */
static void parent_dir(char *parent, size_t size, const char *path, size_t l) {
    snprintf(parent, size, "%.*s", (int)l, path);
    char *slash = strrchr(parent, '/');
    if (slash == parent) parent[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(parent, size, ".");
}

/* Written like a checkpoint: a temporary directory beside out_dir, renamed into place; the
 * configuration and side files come from first_dir. */
static tern_status_t write_average(const average_t *avg, const char *out_dir, const char *first_dir) {
    size_t l = strlen(out_dir);
    while (l > 1 && out_dir[l - 1] == '/') l--;
    char parent[4096], name[128], tmp[4096], p[4096], cnt[32];
    parent_dir(parent, sizeof parent, out_dir, l);
    snprintf(name, sizeof name, TMP_PREFIX "average-%ld", (long)getpid());
    snprintf(tmp, sizeof tmp, "%.*s%s", (int)l, out_dir, name);
    if (mkdir(tmp, 0755) != 0)
        return tern_error(TERN_ERR_IO, "%s: cannot create directory: %s", tmp, strerror(errno));
    snprintf(cnt, sizeof cnt, "%d", avg->n);
    const char *spec = weights_metadata(avg->w[0], "ct2_spec");
    const char *mk[] = {"averaged_models", "ct2_spec"}, *mv[] = {cnt, spec};
    path_join(p, sizeof p, first_dir, "config.json");
    tern_status_t st;
    if ((st = model_dir_write_weights(tmp, avg->t, avg->nt, avg->an, avg->at, avg->n_alias, mk, mv, spec ? 2 : 1)) ||
        (st = model_dir_write_config(tmp, file_exists(p) ? p : NULL, NULL, NULL)) ||
        (st = model_dir_copy_side_files(first_dir, tmp)) || (st = publish_dir(parent, tmp, out_dir)))
        remove_tree(tmp);
    return st;
}

static void average_free(average_t *avg) {
    for (int i = 0; i < avg->nb; i++) aligned_free(avg->bufs[i]);
    free(avg->bufs);
    free(avg->acc);
    free(avg->t);
    free(avg->an);
    free(avg->at);
    for (int i = 0; i < avg->n; i++) weights_free(avg->w[i]);
    free(avg->w);
}

tern_status_t ckpt_average(const char *out_dir, const char *const *dirs, int n) {
    if (n < 1) return tern_error(TERN_ERR_INVALID_ARG, "average: no model directories");
    average_t avg = {.n = n};
    avg.w = calloc((size_t)n, sizeof *avg.w);
    if (!avg.w) return tern_error(TERN_ERR_NOMEM, "out of memory");
    tern_status_t st = load_inputs(&avg, dirs);
    if (!st) st = check_inputs(&avg);
    for (int i = 0; !st && i < avg.nt; i++) st = average_tensor(&avg, i);
    if (!st) st = collect_aliases(&avg);
    if (!st) st = write_average(&avg, out_dir, dirs[0]);
    average_free(&avg);
    return st;
}
