#include "app/dataset/plan.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <queue>
#include <sstream>
#include <thread>

#include "app/sys/file_io.h"
#include "app/sys/json_bytes.h"
#include "app/sys/staging_folder.h"
#include "codec/error.h"
#include "codec/sha256.h"

namespace mimi::app::dataset {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string read_file_text(const std::string& path) {
  const std::vector<uint8_t> b = read_input(path);
  return {b.begin(), b.end()};
}

// Paths and ids (ids made from file names) are bytes: put_path / get_path (app/sys/json_bytes.h).
json item_json(const Item& it) {
  json j = {{"key", it.key}};
  put_path(j, "id", it.id);
  put_path(j, "path", it.path);
  j["duration"] = it.duration;
  if (it.start > 0 || it.end >= 0) j["start"] = it.start;
  if (it.end >= 0) j["end"] = it.end;
  j["channel"] = it.channel < 0 ? json("mix") : json(it.channel);
  if (!it.probe_error.empty()) j["probe_error"] = it.probe_error;
  return j;
}

Item item_from_json(const json& j) {
  Item it;
  it.key = j.at("key").get<std::string>();
  it.id = get_path(j, "id");
  it.path = get_path(j, "path");
  it.duration = j.at("duration").get<double>();
  it.start = j.value("start", 0.0);
  it.end = j.value("end", -1.0);
  const json& c = j.at("channel");
  it.channel = c.is_string() ? -1 : c.get<int>();
  it.probe_error = j.value("probe_error", "");
  return it;
}

std::optional<long long> parse_int(const std::optional<std::string>& s) {
  if (!s || s->empty()) return std::nullopt;
  long long v = 0;
  const auto r = std::from_chars(s->data(), s->data() + s->size(), v);
  if (r.ec != std::errc() || r.ptr != s->data() + s->size()) return std::nullopt;
  return v;
}

}  // namespace

std::string shard_name(int shard) {
  char b[32];
  std::snprintf(b, sizeof b, "shard-%05d", shard);
  return b;
}

std::vector<std::vector<Item>> balance(std::vector<Item> items, int n) {
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.duration != b.duration ? a.duration > b.duration : a.key < b.key;
  });
  std::vector<std::vector<Item>> shards(static_cast<size_t>(n));
  // The least loaded shard, lowest index among equals: a min-heap of (load, index), not a scan of
  // all shards per item (100 k items into 99 999 shards).
  using Load = std::pair<double, int>;
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> heap;
  for (int s = 0; s < n; ++s) heap.push({0.0, s});
  for (Item& it : items) {
    auto [load, s] = heap.top();
    heap.pop();
    shards[size_t(s)].push_back(std::move(it));
    heap.push({load + shards[size_t(s)].back().duration, s});
  }
  for (auto& s : shards)
    std::sort(s.begin(), s.end(), [](const Item& a, const Item& b) {
      return a.duration != b.duration ? a.duration < b.duration : a.key < b.key;
    });
  return shards;
}

namespace {

// The shard lists of an earlier plan that had more shards
void remove_stale_shards(const std::string& dir, int n) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    int idx = -1;
    if (name.size() == 17 && name.rfind("shard-", 0) == 0 && name.substr(11) == ".jsonl" &&
        std::from_chars(name.data() + 6, name.data() + 11, idx).ptr == name.data() + 11 && idx >= n)
      fs::remove(it->path(), ec);
  }
}

}  // namespace

