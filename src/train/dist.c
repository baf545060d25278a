/*
 * dist.c — data-parallel training over MPI (see dist.h).
 *
 * Legend: n_params the floats of the gradient buffer; a piece is one tensor of m->tensors (a
 * per-layer slice of a stacked field, or a whole tensor), contiguous in the buffer; a bucket is a
 * run of pieces in stage order, with a contiguous slice of the bucket buffer (n_params floats in
 * all) that its all-reduce works on in place.
 */
#include "train/dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef TERN_MPI
#include <mpi.h>
#endif

static int g_rank = 0, g_world = 1;
#ifdef TERN_MPI
static int g_inited = 0;
#endif

int dist_compiled(void) {
#ifdef TERN_MPI
    return 1;
#else
    return 0;
#endif
}

/* The world size mpirun announced in the environment (1 when not launched by it). */
static int env_world(void) {
    const char *names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"};
    for (int i = 0; i < 4; i++) {
        const char *v = getenv(names[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return 1;
}

tern_status_t dist_init(void) {
    int n = env_world();
#ifdef TERN_MPI
    if (n <= 1 && !getenv("PMIX_RANK")) return TERN_OK;
    int provided = 0;
    /* OpenMPI starts helper threads (PMIx, libevent) here: they inherit the caller's signal mask
     * (`tern train` blocks SIGINT and SIGTERM before it starts any thread: tools/cmd_train.c) */
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return tern_error(TERN_ERR_UNSUPPORTED, "MPI_Init_thread failed");
    g_inited = 1;
    if (provided < MPI_THREAD_FUNNELED)
        return tern_error(TERN_ERR_UNSUPPORTED, "the MPI library does not provide MPI_THREAD_FUNNELED");
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    return TERN_OK;
#else
    if (n > 1)
        return tern_error(TERN_ERR_UNSUPPORTED, "launched as one of %d processes (mpirun), but this tern was built "
                          "without MPI: install OpenMPI (scripts/setup.sh: libopenmpi-dev openmpi-bin) and rebuild "
                          "(make clean && make)", n);
    return TERN_OK;
#endif
}

void dist_finalize(void) {
#ifdef TERN_MPI
    if (g_inited) MPI_Finalize();
    g_inited = 0;
#endif
}

void dist_abort(int code) {
#ifdef TERN_MPI
    if (g_inited && g_world > 1) {
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code);
    }
#endif
    (void)code;
}

int dist_rank(void) { return g_rank; }
int dist_world(void) { return g_world; }

#ifdef TERN_MPI
/* Waits for requests: spins for 1 ms, then tests every 0.2 ms (ranks waiting for rank 0's
 * validation or for a slower rank then leave the cores to the others). */
static void polite_waitall(int n, MPI_Request *req) {
    double t0 = time_now();
    for (;;) {
        int done = 0;
        MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (done) return;
        if (time_now() - t0 > 1e-3) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
}
#endif

void dist_barrier(void) {
#ifdef TERN_MPI
    if (g_world <= 1) return;
    MPI_Request r;
    MPI_Ibarrier(MPI_COMM_WORLD, &r);
    polite_waitall(1, &r);
#endif
}

void dist_sum_doubles(double *x, int n) {
#ifdef TERN_MPI
    if (g_world <= 1) return;
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r);
    polite_waitall(1, &r);
#else
    (void)x, (void)n;
#endif
}

int dist_or_int(int x) {
#ifdef TERN_MPI
    if (g_world <= 1) return x;
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, &x, 1, MPI_INT, MPI_BOR, MPI_COMM_WORLD, &r);
    polite_waitall(1, &r);
#endif
    return x;
}

int dist_same_u64(uint64_t x) {
#ifdef TERN_MPI
    if (g_world <= 1) return 1;
    unsigned long long v[2] = {x, ~(unsigned long long)x};
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, v, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD, &r);
    polite_waitall(1, &r);
    return v[0] == x && v[1] == ~(unsigned long long)x; /* max == x and min == x */
#else
    (void)x;
    return 1;
#endif
}

/* ------------------------------------------------------------ gradient buckets */

typedef struct {
    size_t off, n; /* floats of m->grads */
    int stage;
} piece_t;

typedef struct {
    int p0, p1;    /* pieces [p0, p1) */
    size_t boff, n; /* slice of the bucket buffer */
    int stage;     /* ready after this backward stage (the largest of its pieces) */
} bucket_t;

struct dist_grads {
    train_model_t *m;
    int overlap;
    int n_pieces, n_buckets, last_stage;
    piece_t *pieces;     /* (n_pieces) in stage order */
    bucket_t *buckets;   /* (n_buckets) in start order */
    float *buf;          /* (n_params) the buckets' slices */
    int armed, started;  /* buckets started so far in this update */
    double t_first;      /* time the first bucket of the update started */
    dist_grads_stats_t stats;
#ifdef TERN_MPI
    MPI_Request *req;    /* (n_buckets) */
    int *idx;            /* (n_buckets) MPI_Testsome's output */
    int completed;       /* requests complete in this update */
#endif
};

