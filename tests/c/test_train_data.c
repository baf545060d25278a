/* test_train_data.c — unit tests of the training data pipeline (src/train/data.h) and of
 * checkpoints (src/train/checkpoint.h):
 *   cache round trip against the ids the generator meant; skipped-pair counts against the rules;
 *   stale-cache detection (mtime, vocabulary, header corruption, truncation, garbage); batches
 *   within the token budget, exact rows, every kept pair once per epoch; seeded shuffles; exact
 *   resume of the batch sequence (across an epoch end) and its mismatch check; data-parallel
 *   shards; checkpoints: exact round trip of parameters, moments, values and data state, loading
 *   in the inference engine with the same log-probabilities as the training model, keep-last-K,
 *   a failing save that leaves nothing, writers killed mid-save (SIGKILL) never leave a broken
 *   checkpoint, an exact resumed training run (dropout on), averaging.
 * Pre-tokenized text (space-separated pieces) keeps every count exact; tests/test_train_data.py
 * covers SentencePiece on Multi30k. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "model/transformer_desc.h"
#include "model/weights.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/model.h"
#include "train/optim.h"

#define NW 50      /* words w0..w49: ids 4..53 */
#define NLINES 400
#define MAX_SRC 40 /* with the source eos */
#define MAX_TGT 20 /* target + 1 */
#define RATIO 3.0f

static char dir[256];

/* ------------------------------------------------------------ the generated corpus */

typedef struct {
    int ls, lt;                 /* tokens per side */
    int32_t src[80], tgt[40];   /* expected ids */
    int unk_s;
} line_t;
static line_t L[NLINES];

static void gen_corpus(const char *sp, const char *tp, int n) {
    FILE *fs = fopen(sp, "wb"), *ft = fopen(tp, "wb");
    for (int i = 0; i < n; i++) {
        line_t *l = &L[i];
        l->ls = i % 19;
        l->lt = (i * 7) % 15;
        if (i % 41 == 7) l->ls = 60;     /* too long */
        if (i % 37 == 5) l->ls = 0;      /* whitespace only: empty */
        l->unk_s = 0;
        for (int j = 0; j < l->ls; j++) {
            if (j % 13 == 12) {            /* an unknown piece */
                fprintf(fs, "%szz%d", j ? (j % 4 == 1 ? " \t " : " ") : "", j);
                l->src[j] = 1;
                l->unk_s++;
            } else {
                int w = (i * 3 + j) % NW;
                fprintf(fs, "%sw%d", j ? (j % 4 == 1 ? " \t " : " ") : "", w);
                l->src[j] = 4 + w;
            }
        }
        if (i % 37 == 5) fprintf(fs, "   ");
        for (int j = 0; j < l->lt; j++) {
            int w = (i + 2 * j) % NW;
            fprintf(ft, "%sw%d", j ? " " : "", w);
            l->tgt[j] = 4 + w;
        }
        fputs(i % 11 == 3 ? "\r\n" : "\n", fs);
        if (i + 1 < n) fputc('\n', ft); /* the last target line lacks its newline */
    }
    fclose(fs);
    fclose(ft);
}

typedef struct {
    int64_t empty, too_long, ratio, kept, src_tokens, tgt_tokens, unk;
} expect_t;

static int line_kept(const line_t *l) {
    int S = l->ls + 1, T = l->lt + 1;
    if (l->ls == 0 || l->lt == 0) return 0;
    if (S > MAX_SRC || T > MAX_TGT) return 0;
    if ((double)TERN_MAX(l->ls, l->lt) > RATIO * TERN_MIN(l->ls, l->lt)) return 0;
    return 1;
}

static expect_t expected(int n) {
    expect_t e = {0};
    for (int i = 0; i < n; i++) {
        const line_t *l = &L[i];
        int S = l->ls + 1, T = l->lt + 1;
        e.unk += l->unk_s;
        if (l->ls == 0 || l->lt == 0) e.empty++;
        else if (S > MAX_SRC || T > MAX_TGT) e.too_long++;
        else if ((double)TERN_MAX(l->ls, l->lt) > RATIO * TERN_MIN(l->ls, l->lt)) e.ratio++;
        else {
            e.kept++;
            e.src_tokens += S;
            e.tgt_tokens += T;
        }
    }
    return e;
}

static void make_vocab(data_vocab_t *v, int extra) {
    const char *toks[NW + 5];
    char words[NW + 1][8];
    toks[0] = "<pad>", toks[1] = "<unk>", toks[2] = "<s>", toks[3] = "</s>";
    for (int i = 0; i < NW + extra; i++) {
        snprintf(words[i], sizeof words[i], "w%d", i);
        toks[4 + i] = words[i];
    }
    vocab_t *voc;
    CHECK(vocab_from_tokens(&voc, toks, 4 + NW + extra) == TERN_OK);
    model_config_t cfg;
    model_config_defaults(&cfg);
    cfg.add_source_eos = 1;
    CHECK(data_vocab_init(v, voc, voc, NULL, NULL, &cfg, NULL) == TERN_OK);
}

static data_options_t opts(void) {
    data_options_t o = data_default_options();
    o.max_src_len = MAX_SRC;
    o.max_tgt_len = MAX_TGT;
    o.max_ratio = RATIO;
    o.threads = 2;
    return o;
}

static char srcp[512], tgtp[512], cachep[512];

/* ------------------------------------------------------------ cache */

