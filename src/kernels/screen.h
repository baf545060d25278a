/*
 * screen.h — the largest output of each row of a float32 linear layer (greedy search over a
 * vocabulary projection) without computing every output in float32: an int8 copy of the weights
 * gives every output with a proven error bound (docs/kernels.md, "The int8 pre-screen of the
 * output projection"); only the outputs whose interval reaches the row's best lower bound
 * (the candidates) are computed in float32, from the layer's own float32 weights.
 *
 * What it guarantees: for each row, the candidates hold every output that can be the largest, and
 * each candidate's value is the float32 layer's, inp . W^T + bias, summed as one fused multiply-add
 * per k in increasing k and the bias added last (oneDNN's packed kernel, gemm_packed.h, gives these
 * very bits; another summation order differs in the last bits, as two GEMM libraries do). So the
 * argmax of a row (first index on ties) is that of the full float32 layer.
 *
 * Legend: M rows of activations, N outputs (the vocabulary), K inputs.
 */
#ifndef TERN_KERNELS_SCREEN_H
#define TERN_KERNELS_SCREEN_H

#include <stddef.h>
#include <stdint.h>

typedef struct linear_screen linear_screen_t;

/* Builds the screen of the float32 layer W (N, K) + bias (N, or NULL; read at every call: it must
 * outlive the screen), whose float32 rows it reads at every call from W (plain, kept by the caller)
 * or, when W is NULL, from the layer's packed form (gemm_packed.h, read through
 * gemm_packed_offsets; it must outlive the screen): the int8 rows with per-row scales as the int8
 * layers quantize them (quantize_rows_s8), packed for oneDNN where the int8 GEMM is oneDNN's
 * (linear.c), and six bound coefficients per row. NULL when out of memory, when K is 0 or too large
 * for the exact int8 product, when the packed layout cannot be read, or when W or bias holds a value
 * that is not finite (no bound then). Read-only after: it may serve several threads. */
linear_screen_t *linear_screen_new(const float *W, const void *packed, const float *bias, int N, int K);
void linear_screen_free(linear_screen_t *s);

/* Bytes the screen holds (int8 rows, scales, coefficients, offsets). */
size_t linear_screen_bytes(const linear_screen_t *s);
/* Bytes of workspace linear_screen_forward / linear_screen_bounds need for M rows (64-byte aligned). */
size_t linear_screen_workspace_size(const linear_screen_t *s, int M);

/* out (M, N): per row, the float32 value (see above) of every candidate; every other output holds
 * its upper bound approx + err, which is below the row's largest float32 value (so the first argmax
 * of the row is the float32 layer's; the values of non-candidates mean nothing else).
 * Returns the number of candidates over the M rows (>= M), or -1 when it did not screen (an input
 * value that is not finite, a row with more than N / 32 candidates, no int8 kernel for M): out is
 * then garbage and the caller runs the float32 layer. ws: linear_screen_workspace_size(s, M) bytes.
 * Uses the OpenMP team size set by kernels_set_num_threads() on the calling thread. */
long linear_screen_forward(float *out, const float *inp, const linear_screen_t *s, int M, void *ws);

/* For tests: the int8 layer's outputs approx (M, N) (bias included) and the bound err (M, N) such
 * that |y - approx| <= err for y the float32 layer's value summed in any order. Returns 0, or -1
 * as linear_screen_forward. */
int linear_screen_bounds(float *approx, float *err, const float *inp, const linear_screen_t *s, int M, void *ws);

/* Counters since the screen was built: rows screened, candidates found, calls that fell back. */
void linear_screen_stats(const linear_screen_t *s, long *rows, long *cands, long *fallbacks);

#endif
