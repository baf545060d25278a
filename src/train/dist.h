/*
 * dist.h — synchronous data-parallel training over MPI processes (`mpirun -np N tern train`).
 *
 * Every process (rank) holds a full replica of the model and of Adam's state, reads the same
 * token caches and draws the same shuffled batch order. An update takes world · update_freq
 * batches of that order; rank r trains on batches [r·k, (r+1)·k) of them (k = update_freq), each
 * with the dropout key of its GLOBAL micro-batch index, so that the masks are those of the
 * single-process run with update_freq world · k. The gradients are summed over the ranks
 * (MPI_SUM all-reduce) and every rank then clips and steps Adam on the same summed gradient:
 * the replicas stay identical without broadcasting parameters.
 *
 * The all-reduce runs in BUCKETS of about bucket_mb megabytes: the model's tensors (per-layer
 * slices of the stacked fields) are ordered by the backward stage after which their gradient is
 * final (the training table's tensor_stage (family.h); the Transformer: output projection first, embeddings last; a shared/tied embedding
 * only at the very end) and grouped greedily into buckets. During the backward pass of the last
 * micro-batch of an update, the family's backward calls dist_grads_stage after each layer: every bucket
 * whose tensors are all final is copied into its slice of a bucket buffer and its non-blocking
 * MPI_Iallreduce starts; outstanding requests are progressed with MPI_Testsome. dist_grads_finish
 * starts the buckets of the last stage, waits for all (MPI_Waitall, politely: spinning at most
 * 1 ms, then sleeping between tests) and copies the sums back into m->grads. Without overlap the
 * same buckets start, in the same order, after the backward: the same reductions, so the same
 * bits.
 *
 * MPI is optional at build time (TERN_MPI, set by the Makefile when OpenMPI's pkg-config file
 * ompi-c is found). MPI_Init runs only in `tern train` and only when the process was launched by
 * mpirun (OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE in the environment): a plain `tern train`
 * is a world of one and makes no MPI call. A world of one makes every function here a no-op.
 */
#ifndef TERN_TRAIN_DIST_H
#define TERN_TRAIN_DIST_H

#include <stdint.h>

#include "base/base.h"
#include "train/family.h"

/* 1 when this build has MPI. */
int dist_compiled(void);
/* MPI_Init_thread (MPI_THREAD_FUNNELED) when launched by mpirun; otherwise a world of one. In a
 * build without MPI, a launch with a world size > 1 is an error that says so. MPI's helper threads
 * inherit the calling thread's signal mask: block the signals they must not take first. */
tern_status_t dist_init(void);
/* MPI_Finalize (when dist_init initialized MPI). */
void dist_finalize(void);
/* MPI_Abort of the whole job (world > 1; after the caller printed why); returns otherwise. */
void dist_abort(int code);
int dist_rank(void);
int dist_world(void);

/* Collectives (no-ops in a world of one). The waits are polite: after 1 ms of spinning they sleep
 * 0.2 ms between tests, so that ranks waiting for rank 0 (validation, BLEU, checkpoints) leave the
 * cores alone. */
void dist_barrier(void);
void dist_sum_doubles(double *x, int n);      /* x[i] = sum over ranks */
int dist_or_int(int x);                       /* bitwise OR over ranks */
/* 1 when every rank passed the same value. */
int dist_same_u64(uint64_t x);

/* ------------------------------------------------------------ gradient buckets */

typedef struct {
    int buckets;                 /* buckets per update */
    int buckets_last_stage;      /* of which wait for the last stage (started after the backward) */
    double bucket_mb;            /* the target size */
    long updates;                /* updates reduced */
    long started_in_backward;    /* buckets started before the backward pass returned (all updates) */
    long done_in_backward;       /* ... of which already complete when it returned */
    double wait_seconds;         /* time in dist_grads_finish (start of the rest, wait, copies) */
    double imbalance_seconds;    /* ... of which until the slowest rank's backward ended (one machine:
                                    CLOCK_MONOTONIC is shared; exchanged after each update) */
    double exposed_seconds;      /* ... of which after it: communication not hidden by the backward */
    double reduce_seconds;       /* time from the first bucket's start to the last one's completion */
} dist_grads_stats_t;

typedef struct dist_grads dist_grads_t;

/* Buckets for m's gradient buffer (bucket_mb > 0; overlap 0: start every bucket after the
 * backward). Registers itself as the backward hook of ws (unarmed). */
tern_status_t dist_grads_new(dist_grads_t **dg, train_model_t *m, void *ws, double bucket_mb, int overlap);
void dist_grads_free(dist_grads_t *dg);
/* Call before the backward pass of this rank's last micro-batch of the update: from then on
 * stages start buckets. (A rank without a batch in the update calls finish only.) */
void dist_grads_arm(dist_grads_t *dg);
/* The backward hook (train_backward_hook_t): stage s of the backward pass is done. */
void dist_grads_stage(void *dg, int stage);
/* Starts the remaining buckets, waits for all, writes the sums into m->grads; disarms. */
void dist_grads_finish(dist_grads_t *dg);
dist_grads_stats_t dist_grads_stats(const dist_grads_t *dg);

#endif
