// GEMM micro-kernel and vector math for one instruction set (flags set in CMakeLists.txt).
#define MIMI_ISA_NS isa_base
#define MIMI_ISA_NAME "baseline"
#define MIMI_VW 4
#define MIMI_MVEC(f) _ZGVbN4v_##f
#define MIMI_MR 6
#include "kernels/cpu/gemm_isa.inc"
#include "kernels/cpu/elementwise_isa.inc"
#include "kernels/cpu/isa_table.inc"
