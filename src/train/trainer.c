/*
 * trainer.c — the training loop of `tern train` (see trainer.h).
 *
 * Legend: k = update_freq (batches per update), B/S/T a batch's sentences and padded source /
 * target lengths, n_params the floats of the model's parameter buffer.
 *
 * The loop, per update: take up to k batches of the epoch (copied into k preallocated slots, so
 * that the update's target-token count is known before the first backward pass), zero the
 * gradients, forward + backward of each with grad_scale = 1 / (target tokens of the update), clip,
 * step Adam (or SGD after GNMT's switch) at lr_at(updates). An epoch that ends inside a group
 * ends the update with the batches it has (as fairseq's grouped iterator does). Then, in this
 * order: the curve row and the log line; at an epoch end, checkpoint + validation + BLEU (the
 * checkpoint is written again after BLEU so that it carries the early-stopping state); every
 * valid_interval_updates a validation, every save_interval_updates a checkpoint.
 *
 * Nothing is allocated per batch: the slots, the model workspace (sized for the largest batch of
 * both plans) and the optimizer state are allocated once.
 */
#include "train/trainer.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "batch/translator.h"
#include "nn/layers.h"
#include "search/sample.h"
#include "train/rl.h"
#include "train/qat.h"
#include "kernels/kernels.h"
#include "model/model_dir.h"
#include "model/transformer_desc.h"
#include "text/score.h"
#include "train/checkpoint.h"
#include "train/dist.h"

#include <xxhash.h>

#define NO_LOSS 1e300 /* "no validation yet" (finite, so that it round-trips through %.17g) */

trainer_options_t trainer_default_options(void) {
    trainer_options_t o;
    memset(&o, 0, sizeof o);
    o.seed = 1;
    o.data = data_default_options();
    o.max_tokens = 4096;
    o.shuffle = 1;
    o.adam = adam_default_config();
    o.sched.kind = LR_INVERSE_SQRT;
    o.sched.lr = 5e-4f;
    o.sched.warmup = 4000;
    o.sched.warmup_init_lr = 1e-7f;
    o.update_freq = 1;
    o.keep_last = 10;
    o.bleu = 1;
    o.bleu_beam = 5;
    o.log_interval = 100;
    o.progress = -1;
    o.bucket_mb = 2.0;
    o.comm_overlap = 1;
    o.rl_alpha = 0.017f;
    o.rl_samples = 15;
    o.rl_temperature = 1.0f;
    return o;
}

/* ------------------------------------------------------------ state */

typedef struct {
    int B, S, T, ntok;
    int32_t *src, *tin, *tout; /* (B, S), (B, T), (B, T) with room for the largest batch */
} slot_t;

typedef struct {
    const trainer_options_t *o;
    int threads;
    data_vocab_t vocab;
    int vocab_ok;
    data_corpus_t **train_cs, *valid_c; /* (n_train_cs) */
    int n_train_cs;
    data_iter_t *train_it, *valid_it;
    const train_family_t *fam; /* the model's training table */
    train_model_t m;
    int m_ok;
    void *ws;                /* the family's workspace */
    adam_t adam;
    int adam_ok;
    slot_t *slots;
    tensor_t *pv, *mv, *vv; /* (n_tensors) views of params, Adam m, Adam v */
    int *frozen;             /* (n_tensors) 1: kept as it starts (--freeze); NULL: none */
    float *frozen_copy;      /* the frozen tensors' starting values, one after another */
    int rank, world;         /* data-parallel (dist.h): rank 0 writes every file; world 1 without mpirun */
    dist_grads_t *dg;        /* gradient buckets (world > 1) */
    qat_t *qat;              /* --qat int8: fake quantization of the int8 weights (qat.h); NULL: off */

    /* what a checkpoint carries */
    long updates;
    uint64_t micro;          /* micro-batches done: the dropout step key */
    double best_loss, best_bleu, last_loss, last_nll, last_bleu;
    long validated_at;       /* update of the last validation loss (-1: none) */
    int bad;                 /* validations without improvement */
    double acc_loss, acc_nll, acc_gnorm, acc_time; /* since the last log line */
    int64_t acc_tok;
    int acc_n;
    double elapsed0;         /* elapsed seconds of the runs before this one */

    /* this run */
    double t_start;
    double run_train_time;
    int64_t run_tokens;
    long saved_at;
    int dirty;               /* state changed since the last checkpoint */
    int64_t cur_epoch;       /* epoch of the batches of the current update */
    FILE *log, *tcurve, *vcurve;
    int progress;
    int bar_shown;
    double bar_time;
    char last_ckpt[1024];

    /* BLEU */
    char *vsrc_buf, *vref_buf;
    char **vsrc, **vref;
    int n_bleu;

    /* RL refinement (rl.h) */
    rl_caps_t rl_caps;       /* the workspace's capacities */
    int64_t upd_nsrc;        /* sources of the current update (all ranks) */
    double rl_reward_sum;    /* since the last log line of this run */
    long rl_n;
    double rl_sample_time;
    char rl_dir[4096];       /* the sampler's model directory (this rank's) */
} trainer_t;

static double elapsed(const trainer_t *t) { return t->elapsed0 + (time_now() - t->t_start); }

static void fmt_hms(char *buf, size_t n, double s) {
    long x = (long)s;
    snprintf(buf, n, "%ld:%02ld:%02ld", x / 3600, (x / 60) % 60, x % 60);
}

static void bar_clear(trainer_t *t) {
    if (t->bar_shown) {
        fputs("\r\033[K", stderr);
        t->bar_shown = 0;
    }
}

