// The GPU backend (CUDA, or HIP from the same source): every op of kernels/ops.h on device
// pointers, plus the little runtime the tests and plans need. Built with -DMIMI_CUDA=ON (or
// MIMI_HIP); absent otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/ops.h"

namespace mimi::gpu {

MIMI_DECLARE_OPS
MIMI_DECLARE_MEMORY_OPS  // device memory

int device_count();  // 0 when there is no usable device (never throws)
void set_device(int index);
std::string device_name(int index);  // the runtime's name for it; throws Error(Device)
// True in a MIMI_GPU_EMULATE build: the "device" is the CPU emulator of kernels/gpu/emulate.h.
bool emulated();
void synchronize();
// "CUDA" or "HIP": the vendor this backend was compiled for.
const char* vendor();

}  // namespace mimi::gpu
