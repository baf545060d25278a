/*
 * test_search.c — exactness of the search algorithms (src/search: greedy.c, beam.c), independent
 * of any neural model.
 *
 * The "model" is a mock decoder_iface_t over a deterministic language: the next-token logits (and
 * the cross-attention row) are a function of (sentence, prefix of target tokens so far) only — a
 * hash-seeded table over a small vocabulary (V = 4..7, with BOS and EOS ids drawn per seed), or a
 * hand-written distribution for the crafted cases. The mock keeps one token history per row and
 * follows set_rows() as a real model must (new row i = old row parent[i], sentence sent[i]); it
 * counts as a violation (and fails the call) any inconsistency: a wrong step index, a start token
 * other than BOS, EOS or an out-of-range token fed back, a parent out of range or of another
 * sentence, rows of a sentence not contiguous, more than B rows for a sentence, two rows of one
 * sentence with the same prefix. It logs, per step and sentence, the rows it computed (count and
 * a hash of their prefixes) and remembers every (sentence, prefix) it evaluated.
 *
 * Sections (each over many random seeds, N = 1..5 sentences per batch with different max lengths,
 * min lengths 0..3, the scoring rules: no length penalty, plain |Y|^1, GNMT ((5+|Y|)/6)^0.6,
 * coverage 0.2 alone and with GNMT 0.6):
 *   1 greedy       tokens = the argmax path computed here; score = raw / lp + coverage recomputed
 *                  in double from the logits (1e-5); need_scores = 0 gives the same tokens; a
 *                  sentence's row leaves the batch at the step it finishes.
 *   2 exhaustive   B = V^T (no candidate is ever pruned): best hypothesis and the whole n-best list
 *                  = brute-force enumeration of every sequence up to the max length under the
 *                  same rule (ties aside: a position whose brute-force score is within 1e-4 of a
 *                  neighbour's is checked by score, not tokens); both EOS policies, early stop on
 *                  and off (with early stop on and no penalty, CTranslate2's exit rule makes only
 *                  the best hypothesis exact, so only it is checked there).
 *   3 small beams  every hypothesis' score and raw score = recomputation of its tokens (1e-5);
 *                  n-best sorted and distinct; every hypothesis was evaluated by the model along
 *                  its own prefix; results, scores and the rows the model saw at every step (per
 *                  sentence) = a reference beam search written here, one sentence at a time, with
 *                  the same float arithmetic (exact tokens, scores to 1e-6); the same sentences
 *                  decoded one by one give bit-identical results (batching changes nothing); a
 *                  sentence's rows leave the batch at the step the reference says it finished.
 *   4 paper policy the rows the model gets after a step = B - k, k the EOS candidates among the top
 *                  B (B = min(B, rows x V) and less the -inf candidates where min length removed
 *                  EOS), from the model's own log in all random cases; crafted cases: an EOS
 *                  candidate taking a slot (rows 1, 2, 1 against 1, 3 under the common policy),
 *                  and the backoff returning the best EOS candidate that fell out of the beam
 *                  (exact tokens, score log 0.07) when no hypothesis ended with EOS.
 *   5 min length   no EOS-ended hypothesis shorter than min_length; scores recomputed with the EOS
 *                  logit removed before the softmax (all random cases); crafted: greedy score
 *                  log(0.3 / 0.5) + log 0.7 exactly renormalized.
 *   6 early stop   early_stop = 0 never ends with a worse best hypothesis than early_stop = 1
 *                  (both policies, every rule), and equals the exhaustive optimum, n-best list
 *                  included, for every rule (section 2);
 *                  crafted: tied finished scores do not delay the exact stop.
 *   7 formulas     search_length_penalty / search_coverage_penalty against hand-computed values.
 *   8 processors   forced prefixes, restricted paths and terminology constraints (procs.c,
 *                  constraints.c) in exhaustive beams against the filtered brute force (see there).
 *   9 pruning      an infinite width gives bit-identical results; finite widths and thresholds
 *                  return valid hypotheses.
 * The mock itself is shown to catch a wrong parent, EOS fed back, a skipped step, duplicate rows
 * and too many rows. The last output line before the summary counts how often the random cases
 * met what they exist for (EOS taking a slot, backoff, staggered finishes, n-best lists, ...).
 *
 * Legend: N sentences, B beam size, V vocabulary, S source length, T max output length (tokens,
 * the end token included).
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/kernels.h"
#include "search/constraints.h"
#include "search/procs.h"
#include "search/search.h"

#define MAXT 8             /* longest max length used (tokens) */
#define MAXV 8
#define MAXN 6
#define MAXS 6
#define MAXSTEPS (MAXT + 1)
#define SEEN_CAP (1 << 14) /* evaluated (sentence, prefix) pairs per run */

/* ------------------------------------------------------------ a deterministic language */

