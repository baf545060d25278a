/*
 * test_ensemble.c — an ensemble (src/model/ensemble.c) behind the model family table, searched by
 * the unchanged greedy and beam search, against a brute-force reference computed here in double.
 *
 * The members are mock models of a mock family (a model_family_t written here): the next-token
 * logits and the attention row are a hash-seeded function of (member seed, sentence, prefix), the
 * attention spread over the member's own source length. Each member gets its own source for each
 * sentence (different lengths, ids that encode member, sentence and position) through the
 * ensemble's packed source, and checks it got exactly its own: per-member source encoding. The
 * mocks check set_rows() as a real model must (parent in range and of the same sentence).
 *
 * Reference (double): member k's log-probs lp_k = log_softmax(logits_k); the ensemble's score of
 * token v is sum_k w_k lp_k(v) (logprob-mean) or log sum_k w_k exp(lp_k(v)) (prob-mean), weights
 * normalized to sum 1; before min_length EOS is removed and the rest renormalized (a
 * log-softmax); the attention row is sum_k w_k attn_k (zero past each member's source). A
 * hypothesis' score is raw / lp(|Y|) + beta * sum_j log min(cov_j, 1) over cov_j > 0, as
 * test_search.c.
 *
 * Sections (random seeds, K = 1..3 members with random weights, both modes, N = 1..4 sentences,
 * the five scoring rules of test_search.c, min length 0..2):
 *   1 exhaustive beam  B = V^T (nothing pruned), early stop off: the n-best list = the brute-force
 *                      enumeration's best n (tokens, unless a neighbour is within 1e-4; scores and
 *                      raw scores 1e-4), both EOS policies; early stop on without penalties: the
 *                      best hypothesis.
 *   2 greedy           tokens = the argmax path of the reference scores (unless the top two are
 *                      within 1e-5), score and raw score 1e-4.
 *   3 one member       an ensemble of one mock with any weight gives results bit-identical to the
 *                      mock alone (beam, min length 0; both modes), and the same tokens with scores
 *                      within 1e-5 when min length renormalizes (greedy and beam).
 *   4 errors           ensemble_new refuses a weight <= 0, NaN, and members of different V.
 *
 * Legend: K members, N sentences, B beam size, V vocabulary, S source length, T max output length.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/ensemble.h"
#include "search/search.h"

#define MAXK 3
#define MAXN 4
#define MAXV 6
#define MAXT 4
#define MAXS 5
#define CAP 4096 /* rows */

static char ctx[256];

/* ------------------------------------------------------------ hashing */

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
static double unit01(uint64_t h) { return (double)(h >> 11) * 0x1p-53; }
typedef struct { uint64_t s; } rng_t;
static uint64_t rng_next(rng_t *r) { return mix64(r->s++ * 0x2545F4914F6CDD1DULL); }
static int rng_int(rng_t *r, int lo, int hi) { return lo + (int)(rng_next(r) % (uint64_t)(hi - lo + 1)); }
static double rng_unit(rng_t *r) { return unit01(rng_next(r)); }

/* ------------------------------------------------------------ the mock family */

typedef struct {
    int k;                 /* member index (its source ids encode it) */
    int V, bos, eos;
    uint64_t seed;
    float scale, eos_slope, eos_bias[MAXN];
    int src_len[MAXN];     /* the source length it expects for each sentence */
} mock_net_t;

typedef struct {
    const mock_net_t *m;
    int N, S, R, t_next;
    int src_len[MAXN];
    int sent[CAP], len[CAP], pre[CAP][MAXT];
    int sent2[CAP], len2[CAP], pre2[CAP][MAXT];
    int violations;
} mock_state_t;

static int total_violations;
#define VIOLATION(...) do { if (total_violations++ < 5) { fprintf(stderr, "mock: "); fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr); } } while (0)

static int src_id(int k, int n, int j) { return (k + 1) * 1000 + n * 10 + j; }

