#include "kernels/gpu/ops.h"
#include "kernels/gpu/vendor.h"

namespace mimi::gpu {

int device_count(std::string* why) {
  int n = 0;
  const gpuError_t e = gpuGetDeviceCount(&n);
  if (e != gpuSuccess) {
    if (why) *why = gpuGetErrorString(e);
    (void)gpuGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string device_name(int index) {
  gpuDeviceProp prop{};
  check(gpuGetDeviceProperties(&prop, index), "device properties");
  return prop.name;
}

bool emulated() {
#if defined(MIMI_GPU_EMULATE)
  return true;
#else
  return false;
#endif
}

void set_device(int index) { check(gpuSetDevice(index), "set device"); }

namespace {
thread_local gpuStream_t tls_stream = nullptr;
gpuStream_t as_stream(void* s) { return static_cast<gpuStream_t>(s); }
}  // namespace

gpuStream_t current_stream() { return tls_stream; }
void set_stream(void* stream) { tls_stream = as_stream(stream); }

void* stream_create() {
  gpuStream_t s = nullptr;
  check(gpuStreamCreate(&s), "stream create");
  return s;
}
void stream_destroy(void* stream) {
  if (stream) (void)gpuStreamDestroy(as_stream(stream));
}

void capture_begin(void* stream) {
  check(gpuStreamBeginCapture(as_stream(stream), gpuStreamCaptureModeGlobal), "begin graph capture");
}
void* capture_end(void* stream) {
  gpuGraph_t graph = nullptr;
  check(gpuStreamEndCapture(as_stream(stream), &graph), "end graph capture");
  gpuGraphExec_t exec = nullptr;
  const gpuError_t e = gpuGraphInstantiate(&exec, graph);
  (void)gpuGraphDestroy(graph);  // the executable graph is independent of it
  check(e, "instantiate graph");
  return exec;
}
void capture_abort(void* stream) {
  gpuGraph_t graph = nullptr;
  (void)gpuStreamEndCapture(as_stream(stream), &graph);
  if (graph) (void)gpuGraphDestroy(graph);
  (void)gpuGetLastError();  // the capture's error was reported by whoever threw
}
void graph_launch(void* graph, void* stream) {
  check(gpuGraphLaunch(static_cast<gpuGraphExec_t>(graph), as_stream(stream)), "graph launch");
}
void graph_destroy(void* graph) {
  if (graph) (void)gpuGraphExecDestroy(static_cast<gpuGraphExec_t>(graph));
}
void stream_synchronize(void* stream) { check(gpuStreamSynchronize(as_stream(stream)), "stream synchronize"); }

void* host_alloc(size_t bytes) {
  void* p = nullptr;
  check(gpuMallocHost(&p, bytes ? bytes : 1), "pinned host allocation");
  return p;
}
void host_free(void* p) {
  if (p) (void)gpuFreeHost(p);
}
void copy_to_device_async(void* dst, const void* host_src, size_t bytes) {
  if (bytes) check(gpuMemcpyAsync(dst, host_src, bytes, gpuMemcpyHostToDevice, tls_stream), "async upload");
}
void copy_to_host_async(void* host_dst, const void* src, size_t bytes) {
  if (bytes) check(gpuMemcpyAsync(host_dst, src, bytes, gpuMemcpyDeviceToHost, tls_stream), "async download");
}

void* event_create() {
  gpuEvent_t e = nullptr;
  check(gpuEventCreateNoTiming(&e), "event create");
  return e;
}
void event_destroy(void* event) {
  if (event) (void)gpuEventDestroy(static_cast<gpuEvent_t>(event));
}
void event_record(void* event, void* stream) {
  check(gpuEventRecord(static_cast<gpuEvent_t>(event), as_stream(stream)), "event record");
}
void event_synchronize(void* event) { check(gpuEventSynchronize(static_cast<gpuEvent_t>(event)), "event synchronize"); }
void* timing_event_create() {
  gpuEvent_t e = nullptr;
  check(gpuEventCreateTiming(&e), "timing event create");
  return e;
}
void event_record_current(void* event) {
  check(gpuEventRecord(static_cast<gpuEvent_t>(event), current_stream()), "event record");
}
float event_elapsed_ms(void* begin, void* end) {
  check(gpuEventSynchronize(static_cast<gpuEvent_t>(end)), "event synchronize");
  float ms = 0;
  check(gpuEventElapsedTime(&ms, static_cast<gpuEvent_t>(begin), static_cast<gpuEvent_t>(end)), "event elapsed time");
  return ms;
}

namespace {
void* zeroed(size_t bytes) {
  void* p = nullptr;
  check(gpuMalloc(&p, bytes + 1), "device allocation");
  check(gpuMemset(p, 0, bytes + 1), "device memset");
  return p;
}

__global__ void MIMI_BOUNDS(kThreads) add2d_kernel(float* dst, int64_t dpitch, const float* src, int64_t spitch, int64_t width,
                             int64_t rows) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= width * rows) return;
  const int64_t r = i / width, j = i % width;
  dst[r * dpitch + j] += src[r * spitch + j];
}

__global__ void MIMI_BOUNDS(kThreads) fill_kernel(float* dst, int64_t n, float value) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = value;
}
}  // namespace

const char* vendor() {
#if defined(MIMI_USE_HIP)
  return "HIP";
#else
  return "CUDA";
#endif
}

float* alloc(size_t n) { return static_cast<float*>(zeroed(n * sizeof(float))); }
int32_t* alloc_i32(size_t n) { return static_cast<int32_t*>(zeroed(n * sizeof(int32_t))); }

void copy2d(float* dst, int64_t dpitch, const float* src, int64_t spitch, int64_t width, int64_t rows) {
  if (width <= 0 || rows <= 0) return;
  check(gpuMemcpy2DAsync(dst, size_t(dpitch) * sizeof(float), src, size_t(spitch) * sizeof(float),
                         size_t(width) * sizeof(float), size_t(rows), gpuMemcpyDeviceToDevice, current_stream()),
        "copy2d");
}

void add2d(float* dst, int64_t dpitch, const float* src, int64_t spitch, int64_t width, int64_t rows) {
  if (width <= 0 || rows <= 0) return;
  MIMI_LAUNCH(add2d_kernel, blocks_for(width * rows), kThreads, 0, current_stream(), dst, dpitch, src, spitch, width, rows);
  check_launch("add2d");
}

void fill(float* dst, int64_t n, float value) {
  if (n <= 0) return;
  MIMI_LAUNCH(fill_kernel, blocks_for(n), kThreads, 0, current_stream(), dst, n, value);
  check_launch("fill");
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
