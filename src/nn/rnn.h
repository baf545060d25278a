/*
 * nn/rnn.h — the recurrent layers (GRU, LSTM, additive attention, conditional GRU
 * decoder with deep output), forward and backward through time, in the conventions of layers.h.
 *
 * Legend: B sentences, T time steps (target or source length of the sequence run), S source
 * length (keys of an attention), K input features of a recurrent layer, H hidden (state) size,
 * G gates (3 for the GRU, 4 for the LSTM), R rows of one decoding step (sentences × beams),
 * Dq query width, Dv (= Dk) width of the attended keys/values, A attention hidden size,
 * E target embedding width, O deep-output width, V vocabulary, M rows in general.
 *
 * Conventions (those of layers.h, llm.c's):
 * - Argument order: outputs, saved buffers, scratch, inputs, weights, then dimensions/options.
 * - Every gradient ACCUMULATES with += (the caller zeroes it once), inputs' gradients included.
 * - Activations are float32, row-major; a sequence is batch-major (B, T, ·) like the rest of the
 *   trainer. A layer whose output is one half of a concatenation takes the output's row stride
 *   (ldo): the bidirectional layers write the forward direction to columns [0, H) and the backward
 *   direction to columns [H, 2H) of one (B, T, 2H) tensor.
 * - Weights are PyTorch's, gates fused, in PyTorch's gate order, so that a converter copies them:
 *     GRU  (torch.nn.GRUCell / nn.GRU):  w_ih (3H, K) rows [r; z; n], w_hh (3H, H), b_ih, b_hh (3H)
 *     LSTM (torch.nn.LSTMCell / nn.LSTM): w_ih (4H, K) rows [i; f; g; o], w_hh (4H, H), b_ih, b_hh (4H)
 *   Either bias may be NULL (absent; its gradient pointer is then ignored).
 * - Lengths: len[b] in [0, T] valid steps of sentence b (NULL: all T). A step t >= len[b] does not
 *   change the state: the output there is the state carried (for the forward direction the last
 *   valid state, for the reverse direction the initial state), and no gradient flows through the
 *   gates of such a step (the state's gradient passes through unchanged).
 * - The input projections of all steps are ONE GEMM before the recurrence (M = B·T rows); each step
 *   then multiplies the whole batch's states (M = B rows) by the fused recurrent matrix in one GEMM.
 *   The backward does one GEMM per step (the state's gradient, M = B); the recurrent weights',
 *   input weights' and inputs' gradients are GEMMs over all B·T rows after the loop.
 * - Nothing allocates; callers pass saved buffers and scratch of the documented sizes.
 */
#ifndef TERN_TRAIN_RNN_LAYERS_H
#define TERN_TRAIN_RNN_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "nn/layers.h"

/* ------------------------------------------------------------ bfloat16 compute (training)
 * As the Transformer's (lowp.h, docs/training.md): every GEMM of these layers — input projections,
 * recurrent products, attention projections, deep output, output layer, and their backward
 * GEMMs — takes bfloat16 operands (rounded from the float32 values, to nearest even) and
 * accumulates and writes float32; everything else (gates, normalization, attention softmax, the
 * loss, parameters, gradients, the optimizer) stays float32. Between nn_rnn_lowp_begin(lp) and
 * nn_rnn_lowp_end() on the calling thread, the layers compute in bfloat16 with lp's scratch (the
 * operands are rounded into it at each GEMM, so no bfloat16 copy of the weights is kept);
 * otherwise float32. Inference never begins it. */
