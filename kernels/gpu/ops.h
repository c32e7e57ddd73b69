// The GPU backend (CUDA, or HIP from the same source): every op of kernels/ops.h on device
// pointers, plus the little runtime the tests and plans need. Built with -DMIMI_CUDA=ON (or
// MIMI_HIP); absent otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/ops.h"

namespace mimi::gpu {

MIMI_DECLARE_OPS

int device_count();  // 0 when there is no usable device (never throws)
void set_device(int index);
float* alloc(size_t n);  // n floats of device memory
void release(void* p);
void upload(float* dst, const float* src, size_t n);
void download(float* dst, const float* src, size_t n);
int32_t* alloc_i32(size_t n);
void upload_i32(int32_t* dst, const int32_t* src, size_t n);
void download_i32(int32_t* dst, const int32_t* src, size_t n);
void synchronize();

}  // namespace mimi::gpu
