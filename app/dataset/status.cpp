// `mimi dataset status`: what is done, partial, failed or still to do, per shard.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <vector>

#include "app/dataset/dataset.h"
#include "app/dataset/shard_writer.h"
#include "app/sys/json_bytes.h"
#include "codec/error.h"

namespace mimi::app::dataset {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct ShardState {
  int shard = 0;
  std::string state = "todo";  // done, partial, failed, todo
  size_t items = 0, done_items = 0, errors = 0;
  double seconds = 0, done_seconds = 0;
  double started = 0, last = 0;  // Unix times (0: unknown)
};

// A journal read leniently (a line being written may be cut): what the shard has so far.
// The items a journal records whose bytes the shard's tar still holds (`covered`: the size of its
// partial tar, or of the sealed one): the worker resumes after those and encodes the rest again
// (a tar lost or cut short), so status counts only those as done.
void read_journal(const std::string& path, ShardState& s, int rate, double mtime, uint64_t covered) {
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    json j;
    try {
      j = json::parse(line);
    } catch (const std::exception&) {
      break;
    }
    const std::string k = j.is_object() ? j.value("k", "") : "";
    if ((k == "ok" || k == "err") && !(j.contains("end") && j["end"].is_number_unsigned() && j["end"].get<uint64_t>() <= covered))
      break;
    if (k == "ok") ++s.done_items, s.done_seconds += double(j.value("samples", int64_t(0))) / rate;
    if (k == "err") ++s.done_items, ++s.errors;
  }
  s.last = mtime;
}

double mtime_of(const std::string& p) {
  std::error_code ec;
  const auto t = fs::last_write_time(p, ec);
  if (ec) return 0;
  const auto sys = std::chrono::file_clock::to_sys(t);
  return std::chrono::duration<double>(sys.time_since_epoch()).count();
}

std::string duration_text(double s) {
  char b[64];
  if (s < 120) std::snprintf(b, sizeof b, "%.0f s", s);
  else if (s < 7200) std::snprintf(b, sizeof b, "%.0f min", s / 60);
  else std::snprintf(b, sizeof b, "%.1f h", s / 3600);
  return b;
}

}  // namespace

std::string ranges(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(v[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(v[j]);
    }
    i = j + 1;
  }
  return out;
}