/* logits (V) and attention (S, zero past the member's source length) after prefix p[0..len) */
static void mock_dist(const mock_net_t *m, int n, const int *p, int len, int S, float *logits, float *attn) {
    uint64_t h = mix64(m->seed * 0xD1B54A32D192ED03ULL + (uint64_t)(n + 1) * 0x8CB92BA72F3D8DD7ULL);
    for (int i = 0; i < len; i++) h = mix64(h + (uint64_t)(p[i] + 1) * 0xA24BAED4963EE407ULL);
    for (int v = 0; v < m->V; v++) logits[v] = (float)(m->scale * (2.0 * unit01(mix64(h ^ (0x1000u + (unsigned)v))) - 1.0));
    logits[m->eos] += m->eos_bias[n] + m->eos_slope * (float)len;
    if (attn) {
        float sum = 0;
        for (int j = 0; j < S; j++) {
            float u = j < m->src_len[n] ? (float)unit01(mix64(h ^ (0x2000u + (unsigned)j))) : 0.0f;
            attn[j] = u < 0.15f ? 0.0f : u;
            sum += attn[j];
        }
        if (sum == 0) attn[0] = sum = 1;
        for (int j = 0; j < S; j++) attn[j] /= sum;
    }
}

static tern_status_t mock_build(void **net, weights_t *w, const model_config_t *cfg, tern_compute_type_t c,
                                 unsigned flags) {
    (void)net, (void)w, (void)cfg, (void)c;
    return TERN_ERR_UNSUPPORTED;
}
static void mock_free(void *net) { (void)net; }
static void mock_describe(const void *net, tern_model_info_t *in) {
    const mock_net_t *m = net;
    in->family = "mock";
    in->source_vocab_size = 10000;
    in->target_vocab_size = m->V;
    in->max_source_length = MAXS;
    in->max_target_length = MAXT + 1;
}
static const char *mock_vocab_tensor(const void *net, const weights_t *w, int target) {
    (void)net, (void)w, (void)target;
    return "";
}
static void *mock_state_new(const void *net) {
    mock_state_t *s = calloc(1, sizeof *s);
    if (s) s->m = net;
    return s;
}
static void mock_state_free(void *s) { free(s); }
static tern_status_t mock_encode(void *p, const int *const *src, const int *src_len, int N) {
    mock_state_t *s = p;
    const mock_net_t *m = s->m;
    s->N = N;
    s->S = 0;
    for (int n = 0; n < N; n++) {
        if (src_len[n] != m->src_len[n]) VIOLATION("member %d sentence %d: source length %d, expected %d", m->k, n, src_len[n], m->src_len[n]);
        for (int j = 0; j < src_len[n] && j < MAXS; j++)
            if (src[n][j] != src_id(m->k, n, j)) VIOLATION("member %d sentence %d: source id %d at %d", m->k, n, src[n][j], j);
        s->src_len[n] = src_len[n];
        if (src_len[n] > s->S) s->S = src_len[n];
        s->sent[n] = n;
        s->len[n] = 0;
    }
    s->R = N;
    s->t_next = 0;
    return TERN_OK;
}
static int mock_source_len(const void *p) { return ((const mock_state_t *)p)->S; }
static tern_status_t mock_step(void *p, const int *tokens, int t, float *out, float *attn) {
    mock_state_t *s = p;
    const mock_net_t *m = s->m;
    if (t != s->t_next) VIOLATION("member %d: step %d, expected %d", m->k, t, s->t_next);
    for (int r = 0; r < s->R; r++) {
        if (t == 0) {
            if (tokens[r] != m->bos) VIOLATION("member %d: start token %d", m->k, tokens[r]);
        } else {
            if (tokens[r] < 0 || tokens[r] >= m->V || tokens[r] == m->eos || s->len[r] >= MAXT) {
                VIOLATION("member %d: step %d row %d: token %d fed back", m->k, t, r, tokens[r]);
                return TERN_ERR_INTERNAL;
            }
            s->pre[r][s->len[r]++] = tokens[r];
        }
        mock_dist(m, s->sent[r], s->pre[r], s->len[r], s->S, out + (size_t)r * m->V, attn ? attn + (size_t)r * s->S : NULL);
    }
    s->t_next = t + 1;
    return TERN_OK;
}
static tern_status_t mock_set_rows(void *p, const int *parent, const int *sent, int R) {
    mock_state_t *s = p;
    if (R < 1 || R > CAP) {
        VIOLATION("set_rows: %d rows", R);
        return TERN_ERR_INTERNAL;
    }
    for (int i = 0; i < R; i++) {
        if (parent[i] < 0 || parent[i] >= s->R || sent[i] != s->sent[parent[i]]) {
            VIOLATION("set_rows: row %d parent %d", i, parent[i]);
            return TERN_ERR_INTERNAL;
        }
        s->sent2[i] = sent[i];
        s->len2[i] = s->len[parent[i]];
        memcpy(s->pre2[i], s->pre[parent[i]], sizeof s->pre2[i]);
    }
    memcpy(s->sent, s->sent2, (size_t)R * sizeof(int));
    memcpy(s->len, s->len2, (size_t)R * sizeof(int));
    memcpy(s->pre, s->pre2, (size_t)R * sizeof s->pre[0]);
    s->R = R;
    return TERN_OK;
}

