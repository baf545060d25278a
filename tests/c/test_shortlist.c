/*
 * test_shortlist.c — Marian's lexical shortlists (search/shortlist.h) against a brute-force
 * reference of Marian's semantics written here: random text shortlists over a 40-word vocabulary
 * (repeated pairs, tied probabilities, NULL words, words outside the vocabulary), random first /
 * best / threshold, one or two vocabulary files (shared), random batches of sources; the
 * candidates must be the reference's set: ids 0..first-1 and the end token, per source id the
 * `best` pairs by probability then higher target id (the later line of a repeated pair) above the
 * threshold, the sources themselves when shared, padded to a multiple of 8 from `first` on. The
 * same lists written in the binary format (checksum by Marian's hashMem) give the same
 * candidates; malformed text and binary files are errors. Run under SAN=1 too.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "search/shortlist.h"

#define NV 40
#define MAXE 300

static uint64_t rs = 1;
static int rnd(int n) {
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int)((rs >> 33) % (uint64_t)n);
}

static char words[NV][8];
static const char *wp[NV];
static char dir[64];

typedef struct {
    int t, s;  /* ids; -1: "NULL" */
    float p;
} lex_t;

/* reference lists: for source s, ids in ref_ids[s][0..ref_n[s]) */
static int ref_ids[NV][NV], ref_n[NV];

static void reference(const lex_t *e, int n, int best, float thr) {
    static float prob[NV][NV];
    static int has[NV][NV];
    memset(has, 0, sizeof has);
    for (int i = 0; i < n; i++) /* later line wins; NULL skipped; unknown read as <unk> (1) */
        if (e[i].t != -1 && e[i].s != -1) {
            int t = e[i].t == -2 ? 1 : e[i].t, s = e[i].s == -2 ? 1 : e[i].s;
            has[s][t] = 1, prob[s][t] = e[i].p;
        }
    for (int s = 0; s < NV; s++) {
        ref_n[s] = 0;
        int used[NV] = {0};
        for (int k = 0; k < best; k++) { /* the next best: highest probability, then highest id */
            int b = -1;
            for (int t = 0; t < NV; t++)
                if (has[s][t] && !used[t] && (b < 0 || prob[s][t] > prob[s][b] || (prob[s][t] == prob[s][b] && t > b)))
                    b = t;
            if (b < 0 || !(prob[s][b] > thr)) break;
            used[b] = 1;
            ref_ids[s][ref_n[s]++] = b;
        }
    }
}

static int ref_candidates(const int *const *src, const int *len, int nsrc, int first, int shared, int eos, int *out) {
    uint8_t in[NV] = {0};
    for (int i = 0; i < first && i < NV; i++) in[i] = 1;
    in[eos] = 1;
    for (int k = 0; k < nsrc; k++)
        for (int j = 0; j < len[k]; j++) {
            int s = src[k][j];
            for (int q = 0; q < ref_n[s]; q++) in[ref_ids[s][q]] = 1;
            if (shared) in[s] = 1;
        }
    int c = 0;
    for (int i = 0; i < NV; i++) c += in[i];
    for (int i = first; i < NV && c % 8; i++)
        if (!in[i]) in[i] = 1, c++;
    int n = 0;
    for (int i = 0; i < NV; i++)
        if (in[i]) out[n++] = i;
    return n;
}

static const char *name_of(int id) { return id == -1 ? "NULL" : id == -2 ? "zz_oov" : words[id]; }

static void write_binary(const char *path, int first, int best) {
    uint64_t off[NV + 1];
    uint32_t ids[NV * NV];
    int n = 0;
    for (int s = 0; s < NV; s++) {
        off[s] = (uint64_t)n;
        for (int q = 0; q < ref_n[s]; q++) ids[n++] = (uint32_t)ref_ids[s][q];
    }
    off[NV] = (uint64_t)n;
    size_t bytes = 48 + sizeof off + (size_t)n * 4;
    uint64_t *b = calloc(bytes / 8 + 1, 8);
    b[0] = SHORTLIST_BINARY_MAGIC, b[2] = (uint64_t)first, b[3] = (uint64_t)best, b[4] = NV + 1, b[5] = (uint64_t)n;
    memcpy(b + 6, off, sizeof off);
    memcpy(b + 6 + NV + 1, ids, (size_t)n * 4);
    b[1] = shortlist_checksum(b + 2, (bytes - 16) / 8);
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, bytes, f);
    fclose(f);
    free(b);
}