typedef struct {
    uint16_t *a, *b;  /* (cap) the two packed operands */
    size_t cap;       /* elements of each: the largest GEMM operand */
    tern_status_t st; /* first error (sticky until nn_rnn_lowp_end) */
} nn_rnn_lowp_t;
/* Scratch for operands of up to cap elements; TERN_ERR_UNSUPPORTED without AVX512_BF16. */
tern_status_t nn_rnn_lowp_init(nn_rnn_lowp_t *lp, size_t cap);
void nn_rnn_lowp_free(nn_rnn_lowp_t *lp);
void nn_rnn_lowp_begin(nn_rnn_lowp_t *lp);
/* Ends it; returns the first GEMM error since the begin (an operand larger than cap, oneDNN). */
tern_status_t nn_rnn_lowp_end(void);
/* A linear layer (out = inp · w^T + b; backward: dinp, dw, db +=) through the same GEMM choice. */
void nn_rnn_linear_forward(float *out, const float *inp, const float *w, const float *b, int M, int K, int N);
void nn_rnn_linear_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                            int M, int K, int N);

/* ------------------------------------------------------------ fake-quantized activations (training)
 * `tern train --qat int8-act` of the attention GRU (src/train/rnn_gru_train.c): between
 * nn_rnn_actq_begin(aq) and nn_rnn_actq_end() on the calling thread, the input rows of every matrix
 * product that int8 inference (src/model/rnn_gru.c, its int8 path) runs as an int8 linear layer
 * are first rounded as that inference rounds them at run time (kernels.h fake_quantize_rows_act,
 * per row of the product's K inputs): the GRU cells' input projections (all steps at once) and
 * recurrent products (per step; a zero state rounds to itself), the attention's query and key
 * projections, the initial state's projection of the encoder mean, the deep output's three products
 * and the output layer (nn_rnn_linear_forward). Each backward takes the weight's gradient against
 * the same rounded rows (recomputed from the saved ones: the same function of the same values) and
 * passes the input's gradient straight through (identity). The attention's weighted sum of the
 * encoder states, the gates, the normalization and the embeddings stay float32, as in inference.
 * The LSTM layers (GNMT) ignore it. aq's scratch holds one rounded operand at a time. */
typedef struct {
    float *buf;       /* (cap) */
    size_t cap;       /* floats: the largest operand (rows x K) */
    tern_status_t st; /* first error (sticky until nn_rnn_actq_end) */
} nn_rnn_actq_t;
/* Scratch for operands of up to cap floats. */
tern_status_t nn_rnn_actq_init(nn_rnn_actq_t *aq, size_t cap);
void nn_rnn_actq_free(nn_rnn_actq_t *aq);
void nn_rnn_actq_begin(nn_rnn_actq_t *aq);
/* Ends it; returns the first error since the begin (an operand larger than cap). */
tern_status_t nn_rnn_actq_end(void);

/* The four tensors of one recurrent cell (GRU: G = 3, LSTM: G = 4), as PyTorch names them. The
 * same struct holds the weights (read) and, in a backward call, the gradients (accumulated). */
typedef struct {
    float *w_ih; /* (G*H, K) */
    float *w_hh; /* (G*H, H) */
    float *b_ih; /* (G*H) or NULL */
    float *b_hh; /* (G*H) or NULL */
    /* GRU only, optional (NULL: none): layer normalization of the input projection W_ih x and of the
     * recurrent projection W_hh h, each in the blocks [r; z] (2H) and [n] (H), with a gain and a
     * shift per unit (Nematus/Marian's layer-normalized GRU; see "GRU" below). */
    float *ln_ih_g, *ln_ih_b; /* (3H) */
    float *ln_hh_g, *ln_hh_b; /* (3H) */
    /* LSTM only: > 0 clips the carried cell state to [-clip, clip] (GNMT's quantizable model, Wu
     * et al. 2016 section 6: c'_t, m_t = LSTM(c_{t-1}, m_{t-1}, x_t); c_t = clip(c'_t, δ)). The
     * saved / returned cell is c'_t (m_t = o ⊙ tanh(c'_t) reads it unclipped) and each step reads
     * its predecessor's as clip(c'_{t-1}); the backward passes the gradient through that clip
     * where |c'_{t-1}| <= clip and zero outside (the clip's subgradient, torch.clamp's). In
     * nn_gnmt_encoder_* it also clips a residual layer's output (x_t = clip(m_t + x_{t-1}, δ)).
     * 0: no clipping. */
    float clip;
} rnn_cell_t;