static const model_family_t mock_family = {
    .name = "mock", .step_logprobs = 0, .build = mock_build, .free = mock_free, .describe = mock_describe,
    .vocab_tensor = mock_vocab_tensor, .state_new = mock_state_new, .state_free = mock_state_free,
    .encode = mock_encode, .source_len = mock_source_len, .step = mock_step, .set_rows = mock_set_rows,
};

/* ------------------------------------------------------------ a random ensemble world */

typedef struct {
    int K, N, V, bos, eos;
    mock_net_t m[MAXK];
    float w_in[MAXK];   /* weights as given */
    double w[MAXK];     /* normalized */
    tern_ensemble_mode_t mode;
    int S;              /* max over members and sentences of the source lengths */
} world_t;

static void world_random(world_t *W, rng_t *g, int K, int N, int V) {
    memset(W, 0, sizeof *W);
    W->K = K, W->N = N, W->V = V;
    W->bos = rng_int(g, 0, V - 1);
    do W->eos = rng_int(g, 0, V - 1); while (W->eos == W->bos);
    double sum = 0;
    for (int k = 0; k < K; k++) {
        mock_net_t *m = &W->m[k];
        m->k = k, m->V = V, m->bos = W->bos, m->eos = W->eos;
        m->seed = rng_next(g);
        m->scale = (float)(1.0 + 2.0 * rng_unit(g));
        m->eos_slope = (float)(0.8 * rng_unit(g));
        for (int n = 0; n < N; n++) {
            m->eos_bias[n] = (float)(-2.5 + 3.5 * rng_unit(g));
            m->src_len[n] = rng_int(g, 1, MAXS);
            if (m->src_len[n] > W->S) W->S = m->src_len[n];
        }
        W->w_in[k] = (float)(0.2 + 2.0 * rng_unit(g));
        sum += W->w_in[k];
    }
    for (int k = 0; k < K; k++) W->w[k] = K == 1 ? 1.0 : (double)(float)(W->w_in[k] / sum);
    W->mode = rng_int(g, 0, 1) ? TERN_ENSEMBLE_PROB_MEAN : TERN_ENSEMBLE_LOGPROB_MEAN;
}