namespace {

// The plan folder the most recently begun journal names: dataset.json is written with an output's
// first recorded item, so while workers are still on their first items only their journals say
// which plan they run (the newest: a journal begun by a failed run of another plan that recorded
// nothing is begun anew by the next run).
std::optional<std::string> plan_of_journals(const std::string& out) {
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, std::string>> journals;
  for (fs::directory_iterator d(fs::path(out) / "shards", ec), end; !ec && d != end; d.increment(ec))
    if (d->path().extension() == ".journal") {
      std::error_code tec;
      journals.emplace_back(fs::last_write_time(d->path(), tec), d->path().string());
    }
  std::sort(journals.begin(), journals.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (const auto& [t, j] : journals)
    if (const json begin = journal_begin(j); begin.is_object() && begin.contains("plan")) try {
        return get_path(begin, "plan");
      } catch (const std::exception&) {
      }
  return std::nullopt;
}

}  // namespace

int status(const StatusOptions& o) {
  refuse_std_streams_onto_dataset(o.out, o.plan.value_or(""));
  check_status_options(o);
  std::error_code ec;
  std::string plan_dir;
  // The plan an output is bound to names it; one no item is recorded in yet is bound to nothing (a
  // dataset.json a failed first run left), and the journals of the run now on it say more.
  const bool dataset_json = !o.plan && fs::exists(fs::path(o.out) / "dataset.json", ec);
  std::optional<std::string> journals;
  if (o.plan) plan_dir = *o.plan;
  else if (dataset_json && output_holds_records(o.out)) plan_dir = plan_named_by(read_dataset_json(o.out), o.out);
  else if ((journals = plan_of_journals(o.out))) plan_dir = *journals;
  else if (dataset_json) plan_dir = plan_named_by(read_dataset_json(o.out), o.out);
  else plan_dir = plan_named_by(read_dataset_json(o.out), o.out);  // (its error: none yet, or lost)
  if (!o.plan) refuse_std_streams_onto_dataset("", plan_dir);  // (a given --plan was checked above)
  const Plan plan = read_plan(plan_dir);
  // What the worker asks before it writes anything: an output of another plan (replaced with
  // --force, or another --plan) is refused here as there, with the same message and exit 2, so
  // that status never lists shards for resubmission that every worker refuses.
  const json dsj = dataset_of_plan(o.out, plan);  // null: no worker has started
  const int rate = dsj.is_object() ? dsj.value("sample_rate", 24000) : 24000;
  size_t stale = 0;
  std::vector<ShardState> shards;
  const double now_t = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (int i = 0; i < plan.shards; ++i) {
    ShardState s;
    s.shard = i;
    s.items = plan.shard_items[size_t(i)];
    s.seconds = plan.shard_seconds[size_t(i)];
    const ShardPaths p(o.out, i);
    // Every shard must have its items as planned, or the worker (and verify) refuses it, exit 3, a
    // finished one too: the same check here, so status never calls done, or lists for
    // resubmission, a shard every worker refuses.
    (void)read_shard_items(plan, i);
    std::string why;
    // (no dataset.json: a .done cannot be this output's)
    const json done = dsj.is_object() ? read_done(p, &why, &dsj, &plan) : json();
    if (!why.empty() && ++stale <= 20) spdlog::warn("{}", why);  // a .done that is there but not valid
    if (!done.is_null()) {
      s.state = "done";
      s.done_items = done.value("items", size_t(0));
      s.errors = done.value("errors", size_t(0));
      s.done_seconds = done.value("audio_seconds", 0.0);
      s.started = done.value("started", 0.0);
      s.last = done.value("finished", 0.0);
    } else {
      if (fs::exists(p.journal, ec) || fs::exists(p.partial, ec)) {
        auto size_of = [](const std::string& f) {
          std::error_code sz;
          const uint64_t n = fs::file_size(f, sz);
          return sz ? uint64_t(0) : n;
        };
        const uint64_t covered = std::max(size_of(p.partial), size_of(p.tar));
        read_journal(p.journal, s, rate, mtime_of(p.journal), covered);
        // The worker's own check of the journal: a shard it would refuse is not listed to run.
        // Without a dataset.json only the plan's part of the header is known.
        const json begin = journal_begin(p.journal);
        const json header = journal_header(i, dsj.is_object() ? dsj : json{{"shards", plan.shards}, {"plan_sha256", plan.digest}});
        if (!begin.is_null()) {
          if (const std::string m = journal_mismatch(p.journal, begin, header); !m.empty()) throw Error(ErrorKind::Usage, m);
          if (begin.contains("t") && begin["t"].is_number()) s.started = begin["t"].get<double>();
        }
        s.state = fs::exists(p.failed, ec) ? "failed" : "partial";
      }
    }
    shards.push_back(s);
  }
  std::vector<int> todo;
  size_t n_done = 0, n_partial = 0, n_failed = 0, n_todo = 0;
  double total = 0, done_s = 0, first = 0, last = 0;
  bool running = false;
  for (const ShardState& s : shards) {
    if (s.state != "done") todo.push_back(s.shard);
    n_done += s.state == "done", n_partial += s.state == "partial", n_failed += s.state == "failed";
    n_todo += s.state == "todo";
    total += s.seconds;
    done_s += s.done_seconds;
    if (s.started > 0) first = first > 0 ? std::min(first, s.started) : s.started;
    last = std::max(last, s.last);
    running |= s.state == "partial";
  }
  if (stale > 20) spdlog::warn("... and {} more .done files not taken as done", stale - 20);
  if (running) last = std::max(last, now_t);
  // The observed rate of all workers together: audio done over the time since the first began.
  const double rate_x = last > first && first > 0 ? done_s / (last - first) : 0;
  const double remaining = std::max(0.0, total - done_s);
  const double eta = rate_x > 0 ? remaining / rate_x : -1;

  if (o.format == "ranges") {
    if (!todo.empty()) std::cout << ranges(todo) << "\n";
    return 0;
  }
  if (o.format == "json") {
    json list = json::array();
    for (const ShardState& s : shards) {
      if (o.todo && s.state == "done") continue;
      list.push_back({{"shard", s.shard}, {"state", s.state}, {"items", s.items}, {"done_items", s.done_items},
                      {"errors", s.errors}, {"hours", s.seconds / 3600}, {"done_hours", s.done_seconds / 3600}});
    }
    std::cout << json_dump(json({{"shards", list}, {"done", n_done}, {"partial", n_partial}, {"failed", n_failed},
                       {"todo", n_todo}, {"hours", total / 3600}, {"done_hours", done_s / 3600},
                       {"real_time_factor", rate_x},
                       {"eta_seconds", eta < 0 || n_done == shards.size() ? json(nullptr) : json(eta)},
                       {"todo_ranges", ranges(todo)}}),
                           1)
              << "\n";
    return 0;
  }
  std::printf("%-12s %-8s %8s %8s %8s %9s %9s\n", "shard", "state", "items", "done", "errors", "hours", "done_h");
  for (const ShardState& s : shards) {
    if (o.todo && s.state == "done") continue;
    std::printf("%-12s %-8s %8zu %8zu %8zu %9.3f %9.3f\n", shard_name(s.shard).c_str(), s.state.c_str(), s.items,
                s.done_items, s.errors, s.seconds / 3600, s.done_seconds / 3600);
  }
  std::printf("%d shards: %zu done, %zu partial, %zu failed, %zu todo; %.3f of %.3f h done (%.0f%%)", plan.shards,
              n_done, n_partial, n_failed, n_todo, done_s / 3600, total / 3600, total > 0 ? 100 * done_s / total : 100.0);
  if (rate_x > 0) std::printf("; %.1fx real time", rate_x);
  if (n_done < shards.size() && eta >= 0) std::printf("; ETA %s", duration_text(eta).c_str());
  std::printf("\n");
  std::fflush(stdout);
  return 0;
}

}  // namespace mimi::app::dataset