/* A log line: stderr (unless quiet) and train.log, with a time stamp. */
static void tlog(trainer_t *t, const char *fmt, ...) TERN_PRINTF(2, 3);
static void tlog(trainer_t *t, const char *fmt, ...) {
    if (t->rank != 0) return;
    char msg[2048], stamp[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
    if (!t->o->quiet) {
        bar_clear(t);
        fprintf(stderr, "[%s] %s\n", stamp, msg);
        fflush(stderr);
    }
    if (t->log) {
        fprintf(t->log, "[%s] %s\n", stamp, msg);
        fflush(t->log);
    }
}

static void progress_bar(trainer_t *t, double loss) {
    if (!t->progress) return;
    double now = time_now();
    if (now - t->bar_time < 0.25) return;
    t->bar_time = now;
    data_iter_state_t s = data_iter_state(t->train_it);
    int64_t nb = data_iter_batches_per_epoch(t->train_it);
    int width = 30, fill = nb > 0 ? (int)(width * (double)s.pos / (double)nb) : 0;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[width] = 0;
    char el[32];
    fmt_hms(el, sizeof el, elapsed(t));
    double tps = t->acc_time > 0 ? (double)t->acc_tok / t->acc_time : 0;
    fprintf(stderr, "\r\033[Kepoch %lld [%s] %lld/%lld | update %ld | loss %.3f | %.0f tok/s | %s",
            (long long)t->cur_epoch + 1, bar, (long long)s.pos, (long long)nb, t->updates, loss, tps, el);
    fflush(stderr);
    t->bar_shown = 1;
}

/* ------------------------------------------------------------ small file helpers */

/* Keeps the comment lines and the rows whose first field is <= max_update. */
static tern_status_t trim_tsv(const char *path, long max_update) {
    char *data;
    size_t size;
    if (!file_exists(path)) return TERN_OK;
    tern_status_t st = file_read_all(path, &data, &size);
    if (st) return st;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        free(data);
        return tern_error(TERN_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
    }
    char *p = data;
    while (*p) {
        char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        int keep = p[0] == '#' || (len > 0 && strtol(p, NULL, 10) <= max_update);
        if (keep && len > 0) fprintf(f, "%.*s\n", (int)len, p);
        p += len + (e != NULL);
    }
    free(data);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        return tern_error(TERN_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return TERN_OK;
}

static tern_status_t open_tsv(FILE **f, const char *dir, const char *name, const char *header, int resume,
                              long max_update) {
    char p[4096];
    path_join(p, sizeof p, dir, name);
    tern_status_t st;
    if (resume && (st = trim_tsv(p, max_update))) return st;
    int exists = resume && file_exists(p);
    *f = fopen(p, exists ? "a" : "w");
    if (!*f) return tern_error(TERN_ERR_IO, "%s: cannot open: %s", p, strerror(errno));
    if (!exists) fprintf(*f, "%s\n", header);
    fflush(*f);
    return TERN_OK;
}

/* Reads a text file into lines (trailing "\r" dropped); *buf owns the text. */
static tern_status_t read_lines(const char *path, char **buf, char ***lines, int *n) {
    size_t size;
    tern_status_t st = file_read_all(path, buf, &size);
    if (st) return st;
    int cap = 1;
    for (size_t i = 0; i < size; i++) cap += (*buf)[i] == '\n';
    *lines = malloc(sizeof **lines * (size_t)cap);
    if (!*lines) return tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
    int k = 0;
    char *p = *buf, *end = *buf + size;
    while (p < end) {
        char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e) e = end;
        *e = 0;
        if (e > p && e[-1] == '\r') e[-1] = 0;
        (*lines)[k++] = p;
        p = e + 1;
    }
    *n = k;
    return TERN_OK;
}

/* ------------------------------------------------------------ vocabulary */

/* A vocabulary from a SentencePiece model's pieces. */
static tern_status_t spm_vocab(vocab_t **v, const char *path, int *has_pad) {
    spm_t *s;
    tern_status_t st = spm_load(&s, path);
    if (st) return st;
    int n = spm_piece_count(s);
    const char **p = malloc(sizeof *p * (size_t)(n > 0 ? n : 1));
    if (!p) {
        spm_free(s);
        return tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
    }
    *has_pad = 0;
    for (int i = 0; i < n; i++) {
        p[i] = spm_id_to_piece(s, i);
        if (p[i] && !strcmp(p[i], "<pad>")) *has_pad = 1;
    }
    st = vocab_from_tokens(v, p, n);
    free(p);
    spm_free(s);
    return st;
}

static tern_status_t load_vocab(trainer_t *t) {
    const trainer_options_t *o = t->o;
    tern_status_t st;
    if (o->vocab_dir) {
        if ((st = data_vocab_load(&t->vocab, o->vocab_dir))) return st;
        t->vocab_ok = 1;
        return TERN_OK;
    }
    if (!o->src_spm) return tern_error(TERN_ERR_INVALID_ARG, "no vocabulary: give a vocabulary directory or a "
                                       "SentencePiece model");
    vocab_t *sv = NULL, *tv = NULL;
    int pad_s = 0, pad_t = 0;
    if ((st = spm_vocab(&sv, o->src_spm, &pad_s))) return st;
    int joint = !o->tgt_spm || !strcmp(o->src_spm, o->tgt_spm);
    if (joint) tv = sv, pad_t = pad_s;
    else if ((st = spm_vocab(&tv, o->tgt_spm, &pad_t))) {
        vocab_free(sv);
        return st;
    }
    if (!pad_s || !pad_t) {
        vocab_free(sv);
        if (tv != sv) vocab_free(tv);
        return tern_error(TERN_ERR_MISMATCH, "%s: the SentencePiece model has no <pad> piece (train it with `tern "
                          "vocab`, which enables <pad>, <unk>, <s> and </s>)", !pad_s ? o->src_spm : o->tgt_spm);
    }
    model_config_t cfg;
    model_config_defaults(&cfg);
    cfg.add_source_eos = 1; /* as `tern vocab --model-dir` and fairseq */
    if ((st = data_vocab_init(&t->vocab, sv, tv, o->src_spm, joint ? NULL : o->tgt_spm, &cfg, "<pad>"))) return st;
    t->vocab_ok = 1;
    return TERN_OK;
}

/* ------------------------------------------------------------ checkpoints */

static tern_status_t save_checkpoint(trainer_t *t) {
    const trainer_options_t *o = t->o;
    if (t->rank != 0) { /* data-parallel: rank 0 writes (no collective here: ranks may differ in dirty) */
        t->saved_at = t->updates;
        t->dirty = 0;
        return TERN_OK;
    }
    enum { NV = TRAIN_MAX_CONFIG_VALUES + 20 };
    ckpt_value_t v[NV];
    int n = t->fam->config_values(&t->m, v);
#define VI(nm, x) (v[n++] = (ckpt_value_t){.name = (nm), .type = CKPT_INT, .i = (int64_t)(x)})
#define VU(nm, x) (v[n++] = (ckpt_value_t){.name = (nm), .type = CKPT_UINT, .u = (uint64_t)(x)})
#define VF(nm, x) (v[n++] = (ckpt_value_t){.name = (nm), .type = CKPT_FLOAT, .f = (double)(x)})
    VI("updates", t->updates);
    VU("micro", t->micro);
    VI("adam_t", t->adam.t);
    VU("seed", o->seed);
    VI("update_freq", o->update_freq);
    VF("lr", lr_at(&o->sched, t->updates));
    VF("elapsed", elapsed(t));
    VF("best_loss", t->best_loss);
    VF("best_bleu", t->best_bleu);
    VF("last_loss", t->last_loss);
    VF("last_nll", t->last_nll);
    VF("last_bleu", t->last_bleu);
    VI("validated_at", t->validated_at);
    VI("bad", t->bad);
    VF("acc_loss", t->acc_loss);
    VF("acc_nll", t->acc_nll);
    VF("acc_gnorm", t->acc_gnorm);
    VF("acc_time", t->acc_time);
    VI("acc_tok", t->acc_tok);
    VI("acc_n", t->acc_n);
    if (o->qat) VI("qat", o->qat); /* absent: trained without (checkpoints from before --qat too) */
#undef VI
#undef VU
#undef VF
    ckpt_group_t g[2] = {{"adam_m/", t->mv, t->m.n_tensors}, {"adam_v/", t->vv, t->m.n_tensors}};
    data_iter_state_t ds = data_iter_state(t->train_it);
    ckpt_contents_t c = {0};
    c.params = t->pv;
    c.n_params = t->m.n_tensors;
    c.alias_names = t->m.alias_names;
    c.alias_targets = t->m.alias_targets;
    c.n_aliases = t->m.n_aliases;
    c.n_scalars = t->fam->scalars(&t->m, &c.scalars);
    c.spec_name = t->fam->spec_name;
    if (strcmp(t->fam->architecture, TRAIN_DEFAULT_ARCHITECTURE)) c.architecture = t->fam->architecture;
    c.vocab = &t->vocab;
    c.layer_norm_epsilon = t->m.layer_norm_epsilon;
    c.groups = g;
    c.n_groups = 2;
    c.values = v;
    c.n_values = n;
    c.data = &ds;
    double t0 = time_now();
    tern_status_t st = ckpt_save(o->save_dir, t->updates, &c, o->keep_last, t->last_ckpt, sizeof t->last_ckpt);
    if (st) return st;
    t->saved_at = t->updates;
    t->dirty = 0;
    tlog(t, "saved %s (%.1f s)", t->last_ckpt, time_now() - t0);
    return TERN_OK;
}

static tern_status_t get_value(const ckpt_t *ck, const char *name, ckpt_type_t type, ckpt_value_t *v) {
    *v = (ckpt_value_t){.name = name, .type = type};
    return ckpt_get_value(ck, v);
}

static tern_status_t resume(trainer_t *t, const char *dir) {
    ckpt_t *ck;
    tern_status_t st = ckpt_open(&ck, dir);
    if (st) return st;
    ckpt_value_t mv[TRAIN_MAX_CONFIG_VALUES], x;
    int nmv = t->fam->config_values(&t->m, mv);
    for (int i = 0; i < nmv; i++) {
        if ((st = get_value(ck, mv[i].name, CKPT_INT, &x))) goto done;
        if (x.i != mv[i].i) {
            st = tern_error(TERN_ERR_MISMATCH, "%s: the checkpoint has %s = %lld, this run %lld: resume with the "
                            "options of the run that wrote it", dir, mv[i].name + 6, (long long)x.i,
                            (long long)mv[i].i);
            goto done;
        }
    }
    if ((st = t->fam->load(&t->m, ckpt_model(ck)))) goto done;
    if ((st = ckpt_read_group(ck, "adam_m/", t->mv, t->m.n_tensors)) ||
        (st = ckpt_read_group(ck, "adam_v/", t->vv, t->m.n_tensors)))
        goto done;
#define GI(nm, dst) do { if ((st = get_value(ck, nm, CKPT_INT, &x))) goto done; dst = x.i; } while (0)
#define GU(nm, dst) do { if ((st = get_value(ck, nm, CKPT_UINT, &x))) goto done; dst = x.u; } while (0)
#define GF(nm, dst) do { if ((st = get_value(ck, nm, CKPT_FLOAT, &x))) goto done; dst = x.f; } while (0)
    GI("updates", t->updates);
    GU("micro", t->micro);
    GI("adam_t", t->adam.t);
    uint64_t seed;
    GU("seed", seed);
    if (seed != t->o->seed)
        tlog(t, "warning: resuming with --seed %llu, the checkpoint was trained with %llu: the run will not "
             "reproduce an uninterrupted one", (unsigned long long)t->o->seed, (unsigned long long)seed);
    int64_t uf;
    GI("update_freq", uf);
    if (uf != t->o->update_freq)
        tlog(t, "warning: resuming with --update-freq %d, the checkpoint was trained with %lld",
             t->o->update_freq, (long long)uf);
    GF("elapsed", t->elapsed0);
    GF("best_loss", t->best_loss);
    GF("best_bleu", t->best_bleu);
    GF("last_loss", t->last_loss);
    GF("last_nll", t->last_nll);
    GF("last_bleu", t->last_bleu);
    GI("validated_at", t->validated_at);
    GI("bad", t->bad);
    GF("acc_loss", t->acc_loss);
    GF("acc_nll", t->acc_nll);
    GF("acc_gnorm", t->acc_gnorm);
    GF("acc_time", t->acc_time);
    GI("acc_tok", t->acc_tok);
    GI("acc_n", t->acc_n);
    x = (ckpt_value_t){.name = "qat", .type = CKPT_INT};
    int64_t ck_qat = ckpt_get_value(ck, &x) == TERN_OK ? x.i : QAT_NONE;
    if (ck_qat != t->o->qat) {
        st = tern_error(TERN_ERR_MISMATCH, "the checkpoint was trained with --qat %s, this run has --qat %s: "
                        "resume with the options of the run that wrote it", qat_mode_name((int)ck_qat),
                        qat_mode_name(t->o->qat));
        goto done;
    }
#undef GI
#undef GU
#undef GF
    data_iter_state_t ds;
    if ((st = ckpt_get_data_state(ck, &ds)) || (st = data_iter_restore(t->train_it, &ds))) goto done;
    snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", dir);
    t->saved_at = t->updates;
done:
    ckpt_close(ck);
    if (st) return tern_error_prefix(st, "resuming from %s: ", dir);
    return TERN_OK;
}

/* ------------------------------------------------------------ validation and BLEU */

/* --qat: the loss of the fake-quantized weights, those int8 inference multiplies. */
static tern_status_t validate(trainer_t *t, double *loss, double *nll) {
    double ls = 0, ns = 0;
    int64_t nt = 0;
    if (t->qat) qat_enter(t->qat, &t->m);
    for (;;) {
        const data_batch_t *b;
        tern_status_t st = data_iter_next(t->valid_it, &b);
        train_loss_t L;
        if (!st && b)
            st = t->fam->forward(&t->m, t->ws, b->src, b->tgt_in, b->tgt_out, b->B, b->S, b->T, 0, 0, 0, &L);
        if (st || !b) {
            if (t->qat) qat_leave(t->qat, &t->m);
            if (st) return st;
            break;
        }
        ls += L.loss;
        ns += L.nll;
        nt += L.ntokens;
    }
    *loss = nt ? ls / (double)nt : 0;
    *nll = nt ? ns / (double)nt : 0;
    return TERN_OK;
}

static tern_status_t bleu_eval(trainer_t *t, const char *model_dir, double *score, char *summary, size_t n) {
    const trainer_options_t *o = t->o;
    tern_model_t *model = NULL;
    tern_translator_t *tr = NULL;
    tern_result_t *res = NULL;
    const char **hyps = NULL;
    tern_status_t st;
    tern_model_options_t mo = tern_model_default_options();
    if (o->qat != QAT_NONE) mo.compute_type = TERN_COMPUTE_INT8; /* --qat: scored as it will run */
    if ((st = tern_model_load(&model, model_dir, &mo))) goto done;
    tern_search_params_t sp = tern_search_default_params();
    sp.beam_size = o->bleu_beam;
    sp.num_hypotheses = 1;
    sp.length_penalty = o->bleu_length_penalty;
    tern_translator_options_t to = tern_translator_default_options();
    to.search = &sp;
    to.workers = 1;
    to.threads_per_worker = t->threads;
    if ((st = tern_translator_create(&tr, model, &to))) goto done;
    res = calloc((size_t)t->n_bleu, sizeof *res);
    hyps = calloc((size_t)t->n_bleu, sizeof *hyps);
    if (!res || !hyps) {
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = tern_translate_batch(tr, (const char *const *)t->vsrc, t->n_bleu, res))) goto done;
    for (int i = 0; i < t->n_bleu; i++) hyps[i] = res[i].num_hypotheses > 0 ? res[i].hypotheses[0] : "";
    bleu_options_t bo = bleu_default_options();
    const char *const *refs[1] = {(const char *const *)t->vref};
    bleu_result_t br;
    if ((st = bleu_corpus(&br, hyps, refs, &bo, (size_t)t->n_bleu, 1))) goto done;
    *score = br.score;
    bleu_format(summary, n, &br, 2);
    if (o->bleu_output) {
        FILE *f = fopen(o->bleu_output, "w");
        if (!f) {
            st = tern_error(TERN_ERR_IO, "%s: cannot write: %s", o->bleu_output, strerror(errno));
            goto done;
        }
        for (int i = 0; i < t->n_bleu; i++) fprintf(f, "%s\n", hyps[i]);
        if (fclose(f) != 0) st = tern_error(TERN_ERR_IO, "%s: cannot write", o->bleu_output);
    }
done:
    for (int i = 0; res && i < t->n_bleu; i++) tern_result_free(&res[i]);
    free(res);
    free(hyps);
    tern_translator_free(tr);
    tern_model_free(model);
    kernels_set_num_threads(t->threads);
    if (st) return tern_error_prefix(st, "BLEU of %s: ", model_dir);
    return TERN_OK;
}

