// The ops Mimi is built from: one contract, three implementations (kernels/README.md: where an
// op lives, and the places a new op touches, in order).
//
//   mimi::ref  - naive, obviously-correct loops (kernels/ref/*.cpp). Never optimized: they are
//                the yardstick every fast kernel is tested against.
//   mimi::cpu  - the fast CPU backend (kernels/cpu/*.cpp).
//   mimi::gpu  - the GPU backend (kernels/gpu/*.cu: CUDA, HIP, or emulated on CPU threads), on
//                device pointers (kernels/gpu/ops.h).
//
// Every declaration below exists in each namespace with the same signature (the macro
// MIMI_DECLARE_OPS stamps them out); tests/test_ops.cpp runs one table of cases on every backend
// against mimi::ref.
//
// Layout conventions (batch 1, row-major, float32):
//   signal  [C, T]     channel-major: row c holds T consecutive time steps.
// Pointers never alias unless a comment says so. Shapes are validated by the callers in
// codec/ (which throw); kernels assume valid shapes.
//
// Column invariance (mimi::cpu): gemm (with or without accumulate) and linear, layer_norm, elu,
// gelu_erf, add_inplace, bias_add, layer_scale_add, rvq_encode and rvq_decode give every column
// t of their output the same bits whatever the number of columns, the column's position and the
// thread count: column t depends on column t of the inputs alone, summed in one fixed order
// (gemm's skinny N <= 4 path adds exactly as its blocked path does). Batched plans rely on it:
// streams concatenated along T encode to the same codes as each stream alone. It holds within
// one ISA (MIMI_CPU_ISA); ISAs, and the ref and GPU backends, round differently. Checked by
// tests/test_kernels.cpp "column invariance".
#pragma once

#include <cstddef>
#include <cstdint>

namespace mimi {

enum class PadMode { Zero, Replicate };
enum class RopeLayout { Interleaved, RotateHalf };

// Causal 1-D convolution (moshi StreamingConv1d, offline, non-streaming).
//   left padding P = (K-1)*dilation + 1 - stride, no right padding;
//   T_out = (T_in + P - ((K-1)*dilation + 1)) / stride + 1   (floor), 0 if negative.
// Streaming passes the P inputs before x[:, 0] to the kernel (conv1d's `context`) instead.
struct Conv1dShape {
  int64_t in_channels = 1, out_channels = 1, kernel = 1, stride = 1, dilation = 1, groups = 1;
  int64_t length_in = 0;
  PadMode pad = PadMode::Zero;
  // The conv reads ELU(v) for every input value v it fetches (x, context and padding alike):
  // the SEANet's "ELU -> conv" without a separate pass over the activation.
  bool elu_input = false;

  int64_t span() const { return (kernel - 1) * dilation + 1; }
  int64_t context() const { return span() - stride; }  // P, the causal left context
  int64_t pad_left() const { return context(); }
  int64_t length_out() const {
    const int64_t padded = length_in + pad_left();
    return padded < span() ? 0 : (padded - span()) / stride + 1;
  }
};

// Transposed 1-D convolution with the causal right trim of moshi StreamingConvTranspose1d:
// the full output has (T_in-1)*stride + K samples; the last `trim_right` (= K - stride) are
// dropped, so T_out = T_in * stride.
// With trimmed = false the whole (T_in-1)*stride + K outputs are produced (streaming keeps the
// last K - stride as the overlap carried into the next chunk).
struct ConvTranspose1dShape {
  int64_t in_channels = 1, out_channels = 1, kernel = 1, stride = 1, groups = 1;
  int64_t length_in = 0;
  bool trimmed = true;