static uint64_t mix64(uint64_t x) { /* splitmix64 finalizer */
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

typedef struct world world_t;
typedef void (*dist_fn_t)(const world_t *w, int n, const int *prefix, int len, float *logits, float *attn);

struct world {
    int V, S, bos, eos;
    uint64_t seed;
    int src_len[MAXN];   /* attention is 0 past a sentence's source length (padding) */
    float eos_bias[MAXN];
    float eos_slope, scale;
    dist_fn_t fn;        /* a crafted distribution, or NULL for the hashed table */
};

static uint64_t prefix_hash(const world_t *w, int n, const int *p, int len) {
    uint64_t h = mix64(w->seed * 0xD1B54A32D192ED03ULL + (uint64_t)(n + 1) * 0x8CB92BA72F3D8DD7ULL);
    for (int i = 0; i < len; i++) h = mix64(h + (uint64_t)(p[i] + 1) * 0xA24BAED4963EE407ULL);
    return h;
}

/* logits (V) and attention (S, when attn) after the prefix p[0..len) of sentence n */
static void world_dist(const world_t *w, int n, const int *p, int len, float *logits, float *attn) {
    if (w->fn) {
        w->fn(w, n, p, len, logits, attn);
        return;
    }
    uint64_t h = prefix_hash(w, n, p, len);
    for (int v = 0; v < w->V; v++)
        logits[v] = (float)(w->scale * (2.0 * unit01(mix64(h ^ (0x1000u + (unsigned)v))) - 1.0));
    logits[w->eos] += w->eos_bias[n] + w->eos_slope * (float)len;
    if (attn) {
        float sum = 0;
        for (int j = 0; j < w->S; j++) {
            float u = j < w->src_len[n] ? (float)unit01(mix64(h ^ (0x2000u + (unsigned)j))) : 0.0f;
            attn[j] = u < 0.15f ? 0.0f : u; /* some exact zeros: coverage 0 is left out */
            sum += attn[j];
        }
        if (sum == 0) attn[0] = sum = 1;
        for (int j = 0; j < w->S; j++) attn[j] /= sum;
    }
}

static void world_random(world_t *w, rng_t *r, int V, int N) {
    memset(w, 0, sizeof *w);
    w->V = V;
    w->seed = rng_next(r);
    w->bos = rng_int(r, 0, V - 1);
    do w->eos = rng_int(r, 0, V - 1); while (w->eos == w->bos);
    w->S = rng_int(r, 1, MAXS);
    for (int n = 0; n < N; n++) {
        w->src_len[n] = rng_int(r, 1, w->S);
        w->eos_bias[n] = (float)(-2.5 + 3.5 * rng_unit(r));
    }
    w->eos_slope = (float)(0.8 * rng_unit(r));
    w->scale = (float)(1.0 + 2.0 * rng_unit(r));
}

/* ------------------------------------------------------------ the mock model */

typedef struct {
    const world_t *w;
    int N, gsent[MAXN]; /* local sentence -> world sentence */
    int cap, maxb;      /* row capacity; most rows one sentence may have */
    int R, t_next;
    int *sent, *len, *pre;    /* (cap), (cap), (cap, MAXT) */
    int *sent2, *len2, *pre2;
    int violations;
    int nsteps;
    int rows[MAXSTEPS][MAXN];
    uint64_t hsum[MAXSTEPS][MAXN];
    uint64_t *seen_key;
    int *seen_step;
    /* set_argmax_only (greedy): on now, the step it was turned on at (-1: never), calls */
    int argmax_on, argmax_on_at, argmax_calls;
} mock_t;

#define VIOLATION(m, ...) do { if ((m)->violations++ < 5) { fprintf(stderr, "mock model: "); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* inserts key; returns the step it was first seen at, or -1 when new */
static int seen_insert(mock_t *m, uint64_t key, int step) {
    size_t i = (size_t)(key & (SEEN_CAP - 1));
    for (int probe = 0; probe < SEEN_CAP; probe++, i = (i + 1) & (SEEN_CAP - 1)) {
        if (m->seen_step[i] < 0) {
            m->seen_key[i] = key;
            m->seen_step[i] = step;
            return -1;
        }
        if (m->seen_key[i] == key) return m->seen_step[i];
    }
    VIOLATION(m, "evaluated set full");
    return -1;
}
static int seen_has(const mock_t *m, uint64_t key) {
    size_t i = (size_t)(key & (SEEN_CAP - 1));
    for (int probe = 0; probe < SEEN_CAP && m->seen_step[i] >= 0; probe++, i = (i + 1) & (SEEN_CAP - 1))
        if (m->seen_key[i] == key) return 1;
    return 0;
}

static tern_status_t mock_step(void *self, const int *tokens, int t, float *logits, float *attn) {
    mock_t *m = self;
    const world_t *w = m->w;
    if (t != m->t_next || t >= MAXSTEPS) {
        VIOLATION(m, "step %d called, expected step %d", t, m->t_next);
        return TERN_ERR_INTERNAL;
    }
    int count[MAXN] = {0};
    for (int r = 0; r < m->R; r++) {
        int *p = m->pre + (size_t)r * MAXT, s = m->sent[r];
        if (r > 0 && s < m->sent[r - 1]) VIOLATION(m, "step %d: rows of sentence %d not contiguous", t, s);
        if (++count[s] > m->maxb) VIOLATION(m, "step %d: sentence %d has more than %d rows", t, s, m->maxb);
        if (t == 0) {
            if (tokens[r] != w->bos) VIOLATION(m, "step 0 row %d: start token %d, BOS is %d", r, tokens[r], w->bos);
        } else {
            if (tokens[r] < 0 || tokens[r] >= w->V || tokens[r] == w->eos) {
                VIOLATION(m, "step %d row %d: token %d fed back", t, r, tokens[r]);
                return TERN_ERR_INTERNAL;
            }
            if (m->len[r] != t - 1 || m->len[r] >= MAXT) {
                VIOLATION(m, "step %d row %d: history of %d tokens", t, r, m->len[r]);
                return TERN_ERR_INTERNAL;
            }
            p[m->len[r]++] = tokens[r];
        }
        int n = m->gsent[s];
        world_dist(w, n, p, m->len[r], logits + (size_t)r * w->V, attn ? attn + (size_t)r * w->S : NULL);
        uint64_t h = prefix_hash(w, n, p, m->len[r]);
        if (seen_insert(m, h, t) == t) VIOLATION(m, "step %d: two rows of sentence %d with one prefix", t, s);
        m->rows[t][s]++;
        m->hsum[t][s] += h;
    }
    /* argmax only: what a screened model may write, -inf for every token but the row's first argmax */
    for (int r = 0; m->argmax_on && r < m->R; r++) {
        float *lg = logits + (size_t)r * w->V;
        int best = 0;
        for (int v = 1; v < w->V; v++) best = lg[v] > lg[best] ? v : best;
        for (int v = 0; v < w->V; v++)
            if (v != best) lg[v] = -INFINITY;
    }
    m->t_next = t + 1;
    m->nsteps = t + 1;
    return TERN_OK;
}

static tern_status_t mock_set_argmax_only(void *self, int on) {
    mock_t *m = self;
    if (on && m->argmax_on_at < 0) m->argmax_on_at = m->t_next;
    if (on == m->argmax_on) VIOLATION(m, "set_argmax_only(%d) twice", on);
    m->argmax_on = on;
    m->argmax_calls++;
    return TERN_OK;
}

static tern_status_t mock_set_rows(void *self, const int *parent, const int *sent, int R) {
    mock_t *m = self;
    if (R < 1 || R > m->cap) {
        VIOLATION(m, "set_rows: %d rows (capacity %d)", R, m->cap);
        return TERN_ERR_INTERNAL;
    }
    for (int i = 0; i < R; i++) {
        int p = parent[i];
        if (p < 0 || p >= m->R || sent[i] != m->sent[p]) {
            VIOLATION(m, "set_rows: row %d: parent %d (of %d rows), sentence %d", i, p, m->R,
                      p >= 0 && p < m->R ? m->sent[p] : -1);
            return TERN_ERR_INTERNAL;
        }
        m->sent2[i] = sent[i];
        m->len2[i] = m->len[p];
        memcpy(m->pre2 + (size_t)i * MAXT, m->pre + (size_t)p * MAXT, MAXT * sizeof(int));
    }
    int *x;
    x = m->sent, m->sent = m->sent2, m->sent2 = x;
    x = m->len, m->len = m->len2, m->len2 = x;
    x = m->pre, m->pre = m->pre2, m->pre2 = x;
    m->R = R;
    return TERN_OK;
}

/* N sentences gsent[0..N) of world w, one row each; at most maxb rows per sentence */
static void mock_init(mock_t *m, decoder_iface_t *dec, const world_t *w, int N, const int *gsent, int maxb) {
    memset(m, 0, sizeof *m);
    m->w = w;
    m->N = N;
    m->maxb = maxb;
    m->cap = N * maxb;
    for (int i = 0; i < N; i++) m->gsent[i] = gsent ? gsent[i] : i;
    m->sent = calloc((size_t)m->cap, sizeof(int));
    m->sent2 = calloc((size_t)m->cap, sizeof(int));
    m->len = calloc((size_t)m->cap, sizeof(int));
    m->len2 = calloc((size_t)m->cap, sizeof(int));
    m->pre = calloc((size_t)m->cap * MAXT, sizeof(int));
    m->pre2 = calloc((size_t)m->cap * MAXT, sizeof(int));
    m->seen_key = calloc(SEEN_CAP, sizeof(uint64_t));
    m->seen_step = malloc(SEEN_CAP * sizeof(int));
    if (!m->sent || !m->sent2 || !m->len || !m->len2 || !m->pre || !m->pre2 || !m->seen_key || !m->seen_step) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (int i = 0; i < SEEN_CAP; i++) m->seen_step[i] = -1;
    for (int i = 0; i < N; i++) m->sent[i] = i;
    m->R = N;
    m->argmax_on_at = -1;
    dec->self = m;
    dec->vocab_size = w->V;
    dec->source_len = w->S;
    dec->step = mock_step;
    dec->set_rows = mock_set_rows;
    dec->logprobs = 0; /* logits: the search normalizes them */
    dec->set_argmax_only = NULL;
}

static void mock_free(mock_t *m) {
    free(m->sent), free(m->sent2), free(m->len), free(m->len2), free(m->pre), free(m->pre2);
    free(m->seen_key), free(m->seen_step);
}

/* ------------------------------------------------------------ scoring rules, recomputed in double */

typedef struct {
    float alpha;
    tern_length_norm_t norm;
    float beta;
} rule_t;

static const rule_t RULES[] = {
    {0.0f, TERN_LENPEN_PLAIN, 0.0f}, /* raw log-probability */
    {1.0f, TERN_LENPEN_PLAIN, 0.0f}, /* |Y|^1 */
    {0.6f, TERN_LENPEN_GNMT, 0.0f},  /* ((5+|Y|)/6)^0.6 */
    {0.0f, TERN_LENPEN_PLAIN, 0.2f}, /* coverage 0.2 */
    {0.6f, TERN_LENPEN_GNMT, 0.2f},  /* GNMT 0.6 + coverage 0.2 */
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

/* log-softmax (double) of the logits after prefix p[0..len), EOS removed when len < min_length */
static void logprobs_d(const world_t *w, int n, const int *p, int len, int min_length, double *lp, float *attn) {
    float lg[MAXV];
    world_dist(w, n, p, len, lg, attn);
    if (len < min_length) lg[w->eos] = -INFINITY;
    double mx = -INFINITY, s = 0;
    for (int v = 0; v < w->V; v++) mx = lg[v] > mx ? lg[v] : mx;
    for (int v = 0; v < w->V; v++) s += exp((double)lg[v] - mx);
    for (int v = 0; v < w->V; v++) lp[v] = (double)lg[v] - mx - log(s);
}

/* score of tokens y[0..L) (then EOS when eos_end) under rule r: raw / lp(|Y|) + coverage */
static double seq_score(const world_t *w, int n, const int *y, int L, int eos_end, rule_t r, int min_length, double *raw_out) {
    double raw = 0, cov[MAXS] = {0}, lp[MAXV];
    float attn[MAXS];
    int steps = L + (eos_end != 0);
    for (int t = 0; t < steps; t++) {
        logprobs_d(w, n, y, t, min_length, lp, attn);
        raw += lp[t < L ? y[t] : w->eos];
        for (int j = 0; j < w->S; j++) cov[j] += attn[j];
    }
    if (raw_out) *raw_out = raw;
    return raw / lp_d(steps, r) + (r.beta != 0.0f ? covpen_d(cov, w->S, r.beta) : 0.0);
}

/* ------------------------------------------------------------ brute force */

typedef struct {
    int tok[MAXT];
    int L, eos;
    double score, raw;
} bhyp_t;

typedef struct {
    bhyp_t *h;
    int n, cap;
} blist_t;

static void blist_push(blist_t *b, const bhyp_t *h) {
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        b->h = realloc(b->h, (size_t)b->cap * sizeof *b->h);
        if (!b->h) exit(2);
    }
    b->h[b->n++] = *h;
}

static int cmp_bhyp(const void *a, const void *b) {
    const bhyp_t *x = a, *y = b;
    return x->score > y->score ? -1 : x->score < y->score ? 1 : 0;
}

/* every sequence: ends with EOS within T tokens, or T tokens without EOS */
static void brute_dfs(const world_t *w, int n, int T, rule_t r, int min_length, int *y, int len, double raw,
                      const double *cov, blist_t *out) {
    double lp[MAXV], cov2[MAXS];
    float attn[MAXS];
    logprobs_d(w, n, y, len, min_length, lp, attn);
    for (int j = 0; j < w->S; j++) cov2[j] = cov[j] + attn[j];
    double pen = r.beta != 0.0f ? covpen_d(cov2, w->S, r.beta) : 0.0;
    for (int v = 0; v < w->V; v++) {
        if (lp[v] == -INFINITY) continue;
        if (v == w->eos || len + 1 == T) {
            bhyp_t h = {{0}, len, v == w->eos, 0, raw + lp[v]};
            memcpy(h.tok, y, (size_t)len * sizeof(int));
            if (v != w->eos) h.tok[h.L++] = v;
            h.score = h.raw / lp_d(len + 1, r) + pen;
            blist_push(out, &h);
        } else {
            y[len] = v;
            brute_dfs(w, n, T, r, min_length, y, len + 1, raw + lp[v], cov2, out);
        }
    }
}

static void brute_force(const world_t *w, int n, int T, rule_t r, int min_length, blist_t *out) {
    int y[MAXT];
    double cov[MAXS] = {0};
    out->n = 0;
    brute_dfs(w, n, T, r, min_length, y, 0, 0.0, cov, out);
    qsort(out->h, (size_t)out->n, sizeof *out->h, cmp_bhyp);
}

/* ------------------------------------------------------------ reference beam search (one sentence)
 *
 * A straightforward transcription of the algorithm, one sentence at a time, with the float
 * arithmetic of a real search (the log-softmax kernel, float sums), so that it follows the same
 * path as beam.c to the bit:
 *   candidates = every live hypothesis × every token, score = its score + log p (EOS -inf before
 *   min_length), sorted (score descending, then hypothesis-major index);
 *   the first B candidates are visited in order; an EOS candidate (or any candidate at the last
 *   step) is finished with score raw / lp(t + 1) + coverage(attention of steps 0..t); under the
 *   common policy it is replaced by the next non-EOS candidate among candidates B..2B-1, under the
 *   paper policy its slot is lost;
 *   paper policy: the EOS extensions of live hypotheses that were not visited are remembered, the
 *   best of them returned first when no finished hypothesis ended with EOS;
 *   the sentence stops at the last step, when no hypothesis is left, with early stop when
 *   (no penalty) the best candidate of some step was EOS and nhyp are finished (CTranslate2) or
 *   (penalty) B and nhyp are finished, and in every mode when no live hypothesis can reach the
 *   nhyp-th best finished score (no coverage penalty; bound: best live score / lp(T)).
 */

typedef struct {
    int tok[MAXT];
    int L, eos;
    float score, raw;
} rhyp_t;

#define MAXB 8
#define MAXHYP 12

typedef struct {
    rhyp_t res[MAXHYP];
    int nres;
    int steps;
    int rows[MAXSTEPS];
    uint64_t hsum[MAXSTEPS];
    int k_eos[MAXSTEPS], finite[MAXSTEPS], live_after[MAXSTEPS];
    int backoff; /* the first result is the paper backoff */
} ref_t;

typedef struct {
    int tok[MAXT];
    int len;
    float score;
    float cov[MAXS];
} live_t;

typedef struct {
    float v;
    int idx;
} cand_t;

static int cmp_cand(const void *a, const void *b) {
    const cand_t *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static float lp_f(int L, rule_t r) {
    if (r.alpha == 0.0f) return 1.0f;
    return r.norm == TERN_LENPEN_GNMT ? powf((5.0f + (float)L) / 6.0f, r.alpha) : powf((float)L, r.alpha);
}

static float covpen_f(const float *c, int S, float beta) {
    float p = 0;
    for (int j = 0; j < S; j++)
        if (c[j] > 0) p += logf(c[j] < 1.0f ? c[j] : 1.0f);
    return beta * p;
}

typedef struct {
    rhyp_t *h;
    int n, cap;
} rlist_t;

static void rlist_push(rlist_t *l, const rhyp_t *h) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 32;
        l->h = realloc(l->h, (size_t)l->cap * sizeof *l->h);
        if (!l->h) exit(2);
    }
    l->h[l->n++] = *h;
}

