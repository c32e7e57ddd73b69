// GEMM micro-kernel and vector math for aarch64 Advanced SIMD (flags set in CMakeLists.txt):
// 128-bit vectors, 32 registers (so 8-row tiles, as AVX-512), and no libmvec (vmath.inc).
#define MIMI_ISA_NS isa_neon
#define MIMI_ISA_NAME "neon"
#define MIMI_VW 4
#define MIMI_MR 8
#include "kernels/cpu/gemm_isa.inc"
#include "kernels/cpu/elementwise_isa.inc"
#include "kernels/cpu/isa_table.inc"
