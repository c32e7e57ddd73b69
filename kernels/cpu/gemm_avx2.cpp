// GEMM micro-kernel instantiation for one instruction set (flags set in CMakeLists.txt).
#define MIMI_ISA_NS isa_avx2
#define MIMI_VW 8
#include "kernels/cpu/gemm_isa.inc"