/* k-th largest score (k from 1), duplicates counted */
static float rlist_kth(const rlist_t *l, int k) {
    for (int i = 0; i < l->n; i++) {
        int gt = 0, ge = 0;
        for (int j = 0; j < l->n; j++) gt += l->h[j].score > l->h[i].score, ge += l->h[j].score >= l->h[i].score;
        if (gt < k && k <= ge) return l->h[i].score;
    }
    return -INFINITY;
}

static void ref_beam(const world_t *w, int n, int T, const search_options_t *o, rule_t r, ref_t *out) {
    const int V = w->V, S = w->S, B = o->beam_size, eos = w->eos;
    const int common = o->eos_policy == TERN_EOS_COMMON, use_cov = r.beta != 0.0f;
    const int nhyp = o->num_hypotheses < 1 ? 1 : o->num_hypotheses;
    const int no_penalty = r.alpha == 0.0f && !use_cov;
    live_t live[MAXB], next[MAXB];
    cand_t cand[MAXB * MAXV];
    float lsm[MAXB][MAXV], att[MAXB][MAXS];
    rlist_t fin = {0};
    rhyp_t fallen;
    int has_fallen = 0, registered = 0, eos_fin = 0, top_fin = 0, nlive = 1;
    memset(out, 0, sizeof *out);
    memset(&live[0], 0, sizeof live[0]);
    for (int t = 0;; t++) {
        const int last = t + 1 >= T;
        out->rows[t] = nlive;
        for (int i = 0; i < nlive; i++) {
            float lg[MAXV];
            out->hsum[t] += prefix_hash(w, n, live[i].tok, live[i].len);
            world_dist(w, n, live[i].tok, live[i].len, lg, att[i]);
            if (t < o->min_length) lg[eos] = -INFINITY;
            log_softmax_forward(lsm[i], lg, 1, V);
            for (int v = 0; v < V; v++) cand[i * V + v] = (cand_t){live[i].score + lsm[i][v], i * V + v};
        }
        qsort(cand, (size_t)(nlive * V), sizeof *cand, cmp_cand);
        const int K = common ? 2 * B : B, kc = K < nlive * V ? K : nlive * V, take = B < kc ? B : kc;
        int sec = common ? B : kc, nnext = 0, eos_taken[MAXB] = {0};
        for (int k = 0; k < take; k++) {
            cand_t c = cand[k];
            if (c.v == -INFINITY) break;
            out->finite[t]++;
            int i = c.idx / V, v = c.idx % V;
            if (v == eos || last) {
                rhyp_t h = {{0}, live[i].len, v == eos, 0, c.v};
                memcpy(h.tok, live[i].tok, sizeof h.tok);
                if (v != eos) h.tok[h.L++] = v;
                float cv[MAXS];
                for (int j = 0; j < S; j++) cv[j] = live[i].cov[j] + att[i][j];
                h.score = c.v / lp_f(t + 1, r);
                if (use_cov) h.score += covpen_f(cv, S, r.beta);
                rlist_push(&fin, &h);
                registered++;
                if (v == eos) {
                    eos_fin = 1;
                    eos_taken[i] = 1;
                    out->k_eos[t]++;
                    if (k == 0) top_fin = 1;
                }
                if (last) continue;
                int j = sec;
                while (j < kc && (cand[j].idx % V == eos || cand[j].v == -INFINITY)) j++;
                if (j >= kc) continue;
                sec = j + 1;
                c = cand[j];
                i = c.idx / V, v = c.idx % V;
            }
            live_t *x = &next[nnext++];
            *x = live[i];
            x->tok[x->len++] = v;
            x->score = c.v;
            for (int j = 0; j < S; j++) x->cov[j] = live[i].cov[j] + att[i][j];
        }
        for (int i = 0; !common && i < nlive; i++) {
            float e = live[i].score + lsm[i][eos];
            if (eos_taken[i] || e == -INFINITY) continue;
            float cv[MAXS];
            for (int j = 0; j < S; j++) cv[j] = live[i].cov[j] + att[i][j];
            float sc = e / lp_f(t + 1, r);
            if (use_cov) sc += covpen_f(cv, S, r.beta);
            if (has_fallen && sc <= fallen.score) continue;
            memset(&fallen, 0, sizeof fallen);
            memcpy(fallen.tok, live[i].tok, sizeof fallen.tok);
            fallen.L = live[i].len;
            fallen.eos = 1;
            fallen.raw = e;
            fallen.score = sc;
            has_fallen = 1;
        }
        out->live_after[t] = nnext;
        int done = last || nnext == 0;
        if (!done && o->early_stop && no_penalty && top_fin && registered >= nhyp) done = 1;
        if (!done && o->early_stop && !no_penalty && registered >= B && registered >= nhyp) done = 1;
        if (!done && !use_cov && eos_fin && fin.n >= nhyp) {
            float best = -INFINITY;
            for (int i = 0; i < nnext; i++) best = next[i].score > best ? next[i].score : best;
            float bound = r.alpha == 0.0f ? best : best / lp_f(T, r);
            if (rlist_kth(&fin, nhyp) >= bound) done = 1;
        }
        if (done) {
            out->steps = t + 1;
            break;
        }
        memcpy(live, next, (size_t)nnext * sizeof *next);
        nlive = nnext;
    }
    /* results: the finished ones by score (stable), the backoff first when none ended with EOS */
    for (int i = 1; i < fin.n; i++)
        for (int j = i; j > 0 && fin.h[j].score > fin.h[j - 1].score; j--) {
            rhyp_t x = fin.h[j];
            fin.h[j] = fin.h[j - 1], fin.h[j - 1] = x;
        }
    if (!common && !eos_fin && has_fallen) out->res[out->nres++] = fallen, out->backoff = 1;
    for (int i = 0; i < fin.n && out->nres < nhyp && out->nres < MAXHYP; i++) out->res[out->nres++] = fin.h[i];
    free(fin.h);
}

/* ------------------------------------------------------------ checks shared by the sections */

static search_options_t make_opts(const world_t *w, int B, int nhyp, rule_t r, tern_eos_policy_t pol, int early,
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
    o.bos = w->bos;
    o.eos = w->eos;
    return o;
}

static int same_tokens(const int *a, int la, const int *b, int lb) {
    return la == lb && (la == 0 || memcmp(a, b, (size_t)la * sizeof(int)) == 0);
}

static char ctx[256]; /* the case being checked, printed with a failure */

/* how often the random cases met what they are meant to test */
static int stat_paper_slots;  /* paper-policy steps where some EOS candidate took a slot */
static int stat_backoff;      /* results led by the paper backoff */
static int stat_staggered;    /* batches whose sentences finished at different steps */
static int stat_nbest;        /* exhaustive n-best lists (n > 1) compared with the brute force */
static int stat_early_better; /* sentences where early_stop = 0 found a strictly better best */

/* properties every returned list must have: scores recomputed, min length, sorted (the paper
 * backoff aside), distinct, each hypothesis evaluated by the model along its own prefix */
