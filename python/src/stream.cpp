// Stream objects: audio in pieces -> the codes of each frame as soon as it is complete, and codes
// in pieces -> audio. Each has an engine of its own over the codec's model (its own plans and
// stream state, so the codec's other calls cannot disturb it) and a lock of its own.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>

#include "app/formats/audio_io.h"
#include "codec/error.h"
#include "python/src/arrays.h"
#include "python/src/bind.h"
#include "python/src/codec.h"

namespace mimi::py {
namespace {

constexpr int64_t kMaxPush = 8;  // frames per push, as `mimi encode --stream`

// The codec's engine options without its thread count: an engine sets the process's kernel
// threads when it names one, and a stream made in a forked child must not undo fork.cpp's one.
EngineOptions stream_options(const Engine& codec) {
  EngineOptions o = codec.options();
  o.threads = 0;
  return o;
}

class StreamEncoder {
 public:
  StreamEncoder(Engine& codec, int rate, int n_q) : eng_(codec.shared_model(), stream_options(codec)), rate_(rate), n_q_(n_q) {
    check_layout(1, rate, "audio");
    if (n_q < 1 || n_q > eng_.config().n_q)
      throw Error(ErrorKind::Usage, "n_q must be in 1.." + std::to_string(eng_.config().n_q) + ", not " + std::to_string(n_q));
    reset();
  }
  void reset() {
    std::lock_guard<std::mutex> lock(mu_);
    restart();
  }
  void restart() {
    plan_ = &eng_.encode_plan(kMaxPush, n_q_);
    plan_->reset();
    rs_ = std::make_unique<app::StreamResampler>(rate_, eng_.config().sample_rate);
    pending_.clear();
    fed_ = 0;
  }
  // pcm [frames, channels] interleaved; final: pad and encode the last partial frame.
  nb::ndarray<nb::numpy, int64_t> feed(const nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>& pcm,
                                       bool final) {
    const int64_t T = int64_t(pcm.shape(0)), C = int64_t(pcm.shape(1));
    std::vector<int32_t> out;  // [frames][n_q] as they come
    int64_t frames = 0;
    {
      nb::gil_scoped_release g;
      std::lock_guard<std::mutex> lock(mu_);
      check_layout(C, rate_, "audio");
      // The whole piece is downmixed (and so judged: a NaN or Inf sample, as the CLI refuses it)
      // before the stream takes any of it: a refused feed leaves the stream as it was, as the
      // decoder's does. (T floats: no more than the interleaved copy the caller already made.)
      std::vector<float> mono(static_cast<size_t>(T));
      app::downmix(pcm.data(), T, int(C), -1, mono.data(), fed_, rate_, "audio");
      constexpr int64_t kBlock = int64_t(1) << 16;
      try {
      for (int64_t f0 = 0; f0 < T; f0 += kBlock)
        rs_->process(mono.data() + f0, size_t(std::min(kBlock, T - f0)), pending_);
      fed_ += T;
      if (final) rs_->process(nullptr, 0, pending_);
      const int64_t fs = eng_.config().frame_size();
      if (final && !pending_.empty() && int64_t(pending_.size()) % fs)
        pending_.resize(size_t((int64_t(pending_.size()) / fs + 1) * fs), 0.0f);  // the last partial frame, zero-padded
      const int64_t ready = int64_t(pending_.size()) / fs;
      for (int64_t f = 0; f < ready; f += kMaxPush) {
        const int64_t n = std::min(kMaxPush, ready - f);
        plan_->push(pending_.data() + f * fs, n);
        const std::vector<int32_t>& c = plan_->codes();  // [n_q, n]
        for (int64_t j = 0; j < n; ++j)
          for (int k = 0; k < n_q_; ++k) out.push_back(c[size_t(k * n + j)]);
      }
      pending_.erase(pending_.begin(), pending_.begin() + ready * fs);
      frames = ready;
      } catch (...) {  // (the machine failed mid-feed) the stream ends: the next feed starts a new signal
        restart();
        throw;
      }
    }
    Codes c;  // [n_q, frames]
    c.n_q = n_q_;
    c.frames = frames;
    c.data.resize(out.size());
    for (int64_t j = 0; j < frames; ++j)
      for (int k = 0; k < n_q_; ++k) c.data[size_t(k * frames + j)] = out[size_t(j * n_q_ + k)];
    return codes_to_numpy(c);
  }

