// GEMM micro-kernel and vector math for one instruction set (flags set in CMakeLists.txt).
#define MIMI_ISA_NS isa_avx2
#define MIMI_ISA_NAME "avx2"
#define MIMI_VW 8
#define MIMI_MVEC(f) _ZGVdN8v_##f
#define MIMI_MR 6
#include "kernels/cpu/gemm_isa.inc"
#include "kernels/cpu/elementwise_isa.inc"
#include "kernels/cpu/isa_table.inc"
