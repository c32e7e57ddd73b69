// The register-tiled GEMM as device code, shared by the ops that are a GEMM underneath: the GEMM
// itself, the convolution (B the input window read in place: implicit GEMM) and the transposed
// convolution (all phases stacked as rows). The operands are loaders (at(row, col); where `vec`,
// also at4 for 4 consecutive columns) and the result goes through a store(row, col, sum), so each
// op maps its tensors without copying them. Included by kernels/gpu/*.cu only, after vendor.h.
//
// C[M,N] = A[M,K] * B[K,N], handed to the store (MatrixC: + bias[row], then + C when
// accumulating). A block of 256 threads owns a 64 x 64 tile of C, each thread a 4 x 4 sub-tile held in registers (16 FMAs per 8
// shared-memory reads). K advances 16 at a time through two shared-memory buffers: the next
// step's global loads are issued before this step's FMAs and stored after them, so their latency
// hides behind the arithmetic, with one barrier per step.
//
// Summation contract, the GPU backend's one order (what makes batched == alone and streaming ==
// offline hold bitwise on the GPU, whichever kernel a shape takes): the K terms of an output are
// cut into chunks of kChunk = 32 consecutive k; each chunk is summed in k order, one fmaf per term,
// starting from 0; the chunk sums are added in chunk order to a total starting from 0 (a last,
// shorter chunk included, no empty chunk added); then the bias, then C. One thread can sum a whole
// output this way (the tiled kernel, the one-thread-per-output kernels), or the chunks can be
// spread over threads and added in order afterwards (gemm_splitk_kernel): the bits are the same.
// ChunkedSum below is that order for a thread that sees the terms one by one.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/gpu/epilogue.h"

namespace mimi::gpu::tile {

constexpr int kBM = 64, kBN = 64, kBK = 16;  // block tile of C, and K per step
constexpr int kTM = 4, kTN = 4;              // per-thread tile of C
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);
static_assert(kThreads == 256 && kBM * kBK == 4 * kThreads && kBK * kBN == 4 * kThreads,
              "each thread loads one group of 4 floats of A and of B per step");
constexpr int64_t kMinSide = 32;  // M and N from which the tiled kernel pays (fewer: most threads idle)
constexpr int kChunk = 32;        // the summation contract's chunk of consecutive k
static_assert(kChunk % kBK == 0, "the tiled kernel folds a chunk after whole K steps");

// The contract's order for one thread that sees an output's terms in k order: add(a, b) is the
// term a*b; value() the sum. (Only kernels whose terms come one at a time use it: the tiled and
// split-K kernels fold their chunks themselves.)
struct ChunkedSum {
  float total = 0.0f, part = 0.0f;
  int n = 0;  // terms in `part`
  __device__ __forceinline__ void add(float a, float b) {
    part = fmaf(a, b, part);
    if (++n == kChunk) total += part, part = 0.0f, n = 0;
  }
  __device__ __forceinline__ float value() const { return n > 0 ? total + part : total; }
};

// 4 consecutive floats from global memory; p is 16-byte aligned (the caller checked)
__device__ __forceinline__ void load4(const float* p, float v[4]) {
#if defined(MIMI_GPU_EMULATE)
  std::memcpy(v, p, 4 * sizeof(float));
#else
  const float4 q = *reinterpret_cast<const float4*>(p);
  v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
#endif
}

inline bool aligned16(const float* p, int64_t ld) { return reinterpret_cast<uintptr_t>(p) % 16 == 0 && ld % 4 == 0; }

// v[i] = op.at(r, c + i) for the valid entries (the row valid and c + i < c_end), 0 for the
// others; one at4 where the loader has it and all four are valid.
template <class Op>
__device__ __forceinline__ void load_group(const Op& op, int64_t r, int64_t c, bool row_valid, int64_t c_end,
                                           float v[4]) {
  if constexpr (Op::vec) {
    if (row_valid && c + 3 < c_end) {
      op.at4(r, c, v);
      return;
    }
  }
  for (int i = 0; i < 4; ++i) v[i] = row_valid && c + i < c_end ? op.at(r, c + i) : 0.0f;
}

// A row-major matrix operand with row stride ld; kVec: rows 16-byte aligned (float4 loads).
template <bool kVec>
struct Matrix {
  static constexpr bool vec = kVec;
  const float* p;
  int64_t ld;
  __device__ __forceinline__ float at(int64_t r, int64_t c) const { return p[r * ld + c]; }
  __device__ __forceinline__ void at4(int64_t r, int64_t c, float v[4]) const { load4(p + r * ld + c, v); }
};

