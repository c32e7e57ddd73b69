// `mimi encode --batch N FILES...` and `mimi decode --batch N FILES...`: the inputs stream through
// the N slots of one batched plan (codec/batch.h). Encode reads each audio file (each channel
// with --split-channels) block by block as its slot needs it; decode writes each audio file as
// its slot's chunks come out; so memory stays constant however long the files are. A file's codes
// (samples) are bitwise those of `mimi encode` (`mimi decode`) on it alone; a file that fails
// (unreadable, empty, truncated, other weights) fails alone and the others go on, as in the
// one-by-one path.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <utility>

#include "app/cli/shell.h"
#include "app/engine_io/decode_output.h"
#include "app/engine_io/pipeline.h"
#include "app/engine_io/batched_sources.h"
#include "app/sys/file_io.h"
#include "app/sys/progress.h"
#include "codec/batch.h"  // decode_batch

namespace mimi::app {

namespace {

// Outputs of one batch: two inputs that map to one output file (a/x.wav and b/x.wav into -o dir/)
// are both in flight at once, so the later one fails instead of racing the earlier (one by one it
// would fail at its commit without -f, or replace the earlier with -f).
class OutputClaims {
 public:
  void claim(const std::string& path, const std::string& input) {
    std::error_code ec;  // stdout, /dev/null, a FIFO: written in place, any number of times
    if (path == "-" || (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))) return;
    const std::string key = fs_key(path);
    auto [it, fresh] = owner_.emplace(key, input);
    if (!fresh)
      throw Error(ErrorKind::Output, input + ": its output " + path + " is also the output of " + it->second +
                                         " in this batch; not written twice");
  }

 private:
  // the file the kernel would write: symlinks and ".." resolved where the path exists (a textual
  // "a/lnk/../x" is not "a/x" when lnk is a link)
  static std::string fs_key(const std::string& p) {
    std::error_code ec;
    const auto a = std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec);
    return ec ? p : a.string();
  }
  std::map<std::string, std::string> owner_;
};

// Removes and returns the item `id` of a batch's open items.
template <class T>
std::unique_ptr<T> take(std::map<size_t, std::unique_ptr<T>>& open, size_t id) {
  auto node = open.extract(id);
  if (node.empty()) throw Error(ErrorKind::Internal, "batch: item " + std::to_string(id) + " is not open");
  return std::move(node.mapped());
}

// What a batch did: the exit code of its first failure, counts, and its closing lines.
struct BatchTally {
  int code = kOk;  // that of the failure first in input order (as one by one), whenever it happened
  size_t code_at = SIZE_MAX;
  size_t done = 0, failed = 0;
  void failed_at(size_t position, int c) {
    ++failed;
    if (c != kOk && position < code_at) code = c, code_at = position;
  }
  double audio_s = 0, t_start = 0;

  void report_failures(size_t inputs) const {
    if (failed && inputs > 1) spdlog::error("{} of {} inputs failed", failed, inputs);
  }
  int finish(const char* verb, int slots, size_t inputs) const {
    const double wall = monotonic_seconds() - t_start;
    spdlog::info("batch of {} slots: {} inputs {}, {:.1f} s of audio in {:.2f} s ({:.1f}x real time){}", slots, done,
                 verb, audio_s, wall, wall > 0 ? audio_s / wall : 0.0,
                 failed ? ", " + std::to_string(failed) + " failed" : std::string());
    report_failures(inputs);
    return code;
  }
};

}  // namespace

int App::encode_batched(const EncodeOptions& o, const EncodeTarget& target) {
  check_targets(o.inputs, o.out);
  // every slot holds its input open; with --split-channels the items are only known as they come
  const int slots = batch_slots(o.batch, o.split_channels ? 0 : o.inputs.size(), 1);
  if (slots < 2) {  // one slot is the one-by-one path, which needs fewer descriptors (no reader pool)
    EncodeOptions one = o;
    one.batch = 1;
    return encode(one);
  }
  Engine& eng = engine();
  const int rate = eng.config().sample_rate;
  BatchTally tally;
  // The queue: inputs in order; a --split-channels input becomes its channels when it is reached.
  std::deque<std::pair<std::string, int>> queue;
  for (const std::string& in : o.inputs) queue.emplace_back(in, o.split_channels ? -2 : -1);
  struct Source {
    std::string path;
    int channel = -1;  // -1: the downmix
    double t0 = 0;
  };
  std::map<size_t, std::unique_ptr<Source>> open;  // by tag
  size_t next_tag = 0;
  OutputClaims claims;
  auto fail = [&](size_t position, const std::string& in, std::exception_ptr e) {
    int c = kOk;
    record_position(position);
    input_failed(in, e, c);  // rethrows what fails every input alike
    tally.failed_at(position, c);
  };
  OrderedRecords ordered(*this);
  tally.t_start = monotonic_seconds();
  encode_sources(
      eng, o.n_q, slots, o.readers,
      BatchedSources{
          .next =
              [&](SourceSpec& spec) {
                while (!queue.empty()) {
                  auto [in, ch] = queue.front();
                  queue.pop_front();
                  try {
                    if (ch == -2) {  // count the channels: one item each, in order
                      const int channels = AudioReader(in).channels();
                      for (int c = channels - 1; c >= 0; --c) queue.emplace_front(in, c);
                      continue;
                    }
                    claims.claim(target.path(in, ch), in);
                  } catch (...) {
                    fail(next_tag++, in, std::current_exception());  // (a position of its own)
                    continue;
                  }
                  spec.tag = next_tag++;
                  spec.path = in;
                  spec.span = AudioSpan{0, -1, ch};
                  open[spec.tag] = std::make_unique<Source>(Source{in, ch, monotonic_seconds()});
                  return true;
                }
                return false;
              },
          .done =
              [&](SourceCodes&& c) {
                const std::unique_ptr<Source> s = take(open, c.tag);
                try {
                  if (!c.shortfall.empty()) spdlog::warn("{}: {}", s->path == "-" ? "stdin" : s->path, c.shortfall);
                  EncodedAudio a;
                  a.codes = std::move(c.codes);
                  a.samples = c.samples;
                  a.source_rate = c.source_rate;
                  a.source_channels = c.source_channels;
                  record_position(c.tag);
                  write_encoded(target, s->path, s->channel, a, monotonic_seconds() - s->t0);
                  tally.audio_s += double(a.samples) / rate;
                  ++tally.done;
                } catch (...) {
                  fail(c.tag, s->path, std::current_exception());
                }
              },
          .failed =
              [&](SourceFailure&& f) {
                const std::unique_ptr<Source> s = take(open, f.tag);
                fail(f.tag, s->path, f.error);
              },
      });
  ordered.finish();
  return tally.finish("encoded", slots, o.inputs.size());
}