/* The reference: the ensemble's scores (V) and attention (S) after prefix p[0..len) of sentence n. */
static void ens_dist_d(const world_t *W, int n, const int *p, int len, int min_length, double *c, double *attn) {
    for (int v = 0; v < W->V; v++) c[v] = W->mode == TERN_ENSEMBLE_LOGPROB_MEAN ? 0.0 : -INFINITY;
    for (int j = 0; j < W->S; j++) attn[j] = 0;
    for (int k = 0; k < W->K; k++) {
        float lg[MAXV], at[MAXS];
        const mock_net_t *m = &W->m[k];
        int Sk = 0; /* the member's padded source length: its longest source in the batch */
        for (int i = 0; i < W->N; i++) Sk = m->src_len[i] > Sk ? m->src_len[i] : Sk;
        mock_dist(m, n, p, len, Sk, lg, at);
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < W->V; v++) mx = lg[v] > mx ? lg[v] : mx;
        for (int v = 0; v < W->V; v++) s += exp((double)lg[v] - mx);
        for (int v = 0; v < W->V; v++) {
            double lp = (double)lg[v] - mx - log(s);
            if (W->mode == TERN_ENSEMBLE_LOGPROB_MEAN) c[v] += W->w[k] * lp;
            else c[v] = c[v] == -INFINITY ? log(W->w[k]) + lp : log(exp(c[v]) + W->w[k] * exp(lp));
        }
        for (int j = 0; j < Sk; j++) attn[j] += W->w[k] * at[j];
    }
    if (len < min_length) {
        c[W->eos] = -INFINITY;
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < W->V; v++) mx = c[v] > mx ? c[v] : mx;
        for (int v = 0; v < W->V; v++) s += exp(c[v] - mx);
        for (int v = 0; v < W->V; v++) c[v] = c[v] - mx - log(s);
    }
}

typedef struct {
    float alpha;
    tern_length_norm_t norm;
    float beta;
} rule_t;
static const rule_t RULES[] = {
    {0.0f, TERN_LENPEN_PLAIN, 0.0f}, {1.0f, TERN_LENPEN_PLAIN, 0.0f}, {0.6f, TERN_LENPEN_GNMT, 0.0f},
    {0.0f, TERN_LENPEN_PLAIN, 0.2f}, {0.6f, TERN_LENPEN_GNMT, 0.2f},
};
#define NRULES ((int)(sizeof RULES / sizeof RULES[0]))

static double lp_d(int L, rule_t r) {
    if (r.alpha == 0.0f) return 1.0;
    return r.norm == TERN_LENPEN_GNMT ? pow((5.0 + L) / 6.0, (double)r.alpha) : pow((double)L, (double)r.alpha);
}
static double covpen_d(const double *cov, int S, double beta) {
    double p = 0;
    for (int j = 0; j < S; j++)
        if (cov[j] > 0) p += log(cov[j] < 1 ? cov[j] : 1);
    return beta * p;
}

typedef struct {
    int tok[MAXT];
    int L, eos;
    double score, raw;
} bhyp_t;
typedef struct {
    bhyp_t h[8192];
    int n;
} blist_t;

static void brute_dfs(const world_t *W, int n, int T, rule_t r, int min_length, int *y, int len, double raw,
                      const double *cov, blist_t *out) {
    double c[MAXV], attn[MAXS], cov2[MAXS];
    if (len >= MAXT || T > MAXT) return;
    ens_dist_d(W, n, y, len, min_length, c, attn);
    for (int j = 0; j < W->S; j++) cov2[j] = cov[j] + attn[j];
    double pen = r.beta != 0.0f ? covpen_d(cov2, W->S, r.beta) : 0.0;
    for (int v = 0; v < W->V; v++) {
        if (c[v] == -INFINITY) continue;
        if (v == W->eos || len + 1 == T) {
            bhyp_t *h = &out->h[out->n++];
            memcpy(h->tok, y, (size_t)len * sizeof(int));
            h->L = len;
            h->eos = v == W->eos;
            if (!h->eos) h->tok[h->L++] = v;
            h->raw = raw + c[v];
            h->score = h->raw / lp_d(len + 1, r) + pen;
        } else {
            y[len] = v;
            brute_dfs(W, n, T, r, min_length, y, len + 1, raw + c[v], cov2, out);
        }
    }
}
static int cmp_bhyp(const void *a, const void *b) {
    const bhyp_t *x = a, *y = b;
    return x->score > y->score ? -1 : x->score < y->score ? 1 : 0;
}
static void brute_force(const world_t *W, int n, int T, rule_t r, int min_length, blist_t *out) {
    int y[MAXT];
    double cov[MAXS] = {0};
    out->n = 0;
    brute_dfs(W, n, T, r, min_length, y, 0, 0.0, cov, out);
    qsort(out->h, (size_t)out->n, sizeof out->h[0], cmp_bhyp);
}