static void one_case(const vocab_t *voc, int seed) {
    rs = (uint64_t)seed * 7919 + 3;
    static lex_t e[MAXE];
    int n = 1 + rnd(MAXE);
    static const float probs[] = {0.05f, 0.1f, 0.25f, 0.5f, 1.0f};
    char text[128], bin[128];
    snprintf(text, sizeof text, "%s/lex.s2t", dir);
    snprintf(bin, sizeof bin, "%s/lex.blob", dir);
    FILE *f = fopen(text, "w");
    for (int i = 0; i < n; i++) {
        int r = rnd(40);
        e[i].t = r == 0 ? -1 : r == 1 ? -2 : rnd(NV);
        e[i].s = r == 2 ? -1 : r == 3 ? -2 : rnd(NV);
        e[i].p = probs[rnd(5)];
        fprintf(f, "%s%s%s %.2f\n", name_of(e[i].t), rnd(2) ? " " : "\t", name_of(e[i].s), e[i].p);
        if (rnd(10) == 0) fprintf(f, "\n");
    }
    fclose(f);
    int first = rnd(12), best = rnd(6), shared = rnd(2), eos = 0;
    float thr = rnd(3) == 0 ? 0.1f : 0.0f;
    reference(e, n, best, thr);
    shortlist_spec_t sp;
    char spec[256];
    snprintf(spec, sizeof spec, "%s,%d,%d,%g", text, first, best, thr);
    CHECK(shortlist_spec_parse(&sp, spec, "test") == TERN_OK);
    vmap_t *v = NULL, *vb = NULL;
    shortlist_info_t info;
    CHECK_MSG(shortlist_load(&v, &sp, voc, voc, shared, eos, &info) == TERN_OK, "%s", tern_last_error());
    write_binary(bin, first, best);
    snprintf(spec, sizeof spec, "%s", bin);
    CHECK(shortlist_spec_parse(&sp, spec, "test") == TERN_OK);
    CHECK_MSG(shortlist_load(&vb, &sp, voc, voc, shared, eos, &info) == TERN_OK, "%s", tern_last_error());
    CHECK(info.binary && info.first == first && info.best == best);
    if (!v || !vb) {
        vmap_free(v), vmap_free(vb);
        return;
    }
    for (int b = 0; b < 20; b++) {
        int s0[8], s1[8], l0 = 1 + rnd(8), l1 = rnd(8);
        for (int j = 0; j < 8; j++) s0[j] = rnd(NV), s1[j] = rnd(NV);
        const int *src[2] = {s0, s1};
        int len[2] = {l0, l1}, nsrc = 1 + rnd(2);
        int want[NV], got[NV], gotb[NV];
        uint8_t mark[NV] = {0};
        int nw = ref_candidates(src, len, nsrc, first, shared, eos, want);
        int ng = vmap_candidates(v, src, len, nsrc, got, mark);
        int nb = vmap_candidates(vb, src, len, nsrc, gotb, mark);
        CHECK_MSG(ng == nw && !memcmp(got, want, sizeof(int) * (size_t)nw), "seed %d batch %d: %d vs %d candidates",
                  seed, b, ng, nw);
        CHECK_MSG(nb == nw && !memcmp(gotb, want, sizeof(int) * (size_t)nw), "seed %d batch %d (binary)", seed, b);
        int above = 0; /* padded to a multiple of 8 unless the ids >= first ran out */
        for (int i = 0; i < nw; i++) above += want[i] >= first;
        CHECK(nw % 8 == 0 || above == NV - first);
    }
    vmap_free(v);
    vmap_free(vb);
}

