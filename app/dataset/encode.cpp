// `mimi dataset encode`: one shard of a plan, resumable, through the same pipeline as `mimi encode`.
#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "app/dataset/dataset.h"
#include "app/dataset/dataset_json.h"
#include "app/dataset/item_files.h"
#include "app/dataset/shard_writer.h"
#include "app/dataset/slots.h"
#include "app/sys/file_io.h"
#include "app/sys/json_bytes.h"
#include "app/sys/progress.h"
#include "codec/error.h"
#include "codec/names.h"

namespace mimi::app::dataset {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The error budget of --max-errors: a count ("10") or a share of the shard's items ("2%").
struct ErrorBudget {
  double limit = -1;  // -1: none
  std::string text;
  ErrorBudget(const std::optional<std::string>& s, size_t items) : limit(max_errors_limit(s, items)), text(s.value_or("")) {}
  bool exceeded(size_t errors) const { return limit >= 0 && double(errors) > limit; }
};

// Moves a finished shard aside as the source of its good items, for --retry-errors.
void reopen_for_retry(const ShardPaths& p) {
  std::error_code ec;
  fs::remove(p.done, ec);
  if (ec) throw sys_error(ec.value(), ErrorKind::Output, p.done, "cannot remove");
  if (::rename(p.tar.c_str(), p.retry_tar.c_str()) != 0)
    throw sys_error(errno, ErrorKind::Output, p.retry_tar, "cannot rename the finished tar");
}

struct Reused {
  uint64_t offset = 0, size = 0;
  int64_t frames = 0, samples = 0;
};

std::vector<uint8_t> read_range(std::ifstream& f, uint64_t off, uint64_t n, const std::string& what) {
  std::vector<uint8_t> b(n);
  f.seekg(std::streamoff(off));
  if (!f.read(reinterpret_cast<char*>(b.data()), std::streamsize(n)))
    throw Error(ErrorKind::Input, what + ": cannot read " + std::to_string(n) + " bytes at " + std::to_string(off));
  return b;
}

// Progress on stderr every 10 s: items, hours of audio, x real time of this run.
class ShardProgress {
 public:
  ShardProgress(int shard, size_t items, double planned, bool quiet)
      : shard_(shard), items_(items), planned_(planned), quiet_(quiet) {}
  void resumed(double audio) { before_ += audio; }
  void add(double audio) { run_ += audio; }
  void tick(size_t done, size_t errors) {
    const double t = monotonic_seconds();
    if (quiet_ || t - last_ < 10) return;
    last_ = t;
    const double audio = before_ + run_;
    spdlog::info("{}: {} of {} items, {:.3f} of {:.3f} h audio ({:.0f}%), {:.1f}x real time, {} errors",
                 shard_name(shard_), done, items_, audio / 3600, planned_ / 3600,
                 planned_ > 0 ? std::min(100.0, 100 * audio / planned_) : 100.0, run_ / std::max(1e-9, t - t0_), errors);
  }
  double audio() const { return before_ + run_; }
  double run_audio() const { return run_; }
  double wall() const { return monotonic_seconds() - t0_; }

 private:
  int shard_;
  size_t items_;
  double planned_, before_ = 0, run_ = 0, t0_ = monotonic_seconds(), last_ = monotonic_seconds();
  bool quiet_;
};

}  // namespace