static void check_hyps(const world_t *w, int n, int T, rule_t r, const search_options_t *o, const search_result_t *res,
                       const mock_t *m) {
    int nhyp = o->num_hypotheses < 1 ? 1 : o->num_hypotheses;
    CHECK_MSG(res->n >= 1 && res->n <= nhyp, "%s: %d hypotheses", ctx, res->n);
    int eos_count = 0;
    for (int i = 0; i < res->n; i++) eos_count += res->hyps[i].length < T;
    for (int i = 0; i < res->n; i++) {
        const hypothesis_t *h = &res->hyps[i];
        CHECK_MSG(h->length >= 0 && h->length <= T && h->length <= MAXT, "%s: length %d", ctx, h->length);
        if (h->length < 0 || h->length > T || h->length > MAXT) return;
        int eos_end = h->length < T;
        for (int k = 0; k < h->length; k++) CHECK_MSG(h->tokens[k] != w->eos && h->tokens[k] >= 0 && h->tokens[k] < w->V,
                                                    "%s: token %d", ctx, h->tokens[k]);
        double raw, sc = seq_score(w, n, h->tokens, h->length, eos_end, r, o->min_length, &raw);
        CHECK_MSG(fabs(h->score - sc) <= 1e-5 && fabs(h->raw - raw) <= 1e-5, "%s: hyp %d score %.7g raw %.7g, recomputed %.7g %.7g",
                  ctx, i, h->score, h->raw, sc, raw);
        if (eos_end) CHECK_MSG(h->length >= o->min_length, "%s: length %d < min length %d", ctx, h->length, o->min_length);
        if (m) {
            int plen = eos_end ? h->length : h->length - 1;
            CHECK_MSG(seen_has(m, prefix_hash(w, n, h->tokens, plen)), "%s: hyp %d never evaluated by the model", ctx, i);
        }
        for (int j = 0; j < i; j++)
            CHECK_MSG(!same_tokens(h->tokens, h->length, res->hyps[j].tokens, res->hyps[j].length), "%s: hyps %d, %d equal", ctx, j, i);
        /* the paper backoff (an EOS hypothesis first, all others cut at T) may precede better ones */
        int backoff = o->eos_policy == TERN_EOS_PAPER && i == 1 && eos_count == 1 && res->hyps[0].length < T;
        if (i > 0 && !backoff) CHECK_MSG(res->hyps[i - 1].score >= h->score, "%s: n-best not sorted at %d", ctx, i);
    }
}

/* got = expected (brute force, sorted) up to ties: scores position by position, tokens where the
 * expected score is apart from its neighbours by more than 1e-4 */
static void check_equals_brute(const search_result_t *got, const blist_t *exp, int npos) {
    int n = npos < exp->n ? npos : exp->n;
    CHECK_MSG(got->n >= n, "%s: %d hypotheses, expected %d", ctx, got->n, n);
    if (got->n < n) n = got->n;
    for (int i = 0; i < n; i++) {
        const bhyp_t *e = &exp->h[i];
        const hypothesis_t *h = &got->hyps[i];
        CHECK_MSG(fabs(h->score - e->score) <= 1e-5, "%s: hyp %d score %.7g, brute force %.7g", ctx, i, h->score, e->score);
        int apart = (i == 0 || exp->h[i - 1].score - e->score > 1e-4) && (i + 1 >= exp->n || e->score - exp->h[i + 1].score > 1e-4);
        if (apart)
            CHECK_MSG(same_tokens(h->tokens, h->length, e->tok, e->L), "%s: hyp %d tokens differ from the brute force", ctx, i);
    }
}

static search_result_t *results_new(int N) {
    search_result_t *r = calloc((size_t)N, sizeof *r);
    if (!r) exit(2);
    return r;
}
static void results_free(search_result_t *r, int N) {
    for (int n = 0; n < N; n++) search_result_free(&r[n]);
    free(r);
}

/* ------------------------------------------------------------ 1. greedy */

static void test_greedy(int seeds) {
    for (int seed = 0; seed < seeds; seed++) {
        rng_t g = {0x6000 + (uint64_t)seed};
        int N = rng_int(&g, 1, 5), V = rng_int(&g, 4, 7), max_len[MAXN];
        world_t w;
        world_random(&w, &g, V, N);
        for (int n = 0; n < N; n++) max_len[n] = rng_int(&g, 1, 7);
        rule_t r = RULES[seed % NRULES];
        int min_length = rng_int(&g, 0, 3);
        /* expected: the argmax path of each sentence */
        int ytok[MAXN][MAXT], ylen[MAXN], yeos[MAXN], steps[MAXN], maxsteps = 0;
        for (int n = 0; n < N; n++) {
            ylen[n] = yeos[n] = 0;
            for (int t = 0; t < max_len[n]; t++) {
                float lg[MAXV];
                world_dist(&w, n, ytok[n], t, lg, NULL);
                if (t < min_length) lg[w.eos] = -INFINITY;
                int best = 0;
                for (int v = 1; v < V; v++) best = lg[v] > lg[best] ? v : best;
                if (best == w.eos) {
                    yeos[n] = 1;
                    break;
                }
                ytok[n][ylen[n]++] = best;
            }
            steps[n] = ylen[n] + yeos[n];
            maxsteps = steps[n] > maxsteps ? steps[n] : maxsteps;
        }
        for (int k = 3; k >= 0; k--) {
            /* need_scores 1/0, without and with the model's argmax-only shortcut (set_argmax_only):
             * the same tokens; the shortcut is taken from step min_length when no score is needed */
            int need = k >> 1, hook = k & 1;
            search_options_t o = make_opts(&w, 1, 1, r, TERN_EOS_COMMON, 1, min_length);
            o.need_scores = need;
            mock_t m;
            decoder_iface_t dec;
            mock_init(&m, &dec, &w, N, NULL, 1);
            if (hook) dec.set_argmax_only = mock_set_argmax_only;
            search_result_t *res = results_new(N);
            tern_status_t st = greedy_search(&dec, N, max_len, &o, res);
            snprintf(ctx, sizeof ctx, "greedy seed %d need_scores %d argmax hook %d", seed, need, hook);
            CHECK_EQ_INT(st, TERN_OK);
            CHECK_EQ_INT(m.violations, 0);
            int on_at = hook && !need && maxsteps > min_length ? min_length : -1;
            CHECK_MSG(m.argmax_on_at == on_at, "%s: argmax only from step %d, expected %d", ctx, m.argmax_on_at, on_at);
            CHECK_MSG(m.argmax_on == 0 && m.argmax_calls == (on_at >= 0 ? 2 : 0), "%s: argmax only left on (%d calls)",
                      ctx, m.argmax_calls);
            CHECK_EQ_INT(m.nsteps, maxsteps);
            for (int n = 0; st == TERN_OK && n < N; n++) {
                CHECK_EQ_INT(res[n].n, 1);
                if (res[n].n != 1) continue;
                const hypothesis_t *h = &res[n].hyps[0];
                CHECK_MSG(same_tokens(h->tokens, h->length, ytok[n], ylen[n]), "%s: sentence %d tokens", ctx, n);
                for (int t = 0; t < MAXSTEPS; t++)
                    CHECK_MSG(m.rows[t][n] == (t < steps[n]), "%s: sentence %d has %d rows at step %d", ctx, n, m.rows[t][n], t);
                if (need) {
                    double raw, sc = seq_score(&w, n, ytok[n], ylen[n], yeos[n], r, min_length, &raw);
                    CHECK_MSG(fabs(h->raw - raw) <= 1e-5 && fabs(h->score - sc) <= 1e-5,
                              "%s: sentence %d: score %.7g raw %.7g, recomputed %.7g %.7g", ctx, n, h->score, h->raw, sc, raw);
                }
                if (yeos[n]) CHECK_MSG(h->length >= min_length, "%s: sentence %d shorter than min length", ctx, n);
            }
            results_free(res, N);
            mock_free(&m);
        }
    }
}

/* Greedy search with forced prefixes (NLLB's target language code, --target-prefix): the prefix
 * processor acts on log-probabilities up to the longest prefix's step, and without scores greedy
 * reads the logits' argmax alone from the step after it (set_argmax_only; none of the softmaxes of
 * the later steps). Tokens: the prefix, then the argmax path; the same with scores (every step
 * normalized) and without the hook. */
static void test_greedy_prefix(int seeds) {
    for (int seed = 0; seed < seeds; seed++) {
        rng_t g = {0x7100 + (uint64_t)seed};
        int N = rng_int(&g, 1, 5), V = rng_int(&g, 4, 7), max_len[MAXN];
        world_t w;
        world_random(&w, &g, V, N);
        int min_length = rng_int(&g, 0, 2), plen_max = 0;
        int prefix[MAXN][MAXT];
        search_sentence_t sd[MAXN];
        const search_sentence_t *sdp[MAXN];
        memset(sd, 0, sizeof sd);
        for (int n = 0; n < N; n++) {
            max_len[n] = rng_int(&g, 3, 7);
            int L = rng_int(&g, 0, 2); /* some sentences without a prefix */
            for (int i = 0; i < L; i++) {
                do prefix[n][i] = rng_int(&g, 0, V - 1);
                while (prefix[n][i] == w.eos);
            }
            sd[n].prefix = L ? prefix[n] : NULL;
            sd[n].prefix_len = L;
            sd[n].prefix_plain = 1;
            sdp[n] = &sd[n];
            plen_max = L > plen_max ? L : plen_max;
        }
        rule_t r = RULES[seed % NRULES];
        search_result_t *ref = NULL;
        for (int k = 0; k < 3; k++) { /* 0: scores (the reference), 1: no scores + hook, 2: no scores */
            search_procs_t *P = NULL;
            CHECK(search_procs_bind(&P, NULL, sdp, N, V, w.eos, 1, 0.0f) == TERN_OK);
            search_options_t o = make_opts(&w, 1, 1, r, TERN_EOS_COMMON, 1, min_length);
            o.need_scores = k == 0;
            o.procs = search_procs_list(P, &o.num_procs);
            mock_t m;
            decoder_iface_t dec;
            mock_init(&m, &dec, &w, N, NULL, 1);
            if (k == 1) dec.set_argmax_only = mock_set_argmax_only;
            search_result_t *res = results_new(N);
            snprintf(ctx, sizeof ctx, "greedy prefix seed %d mode %d (longest prefix %d, min length %d)", seed, k,
                     plen_max, min_length);
            CHECK_EQ_INT(greedy_search(&dec, N, max_len, &o, res), TERN_OK);
            CHECK_EQ_INT(m.violations, 0);
            if (k == 1) { /* the argmax alone from the step after every prefix (and the minimum length) */
                int from = plen_max > 0 ? plen_max + 1 : 0;
                from = min_length > from ? min_length : from;
                int on_at = from < m.nsteps ? from : -1;
                CHECK_MSG(m.argmax_on_at == on_at, "%s: argmax only from step %d, expected %d", ctx, m.argmax_on_at,
                          on_at);
            }
            for (int n = 0; n < N; n++) {
                CHECK_EQ_INT(res[n].n, 1);
                if (res[n].n != 1) continue;
                const hypothesis_t *h = &res[n].hyps[0];
                CHECK_MSG(h->length >= sd[n].prefix_len && !memcmp(h->tokens, prefix[n], (size_t)sd[n].prefix_len *
                                                                                             sizeof(int)),
                          "%s: sentence %d does not start with its prefix", ctx, n);
                if (ref) CHECK_MSG(same_tokens(h->tokens, h->length, ref[n].hyps[0].tokens, ref[n].hyps[0].length),
                                   "%s: sentence %d: other tokens than with scores", ctx, n);
            }
            if (k == 0) ref = res;
            else results_free(res, N);
            mock_free(&m);
            search_procs_free(P);
        }
        results_free(ref, N);
    }
}

