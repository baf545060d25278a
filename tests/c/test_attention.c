/* test_attention.c — the grouped decoder attention kernel (att_group, src/model/attention.c)
 * against the one-row kernels it replaces (att_dots, softmax_forward, att_wsum per row): bit-
 * identical probabilities and weighted sums on random shapes — rows per group 1–5, tree-cache
 * paths with shared prefixes of every length (and a P below the true common prefix), source
 * lengths 1–300 without paths, dh 8–128 and 12. The all-heads kernel (att_heads, the decoder's
 * self-attention of one row) against the same one-row kernels run head by head: H 1–16 heads of
 * dh 8–128 and 12 in rows of H · dh floats, with and without paths, n 1–300.
 * `test_attention bench` times both forms instead. */
#include "check.h"
#include "kernels/kernels.h"
#include "nn/attention.h"

#include <string.h>
#include <time.h>

static unsigned long long rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}
static int irand(int n) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((rng >> 33) % (unsigned long long)n);
}

/* Reference: the per-row kernels. */
static void ref_rows(float *o, size_t o_ld, float *sc, size_t sc_ld, const float *q, size_t q_ld, int g,
                     const float *Kb, const float *Vb, const int *idx, size_t idx_ld, size_t ld, int n, int dh) {
    for (int u = 0; u < g; u++) {
        const int *iu = idx ? idx + u * idx_ld : NULL;
        float *su = sc + u * sc_ld;
        att_dots(su, q + u * q_ld, Kb, iu, ld, n, dh);
        softmax_forward(su, su, 1, n);
        att_wsum(o + u * o_ld, su, Vb, iu, ld, n, dh);
    }
}

enum { MAXG = 5, MAXN = 300, MAXD = 512 };
static float K[(MAXN * MAXG + 8) * MAXD], V[(MAXN * MAXG + 8) * MAXD];
static float Q[MAXG * MAXD], S1[16 * 320], S2[16 * 320], O1[MAXG * MAXD], O2[MAXG * MAXD];
static int PATH[MAXG * MAXN];

/* One case: g rows, n keys, head width dh inside rows of width ld; shared: the paths' common
 * prefix (-1: no paths, the cross-attention form); P passed to att_group. */
static void one_case(int g, int n, int dh, int shared, int P) {
    size_t q_ld = MAXD + 8, o_ld = MAXD, sc_ld = 320;
    int nslots = MAXN * MAXG + 8;
    for (size_t i = 0; i < (size_t)nslots * MAXD; i += 1 + (size_t)irand(3)) K[i] = frand(), V[i] = frand();
    size_t kld = MAXD; /* key/value rows of 512 floats, the head's slice at a random offset */
    for (int i = 0; i < g * (int)q_ld && i < MAXG * MAXD; i++) Q[i] = frand() * 2.0f;
    const int *idx = NULL;
    if (shared >= 0) {
        for (int j = 0; j < n; j++) PATH[j] = irand(nslots);
        for (int u = 1; u < g; u++)
            for (int j = 0; j < n; j++) PATH[u * n + j] = j < shared ? PATH[j] : irand(nslots);
        idx = PATH;
    } else
        P = n;
    int off = irand(MAXD - dh + 1);
    memset(O1, 0xff, sizeof O1), memset(O2, 0xff, sizeof O2);
    ref_rows(O1, o_ld, S1, sc_ld, Q, q_ld, g, K + off, V + off, idx, (size_t)n, kld, n, dh);
    att_group(O2, o_ld, S2, sc_ld, Q, q_ld, g, K + off, V + off, idx, (size_t)n, kld, n, P, dh);
    int bad = 0;
    for (int u = 0; u < g; u++) {
        bad |= memcmp(S1 + u * sc_ld, S2 + u * sc_ld, (size_t)n * sizeof(float)) != 0;
        bad |= memcmp(O1 + u * o_ld, O2 + u * o_ld, (size_t)dh * sizeof(float)) != 0;
    }
    CHECK_MSG(!bad, "g %d n %d dh %d shared %d P %d: not bit-identical", g, n, dh, shared, P);
}

/* att_heads: H heads of width dh side by side in rows of ld ≥ H · dh floats, against att_dots,
 * softmax_forward and att_wsum head by head. */
