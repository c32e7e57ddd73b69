#include "codec/device.h"

#include "codec/error.h"
#ifdef MIMI_WITH_GPU_KERNELS
#include "kernels/gpu/ops.h"
#endif

namespace mimi {
namespace {

#define MIMI_OP_TABLE(ns)                                                                         \
  ns::gemm, ns::conv1d, ns::conv_transpose1d, ns::elu, ns::gelu_erf, ns::add_inplace, ns::bias_add,   \
      ns::layer_scale_add, ns::layer_norm, ns::linear, ns::rope, ns::attention, ns::rvq_encode,     \
      ns::rvq_decode
#define MIMI_MEMORY_TABLE(ns)                                                                     \
  ns::alloc, ns::alloc_i32, ns::release, ns::copy2d, ns::add2d, ns::fill, ns::upload, ns::download, \
      ns::upload_i32, ns::download_i32

const Kernels kCpu{MIMI_OP_TABLE(cpu), cpu::resblock, MIMI_MEMORY_TABLE(cpu), true};
const Kernels kRef{MIMI_OP_TABLE(ref), ref::resblock, MIMI_MEMORY_TABLE(cpu), true};
#ifdef MIMI_WITH_GPU_KERNELS
const GraphOps kGpuGraphs{gpu::stream_create,       gpu::stream_destroy, gpu::set_stream,  gpu::capture_begin,
                          gpu::capture_end,         gpu::capture_abort,  gpu::graph_launch, gpu::graph_destroy,
                          gpu::stream_synchronize,  gpu::host_alloc,     gpu::host_free,    gpu::copy_to_device_async,
                          gpu::copy_to_host_async,  gpu::event_create,   gpu::event_destroy, gpu::event_record,
                          gpu::event_synchronize};
// no fused resblock on the GPU: the plans compose it from the ops
const FusedOps kGpuFused{gpu::linear_gelu, gpu::linear_scale_add, gpu::layer_norm_linear};
const Kernels kGpu{MIMI_OP_TABLE(gpu), nullptr, MIMI_MEMORY_TABLE(gpu), false, &kGpuGraphs, &kGpuFused};
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
      if (std::string(gpu::vendor()) != want)
        throw Error(ErrorKind::Device, "device " + d.str() + " is not available: this build of mimi has the " +
                                           gpu::vendor() + " backend, not " + want + " (use --device " +
                                           (std::string(gpu::vendor()) == "CUDA" ? "cuda" : "hip") + " or cpu)");
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