/* ------------------------------------------------------------ 2 and 6. exhaustive beams */

static void test_exhaustive(int seeds) {
    static const int VT[][2] = {{4, 2}, {4, 3}, {5, 2}, {5, 3}, {6, 2}, {7, 2}, {4, 4}, {3, 4}};
    blist_t bf[MAXN] = {{0}};
    for (int seed = 0; seed < seeds; seed++) {
        rng_t g = {0x7000 + (uint64_t)seed};
        int pick = rng_int(&g, 0, (int)(sizeof VT / sizeof VT[0]) - 1);
        int V = VT[pick][0], Tmax = VT[pick][1], B = 1;
        for (int i = 0; i < Tmax; i++) B *= V; /* >= (V-1)^(T-1) V: every candidate fits */
        int N = rng_int(&g, 1, 5), max_len[MAXN];
        world_t w;
        world_random(&w, &g, V, N);
        for (int n = 0; n < N; n++) max_len[n] = rng_int(&g, 1, Tmax);
        int min_length = rng_int(&g, 0, 4) < 3 ? 0 : rng_int(&g, 1, Tmax);
        int nhyp = rng_int(&g, 1, 5);
        for (int ri = 0; ri < NRULES; ri++) {
            rule_t r = RULES[ri];
            for (int n = 0; n < N; n++) brute_force(&w, n, max_len[n], r, min_length, &bf[n]);
            float best_es[2][MAXN];
            for (int pol = 0; pol < 2; pol++)
                for (int early = 0; early < 2; early++) {
                    search_options_t o = make_opts(&w, B, nhyp, r, pol ? TERN_EOS_PAPER : TERN_EOS_COMMON, early, min_length);
                    mock_t m;
                    decoder_iface_t dec;
                    mock_init(&m, &dec, &w, N, NULL, B);
                    search_result_t *res = results_new(N);
                    tern_status_t st = beam_search(&dec, N, max_len, &o, res);
                    snprintf(ctx, sizeof ctx, "exhaustive seed %d V %d B %d rule %d policy %d early %d nhyp %d min %d",
                             seed, V, B, ri, pol, early, nhyp, min_length);
                    CHECK_EQ_INT(st, TERN_OK);
                    CHECK_EQ_INT(m.violations, 0);
                    for (int n = 0; st == TERN_OK && n < N; n++) {
                        char base[200];
                        snprintf(base, sizeof base, "%s", ctx);
                        snprintf(ctx, sizeof ctx, "%s sentence %d T %d", base, n, max_len[n]);
                        check_hyps(&w, n, max_len[n], r, &o, &res[n], &m);
                        /* with early stop and no penalty (CTranslate2's exit) only the best is exact */
                        int exact_n = early && r.alpha == 0.0f && r.beta == 0.0f ? 1 : nhyp;
                        if (exact_n > 1) CHECK_EQ_INT(res[n].n, nhyp < bf[n].n ? nhyp : bf[n].n);
                        stat_nbest += exact_n > 1 && bf[n].n > 1;
                        check_equals_brute(&res[n], &bf[n], exact_n);
                        best_es[early][n] = res[n].n ? res[n].hyps[0].score : -INFINITY;
                        snprintf(ctx, sizeof ctx, "%s", base);
                    }
                    results_free(res, N);
                    mock_free(&m);
                    if (early == 1)
                        for (int n = 0; st == TERN_OK && n < N; n++)
                            CHECK_MSG(best_es[0][n] >= best_es[1][n], "%s: sentence %d: early stop off %.7g < on %.7g", ctx, n,
                                      best_es[0][n], best_es[1][n]);
                }
        }
    }
    for (int n = 0; n < MAXN; n++) free(bf[n].h);
}

/* ------------------------------------------------------------ 3, 4, 5, 6. small beams */

static void compare_to_ref(const search_result_t *got, const ref_t *ref) {
    CHECK_MSG(got->n == ref->nres, "%s: %d hypotheses, reference %d", ctx, got->n, ref->nres);
    for (int i = 0; i < got->n && i < ref->nres; i++) {
        const hypothesis_t *h = &got->hyps[i];
        const rhyp_t *e = &ref->res[i];
        CHECK_MSG(same_tokens(h->tokens, h->length, e->tok, e->L), "%s: hyp %d tokens differ from the reference", ctx, i);
        CHECK_MSG(fabsf(h->score - e->score) <= 1e-6f && fabsf(h->raw - e->raw) <= 1e-6f,
                  "%s: hyp %d score %.9g raw %.9g, reference %.9g %.9g", ctx, i, h->score, h->raw, e->score, e->raw);
    }
}

static void test_small_beams(int seeds) {
    for (int seed = 0; seed < seeds; seed++) {
        rng_t g = {0x8000 + (uint64_t)seed};
        int N = rng_int(&g, 1, 5), V = rng_int(&g, 4, 7), max_len[MAXN];
        world_t w;
        world_random(&w, &g, V, N);
        for (int n = 0; n < N; n++) max_len[n] = rng_int(&g, 1, 7);
        int B = rng_int(&g, 1, 6), nhyp = rng_int(&g, 1, B + 2);
        int min_length = rng_int(&g, 0, 2) ? 0 : rng_int(&g, 1, 3);
        rule_t r = RULES[rng_int(&g, 0, NRULES - 1)];
        tern_eos_policy_t pol = rng_int(&g, 0, 1) ? TERN_EOS_PAPER : TERN_EOS_COMMON;
        float best_es[2][MAXN];
        for (int early = 1; early >= 0; early--) {
            search_options_t o = make_opts(&w, B, nhyp, r, pol, early, min_length);
            mock_t m;
            decoder_iface_t dec;
            mock_init(&m, &dec, &w, N, NULL, B);
            search_result_t *res = results_new(N);
            tern_status_t st = beam_search(&dec, N, max_len, &o, res);
            snprintf(ctx, sizeof ctx, "beam seed %d V %d B %d nhyp %d rule (%g,%d,%g) policy %d early %d min %d", seed, V, B,
                     nhyp, r.alpha, r.norm, r.beta, pol, early, min_length);
            CHECK_EQ_INT(st, TERN_OK);
            CHECK_EQ_INT(m.violations, 0);
            int maxsteps = 0, minsteps = MAXSTEPS;
            for (int n = 0; st == TERN_OK && n < N; n++) {
                char base[200];
                snprintf(base, sizeof base, "%s", ctx);
                snprintf(ctx, sizeof ctx, "%s sentence %d T %d", base, n, max_len[n]);
                check_hyps(&w, n, max_len[n], r, &o, &res[n], &m);
                best_es[early][n] = res[n].n ? res[n].hyps[0].score : -INFINITY;
                /* the reference: same results, same rows at every step, gone once finished */
                ref_t ref;
                ref_beam(&w, n, max_len[n], &o, r, &ref);
                compare_to_ref(&res[n], &ref);
                maxsteps = ref.steps > maxsteps ? ref.steps : maxsteps;
                minsteps = ref.steps < minsteps ? ref.steps : minsteps;
                stat_backoff += ref.backoff;
                for (int t = 0; t < MAXSTEPS; t++) {
                    int want = t < ref.steps ? ref.rows[t] : 0;
                    CHECK_MSG(m.rows[t][n] == want, "%s: step %d: %d rows, reference %d", ctx, t, m.rows[t][n], want);
                    if (t < ref.steps && m.rows[t][n] == want)
                        CHECK_MSG(m.hsum[t][n] == ref.hsum[t], "%s: step %d: rows hold other prefixes than the reference's", ctx, t);
                }
                /* paper policy: every EOS candidate among the top B took a slot: the rows after
                 * the step are the finite candidates among the top B (B unless the beam is not
                 * full or min length removed EOS) less the k EOS ones */
                for (int t = 0; pol == TERN_EOS_PAPER && t + 1 < ref.steps; t++) {
                    int top = B < ref.rows[t] * V ? B : ref.rows[t] * V;
                    CHECK_MSG(ref.finite[t] == top || t < min_length, "%s: step %d: %d finite candidates", ctx, t, ref.finite[t]);
                    CHECK_MSG(m.rows[t + 1][n] == ref.finite[t] - ref.k_eos[t], "%s: step %d: %d rows after %d EOS among the top %d",
                              ctx, t, m.rows[t + 1][n], ref.k_eos[t], ref.finite[t]);
                    if (ref.k_eos[t] > 0) stat_paper_slots++;
                }
                snprintf(ctx, sizeof ctx, "%s", base);
            }
            CHECK_EQ_INT(m.nsteps, maxsteps);
            stat_staggered += minsteps < maxsteps;
            /* batching changes nothing: each sentence alone gives bit-identical results and rows */
            for (int n = 0; st == TERN_OK && n < N && N > 1; n++) {
                mock_t m1;
                decoder_iface_t dec1;
                mock_init(&m1, &dec1, &w, 1, &n, B);
                search_result_t *r1 = results_new(1);
                tern_status_t st1 = beam_search(&dec1, 1, &max_len[n], &o, r1);
                CHECK_EQ_INT(st1, TERN_OK);
                CHECK_EQ_INT(m1.violations, 0);
                CHECK_MSG(r1[0].n == res[n].n, "%s: sentence %d alone: %d hypotheses, in the batch %d", ctx, n, r1[0].n, res[n].n);
                for (int i = 0; i < r1[0].n && i < res[n].n; i++) {
                    const hypothesis_t *a = &r1[0].hyps[i], *b = &res[n].hyps[i];
                    CHECK_MSG(same_tokens(a->tokens, a->length, b->tokens, b->length) && a->score == b->score && a->raw == b->raw,
                              "%s: sentence %d alone: hyp %d differs from the batch's", ctx, n, i);
                }
                for (int t = 0; t < MAXSTEPS; t++)
                    CHECK_MSG(m1.rows[t][0] == m.rows[t][n] && m1.hsum[t][0] == m.hsum[t][n],
                              "%s: sentence %d alone: other rows at step %d", ctx, n, t);
                results_free(r1, 1);
                mock_free(&m1);
            }
            results_free(res, N);
            mock_free(&m);
        }
        /* 6: stopping early never gives a better best hypothesis */
        for (int n = 0; n < N; n++) stat_early_better += best_es[0][n] > best_es[1][n];
        for (int n = 0; n < N; n++)
            CHECK_MSG(best_es[0][n] >= best_es[1][n], "beam seed %d sentence %d: early stop off %.7g < on %.7g", seed, n,
                      best_es[0][n], best_es[1][n]);
    }
}