static void test_cache(const data_vocab_t *v) {
    data_corpus_t *c;
    data_stats_t s;
    data_options_t o = opts();
    expect_t e = expected(NLINES);
    CHECK(e.empty > 0 && e.too_long > 0 && e.ratio > 0 && e.kept > 100);
    CHECK(data_corpus_open(&c, cachep, srcp, tgtp, v, &o, &s) == TERN_OK);
    CHECK_EQ_INT(s.rebuilt, 1);
    CHECK_EQ_INT(s.pairs, NLINES);
    CHECK_EQ_INT(s.empty, e.empty);
    CHECK_EQ_INT(s.too_long, e.too_long);
    CHECK_EQ_INT(s.bad_ratio, e.ratio);
    CHECK_EQ_INT(s.kept, e.kept);
    CHECK_EQ_INT(s.src_tokens, e.src_tokens);
    CHECK_EQ_INT(s.tgt_tokens, e.tgt_tokens);
    CHECK_EQ_INT(s.src_unk, e.unk);
    CHECK_EQ_INT(s.tgt_unk, 0);
    int64_t tokens = 0;
    for (int i = 0; i < NLINES; i++) tokens += L[i].ls + L[i].lt;
    CHECK_EQ_INT(s.cache_bytes, 128 + 16 * NLINES + 4 * tokens);
    int bad = 0;
    for (int i = 0; i < NLINES; i++) {
        const int32_t *a, *b;
        int na, nb;
        data_corpus_pair(c, i, &a, &na, &b, &nb);
        bad += na != L[i].ls || nb != L[i].lt || memcmp(a, L[i].src, sizeof *a * (size_t)na) ||
               memcmp(b, L[i].tgt, sizeof *b * (size_t)nb) || data_corpus_kept(c, i) != line_kept(&L[i]);
    }
    CHECK_EQ_INT(bad, 0);
    data_corpus_free(c);

    /* mapped as it is on the second open; other filters need no rebuild */
    o.max_ratio = 0;
    CHECK(data_corpus_open(&c, cachep, srcp, tgtp, v, &o, &s) == TERN_OK);
    CHECK_EQ_INT(s.rebuilt, 0);
    CHECK_EQ_INT(s.bad_ratio, 0);
    CHECK_EQ_INT(s.kept, e.kept + e.ratio);
    data_corpus_free(c);
}

static void flip_byte(const char *path, long off) {
    int fd = open(path, O_RDWR);
    unsigned char b;
    CHECK(pread(fd, &b, 1, off) == 1);
    b ^= 0x5a;
    CHECK(pwrite(fd, &b, 1, off) == 1);
    close(fd);
}

static int rebuilt(const data_vocab_t *v, int64_t *kept) {
    data_corpus_t *c;
    data_stats_t s;
    data_options_t o = opts();
    if (data_corpus_open(&c, cachep, srcp, tgtp, v, &o, &s) != TERN_OK) {
        fprintf(stderr, "open: %s\n", tern_last_error());
        return -1;
    }
    if (kept) *kept = s.kept;
    data_corpus_free(c);
    return s.rebuilt;
}

static void test_stale(const data_vocab_t *v) {
    int64_t kept, e = expected(NLINES).kept;
    CHECK_EQ_INT(rebuilt(v, &kept), 0);
    /* the source file's modification time */
    struct timespec ts[2] = {{0, UTIME_OMIT}, {1000000000, 5}};
    CHECK(utimensat(AT_FDCWD, srcp, ts, 0) == 0);
    CHECK_EQ_INT(rebuilt(v, &kept), 1);
    CHECK_EQ_INT(kept, e);
    CHECK_EQ_INT(rebuilt(v, NULL), 0);
    /* another vocabulary (one more token) */
    data_vocab_t v2;
    make_vocab(&v2, 1);
    CHECK_EQ_INT(rebuilt(&v2, &kept), 1);
    CHECK_EQ_INT(kept, e);
    CHECK_EQ_INT(rebuilt(v, NULL), 1);
    data_vocab_free(&v2);
    /* header corruption (the input hash, then a count: the checksum catches both) */
    flip_byte(cachep, 17);
    CHECK_EQ_INT(rebuilt(v, NULL), 1);
    flip_byte(cachep, 25);
    CHECK_EQ_INT(rebuilt(v, NULL), 1);
    /* an index entry (the filter pass checks that pairs are back to back) */
    flip_byte(cachep, 128 + 16 * 10 + 8);
    CHECK_EQ_INT(rebuilt(v, &kept), 1);
    CHECK_EQ_INT(kept, e);
    /* truncated, empty, garbage */
    struct stat st;
    CHECK(stat(cachep, &st) == 0);
    CHECK(truncate(cachep, st.st_size - 4) == 0);
    CHECK_EQ_INT(rebuilt(v, NULL), 1);
    CHECK(truncate(cachep, 0) == 0);
    CHECK_EQ_INT(rebuilt(v, NULL), 1);
    FILE *f = fopen(cachep, "wb");
    for (int i = 0; i < 1000; i++) fputc(i * 7, f);
    fclose(f);
    CHECK_EQ_INT(rebuilt(v, &kept), 1);
    CHECK_EQ_INT(kept, e);
    CHECK_EQ_INT(rebuilt(v, NULL), 0);
    /* no temporary file is left behind */
    DIR *d = opendir(dir);
    struct dirent *de;
    int tmp = 0;
    while ((de = readdir(d))) tmp += strstr(de->d_name, ".tmp") != NULL;
    closedir(d);
    CHECK_EQ_INT(tmp, 0);
}

static void test_errors(const data_vocab_t *v) {
    data_corpus_t *c;
    char p[600];
    snprintf(p, sizeof p, "%s/short.txt", dir);
    FILE *f = fopen(p, "wb");
    fputs("w1 w2\nw3\n", f);
    fclose(f);
    data_options_t o = opts();
    char cp[600];
    snprintf(cp, sizeof cp, "%s/err.cache", dir);
    CHECK(data_corpus_open(&c, cp, srcp, p, v, &o, NULL) == TERN_ERR_INPUT);
    CHECK(strstr(tern_last_error(), srcp) && strstr(tern_last_error(), p) && strstr(tern_last_error(), "400 lines"));
    snprintf(p, sizeof p, "%s/missing.txt", dir);
    CHECK(data_corpus_open(&c, cp, p, srcp, v, &o, NULL) == TERN_ERR_IO);
    CHECK(strstr(tern_last_error(), p) != NULL);
    o.max_tgt_len = 1;
    CHECK(data_corpus_open(&c, cp, srcp, tgtp, v, &o, NULL) == TERN_ERR_INVALID_ARG);
    /* max_tokens below the length limit */
    o = opts();
    CHECK(data_corpus_open(&c, cachep, srcp, tgtp, v, &o, NULL) == TERN_OK);
    data_batching_t b = data_default_batching();
    b.max_tokens = 10;
    data_iter_t *it;
    CHECK(data_iter_new(&it, c, &b) == TERN_ERR_INVALID_ARG);
    b.max_tokens = 64;
    b.world = 1000;
    CHECK(data_iter_new(&it, c, &b) == TERN_ERR_INPUT);
    data_corpus_free(c);
    /* a missing padding token */
    const char *toks[] = {"<unk>", "<s>", "</s>", "a"};
    vocab_t *voc;
    CHECK(vocab_from_tokens(&voc, toks, 4) == TERN_OK);
    data_vocab_t v3;
    CHECK(data_vocab_init(&v3, voc, voc, NULL, NULL, NULL, NULL) == TERN_ERR_MISMATCH);
    CHECK(strstr(tern_last_error(), "<pad>") != NULL);
}

