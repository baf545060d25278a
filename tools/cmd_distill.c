/* cmd_distill.c — `tern distill`: sequence-level knowledge distillation (Kim & Rush 2016). A
 * teacher (one model or an ensemble) translates a corpus through tern_translate_stream(), exactly
 * as `tern translate` does; with an n-best list the kept translation is the model's best or the
 * one with the highest sentence BLEU / chrF against the reference (sacreBLEU's sentence_bleu /
 * sentence_chrf, src/search/mbr.h's mbr_utility). Output: PREFIX.src and PREFIX.tgt, one line per
 * input line in order, written in chunks that are made durable (fsync) before PREFIX.state records
 * them, so a run killed at any moment resumes where the last chunk ended (docs/training-data.md,
 * "Sequence-level distillation"). */
#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <signal.h>

#include "batch/translator.h"
#include "cli.h"
#include "search/mbr.h"
#include "text/score.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: tern distill -m TEACHER [-m MEMBER ...] --src FILE [--ref FILE] -o PREFIX [options]\n"
"\n"
"Sequence-level distillation: the teacher translates every line of --src and the pairs are written\n"
"to PREFIX.src (the source lines) and PREFIX.tgt (the translations), one line per input line in\n"
"the input's order (an empty line gives an empty translation), a training corpus for\n"
"`tern train --train PREFIX.src,PREFIX.tgt`. The translations are those of `tern translate` with\n"
"the same options. With -n N > 1, --select keeps one of each line's N hypotheses: the model's\n"
"best, or the one with the highest sentence BLEU or chrF against the --ref line (the first on\n"
"ties; sacrebleu.sentence_bleu / sentence_chrf with their defaults).\n"
"\n"
"Resumable: lines are committed in chunks (--chunk), each made durable before PREFIX.state records\n"
"it; a run stopped at any moment (even killed) continues where it stopped when the same command is\n"
"run again, without losing or repeating a line. A run with other inputs or options is refused,\n"
"naming what changed (--restart starts over). A finished run does nothing when run again.\n"
"\n"
"data:\n"
"  --src FILE                  source corpus (UTF-8, one sentence a line)\n"
"  --ref FILE                  its reference translations (as many lines): for --select bleu|chrf\n"
"  -o, --output PREFIX         writes PREFIX.src, PREFIX.tgt and PREFIX.state\n"
"  --select WHAT               score: the model's best hypothesis (default); bleu or chrf: the\n"
"                              hypothesis with the best sentence BLEU or chrF against --ref\n"
"  --chunk N                   lines committed at a time (default 256)\n"
"  --restart                   discard PREFIX.* of an earlier run and start over\n"
"\n"
"teacher:\n"
CLI_MODELS_HELP
"  --compute-type TYPE         auto (as stored; default), float32, int8\n"
"  --pretokenized              input and output are space-separated vocabulary pieces\n"
"  --source-lang CODE, --target-lang CODE\n"
"                              a multilingual model's languages (as tern translate)\n"
"  --vmap FILE, --use-vmap     vocabulary map (as tern translate)\n"
"\n"
"search (as tern translate; a default marked * is the model's generation_config.json's):\n"
"  -b, --beam-size N           1: greedy search; >1: beam search (default* 4)\n"
"  -n, --num-hypotheses N      hypotheses per line that --select chooses from (<= beam; default* 1)\n"
"  --length-penalty A, --length-norm plain|gnmt, --coverage-penalty B, --eos-policy common|paper,\n"
"  --no-early-stop, --max-length-a A, --max-length-b B, --max-decoding-length N, --min-length N,\n"
"  --patience P, --prune-width W, --prune-threshold P, --repetition-penalty R,\n"
"  --no-repeat-ngram-size N, --drop-unk\n"
"  --max-input-length N        longer inputs are truncated with a warning (default 1024)\n"
"\n"
"throughput:\n"
"  --max-batch-tokens N, --max-batch-size N, --read-ahead N (as tern translate)\n"
"  -w, --workers N             translators running in parallel (default 1)\n"
"  -t, --threads N             intra-op threads of each translator (default: cores / workers)\n"
"\n"
"other:\n"
"  -q, --quiet                 no progress and no warnings on stderr (default: a progress line\n"
"                              per chunk: lines done / total, lines/s)\n"
"  -h, --help                  this help\n"
"\n"
"Exit status: 0 done, 1 an error (a bad input file, a refused resume), 2 a usage error.\n");
}

enum {
    O_SRC = 1000, O_REF, O_SELECT, O_CHUNK, O_RESTART, O_ENS_W, O_ENS_MODE, O_COMPUTE, O_PRETOK, O_SRC_LANG,
    O_TGT_LANG, O_VMAP, O_USE_VMAP, O_LP, O_LNORM, O_CP, O_EOS, O_NO_EARLY, O_MAXA, O_MAXB, O_MAXDEC, O_MINLEN,
    O_MAXIN, O_PATIENCE, O_PRUNE_W, O_PRUNE_T, O_REPPEN, O_NOREP, O_DROP_UNK, O_MBT, O_MBS, O_READ_AHEAD
};

