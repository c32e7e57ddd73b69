#include "app/cli/bench.h"

#include "app/cli/command.h"
#include "app/sys/json_bytes.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/engine_io/pipeline.h"
#include "app/engine_io/weights_locate.h"
#include "app/sys/progress.h"
#include "codec/batch.h"
#include "codec/engine.h"
#include "codec/error.h"
#include "codec/prng_weights.h"
#include "codec/weights.h"
#include "kernels/cpu/isa.h"

namespace mimi::app {
namespace {

// Speech-like test signal: gliding harmonics with a syllable envelope, plus a little noise.
std::vector<float> test_signal(int64_t n, int rate) {
  std::vector<float> x(static_cast<size_t>(n));
  uint64_t s = 12345;
  for (int64_t i = 0; i < n; ++i) {
    const double t = double(i) / rate;
    const double f0 = 140 + 40 * std::sin(2 * M_PI * 0.7 * t);
    const double env = 0.5 + 0.5 * std::sin(2 * M_PI * 3.0 * t);
    double v = 0;
    for (int h = 1; h <= 6; ++h) v += std::sin(2 * M_PI * f0 * h * t) / h;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[size_t(i)] = float(0.2 * env * v + 0.01 * (double(s >> 40) / 16777216.0 - 0.5));
  }
  return x;
}

// The bench input of n samples: the --input file (24 kHz mono, through the encode pipeline's reader)
// repeated, or the synthetic signal.
std::vector<float> bench_signal(const std::string& input, int64_t n, int rate) {
  if (input.empty()) return test_signal(n, rate);
  static std::vector<float> once;  // [samples] of the file at the model rate
  if (once.empty()) {
    MonoSource src(input, rate);
    std::vector<float> pcm;
    while (src.next(pcm)) once.insert(once.end(), pcm.begin(), pcm.end());
    if (once.empty()) throw Error(ErrorKind::Input, input + ": no audio samples");
  }
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = once[size_t(i) % once.size()];
  return x;
}

struct Row {
  std::string direction;
  double seconds;
  std::vector<double> times;
  std::vector<double> peaks;  // [runs] on a CPU: the FMA peak measured just before and after each run, averaged
  Profile profile;  // of the median run
  double flops = 0;
};

}  // namespace

int run_bench(const BenchOptions& o) {
  if (o.threads > 0) cpu::set_num_threads(o.threads);
  const int threads = cpu::num_threads();
  std::shared_ptr<const Model> model;
  std::string source;
  if (o.weights.empty()) {
    const GeneratedWeights w = generate_prng_weights(test_config("full"), 1);
    model = load_model(SafetensorsFile::from_bytes(
                           std::make_shared<const std::vector<uint8_t>>(prng_weights_file(w, Dialect::Moshi)), "prng-full"),
                       test_config("full"));
    source = "PRNG test weights (full config)";
  } else {
    LoadOptions lo;
    if (!o.config.empty()) lo.config_path = o.config;
    source = locate_weights(o.weights);
    model = load_model(source, lo);
  }
  EngineOptions eo;
  eo.device = Device::parse(o.device);
  // --chunk: both directions; not given, each its engine default
  if (o.chunk_frames >= 0) eo.with_chunk_frames(o.chunk_frames);
  eo.graphs = o.graphs;
  const bool on_gpu = eo.device.kind == Device::Kind::Cuda || eo.device.kind == Device::Kind::Hip;
  // the CPU's FMA peak: the best of three tries (a busy neighbour only ever lowers it)
  double peak = 0.0;
  for (int i = 0; i < 3 && !on_gpu; ++i) peak = std::max(peak, cpu::measure_peak_gflops(threads, 0.2));
  const int batch = std::max(o.batch, 1);
  Engine engine(model, eo);
  const Config& c = engine.config();
  std::vector<Row> rows;
  for (double secs : o.seconds) {
    const int64_t n = int64_t(secs * c.sample_rate);
    const std::vector<float> pcm = bench_signal(o.input, n, c.sample_rate);
    Codes codes;
    for (const char* dir : {"encode", "decode"}) {
      Row r{dir, secs, {}, {}, {}, 0};
      const bool enc = r.direction == "encode";
      std::vector<Profile> profiles;
      double warm_flops = 0;
      // one run of the engine's own chunked path, with `p` attached to the plans it uses
      auto run_once = [&](Profile* p) {
        engine.set_profile(p);
        if (batch == 1) {  // outputs land in host memory, so the device is done
          if (enc) codes = engine.encode(pcm.data(), n, o.n_q);
          else engine.decode(codes);
        } else {  // `batch` copies at once, one per slot of a batched plan (codec/batch.h)
          int queued = 0;
          if (enc) {
            std::vector<int64_t> pos(size_t(batch), 0);
            encode_batch(
                engine, o.n_q, batch,
                [&](PcmItem& it) {
                  if (queued == batch) return false;
                  const size_t q = size_t(queued++);
                  it = {q, [&, q](float* dst, int64_t k) {
                          k = std::min(k, n - pos[q]);
                          std::copy_n(pcm.data() + pos[q], k, dst);
                          pos[q] += k;
                          return k;
                        }};
                  return true;
                },
                [&](const PcmItem&, Codes&& c) { codes = std::move(c); });
          } else {
            decode_batch(
                engine, o.n_q, batch,
                [&](CodesItem& it) {
                  if (queued == batch) return false;
                  it = {size_t(queued++), &codes};
                  return true;
                },
                [](const CodesItem&, const float*, int64_t) {}, [](const CodesItem&) {});
          }
        }
        engine.set_profile(nullptr);
        if (p) p->resolve();  // a GPU's stage times are events: read them once the run is done
      };
      for (int i = 0; i <= o.runs; ++i) {  // run 0 warms up (builds the plan)
        Profile p;
        // On a GPU only the warm-up is profiled here (for the FLOP count): a profiled step runs
        // op by op, and the timed runs must replay their graphs.
        // A shared host's FMA throughput moves by up to 1.7x within seconds (docs/PERF.md, session 21):
        // each timed run is also judged against the peak of its own moment, read on either side of it.
        const bool moment = i > 0 && !on_gpu;
        const double peak_before = moment ? cpu::measure_peak_gflops(threads, 0.1) : 0.0;
        const double t0 = monotonic_seconds();
        run_once((o.stages && !on_gpu) || (on_gpu && i == 0) ? &p : nullptr);
        const double dt = (monotonic_seconds() - t0) / batch;  // per input: the table's rows are per input
        if (moment) r.peaks.push_back(0.5 * (peak_before + cpu::measure_peak_gflops(threads, 0.1)));
        if (i > 0) {
          r.times.push_back(dt);
          profiles.push_back(p);
        } else {
          warm_flops = p.total_flops();
        }
      }
      std::vector<size_t> order(r.times.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return r.times[a] < r.times[b]; });
      r.profile = profiles[order[order.size() / 2]];
      if (on_gpu && o.gpu_stages) {  // the GPU's stage table: device events around each stage of one more run
        Profile p;
        run_once(&p);
        r.profile = p;
      }
      r.flops = (on_gpu ? warm_flops : r.profile.total_flops()) / batch;  // per input, like the times
      rows.push_back(r);
    }
  }