static int same_tokens(const int *a, int la, const int *b, int lb) {
    return la == lb && (la == 0 || !memcmp(a, b, (size_t)la * sizeof(int)));
}

/* ------------------------------------------------------------ running a search over the ensemble */

typedef struct {
    void *net;
    void *state;
    int *packed[MAXN];
    int plen[MAXN];
    decoder_iface_t dec;
} run_t;

/* Builds the ensemble of W's members (or, alone = 1, the first mock by itself), encodes the packed
 * sources and fills the decoder interface as the translator does. */
static void run_open(run_t *R, const world_t *W, int alone) {
    memset(R, 0, sizeof *R);
    const model_family_t *fams[MAXK];
    void *nets[MAXK];
    for (int k = 0; k < W->K; k++) fams[k] = &mock_family, nets[k] = (void *)&W->m[k];
    const model_family_t *fam = &model_family_ensemble;
    if (alone) {
        fam = &mock_family;
        R->net = nets[0];
    } else {
        CHECK_EQ_INT(ensemble_new(&R->net, fams, nets, W->w_in, W->K, W->mode), TERN_OK);
    }
    R->state = fam->state_new(R->net);
    CHECK(R->state != NULL);
    for (int n = 0; n < W->N; n++) {
        if (alone) {
            R->plen[n] = W->m[0].src_len[n];
            R->packed[n] = malloc((size_t)R->plen[n] * sizeof(int));
            for (int j = 0; j < R->plen[n]; j++) R->packed[n][j] = src_id(0, n, j);
            continue;
        }
        int total = 0, longest = 0;
        for (int k = 0; k < W->K; k++) {
            total += 1 + W->m[k].src_len[n];
            longest = W->m[k].src_len[n] > longest ? W->m[k].src_len[n] : longest;
        }
        int *q = R->packed[n] = malloc((size_t)total * sizeof(int));
        for (int k = 0; k < W->K; k++) {
            *q++ = W->m[k].src_len[n];
            for (int j = 0; j < W->m[k].src_len[n]; j++) *q++ = src_id(k, n, j);
        }
        R->plen[n] = longest;
    }
    CHECK_EQ_INT(fam->encode(R->state, (const int *const *)R->packed, R->plen, W->N), TERN_OK);
    R->dec = (decoder_iface_t){R->state, W->V, fam->source_len(R->state), fam->step, fam->set_rows, fam->step_logprobs, NULL, NULL, NULL};
    if (!alone) CHECK_EQ_INT(R->dec.source_len, W->S);
}

static void run_close(run_t *R, int alone) {
    const model_family_t *fam = alone ? &mock_family : &model_family_ensemble;
    fam->state_free(R->state);
    if (!alone) fam->free(R->net);
    for (int n = 0; n < MAXN; n++) free(R->packed[n]);
}

static search_options_t make_opts(const world_t *W, int B, int nhyp, rule_t r, tern_eos_policy_t pol, int early,
                                  int min_length) {
    search_options_t o;
    memset(&o, 0, sizeof o);
    o.beam_size = B;
    o.num_hypotheses = nhyp;
    o.length_penalty = r.alpha;
    o.length_norm = r.norm;
    o.coverage_penalty = r.beta;
    o.eos_policy = pol;
    o.early_stop = early;
    o.min_length = min_length;
    o.need_scores = 1;
    o.bos = W->bos;
    o.eos = W->eos;
    return o;
}

static search_result_t *results_new(int N) { return calloc((size_t)N, sizeof(search_result_t)); }
static void results_free(search_result_t *r, int N) {
    for (int i = 0; i < N; i++) search_result_free(&r[i]);
    free(r);
}

/* ------------------------------------------------------------ 1. exhaustive beams */

static int stat_nbest, stat_prob, stat_log, stat_members[MAXK + 1];

