// GEMM micro-kernel instantiation for one instruction set (flags set in CMakeLists.txt).
#define MIMI_ISA_NS isa_base
#define MIMI_VW 4
#include "kernels/cpu/gemm_isa.inc"
