// One kernel source for CUDA and HIP: the runtime calls the GPU kernels use, mapped to either
// vendor (the approach of ggml's vendors/hip.h). Kernels never assume a warp of 32 (AMD CDNA
// has 64): reductions go through shared memory with blockDim-generic loops.
#pragma once

//
// Three branches: nvcc (CUDA), hipcc (MIMI_USE_HIP), and the CPU emulator (MIMI_GPU_EMULATE: the
// same sources compiled as C++ by the host compiler, kernels/gpu/emulator/emulate.h). Kernels launch
// only through MIMI_LAUNCH and declare dynamic shared memory only through MIMI_DYNAMIC_SHARED,
// so the one source serves all three.

#if defined(MIMI_GPU_EMULATE) && (defined(__CUDACC__) || defined(__HIPCC__))
#error "MIMI_GPU_EMULATE is for the host C++ compiler, not nvcc/hipcc"
#elif defined(MIMI_GPU_EMULATE)
#include "kernels/gpu/emulator/emulate.h"
#define gpuError_t cudaError_t
#define gpuSuccess cudaSuccess
#define gpuMalloc mimi_emu::Malloc
#define gpuFree mimi_emu::Free
#define gpuMemcpy mimi_emu::Memcpy
#define gpuMemcpy2DAsync mimi_emu::Memcpy2DAsync
#define gpuMemset mimi_emu::Memset
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuDeviceSynchronize mimi_emu::DeviceSynchronize
#define gpuGetDeviceCount mimi_emu::GetDeviceCount
#define gpuSetDevice mimi_emu::SetDevice
#define gpuGetLastError mimi_emu::GetLastError
#define gpuGetErrorString mimi_emu::GetErrorString
#define gpuDeviceProp cudaDeviceProp
#define gpuGetDeviceProperties mimi_emu::GetDeviceProperties
#define gpuStream_t cudaStream_t
#define gpuStreamCreate mimi_emu::StreamCreate
#define gpuStreamDestroy mimi_emu::StreamDestroy
#define gpuStreamSynchronize mimi_emu::StreamSynchronize
#define gpuStreamBeginCapture mimi_emu::StreamBeginCapture
#define gpuStreamEndCapture mimi_emu::StreamEndCapture
#define gpuStreamCaptureModeGlobal cudaStreamCaptureModeGlobal
#define gpuGraph_t cudaGraph_t
#define gpuGraphExec_t cudaGraphExec_t
#define gpuGraphInstantiate(exec, graph) mimi_emu::GraphInstantiate(exec, graph)
#define gpuGraphLaunch mimi_emu::GraphLaunch
#define gpuGraphExecDestroy mimi_emu::GraphExecDestroy
#define gpuGraphDestroy mimi_emu::GraphDestroy
#define gpuMemsetAsync mimi_emu::MemsetAsync
#define gpuMemcpyAsync mimi_emu::MemcpyAsync
#define gpuMallocHost mimi_emu::MallocHost
#define gpuEvent_t cudaEvent_t
#define gpuEventCreateNoTiming(e) mimi_emu::EventCreate(e)
#define gpuEventRecord mimi_emu::EventRecord
#define gpuEventSynchronize mimi_emu::EventSynchronize
#define gpuEventDestroy mimi_emu::EventDestroy
#define gpuEventCreateTiming(e) mimi_emu::EventCreateTiming(e)
#define gpuEventElapsedTime mimi_emu::EventElapsedTime
#define gpuFreeHost mimi_emu::FreeHost
#define MIMI_WARP_FULL_MASK mimi_emu_full_mask()
// kernel<<<grid, block, shmem, stream>>>(args...)
#define MIMI_LAUNCH(kernel, grid, block, shmem, stream, ...) \
  ::mimi_emu::launch(#kernel, kernel, dim3(grid), dim3(block), size_t(shmem), stream, __VA_ARGS__)
// extern __shared__ type name[];
#define MIMI_DYNAMIC_SHARED(type, name) type* const name = static_cast<type*>(::mimi_emu::dynamic_shared())
#elif defined(MIMI_USE_HIP)
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
#define gpuDeviceProp hipDeviceProp_t
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuStream_t hipStream_t
#define gpuStreamCreate hipStreamCreate
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamBeginCapture hipStreamBeginCapture
#define gpuStreamEndCapture hipStreamEndCapture
#define gpuStreamCaptureModeGlobal hipStreamCaptureModeGlobal
#define gpuGraph_t hipGraph_t
#define gpuGraphExec_t hipGraphExec_t
#define gpuGraphInstantiate(exec, graph) hipGraphInstantiate(exec, graph, nullptr, nullptr, 0)
#define gpuGraphLaunch hipGraphLaunch
#define gpuGraphExecDestroy hipGraphExecDestroy
#define gpuGraphDestroy hipGraphDestroy
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMallocHost(p, bytes) hipHostMalloc(p, bytes, hipHostMallocDefault)
#define gpuEvent_t hipEvent_t
#define gpuEventCreateNoTiming(e) hipEventCreateWithFlags(e, hipEventDisableTiming)
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventDestroy hipEventDestroy
#define gpuEventCreateTiming(e) hipEventCreate(e)
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuFreeHost hipHostFree
#define MIMI_WARP_FULL_MASK 0xffffffffffffffffull
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
#define gpuDeviceProp cudaDeviceProp
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuStream_t cudaStream_t
#define gpuStreamCreate cudaStreamCreate
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamBeginCapture cudaStreamBeginCapture
#define gpuStreamEndCapture cudaStreamEndCapture
#define gpuStreamCaptureModeGlobal cudaStreamCaptureModeGlobal
#define gpuGraph_t cudaGraph_t
#define gpuGraphExec_t cudaGraphExec_t
#define gpuGraphInstantiate(exec, graph) cudaGraphInstantiate(exec, graph, 0)
#define gpuGraphLaunch cudaGraphLaunch
#define gpuGraphExecDestroy cudaGraphExecDestroy
#define gpuGraphDestroy cudaGraphDestroy
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMallocHost cudaMallocHost
#define gpuEvent_t cudaEvent_t
#define gpuEventCreateNoTiming(e) cudaEventCreateWithFlags(e, cudaEventDisableTiming)
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventDestroy cudaEventDestroy
#define gpuEventCreateTiming(e) cudaEventCreate(e)
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuFreeHost cudaFreeHost
#define MIMI_WARP_FULL_MASK 0xffffffffu
#endif

#if !defined(MIMI_GPU_EMULATE)
#define MIMI_LAUNCH(kernel, grid, block, shmem, stream, ...) kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)
#define MIMI_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
// Every kernel states the most threads per block it is launched with, so the compiler budgets
// registers for that block size (HIP assumes 1024 without it, which makes the larger kernels
// spill on CDNA; CUDA uses it for occupancy). A launch with more threads fails.
#define MIMI_BOUNDS(threads) __launch_bounds__(threads)
#else
#define MIMI_BOUNDS(threads)
#endif

#include <string>

#include "kernels/error.h"

namespace mimi::gpu {

inline void check(gpuError_t e, const char* what) {
  if (e != gpuSuccess) throw Error(ErrorKind::Device, std::string(what) + ": " + gpuGetErrorString(e));
}
// The stream this thread's ops go to (set_stream in kernels/gpu/ops.h; the legacy stream 0 until
// then). Every launch and async copy of the ops uses it, so a plan can capture its step.
gpuStream_t current_stream();

// After a launch: configuration errors surface here, execution errors at the next sync.
inline void check_launch(const char* kernel) { check(gpuGetLastError(), kernel); }

constexpr int kThreads = 256;  // threads per block for element-wise and reduction kernels
inline unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

}  // namespace mimi::gpu