static void check_equals_brute(const search_result_t *got, const blist_t *exp, int npos) {
    for (int i = 0; i < npos && i < got->n && i < exp->n; i++) {
        const hypothesis_t *h = &got->hyps[i];
        const bhyp_t *e = &exp->h[i];
        CHECK_MSG(fabs(h->score - e->score) <= 1e-4, "%s: hyp %d: score %.7g, brute force %.7g", ctx, i, h->score, e->score);
        CHECK_MSG(fabs(h->raw - e->raw) <= 1e-4 || fabs(h->score - e->score) > 1e-4, "%s: hyp %d: raw %.7g, brute force %.7g",
                  ctx, i, h->raw, e->raw);
        int tie = (i > 0 && fabs(exp->h[i - 1].score - e->score) <= 1e-4) ||
                  (i + 1 < exp->n && fabs(exp->h[i + 1].score - e->score) <= 1e-4);
        if (!tie) CHECK_MSG(same_tokens(h->tokens, h->length, e->tok, e->L), "%s: hyp %d tokens differ from the brute force", ctx, i);
    }
}

static void test_exhaustive(int seeds) {
    static const int VT[][2] = {{3, 2}, {3, 3}, {4, 2}, {4, 3}, {5, 2}, {3, 4}};
    static blist_t bf[MAXN];
    for (int seed = 0; seed < seeds; seed++) {
        rng_t g = {0xE000 + (uint64_t)seed};
        int pick = rng_int(&g, 0, (int)(sizeof VT / sizeof VT[0]) - 1);
        int V = VT[pick][0], Tmax = VT[pick][1], B = 1;
        for (int i = 0; i < Tmax; i++) B *= V;
        int K = rng_int(&g, 1, MAXK), N = rng_int(&g, 1, MAXN), max_len[MAXN];
        world_t W;
        world_random(&W, &g, K, N, V);
        for (int n = 0; n < N; n++) max_len[n] = rng_int(&g, 1, Tmax);
        int min_length = rng_int(&g, 0, 3) < 2 ? 0 : rng_int(&g, 1, Tmax);
        int nhyp = rng_int(&g, 1, 4);
        stat_members[K]++;
        if (W.mode == TERN_ENSEMBLE_PROB_MEAN) stat_prob++;
        else stat_log++;
        for (int ri = 0; ri < NRULES; ri++) {
            rule_t r = RULES[ri];
            for (int n = 0; n < N; n++) brute_force(&W, n, max_len[n], r, min_length, &bf[n]);
            for (int pol = 0; pol < 2; pol++)
                for (int early = 0; early < 2; early++) {
                    if (early && (r.alpha != 0.0f || r.beta != 0.0f)) continue;
                    search_options_t o = make_opts(&W, B, nhyp, r, pol ? TERN_EOS_PAPER : TERN_EOS_COMMON, early, min_length);
                    run_t R;
                    run_open(&R, &W, 0);
                    search_result_t *res = results_new(N);
                    tern_status_t st = beam_search(&R.dec, N, max_len, &o, res);
                    snprintf(ctx, sizeof ctx, "exhaustive seed %d K %d mode %d V %d B %d rule %d policy %d early %d nhyp %d min %d",
                             seed, K, (int)W.mode, V, B, ri, pol, early, nhyp, min_length);
                    CHECK_EQ_INT(st, TERN_OK);
                    for (int n = 0; st == TERN_OK && n < N; n++) {
                        int exact_n = early ? 1 : nhyp;
                        if (!early) CHECK_EQ_INT(res[n].n, nhyp < bf[n].n ? nhyp : bf[n].n);
                        stat_nbest += exact_n > 1 && bf[n].n > 1;
                        char base[256];
                        snprintf(base, sizeof base, "%s", ctx);
                        snprintf(ctx, sizeof ctx, "%s sentence %d", base, n);
                        check_equals_brute(&res[n], &bf[n], exact_n);
                        snprintf(ctx, sizeof ctx, "%s", base);
                    }
                    results_free(res, N);
                    run_close(&R, 0);
                }
        }
    }
}

/* ------------------------------------------------------------ 2. greedy */

static int stat_greedy_ties;