/* ------------------------------------------------------------ GRU (torch.nn.GRUCell)
 *   r = σ(W_ir x + b_ir + W_hr h + b_hr)
 *   z = σ(W_iz x + b_iz + W_hz h + b_hz)
 *   n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))
 *   h' = (1 − z) ⊙ n + z ⊙ h
 * Saved gates (·, 4H) per row: [r, z, hn = W_hn h + b_hn, n].
 * Layer-normalized (the cell's ln_* set): W_ih x and W_hh h are replaced by
 *   [LN(W_i[rz] x); LN(W_in x)] ⊙ γ_ih + β_ih   and   [LN(W_h[rz] h); LN(W_hn h)] ⊙ γ_hh + β_hh,
 * LN(v) = (v − mean v) / sqrt(var v + 1e-5) (a zero state h = NULL gives β_hh). The saved buffer
 * `gates` of M rows is then followed by M rows of 6H + 4 normalization values (x̂ of both
 * projections and their four 1/σ): nn_gru_gates_size(M, H, 1) floats in all. */
size_t nn_gru_gates_size(size_t M, int H, int ln);
/* The normalization of the int8 inference path (src/model/rnn_gru.c): each row of g (M rows,
 * stride ldg, 3H raw projections [rz | n]) <- [LN(rz); LN(n)] ⊙ gain + beta + bias (bias may be NULL). */
void nn_gru_ln_apply(float *g, int ldg, int M, int H, const float *gain, const float *beta, const float *bias);

/* One step over R rows: h (R, H) = GRU(x (R, K), h_prev (R, H) or NULL for zeros); gates (R, 4H)
 * saved. h may not alias h_prev. Usable by a decoder step (no allocation). */
void nn_gru_cell_forward(float *h, float *gates, const float *x, const float *h_prev,
                         const rnn_cell_t *w, int R, int K, int H);
/* dx (R, K) and dh_prev (R, H) (either may be NULL) and dw += the gradients of one step given
 * dh (R, H). scratch: nn_gru_cell_backward_scratch(R, H, ln) floats ((R, 4H) without ln). */
size_t nn_gru_cell_backward_scratch(int R, int H, int ln);
void nn_gru_cell_backward(float *dx, float *dh_prev, const rnn_cell_t *dw, float *scratch,
                          const float *dh, const float *x, const float *h_prev, const rnn_cell_t *w,
                          const float *gates, int R, int K, int H);

/* A sequence: out[b, t] (row stride ldo, columns [0, H)) = state after step t of sentence b, over
 * inp (B, T, K); reverse runs t = T-1 .. 0. h0 (B, H) or NULL (zeros). gates (B, T, 4H) saved. */
void nn_gru_forward(float *out, int ldo, float *gates, const float *inp, const float *h0,
                    const rnn_cell_t *w, const int *len, int B, int T, int K, int H, int reverse);
/* dinp (B, T, K), dh0 (B, H) (either may be NULL), dw += the gradients given dout (row stride ldo).
 * scratch: nn_gru_backward_scratch(B, T, H, ln) floats (ln: the cell is layer-normalized). */
size_t nn_gru_backward_scratch(int B, int T, int H, int ln);
void nn_gru_backward(float *dinp, float *dh0, const rnn_cell_t *dw, float *scratch,
                     const float *dout, int ldo, const float *inp, const float *h0,
                     const rnn_cell_t *w, const float *out, const float *gates, const int *len,
                     int B, int T, int K, int H, int reverse);

/* Bidirectional: out (B, T, 2H) = [forward GRU (wf); backward GRU (wb)], zero initial states.
 * gates_f, gates_b (nn_gru_gates_size(B·T, H, ln) floats each) saved. Backward: scratch
 * nn_gru_backward_scratch(B, T, H, ln). */
void nn_bigru_forward(float *out, float *gates_f, float *gates_b, const float *inp,
                      const rnn_cell_t *wf, const rnn_cell_t *wb, const int *len, int B, int T,
                      int K, int H);