/* ------------------------------------------------------------ crafted cases */

/* tokens: 0 BOS, 1 EOS, 2 a, 3 b (4 c); logits = log p, so log-softmax = log p (to rounding) */
enum { T_BOS = 0, T_EOS = 1, T_A = 2, T_B = 3, T_C = 4 };

static void set_probs(const world_t *w, float *logits, float *attn, const double *p) {
    for (int v = 0; v < w->V; v++) logits[v] = p[v] > 0 ? (float)log(p[v]) : -INFINITY;
    if (attn)
        for (int j = 0; j < w->S; j++) attn[j] = 1.0f / (float)w->S;
}

static int is_prefix(const int *p, int len, int n, ...) {
    if (len != n) return 0;
    va_list ap;
    va_start(ap, n);
    int ok = 1;
    for (int i = 0; i < n; i++) ok &= p[i] == va_arg(ap, int);
    va_end(ap);
    return ok;
}

/* the backoff: no EOS in the top 2 at any step; [b]+EOS (0.35 * 0.2 = 0.07) falls out at step 1 */
static void dist_backoff(const world_t *w, int n, const int *p, int len, float *logits, float *attn) {
    /*                          BOS   EOS   a     b */
    static const double s0[4] = {0.19, 0.01, 0.45, 0.35};
    static const double sa[4] = {0.04, 0.06, 0.50, 0.40};
    static const double sb[4] = {0.05, 0.20, 0.40, 0.35};
    static const double saa[4] = {0.05, 0.05, 0.60, 0.30};
    static const double sab[4] = {0.04, 0.06, 0.50, 0.40};
    static const double other[4] = {0.10, 0.20, 0.30, 0.40};
    const double *q = len == 0 ? s0 : is_prefix(p, len, 1, T_A) ? sa : is_prefix(p, len, 1, T_B) ? sb
                    : is_prefix(p, len, 2, T_A, T_A) ? saa : is_prefix(p, len, 2, T_A, T_B) ? sab : other;
    set_probs(w, logits, attn, q);
}

/* an EOS candidate takes a slot: step 0 top 3 = EOS a b; step 1 top 3 = aE bE aa */
static void dist_slot(const world_t *w, int n, const int *p, int len, float *logits, float *attn) {
    /*                          BOS   EOS   a     b     c */
    static const double s0[5] = {0.04, 0.40, 0.30, 0.20, 0.06};
    static const double sa[5] = {0.05, 0.50, 0.25, 0.15, 0.05};
    static const double sb[5] = {0.05, 0.60, 0.20, 0.10, 0.05};
    static const double other[5] = {0.05, 0.70, 0.12, 0.08, 0.05};
    const double *q = len == 0 ? s0 : is_prefix(p, len, 1, T_A) ? sa : is_prefix(p, len, 1, T_B) ? sb : other;
    set_probs(w, logits, attn, q);
}

/* min length: EOS has 0.5 at step 0 */
static void dist_minlen(const world_t *w, int n, const int *p, int len, float *logits, float *attn) {
    static const double s0[4] = {0.10, 0.50, 0.30, 0.10};
    static const double sa[4] = {0.10, 0.70, 0.15, 0.05};
    static const double other[4] = {0.10, 0.40, 0.30, 0.20};
    const double *q = len == 0 ? s0 : is_prefix(p, len, 1, T_A) ? sa : other;
    set_probs(w, logits, attn, q);
}

/* exactly tied finished scores: a and b have the same logits, and so do [a] and [b] */
static void dist_tie(const world_t *w, int n, const int *p, int len, float *logits, float *attn) {
    static const double s0[4] = {0.05, 0.05, 0.45, 0.45};
    static const double s1[4] = {0.03, 0.90, 0.05, 0.02};
    static const double other[4] = {0.25, 0.25, 0.25, 0.25};
    const double *q = len == 0 ? s0 : len == 1 && p[0] != T_BOS ? s1 : other;
    set_probs(w, logits, attn, q);
}

static world_t crafted_world(int V, dist_fn_t fn) {
    world_t w;
    memset(&w, 0, sizeof w);
    w.V = V;
    w.S = 2;
    w.src_len[0] = 2;
    w.bos = T_BOS;
    w.eos = T_EOS;
    w.fn = fn;
    return w;
}

/* runs one sentence; returns its result (caller frees), the rows per step and the step count */
static search_result_t *run_one(const world_t *w, int T, const search_options_t *o, int rows[MAXSTEPS], int *nsteps) {
    mock_t m;
    decoder_iface_t dec;
    mock_init(&m, &dec, w, 1, NULL, o->beam_size);
    search_result_t *res = results_new(1);
    tern_status_t st = beam_search(&dec, 1, &T, o, res);
    CHECK_EQ_INT(st, TERN_OK);
    CHECK_EQ_INT(m.violations, 0);
    for (int t = 0; t < MAXSTEPS; t++) rows[t] = m.rows[t][0];
    *nsteps = m.nsteps;
    mock_free(&m);
    return res;
}

static void test_crafted(void) {
    int rows[MAXSTEPS], nsteps;
    const rule_t none = RULES[0], plain = RULES[1];

    /* 4. backoff: paper policy, B 2, T 3, three hypotheses: [b]+EOS first, then the truncated
     * a a a (0.45 * 0.5 * 0.6 = 0.135) and a b a (0.45 * 0.4 * 0.5 = 0.09) */
    world_t w = crafted_world(4, dist_backoff);
    search_options_t o = make_opts(&w, 2, 3, none, TERN_EOS_PAPER, 1, 0);
    search_result_t *res = run_one(&w, 3, &o, rows, &nsteps);
    snprintf(ctx, sizeof ctx, "crafted backoff");
    CHECK_EQ_INT(res[0].n, 3);
    if (res[0].n == 3) {
        const int y0[] = {T_B}, y1[] = {T_A, T_A, T_A}, y2[] = {T_A, T_B, T_A};
        CHECK(same_tokens(res[0].hyps[0].tokens, res[0].hyps[0].length, y0, 1));
        CHECK_NEAR(res[0].hyps[0].score, log(0.07), 1e-6, 0);
        CHECK_NEAR(res[0].hyps[0].raw, log(0.07), 1e-6, 0);
        CHECK(same_tokens(res[0].hyps[1].tokens, res[0].hyps[1].length, y1, 3));
        CHECK_NEAR(res[0].hyps[1].score, log(0.135), 1e-6, 0);
        CHECK(same_tokens(res[0].hyps[2].tokens, res[0].hyps[2].length, y2, 3));
        CHECK_NEAR(res[0].hyps[2].score, log(0.09), 1e-6, 0);
    }
    CHECK_EQ_INT(nsteps, 3);
    CHECK(rows[0] == 1 && rows[1] == 2 && rows[2] == 2);
    results_free(res, 1);
    /* the same under the common policy: no backoff, a a a first */
    o.eos_policy = TERN_EOS_COMMON;
    res = run_one(&w, 3, &o, rows, &nsteps);
    CHECK(res[0].n >= 1 && res[0].hyps[0].length == 3 && res[0].hyps[0].tokens[0] == T_A && res[0].hyps[0].tokens[2] == T_A);
    if (res[0].n >= 1) CHECK_NEAR(res[0].hyps[0].score, log(0.135), 1e-6, 0);
    results_free(res, 1);
    /* with one hypothesis, still the backoff */
    o = make_opts(&w, 2, 1, none, TERN_EOS_PAPER, 1, 0);
    res = run_one(&w, 3, &o, rows, &nsteps);
    CHECK(res[0].n == 1 && res[0].hyps[0].length == 1 && res[0].hyps[0].tokens[0] == T_B);
    results_free(res, 1);

    /* 4. an EOS candidate takes a slot: paper, B 3, plain |Y|, no early stop, T 4.
     * step 0: top 3 = EOS (0.4), a, b -> 2 rows; step 1: top 3 = aE (0.15), bE (0.12), aa
     * (0.075) -> 1 row; step 2: top 3 = aaE, aaa, aab -> the bound log(0.009) / 4 < log 0.4 stops.
     * The common policy keeps 3 rows after step 0 (c replaces EOS). */
    w = crafted_world(5, dist_slot);
    o = make_opts(&w, 3, 1, plain, TERN_EOS_PAPER, 0, 0);
    res = run_one(&w, 4, &o, rows, &nsteps);
    snprintf(ctx, sizeof ctx, "crafted slot");
    CHECK_EQ_INT(nsteps, 3);
    CHECK(rows[0] == 1 && rows[1] == 2 && rows[2] == 1 && rows[3] == 0);
    CHECK(res[0].n == 1 && res[0].hyps[0].length == 0);
    if (res[0].n == 1) CHECK_NEAR(res[0].hyps[0].score, log(0.4), 1e-6, 0);
    results_free(res, 1);
    o.eos_policy = TERN_EOS_COMMON;
    res = run_one(&w, 4, &o, rows, &nsteps);
    CHECK_EQ_INT(rows[1], 3);
    CHECK(res[0].n == 1 && res[0].hyps[0].length == 0);
    results_free(res, 1);

    /* 5. min length 1: EOS (0.5) removed at step 0, so a has 0.3 / 0.5; then EOS 0.7 */
    w = crafted_world(4, dist_minlen);
    o = make_opts(&w, 1, 1, none, TERN_EOS_COMMON, 1, 1);
    {
        mock_t m;
        decoder_iface_t dec;
        mock_init(&m, &dec, &w, 1, NULL, 1);
        search_result_t *g = results_new(1);
        int T = 5;
        CHECK_EQ_INT(greedy_search(&dec, 1, &T, &o, g), TERN_OK);
        CHECK_EQ_INT(m.violations, 0);
        CHECK(g[0].n == 1 && g[0].hyps[0].length == 1 && g[0].hyps[0].tokens[0] == T_A);
        if (g[0].n == 1) CHECK_NEAR(g[0].hyps[0].score, log(0.6) + log(0.7), 1e-6, 0);
        results_free(g, 1);
        mock_free(&m);
    }
    /* beam 2, min length 1: a E (0.6 * 0.7 = 0.42) best */
    o = make_opts(&w, 2, 1, none, TERN_EOS_COMMON, 1, 1);
    res = run_one(&w, 5, &o, rows, &nsteps);
    CHECK(res[0].n == 1 && res[0].hyps[0].length == 1 && res[0].hyps[0].tokens[0] == T_A);
    if (res[0].n == 1) CHECK_NEAR(res[0].hyps[0].score, log(0.42), 1e-6, 0);
    results_free(res, 1);

    /* 6. tied finished scores: aE and bE both 0.45 * 0.9 after step 1, above every live
     * hypothesis (<= 0.45 * 0.05): with 2 hypotheses and no early stop the search stops there */
    w = crafted_world(4, dist_tie);
    o = make_opts(&w, 2, 2, none, TERN_EOS_COMMON, 0, 0);
    res = run_one(&w, 6, &o, rows, &nsteps);
    snprintf(ctx, sizeof ctx, "crafted tie");
    CHECK_EQ_INT(nsteps, 2);
    CHECK(res[0].n == 2 && res[0].hyps[0].length == 1 && res[0].hyps[1].length == 1 &&
          res[0].hyps[0].score == res[0].hyps[1].score);
    if (res[0].n == 2) CHECK_NEAR(res[0].hyps[0].score, log(0.45 * 0.9), 1e-6, 0);
    results_free(res, 1);
}