static void heads_case(int H, int dh, int n, int with_path) {
    size_t ld = (size_t)H * dh + (size_t)irand(3) * 8, sc_ld = 320;
    int nslots = (int)((sizeof K / sizeof *K) / ld);
    for (size_t i = 0; i < (size_t)nslots * ld; i += 1 + (size_t)irand(3)) K[i] = frand(), V[i] = frand();
    for (int i = 0; i < H * dh; i++) Q[i] = frand() * 2.0f;
    const int *idx = NULL;
    if (with_path) {
        for (int j = 0; j < n; j++) PATH[j] = irand(nslots);
        idx = PATH;
    }
    memset(O1, 0xff, sizeof O1), memset(O2, 0xff, sizeof O2);
    for (int h = 0; h < H; h++) {
        float *su = S1 + h * sc_ld;
        att_dots(su, Q + h * dh, K + h * dh, idx, ld, n, dh);
        softmax_forward(su, su, 1, n);
        att_wsum(O1 + h * dh, su, V + h * dh, idx, ld, n, dh);
    }
    att_heads(O2, S2, sc_ld, Q, K, V, idx, ld, n, H, dh);
    int bad = memcmp(O1, O2, (size_t)H * dh * sizeof(float)) != 0;
    for (int h = 0; h < H; h++) bad |= memcmp(S1 + h * sc_ld, S2 + h * sc_ld, (size_t)n * sizeof(float)) != 0;
    CHECK_MSG(!bad, "att_heads H %d dh %d n %d path %d: not bit-identical", H, dh, n, with_path);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void bench(void) {
    int dhs[] = {64}, ns[] = {30, 100};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (int g = 1; g <= 4; g++) {
            int n = ns[a], dh = dhs[0], reps = 20000;
            double t0 = now();
            for (int r = 0; r < reps; r++)
                ref_rows(O1, MAXD, S1, 320, Q, MAXD, g, K, V, NULL, 0, MAXD, n, dh);
            double t1 = now();
            for (int r = 0; r < reps; r++)
                att_group(O2, MAXD, S2, 320, Q, MAXD, g, K, V, NULL, 0, MAXD, n, n, dh);
            double t2 = now();
            printf("n %3d g %d dh %d: rows %.1f ns, group %.1f ns per call\n", n, g, dh, (t1 - t0) / reps * 1e9,
                   (t2 - t1) / reps * 1e9);
        }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "bench")) {
        bench();
        return 0;
    }
    int dhs[] = {32, 64, 128, 8, 24, 40, 48, 72, 12}; /* 12: not a multiple of 8 (one-row path) */
    int lens[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 31, 64, 129, 300};
    for (size_t a = 0; a < sizeof dhs / sizeof *dhs; a++)
        for (int g = 1; g <= MAXG; g++)
            for (size_t b = 0; b < sizeof lens / sizeof *lens; b++) {
                int n = lens[b], dh = dhs[a];
                one_case(g, n, dh, -1, n);                         /* cross-attention: no paths */
                int shs[] = {0, 1, n / 2, n - 1, n};
                for (int s = 0; s < 5; s++) {
                    int sh = shs[s] < 0 ? 0 : shs[s];
                    one_case(g, n, dh, sh, sh);                    /* P = the common prefix */
                    if (sh > 0) one_case(g, n, dh, sh, irand(sh)); /* any smaller P too */
                }
            }
    int Hs[] = {1, 2, 3, 4, 8, 16};
    for (size_t a = 0; a < sizeof dhs / sizeof *dhs; a++)
        for (size_t hb = 0; hb < sizeof Hs / sizeof *Hs; hb++)
            for (size_t b = 0; b < sizeof lens / sizeof *lens; b++)
                if (Hs[hb] * dhs[a] <= MAXD)
                    for (int wp = 0; wp < 2; wp++) heads_case(Hs[hb], dhs[a], lens[b], wp);
    for (int k = 0; k < 300; k++) { /* random shapes */
        int g = 1 + irand(MAXG), n = 1 + irand(MAXN), dh = 8 * (1 + irand(16)), sh = irand(n + 1);
        one_case(g, n, dh, irand(4) ? sh : -1, sh);
    }
    return check_report("test_attention");
}