void nn_bigru_backward(float *dinp, const rnn_cell_t *dwf, const rnn_cell_t *dwb, float *scratch,
                       const float *dout, const float *inp, const rnn_cell_t *wf,
                       const rnn_cell_t *wb, const float *out, const float *gates_f,
                       const float *gates_b, const int *len, int B, int T, int K, int H);

/* ------------------------------------------------------------ LSTM (torch.nn.LSTMCell)
 *   [i, f, g, o] = [σ, σ, tanh, σ](W_ih x + b_ih + W_hh h + b_hh)
 *   c' = f ⊙ c + i ⊙ g,   h' = o ⊙ tanh(c')
 * Saved gates (·, 4H) per row: the activated [i, f, g, o]; cell states (·, H). */
/* The LSTM's pointwise part for one row: gates g (4H, pre-activation, [i f g o]; overwritten by the
 * activations) and the previous cell c_prev (NULL: zeros) give c and h = o * tanh(c). The cell and
 * sequence functions below use it, and so does inference (src/model/gnmt.c). */
void nn_lstm_point(float *h, float *c, float *g, const float *c_prev, int H, float clip);

/* GNMT's clip of a layer output (x = clip(x', δ)): x (n) clipped in place to [-clip, clip]
 * (clip <= 0: nothing); its backward zeroes dx (n) where the saved clipped output |y| >= clip. */
void nn_clip_forward(float *x, size_t n, float clip);
void nn_clip_backward(float *dx, const float *y, size_t n, float clip);
/* The same for a residual output y = clip(a + b): zeroes dx where |a + b| > clip. */
void nn_residual_clip_backward(float *dx, const float *a, const float *b, size_t n, float clip);

/* One step over R rows: h, c (R, H) from x (R, K), h_prev, c_prev (R, H) or NULL (zeros). */
void nn_lstm_cell_forward(float *h, float *c, float *gates, const float *x, const float *h_prev,
                          const float *c_prev, const rnn_cell_t *w, int R, int K, int H);
/* Gradients of one step given dh and dc (R, H) (dc may be NULL: no gradient on c' from outside).
 * dx, dh_prev, dc_prev may be NULL. scratch (R, 4H). */
void nn_lstm_cell_backward(float *dx, float *dh_prev, float *dc_prev, const rnn_cell_t *dw,
                           float *scratch, const float *dh, const float *dc, const float *x,
                           const float *h_prev, const float *c_prev, const rnn_cell_t *w,
                           const float *gates, const float *c, int R, int K, int H);

/* A sequence, as nn_gru_forward; cell (B, T, H) saved (the cell state after each step, carried
 * past a sentence's length like out). h0, c0 (B, H) or NULL. */
void nn_lstm_forward(float *out, int ldo, float *cell, float *gates, const float *inp,
                     const float *h0, const float *c0, const rnn_cell_t *w, const int *len, int B,
                     int T, int K, int H, int reverse);
/* scratch: nn_lstm_backward_scratch(B, T, H) floats. dinp, dh0, dc0 may be NULL. */
size_t nn_lstm_backward_scratch(int B, int T, int H);
void nn_lstm_backward(float *dinp, float *dh0, float *dc0, const rnn_cell_t *dw, float *scratch,
                      const float *dout, int ldo, const float *inp, const float *h0,
                      const float *c0, const rnn_cell_t *w, const float *out, const float *cell,
                      const float *gates, const int *len, int B, int T, int K, int H, int reverse);

/* Bidirectional LSTM (GNMT's bottom encoder layer): out (B, T, 2H); cell_f, cell_b (B, T, H),
 * gates_f, gates_b (B, T, 4H) saved; zero initial states. Backward scratch:
 * nn_lstm_backward_scratch(B, T, H). */
void nn_bilstm_forward(float *out, float *cell_f, float *cell_b, float *gates_f, float *gates_b,
                       const float *inp, const rnn_cell_t *wf, const rnn_cell_t *wb,
                       const int *len, int B, int T, int K, int H);