/* Early stopping bookkeeping after a validation (is_bleu: a BLEU score, else a loss). Returns 1
 * when patience ran out. */
static int judge(trainer_t *t, int is_bleu, double value) {
    const trainer_options_t *o = t->o;
    int improved;
    if (is_bleu) {
        improved = value > t->best_bleu;
        if (improved) t->best_bleu = value;
    } else {
        improved = value < t->best_loss;
        if (improved) t->best_loss = value;
    }
    if ((o->stop_metric == STOP_ON_BLEU) != is_bleu) return 0;
    t->bad = improved ? 0 : t->bad + 1;
    return o->patience > 0 && t->bad >= o->patience;
}

/* A validation: the loss (unless this update was validated already) and, when model_dir is
 * given, the BLEU of that checkpoint. *stop says whether patience ran out. */
static tern_status_t run_validation(trainer_t *t, const char *model_dir, int *stop) {
    *stop = 0;
    if (!t->valid_it || t->rank != 0) return TERN_OK; /* data-parallel: rank 0 validates, the stop is shared */
    tern_status_t st;
    int fresh = t->validated_at != t->updates;
    if (fresh) {
        double t0 = time_now(), loss, nll;
        if ((st = validate(t, &loss, &nll))) return st;
        double best_before = t->best_loss;
        *stop = judge(t, 0, loss);
        t->last_loss = loss;
        t->last_nll = nll;
        t->validated_at = t->updates;
        t->dirty = 1;
        tlog(t, "valid | epoch %lld | update %ld | loss %.4f | nll %.4f | ppl %.2f | best loss %.4f%s (%.1f s)",
             (long long)t->cur_epoch + 1, t->updates, loss, nll, exp(nll), t->best_loss,
             loss < best_before ? " (new best)" : "", time_now() - t0);
    }
    double bleu = -1;
    if (model_dir && t->n_bleu > 0) {
        char summary[256];
        double t0 = time_now();
        if ((st = bleu_eval(t, model_dir, &bleu, summary, sizeof summary))) return st;
        double best_b = t->best_bleu;
        if (judge(t, 1, bleu)) *stop = 1;
        t->last_bleu = bleu;
        t->dirty = 1;
        tlog(t, "bleu  | epoch %lld | update %ld | BLEU = %s | beam %d | %d sentences | best %.2f%s (%.1f s)",
             (long long)t->cur_epoch + 1, t->updates, summary, t->o->bleu_beam, t->n_bleu, t->best_bleu,
             bleu > best_b ? " (new best)" : "", time_now() - t0);
    }
    if (fresh || bleu >= 0) {
        fprintf(t->vcurve, "%ld\t%lld\t%.9g\t%.9g\t%.9g\t%.4f\n", t->updates, (long long)t->cur_epoch + 1,
                t->last_loss, t->last_nll, exp(t->last_nll), bleu);
        fflush(t->vcurve);
    }
    if (t->o->patience > 0 && t->bad > 0)
        tlog(t, "no improvement of the validation %s for %d of %d validation(s)",
             t->o->stop_metric == STOP_ON_BLEU ? "BLEU" : "loss", t->bad, t->o->patience);
    return TERN_OK;
}

/* ------------------------------------------------------------ RL refinement (rl.h) */

typedef struct {
    tern_model_t *model;
    tern_translator_t *tr;
} rl_sampler_t;

/* The sampler of this update: the current parameters written as a model directory
 * (SAVE_DIR/rl-sampler[-RANK]: weights, config, vocabularies), loaded by the inference engine with
 * random sampling of M translations per source (beam 1, no dropout), the seed a function of
 * (--seed, the update count) so that a resumed run draws the same samples. */
