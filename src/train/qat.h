/*
 * qat.h — quantization-aware training by fake quantization (`tern train --qat int8`; issue 28,
 * point 3, the Transformer and GRU half).
 *
 * Tern's int8 inference stores every weight matrix its family's description marks DESC_Q8
 * (desc.h: what `tern convert --quantize int8` writes as int8 with "<name>_scale", and what
 * `--compute-type int8` quantizes at load) per output row:
 *
 *     scale_r = 127 / max_k |W[r, k]|          (float32; 1 for an all-zero row)
 *     q[r, k] = nearbyint(float(W[r, k] · scale_r)) in [−127, 127]   (round half to even)
 *
 * (quantize_rows_s8, kernels.h: the function inference calls), and multiplies q, dequantizing
 * with 1 / scale_r. Fake quantization puts exactly that rounding into training: before the
 * forward passes of an update, every such tensor W of the parameter buffer is replaced, in place,
 * by its dequantized int8 value
 *
 *     fq(W)[r, k] = q[r, k] / scale_r
 *
 * and the float32 master values are set aside; the forward and backward passes of the update
 * (every micro-batch of gradient accumulation) run on fq(W) and accumulate the gradient with
 * respect to fq(W); then the master values come back, and the optimizer updates them with that
 * gradient. This is the straight-through estimator: d fq(W) / dW is taken as the identity
 * (per-row max scaling clips nothing, so there is no range outside which to zero it). Tensors
 * that are not DESC_Q8 (biases, layer norms, position tables, a GRU's or GNMT's embeddings) stay
 * float32, as in inference. Activations: with --qat int8 they stay float32 (inference quantizes
 * them per row at run time); --qat int8-act (the Transformer, the attention GRU: nn/rnn.h
 * nn_rnn_actq_begin) rounds every linear layer's input rows
 * as inference does too (u8 = nearbyint(x * 127 / max|x| + 128), back to x's scale), the weight
 * gradients taken against those rows and the input gradients passed straight through.
 *
 * fq is a function of the master values alone, so checkpoints store the master values (the
 * float32 model: `tern convert --quantize int8` of it gives exactly the integers training used)
 * and a resumed run computes the same updates.
 *
 * One case cannot be mirrored in place: a stored tensor tied to a name of the other kind (a GRU's
 * or GNMT's tied projection, int8 in inference, is its float32 embedding table): qat_new refuses
 * it with a message naming the tensors.
 *
 * Legend: R rows (output features), K columns of one weight matrix.
 */
#ifndef TERN_TRAIN_QAT_H
#define TERN_TRAIN_QAT_H

#include "base/base.h"
#include "train/family.h"

/* `tern train --qat` values. */
/* int8: the weights; int8-act: the weights and every linear layer's input rows (the Transformer and
 * the attention GRU: train_model_t.act_fq, kernels.h fake_quantize_rows_act), what int8 inference
 * rounds at run time. */
typedef enum { QAT_NONE = 0, QAT_INT8 = 1, QAT_INT8_ACT = 2 } qat_mode_t;

/* The mode of a name ("none", "int8", "int8-act"); -1 for another name. */
int qat_mode_parse(const char *name);
const char *qat_mode_name(int mode);

typedef struct qat qat_t;

/* The fake quantization of model m's DESC_Q8 tensors (its family's description). Errors: a
 * family without a description, a tied tensor whose names differ in kind. */
tern_status_t qat_new(qat_t **q, const train_model_t *m, qat_mode_t mode);
void qat_free(qat_t *q);

/* Tensors and floats fake-quantized. */
int qat_count(const qat_t *q);
size_t qat_numel(const qat_t *q);
/* Whether m->tensors[i] is fake-quantized. */
int qat_tensor_on(const qat_t *q, int i);

/* Before the forward passes: sets the master values aside and writes fq(W) into m->params (then
 * m->family->params_changed). Idempotent while entered. */
void qat_enter(qat_t *q, train_model_t *m);
/* After the backward passes: the master values back into m->params (then params_changed). */
void qat_leave(qat_t *q, train_model_t *m);

/* fq in place on a (R, K) row-major matrix: quantize_rows_s8 then q / scale, row by row. qrow: K
 * bytes of scratch. */
void qat_fake_quantize(float *w, int R, int K, int8_t *qrow);

#endif