void nn_bilstm_backward(float *dinp, const rnn_cell_t *dwf, const rnn_cell_t *dwb, float *scratch,
                        const float *dout, const float *inp, const rnn_cell_t *wf,
                        const rnn_cell_t *wb, const float *out, const float *cell_f,
                        const float *cell_b, const float *gates_f, const float *gates_b,
                        const int *len, int B, int T, int K, int H);

/* ------------------------------------------------------------ GNMT's stacked encoder
 * L LSTM layers over inp (B, T, K): layer 0 bidirectional (output 2H), layer 1 unidirectional
 * over 2H, layers l >= 2 unidirectional over H with a residual connection: y_l = LSTM_l(y_{l-1})
 * + y_{l-1} (GNMT: "from the third layer up"; the layer numbering here starts at 0). With bi == 0,
 * layer 0 is unidirectional (output H) and the residuals still start at l = 2.
 * The saved buffers of layer l: h[l] (B, T, H·dirs) the LSTM output, y[l] (B, T, H) the layer's
 * output after the residual (l >= 2; NULL below, where y = h), cell[l] (dirs·B·T·H),
 * gates[l] (dirs·B·T·4H). The encoder's output is y[L-1] (or h[L-1] when L <= 2).
 * w[l] is one cell, w[L] the bottom layer's backward direction when bi. */
typedef struct {
    float **h;     /* L pointers, (B, T, H·dirs) */
    float **y;     /* L pointers, (B, T, H) for l >= 2, else unused */
    float **cell;  /* L pointers, (dirs, B, T, H) */
    float **gates; /* L pointers, (dirs, B, T, 4H) */
    /* Optional dropout between the layers (training): with xd set and drop > 0, layer l >= 1 reads
     * xd[l] = dropout(its input) (B, T, K_l), mask of key drop_keys[l]; the residual adds the input
     * before dropout (GNMT's ResidualWrapper around a DropoutWrapper). xd NULL or drop 0: none. */
    float **xd;
    float drop;
    const uint64_t *drop_keys;
} gnmt_encoder_acts_t;

void nn_gnmt_encoder_forward(const gnmt_encoder_acts_t *acts, const float *inp,
                             const rnn_cell_t *w, const int *len, int B, int T, int K, int H,
                             int L, int bi);
/* dout (B, T, H) the gradient of the encoder's output ((B, T, 2H) when L == 1 and bi); dinp (B, T, K) may be NULL. scratch:
 * nn_gnmt_encoder_backward_scratch floats. */
size_t nn_gnmt_encoder_backward_scratch(int B, int T, int H, int bi);
void nn_gnmt_encoder_backward(float *dinp, const rnn_cell_t *dw, float *scratch,
                              const float *dout, const gnmt_encoder_acts_t *acts,
                              const float *inp, const rnn_cell_t *w, const int *len, int B, int T,
                              int K, int H, int L, int bi);
/* The encoder's output among the saved buffers. */
const float *nn_gnmt_encoder_output(const gnmt_encoder_acts_t *acts, int L);

/* ------------------------------------------------------------ additive (Bahdanau) attention
 *   e_j = v^T tanh(W_q q + W_k k_j + b),   α = softmax_j(e) over j < klen,   ctx = Σ_j α_j val_j
 * This is also GNMT's AttentionFunction ("a feed forward network with one hidden layer" over the
 * query y_{i-1} and each encoder output x_t): the same function, taking the same arguments, so it
 * has one entry point; the families differ in what they pass as the query.
 * The keys' projection kp = W_k k + b (B, S, A) is computed once per batch by
 * nn_additive_keys_forward (a linear layer); each query then costs S·A tanh and one GEMM row. */
void nn_additive_keys_forward(float *kp, const float *keys, const float *wk, const float *b,
                              int B, int S, int Dv, int A);
/* dkeys (may be NULL), dwk, db (may be NULL) += gradients given dkp (B, S, A). */
void nn_additive_keys_backward(float *dkeys, float *dwk, float *db, const float *dkp,
                               const float *keys, const float *wk, int B, int S, int Dv, int A);

