#include "codec/device.h"

#include "codec/error.h"
#ifdef MIMI_WITH_GPU_KERNELS
#include "kernels/gpu/ops.h"
#endif

namespace mimi {
namespace {

// Every table by field name (a new field cannot shift the others into the wrong slots).
#define MIMI_OP_TABLE(ns)                                                                              \
  .gemm = ns::gemm, .conv1d = ns::conv1d, .conv_transpose1d = ns::conv_transpose1d, .elu = ns::elu,      \
  .gelu_erf = ns::gelu_erf, .add_inplace = ns::add_inplace, .bias_add = ns::bias_add,                    \
  .layer_scale_add = ns::layer_scale_add, .layer_norm = ns::layer_norm, .linear = ns::linear,            \
  .rope = ns::rope, .attention = ns::attention, .rvq_encode = ns::rvq_encode, .rvq_decode = ns::rvq_decode
#define MIMI_MEMORY_TABLE(ns)                                                                          \
  .alloc = ns::alloc, .alloc_i32 = ns::alloc_i32, .release = ns::release, .copy2d = ns::copy2d,          \
  .add2d = ns::add2d, .fill = ns::fill, .upload = ns::upload, .download = ns::download,                  \
  .upload_i32 = ns::upload_i32, .download_i32 = ns::download_i32

const Kernels kCpu{MIMI_OP_TABLE(cpu), .resblock = cpu::resblock, MIMI_MEMORY_TABLE(cpu), .host_memory = true};
const Kernels kRef{MIMI_OP_TABLE(ref), .resblock = ref::resblock, MIMI_MEMORY_TABLE(cpu), .host_memory = true};
#ifdef MIMI_WITH_GPU_KERNELS
const GraphOps kGpuGraphs{.stream_create = gpu::stream_create,
                          .stream_destroy = gpu::stream_destroy,
                          .set_stream = gpu::set_stream,
                          .capture_begin = gpu::capture_begin,
                          .capture_end = gpu::capture_end,
                          .capture_abort = gpu::capture_abort,
                          .graph_launch = gpu::graph_launch,
                          .graph_destroy = gpu::graph_destroy,
                          .stream_synchronize = gpu::stream_synchronize,
                          .host_alloc = gpu::host_alloc,
                          .host_free = gpu::host_free,
                          .copy_to_device_async = gpu::copy_to_device_async,
                          .copy_to_host_async = gpu::copy_to_host_async,
                          .event_create = gpu::event_create,
                          .event_destroy = gpu::event_destroy,
                          .event_record = gpu::event_record,
                          .event_synchronize = gpu::event_synchronize,
                          .timing_event_create = gpu::timing_event_create,
                          .event_record_current = gpu::event_record_current,
                          .event_elapsed_ms = gpu::event_elapsed_ms};
// no fused resblock on the GPU: the plans compose it from the ops
const FusedOps kGpuFused{.linear_gelu = gpu::linear_gelu,
                         .linear_scale_add = gpu::linear_scale_add,
                         .layer_norm_linear = gpu::layer_norm_linear,
                         .rope_append = gpu::rope_append,
                         .attention_window = gpu::attention_window,
                         .conv1d_segments = gpu::conv1d_segments,
                         .conv_transpose1d_segments = gpu::conv_transpose1d_segments};
const Kernels kGpu{MIMI_OP_TABLE(gpu), .resblock = nullptr, MIMI_MEMORY_TABLE(gpu), .host_memory = false,
                   .graphs = &kGpuGraphs, .fused = &kGpuFused};
#endif

}  // namespace

Device Device::parse(const std::string& s) {
  Device d;
  std::string name = s, idx;
  if (auto colon = s.find(':'); colon != std::string::npos) {
    name = s.substr(0, colon);
    idx = s.substr(colon + 1);
  }
  if (name == "cpu") d.kind = Kind::Cpu;
  else if (name == "ref") d.kind = Kind::Ref;
  else if (name == "cuda") d.kind = Kind::Cuda;
  else if (name == "hip") d.kind = Kind::Hip;
  else throw Error(ErrorKind::Usage, "unknown device '" + s + "' (cpu, ref, cuda[:i], hip[:i])");
  if (!idx.empty()) {
    if (idx.find_first_not_of("0123456789") != std::string::npos || idx.size() > 4)
      throw Error(ErrorKind::Usage, "bad device index in '" + s + "'");
    d.index = std::stoi(idx);
  }
  if ((d.kind == Kind::Cpu || d.kind == Kind::Ref) && d.index != 0)
    throw Error(ErrorKind::Usage, "device '" + s + "': the CPU has no index");
  return d;
}

std::string Device::str() const {
  switch (kind) {
    case Kind::Cpu: return "cpu";
    case Kind::Ref: return "ref";
    case Kind::Cuda: return "cuda:" + std::to_string(index);
    case Kind::Hip: return "hip:" + std::to_string(index);
  }
  return "?";
}

const Kernels& kernels_for(const Device& d) {
  switch (d.kind) {
    case Device::Kind::Cpu: return kCpu;
    case Device::Kind::Ref: return kRef;
    default: {
      const char* want = d.kind == Device::Kind::Cuda ? "CUDA" : "HIP";
#ifdef MIMI_WITH_GPU_KERNELS
      if (std::string(gpu::vendor()) != want) {
        // advise the build's own GPU only when it sees one (else that advice fails too)
        const std::string own = std::string(gpu::vendor()) == "CUDA" ? "cuda" : "hip";
        throw Error(ErrorKind::Device, "device " + d.str() + " is not available: this build of mimi has the " +
                                           gpu::vendor() + " backend, not " + want +
                                           (gpu::device_count() > 0 ? " (use --device " + own + " or cpu)"
                                                                    : " (and sees no " + std::string(gpu::vendor()) +
                                                                          " device: use --device cpu)"));
      }
      std::string why;
      const int n = gpu::device_count(&why);
      if (d.index >= n)
        throw Error(ErrorKind::Device, "device " + d.str() + " is not available: " +
                                           (why.empty() ? std::to_string(n) + " " + want + " device(s) found"
                                                        : "the " + std::string(want) + " runtime cannot count devices: " + why) +
                                           " (use --device cpu)");
      gpu::set_device(d.index);
      return kGpu;
#else
      throw Error(ErrorKind::Device, "device " + d.str() + " is not available: this build of mimi has no " + want +
                                         " backend (use --device cpu)");
#endif
    }
  }
}

std::string gpu_backend() {
#ifdef MIMI_WITH_GPU_KERNELS
  return gpu::emulated() ? std::string(gpu::vendor()) + " (emulated on CPU threads: MIMI_GPU_EMULATE build)"
                         : std::string(gpu::vendor());
#else
  return "none";
#endif
}

std::string gpu_unavailable() {
#ifdef MIMI_WITH_GPU_KERNELS
  std::string why;
  const int n = gpu::device_count(&why);
  if (n > 0) return "";
  return why.empty() ? std::string("0 ") + gpu::vendor() + " devices found"
                     : std::string("the ") + gpu::vendor() + " runtime cannot count devices: " + why;
#else
  return "";
#endif
}

namespace {
// What the runtime calls a device this build has (never throws).
std::string device_name(const Device& d) {
  switch (d.kind) {
    case Device::Kind::Cpu: return "CPU kernels";
    case Device::Kind::Ref: return "naive reference kernels";
    default:
#ifdef MIMI_WITH_GPU_KERNELS
      try {
        return gpu::device_name(d.index);
      } catch (const Error& e) {
        return std::string("unreadable: ") + e.what();
      }
#else
      return "";
#endif
  }
}
}  // namespace

std::vector<DeviceDescription> list_devices() {
  std::vector<DeviceDescription> out;
  for (const Device d : {Device{}, Device{Device::Kind::Ref, 0}}) out.push_back({d, device_name(d), false});
#ifdef MIMI_WITH_GPU_KERNELS
  const Device::Kind kind = std::string(gpu::vendor()) == "HIP" ? Device::Kind::Hip : Device::Kind::Cuda;
  for (int i = 0, n = gpu::device_count(); i < n; ++i) out.push_back({Device{kind, i}, device_name({kind, i}), gpu::emulated()});
#endif
  return out;
}

std::string describe(const Device& d) {
  const std::string name = device_name(d);
  return name.empty() ? d.str() : d.str() + " (" + name + ")";
}

}  // namespace mimi
