#include "codec/device.h"

#include "codec/error.h"

namespace mimi {
namespace {

#define MIMI_KERNEL_TABLE(ns)                                                                     \
  Kernels{ns::gemm,      ns::conv1d,    ns::conv_transpose1d, ns::elu,       ns::gelu_erf,        \
          ns::add_inplace, ns::bias_add, ns::layer_scale_add, ns::layer_norm, ns::linear, ns::rope,             \
          ns::attention, ns::rvq_encode, ns::rvq_decode, ns::resblock}

const Kernels kCpu = MIMI_KERNEL_TABLE(cpu);
const Kernels kRef = MIMI_KERNEL_TABLE(ref);

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
    default:
#ifdef MIMI_WITH_GPU_KERNELS
      throw Error(ErrorKind::Device, "device " + d.str() +
                                         " is not available: this build has the GPU kernels (tested by the "
                                         "gpu_kernels test) but the engine does not run plans on the GPU yet "
                                         "(use --device cpu)");
#else
      throw Error(ErrorKind::Device, "device " + d.str() +
                                         " is not available: this build of mimi has no " +
                                         (d.kind == Device::Kind::Cuda ? "CUDA" : "HIP") +
                                         " backend (use --device cpu)");
#endif
  }
}

}  // namespace mimi