/* R query rows q (row stride ldq, width Dq; q NULL: zero queries). Row r attends to the source of sentence
 * src = src_of_row ? src_of_row[r] : r / Tq (Tq query rows per sentence): keys kp (B, S, A),
 * values (B, S, Dv), klen (B) valid keys (1..S; NULL: all S).
 * ctx (row stride ldc, width Dv); qp (R, A) and alpha (R, S) saved (alpha 0 at masked keys). */
void nn_additive_attention_forward(float *ctx, int ldc, float *qp, float *alpha, const float *q,
                                   int ldq, const float *kp, const float *values, const int *klen,
                                   const int *src_of_row, const float *wq, const float *v, int R,
                                   int Tq, int S, int Dq, int A, int Dv);
/* The same attention from query projections qp (R, A) already computed (int8 inference projects
 * them with its own linear layers): alpha and ctx as above. */
void nn_additive_attention_apply(float *ctx, int ldc, float *alpha, const float *qp, const float *kp,
                                 const float *values, const int *klen, const int *src_of_row, const float *v,
                                 int R, int Tq, int S, int A, int Dv);
/* The same with `heads` independent attentions (inference only; heads 1 computes the function
 * above): head i scores with the units [i·A/h, (i+1)·A/h) of qp, kp and v, and its weights average
 * the value columns [i·Dv/2h, (i+1)·Dv/2h) of each half of values (a bidirectional encoder's two
 * directions). This is what an ensemble of attention models unfolded into one network computes:
 * each member keeps its own distribution over the source (src/train/shrink.c). alpha (R, S) gets
 * the heads' mean; scratch (R, S). */
void nn_additive_attention_heads_apply(float *ctx, int ldc, float *alpha, float *scratch, const float *qp,
                                       const float *kp, const float *values, const int *klen, const int *src_of_row,
                                       const float *v, int R, int S, int A, int Dv, int heads);
/* dq (stride lddq; may be NULL), dwq, dv, dkp (B, S, A), dvalues (B, S, Dv; may be NULL) += the
 * gradients given dctx (stride ldc). scratch (R, 2A). The tanh is recomputed (nothing of size
 * R·S·A is stored). */
void nn_additive_attention_backward(float *dq, int lddq, float *dwq, float *dv, float *dkp, float *dvalues,
                                    float *scratch, const float *dctx, int ldc, const float *q,
                                    int ldq, const float *qp, const float *kp, const float *values,
                                    const float *alpha, const int *klen, const int *src_of_row,
                                    const float *wq, const float *v, int R, int Tq, int S, int Dq,
                                    int A, int Dv);

/* ------------------------------------------------------------ conditional GRU decoder (Nematus)
 *   s'_t  = GRU1(e_{t-1}, s_{t-1})                  e_{t-1}: embedding of the previous target
 *   c_t   = Att(query s'_t; keys/values = the encoder states)
 *   s_t   = GRU2(c_t, s'_t)
 *   u_t   = tanh(W_s s_t + W_c c_t + W_e e_{t-1} + b)        (deep output, one layer)
 *   logits_t = W_o u_t + b_o
 * Dv = width of the encoder states (2·encoder H for a bidirectional encoder). */
typedef struct {
    rnn_cell_t gru1; /* w_ih (3H, E), w_hh (3H, H) */
    rnn_cell_t gru2; /* w_ih (3H, Dv), w_hh (3H, H) */
    float *att_wq;   /* (A, H) */
    float *att_wk;   /* (A, Dv) */
    float *att_b;    /* (A) or NULL */
    float *att_v;    /* (A) */
    float *out_ws;   /* (O, H) */
    float *out_wc;   /* (O, Dv) */
    float *out_we;   /* (O, E) */
    float *out_b;    /* (O) or NULL */
    float *out_wo;   /* (V, O); may be the target embedding (V, E) when O == E (tied) */
    float *out_bo;   /* (V) or NULL */
} cgru_weights_t;