  int64_t overlap() const { return kernel - stride; }
  int64_t trim_right() const { return trimmed ? overlap() : 0; }
  int64_t length_out() const { return (length_in - 1) * stride + kernel - trim_right(); }
};

// One stream slot's part of a batched step, for the windowed GPU ops (kernels/gpu/ops.h
// rope_append, attention_window): its columns [offset, offset + length) of the step's [C, T_total]
// signals, the absolute position of its first column (the RoPE position; keys are kept by
// absolute position) and the slot whose key/value ring it reads and appends to. A table of them
// lives in the backend's memory (int32 x 4 each), written per step: a captured step replays it.
struct WindowSegment {
  int32_t offset = 0, length = 0, position = 0, slot = 0;
};
static_assert(sizeof(WindowSegment) == 4 * sizeof(int32_t), "staged as int32 quadruples");

// rvq_encode's workspace: the residual [Q, F], the dot products [bins, F] and |r|^2 [F].
inline int64_t rvq_work_floats(int64_t Q, int64_t F, int64_t bins) { return (Q + bins + 1) * F; }

#define MIMI_DECLARE_OPS                                                                        \
  /* C[M,N] = A[M,K] * B[K,N] (+ C if accumulate). Row strides lda, ldb, ldc. */                \
  void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,      \
            int64_t ldb, float* C, int64_t ldc, bool accumulate);                              \
                                                                                               \
  /* x [Cin, Tin]; w [Cout, Cin/groups, K]; bias [Cout] or nullptr; y [Cout, Tout].           \
     y = conv(x) + bias, or y += conv(x) + bias when accumulate (a fused residual add).         \
     context [Cin, P] or nullptr: the P inputs before x[:, 0] (streaming), used instead of the  \
     zero/replicate padding. */                                                                 \
  void conv1d(const Conv1dShape& s, const float* x, const float* w, const float* bias,         \
              float* y, bool accumulate, const float* context);                                \
                                                                                               \
  /* x [Cin, Tin]; w [Cin, Cout/groups, K]; bias [Cout] or nullptr; y [Cout, length_out()]. */ \
  void conv_transpose1d(const ConvTranspose1dShape& s, const float* x, const float* w,         \
                        const float* bias, float* y);                                          \
                                                                                               \
  /* y = x > 0 ? x : exp(x) - 1 (alpha 1), n elements; y may equal x. */                       \
  void elu(int64_t n, const float* x, float* y);                                               \
                                                                                               \
  /* y = 0.5 x (1 + erf(x / sqrt 2)), n elements; y may equal x. */                            \
  void gelu_erf(int64_t n, const float* x, float* y);                                          \
                                                                                               \
  /* y += x, n elements. */                                                                    \
  void add_inplace(int64_t n, const float* x, float* y);                                       \
                                                                                               \
  /* y[c, t] += bias[c]; y [C, T]. */                                                          \
  void bias_add(int64_t C, int64_t T, const float* bias, float* y);                            \
                                                                                               \
  /* Residual with layer scale: y[c,t] += scale[c] * x[c,t]; x, y [C, T]. */                   \
  void layer_scale_add(int64_t C, int64_t T, const float* scale, const float* x, float* y);    \
                                                                                               \
  /* LayerNorm over channels for every time step: x, y [C, T]; gamma, beta [C]; biased var. */ \
  void layer_norm(int64_t C, int64_t T, const float* x, const float* gamma, const float* beta, \
                  float eps, float* y);                                                        \
                                                                                               \
  /* Linear without bias in channel-major layout: y [out, T] = W [out, in] * x [in, T]. */       \
  void linear(int64_t in, int64_t out, int64_t T, const float* W, const float* x, float* y);    \
                                                                                               \
  /* RoPE in place on x [H*hd, T] (rows = head-major feature, columns = time). Position of    \
     column t is *position + t, where `position` points at one int32 in the backend's memory   \
     (device memory on a GPU), read when the op runs: a captured step replays with the        \
     position of the moment (codec/step_graph.h). angle_i = pos * freq_i, freq_i =             \
     exp(-ln(max_period) * 2i / hd), all in float32 like the official code. Interleaved: pairs \
     (2i, 2i+1); RotateHalf: pairs (i, i + hd/2). */                                           \
  void rope(int64_t H, int64_t hd, int64_t T, const int32_t* position, float max_period,       \
            RopeLayout layout, float* x);                                                      \
                                                                                               \
  /* Sliding-window causal attention, channel-major like every signal: q [H*hd, Tq],         \
     k, v [H*hd, Tk], out [H*hd, Tq] (row h*hd + d = feature d of head h). Query i sits at      \
     absolute step q_start + i, key j at k_start + j; the query sees the key iff               \
     0 <= (q_start+i) - (k_start+j) < context. out = softmax(q.k * scale) v; a query that      \
     sees no key gets zeros. Never materializes a Tq x Tk matrix. */                            \
  void attention(int64_t H, int64_t Tq, int64_t Tk, int64_t hd, int64_t q_start,              \
                 int64_t k_start, int64_t context, float scale, const float* q, const float* k, \
                 const float* v, float* out);                                                  \
                                                                                               \
  /* Residual vector quantization of x [Q, F] with n codebooks, each [bins, Q]               \
     (codebooks[j]), sq_norms[j] [bins] = |e|^2. codes [n, F]. Distance in torch.cdist's      \
     matmul form d = sqrt(max(0, |r|^2 - 2 r.e + |e|^2)); argmin, ties to the lowest index;     \
     the residual r_{k+1} = r_k - e_{c_k}. work: rvq_work_floats(Q, F, bins) floats of the     \
     backend's memory, the op's scratch (it allocates nothing: a captured step cannot). */      \
  void rvq_encode(int64_t Q, int64_t F, int64_t bins, int64_t n, const float* x,               \
                  const float* const* codebooks, const float* const* sq_norms, int32_t* codes,  \
                  float* work);                                                                \
                                                                                               \
  /* Sum of codebook vectors in codebook order: y [Q, F] = sum_j codebooks[j][codes[j, f]].    \
     Codes must be in [0, bins). */                                                             \
  void rvq_decode(int64_t Q, int64_t F, int64_t bins, int64_t n, const int32_t* codes,         \
                  const float* const* codebooks, float* y);