void make_plan(const PlanOptions& o) {
  check_plan_options(o);
  const std::string plan_json = (fs::path(o.out) / "plan.json").string();
  std::error_code ec;
  if (fs::exists(plan_json, ec) && !o.force)
    throw Error(ErrorKind::Output, plan_json + ": exists; a plan is fixed once made (use --force to replace it)");
  std::vector<Manifest> manifests;
  Problems problems;  // every bad entry of every manifest, reported together
  std::vector<Item> items = read_manifests(o.manifests, manifests, &problems);
  const int threads = o.probe_threads > 0 ? o.probe_threads : int(std::max(1u, std::thread::hardware_concurrency()) * 4);
  const size_t unknown = std::count_if(items.begin(), items.end(), [](const Item& i) { return i.duration < 0; });
  if (unknown) spdlog::info("reading the durations of {} files from their headers", unknown);
  const Inspection seen = inspect_items(items, manifests, threads, problems);
  if (!problems.empty()) {
    if (!o.skip_bad || !problems.all_skippable()) problems.fail(true);
    problems.warn_all();
  }
  if (items.empty())
    throw Error(ErrorKind::Input, problems.empty() ? std::string("the manifests list no audio")
                                                   : "the manifests list no audio but " + std::to_string(problems.size()) +
                                                         " bad entries (above); no plan written");
  if (!problems.empty())  // (said once skipped.txt will be written, below)
    spdlog::warn("{} bad entries left out of the plan (skip_bad); listed in {}", problems.size(),
                 (fs::path(o.out) / "skipped.txt").string());
  for (Manifest& m : manifests) m.items = 0;  // what is planned of each (bad entries left out)
  for (const Item& it : items)
    if (it.source >= 0 && size_t(it.source) < manifests.size()) ++manifests[size_t(it.source)].items;
  if (seen.unreadable)
    spdlog::warn("{} files cannot be read now; they are planned and will be recorded as errors unless they are "
                 "readable when their shard runs",
                 seen.unreadable);
  if (seen.clipped)
    spdlog::info("{} segments end at most {} s after the end of their file: planned to its end", seen.clipped,
                 kMaxOvershootSeconds);
  double total = 0;
  for (const Item& it : items) total += it.duration;
  // Every number a plan writes must read back as one (JSON has no infinity): durations that are
  // each finite may still add up past what a double holds.
  if (!std::isfinite(total))
    throw Error(ErrorKind::Input, "the manifests' durations add up to more than can be counted (" +
                                      std::to_string(items.size()) + " items); no plan written");
  // (counted as a double and compared before it becomes an int: a tiny --shard-hours over a long
  // corpus is more shards than an int holds, not one shard)
  const double wanted = o.shards > 0 ? o.shards : std::ceil(total / 3600.0 / o.shard_hours - 1e-9);
  if (!(wanted <= 99999))
    throw Error(ErrorKind::Usage, "more than 99999 shards (" + std::to_string(total / 3600.0) + " h at --shard-hours " +
                                      std::to_string(o.shard_hours) + "); give a larger --shard-hours");
  const int n = std::max(1, int(wanted));
  const size_t n_items = items.size();
  const auto shards = balance(std::move(items), n);

  // Everything is written into a temporary folder inside the output first and published at once
  // (plan.json last): a full disk, an error or a signal meanwhile leaves the folder as it was, an
  // earlier plan included.
  StagingFolder staged(o.out);
  json jm = json::array(), hours = json::array(), counts = json::array(), digests = json::array();
  for (const Manifest& m : manifests) {
    json e = {{"kind", m.kind}, {"sha256", m.sha256}, {"items", m.items}};
    put_path(e, "path", m.path);
    jm.push_back(e);
  }
  for (int s = 0; s < n; ++s) {
    std::string text;
    double secs = 0;
    for (const Item& it : shards[size_t(s)]) {
      text += json_dump(item_json(it)) + "\n";
      secs += it.duration;
    }
    staged.write(shard_name(s) + ".jsonl", text);
    hours.push_back(secs / 3600.0);
    counts.push_back(shards[size_t(s)].size());
    digests.push_back(sha256_hex(text.data(), text.size()));
  }
  const std::string skipped = (fs::path(o.out) / "skipped.txt").string();
  if (o.skip_bad) {
    std::string text;
    for (const std::string& p : problems.list()) text += printable(p) + "\n";  // one line each
    staged.write("skipped.txt", text);
  }
  json plan = {{"format", "mimi-dataset-plan"},
               {"version", 1},
               {"tool_version", MIMI_VERSION},
               {"manifests", jm},
               {"items", n_items},
               {"hours", total / 3600.0},
               {"shards", n},
               {"shard_hours", hours},
               {"shard_items", counts},
               {"shard_sha256", digests},
               {"order", "each shard by duration, shortest first"},
               {"options", {{"shards", o.shards}, {"shard_hours", o.shard_hours}}}};
  if (o.skip_bad) plan["skipped_entries"] = problems.size();
  staged.write("plan.json", json_dump(plan, 1) + "\n");  // last: a plan is complete once it exists
  // One plan at a time into a folder: publishing holds an flock on the folder, and under it a
  // plan.json made meanwhile by another run is refused as an existing one is (two runs started
  // together both exited 0, the later renames mixing their shard files).
  struct DirLock {
    int fd = -1;
    ~DirLock() {
      if (fd >= 0) ::close(fd);
    }
  } lock;
  staged.publish([&] {
    lock.fd = ::open(o.out.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lock.fd < 0) throw sys_error(errno, ErrorKind::Output, o.out, "cannot open");
    int r;
    do r = ::flock(lock.fd, LOCK_EX);
    while (r != 0 && errno == EINTR);
    if (r != 0) throw sys_error(errno, ErrorKind::Output, o.out, "cannot lock");
    if (!o.force && fs::exists(plan_json, ec))
      throw Error(ErrorKind::Output, plan_json + ": made meanwhile by another run; a plan is fixed once made (use "
                                                 "--force to replace it)");
    // A replaced plan stops being one first: no moment shows its plan.json over new shard files.
    if (::unlink(plan_json.c_str()) != 0 && errno != ENOENT)
      throw sys_error(errno, ErrorKind::Output, plan_json, "cannot remove the old plan");
    remove_stale_shards(o.out, n);
    if (!o.skip_bad) fs::remove(skipped, ec);  // an earlier plan's
  });
  double hmin = 1e300, hmax = 0;
  for (const auto& h : hours) hmin = std::min(hmin, h.get<double>()), hmax = std::max(hmax, h.get<double>());
  spdlog::info("planned {} items, {:.3f} h, into {} shards of {:.3f} - {:.3f} h -> {}", n_items, total / 3600.0, n, hmin,
               hmax, plan_json);
}