static void test_greedy(int seeds) {
    for (int seed = 0; seed < seeds; seed++) {
        rng_t g = {0xF000 + (uint64_t)seed};
        int K = rng_int(&g, 1, MAXK), N = rng_int(&g, 1, MAXN), V = rng_int(&g, 3, MAXV), max_len[MAXN];
        world_t W;
        world_random(&W, &g, K, N, V);
        for (int n = 0; n < N; n++) max_len[n] = rng_int(&g, 1, MAXT);
        rule_t r = RULES[seed % NRULES];
        int min_length = rng_int(&g, 0, 2);
        search_options_t o = make_opts(&W, 1, 1, r, TERN_EOS_COMMON, 1, min_length);
        run_t R;
        run_open(&R, &W, 0);
        search_result_t *res = results_new(N);
        tern_status_t st = greedy_search(&R.dec, N, max_len, &o, res);
        snprintf(ctx, sizeof ctx, "greedy seed %d K %d mode %d min %d rule %d", seed, K, (int)W.mode, min_length, seed % NRULES);
        CHECK_EQ_INT(st, TERN_OK);
        for (int n = 0; st == TERN_OK && n < N; n++) {
            int y[MAXT], L = 0, eos = 0, tie = 0;
            double raw = 0, cov[MAXS] = {0}, c[MAXV], attn[MAXS];
            for (int t = 0; t < max_len[n]; t++) {
                ens_dist_d(&W, n, y, t, min_length, c, attn);
                for (int j = 0; j < W.S; j++) cov[j] += attn[j];
                int best = 0;
                for (int v = 1; v < V; v++) best = c[v] > c[best] ? v : best;
                for (int v = 0; v < V; v++) tie |= v != best && fabs(c[v] - c[best]) <= 1e-5;
                raw += c[best];
                if (best == W.eos) {
                    eos = 1;
                    break;
                }
                y[L++] = best;
            }
            double sc = raw / lp_d(L + eos, r) + (r.beta != 0.0f ? covpen_d(cov, W.S, r.beta) : 0.0);
            CHECK_EQ_INT(res[n].n, 1);
            if (res[n].n != 1) continue;
            const hypothesis_t *h = &res[n].hyps[0];
            if (tie) {
                stat_greedy_ties++;
                continue;
            }
            CHECK_MSG(same_tokens(h->tokens, h->length, y, L), "%s: sentence %d tokens", ctx, n);
            CHECK_MSG(fabs(h->raw - raw) <= 1e-4 && fabs(h->score - sc) <= 1e-4, "%s: sentence %d: score %.7g raw %.7g, reference %.7g %.7g",
                      ctx, n, h->score, h->raw, sc, raw);
        }
        results_free(res, N);
        run_close(&R, 0);
    }
}

/* ------------------------------------------------------------ 3. one member */

