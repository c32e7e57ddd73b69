// The GPU op tracer (issue 27, item 4): the real GPU plans run on a kernel table that records each
// op and its shape instead of computing, so the cost model (scripts/gpu_model.py) prices exactly
// the launches a GPU would get. The table is the GPU's in structure: device memory (transfers
// through upload/download), the fused GPU ops, no fused resblock. Memory itself is host memory
// (allocations and transfers are real, so the plans' host-side logic runs as it does on a GPU);
// the compute ops do nothing, so the codes are zeros, which decode reads as valid codes.
#include "app/cli/gpu_trace.h"

#include "app/cli/command.h"
#include "app/sys/file_io.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "codec/device.h"
#include "codec/engine.h"
#include "codec/error.h"
#include "codec/prng_weights.h"
#include "codec/weights.h"

namespace mimi::app {
namespace {

std::vector<nlohmann::json>* g_ops = nullptr;  // the step being traced (single-threaded: plans run ops in order)
void rec(nlohmann::json j) {
  if (g_ops) g_ops->push_back(std::move(j));
}

// ---- the compute ops: record the shape, compute nothing
void t_gemm(int64_t M, int64_t N, int64_t K, const float*, int64_t, const float*, int64_t, float*, int64_t, bool acc) {
  rec({{"op", "gemm"}, {"M", M}, {"N", N}, {"K", K}, {"accumulate", acc}});
}
void t_conv1d(const Conv1dShape& s, const float*, const float*, const float*, float*, bool, const float* ctx) {
  rec({{"op", "conv1d"}, {"cin", s.in_channels}, {"cout", s.out_channels}, {"k", s.kernel}, {"stride", s.stride},
       {"dilation", s.dilation}, {"groups", s.groups}, {"t_in", s.length_in}, {"t_out", s.length_out()},
       {"elu_input", s.elu_input}, {"context", ctx != nullptr}});
}
void t_convtr(const ConvTranspose1dShape& s, const float*, const float*, const float*, float*) {
  rec({{"op", "conv_transpose1d"}, {"cin", s.in_channels}, {"cout", s.out_channels}, {"k", s.kernel},
       {"stride", s.stride}, {"groups", s.groups}, {"t_in", s.length_in}, {"t_out", s.length_out()}});
}
void t_elu(int64_t n, const float*, float*) { rec({{"op", "elu"}, {"n", n}}); }
void t_gelu(int64_t n, const float*, float*) { rec({{"op", "gelu_erf"}, {"n", n}}); }
void t_add(int64_t n, const float*, float*) { rec({{"op", "add_inplace"}, {"n", n}}); }
void t_bias(int64_t C, int64_t T, const float*, float*) { rec({{"op", "bias_add"}, {"n", C * T}}); }
void t_scale_add(int64_t C, int64_t T, const float*, const float*, float*) {
  rec({{"op", "layer_scale_add"}, {"n", C * T}});
}
void t_layer_norm(int64_t C, int64_t T, const float*, const float*, const float*, float, float*) {
  rec({{"op", "layer_norm"}, {"C", C}, {"T", T}});
}
void t_linear(int64_t in, int64_t out, int64_t T, const float*, const float*, float*) {
  rec({{"op", "linear"}, {"M", out}, {"N", T}, {"K", in}});
}
void t_rope(int64_t H, int64_t hd, int64_t T, const int32_t*, float, RopeLayout, float*) {
  rec({{"op", "rope"}, {"H", H}, {"hd", hd}, {"T", T}});
}
void t_attention(int64_t H, int64_t Tq, int64_t Tk, int64_t hd, int64_t q_start, int64_t k_start, int64_t context, float,
                 const float*, const float*, const float*, float*) {
  rec({{"op", "attention"}, {"H", H}, {"Tq", Tq}, {"Tk", Tk}, {"hd", hd}, {"context", context},
       {"q_start", q_start}, {"k_start", k_start}});
}
void t_rvq_encode(int64_t Q, int64_t F, int64_t bins, int64_t n, const float*, const float* const*, const float* const*,
                  int32_t*, float*) {
  rec({{"op", "rvq_encode"}, {"Q", Q}, {"F", F}, {"bins", bins}, {"n", n}});
}
void t_rvq_decode(int64_t Q, int64_t F, int64_t bins, int64_t n, const int32_t*, const float* const*, float*) {
  rec({{"op", "rvq_decode"}, {"Q", Q}, {"F", F}, {"bins", bins}, {"n", n}});
}
// ---- fused GPU ops (codec/device.h FusedOps)
void t_linear_gelu(int64_t in, int64_t out, int64_t T, const float*, const float*, float*) {
  rec({{"op", "linear_gelu"}, {"M", out}, {"N", T}, {"K", in}});
}
void t_linear_scale_add(int64_t in, int64_t out, int64_t T, const float*, const float*, const float*, float*) {
  rec({{"op", "linear_scale_add"}, {"M", out}, {"N", T}, {"K", in}});
}
void t_layer_norm_linear(int64_t in, int64_t out, int64_t T, const float*, const float*, const float*, const float*, float,
                         bool gelu, float*, float*) {
  rec({{"op", "layer_norm_linear"}, {"M", out}, {"N", T}, {"K", in}, {"gelu", gelu}});
}
void t_rope_append(int64_t H, int64_t hd, int64_t Tt, int64_t nseg, int64_t max_len, const WindowSegment*, float,
                   RopeLayout, float*, float*, float*, int64_t R) {
  rec({{"op", "rope_append"}, {"H", H}, {"hd", hd}, {"T", Tt}, {"segments", nseg}, {"max_len", max_len}, {"ring", R}});
}
void t_attention_window(int64_t H, int64_t hd, int64_t Tt, int64_t nseg, int64_t max_len, const WindowSegment*,
                        int64_t context, float, const float*, const float*, const float*, int64_t R, float*) {
  rec({{"op", "attention_window"}, {"H", H}, {"hd", hd}, {"T", Tt}, {"segments", nseg}, {"max_len", max_len},
       {"context", context}, {"ring", R}});
}
void t_conv1d_segments(const Conv1dShape& s, int64_t nseg, const WindowSegment*, const float*, const float*,
                       const float*, float*, bool, float*) {
  rec({{"op", "conv1d_segments"}, {"cin", s.in_channels}, {"cout", s.out_channels}, {"k", s.kernel},
       {"stride", s.stride}, {"dilation", s.dilation}, {"groups", s.groups}, {"t_in", s.length_in},
       {"t_out", s.length_out()}, {"segments", nseg}, {"context", s.pad_left()}});
}
void t_convtr_segments(const ConvTranspose1dShape& s, int64_t nseg, const WindowSegment*, const float*, const float*,
                       const float*, float*, float*) {
  rec({{"op", "conv_transpose1d_segments"}, {"cin", s.in_channels}, {"cout", s.out_channels}, {"k", s.kernel},
       {"stride", s.stride}, {"groups", s.groups}, {"t_in", s.length_in}, {"t_out", s.length_in * s.stride},
       {"segments", nseg}});
}
// ---- memory: real (host memory), the device-side copies recorded as the kernels they are
void t_copy2d(float* dst, int64_t dp, const float* src, int64_t sp, int64_t w, int64_t rows) {
  rec({{"op", "copy2d"}, {"n", w * rows}});
  cpu::copy2d(dst, dp, src, sp, w, rows);
}
void t_add2d(float* dst, int64_t dp, const float* src, int64_t sp, int64_t w, int64_t rows) {
  rec({{"op", "add2d"}, {"n", w * rows}});
  cpu::add2d(dst, dp, src, sp, w, rows);
}
void t_fill(float* dst, int64_t n, float v) {
  rec({{"op", "fill"}, {"n", n}});
  cpu::fill(dst, n, v);
}
void t_upload(float* dst, const float* src, size_t n) {
  rec({{"op", "h2d"}, {"bytes", n * 4}});
  cpu::upload(dst, src, n);
}
void t_download(float* dst, const float* src, size_t n) {
  rec({{"op", "d2h"}, {"bytes", n * 4}});
  cpu::download(dst, src, n);
}
void t_upload_i32(int32_t* dst, const int32_t* src, size_t n) {
  rec({{"op", "h2d"}, {"bytes", n * 4}});
  cpu::upload_i32(dst, src, n);
}
void t_download_i32(int32_t* dst, const int32_t* src, size_t n) {
  rec({{"op", "d2h"}, {"bytes", n * 4}});
  cpu::download_i32(dst, src, n);
}

const FusedOps kTraceFused{.linear_gelu = t_linear_gelu,
                           .linear_scale_add = t_linear_scale_add,
                           .layer_norm_linear = t_layer_norm_linear,
                           .rope_append = t_rope_append,
                           .attention_window = t_attention_window,
                           .conv1d_segments = t_conv1d_segments,
                           .conv_transpose1d_segments = t_convtr_segments};
const Kernels kTrace{.gemm = t_gemm,
                     .conv1d = t_conv1d,
                     .conv_transpose1d = t_convtr,
                     .elu = t_elu,
                     .gelu_erf = t_gelu,
                     .add_inplace = t_add,
                     .bias_add = t_bias,
                     .layer_scale_add = t_scale_add,
                     .layer_norm = t_layer_norm,
                     .linear = t_linear,
                     .rope = t_rope,
                     .attention = t_attention,
                     .rvq_encode = t_rvq_encode,
                     .rvq_decode = t_rvq_decode,
                     .resblock = nullptr,  // as on the GPU: the plans compose it
                     .alloc = cpu::alloc,
                     .alloc_i32 = cpu::alloc_i32,
                     .release = cpu::release,
                     .copy2d = t_copy2d,
                     .add2d = t_add2d,
                     .fill = t_fill,
                     .upload = t_upload,
                     .download = t_download,
                     .upload_i32 = t_upload_i32,
                     .download_i32 = t_download_i32,
                     .host_memory = false,
                     .graphs = nullptr,
                     .fused = &kTraceFused};

// One workload's ops as one JSON line.
void emit(OutputFile& out, const std::string& workload, double audio_s, int slots, int64_t steps,
          std::vector<nlohmann::json>&& ops) {
  const std::string line = nlohmann::json{{"workload", workload}, {"audio_s", audio_s}, {"slots", slots},
                                          {"steps", steps}, {"ops", std::move(ops)}}
                               .dump() +
                           "\n";
  out.write(line.data(), line.size());
}

}  // namespace

int run_gpu_trace(const GpuTraceOptions& o) {
  const GeneratedWeights w = generate_prng_weights(test_config(o.config), 1);
  const Config cfg = test_config(o.config);
  auto model = load_model(SafetensorsFile::from_bytes(
                              std::make_shared<const std::vector<uint8_t>>(prng_weights_file(w, Dialect::Moshi)), "prng"),
                          cfg);
  EngineOptions eo;
  eo.kernels = &kTrace;
  eo.graphs = false;
  Engine engine(model, eo);
  const Config& c = engine.config();
  OutputFile out(o.out, true);  // like every output: atomic, '-' is stdout (a trace is replaced, as it always was)
  std::vector<nlohmann::json> ops;
  g_ops = &ops;
  struct Reset {
    ~Reset() { g_ops = nullptr; }
  } reset;
  // offline: one signal through the engine's chunked path (batch 1)
  for (double secs : o.seconds) {
    const int64_t n = int64_t(secs * c.sample_rate);
    const std::vector<float> pcm(size_t(n), 0.0f);
    ops.clear();
    const Codes codes = engine.encode(pcm.data(), n, o.n_q);
    emit(out, "encode offline " + std::to_string(int(secs)) + " s", secs, 1, 1, std::move(ops));
    ops.clear();
    engine.decode(codes);
    emit(out, "decode offline " + std::to_string(int(secs)) + " s", secs, 1, 1, std::move(ops));
  }
  // offline batched: `b` inputs of 128 frames at once, one step of a b-slot plan
  for (int b : o.batches) {
    const int64_t frames = 128, n = frames * c.frame_size();
    const std::vector<float> pcm(size_t(n), 0.0f);
    EncodePlan& ep = engine.encode_plan(frames, o.n_q, b);
    ep.reset();
    const std::vector<int64_t> counts(size_t(b), frames);
    std::vector<const float*> in(size_t(b), pcm.data());
    ops.clear();
    ep.step(in.data(), counts.data());
    emit(out, "encode batch " + std::to_string(b) + " x 128 frames", double(n) / c.sample_rate, b, 1, std::move(ops));
    DecodePlan& dp = engine.decode_plan(frames, o.n_q, b);
    dp.reset();
    const std::vector<int32_t> zero(size_t(frames * o.n_q), 0);
    std::vector<const int32_t*> codes(size_t(b), zero.data());
    ops.clear();
    dp.step(codes.data(), counts.data());
    dp.output();
    emit(out, "decode batch " + std::to_string(b) + " x 128 frames", double(n) / c.sample_rate, b, 1, std::move(ops));
  }
  // streaming: one frame per slot per step, as `bench --latency-frames`; the last step is steady
  // (every slot past the window's fill), and that one is written
  for (int slots : o.slots) {
    const int64_t fs = c.frame_size();
    const std::vector<float> frame_pcm(size_t(fs), 0.0f);
    EncodePlan& ep = engine.encode_plan(1, o.n_q, slots);
    ep.reset();
    const std::vector<int64_t> ones(size_t(slots), 1);
    std::vector<const float*> frame(size_t(slots), frame_pcm.data());
    for (int64_t f = 0; f < o.steps; ++f) {
      ops.clear();
      ep.step(frame.data(), ones.data());
    }
    emit(out, "encode streaming step, " + std::to_string(slots) + " slot(s)", double(fs) / c.sample_rate, slots, 1,
         std::move(ops));
    DecodePlan& dp = engine.decode_plan(1, o.n_q, slots);
    dp.reset();
    const std::vector<int32_t> zero(size_t(o.n_q), 0);
    std::vector<const int32_t*> codes(size_t(slots), zero.data());
    for (int64_t f = 0; f < o.steps; ++f) {
      ops.clear();
      dp.step(codes.data(), ones.data());
      dp.output();
    }
    emit(out, "decode streaming step, " + std::to_string(slots) + " slot(s)", double(fs) / c.sample_rate, slots, 1,
         std::move(ops));
  }
  out.commit();
  return 0;
}

namespace {

class GpuTrace : public Command {
 public:
  GpuTraceOptions o;
  int run(const Common&) override { return run_gpu_trace(o); }
};

}  // namespace

std::unique_ptr<Command> add_gpu_trace(CLI::App& app, Common&) {
  auto cmd = std::make_unique<GpuTrace>();
  GpuTraceOptions& trace = cmd->o;
  CLI::App* gt = cmd->sub = app.add_subcommand("gpu-trace", "The ops the GPU plans launch, with shapes, as JSON Lines for "
                                                            "scripts/gpu_model.py (the H200 cost model); no GPU needed");
  gt->add_option("-o,--output", trace.out, "Trace file (JSON Lines)")->required();
  gt->add_option("--config", trace.config, "Test config of the PRNG weights: tiny, tiny-window or full")
      ->capture_default_str()
      ->check(CLI::IsMember({"tiny", "tiny-window", "full"}));
  gt->add_option("--seconds", trace.seconds, "Offline lengths (batch 1)")->delimiter(',')->check(finite_in(1e-3, 3600.0));
  gt->add_option("--batches", trace.batches, "Offline batches of 128 frames")->delimiter(',')->check(CLI::Range(1, 4096));
  gt->add_option("--slots", trace.slots, "Streaming slots")->delimiter(',')->check(CLI::Range(1, 4096));
  gt->group("Developer");
  return cmd;
}

}  // namespace mimi::app