static tern_status_t rl_sampler_open(trainer_t *t, rl_sampler_t *rs) {
    const trainer_options_t *o = t->o;
    double t0 = time_now();
    if (!t->rl_dir[0]) {
        char name[64];
        if (t->world > 1) snprintf(name, sizeof name, "rl-sampler-%d", t->rank);
        else snprintf(name, sizeof name, "rl-sampler");
        path_join(t->rl_dir, sizeof t->rl_dir, o->save_dir, name);
    }
    ckpt_contents_t c = {0};
    c.params = t->pv;
    c.n_params = t->m.n_tensors;
    c.alias_names = t->m.alias_names;
    c.alias_targets = t->m.alias_targets;
    c.n_aliases = t->m.n_aliases;
    c.n_scalars = t->fam->scalars(&t->m, &c.scalars);
    c.spec_name = t->fam->spec_name;
    if (strcmp(t->fam->architecture, TRAIN_DEFAULT_ARCHITECTURE)) c.architecture = t->fam->architecture;
    c.vocab = &t->vocab;
    c.layer_norm_epsilon = t->m.layer_norm_epsilon;
    tern_status_t st = ckpt_write_model(t->rl_dir, &c);
    if (st) return tern_error_prefix(st, "RL sampler: ");
    tern_model_options_t mo = tern_model_default_options();
    mo.compute_type = TERN_COMPUTE_FLOAT32;
    if ((st = tern_model_load(&rs->model, t->rl_dir, &mo))) return tern_error_prefix(st, "RL sampler: ");
    tern_search_params_t sp = tern_search_default_params();
    sp.beam_size = 1;
    sp.num_hypotheses = 1;
    sp.sampling_topk = o->rl_topk;
    sp.sampling_temperature = o->rl_temperature;
    sp.num_samples = o->rl_samples;
    sp.seed = rng_mix64(o->seed ^ rng_mix64((uint64_t)t->updates + 0x5eed));
    sp.max_decoding_length = t->rl_caps.max_T - 1; /* the workspace's target positions, with EOS */
    tern_translator_options_t to = tern_translator_default_options();
    to.search = &sp;
    to.workers = 1;
    to.threads_per_worker = t->threads;
    if ((st = tern_translator_create(&rs->tr, rs->model, &to))) {
        tern_model_free(rs->model);
        rs->model = NULL;
        return tern_error_prefix(st, "RL sampler: ");
    }
    t->rl_sample_time += time_now() - t0;
    return TERN_OK;
}

static void rl_sampler_close(trainer_t *t, rl_sampler_t *rs) {
    if (!rs->model) return;
    tern_translator_free(rs->tr);
    tern_model_free(rs->model);
    rs->tr = NULL;
    rs->model = NULL;
    kernels_set_num_threads(t->threads);
}

/* The REINFORCE part of micro-batch s (the update's batch number gidx): M samples per source from
 * the sampler (keys: the batch number and the sentence, so a draw never depends on the rank or
 * the thread count), then rl_samples_backward with scale 1 / (M · sources of the update). */
static tern_status_t rl_step(trainer_t *t, rl_sampler_t *rs, const slot_t *s, int gidx) {
    const trainer_options_t *o = t->o;
    int B = s->B, S = s->S, M = o->rl_samples, pad = t->vocab.pad_id;
    tern_status_t st = TERN_OK;
    int **ids = malloc((size_t)B * sizeof *ids), *len = malloc((size_t)B * sizeof *len);
    uint64_t *keys = malloc((size_t)B * sizeof *keys);
    search_result_t *res = calloc((size_t)B, sizeof *res);
    const int **samp = malloc((size_t)B * M * sizeof *samp);
    int *slen = malloc((size_t)B * M * sizeof *slen);
    if (!ids || !len || !keys || !res || !samp || !slen) {
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int b = 0; b < B; b++) {
        ids[b] = (int *)s->src + (size_t)b * S; /* read only */
        int L = 0;
        while (L < S && ids[b][L] != pad) L++;
        len[b] = L;
        keys[b] = sample_key(((uint64_t)gidx << 20) | (uint64_t)b, 0);
    }
    double t0 = time_now();
    translator_call_t call;
    if ((st = translator_call_init(rs->tr, NULL, &call))) goto done;
    rs->tr->call = &call;
    st = translator_translate_ids_sd(rs->tr, ids, len, NULL, keys, B, res);
    rs->tr->call = NULL;
    kernels_set_num_threads(t->threads);
    t->rl_sample_time += time_now() - t0;
    if (st) goto done;
    for (int b = 0; b < B; b++) {
        if (res[b].n != M) {
            st = tern_error(TERN_ERR_INTERNAL, "RL sampler: %d samples for a source, expected %d", res[b].n, M);
            goto done;
        }
        for (int j = 0; j < M; j++) {
            samp[(size_t)b * M + j] = res[b].hyps[j].tokens;
            slen[(size_t)b * M + j] = res[b].hyps[j].length;
        }
    }
    rl_stats_t rst = {0};
    st = rl_samples_backward(t->fam, &t->m, t->ws, &t->rl_caps, &(rl_tokens_t){pad, t->vocab.tgt_start, t->vocab.tgt_eos},
                             s->src, B, S, s->tout, s->T, M, samp, slen, 1.0f / ((float)M * (float)t->upd_nsrc), NULL,
                             &rst);
    t->rl_reward_sum += rst.reward_sum;
    t->rl_n += rst.samples;
done:
    for (int b = 0; res && b < B; b++) search_result_free(&res[b]);
    free(ids), free(len), free(keys), free(res), free(samp), free(slen);
    return st;
}

/* ------------------------------------------------------------ one update */

static void copy_batch(slot_t *s, const data_batch_t *b) {
    s->B = b->B;
    s->S = b->S;
    s->T = b->T;
    s->ntok = b->n_tgt_tokens;
    memcpy(s->src, b->src, sizeof *s->src * (size_t)b->B * (size_t)b->S);
    memcpy(s->tin, b->tgt_in, sizeof *s->tin * (size_t)b->B * (size_t)b->T);
    memcpy(s->tout, b->tgt_out, sizeof *s->tout * (size_t)b->B * (size_t)b->T);
}

/* --freeze: marks the frozen tensors (their starting values are copied at the first update). */
static tern_status_t setup_freeze(trainer_t *t) {
    const char *f = t->o->freeze;
    if (!f) return TERN_OK;
    if (strcmp(f, "embeddings") && strcmp(f, "encoder"))
        return tern_error(TERN_ERR_INVALID_ARG, "--freeze must be embeddings or encoder, got '%s'", f);
    if (!(t->frozen = calloc((size_t)t->m.n_tensors, sizeof *t->frozen))) return tern_error(TERN_ERR_NOMEM, "out of memory");
    int n = 0;
    for (int i = 0; i < t->m.n_tensors; i++) {
        const char *name = t->m.tensors[i].name;
        t->frozen[i] = !strcmp(f, "encoder") ? !strncmp(name, "encoder/", 8)
                                             : strstr(name, "embeddings") != NULL || strstr(name, "position_enc") != NULL;
        n += t->frozen[i];
    }
    if (!n) return tern_error(TERN_ERR_INVALID_ARG, "--freeze %s: the model has no such tensors", f);
    return TERN_OK;
}

/* Copies the frozen tensors' values to (to_copy = 1) or from their copy. */
static void freeze_copy(trainer_t *t, int to_copy) {
    float *c = t->frozen_copy;
    for (int i = 0; i < t->m.n_tensors; i++) {
        if (!t->frozen[i]) continue;
        float *p = t->m.params + t->m.tensors[i].offset;
        size_t n = t->m.tensors[i].numel;
        if (to_copy) memcpy(c, p, n * sizeof(float));
        else memcpy(p, c, n * sizeof(float));
        c += n;
    }
}

/* Before a step: the frozen tensors' gradients to zero (so that the norm leaves them out); at the
 * first update, their starting values are kept. */
static tern_status_t freeze_grads(trainer_t *t) {
    if (!t->frozen) return TERN_OK;
    if (!t->frozen_copy) {
        size_t n = 0;
        for (int i = 0; i < t->m.n_tensors; i++) n += t->frozen[i] ? t->m.tensors[i].numel : 0;
        if (!(t->frozen_copy = malloc(n * sizeof(float)))) return tern_error(TERN_ERR_NOMEM, "out of memory");
        freeze_copy(t, 1);
    }
    for (int i = 0; i < t->m.n_tensors; i++)
        if (t->frozen[i]) memset(t->m.grads + t->m.tensors[i].offset, 0, t->m.tensors[i].numel * sizeof(float));
    return TERN_OK;
}

/* One update of n batches in all (over the ranks), ntok target tokens in all; this rank holds
 * nslots of them, the batches [first, first + nslots) of the update. Data-parallel: the gradients
 * are summed over the ranks in buckets (dist.h), during the backward pass of the rank's last
 * batch; the loss sums too; every rank then steps on the same gradient. */