static int load_err(const vocab_t *voc, const char *content, size_t n, const char *spec_vals, const char *want) {
    char p[128], spec[256];
    snprintf(p, sizeof p, "%s/bad", dir);
    FILE *f = fopen(p, "wb");
    fwrite(content, 1, n, f);
    fclose(f);
    snprintf(spec, sizeof spec, "%s%s", p, spec_vals);
    shortlist_spec_t sp;
    vmap_t *v = NULL;
    tern_status_t st = shortlist_spec_parse(&sp, spec, "test");
    if (!st) st = shortlist_load(&v, &sp, voc, voc, 0, 0, NULL);
    int ok = st != TERN_OK && !v && strstr(tern_last_error(), want) != NULL;
    if (!ok) fprintf(stderr, "expected an error with '%s', got %d: %s\n", want, st, st ? tern_last_error() : "");
    vmap_free(v);
    return ok;
}

int main(void) {
    for (int i = 0; i < NV; i++) {
        snprintf(words[i], sizeof words[i], i == 0 ? "</s>" : i == 1 ? "<unk>" : "w%d", i);
        wp[i] = words[i];
    }
    tern_set_log_level(TERN_LOG_QUIET); /* the words outside the vocabulary warn */
    vocab_t *voc = NULL;
    CHECK(vocab_from_tokens(&voc, wp, NV) == TERN_OK);
    snprintf(dir, sizeof dir, "/tmp/tern_test_shortlist_%d", (int)getpid());
    char cmd[128];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    CHECK(system(cmd) == 0);
    for (int s = 0; s < 200; s++) one_case(voc, s);

    /* the spec */
    shortlist_spec_t sp;
    CHECK(shortlist_spec_parse(&sp, "lex.s2t", "t") == TERN_OK && sp.first == 100 && sp.best == 100 &&
          sp.threshold == 0.0f && sp.check && sp.n_vals == 0);
    CHECK(shortlist_spec_parse(&sp, "lex.s2t 50 20 0.5", "t") == TERN_OK && sp.first == 50 && sp.best == 20 &&
          sp.threshold == 0.5f && sp.n_vals == 3);
    CHECK(shortlist_spec_parse(&sp, "lex.bin,false", "t") == TERN_OK && !sp.check);
    CHECK(shortlist_spec_parse(&sp, "lex.s2t,x", "t") != TERN_OK);
    CHECK(shortlist_spec_parse(&sp, "lex.s2t,1,2,nan", "t") != TERN_OK);
    CHECK(shortlist_spec_parse(&sp, "a,1,2,3,4", "t") != TERN_OK);
    CHECK(shortlist_spec_parse(&sp, "", "t") != TERN_OK);

    /* malformed text */
    CHECK(load_err(voc, "w2 w3 0.5\nw2 w3\n", 16, ",10,10", "line 2"));
    CHECK(load_err(voc, "w2 w3 0.5\nw2 w3 0.5 9\n", 22, "", "line 2"));
    CHECK(load_err(voc, "w2 w3 abc\n", 10, "", "'abc'"));
    CHECK(load_err(voc, "w2 w3 0.5\nw2\0w3 0.5\n", 20, "", "NUL"));
    /* malformed binary: built from a valid one */
    for (int s = 0; s < NV; s++) ref_n[s] = 0;
    ref_n[3] = 2, ref_ids[3][0] = 5, ref_ids[3][1] = 7;
    char bin[128];
    snprintf(bin, sizeof bin, "%s/ok.blob", dir);
    write_binary(bin, 4, 2);
    FILE *f = fopen(bin, "rb");
    static char b[4096];
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    CHECK(load_err(voc, b, n - 4, "", "truncated"));
    CHECK(load_err(voc, b, 40, "", "truncated"));
    b[60] ^= 1;
    CHECK(load_err(voc, b, n, "", "checksum"));
    b[60] ^= 1;
    CHECK(load_err(voc, b, n, ",1,2", "check flag")); /* a binary file takes no first/best */
    uint32_t big = 99;
    memcpy(b + n - 4, &big, 4); /* the last id: outside the vocabulary (checksum not checked) */
    CHECK(load_err(voc, b, n, ",0", "target id 99"));

    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    vocab_free(voc);
    return check_report("test_shortlist");
}
