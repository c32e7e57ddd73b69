// GEMM micro-kernel and vector math for one instruction set (flags set in CMakeLists.txt).
#define MIMI_ISA_NS isa_avx512
#define MIMI_ISA_NAME "avx512"
#define MIMI_VW 16
#define MIMI_MVEC(f) _ZGVeN16v_##f
// 12 x 2 vectors (24 accumulators, 27 of the 32 registers): 14 loads per 24 FMAs against 10 per
// 16 at 8 rows; row tiles balanced, panels shared by groups of 48 rows (docs/PERF.md, session 29).
#define MIMI_MR 12
#define MIMI_BALANCED_TILES 1
#define MIMI_GROUP_ROWS 48
#include "kernels/cpu/gemm_isa.inc"
#include "kernels/cpu/elementwise_isa.inc"
#include "kernels/cpu/isa_table.inc"
