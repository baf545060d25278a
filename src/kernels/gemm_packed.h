/*
 * gemm_packed.h — float32 linear layers with weights packed once, at load time, into the blocked
 * layout of oneDNN's matmul kernel (brgemm), with the bias and an optional ReLU fused. Where oneDNN
 * has no such kernel for the shape (oneDNN 2.6 offers float32 brgemm only from AVX512_CORE up: on
 * AVX2-only CPUs, or under ONEDNN_MAX_CPU_ISA=AVX2), Tern's own AVX2 + FMA kernel on its own panel
 * layout runs instead (gemm_f32p.h), behind the same calls.
 *
 * Why: dnnl_sgemm packs its B operand on every call. For the few rows (M = 1..128) of a decoder
 * step that packing is a large part of the work; with the weights packed once the same products
 * run 1.3-2x faster (bench/bench_gemm.c "packed" column, docs/benchmarks.md).
 *
 * Legend: M rows of activations, N output features, K input features.
 *
 * A packed layer is one buffer (header + weights) the caller allocates (64-byte aligned, 
 * gemm_packed_size() bytes) and frees; it is read-only after gemm_pack_linear() and may run on
 * several threads at once. The matmul kernels (one per M, thread count and shape) are made on
 * first use and kept for the life of the process.
 */
#ifndef TERN_GEMM_PACKED_H
#define TERN_GEMM_PACKED_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of the packed form of an (N, K) weight (0 only when N or K <= 0: the plain weight then). */
size_t gemm_packed_size(int N, int K);

/* Packs W (N, K) row-major (out x in) into buf; bias (N) may be NULL and must outlive buf; relu:
 * apply max(x, 0) after the bias. Returns 0, or -1 (buf unusable) when the kernel is missing. */
int gemm_pack_linear(void *buf, const float *W, const float *bias, int N, int K, int relu);

/* out (M, N) = inp (M, K) . W^T + bias, then ReLU when packed with relu. Rows of inp and out are
 * contiguous (leading dimensions K and N). Returns 0, or -1 when no kernel could be made for this
 * M (out untouched: fall back to the plain weight). */
int gemm_packed_forward(float *out, const float *inp, const void *packed, int M);

/* int8: the same for a layer's s8 weights Q (N, K) row-major, run on u8 activation rows with int32
 * sums (oneDNN's brgemm kernel with VNNI: vpdpbusd, exact 32-bit sums; only exact where
 * linear_int8_backend_name() says AVX512_VNNI: linear.c decides). No bias, no ReLU, no offsets:
 * acc (M, N) = a (M, K) . Q^T exactly, as int32. Sizes and returns as their float32 siblings. */
size_t gemm_packed_size_s8(int N, int K);
int gemm_pack_s8(void *buf, const int8_t *Q, int N, int K);
int gemm_packed_forward_s8(int32_t *acc, const uint8_t *a, const void *packed, int M);

/* Whether gemm_pack_linear packs an (N, K) float32 layer on Tern's panels (gemm_f32p.h: oneDNN has
 * no blocked kernel for it, or TERN_GEMM_PACKED=tern), and packing on those panels whatever oneDNN
 * offers: a layer made of some of another's rows (a vocabulary map's gathered output rows) then
 * gives the same bits as the whole layer on those rows (each output one FMA chain over k). */
int gemm_packed_f32_is_tern(int N, int K);
size_t gemm_packed_size_tern(int N, int K);
int gemm_pack_linear_tern(void *buf, const float *W, const float *bias, int N, int K, int relu);

/* The weights part of a packed buffer (float32 or int8) and its size in bytes (tests compare it). */
const void *gemm_packed_weights(const void *packed, size_t *bytes);

/* Which kernel runs a packed layer: "oneDNN brgemm" (oneDNN's blocked layout) or "Tern panels"
 * (gemm_f32p.h: AVX2 or AVX-512 tiles, f32p_tiles_name; the same bits). */
const char *gemm_packed_kernel_name(const void *packed);

/* The kernel a model-shaped float32 layer (512 x 512) gets on this machine, as gemm_packed_kernel_name
 * says it plus a few words (`tern cpu`). */
const char *gemm_packed_f32_backend_name(void);

/* Reading a float32 packed layer's weights back (e.g. an exact dot over a few of its rows): W[n, k]
 * of the layer packed from W (N, K) is gemm_packed_weight_at(packed, n, k), and lies in
 * gemm_packed_weights() at float element off_k[k] + off_n[n] (off_k: K entries, off_n: N, filled
 * by gemm_packed_offsets, which returns 0, or -1 for a layout it cannot read: int8, or not one of
 * the two float32 layouts). Both float32 layouts (oneDNN's blocked one, Tern's panels) separate
 * into one term per dimension. */
int gemm_packed_offsets(const void *packed, int64_t *off_k, int64_t *off_n);
float gemm_packed_weight_at(const void *packed, int n, int k);

/* Largest M one kernel call covers; larger M runs in chunks of this many rows. */
#define GEMM_PACKED_MAX_M 128

#endif