int encode_shard(const EncodeShardOptions& o) {
  check_encode_options(o);
  const Plan plan = read_plan(o.plan);
  const int shard = resolve_shard(o.shard, plan.shards, process_env());
  const ShardPaths paths(o.out, shard);
  const std::string name = shard_name(shard);
  // Every setting that needs no model is checked before the weights load and dataset.json is
  // written: a typo costs a second, not a model load, and leaves nothing behind.
  const std::vector<Item> items = read_shard_items(plan, shard);
  {
    // The shell may have opened stdout or stderr on a file this worker reads (an item: `2>>
    // corpus/a.wav`) or writes (its journal, its tar): refused before anything is written there.
    std::vector<std::string> reads = {(fs::path(o.plan) / "plan.json").string(),
                                      (fs::path(o.plan) / (name + ".jsonl")).string()};
    for (const Item& it : items) reads.push_back(it.path);
    refuse_std_streams_onto(reads);
    refuse_std_streams_onto({paths.tar, paths.partial, paths.journal, paths.index, paths.errors, paths.done,
                             paths.retry_tar, paths.lock, (fs::path(o.out) / "dataset.json").string()},
                            "output");
  }
  const ErrorBudget budget(o.max_errors, items.size());
  (void)Device::parse(o.engine.device);  // a bad device name is a usage error now, not after the load
  if (const json have = dataset_of_plan(o.out, plan); !have.is_null() && have.value("n_q", json()) != json(o.n_q))
    throw Error(ErrorKind::Usage, (fs::path(o.out) / "dataset.json").string() + " was made with n_q " +
                                      have.value("n_q", json()).dump() + "; this run has n_q " + std::to_string(o.n_q) +
                                      " (use another output directory)");
  // A journal of another plan is refused now, as status refuses it, before anything is written.
  if (const json begin = journal_begin(paths.journal); !begin.is_null())
    if (const std::string m = journal_mismatch(paths.journal, begin,
                                               journal_header(shard, {{"shards", plan.shards}, {"plan_sha256", plan.digest}}));
        !m.empty())
      throw Error(ErrorKind::Usage, m);
  std::error_code ec;
  std::string stale;
  json done = read_done(paths, &stale, nullptr, &plan);
  if (!stale.empty()) spdlog::warn("{}; encoding the shard again", stale);  // (as status lists it, naming why)
  // The weights, config and device are checked before a done shard is called done: a run that would
  // be refused on an unfinished shard (other weights: exit 4; no such device: 6) is refused on a
  // finished one too, so an array re-run with the wrong model fails everywhere, not only where
  // work was left (a model load per done shard is the price).
  EngineSpec spec = o.engine;
  spec.parts = {.encoder = true, .decoder = false};
  LoadedEngine le = make_engine(spec);
  Engine& eng = *le.engine;
  if (o.n_q < 1 || o.n_q > eng.config().n_q)
    throw Error(ErrorKind::Usage, "--n-q must be 1.." + std::to_string(eng.config().n_q));
  // dataset.json records the model this output's shards hold: one that is there is held to this run
  // now; a missing one is written when this run records its first item (below), not before, so a
  // run refused at its first item (weights that load but overflow the model: exit 4) leaves no
  // record of its model behind to refuse the next run's.
  const json dsj = dataset_json(o, plan, eng);
  if (fs::exists(fs::path(o.out) / "dataset.json", ec)) ensure_dataset_json(o.out, dsj);
  if (!done.is_null() && !(o.retry_errors && done.value("errors", 0) > 0)) {
    spdlog::info("{}: already done ({} items, {} errors); nothing to do", name, done.value("items", 0), done.value("errors", 0));
    return 0;
  }
  const int rate = eng.config().sample_rate;
  const json header = journal_header(shard, dsj);  // (status holds a journal to the same one)
  if (!done.is_null()) reopen_for_retry(paths);
  bool retried = fs::exists(paths.retry_tar, ec);
  fs::remove(paths.failed, ec);

  while (true) {
    ShardWriter w(paths, header, o.sync_items, o.sync_seconds);
    w.before_first_record([&] { ensure_dataset_json(o.out, dsj); });
    const double run_started = unix_now();
    // --retry-errors: items that succeeded before are copied from the earlier tar, the rest redone
    std::map<std::string, Reused> reuse;
    std::ifstream source;
    if (!w.sealed() && fs::exists(paths.retry_tar, ec)) {
      source.open(paths.retry_tar, std::ios::binary);
      for (const json& j : read_json_lines(paths.index))
        reuse[j.at("key").get<std::string>()] = {j.at("offset").get<uint64_t>(), j.at("size").get<uint64_t>(),
                                                 j.at("frames").get<int64_t>(), j.at("samples").get<int64_t>()};
      spdlog::info("{}: retrying {} failed items (keeping {})", name, items.size() - reuse.size(), reuse.size());
    }
    if (o.retry_errors && !retried && !w.sealed() && w.errors() > 0) {
      // an unfinished (or failed) shard: redo it from its first failed item
      size_t first = 0;
      while (w.entries()[first].ok) ++first;
      spdlog::info("{}: redoing from item {}, its first failed one", name, first);
      w.rewind(first);
    }
    // What fails from here on failed in this very run: no second pass for it. (A shard sealed but
    // not recorded as done still gets its pass below.)
    if (o.retry_errors && !w.sealed()) retried = true;
    if (w.next_index() > 0 && !w.sealed()) spdlog::info("{}: resuming after item {} of {}", name, w.next_index(), items.size());
    double planned = 0;
    for (const Item& it : items) planned += it.duration;
    ShardProgress prog(shard, items.size(), planned, o.quiet);
    for (const JournalEntry& e : w.entries()) prog.resumed(double(e.samples) / rate);
    auto check_budget = [&] {
      if (!budget.exceeded(w.errors())) return;
      w.sync();
      const json f = {{"shard", shard}, {"errors", w.errors()}, {"items", items.size()}, {"max_errors", budget.text},
                      {"at_item", w.next_index()}};
      const std::string text = json_dump(f) + "\n";
      write_output(paths.failed, std::vector<uint8_t>(text.begin(), text.end()), true);
      throw Error(ErrorKind::Input, name + ": failed: " + std::to_string(w.errors()) + " errors exceed --max-errors " +
                                        budget.text + " (see " + paths.failed + "; rerun with a larger limit to go on)");
    };
    check_budget();

    // The machine running out of memory is not the item's fault: nothing is recorded for it, the
    // run stops (exit 75) naming where it was, and a rerun resumes at that item.
    size_t at_item = w.next_index();
    try {
      if (!w.sealed()) {
        std::vector<size_t> order;  // the items to read and encode
        for (size_t i = w.next_index(); i < items.size(); ++i)
          if (!reuse.count(items[i].key)) order.push_back(i);
        // Items go to the tar and the journal in the shard's order: reused ones as they are reached,
        // encoded ones as their results come.
        size_t next_item = w.next_index();
        auto add_reused_before = [&](size_t end) {
          for (; next_item < end; ++next_item) {
            const Item& it = items[next_item];
            const auto r = reuse.find(it.key);
            if (r == reuse.end()) throw Error(ErrorKind::Internal, "an item neither reused nor encoded");
            w.add_item(next_item, it.key, read_range(source, r->second.offset, r->second.size, paths.retry_tar),
                       r->second.frames, r->second.samples);
            prog.resumed(double(r->second.samples) / rate);
          }
        };
        auto add_result = [&](size_t i, ItemResult&& r) {
          add_reused_before(i);
          const Item& it = items[i];
          // the one rule of how much audio an item must hold (verify applies the same): an item
          // that ends well before its planned duration is an error, not a short record; and a file
          // holding less than its own header says (truncated since it was planned) is the item's
          // error whatever it lacks, as plan makes it a bad entry (the file modes only warn)
          if (r.error.empty()) {
            if (std::string why = check_encoded_length(it, r.audio.samples, rate); !why.empty())
              r.error_stage = "read", r.error = why;
            else if (!r.warning.empty())
              r.error_stage = "read", r.error = it.path + ": " + r.warning;
          } else if (!r.warning.empty()) {
            spdlog::warn("{}: {}", it.path, r.warning);
          }
          if (!r.error.empty()) {
            spdlog::warn("{}: item {} ({}): {}", name, i, it.key, r.error);
            w.add_error(i, it.key, it.path, r.error_stage, r.error);
            check_budget();
          } else {
            w.add_item(i, it.key, item_members(it, r.audio, r.codes, rate), r.codes.frames, r.audio.samples);
            prog.add(double(r.audio.samples) / rate);
          }
          prog.tick(i + 1, w.errors());
          next_item = i + 1;
        };
        // every slot holds its item's file open; a batch the open-file limit (or the item count) cuts
        // to one slot runs one by one: the same bytes, with fewer descriptors than one batched slot
        // takes (two items in flight, reader threads)
        const int slots = o.batch > 1 ? batch_slots(o.batch, order.size(), 1) : 1;
        encode_items(eng, o.n_q, slots, items, order, add_result, o.readers);
        add_reused_before(items.size());
      }
    } catch (const std::bad_alloc&) {
      w.sync();
      throw Error(ErrorKind::Environment, name + ": out of memory at item " + std::to_string(at_item) +
                                              (at_item < items.size() ? " (" + printable(items[at_item].path) + ")" : "") +
                                              "; nothing was recorded for it: run again, with more memory" +
                                              (o.batch > 1 ? " or a smaller --batch" : ""));
    }
    const json extra = {{"shard", shard},
                        {"shards", plan.shards},
                        {"plan_sha256", plan.digest},
                        {"n_q", o.n_q},
                        {"weights_fingerprint", eng.model().fingerprint},
                        {"config_fingerprint", eng.model().config_fingerprint()},
                        {"planned_seconds", planned},
                        {"audio_seconds", prog.audio()},
                        {"started", w.begun_at()},
                        {"finished", unix_now()},
                        {"last_run_seconds", unix_now() - run_started}};
    done = w.finish(extra);
    const size_t errors = done.at("errors").get<size_t>();
    if (!o.quiet)
      spdlog::info("{}: done: {} items, {} errors, {:.3f} h audio in {:.1f} s ({:.1f}x real time) -> {}", name,
                   done.at("items").get<size_t>(), errors, prog.audio() / 3600, prog.wall(),
                   prog.run_audio() / std::max(1e-9, prog.wall()), paths.tar);
    if (errors > 0) spdlog::warn("{}: {} items failed; they are listed in {}", name, errors, paths.errors);
    if (retried || !o.retry_errors || errors == 0) break;
    reopen_for_retry(paths);  // --retry-errors on a shard that was unfinished: now redo its errors
    retried = true;
  }
  return 0;
}

}  // namespace mimi::app::dataset
