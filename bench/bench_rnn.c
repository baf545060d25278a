/* bench_rnn.c — where the time of the recurrent layers goes (src/nn/rnn.c).
 *
 *   build/bench/bench_rnn [threads] [B] [T] [H] [reps]      (defaults 1 64 30 512 3)
 *
 * 1. A GRU and an LSTM sequence over (B, T) with K = H: the forward split into the input projection
 *    of all steps (one GEMM, timed alone with the same shapes and strides), the T recurrent GEMMs
 *    (the whole batch's B rows each; timed alone) and the rest (gate activations, bias adds); the
 *    backward into the T per-step GEMMs (the state's gradient), the GEMMs at the end (the inputs',
 *    input weights' and recurrent weights' gradients over all steps at once) and the rest.
 * 2. One conditional-GRU decoding step over R = B rows (S = T source positions, encoder states
 *    Dv = 2H, A = H, E = O = H, V = 8000): GRU transition 1, attention, GRU transition 2, deep
 *    output + output layer, each timed alone through its public function, and the whole step.
 * Best of `reps` runs, milliseconds.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn/layers.h"
#include "nn/rnn.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *randf(size_t n, float s) {
    float *x = malloc(n * sizeof(float));
    uint64_t key = rng_mix64(n);
    for (size_t i = 0; i < n; i++) x[i] = (float)(s * (2 * rng_uniform(key, i) - 1));
    return x;
}

#define BEST(var, reps, code)                                                                              \
    do {                                                                                                   \
        var = 1e30;                                                                                        \
        for (int rep_ = 0; rep_ < (reps); rep_++) {                                                        \
            double t0_ = now();                                                                            \
            code;                                                                                          \
            double d_ = (now() - t0_) * 1e3;                                                               \
            if (d_ < var) var = d_;                                                                        \
        }                                                                                                  \
    } while (0)

static void bench_seq(int lstm, int B, int T, int H, int reps) {
    int K = H, G = lstm ? 4 : 3;
    size_t BT = (size_t)B * T;
    float *x = randf(BT * K, 1), *out = randf(BT * H, 0), *gates = randf(BT * 4 * H, 0), *cell = randf(BT * H, 0);
    float *dout = randf(BT * H, 1), *dx = randf(BT * K, 0);
    float *wih = randf((size_t)G * H * K, 0.05f), *whh = randf((size_t)G * H * H, 0.05f);
    float *bih = randf((size_t)G * H, 0.1f), *bhh = randf((size_t)G * H, 0.1f);
    float *dwih = randf((size_t)G * H * K, 0), *dwhh = randf((size_t)G * H * H, 0);
    float *dbih = randf((size_t)G * H, 0), *dbhh = randf((size_t)G * H, 0);
    size_t ns = lstm ? nn_lstm_backward_scratch(B, T, H) : nn_gru_backward_scratch(B, T, H, 0);
    float *scr = randf(ns, 0);
    rnn_cell_t w = {.w_ih = wih, .w_hh = whh, .b_ih = bih, .b_hh = bhh},
               dw = {.w_ih = dwih, .w_hh = dwhh, .b_ih = dbih, .b_hh = dbhh};
    double fwd, bwd, gin, grec, bstep, bend;
    if (lstm) {
        BEST(fwd, reps, nn_lstm_forward(out, H, cell, gates, x, NULL, NULL, &w, NULL, B, T, K, H, 0));
        BEST(bwd, reps, nn_lstm_backward(dx, NULL, NULL, &dw, scr, dout, H, x, NULL, NULL, &w, out, cell, gates, NULL, B,
                                         T, K, H, 0));
    } else {
        BEST(fwd, reps, nn_gru_forward(out, H, gates, x, NULL, &w, NULL, B, T, K, H, 0));
        BEST(bwd, reps, nn_gru_backward(dx, NULL, &dw, scr, dout, H, x, NULL, &w, out, gates, NULL, B, T, K, H, 0));
    }
    /* the same GEMMs alone */
    BEST(gin, reps, gemm_f32(0, 1, (int)BT, G * H, K, 1.0f, x, K, wih, K, 0.0f, gates, 4 * H));
    BEST(grec, reps, for (int t = 1; t < T; t++)
                         gemm_f32(0, 1, B, G * H, H, 1.0f, out + (size_t)(t - 1) * H, T * H, whh, H, 1.0f,
                                  gates + (size_t)t * 4 * H, T * 4 * H));
    BEST(bstep, reps, for (int t = T - 1; t >= 0; t--)
                          gemm_f32(0, 0, B, H, G * H, 1.0f, scr + (size_t)t * 4 * H, T * 4 * H, whh, H, 1.0f, dx, H));
    BEST(bend, reps, {
        gemm_f32(0, 0, (int)BT, K, G * H, 1.0f, scr, 4 * H, wih, K, 1.0f, dx, K);
        gemm_f32(1, 0, G * H, K, (int)BT, 1.0f, scr, 4 * H, x, K, 1.0f, dwih, K);
        gemm_f32(1, 0, G * H, H, (int)BT - 1, 1.0f, scr + 4 * H, 4 * H, out, H, 1.0f, dwhh, H);
    });
    printf("%-4s B=%d T=%d K=H=%d  forward %8.2f ms = input GEMM (all steps) %7.2f + %d recurrent GEMMs %7.2f"
           " + gates/rest %7.2f\n",
           lstm ? "LSTM" : "GRU", B, T, H, fwd, gin, T - 1, grec, fwd - gin - grec);
    printf("%-4s                       backward %8.2f ms = %d per-step GEMMs (dh) %7.2f + end GEMMs "
           "(dx, dW_ih, dW_hh) %7.2f + gates/rest %7.2f\n",
           "", bwd, T, bstep, bend, bwd - bstep - bend);
    printf("%-4s                       per step: forward %.3f ms, backward %.3f ms (whole batch)\n", "",
           (fwd - gin) / T, (bwd - bend) / T);
    free(x), free(out), free(gates), free(cell), free(dout), free(dx), free(wih), free(whh), free(bih), free(bhh);
    free(dwih), free(dwhh), free(dbih), free(dbhh), free(scr);
}

