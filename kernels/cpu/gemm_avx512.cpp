// GEMM micro-kernel and vector math for one instruction set (flags set in CMakeLists.txt).
#define MIMI_ISA_NS isa_avx512
#define MIMI_ISA_NAME "avx512"
#define MIMI_VW 16
#define MIMI_MVEC(f) _ZGVeN16v_##f
#define MIMI_MR 8
#include "kernels/cpu/gemm_isa.inc"
#include "kernels/cpu/elementwise_isa.inc"
#include "kernels/cpu/isa_table.inc"