/* ------------------------------------------------------------ 7. formulas */

static void test_formulas(void) {
    /* plain |Y|^alpha */
    CHECK_NEAR(search_length_penalty(5, 1.0f, TERN_LENPEN_PLAIN), 5.0, 0, 1e-7);
    CHECK_NEAR(search_length_penalty(3, 1.0f, TERN_LENPEN_PLAIN), 3.0, 0, 1e-7);
    CHECK_NEAR(search_length_penalty(5, 0.6f, TERN_LENPEN_PLAIN), 2.626527804403767, 0, 1e-6);   /* 5^0.6 */
    CHECK_NEAR(search_length_penalty(1, 0.6f, TERN_LENPEN_PLAIN), 1.0, 0, 1e-7);
    CHECK_NEAR(search_length_penalty(0, 1.0f, TERN_LENPEN_PLAIN), 0.0, 0, 0);                     /* CT2: 0 */
    /* GNMT ((5 + |Y|) / 6)^alpha */
    CHECK_NEAR(search_length_penalty(5, 0.6f, TERN_LENPEN_GNMT), 1.3586551826765378, 0, 1e-6);   /* (10/6)^0.6 */
    CHECK_NEAR(search_length_penalty(3, 0.6f, TERN_LENPEN_GNMT), 1.1884016386440022, 0, 1e-6);   /* (8/6)^0.6 */
    CHECK_NEAR(search_length_penalty(7, 1.0f, TERN_LENPEN_GNMT), 2.0, 0, 1e-7);                  /* 12/6 */
    CHECK_NEAR(search_length_penalty(1, 1.0f, TERN_LENPEN_GNMT), 1.0, 0, 1e-7);                  /* 6/6 */
    /* alpha 0: no normalization, either rule */
    CHECK_NEAR(search_length_penalty(9, 0.0f, TERN_LENPEN_PLAIN), 1.0, 0, 0);
    CHECK_NEAR(search_length_penalty(9, 0.0f, TERN_LENPEN_GNMT), 1.0, 0, 0);
    /* coverage: beta * sum_j log(min(c_j, 1)) over c_j > 0:
     * {0.5, 1.5, 0, 0.25}, 0.2 -> 0.2 (log 0.5 + log 1 + log 0.25) = -0.4158883083359672 */
    const float c1[] = {0.5f, 1.5f, 0.0f, 0.25f};
    CHECK_NEAR(search_coverage_penalty(c1, 4, 0.2f), -0.4158883083359672, 0, 1e-6);
    /* {0.1, 0.75}, 0.5 -> 0.5 (log 0.1 + log 0.75) = -1.2951335827229131 */
    const float c2[] = {0.1f, 0.75f};
    CHECK_NEAR(search_coverage_penalty(c2, 2, 0.5f), -1.2951335827229131, 0, 1e-6);
    /* all covered (>= 1) or absent: 0 */
    const float c3[] = {1.0f, 2.0f, 0.0f};
    CHECK_NEAR(search_coverage_penalty(c3, 3, 0.2f), 0.0, 0, 0);
    CHECK_NEAR(search_coverage_penalty(c1, 0, 0.2f), 0.0, 0, 0);
}

/* ------------------------------------------------------------ the mock catches a wrong search */

static void test_mock_catches(void) {
    world_t w;
    rng_t g = {0x9000};
    world_random(&w, &g, 5, 2);
    int tok[4];
    float logits[4 * MAXV];
    mock_t m;
    decoder_iface_t dec;
    /* a parent of another sentence */
    mock_init(&m, &dec, &w, 2, NULL, 2);
    tok[0] = tok[1] = w.bos;
    CHECK_EQ_INT(dec.step(dec.self, tok, 0, logits, NULL), TERN_OK);
    int parent[2] = {1, 1}, sent[2] = {0, 1};
    CHECK(dec.set_rows(dec.self, parent, sent, 2) != TERN_OK && m.violations == 1);
    mock_free(&m);
    /* EOS fed back; a skipped step */
    mock_init(&m, &dec, &w, 1, NULL, 2);
    tok[0] = w.bos;
    dec.step(dec.self, tok, 0, logits, NULL);
    tok[0] = w.eos;
    CHECK(dec.step(dec.self, tok, 1, logits, NULL) != TERN_OK && m.violations == 1);
    tok[0] = w.eos == 0 ? 1 : 0;
    CHECK(dec.step(dec.self, tok, 2, logits, NULL) != TERN_OK && m.violations == 2);
    mock_free(&m);
    /* two rows with one prefix; more rows than B */
    mock_init(&m, &dec, &w, 1, NULL, 2);
    tok[0] = w.bos;
    dec.step(dec.self, tok, 0, logits, NULL);
    int p2[2] = {0, 0}, s2[2] = {0, 0};
    CHECK_EQ_INT(dec.set_rows(dec.self, p2, s2, 2), TERN_OK);
    tok[0] = tok[1] = w.eos == 2 ? 3 : 2;
    dec.step(dec.self, tok, 1, logits, NULL);
    CHECK_EQ_INT(m.violations, 1);
    int p3[3] = {0, 1, 1}, s3[3] = {0, 0, 0};
    CHECK(dec.set_rows(dec.self, p3, s3, 3) != TERN_OK && m.violations == 2);
    mock_free(&m);
    fprintf(stderr, "(the mock model messages above were expected)\n");
}

/* ------------------------------------------------------------ 8. processors (procs.c, constraints.c)
 *
 * Exhaustive beams (every candidate fits) with a different requirement per sentence of a batch:
 *   prefix       the n-best = the brute-force sequences that start with the prefix, scored by the
 *                free part only (raw over the steps after the prefix, normalized by the whole
 *                length), EOS right after the prefix only where it is the step's best token;
 *   restrict     the n-best = the brute-force EOS-ended sequences of the given set, full scores;
 *   constraints  the n-best = the brute-force sequences (EOS-ended, or cut at the maximum length)
 *                that contain every phrase (1 or 2 phrases of 1 or 2 tokens, tokens distinct);
 *   none         the plain brute force.
 */

static int has_phrase(const int *y, int L, const int *p, int n) {
    for (int i = 0; i + n <= L; i++)
        if (!memcmp(y + i, p, (size_t)n * sizeof(int))) return 1;
    return 0;
}