static tern_status_t do_update(trainer_t *t, int nslots, int first, int n, int64_t ntok) {
    const trainer_options_t *o = t->o;
    double t0 = time_now();
    float scale = 1.0f / (float)ntok;
    double loss = 0, nll = 0;
    memset(t->m.grads, 0, t->m.n_params * sizeof(float));
    tern_status_t st;
    rl_sampler_t rs = {0};
    if (o->rl_gleu && (st = rl_sampler_open(t, &rs))) return tern_error_prefix(st, "update %ld: ", t->updates + 1);
    /* --qat: every micro-batch's forward and backward on the fake-quantized weights; the gradient
     * (with respect to them) then updates the master values (the straight-through estimator) */
    if (t->qat) qat_enter(t->qat, &t->m);
    for (int j = 0; j < nslots; j++) {
        const slot_t *s = &t->slots[j];
        train_loss_t L;
        /* (RL: the samples' backward passes follow, so the buckets start after them, in finish) */
        if (t->dg && j == nslots - 1 && !o->rl_gleu) dist_grads_arm(t->dg);
        /* RL: the samples of the current parameters first (rl_step), then the references' pass */
        /* dropout keyed by the global micro-batch index, as in a single process */
        if ((st = t->fam->forward(&t->m, t->ws, s->src, s->tin, s->tout, s->B, s->S, s->T, 1, o->seed,
                                  t->micro + (uint64_t)(first + j), &L)) ||
            (st = t->fam->backward(&t->m, t->ws, o->rl_gleu ? o->rl_alpha * scale : scale)) ||
            (o->rl_gleu && (st = rl_step(t, &rs, s, first + j)))) {
            rl_sampler_close(t, &rs);
            if (t->qat) qat_leave(t->qat, &t->m);
            return tern_error_prefix(st, "update %ld: ", t->updates + 1);
        }
        loss += L.loss;
        nll += L.nll;
    }
    rl_sampler_close(t, &rs);
    t->micro += (uint64_t)n;
    if (t->dg) {
        dist_grads_finish(t->dg);
        double sums[2] = {loss, nll};
        dist_sum_doubles(sums, 2);
        loss = sums[0], nll = sums[1];
    }
    if (t->qat) qat_leave(t->qat, &t->m);
    if ((st = freeze_grads(t))) return st;
    double gnorm = grad_global_norm(t->m.grads, t->m.n_params);
    if (!isfinite(gnorm))
        return tern_error(TERN_ERR_INPUT, "update %ld: the gradient norm is %g: training diverged (lower --lr, "
                          "raise --warmup, or clip with --clip-norm)", t->updates + 1, gnorm);
    /* clipping (clip_grad_norm): the factor applied inside Adam's pass, or to the gradients for SGD */
    float coef = clip_grad_coef(gnorm, o->clip_norm);
    double lr = lr_at(&o->sched, t->updates);
    if (lr_use_sgd(&o->sched, t->updates)) {
        if (coef != 1.0f) grad_scale(t->m.grads, t->m.n_params, coef);
        sgd_step(t->m.params, t->m.grads, t->m.n_params, (float)lr, o->adam.weight_decay);
    } else {
        adam_step_scaled(&t->adam, t->m.params, t->m.grads, coef, (float)lr);
    }
    if (t->frozen) freeze_copy(t, 0); /* after the step: back to where they started (weight decay too) */
    t->fam->params_changed(&t->m);
    t->updates++;
    t->dirty = 1;
    double dt = time_now() - t0;
    t->run_train_time += dt;
    t->run_tokens += ntok;
    t->acc_loss += loss;
    t->acc_nll += nll;
    t->acc_gnorm += gnorm;
    t->acc_tok += ntok;
    t->acc_n++;
    t->acc_time += dt;
    double ul = loss / (double)ntok, un = nll / (double)ntok;
    if (t->tcurve) fprintf(t->tcurve, "%ld\t%lld\t%.17g\t%.17g\t%.9g\t%.9g\t%.9g\t%lld\t%.1f\n", t->updates,
            (long long)t->cur_epoch + 1, ul, un, exp(un), lr, gnorm, (long long)ntok, elapsed(t));
    if (o->log_interval > 0 && t->updates % o->log_interval == 0) {
        char el[32];
        fmt_hms(el, sizeof el, elapsed(t));
        double al = t->acc_loss / (double)t->acc_tok, an = t->acc_nll / (double)t->acc_tok;
        tlog(t, "epoch %lld | update %ld | loss %.4f | nll %.4f | ppl %.2f | lr %.4g | gnorm %.3f | tok/s %.0f | "
             "elapsed %s", (long long)t->cur_epoch + 1, t->updates, al, an, exp(an), lr_at(&o->sched, t->updates),
             t->acc_gnorm / t->acc_n, t->acc_time > 0 ? (double)t->acc_tok / t->acc_time : 0.0, el);
        if (t->tcurve) fflush(t->tcurve);
        if (o->rl_gleu && t->rl_n > 0)
            tlog(t, "rl    | update %ld | mean GLEU reward %.4f over %ld samples | sampling %.1f s", t->updates,
                 t->rl_reward_sum / (double)t->rl_n, t->rl_n, t->rl_sample_time);
        t->rl_reward_sum = t->rl_sample_time = 0;
        t->rl_n = 0;
        t->acc_loss = t->acc_nll = t->acc_gnorm = t->acc_time = 0;
        t->acc_tok = 0;
        t->acc_n = 0;
    }
    progress_bar(t, ul);
    return TERN_OK;
}

/* ------------------------------------------------------------ setup */

/* Mixed corpora: the pairs of each in the epoch's plan, against weight x kept pairs. */
static void log_mix(trainer_t *t) {
    const trainer_options_t *o = t->o;
    if (o->n_train <= 0) return;
    data_iter_state_t s = data_iter_state(t->train_it);
    for (int k = 0; k < o->n_train; k++) {
        double w = o->train_weights ? o->train_weights[k] : 1.0;
        int64_t kept = 0;
        for (int64_t i = 0; i < data_corpus_pairs(t->train_cs[k]); i++) kept += data_corpus_kept(t->train_cs[k], i);
        tlog(t, "mix: epoch %lld corpus %d (%s): %lld pairs drawn, weight %g x %lld kept = %.1f", (long long)s.epoch + 1,
             k, o->train_srcs[k], (long long)data_iter_epoch_count(t->train_it, k), w, (long long)kept,
             w * (double)kept);
    }
}

static tern_status_t open_data(trainer_t *t) {
    const trainer_options_t *o = t->o;
    const char *cdir = o->cache_dir ? o->cache_dir : o->save_dir;
    tern_status_t st;
    if (t->rank == 0 && (st = model_dir_mkdir(cdir))) return st;
    /* data-parallel: rank 0 builds (or checks) the caches, then the others map them */
    if (t->rank != 0) dist_barrier();
    char cp[4096];
    data_stats_t s;
    data_options_t dopt = o->data;
    if (dopt.threads <= 0) dopt.threads = t->threads;
    int nc = o->n_train > 0 ? o->n_train : 1;
    if (!(t->train_cs = calloc((size_t)nc, sizeof *t->train_cs))) return tern_error(TERN_ERR_NOMEM, "out of memory");
    t->n_train_cs = nc;
    for (int k = 0; k < nc; k++) {
        const char *src = o->n_train > 0 ? o->train_srcs[k] : o->train_src;
        const char *tgt = o->n_train > 0 ? o->train_tgts[k] : o->train_tgt;
        char name[64];
        if (k) snprintf(name, sizeof name, "train.%d.cache", k);
        else snprintf(name, sizeof name, "train.cache");
        path_join(cp, sizeof cp, cdir, name);
        if ((st = data_corpus_open(&t->train_cs[k], cp, src, tgt, &t->vocab, &dopt, &s))) return st;
        char which[32] = "";
        if (nc > 1) snprintf(which, sizeof which, " [%d]", k);
        tlog(t, "train%s: %lld pairs, %lld kept (skipped: %lld empty, %lld too long, %lld beyond ratio %g), %lld "
             "source + %lld target tokens, unknown pieces %lld + %lld; cache %s (%s%.1f s)", which, (long long)s.pairs,
             (long long)s.kept, (long long)s.empty, (long long)s.too_long, (long long)s.bad_ratio,
             (double)dopt.max_ratio, (long long)s.src_tokens, (long long)s.tgt_tokens, (long long)s.src_unk,
             (long long)s.tgt_unk, cp, s.rebuilt ? "built in " : "mapped, ", s.rebuilt ? s.build_seconds : 0.0);
        if (s.pairs == 0) return tern_error(TERN_ERR_INPUT, "%s: empty training corpus (no line)", src);
        if (s.kept == 0) return tern_error(TERN_ERR_INPUT, "%s: no training pair left after the length filters", src);
    }
    data_batching_t b = data_default_batching();
    b.max_tokens = o->max_tokens;
    b.max_sentences = o->max_sentences;
    b.shuffle = o->shuffle;
    b.seed = o->seed;
    if ((st = data_iter_new_mix(&t->train_it, (const data_corpus_t *const *)t->train_cs,
                                o->n_train > 0 ? o->train_weights : NULL, nc, &b)))
        return st;
    log_mix(t);
    int mB, mS, mT, ms, mt;
    data_iter_max_shape(t->train_it, &mB, &mS, &mT, &ms, &mt);
    char ms_s[48] = "";
    if (o->max_sentences) snprintf(ms_s, sizeof ms_s, ", max sentences %d", o->max_sentences);
    tlog(t, "train: %lld batches per epoch (max tokens %d%s), largest batch %d sentences, S <= %d, T <= %d",
         (long long)data_iter_batches_per_epoch(t->train_it), o->max_tokens, ms_s, mB, mS, mT);
    if (o->valid_src) {
        path_join(cp, sizeof cp, cdir, "valid.cache");
        if ((st = data_corpus_open(&t->valid_c, cp, o->valid_src, o->valid_tgt, &t->vocab, &dopt, &s))) return st;
        tlog(t, "valid: %lld pairs, %lld kept for the loss (skipped: %lld empty, %lld too long, %lld beyond ratio)",
             (long long)s.pairs, (long long)s.kept, (long long)s.empty, (long long)s.too_long, (long long)s.bad_ratio);
        if (s.kept > 0) {
            data_batching_t vb = data_default_batching();
            vb.max_tokens = o->valid_max_tokens > 0 ? o->valid_max_tokens : o->max_tokens;
            vb.shuffle = 0;
            vb.seed = o->seed;
            if ((st = data_iter_new(&t->valid_it, t->valid_c, &vb))) return st;
        }
    }
    if (t->rank == 0) dist_barrier(); /* the caches are written (an error above aborts the job) */
    return TERN_OK;
}

