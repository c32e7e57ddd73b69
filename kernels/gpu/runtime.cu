#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"

namespace mimi::gpu {

int device_count() {
  int n = 0;
  if (gpuGetDeviceCount(&n) != gpuSuccess) {
    (void)gpuGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

void set_device(int index) { check(gpuSetDevice(index), "set device"); }

float* alloc(size_t n) {
  void* p = nullptr;
  check(gpuMalloc(&p, n * sizeof(float) + 1), "device allocation");
  return static_cast<float*>(p);
}

int32_t* alloc_i32(size_t n) {
  void* p = nullptr;
  check(gpuMalloc(&p, n * sizeof(int32_t) + 1), "device allocation");
  return static_cast<int32_t*>(p);
}

void release(void* p) {
  if (p) (void)gpuFree(p);
}

void upload(float* dst, const float* src, size_t n) {
  check(gpuMemcpy(dst, src, n * sizeof(float), gpuMemcpyHostToDevice), "upload");
}
void upload_i32(int32_t* dst, const int32_t* src, size_t n) {
  check(gpuMemcpy(dst, src, n * sizeof(int32_t), gpuMemcpyHostToDevice), "upload");
}
void download_i32(int32_t* dst, const int32_t* src, size_t n) {
  check(gpuMemcpy(dst, src, n * sizeof(int32_t), gpuMemcpyDeviceToHost), "download");
}
void download(float* dst, const float* src, size_t n) {
  check(gpuMemcpy(dst, src, n * sizeof(float), gpuMemcpyDeviceToHost), "download");
}
void synchronize() { check(gpuDeviceSynchronize(), "synchronize"); }

}  // namespace mimi::gpu