typedef struct {
    int H, E, Dv, A, O, V;
    int ln; /* GRU1 and GRU2 are layer-normalized (their gates buffers g1, g2 and the step's scratch
               then hold the normalization values too: nn_gru_gates_size) */
} cgru_dims_t;

/* Saved activations of a decoder run through time over (B, T) targets and (B, S) sources. */
typedef struct {
    float *kp;     /* (B, S, A) the keys' projection */
    float *g1;     /* (B, T, 4H) GRU1 gates (nn_gru_gates_size(B·T, H, ln) floats) */
    float *s1;     /* (B, T, H) s' */
    float *qp;     /* (T, B, A) time-major: step t's rows are contiguous */
    float *alpha;  /* (T, B, S) time-major */
    float *ctx;    /* (B, T, Dv) */
    float *g2;     /* (B, T, 4H) GRU2 gates (as g1) */
    float *s;      /* (B, T, H) */
    float *u;      /* (B, T, O) deep output */
    float *logits; /* (B, T, V) */
    /* Optional dropout on the deep output (training): with u_drop set and drop > 0 the output layer
     * reads u_drop = dropout(u) (B, T, O), mask of key drop_key (inverted dropout, layers.h);
     * u_drop NULL or drop 0: none. */
    float *u_drop;
    float drop;
    uint64_t drop_key;
} cgru_acts_t;

/* Teacher-forced run: emb (B, T, E) the previous targets' embeddings, s0 (B, H) the initial state,
 * enc (B, S, Dv) the encoder states, slen (B) valid source positions (NULL: all S). */
void nn_cgru_forward(const cgru_acts_t *acts, const float *emb, const float *s0, const float *enc,
                     const int *slen, const cgru_weights_t *w, int B, int T, int S, cgru_dims_t d);
/* demb (B, T, E), ds0 (B, H), denc (B, S, Dv) (any may be NULL) and dw += the gradients given
 * dlogits (B, T, V). scratch: nn_cgru_backward_scratch floats. */
size_t nn_cgru_backward_scratch(int B, int T, int S, cgru_dims_t d);
void nn_cgru_backward(float *demb, float *ds0, float *denc, const cgru_weights_t *dw,
                      float *scratch, const float *dlogits, const float *emb, const float *s0,
                      const float *enc, const int *slen, const cgru_weights_t *w,
                      const cgru_acts_t *acts, int B, int T, int S, cgru_dims_t d);

/* One decoding step over R rows (no allocation): from e_prev (R, E) and s_prev (R, H) computes
 * s (R, H), ctx (R, Dv), alpha (R, S) (the attention, for coverage penalties) and logits (R, V)
 * (NULL: skip the output layer). kp (B, S, A) from nn_additive_keys_forward on enc (B, S, Dv);
 * row r reads sentence src_of_row[r] (NULL: r). scratch: nn_cgru_step_scratch(R, d) floats. */
size_t nn_cgru_step_scratch(int R, cgru_dims_t d);
void nn_cgru_step_forward(float *s, float *ctx, float *alpha, float *logits, float *scratch,
                          const float *e_prev, const float *s_prev, const float *kp,
                          const float *enc, const int *slen, const int *src_of_row,
                          const cgru_weights_t *w, int R, int S, cgru_dims_t d);

/* ------------------------------------------------------------ GNMT's attentive bottom decoder layer
 * GNMT: the attention is computed from the bottom decoder layer's output of the previous step
 * over the top encoder layer, and its context a_t is fed to every decoder layer at step t:
 *   a_t   = Att(query y_{t-1}; keys = values = enc)        (y_{-1} = h0, zeros when NULL)
 *   y_t   = LSTM([e_t; a_t], (y_{t-1}, c_{t-1}))           w_ih (4H, E + Dv): columns [e | a]
 * The upper layers then run as plain sequences (nn_lstm_forward) over [y^{l-1}; a] for all steps,
 * since every a_t is known once this layer has run. e_t's share of the input projection is one
 * GEMM over all steps (the columns [0, E) of w_ih, read through its row stride); a_t's is one
 * GEMM per step (M = B). */