static const struct option long_opts[] = {
    {"model", required_argument, 0, 'm'},
    {"ensemble-weights", required_argument, 0, O_ENS_W},
    {"ensemble-mode", required_argument, 0, O_ENS_MODE},
    {"compute-type", required_argument, 0, O_COMPUTE},
    {"pretokenized", no_argument, 0, O_PRETOK},
    {"source-lang", required_argument, 0, O_SRC_LANG},
    {"target-lang", required_argument, 0, O_TGT_LANG},
    {"vmap", required_argument, 0, O_VMAP},
    {"use-vmap", no_argument, 0, O_USE_VMAP},
    {"src", required_argument, 0, O_SRC},
    {"ref", required_argument, 0, O_REF},
    {"output", required_argument, 0, 'o'},
    {"select", required_argument, 0, O_SELECT},
    {"chunk", required_argument, 0, O_CHUNK},
    {"restart", no_argument, 0, O_RESTART},
    {"beam-size", required_argument, 0, 'b'},
    {"num-hypotheses", required_argument, 0, 'n'},
    {"length-penalty", required_argument, 0, O_LP},
    {"length-norm", required_argument, 0, O_LNORM},
    {"coverage-penalty", required_argument, 0, O_CP},
    {"eos-policy", required_argument, 0, O_EOS},
    {"no-early-stop", no_argument, 0, O_NO_EARLY},
    {"max-length-a", required_argument, 0, O_MAXA},
    {"max-length-b", required_argument, 0, O_MAXB},
    {"max-decoding-length", required_argument, 0, O_MAXDEC},
    {"min-length", required_argument, 0, O_MINLEN},
    {"max-input-length", required_argument, 0, O_MAXIN},
    {"patience", required_argument, 0, O_PATIENCE},
    {"prune-width", required_argument, 0, O_PRUNE_W},
    {"prune-threshold", required_argument, 0, O_PRUNE_T},
    {"repetition-penalty", required_argument, 0, O_REPPEN},
    {"no-repeat-ngram-size", required_argument, 0, O_NOREP},
    {"drop-unk", no_argument, 0, O_DROP_UNK},
    {"max-batch-tokens", required_argument, 0, O_MBT},
    {"max-batch-size", required_argument, 0, O_MBS},
    {"read-ahead", required_argument, 0, O_READ_AHEAD},
    {"workers", required_argument, 0, 'w'},
    {"threads", required_argument, 0, 't'},
    {"quiet", no_argument, 0, 'q'},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

/* ------------------------------------------------------------------ identity of a run */

/* What decides the output: the inputs, the teacher and the options. Each entry is "NAME VALUE";
 * PREFIX.state keeps them, and a resume compares them one by one. */
#define MAX_KEYS 96
typedef struct {
    int n;
    char *name[MAX_KEYS], *value[MAX_KEYS];
} ident_t;

static void ident_add(ident_t *id, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void ident_add(ident_t *id, const char *name, const char *fmt, ...) {
    if (id->n == MAX_KEYS) return;
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\t') *p = ' ';
    id->name[id->n] = strdup(name);
    id->value[id->n] = strdup(buf);
    id->n++;
}

static void ident_free(ident_t *id) {
    for (int i = 0; i < id->n; i++) free(id->name[i]), free(id->value[i]);
    id->n = 0;
}

static const char *ident_get(const ident_t *id, const char *name) {
    for (int i = 0; i < id->n; i++)
        if (!strcmp(id->name[i], name)) return id->value[i];
    return NULL;
}

/* A corpus file: its lines (the last may lack its newline), FNV-1a of its bytes; every line valid
 * UTF-8. Prints the error naming the file (and line) and returns 0 on failure. */
typedef struct {
    long lines;
    uint64_t hash;
    long long bytes;
} corpus_info_t;

static int corpus_scan(const char *path, const char *opt, corpus_info_t *ci) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "tern distill: %s: cannot open '%s': %s\n", opt, path, strerror(errno));
        return 0;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tern distill: %s: '%s' is a directory, not a corpus file\n", opt, path);
        fclose(f);
        return 0;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t r;
    uint64_t h = 1469598103934665603ull;
    ci->lines = 0, ci->bytes = 0;
    while ((r = getline(&line, &cap, f)) >= 0) {
        ci->lines++;
        ci->bytes += r;
        for (ssize_t i = 0; i < r; i++) h = (h ^ (unsigned char)line[i]) * 1099511628211ull;
        size_t bad = 0, n = (size_t)r;
        if (n && line[n - 1] == '\n') n--;
        if (memchr(line, 0, n)) {
            fprintf(stderr, "tern distill: %s: %s line %ld: contains a NUL byte (not text)\n", opt, path, ci->lines);
            free(line), fclose(f);
            return 0;
        }
        if (!text_utf8_valid(line, n, &bad)) {
            fprintf(stderr, "tern distill: %s: %s line %ld: not valid UTF-8 (byte %zu of the line)\n", opt, path,
                    ci->lines, bad + 1);
            free(line), fclose(f);
            return 0;
        }
    }
    int err = ferror(f);
    free(line), fclose(f);
    if (err) {
        fprintf(stderr, "tern distill: %s: cannot read '%s'\n", opt, path);
        return 0;
    }
    ci->hash = h;
    return 1;
}