static void test_processors(int seeds) {
    static const int VT[][2] = {{4, 2}, {4, 3}, {5, 2}, {5, 3}, {3, 4}};
    blist_t bf = {0}, want = {0};
    int cases[4] = {0};
    for (int seed = 0; seed < seeds; seed++) {
        rng_t g = {0x9000 + (uint64_t)seed};
        int pick = rng_int(&g, 0, (int)(sizeof VT / sizeof VT[0]) - 1);
        int V = VT[pick][0], T = VT[pick][1], B = 1;
        for (int i = 0; i < T; i++) B *= V;
        int N = rng_int(&g, 1, 4), max_len[MAXN];
        world_t w;
        world_random(&w, &g, V, N);
        for (int n = 0; n < N; n++) max_len[n] = T;
        int min_length = rng_int(&g, 0, 1), nhyp = rng_int(&g, 1, 3);
        rule_t r = RULES[rng_int(&g, 0, 1)];
        int words[MAXV], nw = 0;
        for (int v = 0; v < V; v++)
            if (v != w.eos) words[nw++] = v;
        search_sentence_t sd[MAXN];
        const search_sentence_t *sdp[MAXN];
        int mode[MAXN], prefix[MAXN][MAXT], phr[MAXN][2][2], plen[MAXN][2], np[MAXN];
        search_trie_t trie[MAXN];
        int set[MAXN][6][MAXT], setlen[MAXN][6], nset[MAXN];
        cons_sentence_t *cons[MAXN] = {0};
        memset(sd, 0, sizeof sd);
        for (int n = 0; n < N; n++) {
            sdp[n] = &sd[n];
            mode[n] = rng_int(&g, 0, 3);
            cases[mode[n]]++;
            if (mode[n] == 0) { /* prefix */
                int L = rng_int(&g, 1, T - 1);
                for (int i = 0; i < L; i++) prefix[n][i] = words[rng_int(&g, 0, nw - 1)];
                sd[n].prefix = prefix[n];
                sd[n].prefix_len = L;
            } else if (mode[n] == 1) { /* restrict */
                trie_init(&trie[n]);
                nset[n] = rng_int(&g, 1, 6);
                for (int k = 0; k < nset[n]; k++) {
                    setlen[n][k] = rng_int(&g, 1, T - 1);
                    for (int i = 0; i < setlen[n][k]; i++) set[n][k][i] = words[rng_int(&g, 0, nw - 1)];
                    trie_insert(&trie[n], set[n][k], setlen[n][k]);
                }
                sd[n].restrict_to = &trie[n];
            } else if (mode[n] == 2) { /* constraints: distinct tokens */
                int perm[MAXV];
                for (int i = 0; i < nw; i++) perm[i] = words[i];
                for (int i = nw - 1; i > 0; i--) {
                    int j = rng_int(&g, 0, i), x = perm[i];
                    perm[i] = perm[j], perm[j] = x;
                }
                np[n] = T - 1 >= 2 && nw >= 2 ? rng_int(&g, 1, 2) : 1;
                int used = 0, total = 0;
                const int *pp[2];
                for (int k = 0; k < np[n]; k++) {
                    plen[n][k] = total + 2 <= T - 1 && used + 2 <= nw ? rng_int(&g, 1, 2) : 1;
                    if (used + plen[n][k] > nw || total + plen[n][k] > T - 1) {
                        np[n] = k;
                        break;
                    }
                    for (int i = 0; i < plen[n][k]; i++) phr[n][k][i] = perm[used++];
                    total += plen[n][k];
                    pp[k] = phr[n][k];
                }
                cons_sentence_new(&cons[n], pp, plen[n], np[n]);
                sd[n].constraints = cons[n];
            }
        }
        search_procs_t *P = NULL;
        CHECK(search_procs_bind(&P, NULL, sdp, N, V, w.eos, B, 0.0f) == TERN_OK);
        search_options_t o = make_opts(&w, B, nhyp, r, TERN_EOS_COMMON, 0, min_length);
        o.procs = search_procs_list(P, &o.num_procs);
        mock_t m;
        decoder_iface_t dec;
        mock_init(&m, &dec, &w, N, NULL, B);
        search_result_t *res = results_new(N);
        CHECK(beam_search(&dec, N, max_len, &o, res) == TERN_OK);
        CHECK_EQ_INT(m.violations, 0);
        for (int n = 0; n < N; n++) {
            brute_force(&w, n, T, r, min_length, &bf);
            want.n = 0;
            for (int i = 0; i < bf.n; i++) {
                bhyp_t h = bf.h[i];
                int keep = 1;
                if (mode[n] == 0) {
                    int L = sd[n].prefix_len;
                    keep = h.L >= L && !memcmp(h.tok, prefix[n], (size_t)L * sizeof(int));
                    if (keep && h.L == L && h.eos) { /* ends right after the prefix: only as the best token */
                        double lp[MAXV];
                        float attn[MAXS];
                        logprobs_d(&w, n, h.tok, L, min_length, lp, attn);
                        for (int v = 0; v < V; v++) keep &= lp[v] <= lp[w.eos];
                    }
                    if (keep) { /* the score of the free part */
                        double raw = 0, lp[MAXV];
                        float attn[MAXS];
                        int steps = h.L + h.eos;
                        for (int t = L; t < steps; t++) {
                            logprobs_d(&w, n, h.tok, t, min_length, lp, attn);
                            raw += lp[t < h.L ? h.tok[t] : w.eos];
                        }
                        h.raw = raw;
                        h.score = raw / lp_d(steps, r);
                    }
                } else if (mode[n] == 1) {
                    keep = 0;
                    for (int k = 0; k < nset[n] && h.eos; k++) keep |= same_tokens(h.tok, h.L, set[n][k], setlen[n][k]);
                } else if (mode[n] == 2) {
                    for (int k = 0; k < np[n]; k++) keep &= has_phrase(h.tok, h.L, phr[n][k], plen[n][k]);
                }
                if (keep) blist_push(&want, &h);
            }
            qsort(want.h, (size_t)want.n, sizeof *want.h, cmp_bhyp);
            snprintf(ctx, sizeof ctx, "processors seed %d sentence %d mode %d V %d T %d nhyp %d rule %g min %d", seed,
                     n, mode[n], V, T, nhyp, (double)r.alpha, min_length);
            check_equals_brute(&res[n], &want, nhyp);
            if (mode[n] == 2)
                for (int i = 0; i < res[n].n && i < want.n; i++)
                    for (int k = 0; k < np[n]; k++)
                        CHECK_MSG(has_phrase(res[n].hyps[i].tokens, res[n].hyps[i].length, phr[n][k], plen[n][k]),
                                  "%s: hyp %d lacks constraint %d", ctx, i, k);
        }
        results_free(res, N);
        mock_free(&m);
        search_procs_free(P);
        for (int n = 0; n < N; n++) {
            if (mode[n] == 1) trie_free(&trie[n]);
            cons_sentence_free(cons[n]);
        }
    }
    free(bf.h), free(want.h);
    printf("processors: %d prefixes, %d restricted, %d constrained, %d free sentences\n", cases[0], cases[1],
           cases[2], cases[3]);
}

/* ------------------------------------------------------------ 9. pruning
 * An infinite width (1e30, through the pruning code) gives bit-identical results to no pruning;
 * finite widths and thresholds still return valid hypotheses (scores recomputed, sorted, distinct,
 * evaluated along their prefixes); the model rows of both are counted and printed. */
static void test_pruning(int seeds) {
    int pruned_rows = 0, plain_rows = 0;
    for (int seed = 0; seed < seeds; seed++) {
        rng_t g = {0xA000 + (uint64_t)seed};
        int V = rng_int(&g, 4, 7), N = rng_int(&g, 1, 4), B = rng_int(&g, 2, 6), T = rng_int(&g, 2, MAXT);
        world_t w;
        world_random(&w, &g, V, N);
        int max_len[MAXN];
        for (int n = 0; n < N; n++) max_len[n] = T;
        rule_t r = RULES[rng_int(&g, 0, NRULES - 1)];
        tern_eos_policy_t pol = rng_int(&g, 0, 1) ? TERN_EOS_PAPER : TERN_EOS_COMMON;
        search_options_t o = make_opts(&w, B, rng_int(&g, 1, B), r, pol, rng_int(&g, 0, 1), rng_int(&g, 0, 1));
        search_result_t *res[3];
        for (int k = 0; k < 3; k++) {
            search_options_t ok = o;
            if (k == 1) ok.prune_width = 1e30f;
            if (k == 2) {
                ok.prune_width = (float)(0.25 + 2.0 * rng_unit(&g));
                ok.prune_threshold = rng_int(&g, 0, 1) ? (float)(0.2 * rng_unit(&g)) : 0.0f;
            }
            mock_t m;
            decoder_iface_t dec;
            mock_init(&m, &dec, &w, N, NULL, B);
            res[k] = results_new(N);
            CHECK(beam_search(&dec, N, max_len, &ok, res[k]) == TERN_OK);
            CHECK_EQ_INT(m.violations, 0);
            int rows = 0;
            for (int t = 0; t < m.nsteps; t++)
                for (int n = 0; n < N; n++) rows += m.rows[t][n];
            if (k == 0) plain_rows += rows;
            if (k == 2) {
                pruned_rows += rows;
                for (int n = 0; n < N; n++) {
                    snprintf(ctx, sizeof ctx, "pruning seed %d sentence %d width %g threshold %g", seed, n,
                             (double)ok.prune_width, (double)ok.prune_threshold);
                    check_hyps(&w, n, T, r, &ok, &res[k][n], &m);
                }
            }
            mock_free(&m);
        }
        for (int n = 0; n < N; n++) {
            CHECK_EQ_INT(res[1][n].n, res[0][n].n);
            for (int i = 0; i < res[0][n].n && i < res[1][n].n; i++) {
                const hypothesis_t *a = &res[0][n].hyps[i], *b = &res[1][n].hyps[i];
                CHECK_MSG(same_tokens(a->tokens, a->length, b->tokens, b->length) && a->score == b->score &&
                              a->raw == b->raw,
                          "pruning seed %d sentence %d: infinite width changed hyp %d", seed, n, i);
            }
        }
        for (int k = 0; k < 3; k++) results_free(res[k], N);
    }
    printf("pruning: %d model rows without pruning, %d with finite widths\n", plain_rows, pruned_rows);
}

int main(void) {
    test_processors(300);
    test_pruning(400);
    test_formulas();
    test_mock_catches();
    test_crafted();
    test_greedy(400);
    test_greedy_prefix(300);
    test_exhaustive(120);
    test_small_beams(600);
    printf("cases met: %d paper steps with EOS taking a slot, %d backoff results, %d batches finishing at "
           "different steps, %d exhaustive n-best lists, %d sentences better without early stop\n",
           stat_paper_slots, stat_backoff, stat_staggered, stat_nbest, stat_early_better);
    return check_report("test_search");
}