/* --init-from: the model's weights (*w, loaded) and its family's configuration read from them over
 * config (into *out, malloc'd). The model must be of the run's family. */
static tern_status_t init_config(trainer_t *t, weights_t **w, const void *config, void **out) {
    const char *dir = t->o->init_from;
    char p[4096];
    model_config_t mc;
    model_config_defaults(&mc);
    tern_status_t st;
    path_join(p, sizeof p, dir, "config.json");
    if (file_exists(p) && (st = model_config_load(&mc, p))) return st;
    const char *arch = mc.architecture[0] ? mc.architecture : TRAIN_DEFAULT_ARCHITECTURE;
    if (strcmp(arch, t->fam->architecture))
        return tern_error(TERN_ERR_MISMATCH, "--init-from %s: a %s model, but this run trains a %s", dir, arch,
                          t->fam->architecture);
    if (!t->fam->config_from_model)
        return tern_error(TERN_ERR_UNSUPPORTED, "--init-from %s: the %s family cannot start from a model yet", dir,
                          arch);
    path_join(p, sizeof p, dir, "model.safetensors");
    if (file_exists(p)) st = weights_load_safetensors(w, p);
    else {
        path_join(p, sizeof p, dir, "model.bin");
        if (!file_exists(p))
            return tern_error(TERN_ERR_IO, "--init-from %s: no model.safetensors or model.bin in this directory", dir);
        st = weights_load_ct2(w, p);
    }
    if (st) return st;
    const char *lists[2] = {t->o->init_enc_layers, t->o->init_dec_layers};
    static const char *prefixes[2] = {"encoder/layer_", "decoder/layer_"};
    for (int k = 0; k < 2; k++) {
        if (!lists[k]) continue;
        int keep[256], n = 0;
        const char *p = lists[k];
        while (*p) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || v < 0 || v > 100000 || n == 256 || (*end && *end != ','))
                return tern_error(TERN_ERR_INVALID_ARG, "--init-%s-layers '%s': a comma-separated list of layer "
                                  "numbers (from 0) expected", k ? "decoder" : "encoder", lists[k]);
            keep[n++] = (int)v;
            p = *end ? end + 1 : end;
        }
        if (!n)
            return tern_error(TERN_ERR_INVALID_ARG, "--init-%s-layers: no layer given", k ? "decoder" : "encoder");
        if ((st = weights_keep_layers(*w, prefixes[k], keep, n))) return st;
    }
    if (!(*out = malloc(t->fam->config_size))) return tern_error(TERN_ERR_NOMEM, "out of memory");
    memcpy(*out, config, t->fam->config_size);
    return t->fam->config_from_model(*out, *w, &mc);
}

