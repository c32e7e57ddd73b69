// OUT/dataset.json: the settings an output is bound to (written with its first recorded item),
// and the one decision whether an output holds a plan's work.
#include "app/dataset/dataset_json.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <map>
#include <mutex>

#include "app/dataset/dataset.h"
#include "app/dataset/plan.h"
#include "app/dataset/shard_writer.h"
#include "app/sys/file_io.h"
#include "app/sys/json_bytes.h"
#include "codec/error.h"
#include "codec/names.h"

namespace mimi::app::dataset {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json dataset_fields(const EncodeShardOptions& o, const Plan& plan, const Engine& eng) {
  const Config& c = eng.config();
  return {{"format", "mimi-dataset"},
          {"version", 1},
          {"tool_version", MIMI_VERSION},
          {"weights_fingerprint", eng.model().fingerprint},
          {"config_fingerprint", eng.model().config_fingerprint()},
          {"weights_dialect", dialect_name(eng.model().dialect)},
          {"n_q", o.n_q},
          {"codebook_size", c.bins},
          {"frame_rate", c.frame_rate},
          {"frame_size", c.frame_size()},
          {"sample_rate", c.sample_rate},
          {"resampler", "soxr"},
          {"resampler_quality", "very high (SOXR_VHQ)"},
          {"channel_policy", "the item's channel from the manifest, else the average of all channels"},
          {"npy", "int16 [n_q, frames], little-endian, C order"},
          {"plan_sha256", plan.digest},
          {"shards", plan.shards},
          // every shard's .done carries the digest of its fields (older outputs' records do not)
          {"done_record", "record_sha256"},
          // and the digests of its index and errors file (older outputs' records do not)
          {"done_files", "index_sha256 errors_sha256"}};
}

// What a second run must agree on with the first (tool version and paths may differ). The
// config's fingerprint too: the same tensors under another config give other codes, and a shard
// resumed under it would hold codes of two models. A dataset.json without one (made before it was
// recorded) is accepted: nothing says which config made it.
void check_same(const json& have, const json& want, const std::string& path) {
  for (const char* k : {"plan_sha256", "n_q", "weights_fingerprint", "config_fingerprint", "sample_rate", "frame_rate",
                        "codebook_size"}) {
    if (have.value(k, json()) == want.at(k)) continue;
    const bool model = std::string(k) == "weights_fingerprint" || std::string(k) == "config_fingerprint";
    if (std::string(k) == "config_fingerprint" && !(have.is_object() && have.contains(k))) continue;
    const ErrorKind kind = model ? ErrorKind::Weights : ErrorKind::Usage;
    throw Error(kind, path + " was made with " + k + " " + json_dump(have.value(k, json())) + "; this run has " +
                          json_dump(want.at(k)) + " (use another output directory)");
  }
  if (have.value("tool_version", "") != want.at("tool_version"))
    spdlog::warn("{} was made by mimi {}; this is {}", path, have.value("tool_version", "?"), MIMI_VERSION);
}

}  // namespace

json dataset_json(const EncodeShardOptions& o, const Plan& plan, const Engine& eng) {
  json j = dataset_fields(o, plan, eng);
  put_path(j, "plan", absolute_path(plan.dir));  // bytes, not UTF-8
  return j;
}

namespace {

// OUT/dataset.json.lock: two one-byte record locks (open-file-description locks: the kernel drops
// them when the process ends, SIGKILL too, and a second descriptor of the same process is not
// confused with the first). Byte 0 is held exclusively while dataset.json is checked and written:
// the check and the write are one step for every worker of the output. Byte 1 is held shared by
// every worker that has agreed with dataset.json, for the rest of its life: a dataset.json that
// recorded nothing yet is replaced only when no live worker holds byte 1, so two workers started
// together with other settings (--n-q, another plan or model) cannot both go on, one under
// settings that the other then overwrites.
constexpr off_t kCheckByte = 0;
constexpr off_t kBoundByte = 1;

bool record_lock(int fd, short type, off_t at, bool wait, const std::string& path) {
  struct flock l {};
  l.l_type = type;
  l.l_whence = SEEK_SET;
  l.l_start = at;
  l.l_len = 1;
  int r;
  do r = ::fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &l);
  while (r < 0 && errno == EINTR);
  if (r == 0) return true;
  if (!wait && (errno == EAGAIN || errno == EACCES)) return false;
  throw sys_error(errno, ErrorKind::Output, path, "cannot lock");
}

// This process's descriptor of OUT/dataset.json.lock (kept open: its byte-1 lock is the binding);
// -1 where OUT cannot hold a new file (a finished output on a read-only volume: checked, never
// written).
struct Binding {
  int fd = -1;
  bool bound = false;
};

Binding& binding_of(const std::string& out) {
  static std::mutex m;
  static std::map<std::string, Binding> held;  // (one entry per output this process works on)
  std::lock_guard<std::mutex> g(m);
  const std::string key = absolute_path(out);
  auto it = held.find(key);
  if (it != held.end()) return it->second;
  Binding b;
  const std::string lock = (fs::path(out) / "dataset.json.lock").string();
  b.fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (b.fd < 0 && errno != EROFS && errno != EACCES && errno != EPERM)
    throw sys_error(errno, ErrorKind::Output, lock, "cannot open");
  return held.emplace(key, b).first->second;
}

}  // namespace