 private:
  Engine eng_;
  int rate_, n_q_;
  EncodePlan* plan_ = nullptr;
  std::unique_ptr<app::StreamResampler> rs_;
  std::vector<float> pending_;  // model-rate samples not yet encoded
  int64_t fed_ = 0;             // source frames fed (for the position in error messages)
  std::mutex mu_;
};

class StreamDecoder {
 public:
  StreamDecoder(Engine& codec, int n_q) : eng_(codec.shared_model(), stream_options(codec)), n_q_(n_q) { reset(); }
  void reset() {
    std::lock_guard<std::mutex> lock(mu_);
    plan_ = nullptr;
  }
  // codes [n_q_in, frames] -> frames * frame_size samples (frame by frame, as `decode --stream`).
  nb::ndarray<nb::numpy, float> feed(const CodesIn& in) {
    Codes codes = codes_from_numpy(in);
    std::vector<float> y;
    {
      nb::gil_scoped_release g;
      std::lock_guard<std::mutex> lock(mu_);
      const int n_q = n_q_ > 0 ? n_q_ : codes.n_q;
      if (codes.frames > 0) {  // (no frames: nothing decoded, no plan made, the stream as it was)
      eng_.check_codes(codes, n_q);
      if (plan_ && n_q != plan_n_q_)
        throw Error(ErrorKind::Usage, "codes: " + std::to_string(n_q) + " codebooks after " + std::to_string(plan_n_q_) +
                                          " (a stream keeps its n_q; reset() starts another)");
      for (int k = 0; k < n_q; ++k)  // every code checked before any is decoded: a refused feed leaves the stream as it was
        for (int64_t f = 0; f < codes.frames; ++f)
          if (const int32_t v = codes.data[size_t(k * codes.frames + f)]; v < 0 || v >= eng_.config().bins)
            throw Error(ErrorKind::Input, "codes: codebook " + std::to_string(k) + ", frame " + std::to_string(f) +
                                              ": code " + std::to_string(v) + " outside [0, " +
                                              std::to_string(eng_.config().bins) + ")");
      try {
        if (!plan_) {
          plan_ = &eng_.decode_plan(1, n_q);
          plan_->reset();
          plan_n_q_ = n_q;
        }
        const int64_t fs = eng_.config().frame_size();
        std::vector<int32_t> col(static_cast<size_t>(n_q));
        y.reserve(size_t(codes.frames * fs));
        for (int64_t f = 0; f < codes.frames; ++f) {
          for (int k = 0; k < n_q; ++k) col[size_t(k)] = codes.data[size_t(k * codes.frames + f)];
          plan_->push(col.data(), 1);
          const float* p = plan_->output().ptr();
          y.insert(y.end(), p, p + fs);
        }
      } catch (...) {  // (the machine failed mid-stream) the stream ends: the next feed starts anew
        plan_ = nullptr;
        throw;
      }
      }
    }
    const size_t n = y.size();
    return to_numpy(std::move(y), {n});
  }

 private:
  Engine eng_;
  int n_q_;
  DecodePlan* plan_ = nullptr;
  int plan_n_q_ = 0;
  std::mutex mu_;
};

}  // namespace

void bind_stream(nb::module_& m) {
  nb::class_<StreamEncoder>(m, "_StreamEncoder")
      .def("__init__", [](StreamEncoder* self, Codec& c, int rate, int n_q) { new (self) StreamEncoder(c.eng(), rate, n_q); },
           nb::arg("codec"), nb::arg("rate"), nb::arg("n_q"))
      .def("feed", &StreamEncoder::feed, nb::arg("pcm"), nb::arg("final"))
      .def("reset", &StreamEncoder::reset, nb::call_guard<nb::gil_scoped_release>());
  nb::class_<StreamDecoder>(m, "_StreamDecoder")
      .def("__init__", [](StreamDecoder* self, Codec& c, int n_q) { new (self) StreamDecoder(c.eng(), n_q); },
           nb::arg("codec"), nb::arg("n_q"))
      .def("feed", &StreamDecoder::feed, nb::arg("codes"))
      .def("reset", &StreamDecoder::reset, nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace mimi::py