/* A model directory's fingerprint: its regular files' names, sizes and modification times. */
static uint64_t dir_fingerprint(const char *dir) {
    uint64_t h = 1469598103934665603ull, sum = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    char path[PATH_MAX];
    while ((e = readdir(d))) {
        struct stat st;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
        if (stat(path, &st) || !S_ISREG(st.st_mode)) continue;
        uint64_t x = 1469598103934665603ull;
        for (const char *p = e->d_name; *p; p++) x = (x ^ (unsigned char)*p) * 1099511628211ull;
        x ^= (uint64_t)st.st_size * 0x9E3779B97F4A7C15ull;
        x ^= ((uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec) * 0xC2B2AE3D27D4EB4Full;
        sum += x; /* order-free: readdir's order is arbitrary */
    }
    closedir(d);
    return h ^ sum;
}

/* ------------------------------------------------------------------ state file */

typedef struct {
    long lines_done;
    long long src_bytes, tgt_bytes;
    int complete;
    ident_t id;
} state_t;

static int fsync_dir_of(const char *path) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = 0;
    else snprintf(dir, sizeof dir, ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Writes the state atomically: a temporary file, fsync, rename over PREFIX.state, fsync of the
 * directory. */
static int state_write(const char *path, const state_t *s) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return -1;
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    fprintf(f, "tern-distill-state\t1\nlines_done\t%ld\nsrc_bytes\t%lld\ntgt_bytes\t%lld\ncomplete\t%d\n",
            s->lines_done, s->src_bytes, s->tgt_bytes, s->complete);
    for (int i = 0; i < s->id.n; i++) fprintf(f, "=%s\t%s\n", s->id.name[i], s->id.value[i]);
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    fsync_dir_of(path);
    return 0;
}

/* Reads PREFIX.state: 1 read, 0 absent, -1 malformed (message printed). */
static int state_read(const char *path, state_t *s) {
    memset(s, 0, sizeof *s);
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return 0;
        fprintf(stderr, "tern distill: cannot open '%s': %s\n", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t r;
    int lineno = 0, ok = 1, have = 0;
    while (ok && (r = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (r && line[r - 1] == '\n') line[--r] = 0;
        char *tab = strchr(line, '\t');
        if (!tab) {
            ok = 0;
            break;
        }
        *tab = 0;
        const char *k = line, *v = tab + 1;
        char *end = NULL;
        if (lineno == 1) ok = !strcmp(k, "tern-distill-state") && !strcmp(v, "1");
        else if (k[0] == '=') ident_add(&s->id, k + 1, "%s", v);
        else if (!strcmp(k, "lines_done")) s->lines_done = strtol(v, &end, 10), have |= 1, ok = !*end;
        else if (!strcmp(k, "src_bytes")) s->src_bytes = strtoll(v, &end, 10), have |= 2, ok = !*end;
        else if (!strcmp(k, "tgt_bytes")) s->tgt_bytes = strtoll(v, &end, 10), have |= 4, ok = !*end;
        else if (!strcmp(k, "complete")) s->complete = (int)strtol(v, &end, 10), have |= 8, ok = !*end;
        else ok = 0;
    }
    free(line);
    fclose(f);
    if (!ok || have != 15 || s->lines_done < 0 || s->src_bytes < 0 || s->tgt_bytes < 0) {
        fprintf(stderr, "tern distill: '%s' is not a state file of tern distill (line %d): remove it or use "
                        "--restart\n", path, lineno);
        ident_free(&s->id);
        return -1;
    }
    return 1;
}

/* ------------------------------------------------------------------ the run */

typedef struct {
    FILE *src_in;           /* the stream's reader of --src */
    char *in_line;
    size_t in_cap;
    FILE *src_copy, *ref_in; /* the writer's readers of --src and --ref, in step with the results */
    char *s_line, *r_line;
    size_t s_cap, r_cap;
    int select;             /* 0 score, 1 bleu, 2 chrf */
    mbr_workspace_t *ws;
    /* the chunk being built */
    char *sbuf, *tbuf;
    size_t slen, scap, tlen, tcap;
    long pending;
    /* committed */
    int src_fd, tgt_fd;
    const char *state_path;
    state_t *state;
    long chunk, total, start_done, shown;
    double t0;
    int show, tty, commits;
    tern_status_t error;
} run_t;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 4096;
        while (c < *len + n + 1) c *= 2;
        char *p = realloc(*buf, c);
        if (!p) return -1;
        *buf = p, *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    return 0;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w, n -= (size_t)w;
    }
    return 0;
}

/* Fault injection for tests/test_distill.py: TERN_DISTILL_KILL=K:data kills the process (SIGKILL)
 * in the K-th commit of this run after half of its lines reached PREFIX.src and PREFIX.tgt but
 * before the state; K:state right after the K-th commit's state. */
static void maybe_kill(int commit_no, const char *phase) {
    const char *e = getenv("TERN_DISTILL_KILL");
    char *end;
    if (!e) return;
    long k = strtol(e, &end, 10);
    if (k == commit_no && *end == ':' && !strcmp(end + 1, phase)) kill(getpid(), SIGKILL);
}

/* Appends the chunk to PREFIX.src and PREFIX.tgt, makes them durable, then records them in the
 * state (the commit point). */
static tern_status_t commit(run_t *R, int complete) {
    if (R->pending || complete) {
        R->commits++;
        if (getenv("TERN_DISTILL_KILL")) { /* a half-written chunk, then death */
            size_t hs = R->slen / 2, ht = R->tlen / 2;
            if (!write_all(R->src_fd, R->sbuf, hs) && !write_all(R->tgt_fd, R->tbuf, ht)) {
                maybe_kill(R->commits, "data");
                if (write_all(R->src_fd, R->sbuf + hs, R->slen - hs) || write_all(R->tgt_fd, R->tbuf + ht, R->tlen - ht))
                    return tern_error(TERN_ERR_IO, "cannot write the output: %s", strerror(errno));
            } else return tern_error(TERN_ERR_IO, "cannot write the output: %s", strerror(errno));
        } else if (write_all(R->src_fd, R->sbuf, R->slen) || write_all(R->tgt_fd, R->tbuf, R->tlen))
            return tern_error(TERN_ERR_IO, "cannot write the output: %s", strerror(errno));
        if (fsync(R->src_fd) || fsync(R->tgt_fd))
            return tern_error(TERN_ERR_IO, "cannot write the output: %s", strerror(errno));
        R->state->lines_done += R->pending;
        R->state->src_bytes += (long long)R->slen;
        R->state->tgt_bytes += (long long)R->tlen;
        R->state->complete = complete;
        if (state_write(R->state_path, R->state))
            return tern_error(TERN_ERR_IO, "cannot write '%s': %s", R->state_path, strerror(errno));
        maybe_kill(R->commits, "state");
        R->slen = R->tlen = 0;
        R->pending = 0;
    }
    if (R->show && R->state->lines_done != R->shown) {
        R->shown = R->state->lines_done;
        double dt = now_s() - R->t0;
        long done = R->state->lines_done, here = done - R->start_done;
        fprintf(stderr, "%stern distill: %ld / %ld lines (%.1f%%), %.1f lines/s%s", R->tty ? "\r" : "", done, R->total,
                R->total ? 100.0 * (double)done / (double)R->total : 100.0, dt > 0 ? (double)here / dt : 0.0,
                R->tty ? "   " : "\n");
        fflush(stderr);
    }
    return TERN_OK;
}

static int read_src(long line, const char **text, size_t *len, const tern_source_extras_t **ex, void *ud) {
    run_t *R = ud;
    (void)line;
    *ex = NULL;
    ssize_t r = getline(&R->in_line, &R->in_cap, R->src_in);
    if (r < 0) return ferror(R->src_in) ? -1 : 0;
    *text = R->in_line;
    *len = (size_t)r;
    return 1;
}

static size_t chomp(char *s, ssize_t r) {
    size_t n = r > 0 ? (size_t)r : 0;
    if (n && s[n - 1] == '\n') n--;
    if (n && s[n - 1] == '\r') n--;
    s[n] = 0;
    return n;
}

static int on_line(long line, const tern_result_t *res, void *ud) {
    run_t *R = ud;
    (void)line;
    ssize_t r = getline(&R->s_line, &R->s_cap, R->src_copy);
    if (r < 0) {
        R->error = tern_error(TERN_ERR_IO, "--src changed while it was read");
        return 1;
    }
    size_t sn = chomp(R->s_line, r);
    int best = 0;
    if (R->select && res->num_hypotheses > 1) {
        ssize_t q = getline(&R->r_line, &R->r_cap, R->ref_in);
        if (q < 0) {
            R->error = tern_error(TERN_ERR_IO, "--ref changed while it was read");
            return 1;
        }
        chomp(R->r_line, q);
        double bestu = 0;
        for (int k = 0; k < res->num_hypotheses; k++) {
            double u;
            tern_status_t st = mbr_utility(R->ws, res->hypotheses[k], R->r_line, R->select == 1 ? MBR_BLEU : MBR_CHRF, &u);
            if (st) {
                R->error = tern_error_prefix(st, "input line %ld", R->state->lines_done + R->pending + 1);
                return 1;
            }
            if (k == 0 || u > bestu) best = k, bestu = u;
        }
    } else if (R->ref_in && getline(&R->r_line, &R->r_cap, R->ref_in) < 0) {
        R->error = tern_error(TERN_ERR_IO, "--ref changed while it was read");
        return 1;
    }
    const char *t = res->num_hypotheses ? res->hypotheses[best] : "";
    if (append(&R->sbuf, &R->slen, &R->scap, R->s_line, sn) || append(&R->sbuf, &R->slen, &R->scap, "\n", 1) ||
        append(&R->tbuf, &R->tlen, &R->tcap, t, strlen(t)) || append(&R->tbuf, &R->tlen, &R->tcap, "\n", 1)) {
        R->error = tern_error(TERN_ERR_NOMEM, "out of memory");
        return 1;
    }
    if (++R->pending >= R->chunk && (R->error = commit(R, 0))) return 1;
    return 0;
}

/* Skips n lines of f; 0 when it has fewer. */
static int skip_lines(FILE *f, long n, char **buf, size_t *cap) {
    for (long i = 0; i < n; i++)
        if (getline(buf, cap, f) < 0) return 0;
    return 1;
}

static const char *fmt_path(char *buf, size_t size, const char *p) {
    char *rp = realpath(p, NULL);
    snprintf(buf, size, "%s", rp ? rp : p);
    free(rp);
    return buf;
}

int cmd_distill(int argc, char **argv) {
    const char *C = "distill";
    cli_models_t models = {0};
    tern_model_options_t mo = tern_model_default_options();
    tern_translator_options_t to = tern_translator_default_options();
    tern_search_params_t o = tern_search_default_params();
    to.workers = 1;
    const char *src = NULL, *ref = NULL, *prefix = NULL, *src_lang = NULL, *tgt_lang = NULL;
    int select = 0, chunk = 256, restart = 0, quiet = 0, ok = 1, c;
    unsigned set = 0;
    optind = 1;
    while (ok && (c = getopt_long(argc, argv, "m:b:n:w:t:o:qh", long_opts, NULL)) != -1) {
        switch (c) {
        case 'm': ok = cli_models_add(C, &models, optarg); break;
        case O_ENS_W: ok = cli_models_weights(C, &models, optarg); break;
        case O_ENS_MODE: ok = cli_models_mode(C, &models, optarg); break;
        case O_COMPUTE:
            if (!strcmp(optarg, "auto") || !strcmp(optarg, "default")) mo.compute_type = TERN_COMPUTE_AUTO;
            else if (!strcmp(optarg, "float32")) mo.compute_type = TERN_COMPUTE_FLOAT32;
            else if (!strcmp(optarg, "int8")) mo.compute_type = TERN_COMPUTE_INT8;
            else {
                fprintf(stderr, "tern distill: --compute-type is auto, float32 or int8, got '%s'\n", optarg);
                ok = 0;
            }
            break;
        case O_PRETOK: mo.use_spm = 0; break;
        case O_SRC_LANG: src_lang = optarg; break;
        case O_TGT_LANG: tgt_lang = optarg; break;
        case O_VMAP: mo.vmap = optarg; break;
        case O_USE_VMAP: mo.use_vmap = 1; break;
        case O_SRC: src = optarg; break;
        case O_REF: ref = optarg; break;
        case 'o': prefix = optarg; break;
        case O_SELECT:
            if (!strcmp(optarg, "score")) select = 0;
            else if (!strcmp(optarg, "bleu")) select = 1;
            else if (!strcmp(optarg, "chrf")) select = 2;
            else {
                fprintf(stderr, "tern distill: --select is score, bleu or chrf, got '%s'\n", optarg);
                ok = 0;
            }
            break;
        case O_CHUNK: ok = cli_int(C, "--chunk", optarg, 1, 1 << 24, &chunk); break;
        case O_RESTART: restart = 1; break;
        case 'b': ok = cli_int(C, "--beam-size", optarg, 1, 1024, &o.beam_size), set |= SP_BEAM; break;
        case 'n': ok = cli_int(C, "--num-hypotheses", optarg, 1, 1024, &o.num_hypotheses), set |= SP_NHYP; break;
        case O_LP: ok = cli_float(C, "--length-penalty", optarg, 0, 100, &o.length_penalty), set |= SP_LP; break;
        case O_LNORM:
            set |= SP_LNORM;
            if (!strcmp(optarg, "plain")) o.length_norm = TERN_LENPEN_PLAIN;
            else if (!strcmp(optarg, "gnmt")) o.length_norm = TERN_LENPEN_GNMT;
            else {
                fprintf(stderr, "tern distill: --length-norm is plain or gnmt, got '%s'\n", optarg);
                ok = 0;
            }
            break;
        case O_CP: ok = cli_float(C, "--coverage-penalty", optarg, 0, 100, &o.coverage_penalty), set |= SP_CP; break;
        case O_EOS:
            set |= SP_EOS;
            if (!strcmp(optarg, "common")) o.eos_policy = TERN_EOS_COMMON;
            else if (!strcmp(optarg, "paper")) o.eos_policy = TERN_EOS_PAPER;
            else {
                fprintf(stderr, "tern distill: --eos-policy is common or paper, got '%s'\n", optarg);
                ok = 0;
            }
            break;
        case O_NO_EARLY: o.early_stop = 0, set |= SP_EARLY; break;
        case O_MAXA: ok = cli_float(C, "--max-length-a", optarg, 0, 1000, &o.max_length_a), set |= SP_MAXA; break;
        case O_MAXB: ok = cli_int(C, "--max-length-b", optarg, 0, 1 << 20, &o.max_length_b), set |= SP_MAXB; break;
        case O_MAXDEC:
            ok = cli_int(C, "--max-decoding-length", optarg, 1, 1 << 20, &o.max_decoding_length), set |= SP_MAXDEC;
            break;
        case O_MINLEN: ok = cli_int(C, "--min-length", optarg, 0, 1 << 20, &o.min_length), set |= SP_MINLEN; break;
        case O_MAXIN: ok = cli_int(C, "--max-input-length", optarg, 1, 1 << 20, &to.max_input_length); break;
        case O_PATIENCE: ok = cli_float(C, "--patience", optarg, 1e-6f, 1e6f, &o.patience), set |= SP_PATIENCE; break;
        case O_PRUNE_W: ok = cli_float(C, "--prune-width", optarg, 0, 1e30f, &o.prune_width), set |= SP_PRUNE_W; break;
        case O_PRUNE_T: ok = cli_float(C, "--prune-threshold", optarg, 0, 1, &o.prune_threshold), set |= SP_PRUNE_T; break;
        case O_REPPEN:
            ok = cli_float(C, "--repetition-penalty", optarg, 1e-6f, 1e30f, &o.repetition_penalty), set |= SP_REPPEN;
            break;
        case O_NOREP:
            ok = cli_int(C, "--no-repeat-ngram-size", optarg, 0, 1 << 20, &o.no_repeat_ngram_size), set |= SP_NOREP;
            break;
        case O_DROP_UNK: to.keep_unk = 0; break;
        case O_MBT: ok = cli_int(C, "--max-batch-tokens", optarg, 1, 1 << 24, &to.max_batch_tokens); break;
        case O_MBS: ok = cli_int(C, "--max-batch-size", optarg, 0, 1 << 24, &to.max_batch_size); break;
        case O_READ_AHEAD: ok = cli_int(C, "--read-ahead", optarg, 1, 1 << 16, &to.read_ahead); break;
        case 'w': ok = cli_int(C, "--workers", optarg, 1, 256, &to.workers); break;
        case 't': ok = cli_int(C, "--threads", optarg, 1, 256, &to.threads_per_worker); break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return 0;
        default: ok = 0; break;
        }
    }
    if (ok && optind < argc) {
        fprintf(stderr, "tern distill: unexpected argument '%s' (the corpus is --src FILE)\n", argv[optind]);
        ok = 0;
    }
    if (ok && models.n == 0) fprintf(stderr, "tern distill: no teacher (-m DIR)\n"), ok = 0;
    if (ok && !src) fprintf(stderr, "tern distill: no corpus (--src FILE)\n"), ok = 0;
    if (ok && !prefix) fprintf(stderr, "tern distill: no output (-o PREFIX)\n"), ok = 0;
    if (ok && !*prefix) fprintf(stderr, "tern distill: -o PREFIX is empty\n"), ok = 0;
    if (ok && select && !ref) {
        fprintf(stderr, "tern distill: --select %s compares with the reference: give --ref FILE\n",
                select == 1 ? "bleu" : "chrf");
        ok = 0;
    }
    if (!ok) {
        fprintf(stderr, "see tern distill --help\n");
        return 2;
    }
    tern_set_log_level(quiet ? TERN_LOG_ERROR : TERN_LOG_WARN);

    /* the inputs: readable, UTF-8, not empty, of equal length */
    corpus_info_t si, ri = {0};
    if (!corpus_scan(src, "--src", &si) || (ref && !corpus_scan(ref, "--ref", &ri))) return 1;
    if (si.lines == 0) {
        fprintf(stderr, "tern distill: --src: '%s' is empty: no line to distill\n", src);
        return 1;
    }
    if (ref && ri.lines != si.lines) {
        fprintf(stderr, "tern distill: the corpora differ in length: --src '%s' has %ld lines, --ref '%s' has %ld\n",
                src, si.lines, ref, ri.lines);
        return 1;
    }

    tern_model_t *model = NULL;
    int lrc = cli_models_load(C, &models, &mo, &model);
    if (lrc) return lrc;
    o = search_params_over(&o, set, tern_model_search_params(model, NULL));
    if (o.num_hypotheses > o.beam_size) {
        fprintf(stderr, "tern distill: --num-hypotheses (%d) cannot exceed the beam size (%d%s)\n", o.num_hypotheses,
                o.beam_size, set & SP_BEAM ? "" : ", the model's default: see tern info");
        tern_model_free(model);
        return 2;
    }
    if (tern_search_params_check(&o)) {
        fprintf(stderr, "tern distill: %s\n", tern_last_error());
        tern_model_free(model);
        return 2;
    }
    if (o.num_hypotheses <= 1) o.return_scores = 0; /* as tern translate: greedy argmax without softmax */

    /* the identity of this run */
    ident_t id = {0};
    char pb[PATH_MAX + 64], mb[4096];
    ident_add(&id, "--src", "%s (%ld lines, %lld bytes, FNV-1a %016llx)", fmt_path(pb, sizeof pb, src), si.lines,
              si.bytes, (unsigned long long)si.hash);
    if (ref)
        ident_add(&id, "--ref", "%s (%ld lines, %lld bytes, FNV-1a %016llx)", fmt_path(pb, sizeof pb, ref), ri.lines,
                  ri.bytes, (unsigned long long)ri.hash);
    else ident_add(&id, "--ref", "none");
    for (int i = 0; i < models.n; i++) {
        const char *d = cli_model_dir(C, models.dirs[i], mb, sizeof mb);
        char name[32];
        snprintf(name, sizeof name, "-m #%d", i + 1);
        ident_add(&id, name, "%s (files %016llx)", fmt_path(pb, sizeof pb, d ? d : models.dirs[i]),
                  (unsigned long long)(d ? dir_fingerprint(d) : 0));
    }
    ident_add(&id, "-m count", "%d", models.n);
    {
        char w[1024] = "equal";
        size_t k = 0;
        for (int i = 0; i < models.n_weights && k + 32 < sizeof w; i++)
            k += (size_t)snprintf(w + k, sizeof w - k, "%s%.9g", i ? "," : "", (double)models.weights[i]);
        ident_add(&id, "--ensemble-weights", "%s", w);
    }
    ident_add(&id, "--ensemble-mode", "%d%s", (int)models.mode, models.ensemble ? " (ensemble)" : "");
    ident_add(&id, "--compute-type", "%d", (int)mo.compute_type);
    ident_add(&id, "--pretokenized", "%d", !mo.use_spm);
    ident_add(&id, "--source-lang", "%s", src_lang ? src_lang : "none");
    ident_add(&id, "--target-lang", "%s", tgt_lang ? tgt_lang : "none");
    ident_add(&id, "--vmap", "%s%s", mo.vmap ? fmt_path(pb, sizeof pb, mo.vmap) : "none", mo.use_vmap ? " (use-vmap)" : "");
    ident_add(&id, "--select", "%s", select == 0 ? "score" : select == 1 ? "bleu" : "chrf");
    ident_add(&id, "--beam-size", "%d", o.beam_size);
    ident_add(&id, "--num-hypotheses", "%d", o.num_hypotheses);
    ident_add(&id, "--length-penalty", "%.9g", (double)o.length_penalty);
    ident_add(&id, "--length-norm", "%d", (int)o.length_norm);
    ident_add(&id, "--coverage-penalty", "%.9g", (double)o.coverage_penalty);
    ident_add(&id, "--eos-policy", "%d", (int)o.eos_policy);
    ident_add(&id, "--no-early-stop", "%d", !o.early_stop);
    ident_add(&id, "--max-length-a", "%.9g", (double)o.max_length_a);
    ident_add(&id, "--max-length-b", "%d", o.max_length_b);
    ident_add(&id, "--max-decoding-length", "%d", o.max_decoding_length);
    ident_add(&id, "--min-length", "%d", o.min_length);
    ident_add(&id, "--max-input-length", "%d", to.max_input_length);
    ident_add(&id, "--patience", "%.9g", (double)o.patience);
    ident_add(&id, "--prune-width", "%.9g", (double)o.prune_width);
    ident_add(&id, "--prune-threshold", "%.9g", (double)o.prune_threshold);
    ident_add(&id, "--repetition-penalty", "%.9g", (double)o.repetition_penalty);
    ident_add(&id, "--no-repeat-ngram-size", "%d", o.no_repeat_ngram_size);
    ident_add(&id, "--drop-unk", "%d", !to.keep_unk);

    /* the state: start, resume, or refuse */
    size_t plen = strlen(prefix) + 16;
    char *state_path = malloc(plen), *src_path = malloc(plen), *tgt_path = malloc(plen);
    snprintf(state_path, plen, "%s.state", prefix);
    snprintf(src_path, plen, "%s.src", prefix);
    snprintf(tgt_path, plen, "%s.tgt", prefix);
    int rc = 1;
    state_t st = {0}, old = {0};
    run_t R = {0};
    R.src_fd = R.tgt_fd = -1;
    int have = restart ? 0 : state_read(state_path, &old);
    if (have < 0) goto done;
    if (have) {
        int diff = 0;
        for (int i = 0; i < id.n; i++) {
            const char *was = ident_get(&old.id, id.name[i]);
            if (!was || strcmp(was, id.value[i])) {
                if (!diff++)
                    fprintf(stderr, "tern distill: '%s' records a run with other inputs or options: not resumed\n",
                            state_path);
                fprintf(stderr, "  %s: was %s, now %s\n", id.name[i], was ? was : "(not recorded)", id.value[i]);
            }
        }
        if (diff) {
            fprintf(stderr, "Run the same command again to resume that run, or add --restart to start over "
                            "(PREFIX.src and PREFIX.tgt are rewritten).\n");
            goto done;
        }
        if (old.lines_done > si.lines) {
            fprintf(stderr, "tern distill: '%s' records %ld lines done, but --src has %ld\n", state_path,
                    old.lines_done, si.lines);
            goto done;
        }
        if (old.complete && old.lines_done == si.lines) {
            if (!quiet)
                fprintf(stderr, "tern distill: %s.src / %s.tgt are complete (%ld lines): nothing to do\n", prefix,
                        prefix, si.lines);
            rc = 0;
            goto done;
        }
        st.lines_done = old.lines_done, st.src_bytes = old.src_bytes, st.tgt_bytes = old.tgt_bytes;
    } else if (!restart && (access(src_path, F_OK) == 0 || access(tgt_path, F_OK) == 0)) {
        fprintf(stderr, "tern distill: '%s' or '%s' exists but '%s' does not: not the output of an earlier run; "
                        "remove them or add --restart to overwrite\n", src_path, tgt_path, state_path);
        goto done;
    }
    st.id = id;
    id = (ident_t){0};
    /* first the state (0 lines on a new run), then the outputs cut back to what it records: a
     * chunk half-written when a run was killed is dropped */
    if (!have && state_write(state_path, &st)) {
        fprintf(stderr, "tern distill: cannot write '%s': %s\n", state_path, strerror(errno));
        goto done;
    }
    R.src_fd = open(src_path, O_WRONLY | O_CREAT, 0644);
    R.tgt_fd = R.src_fd >= 0 ? open(tgt_path, O_WRONLY | O_CREAT, 0644) : -1;
    if (R.src_fd < 0 || R.tgt_fd < 0) {
        fprintf(stderr, "tern distill: cannot open '%s': %s\n", R.src_fd < 0 ? src_path : tgt_path, strerror(errno));
        goto done;
    }
    struct stat ss, ts;
    if (fstat(R.src_fd, &ss) || fstat(R.tgt_fd, &ts) || ss.st_size < st.src_bytes || ts.st_size < st.tgt_bytes) {
        fprintf(stderr, "tern distill: '%s' or '%s' is shorter than '%s' records (%lld and %lld bytes): they were "
                        "changed since; add --restart to start over\n", src_path, tgt_path, state_path,
                st.src_bytes, st.tgt_bytes);
        goto done;
    }
    if (ftruncate(R.src_fd, st.src_bytes) || ftruncate(R.tgt_fd, st.tgt_bytes) ||
        lseek(R.src_fd, 0, SEEK_END) < 0 || lseek(R.tgt_fd, 0, SEEK_END) < 0 || fsync(R.src_fd) || fsync(R.tgt_fd)) {
        fprintf(stderr, "tern distill: cannot truncate '%s' / '%s': %s\n", src_path, tgt_path, strerror(errno));
        goto done;
    }
    if (have && !quiet)
        fprintf(stderr, "tern distill: resuming '%s' at line %ld of %ld\n", prefix, st.lines_done + 1, si.lines);

    /* the readers, past the lines done */
    R.src_in = fopen(src, "rb");
    R.src_copy = R.src_in ? fopen(src, "rb") : NULL;
    R.ref_in = ref && R.src_copy ? fopen(ref, "rb") : NULL;
    if (!R.src_in || !R.src_copy || (ref && !R.ref_in)) {
        fprintf(stderr, "tern distill: cannot open '%s': %s\n", ref && R.src_copy ? ref : src, strerror(errno));
        goto done;
    }
    if (!skip_lines(R.src_in, st.lines_done, &R.in_line, &R.in_cap) ||
        !skip_lines(R.src_copy, st.lines_done, &R.s_line, &R.s_cap) ||
        (R.ref_in && !skip_lines(R.ref_in, st.lines_done, &R.r_line, &R.r_cap))) {
        fprintf(stderr, "tern distill: --src or --ref changed while it was read\n");
        goto done;
    }
    R.select = select;
    R.ws = select ? mbr_workspace_new() : NULL;
    R.state_path = state_path;
    R.state = &st;
    R.chunk = chunk;
    R.total = si.lines;
    R.start_done = R.shown = st.lines_done;
    R.t0 = now_s();
    R.show = !quiet;
    R.tty = isatty(fileno(stderr));

    tern_status_t s = TERN_OK;
    if (select && !R.ws) s = tern_error(TERN_ERR_NOMEM, "out of memory");
    if (!s && st.lines_done < si.lines) {
        tern_request_t req = tern_request_default();
        req.params = &o;
        req.source_lang = src_lang;
        req.target_lang = tgt_lang;
        req.read_source = read_src;
        req.on_line = on_line;
        req.stream_data = &R;
        s = tern_translate_stream(model, &to, &req);
        if (R.error) s = R.error;
    }
    if (!s) s = commit(&R, 1);
    if (R.show && R.tty) fputc('\n', stderr);
    if (s) {
        fprintf(stderr, "tern distill: %s: %s: %s\n", src, tern_status_string(s), tern_last_error());
        if (st.lines_done)
            fprintf(stderr, "tern distill: %ld lines are kept in '%s': the same command resumes after them\n",
                    st.lines_done, state_path);
        goto done;
    }
    if (st.lines_done != si.lines) {
        fprintf(stderr, "tern distill: %s gave %ld lines, %ld expected (it changed while it was read)\n", src,
                st.lines_done, si.lines);
        goto done;
    }
    rc = 0;
done:
    if (R.src_fd >= 0) close(R.src_fd);
    if (R.tgt_fd >= 0) close(R.tgt_fd);
    if (R.src_in) fclose(R.src_in);
    if (R.src_copy) fclose(R.src_copy);
    if (R.ref_in) fclose(R.ref_in);
    free(R.in_line), free(R.s_line), free(R.r_line), free(R.sbuf), free(R.tbuf);
    mbr_workspace_free(R.ws);
    ident_free(&id), ident_free(&st.id), ident_free(&old.id);
    free(state_path), free(src_path), free(tgt_path);
    tern_model_free(model);
    return rc;
}
