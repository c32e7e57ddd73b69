// One kernel source for CUDA and HIP: the runtime calls the GPU kernels use, mapped to either
// vendor (the approach of ggml's vendors/hip.h). Kernels never assume a warp of 32 (AMD CDNA
// has 64): reductions go through shared memory with blockDim-generic loops.
#pragma once

#if defined(MIMI_USE_HIP)
#include <hip/hip_runtime.h>
#define gpuError_t hipError_t
#define gpuSuccess hipSuccess
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemcpy hipMemcpy
#define gpuMemcpy2DAsync hipMemcpy2DAsync
#define gpuMemset hipMemset
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuSetDevice hipSetDevice
#define gpuGetLastError hipGetLastError
#define gpuGetErrorString hipGetErrorString
#else
#include <cuda_runtime.h>
#define gpuError_t cudaError_t
#define gpuSuccess cudaSuccess
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemcpy cudaMemcpy
#define gpuMemcpy2DAsync cudaMemcpy2DAsync
#define gpuMemset cudaMemset
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuSetDevice cudaSetDevice
#define gpuGetLastError cudaGetLastError
#define gpuGetErrorString cudaGetErrorString
#endif

#include <string>

#include "codec/error.h"

namespace mimi::gpu {

inline void check(gpuError_t e, const char* what) {
  if (e != gpuSuccess) throw Error(ErrorKind::Device, std::string(what) + ": " + gpuGetErrorString(e));
}
// After a launch: configuration errors surface here, execution errors at the next sync.
inline void check_launch(const char* kernel) { check(gpuGetLastError(), kernel); }

constexpr int kThreads = 256;  // threads per block for element-wise and reduction kernels
inline unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

}  // namespace mimi::gpu
