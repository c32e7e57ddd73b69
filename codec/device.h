// Devices and the kernel table a plan runs on.
#pragma once

#include <string>
#include <vector>

#include "kernels/ops.h"

namespace mimi {

struct Device {
  enum class Kind { Cpu, Ref, Cuda, Hip };
  Kind kind = Kind::Cpu;
  int index = 0;

  // "cpu", "ref" (the naive reference kernels: slow, for checking), "cuda[:i]", "hip[:i]".
  static Device parse(const std::string& s);  // throws Error(Usage)
  std::string str() const;
  bool operator==(const Device&) const = default;
};

// Streams and graph capture (kernels/gpu/ops.h), for the backends that have them: a plan runs
// its steps on its own stream and replays a captured step (codec/step_graph.h). Handles are the
// vendor's stream and executable-graph pointers.
struct GraphOps {
  void* (*stream_create)();
  void (*stream_destroy)(void* stream);
  void (*set_stream)(void* stream);  // the calling thread's ops go to `stream` (nullptr: legacy)
  void (*capture_begin)(void* stream);
  void* (*capture_end)(void* stream);  // the instantiated graph
  void (*capture_abort)(void* stream);
  void (*graph_launch)(void* graph, void* stream);
  void (*graph_destroy)(void* graph);
  void (*stream_synchronize)(void* stream);
  // pinned host memory, and async copies with it on the current stream (capturable)
  void* (*host_alloc)(size_t bytes);
  void (*host_free)(void* p);
  void (*copy_to_device_async)(void* dst, const void* host_src, size_t bytes);
  void (*copy_to_host_async)(void* host_dst, const void* src, size_t bytes);
  // events: a host waits for one step of a stream while the next is queued behind it
  void* (*event_create)();
  void (*event_destroy)(void* event);
  void (*event_record)(void* event, void* stream);
  void (*event_synchronize)(void* event);
  // timing events, for profiles (codec/profile.h): marks on the calling thread's current stream
  void* (*timing_event_create)();
  void (*event_record_current)(void* event);
  float (*event_elapsed_ms)(void* begin, void* end);  // waits for `end`
};

// Optional fused ops (kernels/gpu/ops.h): each gives bitwise the result of the ops it replaces,
// so a plan uses them where the backend has them and composes the plain ops elsewhere.
struct FusedOps {
  void (*linear_gelu)(int64_t in, int64_t out, int64_t T, const float* W, const float* x, float* y);
  void (*linear_scale_add)(int64_t in, int64_t out, int64_t T, const float* W, const float* x, const float* scale,
                           float* y);
  void (*layer_norm_linear)(int64_t in, int64_t out, int64_t T, const float* W, const float* x, const float* gamma,
                            const float* beta, float eps, bool gelu, float* stats, float* y);
  // A batched step's RoPE, key/value append and attention for every slot at once, on per-slot
  // key/value rings (kernels/gpu/ops.h): bitwise the per-slot rope, copies and attention.
  void (*rope_append)(int64_t H, int64_t hd, int64_t Tt, int64_t nseg, int64_t max_len, const WindowSegment* segs,
                      float max_period, RopeLayout layout, float* qkv, float* ring_k, float* ring_v, int64_t R);
  void (*attention_window)(int64_t H, int64_t hd, int64_t Tt, int64_t nseg, int64_t max_len, const WindowSegment* segs,
                           int64_t context, float scale, const float* q, const float* ring_k, const float* ring_v,
                           int64_t R, float* out);
  // A batched step's causal conv over every slot's columns at once, each segment with its slot's
  // context in one [slots, Cin, P] buffer, advanced after (kernels/gpu/ops.h conv1d_segments).
  void (*conv1d_segments)(const Conv1dShape& s, int64_t nseg, const WindowSegment* segs, const float* x,
                          const float* w, const float* bias, float* y, bool accumulate, float* contexts);
  // ... and a transposed conv with every slot's carried overlap (conv_transpose1d_segments)
  void (*conv_transpose1d_segments)(const ConvTranspose1dShape& s, int64_t nseg, const WindowSegment* segs,
                                    const float* x, const float* w, const float* bias, float* y, float* carries);
};

// The ops of kernels/ops.h as a table, so plans are written once for every backend.
struct Kernels {
  decltype(&cpu::gemm) gemm;
  decltype(&cpu::conv1d) conv1d;
  decltype(&cpu::conv_transpose1d) conv_transpose1d;
  decltype(&cpu::elu) elu;
  decltype(&cpu::gelu_erf) gelu_erf;
  decltype(&cpu::add_inplace) add_inplace;
  decltype(&cpu::bias_add) bias_add;
  decltype(&cpu::layer_scale_add) layer_scale_add;
  decltype(&cpu::layer_norm) layer_norm;
  decltype(&cpu::linear) linear;
  decltype(&cpu::rope) rope;
  decltype(&cpu::attention) attention;
  decltype(&cpu::rvq_encode) rvq_encode;
  decltype(&cpu::rvq_decode) rvq_decode;
  decltype(&cpu::resblock) resblock;  // optional fused op; nullptr: plans compose the ops above
  // memory (kernels/ops.h MIMI_DECLARE_MEMORY_OPS)
  decltype(&cpu::alloc) alloc;
  decltype(&cpu::alloc_i32) alloc_i32;
  decltype(&cpu::release) release;
  decltype(&cpu::copy2d) copy2d;
  decltype(&cpu::add2d) add2d;
  decltype(&cpu::fill) fill;
  decltype(&cpu::upload) upload;
  decltype(&cpu::download) download;
  decltype(&cpu::upload_i32) upload_i32;
  decltype(&cpu::download_i32) download_i32;
  bool host_memory = true;  // device pointers are host pointers (no transfers needed)
  const GraphOps* graphs = nullptr;  // nullptr: no streams or graphs (the CPU backends)
  const FusedOps* fused = nullptr;   // nullptr: the plans compose the plain ops
};

// Throws Error(Device) for a backend this build lacks or a device that is not present:
// a device that was asked for is never silently replaced.
const Kernels& kernels_for(const Device& d);

// What this build can run on, for `mimi info` and --verbose: an emulated GPU (MIMI_GPU_EMULATE)
// says so in its name and in `emulated`, so nobody mistakes it for a GPU.
struct DeviceDescription {
  Device device;
  std::string name;
  bool emulated = false;
};
std::string gpu_backend();                     // "CUDA", "HIP", "CUDA (emulated ...)" or "none"
std::vector<DeviceDescription> list_devices();  // cpu, ref, then every GPU present (never throws)
// Why a build with a GPU backend sees no GPU (the runtime's own words, so an old driver does not
// read as "0 devices"); "" when it sees one or has no GPU backend. Never throws.
std::string gpu_unavailable();
std::string describe(const Device& d);          // "cuda:0 (NVIDIA H200)"; the bare id when unknown

}  // namespace mimi