static int cmp_piece(const void *a, const void *b) {
    const piece_t *x = a, *y = b;
    if (x->stage != y->stage) return x->stage < y->stage ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

tern_status_t dist_grads_new(dist_grads_t **out, train_model_t *m, void *ws, double bucket_mb, int overlap) {
    *out = NULL;
    if (!(bucket_mb > 0)) return tern_error(TERN_ERR_INVALID_ARG, "bucket size must be > 0 MB (got %g)", bucket_mb);
    dist_grads_t *d = calloc(1, sizeof *d);
    if (!d) return tern_error(TERN_ERR_NOMEM, "out of memory");
    d->m = m;
    d->overlap = overlap;
    d->n_pieces = m->n_tensors;
    d->last_stage = m->family->backward_stages(m) - 1;
    d->pieces = calloc((size_t)m->n_tensors, sizeof *d->pieces);
    d->buckets = calloc((size_t)m->n_tensors, sizeof *d->buckets);
    d->buf = malloc(sizeof *d->buf * (m->n_params > 0 ? m->n_params : 1));
#ifdef TERN_MPI
    d->req = malloc(sizeof *d->req * (size_t)m->n_tensors);
    d->idx = malloc(sizeof *d->idx * (size_t)m->n_tensors);
    if (!d->req || !d->idx) goto nomem;
#endif
    if (!d->pieces || !d->buckets || !d->buf) goto nomem;
    for (int i = 0; i < m->n_tensors; i++)
        d->pieces[i] = (piece_t){m->tensors[i].offset, m->tensors[i].numel, m->family->tensor_stage(m, i)};
    qsort(d->pieces, (size_t)d->n_pieces, sizeof *d->pieces, cmp_piece);
    /* greedy: close a bucket once it holds bucket_mb */
    size_t cap = (size_t)(bucket_mb * 1048576.0 / sizeof(float));
    if (cap < 1) cap = 1;
    size_t boff = 0;
    int nb = 0;
    for (int i = 0; i < d->n_pieces; i++) {
        if (nb == 0 || d->buckets[nb - 1].n >= cap) {
            d->buckets[nb++] = (bucket_t){.p0 = i, .p1 = i, .boff = boff, .n = 0, .stage = 0};
        }
        bucket_t *b = &d->buckets[nb - 1];
        b->p1 = i + 1;
        b->n += d->pieces[i].n;
        b->stage = d->pieces[i].stage; /* sorted: the largest so far */
        boff += d->pieces[i].n;
    }
    d->n_buckets = nb;
    d->stats.buckets = nb;
    d->stats.bucket_mb = bucket_mb;
    for (int i = 0; i < nb; i++) d->stats.buckets_last_stage += d->buckets[i].stage >= d->last_stage;
    m->family->set_backward_hook(ws, dist_grads_stage, d);
    *out = d;
    return TERN_OK;
nomem:
    dist_grads_free(d);
    return tern_error(TERN_ERR_NOMEM, "out of memory (gradient buckets)");
}

void dist_grads_free(dist_grads_t *d) {
    if (!d) return;
    free(d->pieces);
    free(d->buckets);
    free(d->buf);
#ifdef TERN_MPI
    free(d->req);
    free(d->idx);
#endif
    free(d);
}

dist_grads_stats_t dist_grads_stats(const dist_grads_t *d) { return d->stats; }

void dist_grads_arm(dist_grads_t *d) { d->armed = d->overlap; }

#ifdef TERN_MPI
/* Copies bucket i's pieces into its slice and starts its all-reduce. */
static void start_bucket(dist_grads_t *d, int i) {
    const bucket_t *b = &d->buckets[i];
    float *dst = d->buf + b->boff;
    for (int p = b->p0; p < b->p1; p++) {
        memcpy(dst, d->m->grads + d->pieces[p].off, d->pieces[p].n * sizeof(float));
        dst += d->pieces[p].n;
    }
    if (d->started == 0) d->t_first = time_now();
    MPI_Iallreduce(MPI_IN_PLACE, d->buf + b->boff, (int)b->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &d->req[i]);
    d->started++;
}

/* Progresses the requests started so far (completed ones become MPI_REQUEST_NULL). */
static void progress(dist_grads_t *d) {
    if (d->started == 0 || d->completed == d->started) return;
    int outcount = 0;
    MPI_Testsome(d->started, d->req, &outcount, d->idx, MPI_STATUSES_IGNORE);
    if (outcount != MPI_UNDEFINED) d->completed += outcount;
}
#endif

void dist_grads_stage(void *user, int stage) {
#ifdef TERN_MPI
    dist_grads_t *d = user;
    if (!d->armed || g_world <= 1) return;
    while (d->started < d->n_buckets && d->buckets[d->started].stage <= stage) start_bucket(d, d->started);
    progress(d);
#else
    (void)user, (void)stage;
#endif
}

void dist_grads_finish(dist_grads_t *d) {
    d->armed = 0;
#ifdef TERN_MPI
    if (g_world <= 1) return;
    double t0 = time_now();
    progress(d);
    d->stats.started_in_backward += d->started;
    d->stats.done_in_backward += d->completed;
    while (d->started < d->n_buckets) start_bucket(d, d->started);
    polite_waitall(d->n_buckets, d->req);
    double t1 = time_now();
    for (int i = 0; i < d->n_buckets; i++) {
        const bucket_t *b = &d->buckets[i];
        const float *src = d->buf + b->boff;
        for (int p = b->p0; p < b->p1; p++) {
            memcpy(d->m->grads + d->pieces[p].off, src, d->pieces[p].n * sizeof(float));
            src += d->pieces[p].n;
        }
    }
    double t2 = time_now();
    /* when did the slowest rank's backward end? (a statistic; one machine: one clock) */
    double tmax = t0;
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &r);
    polite_waitall(1, &r);
    d->stats.wait_seconds += t2 - t0;
    d->stats.imbalance_seconds += tmax - t0;
    d->stats.exposed_seconds += t2 - tmax > 0 ? t2 - tmax : 0;
    d->stats.reduce_seconds += t1 - d->t_first;
    d->stats.updates++;
    d->started = d->completed = 0;
#endif
}