static void test_one_member(int seeds) {
    for (int seed = 0; seed < seeds; seed++) {
        rng_t g = {0xA000 + (uint64_t)seed};
        int N = rng_int(&g, 1, MAXN), V = rng_int(&g, 3, MAXV), max_len[MAXN];
        world_t W;
        world_random(&W, &g, 1, N, V);
        W.w_in[0] = (float)(0.1 + 5 * rng_unit(&g)); /* any weight: one member's is 1 */
        for (int n = 0; n < N; n++) max_len[n] = rng_int(&g, 1, MAXT);
        rule_t r = RULES[seed % NRULES];
        int min_length = seed % 2 ? rng_int(&g, 1, 2) : 0, B = rng_int(&g, 1, 4);
        search_options_t o = make_opts(&W, B, rng_int(&g, 1, B), r, seed % 4 < 2 ? TERN_EOS_COMMON : TERN_EOS_PAPER,
                                       1, min_length);
        search_result_t *res[2];
        for (int alone = 0; alone < 2; alone++) {
            run_t R;
            run_open(&R, &W, alone);
            res[alone] = results_new(N);
            tern_status_t st = B == 1 ? greedy_search(&R.dec, N, max_len, &o, res[alone])
                                      : beam_search(&R.dec, N, max_len, &o, res[alone]);
            CHECK_EQ_INT(st, TERN_OK);
            run_close(&R, alone);
        }
        snprintf(ctx, sizeof ctx, "one member seed %d mode %d B %d min %d rule %d", seed, (int)W.mode, B, min_length, seed % NRULES);
        for (int n = 0; n < N; n++) {
            CHECK_MSG(res[0][n].n == res[1][n].n, "%s: sentence %d: %d hypotheses, alone %d", ctx, n, res[0][n].n, res[1][n].n);
            for (int i = 0; i < res[0][n].n && i < res[1][n].n; i++) {
                const hypothesis_t *a = &res[0][n].hyps[i], *b = &res[1][n].hyps[i];
                CHECK_MSG(same_tokens(a->tokens, a->length, b->tokens, b->length), "%s: sentence %d hyp %d tokens", ctx, n, i);
                if (min_length == 0 && B > 1)
                    CHECK_MSG(a->score == b->score && a->raw == b->raw, "%s: sentence %d hyp %d: score %.9g raw %.9g, alone %.9g %.9g",
                              ctx, n, i, a->score, a->raw, b->score, b->raw);
                else
                    CHECK_MSG(fabs(a->score - b->score) <= 1e-5 && fabs(a->raw - b->raw) <= 1e-5,
                              "%s: sentence %d hyp %d: score %.9g, alone %.9g", ctx, n, i, a->score, b->score);
            }
        }
        results_free(res[0], N);
        results_free(res[1], N);
    }
}

/* ------------------------------------------------------------ 4. errors */

static void test_errors(void) {
    rng_t g = {7};
    world_t W;
    world_random(&W, &g, 2, 1, 4);
    const model_family_t *fams[2] = {&mock_family, &mock_family};
    void *nets[2] = {&W.m[0], &W.m[1]};
    void *net = NULL;
    float bad[][2] = {{1, 0}, {-1, 1}, {NAN, 1}, {1, INFINITY}};
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(ensemble_new(&net, fams, nets, bad[i], 2, TERN_ENSEMBLE_LOGPROB_MEAN), TERN_ERR_INVALID_ARG);
        CHECK(net == NULL && strstr(tern_last_error(), "weight") != NULL);
    }
    CHECK_EQ_INT(ensemble_new(&net, fams, nets, NULL, 2, (tern_ensemble_mode_t)7), TERN_ERR_INVALID_ARG);
    CHECK_EQ_INT(ensemble_new(&net, fams, nets, NULL, 0, TERN_ENSEMBLE_LOGPROB_MEAN), TERN_ERR_INVALID_ARG);
    W.m[1].V = 5;
    CHECK_EQ_INT(ensemble_new(&net, fams, nets, NULL, 2, TERN_ENSEMBLE_LOGPROB_MEAN), TERN_ERR_MISMATCH);
    CHECK(strstr(tern_last_error(), "member 2 has 5 target tokens but member 1 has 4") != NULL);
    W.m[1].V = 4;
    CHECK_EQ_INT(ensemble_new(&net, fams, nets, NULL, 2, TERN_ENSEMBLE_PROB_MEAN), TERN_OK);
    tern_model_info_t in;
    memset(&in, 0, sizeof in);
    model_family_ensemble.describe(net, &in);
    CHECK(!strcmp(in.family, "ensemble") && in.num_members == 2 && in.target_vocab_size == 4 &&
          in.ensemble.mode == TERN_ENSEMBLE_PROB_MEAN && in.ensemble.weights[0] == 0.5f && in.ensemble.weights[1] == 0.5f);
    model_family_ensemble.free(net);
}

int main(void) {
    test_errors();
    test_one_member(300);
    test_greedy(400);
    test_exhaustive(120);
    CHECK_EQ_INT(total_violations, 0);
    printf("cases: members 1/2/3: %d/%d/%d, logprob-mean %d, prob-mean %d, n-best lists %d, greedy near-ties skipped %d\n",
           stat_members[1], stat_members[2], stat_members[3], stat_log, stat_prob, stat_nbest, stat_greedy_ties);
    return check_report("test_ensemble");
}
