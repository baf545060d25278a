/* test_attention.c — the grouped decoder attention kernel (att_group, src/model/attention.c)
 * against the one-row kernels it replaces (att_dots, softmax_forward, att_wsum per row): bit-
 * identical probabilities and weighted sums on random shapes — rows per group 1–5, tree-cache
 * paths with shared prefixes of every length (and a P below the true common prefix), source
 * lengths 1–300 without paths, dh 8–128 and 12. `test_attention bench` times both forms instead. */
#include "check.h"
#include "kernels/kernels.h"
#include "model/attention.h"

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
static float Q[MAXG * MAXD], S1[MAXG * 320], S2[MAXG * 320], O1[MAXG * MAXD], O2[MAXG * MAXD];
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
    for (int k = 0; k < 300; k++) { /* random shapes */
        int g = 1 + irand(MAXG), n = 1 + irand(MAXN), dh = 8 * (1 + irand(16)), sh = irand(n + 1);
        one_case(g, n, dh, irand(4) ? sh : -1, sh);
    }
    return check_report("test_attention");
}
