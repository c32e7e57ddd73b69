// The element-wise formulas that a GEMM's store or operand loader may apply (a fused epilogue or
// prologue) and that the stand-alone element-wise kernels apply: one definition, so the fused and the unfused
// paths give the same bits (explicit fmaf: no compiler decides on contraction differently in
// the two places). Included by kernels/gpu/*.cu only, after vendor.h.
#pragma once

namespace mimi::gpu {

// 0.5 x (1 + erf(x / sqrt 2))
__device__ __forceinline__ float gelu_erf_value(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

// (x - mean) / std * gamma + beta, as LayerNorm applies it (rstd = 1 / std)
__device__ __forceinline__ float layer_norm_value(float x, float mean, float rstd, float gamma, float beta) {
  const float n = (x - mean) * rstd;
  return fmaf(n, gamma, beta);
}

// y + scale * x (a residual with layer scale)
__device__ __forceinline__ float scale_add_value(float y, float scale, float x) { return fmaf(scale, x, y); }

}  // namespace mimi::gpu