static tern_status_t setup_model(trainer_t *t) {
    const trainer_options_t *o = t->o;
    const char *arch = o->architecture ? o->architecture : TRAIN_DEFAULT_ARCHITECTURE;
    if (!(t->fam = train_family_find(arch)))
        return tern_error(TERN_ERR_UNSUPPORTED, "architecture '%s': no training table registered", arch);
    train_data_dims_t dd = {vocab_size(t->vocab.src_vocab), vocab_size(t->vocab.tgt_vocab),
                            t->vocab.src_vocab == t->vocab.tgt_vocab, t->vocab.pad_id,
                            TERN_MAX(o->data.max_src_len, o->data.max_tgt_len)};
    const void *config = o->model_config;
    void *defaults = NULL;
    if (!config) { /* the family's defaults */
        if (!(defaults = calloc(1, t->fam->config_size))) return tern_error(TERN_ERR_NOMEM, "out of memory");
        t->fam->default_config(defaults);
        config = defaults;
    }
    weights_t *init = NULL;
    void *from_model = NULL;
    tern_status_t st = TERN_OK;
    if (o->init_from && (st = init_config(t, &init, config, &from_model))) {
        free(defaults);
        weights_free(init); /* loaded before a later check failed (a bad layer list, say) */
        free(from_model);
        return st;
    }
    int64_t raw_kv = 0;
    if (init && weights_get_int(init, transformer_key_name(TKEY_DEC_RAW_SELF_KV), &raw_kv) && raw_kv)
        tlog(t, "init: a pre-norm Marian model: Marian decodes it with the decoder self-attention's keys and values "
             "of steps >= 1 taken before the layer norm, but trains it with them after the norm; this run trains it "
             "as Marian trains, and its checkpoints decode that way too (a plain pre-norm Transformer)");
    if (!st && o->rl_gleu && from_model) /* RL: O_ML is the plain log-likelihood (no label smoothing) */
        for (const train_option_t *op = t->fam->options; op && op->name; op++)
            if (!strcmp(op->name, "label-smoothing") && op->kind == TRAIN_OPT_FLOAT) *(float *)((char *)from_model + op->field) = 0.0f;
    st = t->fam->create(&t->m, from_model ? from_model : config, &dd);
    free(defaults);
    free(from_model);
    if (!st) t->m_ok = 1;
    if (!st && init) st = t->fam->load(&t->m, init); /* --init-from: its parameters, the optimizer fresh */
    else if (!st) t->fam->init_params(&t->m, o->seed);
    weights_free(init);
    if (st) return o->init_from ? tern_error_prefix(st, "--init-from %s: ", o->init_from) : st;
    int mB, mS, mT, ms, mt;
    data_iter_max_shape(t->train_it, &mB, &mS, &mT, &ms, &mt);
    if (t->valid_it) {
        int vB, vS, vT, vs, vt;
        data_iter_max_shape(t->valid_it, &vB, &vS, &vT, &vs, &vt);
        mS = TERN_MAX(mS, vS), mT = TERN_MAX(mT, vT), ms = TERN_MAX(ms, vs), mt = TERN_MAX(mt, vt);
    }
    t->m.act_fq = o->qat == QAT_INT8_ACT; /* --qat int8-act: the linear layers' inputs too */
    if ((st = t->fam->ws_new(&t->ws, &t->m, ms, mt, mS, mT))) return st;
    t->rl_caps = (rl_caps_t){ms, mt, mS, mT};
    if (o->rl_gleu && !t->fam->set_sentence_weights)
        return tern_error(TERN_ERR_UNSUPPORTED, "--rl-gleu: the %s family has no per-sentence loss weights",
                          t->fam->architecture);
    if (o->qat && (st = qat_new(&t->qat, &t->m, (qat_mode_t)o->qat))) return st;
    if (t->world > 1 && (st = dist_grads_new(&t->dg, &t->m, t->ws, o->bucket_mb, o->comm_overlap))) return st;
    if ((st = adam_init(&t->adam, t->m.n_params, &o->adam))) return st;
    t->adam_ok = 1;
    data_iter_max_shape(t->train_it, &mB, &mS, &mT, &ms, &mt);
    t->slots = calloc((size_t)o->update_freq, sizeof *t->slots);
    if (!t->slots) return tern_error(TERN_ERR_NOMEM, "out of memory");
    for (int j = 0; j < o->update_freq; j++) {
        slot_t *s = &t->slots[j];
        s->src = malloc(sizeof *s->src * (size_t)ms);
        s->tin = malloc(sizeof *s->tin * (size_t)mt);
        s->tout = malloc(sizeof *s->tout * (size_t)mt);
        if (!s->src || !s->tin || !s->tout) return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    t->pv = calloc((size_t)t->m.n_tensors, sizeof *t->pv);
    t->mv = calloc((size_t)t->m.n_tensors, sizeof *t->mv);
    t->vv = calloc((size_t)t->m.n_tensors, sizeof *t->vv);
    if (!t->pv || !t->mv || !t->vv) return tern_error(TERN_ERR_NOMEM, "out of memory");
    train_model_views(&t->m, t->m.params, t->pv);
    train_model_views(&t->m, t->adam.m, t->mv);
    train_model_views(&t->m, t->adam.v, t->vv);
    char line[512];
    t->fam->describe(&t->m, 0, line, sizeof line);
    tlog(t, "model: %s; workspace %.1f MB; %d thread(s)", line, (double)t->fam->ws_bytes(t->ws) / 1e6, t->threads);
    for (int i = 1; t->fam->describe(&t->m, i, line, sizeof line); i++) tlog(t, "%s", line);
    if (t->qat)
        tlog(t, "qat: %s fake quantization (per-row scale, round half to even, straight-through gradient) of %d "
             "weight matrices, %.2fM parameters%s; validation on the fake-quantized weights, BLEU in int8",
             qat_mode_name(o->qat), qat_count(t->qat), (double)qat_numel(t->qat) / 1e6,
             o->qat == QAT_INT8_ACT ? ", and of every linear layer's input rows (as int8 inference rounds them)" : "");
    return TERN_OK;
}

static tern_status_t load_bleu_lines(trainer_t *t) {
    const trainer_options_t *o = t->o;
    if (!o->bleu || !o->valid_src) return TERN_OK;
    int ns, nr;
    tern_status_t st;
    if ((st = read_lines(o->valid_src, &t->vsrc_buf, &t->vsrc, &ns)) ||
        (st = read_lines(o->valid_tgt, &t->vref_buf, &t->vref, &nr)))
        return st;
    if (ns != nr)
        return tern_error(TERN_ERR_INPUT, "%s has %d lines, %s %d", o->valid_src, ns, o->valid_tgt, nr);
    t->n_bleu = o->bleu_max_sentences > 0 && o->bleu_max_sentences < ns ? o->bleu_max_sentences : ns;
    return TERN_OK;
}

static tern_status_t check_options(const trainer_options_t *o) {
    if (o->rl_gleu) {
        if (!o->init_from)
            return tern_error(TERN_ERR_INVALID_ARG, "--rl-gleu refines a trained model: give it with --init-from MODEL_DIR");
        if (!o->train_tgt)
            return tern_error(TERN_ERR_INVALID_ARG, "--rl-gleu needs target references (--train-tgt) for its GLEU reward");
        if (o->rl_samples < 2 || o->rl_samples > 1024)
            return tern_error(TERN_ERR_INVALID_ARG, "--rl-samples must be in 2..1024 (the baseline is their mean), got %d",
                              o->rl_samples);
        if (!(o->rl_alpha >= 0.0f)) return tern_error(TERN_ERR_INVALID_ARG, "--rl-alpha must be >= 0");
        if (!(o->rl_temperature > 0.0f)) return tern_error(TERN_ERR_INVALID_ARG, "--rl-temperature must be > 0");
        if (o->rl_topk < 0) return tern_error(TERN_ERR_INVALID_ARG, "--rl-topk must be >= 0");
    }
    if (!o->save_dir) return tern_error(TERN_ERR_INVALID_ARG, "no save directory");
    if (o->n_train > 0) {
        for (int k = 0; k < o->n_train; k++)
            if (!o->train_srcs[k] || !o->train_tgts[k] || !o->train_srcs[k][0] || !o->train_tgts[k][0])
                return tern_error(TERN_ERR_INVALID_ARG, "training corpus %d: no source or target file", k + 1);
    } else if (!o->train_src || !o->train_tgt) return tern_error(TERN_ERR_INVALID_ARG, "no training files");
    if (!o->valid_src != !o->valid_tgt)
        return tern_error(TERN_ERR_INVALID_ARG, "validation needs both a source and a target file");
    if (o->update_freq < 1) return tern_error(TERN_ERR_INVALID_ARG, "update_freq must be >= 1");
    if (o->bleu && o->bleu_beam < 1) return tern_error(TERN_ERR_INVALID_ARG, "BLEU beam size must be >= 1");
    if (o->clip_norm < 0) return tern_error(TERN_ERR_INVALID_ARG, "clip norm must be >= 0");
    if (o->qat != QAT_NONE && o->qat != QAT_INT8 && o->qat != QAT_INT8_ACT)
        return tern_error(TERN_ERR_INVALID_ARG, "--qat must be int8, int8-act or none (mode %d)", o->qat);
    return lr_schedule_check(&o->sched);
}

static void trainer_free(trainer_t *t) {
    if (t->slots)
        for (int j = 0; j < t->o->update_freq; j++) free(t->slots[j].src), free(t->slots[j].tin), free(t->slots[j].tout);
    free(t->slots);
    free(t->frozen);
    free(t->frozen_copy);
    free(t->pv), free(t->mv), free(t->vv);
    dist_grads_free(t->dg);
    qat_free(t->qat);
    if (t->ws) t->fam->ws_free(t->ws);
    if (t->adam_ok) adam_free(&t->adam);
    if (t->m_ok) t->fam->destroy(&t->m);
    data_iter_free(t->train_it);
    data_iter_free(t->valid_it);
    for (int k = 0; k < t->n_train_cs; k++) data_corpus_free(t->train_cs[k]);
    free(t->train_cs);
    data_corpus_free(t->valid_c);
    if (t->vocab_ok) data_vocab_free(&t->vocab);
    free(t->vsrc), free(t->vref), free(t->vsrc_buf), free(t->vref_buf);
    if (t->log) fclose(t->log);
    if (t->tcurve) fclose(t->tcurve);
    if (t->vcurve) fclose(t->vcurve);
}

/* ------------------------------------------------------------ the run */

enum { FLAG_INTERRUPT = 1, FLAG_TIME = 2, FLAG_EARLY_STOP = 4 };

/* The stop conditions that differ between data-parallel ranks (a signal, the clock, rank 0's
 * validation), OR-ed over the ranks so that every rank takes the same decision. */
static int agreed_flags(trainer_t *t, int early_stop) {
    const trainer_options_t *o = t->o;
    int f = (o->stop && *o->stop ? FLAG_INTERRUPT : 0) | (o->max_time > 0 && elapsed(t) >= o->max_time ? FLAG_TIME : 0) |
            (early_stop ? FLAG_EARLY_STOP : 0);
    return dist_or_int(f);
}

static tern_status_t train_loop(trainer_t *t, trainer_result_t *r) {
    const trainer_options_t *o = t->o;
    tern_status_t st;
    const char *reason = NULL;
    while (!reason) {
        int flags = agreed_flags(t, 0);
        if (o->max_updates > 0 && t->updates >= o->max_updates) reason = "max updates";
        else if (o->max_epochs > 0 && data_iter_state(t->train_it).epoch >= o->max_epochs) reason = "max epochs";
        else if (flags & FLAG_TIME) reason = "max time";
        else if (flags & FLAG_INTERRUPT) reason = "interrupted";
        if (reason) break;
        /* one group of world x update_freq batches (every rank reads them all, in the same order);
         * this rank trains on [rank·k, (rank+1)·k) of them */
        t->cur_epoch = data_iter_state(t->train_it).epoch;
        int n = 0, ended = 0, mine = 0, k = o->update_freq, first = t->rank * k;
        int64_t ntok = 0, nsrc = 0;
        while (n < k * t->world) {
            const data_batch_t *b;
            if ((st = data_iter_next(t->train_it, &b))) return st;
            if (!b) {
                ended = 1;
                if (t->rank == 0) log_mix(t);
                break;
            }
            ntok += b->n_tgt_tokens;
            nsrc += b->B;
            if (n >= first && n < first + k) copy_batch(&t->slots[mine++], b);
            n++;
        }
        t->upd_nsrc = nsrc;
        if (n > 0 && (st = do_update(t, mine, first, n, ntok))) return st;
        int stop = 0;
        if (ended) {
            /* epoch end: checkpoint, validation, BLEU of that checkpoint, the checkpoint again with
             * the validation's outcome */
            tlog(t, "end of epoch %lld (update %ld)", (long long)t->cur_epoch + 1, t->updates);
            int with_bleu = t->valid_it && t->n_bleu > 0 &&
                            !(o->rl_gleu && t->validated_at == t->updates); /* RL: scored at this update already */
            if (with_bleu && (st = save_checkpoint(t))) return st;
            if (t->valid_it && (st = run_validation(t, with_bleu ? t->last_ckpt : NULL, &stop))) return st;
            if ((st = save_checkpoint(t))) return st;
            t->cur_epoch = data_iter_state(t->train_it).epoch;
            if (o->max_epochs > 0 && t->cur_epoch >= o->max_epochs) reason = "max epochs";
        }
        if (n > 0 && o->valid_interval_updates > 0 && t->updates % o->valid_interval_updates == 0 &&
            t->validated_at != t->updates && t->valid_it) {
            int s2, rl_bleu = o->rl_gleu && t->n_bleu > 0; /* RL: BLEU decides, at every validation */
            if (rl_bleu && (st = save_checkpoint(t))) return st;
            if ((st = run_validation(t, rl_bleu ? t->last_ckpt : NULL, &s2))) return st;
            if (rl_bleu && (st = save_checkpoint(t))) return st; /* again, with the validation's outcome */
            stop = stop || s2;
        }
        flags = agreed_flags(t, stop);
        if ((flags & FLAG_EARLY_STOP) && !reason) reason = "early stop";
        if ((flags & FLAG_INTERRUPT) && !reason) reason = "interrupted";
        if ((flags & FLAG_TIME) && !reason) reason = "max time";
        if (n > 0 && !reason && o->save_interval_updates > 0 && t->updates % o->save_interval_updates == 0 &&
            t->dirty)
            if ((st = save_checkpoint(t))) return st;
    }
    if (t->dirty && (st = save_checkpoint(t))) return st;
    r->stop_reason = reason;
    return TERN_OK;
}

/* The run's state before anything is opened: options, clocks, "nothing yet" markers, threads,
 * the data-parallel rank and whether a progress bar is drawn. */
static void trainer_init(trainer_t *t, const trainer_options_t *o) {
    memset(t, 0, sizeof *t);
    t->o = o;
    t->t_start = time_now();
    t->best_loss = NO_LOSS;
    t->last_loss = t->last_nll = NO_LOSS;
    t->best_bleu = -1;
    t->last_bleu = -1;
    t->validated_at = t->saved_at = -1;
    t->threads = o->threads > 0 ? o->threads : tern_num_cores();
    kernels_set_num_threads(t->threads);
    t->rank = dist_rank();
    t->world = dist_world();
    t->progress = t->rank != 0 ? 0 : o->progress < 0 ? (!o->quiet && isatty(fileno(stderr))) : o->progress;
}

/* The checkpoint to continue from into resume_dir ("" for a fresh run): --resume-from's, or the
 * save directory's last one, which only --resume may continue. */
static tern_status_t find_resume_dir(const trainer_options_t *o, char *resume_dir, size_t n) {
    tern_status_t st;
    if (o->resume_from) {
        snprintf(resume_dir, n, "%s", o->resume_from);
    } else {
        int64_t *u;
        int k;
        if ((st = ckpt_list(o->save_dir, &u, &k))) return st;
        if (k > 0) {
            if (!o->resume) {
                free(u);
                return tern_error(TERN_ERR_INVALID_ARG, "%s already holds checkpoints: continue with --resume, or "
                                  "give another save directory", o->save_dir);
            }
            ckpt_path(resume_dir, n, o->save_dir, u[k - 1]);
        }
        free(u);
    }
    return TERN_OK;
}

/* train.log (rank 0; appended to when resuming) and the data-parallel layout's line. */
static tern_status_t open_train_log(trainer_t *t, int resuming) {
    const trainer_options_t *o = t->o;
    char p[4096];
    path_join(p, sizeof p, o->save_dir, "train.log");
    if (t->rank == 0) {
        t->log = fopen(p, resuming ? "a" : "w");
        if (!t->log) return tern_error(TERN_ERR_IO, "%s: cannot open: %s", p, strerror(errno));
    }
    if (t->world > 1)
        tlog(t, "data-parallel: %d processes (MPI), %d thread(s) each; an update is %d x %d batches; all-reduce "
             "in buckets of %g MB %s", t->world, t->threads, t->world, o->update_freq, o->bucket_mb,
             o->comm_overlap ? "during the backward pass" : "after the backward pass (--no-comm-overlap)");
    return TERN_OK;
}

/* Resuming (when resume_dir is set), then the training and validation curves (rank 0), cut back
 * to the resumed update. */
static tern_status_t resume_and_open_curves(trainer_t *t, const char *resume_dir) {
    const trainer_options_t *o = t->o;
    tern_status_t st;
    if (resume_dir[0]) {
        if ((st = resume(t, resume_dir))) return st;
        data_iter_state_t ds = data_iter_state(t->train_it);
        tlog(t, "resumed from %s: update %ld, epoch %lld, batch %lld of the epoch", resume_dir, t->updates,
             (long long)ds.epoch + 1, (long long)ds.pos);
    }
    if (t->rank == 0 &&
        ((st = open_tsv(&t->tcurve, o->save_dir, "train_curve.tsv",
                       "# update\tepoch\tloss\tnll\tppl\tlr\tgnorm\ttokens\telapsed", resume_dir[0] != 0, t->updates)) ||
        (st = open_tsv(&t->vcurve, o->save_dir, "valid_curve.tsv", "# update\tepoch\tloss\tnll\tppl\tbleu",
                       resume_dir[0] != 0, t->updates))))
        return st;
    return TERN_OK;
}

/* Data-parallel: the replicas must have stayed identical (same gradient, same steps). */
static tern_status_t check_replicas(trainer_t *t) {
    uint64_t h = XXH3_64bits(t->m.params, t->m.n_params * sizeof(float));
    if (!dist_same_u64(h))
        return tern_error(TERN_ERR_MISMATCH, "update %ld: the parameters of the %d data-parallel processes differ "
                          "(rank %d: hash %016llx)", t->updates, t->world, t->rank, (unsigned long long)h);
    return TERN_OK;
}

/* The closing lines of train.log: where and why the run stopped, its speed, the best scores, the
 * last checkpoint, and the all-reduce's statistics. */
static void log_summary(trainer_t *t, const trainer_result_t *r) {
    bar_clear(t);
    char el[32];
    fmt_hms(el, sizeof el, elapsed(t));
    char best[128] = "";
    if (t->best_loss != NO_LOSS) snprintf(best, sizeof best, "; best validation loss %.4f", t->best_loss);
    if (t->best_bleu >= 0) snprintf(best + strlen(best), sizeof best - strlen(best), ", best BLEU %.2f", t->best_bleu);
    data_iter_state_t ds = data_iter_state(t->train_it);
    tlog(t, "done (%s) at update %ld (%lld epoch(s) and %lld batch(es)): %lld target tokens in %.1f s of training "
         "steps (%.0f tok/s), elapsed %s%s; last checkpoint %s", r->stop_reason, t->updates, (long long)ds.epoch,
         (long long)ds.pos,
         (long long)t->run_tokens, t->run_train_time,
         t->run_train_time > 0 ? (double)t->run_tokens / t->run_train_time : 0.0, el, best, t->last_ckpt);
    if (t->dg) {
        dist_grads_stats_t ds2 = dist_grads_stats(t->dg);
        tlog(t, "all-reduce: %ld updates, %d buckets of ~%g MB each (%d wait for the last stage); buckets started "
             "during the backward pass %ld, of which complete when it returned %ld; rank 0 waited %.3f s after "
             "its backward passes (%.2f ms per update): %.3f s for slower ranks, %.3f s (%.2f ms per update) "
             "of communication not hidden by the backward pass; %.3f s from first bucket start to last "
             "completion", ds2.updates, ds2.buckets, ds2.bucket_mb, ds2.buckets_last_stage,
             ds2.started_in_backward, ds2.done_in_backward, ds2.wait_seconds,
             ds2.updates ? 1e3 * ds2.wait_seconds / (double)ds2.updates : 0.0, ds2.imbalance_seconds,
             ds2.exposed_seconds, ds2.updates ? 1e3 * ds2.exposed_seconds / (double)ds2.updates : 0.0,
             ds2.reduce_seconds);
    }
}

/* The result: updates, epochs, best and last scores, training time and tokens, last checkpoint. */
static void fill_result(const trainer_t *t, trainer_result_t *r) {
    r->updates = t->updates;
    r->epochs = t->cur_epoch;
    r->best_valid_loss = t->best_loss == NO_LOSS ? INFINITY : t->best_loss;
    r->best_bleu = t->best_bleu;
    r->last_valid_loss = t->last_loss == NO_LOSS ? INFINITY : t->last_loss;
    r->last_bleu = t->last_bleu;
    r->train_seconds = t->run_train_time;
    r->train_tokens = t->run_tokens;
    snprintf(r->last_checkpoint, sizeof r->last_checkpoint, "%s", t->last_ckpt);
}

tern_status_t trainer_run(const trainer_options_t *o, trainer_result_t *result) {
    trainer_result_t dummy;
    trainer_result_t *r = result ? result : &dummy;
    memset(r, 0, sizeof *r);
    tern_status_t st = check_options(o);
    if (st) return st;
    trainer_t t;
    trainer_init(&t, o);

    char resume_dir[4096] = "";
    /* data-parallel: rank 0 creates the directories and writes every file (logs, curves,
     * checkpoints, caches); the others read */
    if (t.rank == 0 && (st = model_dir_mkdir(o->save_dir))) return st;
    dist_barrier();
    if ((st = find_resume_dir(o, resume_dir, sizeof resume_dir))) return st;
    if ((st = open_train_log(&t, resume_dir[0] != 0))) return st;

    if ((st = load_vocab(&t)) || (st = open_data(&t)) || (st = setup_model(&t)) || (st = setup_freeze(&t)) || (st = load_bleu_lines(&t)))
        goto done;
    if ((st = resume_and_open_curves(&t, resume_dir))) goto done;
    t.dirty = !resume_dir[0];
    st = train_loop(&t, r);
    if (!st && t.world > 1) st = check_replicas(&t);
    if (st) {
        tlog(&t, "error at update %ld: %s", t.updates, tern_last_error());
        goto done;
    }
    log_summary(&t, r);
    if (t.rank == 0) {
        fflush(t.tcurve);
        fflush(t.vcurve);
    }
    fill_result(&t, r);
done:
    bar_clear(&t);
    trainer_free(&t);
    return st;
}