typedef struct {
    int H, E, Dv, A;
} gnmt_dec_dims_t;

typedef struct {
    rnn_cell_t lstm; /* w_ih (4H, E + Dv), w_hh (4H, H), b_ih, b_hh (4H) */
    float *att_wq;   /* (A, H) */
    float *att_wk;   /* (A, Dv) */
    float *att_b;    /* (A) or NULL */
    float *att_v;    /* (A) */
} gnmt_dec_weights_t;

typedef struct {
    float *kp;    /* (B, S, A) */
    float *qp;    /* (T, B, A) */
    float *alpha; /* (T, B, S) */
    float *ctx;   /* (B, T, Dv) the contexts a_t */
    float *gates; /* (B, T, 4H) */
    float *cell;  /* (B, T, H) */
    float *y;     /* (B, T, H) the layer's outputs */
} gnmt_dec_acts_t;

/* Teacher-forced: emb (B, T, E), h0, c0 (B, H) or NULL, enc (B, S, Dv), slen (B) or NULL. */
void nn_gnmt_dec_bottom_forward(const gnmt_dec_acts_t *acts, const float *emb, const float *h0,
                                const float *c0, const float *enc, const int *slen,
                                const gnmt_dec_weights_t *w, int B, int T, int S, gnmt_dec_dims_t d);
/* demb (B, T, E), dh0, dc0 (B, H), denc (B, S, Dv) (any may be NULL) and dw += the gradients given
 * dy (B, T, H) and dctx (B, T, Dv) (the upper layers' gradient of a; may be NULL). scratch:
 * nn_gnmt_dec_bottom_backward_scratch floats. */
size_t nn_gnmt_dec_bottom_backward_scratch(int B, int T, int S, gnmt_dec_dims_t d);
void nn_gnmt_dec_bottom_backward(float *demb, float *dh0, float *dc0, float *denc,
                                 const gnmt_dec_weights_t *dw, float *scratch, const float *dy,
                                 const float *dctx, const float *emb, const float *h0,
                                 const float *c0, const float *enc, const int *slen,
                                 const gnmt_dec_weights_t *w, const gnmt_dec_acts_t *acts, int B,
                                 int T, int S, gnmt_dec_dims_t d);
/* One decoding step over R rows: ctx (R, Dv), alpha (R, S), h, c (R, H) from e (R, E), h_prev,
 * c_prev (R, H); kp (B, S, A) and enc (B, S, Dv) read through src_of_row (NULL: r). scratch:
 * nn_gnmt_dec_bottom_step_scratch floats. */
size_t nn_gnmt_dec_bottom_step_scratch(int R, gnmt_dec_dims_t d);
void nn_gnmt_dec_bottom_step_forward(float *h, float *c, float *ctx, float *alpha, float *scratch,
                                     const float *e, const float *h_prev, const float *c_prev,
                                     const float *kp, const float *enc, const int *slen,
                                     const int *src_of_row, const gnmt_dec_weights_t *w, int R,
                                     int S, gnmt_dec_dims_t d);

/* ------------------------------------------------------------ the attention GRU's initial state
 * (the SDL systems' decoder: s0 from the mean of the encoder states) */

/* s0 (N, Hd) = tanh(W_init · mean (N, Dv) + b_init), mean[i] = the mean of enc[i, j] (N, S, Dv)
 * over j < slen[i]. mean is saved (the backward reads it). */
void nn_gru_init_state_forward(float *s0, float *mean, const float *enc, const int *slen, const float *w_init,
                               const float *b_init, int N, int S, int Dv, int Hd);
/* denc (N, S, Dv), dw_init, db_init += the gradients given ds0 (N, Hd); scratch N·Hd + Dv floats. */
void nn_gru_init_state_backward(float *denc, float *dw_init, float *db_init, float *scratch, const float *ds0,
                                const float *s0, const float *mean, const int *slen, const float *w_init, int N,
                                int S, int Dv, int Hd);

#endif