// The plain result: C[row, col] = sum (+ bias[row]) (+ the old C[row, col] when accumulating).
struct MatrixC {
  float* p;
  int64_t ld;
  const float* bias;  // [M] or nullptr
  bool accumulate;
  __device__ __forceinline__ void store(int64_t row, int64_t col, float sum) const {
    float* c = p + row * ld + col;
    const float v = bias ? sum + bias[row] : sum;
    *c = accumulate ? *c + v : v;
  }
};

// Fused epilogues (kernels/gpu/epilogue.h has the formulas the unfused kernels share):
// C[row, col] = gelu_erf(sum): a linear layer and its GELU in one pass.
struct GeluC {
  float* p;
  int64_t ld;
  __device__ __forceinline__ void store(int64_t row, int64_t col, float sum) const {
    p[row * ld + col] = gelu_erf_value(sum);
  }
};
// C[row, col] += scale[row] * sum: a linear layer and its layer-scaled residual add in one pass.
struct ScaleAddC {
  float* p;
  int64_t ld;
  const float* scale;  // [M]
  __device__ __forceinline__ void store(int64_t row, int64_t col, float sum) const {
    float* c = p + row * ld + col;
    *c = scale_add_value(*c, scale[row], sum);
  }
};

// One block's tile. The loaders are asked only inside [M, K] and [K, N]; the store only inside [M, N].
template <class AOp, class BOp, class COp>
__global__ void MIMI_BOUNDS(kThreads) gemm_tile_kernel(int64_t M, int64_t N, int64_t K, AOp a, BOp b, COp c) {
  __shared__ float As[2][kBK][kBM];  // [buffer][k][m]: A's step transposed, so a thread's 4 rows are adjacent
  __shared__ float Bs[2][kBK][kBN];  // [buffer][k][n]
  const int tid = int(threadIdx.x);
  const int64_t m0 = int64_t(blockIdx.y) * kBM, n0 = int64_t(blockIdx.x) * kBN;
  // loading: 64 rows x 4 groups of A, 16 rows x 16 groups of B (consecutive threads, consecutive addresses)
  const int a_row = tid / (kBK / 4), a_col = (tid % (kBK / 4)) * 4;
  const int b_row = tid / (kBN / 4), b_col = (tid % (kBN / 4)) * 4;
  // computing: rows m0 + ty*4 .. +3, columns n0 + tx*4 .. +3
  const int ty = tid / (kBN / kTN), tx = tid % (kBN / kTN);

  // this thread's share of step k0, zeros outside the matrices
  float a_next[4], b_next[4];
  auto fetch = [&](int64_t k0) {
    load_group(a, m0 + a_row, k0 + a_col, m0 + a_row < M, K, a_next);
    load_group(b, k0 + b_row, n0 + b_col, k0 + b_row < K, N, b_next);
  };
  auto stash = [&](int buf) {
    for (int i = 0; i < 4; ++i) As[buf][a_col + i][a_row] = a_next[i], Bs[buf][b_row][b_col + i] = b_next[i];
  };

  float acc[kTM][kTN], total[kTM][kTN];  // the current chunk's sums, and the folded chunks' (the contract)
  for (int i = 0; i < kTM; ++i)
    for (int j = 0; j < kTN; ++j) acc[i][j] = 0.0f, total[i][j] = 0.0f;
  const int64_t steps = (K + kBK - 1) / kBK;
  if (steps > 0) fetch(0), stash(0);
  __syncthreads();
  for (int64_t s = 0; s < steps; ++s) {
    const int cur = int(s & 1);
    const int64_t k0 = s * kBK;
    if (s + 1 < steps) fetch(k0 + kBK);  // in flight during the FMAs below
    const int kn = K - k0 < kBK ? int(K - k0) : kBK;  // no padding terms: exactly K terms per output
    for (int k = 0; k < kn; ++k) {
      float a[kTM], bv[kTN];
      for (int i = 0; i < kTM; ++i) a[i] = As[cur][k][ty * kTM + i];
      for (int j = 0; j < kTN; ++j) bv[j] = Bs[cur][k][tx * kTN + j];
      for (int i = 0; i < kTM; ++i)
        for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
    }
    if ((s + 1) % (kChunk / kBK) == 0 || s + 1 == steps) {  // a chunk ends here (the last may be short)
      for (int i = 0; i < kTM; ++i)
        for (int j = 0; j < kTN; ++j) total[i][j] += acc[i][j], acc[i][j] = 0.0f;
    }
    // The other buffer was last read in step s - 1, which every thread finished before the
    // barrier that ended it: writing it now races with no reader.
    if (s + 1 < steps) stash(1 - cur);
    __syncthreads();
  }
  for (int i = 0; i < kTM; ++i) {
    const int64_t row = m0 + ty * kTM + i;
    if (row >= M) break;
    for (int j = 0; j < kTN; ++j) {
      const int64_t col = n0 + tx * kTN + j;
      if (col >= N) break;
      c.store(row, col, total[i][j]);
    }
  }
}