  // Streaming latency: compute time per 80 ms frame step, one frame at a time in every slot.
  struct Latency {
    std::vector<double> enc, dec;
  } lat;
  if (o.latency_frames > 0) {
    const int64_t fs = c.frame_size(), nf = o.latency_frames;
    const std::vector<float> pcm = test_signal(nf * fs, c.sample_rate);
    EncodePlan& ep = engine.encode_plan(1, o.n_q, batch);
    ep.reset();
    const std::vector<int64_t> ones(size_t(batch), 1);
    std::vector<const float*> frame(static_cast<size_t>(batch));
    std::vector<int32_t> codes;  // [frames][n_q] of slot 0
    for (int64_t f = 0; f < nf; ++f) {
      std::fill(frame.begin(), frame.end(), pcm.data() + f * fs);
      const double t0 = monotonic_seconds();
      ep.step(frame.data(), ones.data());
      lat.enc.push_back(monotonic_seconds() - t0);
      for (int k = 0; k < o.n_q; ++k) codes.push_back(ep.codes()[size_t(k * batch)]);
    }
    DecodePlan& dp = engine.decode_plan(1, o.n_q, batch);
    dp.reset();
    std::vector<const int32_t*> step_codes(static_cast<size_t>(batch));
    for (int64_t f = 0; f < nf; ++f) {
      std::fill(step_codes.begin(), step_codes.end(), codes.data() + f * o.n_q);
      const double t0 = monotonic_seconds();
      dp.step(step_codes.data(), ones.data());
      dp.output();  // on a GPU: the samples back in host memory, so the step is done
      lat.dec.push_back(monotonic_seconds() - t0);
    }
  }

  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  // the median over runs of each run's share of the peak read around it (0 on a GPU or without a count)
  auto moment_share = [&](const Row& r) {
    if (r.peaks.size() != r.times.size() || r.peaks.empty() || r.flops <= 0) return 0.0;
    std::vector<double> v;
    for (size_t i = 0; i < r.times.size(); ++i) v.push_back(r.peaks[i] > 0 ? r.flops / r.times[i] / 1e9 / r.peaks[i] : 0.0);
    return median(v);
  };
  if (o.json) {
    nlohmann::json out = {{"threads", threads}, {"device", eo.device.str()}, {"batch", batch}, {"isa", cpu::gemm_isa()}, {"peak_gflops", peak}, {"encode_chunk_frames", eo.encode_chunk_frames}, {"decode_chunk_frames", eo.decode_chunk_frames}, {"weights", source},
                          {"n_q", o.n_q}, {"results", nlohmann::json::array()}};
    for (const Row& r : rows) {
      nlohmann::json st = nlohmann::json::object();
      for (const auto& [k, v] : r.profile.stages) st[k] = {{"seconds", v.seconds}, {"gflop", v.flops / 1e9}};
      const double med = median(r.times);
      out["results"].push_back({{"direction", r.direction}, {"audio_s", r.seconds}, {"runs", r.times.size()}, {"times", r.times},
                                {"min_s", *std::min_element(r.times.begin(), r.times.end())}, {"median_s", med},
                                {"max_s", *std::max_element(r.times.begin(), r.times.end())},
                                {"rtf", r.seconds / med}, {"gflop", r.flops / 1e9}, {"gflops", r.flops / med / 1e9},
                                {"run_peaks_gflops", r.peaks}, {"moment_peak_share", moment_share(r)},
                                {"stages", st}});
    }
    if (!lat.enc.empty())
      out["stream_latency_ms"] = {{"frames", lat.enc.size()},
                                  {"encode_median", 1e3 * median(lat.enc)},
                                  {"encode_max", 1e3 * *std::max_element(lat.enc.begin(), lat.enc.end())},
                                  {"decode_median", 1e3 * median(lat.dec)},
                                  {"decode_max", 1e3 * *std::max_element(lat.dec.begin(), lat.dec.end())}};
    const GraphStats& g = engine.graph_stats();
    out["graphs"] = {{"enabled", o.graphs}, {"captured", g.captured}, {"replayed", g.replayed}, {"uncaptured", g.uncaptured}};
    std::cout << json_dump(out) << std::endl;
    return 0;
  }
  if (on_gpu)
    std::printf("mimi bench: %s, n_q %d, device %s, batch %d (slots of one batched plan; times per input), chunks of "
                "%lld/%lld frames (encode/decode)\n",
                source.c_str(), o.n_q, eo.device.str().c_str(), batch, (long long)eo.encode_chunk_frames,
                (long long)eo.decode_chunk_frames);
  else
    std::printf("mimi bench: %s, n_q %d, %d thread(s), batch %d, chunks of %lld/%lld frames (encode/decode), GEMM %s, "
                "measured FMA peak %.1f GFLOP/s\n",
                source.c_str(), o.n_q, threads, batch, (long long)eo.encode_chunk_frames, (long long)eo.decode_chunk_frames,
                cpu::gemm_isa(), peak);
  std::printf("%-9s %7s %5s %8s %8s %8s %8s %8s %9s %6s %7s\n", "direction", "audio", "runs", "min_s", "median_s", "max_s",
              "x_realtm", "GFLOP", "GFLOP/s", "%peak", "%moment");
  for (const Row& r : rows) {
    const double med = median(r.times);
    std::printf("%-9s %6.0fs %5zu %8.3f %8.3f %8.3f %8.1f %8.1f %9.1f %5.1f%% %6.1f%%\n", r.direction.c_str(), r.seconds,
                r.times.size(), *std::min_element(r.times.begin(), r.times.end()), med,
                *std::max_element(r.times.begin(), r.times.end()), r.seconds / med, r.flops / 1e9, r.flops / med / 1e9,
                peak > 0 ? 100.0 * r.flops / med / 1e9 / peak : 0.0, 100.0 * moment_share(r));
  }
  if (!lat.enc.empty())
    std::printf("\nstreaming, one 80 ms frame per step in each of %d slot(s) (%zu steps): encode median %.2f ms, max "
                "%.2f ms; decode median %.2f ms, max %.2f ms\n",
                batch, lat.enc.size(), 1e3 * median(lat.enc), 1e3 * *std::max_element(lat.enc.begin(), lat.enc.end()),
                1e3 * median(lat.dec), 1e3 * *std::max_element(lat.dec.begin(), lat.dec.end()));
  if (on_gpu) {
    const GraphStats& g = engine.graph_stats();
    std::printf("\ngraphs%s: %llu steps captured, %llu replayed, %llu run op by op\n", o.graphs ? "" : " (--no-graphs)",
                (unsigned long long)g.captured, (unsigned long long)g.replayed, (unsigned long long)g.uncaptured);
  }
  if (on_gpu ? o.gpu_stages : o.stages)
    for (const Row& r : rows) {
      if (on_gpu)  // device time between events around each stage, in one extra run op by op (no graphs)
        std::printf("\nstages, %s %.0f s (device events, one run op by op; all %d slot(s)):\n", r.direction.c_str(),
                    r.seconds, batch);
      else
        std::printf("\nstages, %s %.0f s (median run):\n", r.direction.c_str(), r.seconds);
      const double total = r.profile.total_seconds();
      for (const auto& [k, v] : r.profile.stages)
        std::printf("  %-22s %8.1f ms %5.1f%% %8.2f GFLOP %7.1f GFLOP/s\n", k.c_str(), v.seconds * 1e3,
                    100 * v.seconds / total, v.flops / 1e9, v.seconds > 0 ? v.flops / v.seconds / 1e9 : 0.0);
    }
  return 0;
}