/* ------------------------------------------------------------ batches */

/* Checks one batch against the generated lines; returns the number of failures. */
static int check_batch(const data_batch_t *b, int max_tokens, int *seen) {
    int bad = 0, S = 0, T = 0, ns = 0, nt = 0;
    for (int r = 0; r < b->B; r++) {
        const line_t *l = &L[b->ids[r]];
        seen[b->ids[r]]++;
        S = TERN_MAX(S, l->ls + 1);
        T = TERN_MAX(T, l->lt + 1);
        bad += !line_kept(l);
        const int32_t *s = b->src + (size_t)r * b->S, *in = b->tgt_in + (size_t)r * b->T,
                      *o = b->tgt_out + (size_t)r * b->T;
        bad += b->src_len[r] != l->ls + 1 || b->tgt_len[r] != l->lt + 1;
        for (int j = 0; j < b->S; j++)
            bad += s[j] != (j < l->ls ? l->src[j] : j == l->ls ? 3 : 0);
        for (int j = 0; j < b->T; j++) {
            bad += in[j] != (j == 0 ? 2 : j <= l->lt ? l->tgt[j - 1] : 0);
            bad += o[j] != (j < l->lt ? l->tgt[j] : j == l->lt ? 3 : 0);
        }
        ns += l->ls + 1;
        nt += l->lt + 1;
    }
    bad += b->S != S || b->T != T || b->pad_id != 0 || b->n_src_tokens != ns || b->n_tgt_tokens != nt;
    bad += b->B * TERN_MAX(S, T) > max_tokens;
    return bad;
}

typedef struct {
    int64_t first_id, B;
} batch_sig_t;

/* The next n batches' signatures (first line, size), stepping over epoch ends (counted). */
static int next_sigs(data_iter_t *it, batch_sig_t *out, int n, int *epoch_ends) {
    int k = 0;
    while (k < n) {
        const data_batch_t *b;
        if (data_iter_next(it, &b) != TERN_OK) return -1;
        if (!b) {
            (*epoch_ends)++;
            continue;
        }
        out[k].first_id = b->ids[0];
        out[k].B = b->B;
        k++;
    }
    return k;
}

static void test_batches(const data_vocab_t *v) {
    data_corpus_t *c;
    data_options_t o = opts();
    CHECK(data_corpus_open(&c, cachep, srcp, tgtp, v, &o, NULL) == TERN_OK);
    expect_t e = expected(NLINES);
    data_batching_t bo = data_default_batching();
    bo.max_tokens = 64;
    bo.seed = 7;
    data_iter_t *it;
    CHECK(data_iter_new(&it, c, &bo) == TERN_OK);
    int64_t nb = data_iter_batches_per_epoch(it);
    int mB, mS, mT, mst, mtt;
    data_iter_max_shape(it, &mB, &mS, &mT, &mst, &mtt);
    CHECK(mst <= 64 && mtt <= 64 && mS <= MAX_SRC && mT <= MAX_TGT && mB >= 2);
    int seen[NLINES];
    int64_t firsts[3][400];
    for (int ep = 0; ep < 3; ep++) {
        memset(seen, 0, sizeof seen);
        int bad = 0, k = 0, maxS = 0, maxT = 0, maxB = 0;
        const data_batch_t *b;
        while (data_iter_next(it, &b) == TERN_OK && b) {
            bad += check_batch(b, 64, seen);
            if (k < 400) firsts[ep][k] = b->ids[0];
            k++;
            maxS = TERN_MAX(maxS, b->S), maxT = TERN_MAX(maxT, b->T), maxB = TERN_MAX(maxB, b->B);
        }
        CHECK_EQ_INT(bad, 0);
        CHECK_EQ_INT(k, nb);
        CHECK_EQ_INT(data_iter_state(it).epoch, ep + 1);
        CHECK(maxS <= mS && maxT <= mT && maxB <= mB);
        int once = 1, n_seen = 0;
        for (int i = 0; i < NLINES; i++) {
            once &= seen[i] == line_kept(&L[i]);
            n_seen += seen[i];
        }
        CHECK(once);
        CHECK_EQ_INT(n_seen, e.kept);
    }
    CHECK(nb < 400 && memcmp(firsts[0], firsts[1], sizeof(int64_t) * (size_t)nb) != 0); /* reshuffled */

    /* the same seed replays the same sequence; another seed gives another one */
    data_iter_t *a, *b2, *d;
    CHECK(data_iter_new(&a, c, &bo) == TERN_OK);
    CHECK(data_iter_new(&b2, c, &bo) == TERN_OK);
    data_batching_t bo2 = bo;
    bo2.seed = 8;
    CHECK(data_iter_new(&d, c, &bo2) == TERN_OK);
    batch_sig_t sa[300], sb[300], sd[300];
    int ea = 0, eb = 0, ed = 0;
    CHECK_EQ_INT(next_sigs(a, sa, 300, &ea), 300);
    CHECK_EQ_INT(next_sigs(b2, sb, 300, &eb), 300);
    CHECK_EQ_INT(next_sigs(d, sd, 300, &ed), 300);
    CHECK(ea >= 2 && ea == eb);
    CHECK(memcmp(sa, sb, sizeof sa) == 0);
    CHECK(memcmp(sa, sd, sizeof sa) != 0);

    /* resume: the state after 100 batches, restored into a fresh iterator, replays batches
     * 100..299 (two epoch ends on the way) */
    data_iter_t *r1, *r2;
    CHECK(data_iter_new(&r1, c, &bo) == TERN_OK);
    int e1 = 0;
    CHECK_EQ_INT(next_sigs(r1, sa, 100, &e1), 100);
    data_iter_state_t s = data_iter_state(r1);
    CHECK(data_iter_new(&r2, c, &bo) == TERN_OK);
    CHECK(data_iter_restore(r2, &s) == TERN_OK);
    int e2 = 0;
    CHECK_EQ_INT(next_sigs(r2, sd, 200, &e2), 200);
    CHECK(memcmp(sd, sb + 100, sizeof(batch_sig_t) * 200) == 0);
    CHECK_EQ_INT(data_iter_state(r2).epoch, data_iter_state(b2).epoch);
    CHECK_EQ_INT(data_iter_state(r2).pos, data_iter_state(b2).pos);
    /* a state from other batching is refused */
    data_batching_t bo3 = bo;
    bo3.max_tokens = 80;
    data_iter_t *r3;
    CHECK(data_iter_new(&r3, c, &bo3) == TERN_OK);
    CHECK(data_iter_restore(r3, &s) == TERN_ERR_MISMATCH);
    CHECK(strstr(tern_last_error(), cachep) != NULL);
    data_iter_free(r3);
    data_iter_free(r1);
    data_iter_free(r2);
    data_iter_free(a);
    data_iter_free(b2);
    data_iter_free(d);

    /* validation order: no shuffle, source lengths never decrease, the same every epoch */
    data_batching_t vo = bo;
    vo.shuffle = 0;
    CHECK(data_iter_new(&a, c, &vo) == TERN_OK);
    int prevS = 0, mono = 1, ep_same = 1;
    int64_t f0[400];
    for (int ep = 0; ep < 2; ep++) {
        const data_batch_t *b;
        int k = 0;
        while (data_iter_next(a, &b) == TERN_OK && b) {
            if (ep == 0) {
                mono &= b->src_len[0] >= prevS;
                prevS = b->src_len[b->B - 1];
                f0[k] = b->ids[0];
            } else {
                ep_same &= f0[k] == b->ids[0];
            }
            k++;
        }
    }
    CHECK(mono && ep_same);
    data_iter_free(a);

    /* two data-parallel ranks: disjoint batches, together all but at most one batch per epoch */
    data_batching_t r0 = bo, rr1 = bo;
    r0.world = rr1.world = 2;
    rr1.rank = 1;
    CHECK(data_iter_new(&a, c, &r0) == TERN_OK);
    CHECK(data_iter_new(&b2, c, &rr1) == TERN_OK);
    CHECK_EQ_INT(data_iter_batches_per_epoch(a), nb / 2);
    memset(seen, 0, sizeof seen);
    const data_batch_t *bb;
    int bad = 0, n_batches = 0;
    while (data_iter_next(a, &bb) == TERN_OK && bb) bad += check_batch(bb, 64, seen), n_batches++;
    while (data_iter_next(b2, &bb) == TERN_OK && bb) bad += check_batch(bb, 64, seen), n_batches++;
    int dup = 0, n_seen = 0;
    for (int i = 0; i < NLINES; i++) dup += seen[i] > 1, n_seen += seen[i];
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(dup, 0);
    CHECK_EQ_INT(n_batches, 2 * (nb / 2));
    CHECK(n_seen <= e.kept && (nb % 2 == 1 || n_seen == e.kept));
    data_iter_free(a);
    data_iter_free(b2);

    /* max_sentences */
    data_batching_t ms = bo;
    ms.max_sentences = 3;
    CHECK(data_iter_new(&a, c, &ms) == TERN_OK);
    data_iter_max_shape(a, &mB, NULL, NULL, NULL, NULL);
    CHECK_EQ_INT(mB, 3);
    data_iter_free(a);
    data_iter_free(it);
    data_corpus_free(c);
}