// SEANet residual block as one op (optional: a backend without it composes the ops above):
//   x [C, T] += conv2(ELU(conv1(ELU(x)))), conv1: C -> H, kernel K, dilation d, causal, its
//   left context `context` [C, P = (K-1)*d] of raw (pre-ELU) x, or zeros when nullptr;
//   conv2: H -> C pointwise. w1 [H, C, K], b1 [H], w2 [C, H, 1], b2 [C].
struct ResBlockShape {
  int64_t channels = 1, hidden = 1, kernel = 1, dilation = 1, length = 0;
  int64_t context() const { return (kernel - 1) * dilation; }
};
#define MIMI_DECLARE_RESBLOCK                                                                   \
  void resblock(const ResBlockShape& s, const float* w1, const float* b1, const float* w2,    \
                const float* b2, const float* context, float* x);

// Memory on a backend's device (plain host memory for the CPU backends), so that plans are
// written once: buffers, stream state and the copies between them all go through these.
// Pitches and widths count floats; copy2d's and add2d's source and destination must not overlap.
#define MIMI_DECLARE_MEMORY_OPS                                                                  \
  float* alloc(size_t n);             /* n zeroed floats */                                     \
  int32_t* alloc_i32(size_t n);       /* n zeroed int32 */                                      \
  void release(void* p);                                                                        \
  /* dst[r*dpitch + j] = src[r*spitch + j], r < rows, j < width */                              \
  void copy2d(float* dst, int64_t dpitch, const float* src, int64_t spitch, int64_t width,      \
              int64_t rows);                                                                    \
  /* dst[r*dpitch + j] += src[r*spitch + j] */                                                  \
  void add2d(float* dst, int64_t dpitch, const float* src, int64_t spitch, int64_t width,       \
             int64_t rows);                                                                     \
  void fill(float* dst, int64_t n, float value);                                                \
  void upload(float* dst, const float* host_src, size_t n);                                     \
  void download(float* host_dst, const float* src, size_t n);                                   \
  void upload_i32(int32_t* dst, const int32_t* host_src, size_t n);                             \
  void download_i32(int32_t* host_dst, const int32_t* src, size_t n);

namespace ref {
MIMI_DECLARE_OPS
MIMI_DECLARE_RESBLOCK
}
namespace cpu {
MIMI_DECLARE_OPS
MIMI_DECLARE_RESBLOCK
MIMI_DECLARE_MEMORY_OPS  // host memory; the ref backend uses these too
// Threads used by the CPU kernels (0 = default_num_threads()).
void set_num_threads(int n);
int num_threads();
// The CPUs this process may use: the smallest of the affinity mask, the cgroup CPU quota,
// SLURM_CPUS_PER_TASK and OMP_NUM_THREADS (kernels/cpu/cpu_budget.h).
int default_num_threads();
}  // namespace cpu

}  // namespace mimi