namespace {

class Bench : public Command {
 public:
  BenchOptions o;
  void check() override {
    const bool on_gpu = o.device.rfind("cuda", 0) == 0 || o.device.rfind("hip", 0) == 0;
    refuse_inert({{sub->get_option("--no-graphs"), on_gpu, "a GPU --device (the CPU runs no graphs)"},
                  {sub->get_option("--verbose"), on_gpu, "a GPU --device (the CPU prints its stage table always)"}});
  }
  std::vector<std::string> inputs() const override { return {o.weights, o.config, o.input}; }
  int run(const Common&) override { return run_bench(o); }
};

}  // namespace

std::unique_ptr<Command> add_bench(CLI::App& app, Common&) {
  auto cmd = std::make_unique<Bench>();
  BenchOptions& bench = cmd->o;
  CLI::App* b = cmd->sub =
      app.add_subcommand("bench", "Time encode and decode (table of wall time, real-time factor, GFLOP/s, stages)");
  // every value checked here, so a typo is a usage error (exit 2), never a crash or an allocation
  // of 1e9 seconds of signal reported as the machine's failure
  b->add_option("--seconds", bench.seconds, "Input lengths in seconds, each in (0, 3600]")
      ->capture_default_str()
      ->delimiter(',')
      ->check(finite_in(1e-3, 3600.0));
  b->add_option("--runs", bench.runs, "Timed runs per direction and length (after one warm-up)")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  b->add_option("--n-q", bench.n_q, "Codebooks")->capture_default_str()->check(CLI::Range(1, 32));
  b->add_option("--weights", bench.weights, "Weights [default: the full-size PRNG test weights]");
  b->add_option("--config", bench.config, "Config for --weights");
  b->add_option("--input", bench.input, "Audio file, repeated to each length [default: a synthetic speech-like signal]");
  b->add_option("--threads", bench.threads, "CPU threads (0 = all)")->capture_default_str()->check(CLI::Range(0, 1024));
  b->add_option("--device", bench.device, "cpu, ref, cuda[:i] or hip[:i]")->capture_default_str();
  b->add_option("--batch", bench.batch, "Inputs per timed run, at once in the slots of one batched plan (times are per input); also the slots of the latency steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  b->add_option("--chunk", bench.chunk_frames, "Frames per chunk, both directions (0 = whole signal in one plan) [default: the engine's, " +
                      std::to_string(EngineOptions{}.encode_chunk_frames) + " to encode, " +
                      std::to_string(EngineOptions{}.decode_chunk_frames) + " to decode]")
      ->check(CLI::Range(int64_t(0), int64_t(45000)));
  b->add_option("--latency-frames", bench.latency_frames, "Frames streamed one by one for the latency line (0 = skip)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(45000)));
  b->add_flag("-v,--verbose", bench.gpu_stages,
              "On a GPU: also the stage table, from device events around each stage of one more run op by op "
              "(on the CPU the stage table is always printed)");
  b->add_flag("--json", bench.json, "One JSON object on stdout");
  b->add_flag("!--no-graphs", bench.graphs, "On a GPU: run every step op by op (no graph capture and replay)");
  return cmd;
}

}  // namespace mimi::app