/* ------------------------------------------------------------ weighted mixes */

/* One epoch of a mix: per-(corpus, line) counts; returns batches, -1 on an error. */
static int mix_epoch(data_iter_t *it, int seen[2][NLINES], int *bad, int mB, int mS, int mT, int ms, int mt) {
    memset(seen, 0, sizeof(int) * 2 * NLINES);
    const data_batch_t *b;
    int n = 0, scratch[NLINES];
    while (data_iter_next(it, &b) == TERN_OK && b) {
        *bad += check_batch(b, 64, scratch);
        *bad += b->B > mB || b->S > mS || b->T > mT || b->B * b->S > ms || b->B * b->T > mt;
        for (int r = 0; r < b->B; r++) seen[b->corpus[r]][b->ids[r]]++;
        n++;
    }
    return n;
}

/* Two corpora (the same lines twice) at weights 2 and 0.3: every epoch, each kept pair of the
 * first exactly twice, round(0.3 x kept) distinct pairs of the second, drawn anew each epoch;
 * seeded; a restore replays the epoch's draw; bad weights refused. */
static void test_mix(const data_vocab_t *v) {
    data_corpus_t *c0, *c1;
    data_options_t o = opts();
    char cp1[600];
    snprintf(cp1, sizeof cp1, "%s.mix1", cachep);
    CHECK(data_corpus_open(&c0, cachep, srcp, tgtp, v, &o, NULL) == TERN_OK);
    CHECK(data_corpus_open(&c1, cp1, srcp, tgtp, v, &o, NULL) == TERN_OK);
    expect_t e = expected(NLINES);
    const data_corpus_t *cs[2] = {c0, c1};
    double w[2] = {2.0, 0.3};
    data_batching_t bo = data_default_batching();
    bo.max_tokens = 64;
    bo.seed = 5;
    data_iter_t *it;
    CHECK(data_iter_new_mix(&it, cs, w, 2, &bo) == TERN_OK);
    int64_t want1 = llround(0.3 * (double)e.kept);
    CHECK_EQ_INT(data_iter_epoch_count(it, 0), 2 * e.kept);
    CHECK_EQ_INT(data_iter_epoch_count(it, 1), want1);
    int mB, mS, mT, ms, mt;
    data_iter_max_shape(it, &mB, &mS, &mT, &ms, &mt);
    static int seen[3][2][NLINES];
    int bad = 0;
    for (int ep = 0; ep < 3; ep++) {
        int nb = mix_epoch(it, seen[ep], &bad, mB, mS, mT, ms, mt);
        CHECK(nb > 0);
        int64_t n0 = 0, n1 = 0;
        int wrong = 0;
        for (int i = 0; i < NLINES; i++) {
            int k = line_kept(&L[i]);
            wrong += seen[ep][0][i] != (k ? 2 : 0) || seen[ep][1][i] > (k ? 1 : 0);
            n0 += seen[ep][0][i];
            n1 += seen[ep][1][i];
        }
        CHECK_EQ_INT(wrong, 0);
        CHECK_EQ_INT(n0, 2 * e.kept);
        CHECK_EQ_INT(n1, want1);
        if (ep == 0) printf("mix: epoch of weights 2 and 0.3 over %lld kept pairs: %lld + %lld drawn\n",
                            (long long)e.kept, (long long)n0, (long long)n1);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(memcmp(seen[0][1], seen[1][1], sizeof seen[0][1]) != 0); /* drawn anew */
    CHECK(memcmp(seen[1][1], seen[2][1], sizeof seen[0][1]) != 0);
    /* the same seed: the same epochs; a restore in epoch 2 replays its draw */
    data_iter_t *a;
    CHECK(data_iter_new_mix(&a, cs, w, 2, &bo) == TERN_OK);
    static int again[2][NLINES];
    mix_epoch(a, again, &bad, mB, mS, mT, ms, mt);
    CHECK(memcmp(again, seen[0], sizeof again) == 0);
    const data_batch_t *b;
    for (int k = 0; k < 3; k++) CHECK(data_iter_next(a, &b) == TERN_OK && b);
    data_iter_state_t st = data_iter_state(a);
    batch_sig_t s1[8], s2[8];
    int ends = 0;
    CHECK(next_sigs(a, s1, 8, &ends) == 8);
    data_iter_t *r;
    CHECK(data_iter_new_mix(&r, cs, w, 2, &bo) == TERN_OK);
    CHECK(data_iter_restore(r, &st) == TERN_OK);
    CHECK(next_sigs(r, s2, 8, &ends) == 8);
    CHECK(memcmp(s1, s2, sizeof s1) == 0);
    data_iter_free(r);
    /* other weights: the saved state does not fit */
    double w2[2] = {2.0, 0.4};
    CHECK(data_iter_new_mix(&r, cs, w2, 2, &bo) == TERN_OK);
    CHECK(data_iter_restore(r, &st) == TERN_ERR_MISMATCH);
    data_iter_free(r);
    data_iter_free(a);
    /* bad weights */
    double bw[3] = {0.0, -1.0, NAN};
    for (int k = 0; k < 3; k++) {
        double ww[2] = {1.0, bw[k]};
        CHECK(data_iter_new_mix(&r, cs, ww, 2, &bo) == TERN_ERR_INVALID_ARG);
        CHECK(strstr(tern_last_error(), "weight") != NULL);
    }
    data_iter_free(it);
    data_corpus_free(c0);
    data_corpus_free(c1);
}

/* ------------------------------------------------------------ checkpoints */

static tmodel_config_t small_config(int pad, float dropout) {
    tmodel_config_t m = tmodel_default_config();
    m.src_vocab = m.tgt_vocab = 4 + NW;
    m.d = 16;
    m.heads = 2;
    m.ff = 32;
    m.enc_layers = m.dec_layers = 1;
    m.max_pos = 64;
    m.pad_id = pad;
    m.dropout = dropout;
    m.label_smoothing = 0.1f;
    return m;
}

/* Entries of d whose name contains part. */
static int count_entries(const char *d, const char *prefix) {
    DIR *dd = opendir(d);
    if (!dd) return -1;
    struct dirent *e;
    int n = 0;
    while ((e = readdir(dd))) n += strstr(e->d_name, prefix) != NULL;
    closedir(dd);
    return n;
}

typedef struct {
    tmodel_t m;
    tmodel_ws_t *ws;
    adam_t adam;
    data_corpus_t *c;
    data_iter_t *it;
    tensor_t *pv, *mv, *vv;
} trainer_t;

static void trainer_init(trainer_t *t, const data_vocab_t *v, float dropout) {
    memset(t, 0, sizeof *t);
    tmodel_config_t mc = small_config(v->pad_id, dropout);
    CHECK(tmodel_init(&t->m, &mc) == TERN_OK);
    tmodel_init_params(&t->m, 11);
    adam_config_t ac = adam_default_config();
    CHECK(adam_init(&t->adam, t->m.n_params, &ac) == TERN_OK);
    data_options_t o = opts();
    CHECK(data_corpus_open(&t->c, cachep, srcp, tgtp, v, &o, NULL) == TERN_OK);
    data_batching_t bo = data_default_batching();
    bo.max_tokens = 200;
    bo.seed = 3;
    CHECK(data_iter_new(&t->it, t->c, &bo) == TERN_OK);
    int mB, mS, mT, ms, mt;
    data_iter_max_shape(t->it, &mB, &mS, &mT, &ms, &mt);
    CHECK(tmodel_ws_new(&t->ws, &t->m, ms, mt, mS, mT) == TERN_OK);
    t->pv = calloc((size_t)t->m.n_tensors, sizeof(tensor_t));
    t->mv = calloc((size_t)t->m.n_tensors, sizeof(tensor_t));
    t->vv = calloc((size_t)t->m.n_tensors, sizeof(tensor_t));
    tmodel_tensor_views(&t->m, t->m.params, t->pv);
    tmodel_tensor_views(&t->m, t->adam.m, t->mv);
    tmodel_tensor_views(&t->m, t->adam.v, t->vv);
}

static void trainer_free(trainer_t *t) {
    free(t->pv);
    free(t->mv);
    free(t->vv);
    tmodel_ws_free(t->ws);
    adam_free(&t->adam);
    tmodel_free(&t->m);
    data_iter_free(t->it);
    data_corpus_free(t->c);
}

/* Updates from..to-1 (one batch each, dropout keyed by (seed 5, update)); losses[u] recorded. */
static void train(trainer_t *t, int from, int to, double *losses) {
    for (int u = from; u < to; u++) {
        const data_batch_t *b;
        CHECK(data_iter_next(t->it, &b) == TERN_OK);
        if (!b) CHECK(data_iter_next(t->it, &b) == TERN_OK && b); /* epoch end */
        tmodel_loss_t l;
        tmodel_zero_grad(&t->m);
        CHECK(tmodel_forward(&t->m, t->ws, b->src, b->tgt_in, b->tgt_out, b->B, b->S, b->T, 1, 5, (uint64_t)u, &l) ==
              TERN_OK);
        CHECK(tmodel_backward(&t->m, t->ws, 1.0f / (float)l.ntokens) == TERN_OK);
        adam_step(&t->adam, t->m.params, t->m.grads, 3e-3f);
        losses[u] = l.loss;
    }
}

static ckpt_contents_t contents(trainer_t *t, const data_vocab_t *v, ckpt_group_t *g, ckpt_value_t *vals,
                                transformer_scalars_t *spec, data_iter_state_t *ds) {
    g[0] = (ckpt_group_t){"adam_m/", t->mv, t->m.n_tensors};
    g[1] = (ckpt_group_t){"adam_v/", t->vv, t->m.n_tensors};
    vals[0] = (ckpt_value_t){.name = "adam_t", .type = CKPT_INT, .i = t->adam.t};
    vals[1] = (ckpt_value_t){.name = "lr", .type = CKPT_FLOAT, .f = 0.1};
    vals[2] = (ckpt_value_t){.name = "tiny", .type = CKPT_FLOAT, .f = 4.9e-324};
    vals[3] = (ckpt_value_t){.name = "rng", .type = CKPT_UINT, .u = UINT64_MAX};
    vals[4] = (ckpt_value_t){.name = "neg", .type = CKPT_INT, .i = INT64_MIN};
    transformer_spec_t sp = {t->m.cfg.heads, t->m.cfg.pre_norm, (int)t->m.cfg.act, t->m.cfg.scale_emb};
    *ds = data_iter_state(t->it);
    ckpt_contents_t c = {0};
    c.params = t->pv;
    c.n_params = t->m.n_tensors;
    c.alias_names = t->m.alias_name;
    c.alias_targets = t->m.alias_target;
    c.n_aliases = t->m.n_aliases;
    c.n_scalars = transformer_desc_scalars(spec, &sp);
    c.scalars = spec->t;
    c.spec_name = TRANSFORMER_SPEC_NAME;
    c.vocab = v;
    c.layer_norm_epsilon = t->m.cfg.eps;
    c.groups = g;
    c.n_groups = 2;
    c.values = vals;
    c.n_values = 5;
    c.data = ds;
    return c;
}

static void test_checkpoint_roundtrip_and_resume(const data_vocab_t *v) {
    char save[600], path[1024];
    snprintf(save, sizeof save, "%s/ckpts", dir);
    double full[1000], resumed[1000];
    trainer_t t;
    trainer_init(&t, v, 0.1f);
    int nb = (int)data_iter_batches_per_epoch(t.it);
    CHECK(nb >= 3 && nb < 990);
    const int K = nb - 2, N = nb + 4; /* the resumed part crosses an epoch end */
    printf("resume: %d batches per epoch, checkpoint at update %d, %d updates compared\n", nb, K, N - K);
    train(&t, 0, K, full);
    ckpt_group_t g[2];
    ckpt_value_t vals[5];
    transformer_scalars_t spec;
    data_iter_state_t ds;
    ckpt_contents_t cc = contents(&t, v, g, vals, &spec, &ds);
    CHECK(ckpt_save(save, K, &cc, 0, path, sizeof path) == TERN_OK);
    train(&t, K, N, full);

    /* exact round trip */
    ckpt_t *ck;
    CHECK(ckpt_open(&ck, path) == TERN_OK);
    CHECK_EQ_INT(ckpt_update(ck), K);
    trainer_t r;
    trainer_init(&r, v, 0.1f);
    CHECK(tmodel_load(&r.m, ckpt_model(ck)) == TERN_OK);
    CHECK(ckpt_read_group(ck, "adam_m/", r.mv, r.m.n_tensors) == TERN_OK);
    CHECK(ckpt_read_group(ck, "adam_v/", r.vv, r.m.n_tensors) == TERN_OK);
    ckpt_value_t x = {.name = "adam_t", .type = CKPT_INT};
    CHECK(ckpt_get_value(ck, &x) == TERN_OK);
    CHECK_EQ_INT(x.i, K);
    r.adam.t = x.i;
    x = (ckpt_value_t){.name = "lr", .type = CKPT_FLOAT};
    CHECK(ckpt_get_value(ck, &x) == TERN_OK && x.f == 0.1);
    x = (ckpt_value_t){.name = "tiny", .type = CKPT_FLOAT};
    CHECK(ckpt_get_value(ck, &x) == TERN_OK && x.f == 4.9e-324);
    x = (ckpt_value_t){.name = "rng", .type = CKPT_UINT};
    CHECK(ckpt_get_value(ck, &x) == TERN_OK && x.u == UINT64_MAX);
    x = (ckpt_value_t){.name = "neg", .type = CKPT_INT};
    CHECK(ckpt_get_value(ck, &x) == TERN_OK && x.i == INT64_MIN);
    x = (ckpt_value_t){.name = "lr", .type = CKPT_INT};
    CHECK(ckpt_get_value(ck, &x) == TERN_ERR_FORMAT);
    x = (ckpt_value_t){.name = "absent", .type = CKPT_INT};
    CHECK(ckpt_get_value(ck, &x) == TERN_ERR_FORMAT && strstr(tern_last_error(), "absent"));
    data_iter_state_t rs;
    CHECK(ckpt_get_data_state(ck, &rs) == TERN_OK);
    CHECK(memcmp(&rs, &ds, sizeof rs) == 0);
    CHECK(data_iter_restore(r.it, &rs) == TERN_OK);
    ckpt_close(ck);

    /* the resumed run reproduces the uninterrupted one exactly (dropout on) */
    train(&r, K, N, resumed);
    int same = 1;
    for (int u = K; u < N; u++) same &= resumed[u] == full[u];
    CHECK_MSG(same, "resumed losses differ: %.17g vs %.17g at %d", resumed[K], full[K], K);
    CHECK(memcmp(r.m.params, t.m.params, sizeof(float) * t.m.n_params) == 0);
    CHECK(memcmp(r.adam.v, t.adam.v, sizeof(float) * t.m.n_params) == 0);
    trainer_free(&r);
    trainer_free(&t);
}

static void test_checkpoint_inference(const data_vocab_t *v) {
    /* the checkpoint loads in the inference engine and scores as the training model computes */
    char save[600], path[1024];
    snprintf(save, sizeof save, "%s/ckpt-inf", dir);
    trainer_t t;
    trainer_init(&t, v, 0.0f);
    double losses[30];
    train(&t, 0, 30, losses);
    ckpt_group_t g[2];
    ckpt_value_t vals[5];
    transformer_scalars_t spec;
    data_iter_state_t ds;
    ckpt_contents_t cc = contents(&t, v, g, vals, &spec, &ds);
    CHECK(ckpt_save(save, 30, &cc, 0, path, sizeof path) == TERN_OK);
    tern_model_options_t mo = tern_model_default_options();
    mo.use_spm = 0;
    tern_model_t *model;
    CHECK(tern_model_load(&model, path, &mo) == TERN_OK);
    tern_translator_options_t to = tern_translator_default_options();
    to.threads_per_worker = 1;
    tern_translator_t *tr;
    CHECK(tern_translator_create(&tr, model, &to) == TERN_OK);
    char srcs[12][400], tgts[12][200];
    const char *sp[12], *tp[12];
    int lines[12], k = 0;
    for (int i = 0; i < NLINES && k < 12; i++) {
        if (!line_kept(&L[i])) continue;
        char *s = srcs[k], *q = tgts[k];
        s[0] = q[0] = 0;
        for (int j = 0; j < L[i].ls; j++)
            snprintf(s + strlen(s), 400 - strlen(s), "%s%s", j ? " " : "", vocab_token(v->src_vocab, L[i].src[j]));
        for (int j = 0; j < L[i].lt; j++)
            snprintf(q + strlen(q), 200 - strlen(q), "%s%s", j ? " " : "", vocab_token(v->tgt_vocab, L[i].tgt[j]));
        sp[k] = s, tp[k] = q, lines[k] = i;
        k++;
    }
    float *lp[12];
    int cnt[12];
    tern_request_t req = tern_request_default();
    req.sources = sp;
    req.targets = tp;
    req.num_sources = k;
    CHECK(tern_score(tr, &req, lp, cnt) == TERN_OK);
    double worst = 0;
    for (int i = 0; i < k; i++) {
        const line_t *l = &L[lines[i]];
        int src[64], tin[32], tout[32];
        for (int j = 0; j < l->ls; j++) src[j] = l->src[j];
        src[l->ls] = v->src_eos;
        tin[0] = v->tgt_start;
        for (int j = 0; j < l->lt; j++) tin[j + 1] = tout[j] = l->tgt[j];
        tout[l->lt] = v->tgt_eos;
        tmodel_loss_t ls;
        CHECK(tmodel_forward(&t.m, t.ws, src, tin, tout, 1, l->ls + 1, l->lt + 1, 0, 0, 0, &ls) == TERN_OK);
        CHECK_EQ_INT(cnt[i], l->lt + 1);
        double sum = 0;
        for (int j = 0; j < cnt[i]; j++) sum += lp[i][j];
        worst = fmax(worst, fabs(sum + ls.nll) / fabs(ls.nll));
        free(lp[i]);
    }
    CHECK_MSG(worst < 1e-5, "inference log-prob vs training nll: relative gap %.3g", worst);
    printf("checkpoint in the inference engine: %d pairs, worst relative gap of log-prob sums %.3g\n", k, worst);
    tern_translator_free(tr);
    tern_model_free(model);
    trainer_free(&t);
}

/* A parameter list of one float tensor filled from the update count. */
static float *fill_params(tensor_t *t, int64_t n, int64_t update, float scale) {
    float *p = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = (float)update * scale + (float)(i % 1000) * 1e-3f;
    memset(t, 0, sizeof *t);
    t->name = "encoder/layer_0/ffn/linear_0/weight";
    t->dtype = DT_F32;
    t->rank = 2;
    t->shape[0] = n / 64;
    t->shape[1] = 64;
    t->numel = n;
    t->data = p;
    t->nbytes = sizeof(float) * (size_t)n;
    return p;
}

static int verify_ckpt(const char *save, int64_t update, int64_t n) {
    char p[1024];
    ckpt_path(p, sizeof p, save, update);
    ckpt_t *c;
    if (ckpt_open(&c, p) != TERN_OK) {
        fprintf(stderr, "%s\n", tern_last_error());
        return 0;
    }
    const tensor_t *t = weights_get(ckpt_model(c), "encoder/layer_0/ffn/linear_0/weight");
    int ok = t && t->numel == n && ckpt_update(c) == update;
    for (int64_t i = 0; ok && i < n; i++) ok = ((const float *)t->data)[i] == (float)update + (float)(i % 1000) * 1e-3f;
    const tensor_t *m = weights_get(ckpt_state(c), "m/encoder/layer_0/ffn/linear_0/weight");
    ok = ok && m && m->numel == n;
    ckpt_close(c);
    char q[1100];
    snprintf(q, sizeof q, "%s/shared_vocabulary.json", p);
    return ok && file_exists(q);
}

static void save_simple(const char *save, int64_t update, int64_t n, const data_vocab_t *v, int keep, int *rc) {
    tensor_t t;
    float *p = fill_params(&t, n, update, 1.0f);
    ckpt_group_t g = {"m/", &t, 1};
    ckpt_contents_t c = {0};
    c.params = &t;
    c.n_params = 1;
    c.vocab = v;
    c.groups = &g;
    c.n_groups = 1;
    *rc = ckpt_save(save, update, &c, keep, NULL, 0);
    free(p);
}

static void test_keep_and_failure(const data_vocab_t *v) {
    char save[600];
    snprintf(save, sizeof save, "%s/keep", dir);
    int rc;
    for (int u = 1; u <= 5; u++) {
        save_simple(save, u * 100, 4096, v, 2, &rc);
        CHECK(rc == TERN_OK);
    }
    int64_t *u;
    int n;
    CHECK(ckpt_list(save, &u, &n) == TERN_OK);
    CHECK(n == 2 && u[0] == 400 && u[1] == 500);
    free(u);
    char p[1024], q[1024];
    CHECK(ckpt_latest(save, p, sizeof p) == TERN_OK);
    ckpt_path(q, sizeof q, save, 500);
    CHECK(strcmp(p, q) == 0);
    /* saving the same update again replaces it */
    save_simple(save, 500, 4096, v, 2, &rc);
    CHECK(rc == TERN_OK && verify_ckpt(save, 500, 4096));
    /* a save that fails half-way (a SentencePiece model to copy is missing) leaves nothing */
    data_vocab_t bad = *v;
    snprintf(bad.src_spm_path, sizeof bad.src_spm_path, "%s/no-such.model", dir);
    snprintf(bad.tgt_spm_path, sizeof bad.tgt_spm_path, "%s/no-such.model", dir);
    save_simple(save, 600, 4096, &bad, 2, &rc);
    CHECK(rc == TERN_ERR_IO);
    CHECK(strstr(tern_last_error(), "no-such.model") != NULL);
    CHECK(ckpt_list(save, &u, &n) == TERN_OK);
    CHECK(n == 2 && u[0] == 400 && u[1] == 500);
    free(u);
    CHECK_EQ_INT(count_entries(save, ".tmp"), 0);
    /* no checkpoint */
    char empty[600];
    snprintf(empty, sizeof empty, "%s/none", dir);
    CHECK(ckpt_latest(empty, p, sizeof p) == TERN_ERR_IO && strstr(tern_last_error(), empty));
}

static void test_kill(const data_vocab_t *v) {
    char save[600];
    snprintf(save, sizeof save, "%s/kill", dir);
    const int64_t n = 1 << 19; /* 2 MB of parameters and 2 MB of moments per checkpoint */
    int64_t next = 1, kills = 0, checked = 0, mid = 0;
    srand(12345);
    for (int round = 0; round < 6; round++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            for (int64_t u = next;; u++) {
                int rc;
                save_simple(save, u, n, v, 3, &rc);
                if (rc) _exit(3);
            }
        }
        struct timespec ts = {0, (long)(50 + rand() % 200) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        kills += WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
        mid += count_entries(save, ".tmp-") > 0; /* killed inside a save (or a deletion) */
        int64_t *u;
        int k;
        CHECK(ckpt_list(save, &u, &k) == TERN_OK);
        CHECK(k <= 4);
        for (int i = 0; i < k; i++) {
            CHECK_MSG(verify_ckpt(save, u[i], n), "checkpoint %lld after kill %d is broken", (long long)u[i], round);
            checked++;
        }
        if (k) next = u[k - 1] + 1;
        free(u);
    }
    CHECK_EQ_INT(kills, 6);
    printf("kill test: 6 writers killed (%lld inside a save), %lld checkpoints found complete, last update %lld\n",
           (long long)mid, (long long)checked, (long long)next - 1);
    CHECK(checked > 0 && mid > 0);
    /* the next save removes what the killed writers left */
    int rc;
    save_simple(save, next, 1024, v, 3, &rc);
    CHECK(rc == TERN_OK);
    CHECK_EQ_INT(count_entries(save, ".tmp"), 0);
    CHECK_EQ_INT(count_entries(save, "checkpoint-"), 3);
}

static void test_average(const data_vocab_t *v) {
    char save[600], out[700];
    snprintf(save, sizeof save, "%s/avg", dir);
    snprintf(out, sizeof out, "%s/avg-out", dir);
    int rc;
    save_simple(save, 1, 4096, v, 0, &rc);
    CHECK(rc == TERN_OK);
    save_simple(save, 2, 4096, v, 0, &rc);
    CHECK(rc == TERN_OK);
    save_simple(save, 7, 4096, v, 0, &rc);
    CHECK(rc == TERN_OK);
    char a[1024], b[1024], c[1024];
    ckpt_path(a, sizeof a, save, 1);
    ckpt_path(b, sizeof b, save, 2);
    ckpt_path(c, sizeof c, save, 7);
    const char *dirs[] = {a, b, c};
    CHECK(ckpt_average(out, dirs, 3) == TERN_OK);
    weights_t *w, *x[3];
    char p[1100];
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    CHECK(weights_load_safetensors(&w, p) == TERN_OK);
    for (int k = 0; k < 3; k++) {
        snprintf(p, sizeof p, "%s/model.safetensors", dirs[k]);
        CHECK(weights_load_safetensors(&x[k], p) == TERN_OK);
    }
    const char *nm = "encoder/layer_0/ffn/linear_0/weight";
    const float *m = weights_get(w, nm)->data;
    int bad = 0;
    for (int i = 0; i < 4096; i++) {
        double s = 0;
        for (int k = 0; k < 3; k++) s += (double)((const float *)weights_get(x[k], nm)->data)[i];
        bad += m[i] != (float)(s / 3.0);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(weights_metadata(w, "averaged_models") && !strcmp(weights_metadata(w, "averaged_models"), "3"));
    snprintf(p, sizeof p, "%s/shared_vocabulary.json", out);
    CHECK(file_exists(p));
    weights_free(w);
    for (int k = 0; k < 3; k++) weights_free(x[k]);
    /* again into the same directory: replaced whole */
    const char *two[] = {a, c};
    CHECK(ckpt_average(out, two, 2) == TERN_OK);
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    CHECK(weights_load_safetensors(&w, p) == TERN_OK);
    CHECK(((const float *)weights_get(w, nm)->data)[0] == 4.0f);
    weights_free(w);
    CHECK_EQ_INT(count_entries(dir, ".tmp-average"), 0);
    /* shapes must agree */
    char other[600];
    snprintf(other, sizeof other, "%s/avg2", dir);
    save_simple(other, 1, 8192, v, 0, &rc);
    ckpt_path(c, sizeof c, other, 1);
    const char *mism[] = {a, c};
    CHECK(ckpt_average(out, mism, 2) == TERN_ERR_MISMATCH);
    CHECK(strstr(tern_last_error(), nm) != NULL);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/tern-test-data-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(srcp, sizeof srcp, "%s/train.src", dir);
    snprintf(tgtp, sizeof tgtp, "%s/train.tgt", dir);
    snprintf(cachep, sizeof cachep, "%s/train.cache", dir);
    gen_corpus(srcp, tgtp, NLINES);
    data_vocab_t v;
    make_vocab(&v, 0);
    test_cache(&v);
    test_stale(&v);
    test_errors(&v);
    test_batches(&v);
    test_mix(&v);
    test_checkpoint_roundtrip_and_resume(&v);
    test_checkpoint_inference(&v);
    test_keep_and_failure(&v);
    test_kill(&v);
    test_average(&v);
    data_vocab_free(&v);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (!check_failures && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_report("test_train_data");
}