// Launches the tiled kernel for an M x N result (M, N >= 1).
template <class AOp, class BOp, class COp>
void launch(int64_t M, int64_t N, int64_t K, AOp a, BOp b, COp c) {
  // through a function pointer: a template-id with commas cannot pass through the launch macro
  const auto gemm_tile = &gemm_tile_kernel<AOp, BOp, COp>;
  const dim3 grid(unsigned((N + kBN - 1) / kBN), unsigned((M + kBM - 1) / kBM));
  MIMI_LAUNCH(gemm_tile, grid, kThreads, 0, current_stream(), M, N, K, a, b, c);
}

// ---- few rows (M < 32, N >= 32): one output per thread, 16 x 16 tiles ----

constexpr int kSmallTile = 16;

template <class BOp, class COp>
__global__ void MIMI_BOUNDS(kSmallTile * kSmallTile) gemm_small_kernel(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, BOp b, COp c) {
  __shared__ float As[kSmallTile][kSmallTile];
  __shared__ float Bs[kSmallTile][kSmallTile];
  const int64_t row = int64_t(blockIdx.y) * kSmallTile + threadIdx.y, col = int64_t(blockIdx.x) * kSmallTile + threadIdx.x;
  ChunkedSum acc;
  for (int64_t k0 = 0; k0 < K; k0 += kSmallTile) {
    const int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = row < M && ka < K ? A[row * lda + ka] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = kb < K && col < N ? b.at(kb, col) : 0.0f;
    __syncthreads();
    const int kn = K - k0 < kSmallTile ? int(K - k0) : kSmallTile;  // no padding terms: exactly K terms
    for (int k = 0; k < kn; ++k) acc.add(As[threadIdx.y][k], Bs[k][threadIdx.x]);
    __syncthreads();
  }
  if (row < M && col < N) c.store(row, col, acc.value());
}

// ---- few columns (N < 32: a streaming step's frames, a GEMV at batch 1): split K ----
//
// A block of 8 warps owns 8 rows (one per warp) and 8 columns. The K terms are the contract's
// chunks of 32; lane l of a warp sums chunks l, l + 32, ... of its row for the 8 columns (32
// consecutive k each, so a lane's A reads are 128 contiguous bytes, float4 where aligned). After
// each round of 32 chunks the lanes' sums go to shared memory and lane j adds them, in chunk
// order, to column j's total. A streaming step's serial chain shrinks from K dependent FMAs to
// 32 + K/32 (the old one-output-per-thread kernel summed all K terms of an output in one thread:
// 8192 for the 512->1024 k16 conv at one frame).
//
// B goes through shared memory: the block loads a round's B rows once, coalesced (consecutive
// threads, consecutive columns), for its 8 warps. Read straight from global memory, as at first,
// every lane of a warp wanted a different k row (32 lines per load instruction, one load per FMA):
// measured on the H200 (2026-12-04) that made the transformer of a 1 s input 7.5 ms (175 GFLOP/s)
// and the streaming step 3.7 ms. In shared memory a chunk's rows are padded by 4 floats, so the 8
// lanes of a quarter-warp reading float4s of 8 different chunks hit 8 different bank groups.

constexpr int kSplitRows = 8, kSplitCols = 8, kSplitThreads = 32 * kSplitRows;
constexpr int kSplitChunkStride = kChunk * kSplitCols + 4;  // floats per chunk in shared B (16-byte multiple)