static void bench_cgru_step(int R, int S, int H, int reps) {
    cgru_dims_t d = {.H = H, .E = H, .Dv = 2 * H, .A = H, .O = H, .V = 8000};
    int G = 3;
    float *g1ih = randf((size_t)G * H * d.E, 0.05f), *g1hh = randf((size_t)G * H * H, 0.05f);
    float *g2ih = randf((size_t)G * H * d.Dv, 0.05f), *g2hh = randf((size_t)G * H * H, 0.05f);
    float *b1 = randf((size_t)G * H, 0.1f), *b2 = randf((size_t)G * H, 0.1f), *b3 = randf((size_t)G * H, 0.1f),
          *b4 = randf((size_t)G * H, 0.1f);
    float *wq = randf((size_t)d.A * H, 0.05f), *wk = randf((size_t)d.A * d.Dv, 0.05f), *ab = randf(d.A, 0.1f),
          *av = randf(d.A, 0.1f);
    float *ws = randf((size_t)d.O * H, 0.05f), *wc = randf((size_t)d.O * d.Dv, 0.05f), *we = randf((size_t)d.O * d.E, 0.05f),
          *ob = randf(d.O, 0.1f), *wo = randf((size_t)d.V * d.O, 0.05f), *bo = randf(d.V, 0.1f);
    cgru_weights_t w = {{.w_ih = g1ih, .w_hh = g1hh, .b_ih = b1, .b_hh = b2}, {.w_ih = g2ih, .w_hh = g2hh, .b_ih = b3, .b_hh = b4}, wq, wk, ab, av, ws, wc, we, ob, wo, bo};
    float *enc = randf((size_t)R * S * d.Dv, 1), *kp = randf((size_t)R * S * d.A, 0);
    float *e = randf((size_t)R * d.E, 1), *sp = randf((size_t)R * H, 0.5f), *s = randf((size_t)R * H, 0);
    float *ctx = randf((size_t)R * d.Dv, 0), *al = randf((size_t)R * S, 0), *lg = randf((size_t)R * d.V, 0);
    float *scr = randf(nn_cgru_step_scratch(R, d), 0), *g = randf((size_t)R * 4 * H, 0), *qp = randf((size_t)R * d.A, 0);
    nn_additive_keys_forward(kp, enc, wk, ab, R, S, d.Dv, d.A);
    double tot, t1, ta, t2, tnolog;
    BEST(tot, reps * 5, nn_cgru_step_forward(s, ctx, al, lg, scr, e, sp, kp, enc, NULL, NULL, &w, R, S, d));
    BEST(tnolog, reps * 5, nn_cgru_step_forward(s, ctx, al, NULL, scr, e, sp, kp, enc, NULL, NULL, &w, R, S, d));
    BEST(t1, reps * 5, nn_gru_cell_forward(s, g, e, sp, &w.gru1, R, d.E, H));
    BEST(ta, reps * 5, nn_additive_attention_forward(ctx, d.Dv, qp, al, s, H, kp, enc, NULL, NULL, wq, av, R, 1, S, H,
                                                     d.A, d.Dv));
    BEST(t2, reps * 5, nn_gru_cell_forward(s, g, ctx, sp, &w.gru2, R, d.Dv, H));
    printf("cGRU step R=%d S=%d H=%d Dv=%d A=%d V=%d: %.3f ms = GRU1 %.3f + attention %.3f + GRU2 %.3f + deep output "
           "and logits %.3f (logits alone %.3f)\n",
           R, S, H, d.Dv, d.A, d.V, tot, t1, ta, t2, tot - t1 - ta - t2, tot - tnolog);
    free(g1ih), free(g1hh), free(g2ih), free(g2hh), free(b1), free(b2), free(b3), free(b4), free(wq), free(wk);
    free(ab), free(av), free(ws), free(wc), free(we), free(ob), free(wo), free(bo), free(enc), free(kp), free(e);
    free(sp), free(s), free(ctx), free(al), free(lg), free(scr), free(g), free(qp);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1, B = argc > 2 ? atoi(argv[2]) : 64, T = argc > 3 ? atoi(argv[3]) : 30;
    int H = argc > 4 ? atoi(argv[4]) : 512, reps = argc > 5 ? atoi(argv[5]) : 3;
    omp_set_num_threads(threads);
    kernels_set_num_threads(threads);
    printf("threads %d (GEMM: %s)\n", threads, gemm_f32_backend_name(0, 1, B, 3 * H, H));
    bench_seq(0, B, T, H, reps);
    bench_seq(1, B, T, H, reps);
    bench_cgru_step(B, T, H, reps);
    return 0;
}