void ensure_dataset_json(const std::string& out, const json& want) {
  const std::string path = (fs::path(out) / "dataset.json").string();
  const std::string lock = path + ".lock";
  const std::string text = json_dump(want, 1) + "\n";
  Binding& b = binding_of(out);
  const bool locked = b.fd >= 0;
  if (locked) record_lock(b.fd, F_WRLCK, kCheckByte, true, lock);
  // (a conversion that fails leaves this process's shared lock as it was: record locks convert in place)
  const bool others_bound = locked && !record_lock(b.fd, F_WRLCK, kBoundByte, false, lock);
  const bool was_bound = b.bound;
  try {
    std::error_code ec;
    bool agreed = false;
    if (!fs::exists(path, ec)) {
      try {
        write_output(path, std::vector<uint8_t>(text.begin(), text.end()), false);
        agreed = true;
      } catch (const Error&) {
        if (!fs::exists(path, ec)) throw;  // made by a worker not holding the lock (an older mimi): compare
      }
    }
    if (!agreed) try {
        check_same(read_dataset_json(out), want, path);
      } catch (const Error& e) {
        // Settings that recorded nothing bind nothing: a first run that wrote dataset.json and then
        // failed before its first record was durable (a full disk, a kill) is replaced, not obeyed;
        // a live worker's is obeyed (it is about to record under it, or recording), this one's too.
        if (e.kind() == ErrorKind::Environment || !locked || others_bound || was_bound || output_holds_records(out))
          throw;
        spdlog::warn("{}: made by a run that recorded no item ({}): replaced with this run's settings", path, e.what());
        write_output(path, std::vector<uint8_t>(text.begin(), text.end()), true);
      }
  } catch (...) {
    if (locked) {
      if (!was_bound) record_lock(b.fd, F_UNLCK, kBoundByte, false, lock);
      else if (!others_bound) record_lock(b.fd, F_RDLCK, kBoundByte, false, lock);
      record_lock(b.fd, F_UNLCK, kCheckByte, false, lock);
    }
    throw;
  }
  if (locked) {
    record_lock(b.fd, F_RDLCK, kBoundByte, false, lock);  // (cannot fail: byte 0 keeps every writer out)
    b.bound = true;
    record_lock(b.fd, F_UNLCK, kCheckByte, false, lock);
  }
}

void refuse_std_streams_onto_dataset(const std::string& out, const std::string& plan_dir) {
  std::vector<std::string> files;
  std::error_code ec;
  auto add_folder = [&](const fs::path& dir) {
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) files.push_back(it->path().string());
    ec.clear();
  };
  if (!out.empty()) {
    files.push_back((fs::path(out) / "dataset.json").string());
    add_folder(fs::path(out) / "shards");
  }
  if (!plan_dir.empty()) add_folder(plan_dir);
  refuse_std_streams_onto(files);
}

json read_dataset_json(const std::string& out) {
  const std::string path = (fs::path(out) / "dataset.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    // Removed by hand, it starts the output over (its shards are not this output's any more; the
    // workers do them again): said as what it is, not as an output no worker has begun.
    if (output_holds_records(out))
      throw Error(ErrorKind::Usage, path + ": missing, while shards there hold recorded work: removed (to start the "
                                           "output over?), nothing says which plan and settings they were made with, "
                                           "so none counts as done; the workers of a plan (--plan PLAN/) do them again");
    throw Error(ErrorKind::Usage, path + ": missing (no item of this output has been recorded yet; give --plan PLAN/)");
  }
  const std::vector<uint8_t> text = read_input(path);
  try {
    return json::parse(text.begin(), text.end());
  } catch (const std::exception& e) {
    throw Error(ErrorKind::Input, path + ": damaged: " + e.what());
  }
}

std::string plan_named_by(const json& dataset, const std::string& out) {
  try {
    if (dataset.is_object() && dataset.contains("plan")) return get_path(dataset, "plan");
  } catch (const std::exception&) {
  }
  throw Error(ErrorKind::Input, (fs::path(out) / "dataset.json").string() + ": names no plan folder; give --plan PLAN/");
}

json dataset_of_plan(const std::string& out, const Plan& plan) {
  std::error_code ec;
  if (!fs::exists(fs::path(out) / "dataset.json", ec)) return nullptr;
  if (!output_holds_records(out)) return nullptr;  // (left by a run that recorded nothing: binds nothing)
  json have = read_dataset_json(out);
  const std::string made_from =
      have.is_object() && have.contains("plan_sha256") && have["plan_sha256"].is_string() ? have["plan_sha256"].get<std::string>() : "";
  if (made_from == plan.digest) return have;
  // Refused, not started over: the shards there are another plan's finished work (the worker
  // would overwrite them, and its new shards would sit beside old ones under one dataset.json),
  // and a worker of the old plan may still be writing there.
  throw Error(ErrorKind::Usage,
              (fs::path(out) / "dataset.json").string() + " was made from another plan (plan_sha256 " +
                  (made_from.empty() ? std::string("?") : made_from.substr(0, 12)) + ") than " +
                  absolute_path(plan.dir) + " (plan_sha256 " +
                  plan.digest.substr(0, 12) +
                  "; was the plan replaced with --force?): none of its shards belong to this plan. Use another "
                  "output directory for this plan (or move " + out + " aside to start over), or give the plan it "
                  "was made from");
}

}  // namespace mimi::app::dataset