template <class AOp, class BOp, class COp>
__global__ void MIMI_BOUNDS(kSplitThreads) gemm_splitk_kernel(int64_t M, int64_t N, int64_t K, AOp a, BOp b, COp c) {
  // a round's B: [chunk][k in chunk][column], padded; 16-byte aligned for the float4 reads
  alignas(16) __shared__ float bs[32 * kSplitChunkStride];
  __shared__ float sums[kSplitRows][32][kSplitCols + 1];      // [warp][lane = chunk in round][column], padded
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;  // 32-lane groups also on wave64
  const int64_t row = int64_t(blockIdx.y) * kSplitRows + warp, col0 = int64_t(blockIdx.x) * kSplitCols;
  const int ncols = N - col0 < kSplitCols ? int(N - col0) : kSplitCols;
  const bool row_valid = row < M;
  const int64_t chunks = (K + kChunk - 1) / kChunk;
  float total = 0.0f;  // lane j < ncols: column col0 + j
  // every thread runs every round (uniform trip count): the barriers below are block-uniform
  for (int64_t round0 = 0; round0 < chunks; round0 += 32) {
    const int64_t kbase = round0 * kChunk, krows = K - kbase < 32 * kChunk ? K - kbase : 32 * kChunk;
    for (int64_t i = threadIdx.x; i < krows * kSplitCols; i += kSplitThreads) {
      const int64_t kk = i / kSplitCols;
      const int j = int(i % kSplitCols);
      bs[(kk / kChunk) * kSplitChunkStride + (kk % kChunk) * kSplitCols + j] = j < ncols ? b.at(kbase + kk, col0 + j) : 0.0f;
    }
    __syncthreads();
    const int64_t chunk = round0 + lane;
    float acc[kSplitCols];
    for (int j = 0; j < kSplitCols; ++j) acc[j] = 0.0f;
    if (row_valid && chunk < chunks) {
      const int64_t k0 = chunk * kChunk, k1 = K - k0 < kChunk ? K : k0 + kChunk;
      const float* bl = bs + lane * kSplitChunkStride;
      for (int64_t k = k0; k < k1; k += 4) {
        float av[4];
        load_group(a, row, k, true, k1, av);  // zeros past k1 are never used below
        const int kn = k1 - k < 4 ? int(k1 - k) : 4;
        for (int i = 0; i < kn; ++i) {
          float bv[kSplitCols];  // the columns past ncols are zeros: their sums are never stored
          load4(bl + (k - k0 + i) * kSplitCols, bv);
          load4(bl + (k - k0 + i) * kSplitCols + 4, bv + 4);
          for (int j = 0; j < kSplitCols; ++j) acc[j] = fmaf(av[i], bv[j], acc[j]);
        }
      }
    }
    for (int j = 0; j < kSplitCols; ++j) sums[warp][lane][j] = acc[j];
    __syncthreads();
    if (lane < ncols) {
      const int in_round = chunks - round0 < 32 ? int(chunks - round0) : 32;
      for (int i = 0; i < in_round; ++i) total += sums[warp][i][lane];
    }
    __syncthreads();  // sums and bs are rewritten by the next round
  }
  if (row_valid && lane < ncols) c.store(row, col0 + lane, total);
}

// Launches the split-K kernel for an M x N result (M, N >= 1; meant for N < kMinSide).
template <class AOp, class BOp, class COp>
void launch_splitk(int64_t M, int64_t N, int64_t K, AOp a, BOp b, COp c) {
  const auto splitk = &gemm_splitk_kernel<AOp, BOp, COp>;  // a template-id cannot pass through the launch macro
  const dim3 grid(unsigned((N + kSplitCols - 1) / kSplitCols), unsigned((M + kSplitRows - 1) / kSplitRows));
  MIMI_LAUNCH(splitk, grid, kSplitThreads, 0, current_stream(), M, N, K, a, b, c);
}

// C[M,N] = A[M,K] (row stride lda) * B (through the loader b) into the store c, on the kernel
// for the size: the tiled one for M, N >= kMinSide, the split-K one for few columns, else the
// 16 x 16 one. All sum in the contract's order, so a column's bits do not depend on which runs.
// The caller checks the launch.
template <class BOp, class COp>
void gemm_with(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, BOp b, COp c) {
  if (M <= 0 || N <= 0) return;
  const bool vec_a = aligned16(A, lda);
  if (M >= kMinSide && N >= kMinSide) {
    if (vec_a) launch(M, N, K, Matrix<true>{A, lda}, b, c);
    else launch(M, N, K, Matrix<false>{A, lda}, b, c);
  } else if (N < kMinSide) {
    if (vec_a) launch_splitk(M, N, K, Matrix<true>{A, lda}, b, c);
    else launch_splitk(M, N, K, Matrix<false>{A, lda}, b, c);
  } else {
    const dim3 block(kSmallTile, kSmallTile);
    const dim3 grid(unsigned((N + kSmallTile - 1) / kSmallTile), unsigned((M + kSmallTile - 1) / kSmallTile));
    const auto small = &gemm_small_kernel<BOp, COp>;  // a template-id cannot pass through the launch macro
    MIMI_LAUNCH(small, grid, block, 0, current_stream(), M, N, K, A, lda, b, c);
  }
}

}  // namespace mimi::gpu::tile