Plan read_plan(const std::string& dir) {
  Plan p;
  p.dir = dir;
  const std::string path = (fs::path(dir) / "plan.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(ErrorKind::Usage, dir + ": no plan.json (make one with `mimi dataset plan`)");
  const std::string text = read_file_text(path);
  p.digest = sha256_hex(text.data(), text.size());
  try {
    p.meta = json::parse(text);
    if (p.meta.at("format") != "mimi-dataset-plan") throw std::runtime_error("not a mimi dataset plan");
    p.shards = p.meta.at("shards").get<int>();
    p.shard_seconds.clear();
    for (const auto& h : p.meta.at("shard_hours")) p.shard_seconds.push_back(h.get<double>() * 3600.0);
    for (const auto& c : p.meta.at("shard_items")) p.shard_items.push_back(c.get<size_t>());
    if (p.shards < 1 || p.shard_seconds.size() != size_t(p.shards) || p.shard_items.size() != size_t(p.shards))
      throw std::runtime_error("shard lists do not match the shard count");
  } catch (const std::exception& e) {
    throw Error(ErrorKind::Input, path + ": damaged plan: " + e.what());
  }
  return p;
}

std::vector<Item> read_shard_items(const Plan& p, int shard) {
  const std::string path = (fs::path(p.dir) / (shard_name(shard) + ".jsonl")).string();
  const std::string text = read_file_text(path);
  if (sha256_hex(text.data(), text.size()) != p.meta.at("shard_sha256").at(size_t(shard)).get<std::string>())
    throw Error(ErrorKind::Input, path + ": changed since it was planned (digest differs from plan.json)");
  std::vector<Item> items;
  std::istringstream s(text);
  for (std::string line; std::getline(s, line);) {
    try {
      items.push_back(item_from_json(json::parse(line)));
    } catch (const std::exception& e) {
      throw Error(ErrorKind::Input, path + ": damaged item: " + e.what());
    }
  }
  return items;
}

EnvLookup process_env() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

int resolve_shard(const std::string& spec, int plan_shards, const EnvLookup& env) {
  const std::string total = std::to_string(plan_shards);
  if (spec != "auto") {
    const size_t slash = spec.find('/');
    // I and N are digits only: "-0/2" is as much a typo as "+1/2" (from_chars takes a minus)
    const auto digits = [](const std::string& t) -> std::optional<long long> {
      if (t.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
      return parse_int(t);
    };
    const auto i = digits(spec.substr(0, slash));
    const auto n = slash == std::string::npos ? std::nullopt : digits(spec.substr(slash + 1));
    if (!i || !n || *n < 1 || *i < 0 || *i >= *n)
      throw Error(ErrorKind::Usage, "--shard must be I/N with 0 <= I < N, or auto; got '" + spec + "'");
    if (*n != plan_shards)
      throw Error(ErrorKind::Usage, "--shard " + spec + ": the plan has " + total + " shards, not " + std::to_string(*n));
    return int(*i);
  }
  struct Source {
    std::string what;
    long long index;
  };
  std::vector<Source> found;
  auto need = [&](const char* name) {
    const auto v = parse_int(env(name));
    if (!v) throw Error(ErrorKind::Usage, std::string("--shard auto: ") + name + " is not an integer ('" +
                                              env(name).value_or("") + "')");
    return *v;
  };
  // A launcher's rank counts only when its task count is the plan's N (DATASETS.md): torchrun's
  // ranks inside one Slurm step inherit SLURM_PROCID=0 SLURM_NTASKS=1, which then say nothing.
  // A count that disagrees is the error only when no launcher fits.
  std::string miscounted;
  auto counts = [&](const char* name, long long count) {
    if (count == plan_shards) return true;
    if (miscounted.empty())
      miscounted = std::string("--shard auto: ") + name + "=" + std::to_string(count) + " but the plan has " + total + " shards";
    return false;
  };
  if (env("SLURM_ARRAY_TASK_ID")) {
    const long long id = need("SLURM_ARRAY_TASK_ID");
    const long long min = env("SLURM_ARRAY_TASK_MIN") ? need("SLURM_ARRAY_TASK_MIN") : 0;
    // A whole array (as many tasks as shards) may start at any id (--array=1-N): the shard is the
    // offset from its first id. A smaller array is a subset, resubmitted from `status --todo
    // --format ranges`, whose ids are the shard indices themselves: offsetting them would run
    // other shards than the ones asked for (and report success).
    if (env("SLURM_ARRAY_TASK_COUNT") && need("SLURM_ARRAY_TASK_COUNT") != plan_shards)
      found.push_back({"SLURM_ARRAY_TASK_ID " + std::to_string(id) + " (an array of " +
                           std::to_string(need("SLURM_ARRAY_TASK_COUNT")) + " tasks for " + total +
                           " shards: its ids are shard indices)",
                       id});
    else
      found.push_back({"SLURM_ARRAY_TASK_ID " + std::to_string(id) + " - SLURM_ARRAY_TASK_MIN " + std::to_string(min), id - min});
  } else if (env("SLURM_PROCID") && env("SLURM_NTASKS")) {
    if (counts("SLURM_NTASKS", need("SLURM_NTASKS"))) found.push_back({"SLURM_PROCID", need("SLURM_PROCID")});
  }
  if (env("RANK") && env("WORLD_SIZE")) {
    if (counts("WORLD_SIZE", need("WORLD_SIZE"))) found.push_back({"RANK", need("RANK")});
  }
  if (env("JOB_COMPLETION_INDEX")) found.push_back({"JOB_COMPLETION_INDEX", need("JOB_COMPLETION_INDEX")});
  if (found.empty() && !miscounted.empty()) throw Error(ErrorKind::Usage, miscounted);
  if (found.empty())
    throw Error(ErrorKind::Usage, "--shard auto: none of SLURM_ARRAY_TASK_ID, SLURM_PROCID/SLURM_NTASKS, "
                                  "RANK/WORLD_SIZE, JOB_COMPLETION_INDEX is set; give --shard I/N");
  for (const Source& s : found)
    if (s.index != found[0].index)
      throw Error(ErrorKind::Usage, "--shard auto: the launchers disagree: " + found[0].what + " gives " +
                                        std::to_string(found[0].index) + ", " + s.what + " gives " +
                                        std::to_string(s.index) + "; give --shard I/N");
  if (found[0].index < 0 || found[0].index >= plan_shards)
    throw Error(ErrorKind::Usage, "--shard auto: " + found[0].what + " gives shard " + std::to_string(found[0].index) +
                                      ", outside the plan's 0.." + std::to_string(plan_shards - 1));
  return int(found[0].index);
}

}  // namespace mimi::app::dataset