int App::decode_batched(const DecodeOptions& o, SampleFormat sf) {
  check_targets(o.inputs, o.out);
  const int slots = batch_slots(o.batch, o.inputs.size(), 1);  // every slot holds its output (a temporary) open
  if (slots < 2) {  // one slot is the one-by-one path
    DecodeOptions one = o;
    one.batch = 1;
    return decode(one);
  }
  Engine& eng = engine();
  BatchTally tally;
  auto fail = [&](size_t index, const std::string& in, std::exception_ptr e) {
    int c = kOk;
    record_position(index);
    input_failed(in, e, c);  // rethrows what fails every input alike
    tally.failed_at(index, c);
  };
  OrderedRecords ordered(*this);
  // One token file in a slot: its codes and its audio file being written.
  struct Open {
    size_t index = 0;  // into o.inputs
    std::string in, path;
    TokenFile t;
    int n_q = 0;
    std::unique_ptr<DecodedAudioWriter> out;
    double t0 = 0;
  };
  std::map<size_t, std::unique_ptr<Open>> open;
  OutputClaims claims;
  auto claim_output = [&](const std::string& path, const std::string& in) { claims.claim(path, in); };
  // One plan decodes its files with one codebook count: --n-q, or else the first file's count of
  // the pass. A file holding another count is not an error: it waits for a later pass (one pass
  // per count, in the order the counts first appear), so every file decodes as it does alone.
  std::vector<size_t> todo(o.inputs.size());
  for (size_t i = 0; i < todo.size(); ++i) todo[i] = i;
  std::vector<size_t> later;  // inputs of this pass that hold another count
  size_t next = 0;            // into todo
  int n_q = o.n_q;
  auto take_next = [&]() -> std::unique_ptr<Open> {
    while (next < todo.size()) {
      const size_t index = todo[next++];
      const std::string& in = o.inputs[index];
      try {
        auto f = std::make_unique<Open>();
        f->index = index;
        f->in = in;
        f->t0 = monotonic_seconds();
        f->t = read_token_input(in, o.recover);
        f->n_q = check_tokens(eng, f->t, o.n_q, -1, o.allow_weights_mismatch, in);
        if (n_q < 1) n_q = f->n_q;
        if (f->n_q != n_q) {  // read again in its own pass (not held: a corpus may have many)
          later.push_back(index);
          continue;
        }
        f->path = output_path(in, o.out, ".wav");
        claim_output(f->path, in);
        f->out = std::make_unique<DecodedAudioWriter>(eng.config(), f->t, audio_out(o, sf), f->path, common_.force, in, true);
        return f;
      } catch (...) {
        fail(index, in, std::current_exception());
      }
    }
    return nullptr;
  };
  size_t next_id = 0;
  tally.t_start = monotonic_seconds();
  for (bool first_pass = true; !todo.empty(); first_pass = false, todo = std::exchange(later, {}), next = 0) {
    n_q = o.n_q;
    std::unique_ptr<Open> first = take_next();  // fixes this pass's n_q before the plan is built
    if (!first) {
      if (first_pass && later.empty()) {
        ordered.finish();
        tally.report_failures(o.inputs.size());
        return tally.code;
      }
      continue;
    }
    decode_batch(
        eng, n_q, slots,
        [&](CodesItem& item) {
          std::unique_ptr<Open> f = first ? std::move(first) : take_next();
          if (!f) return false;
          item.id = next_id++;
          item.codes = &f->t.codes;
          open[item.id] = std::move(f);
          return true;
        },
        [&](const CodesItem& item, const float* y, int64_t n) {
          Open& f = *open.at(item.id);
          if (!f.out) return;  // its writer failed: the rest of its samples go nowhere
          try {
            f.out->write(y, n);
          } catch (...) {
            f.out.reset();  // removes the temporary
            fail(f.index, f.in, std::current_exception());
          }
        },
        [&](const CodesItem& item) {
          std::unique_ptr<Open> f = take(open, item.id);
          if (!f->out) return;
          try {
            const DecodeResult d = f->out->finish();
            record_position(f->index);
            report_decoded(f->in, f->path, f->t, f->n_q, d, monotonic_seconds() - f->t0);
            tally.audio_s += double(d.samples) / d.rate;
            ++tally.done;
          } catch (...) {
            fail(f->index, f->in, std::current_exception());
          }
        },
        [&](size_t id, std::exception_ptr e) {
          std::unique_ptr<Open> f = take(open, id);
          fail(f->index, f->in, e);
        });
  }
  ordered.finish();
  return tally.finish("decoded", slots, o.inputs.size());
}

}  // namespace mimi::app
