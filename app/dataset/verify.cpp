// `mimi dataset verify`: re-reads every finished shard and checks it against its index, its
// digest, the plan and the model's code range.
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <tuple>
#include <fstream>
#include <map>
#include <set>

#include "app/dataset/dataset.h"
#include "app/dataset/item_files.h"
#include "app/dataset/shard_writer.h"
#include "app/dataset/tar.h"
#include "app/sys/file_io.h"
#include "app/sys/json_bytes.h"
#include "codec/error.h"
#include "codec/sha256.h"

namespace mimi::app::dataset {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Checker {
  size_t problems = 0;
  void operator()(const std::string& msg) {
    if (++problems <= 50) spdlog::error("{}", msg);
  }
};

struct Totals {
  size_t items = 0, errors = 0;
  double seconds = 0;
};

// Everything a finished shard's files say about each other and about the plan: the .done record
// (read_done: this output's plan, n_q, weights) against the tar, index and errors file; the tar's
// digest and structure; every index line's fields against its members; the errors file against
// the plan; each item's record against its planned item; codes, frames and the planned length
// (check_encoded_length, the worker's own rule).
void verify_shard(const Plan& plan, int shard, const ShardPaths& p, const json& ds, Checker& bad, Totals& tot) {
  const std::string name = shard_name(shard);
  std::string why;
  json done = read_done(p, &why, &ds, &plan);  // every field against dataset.json, the plan, the tar's size
  if (done.is_null()) {
    // A record that is there but not valid, beside its tar: every field is held to the files
    // below and each disagreement named (read_done's reason alone cannot tell which of two
    // fields that disagree is the wrong one).
    std::error_code ec;
    if (!why.empty() && fs::exists(p.tar, ec)) {
      try {
        const std::vector<uint8_t> b = read_input(p.done);
        done = json::parse(b.begin(), b.end());
      } catch (const Error& e) {
        if (e.kind() == ErrorKind::Environment) throw;  // the machine's failure is never a verdict
        done = nullptr;
      } catch (const std::exception&) {
        done = nullptr;
      }
    }
    if (!done.is_object()) {
      bad(name + ": not finished (" + (why.empty() ? "no " + p.done : why) + ")");
      return;
    }
    bad(name + ": not finished: " + p.done + " is not valid for this output (each field that disagrees is named)");
  }
  const int n_q = ds.at("n_q").get<int>(), bins = ds.at("codebook_size").get<int>();
  const int64_t frame_size = ds.at("frame_size").get<int64_t>();
  const int rate = ds.at("sample_rate").get<int>();
  const std::vector<uint8_t> tar = read_input(p.tar);
  DoneFacts facts;  // what the files say, for every field of the .done (done_problems, at the end)
  facts.shard = shard, facts.dataset = &ds, facts.plan = &plan;
  facts.tar_bytes = tar.size();
  facts.tar_sha256 = sha256_hex(tar.data(), tar.size());
  // The fields of the .done against the facts gathered so far (at the end: all of them).
  const auto check_done = [&] {
    for (const std::string& m : done_problems(done, facts)) bad(name + ": " + p.done + ": " + m);
  };
  std::vector<TarMember> members;
  try {
    members = read_tar(tar, p.tar);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Environment) throw;  // an I/O error says nothing of the shard: exit 75
    bad(e.what());
    return check_done();
  }
  std::vector<json> index, errors;
  try {
    // each read once: its digest (against the .done) and its lines are of the same bytes
    for (const auto& [file, digest, lines] : {std::tuple{&p.index, &facts.index_sha256, &index},
                                              std::tuple{&p.errors, &facts.errors_sha256, &errors}}) {
      const std::vector<uint8_t> text = read_input(*file);
      *digest = sha256_hex(text.data(), text.size());
      *lines = parse_json_lines(text, *file);
    }
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Environment) throw;
    bad(e.what());
    return check_done();
  }
  const std::vector<Item> items = read_shard_items(plan, shard);
  std::map<std::string, const Item*> by_key;
  for (const Item& it : items) by_key[it.key] = &it;
  // The errors file: planned items, each once, with their planned path and a known stage.
  std::set<std::string> failed;
  for (size_t i = 0; i < errors.size(); ++i) {
    const json& e = errors[i];
    const std::string where = name + ": " + p.errors + ":" + std::to_string(i + 1);
    if (!e.is_object() || !e.contains("key") || !e["key"].is_string()) {
      bad(where + ": no key");
      continue;
    }
    const std::string key = e["key"].get<std::string>();
    const auto it = by_key.find(key);
    if (it == by_key.end()) {
      bad(where + ": names '" + key + "', which is not planned in this shard");
      continue;
    }
    if (!failed.insert(key).second) bad(where + ": names '" + key + "' a second time");
    std::string path;
    try {
      path = get_path(e, "path");
    } catch (const std::exception&) {
      path = "\x01";  // not a path: reported below
    }
    if (path != it->second->path) bad(where + ": its path is not the planned " + it->second->path);
    const std::string stage = e.value("stage", "");
    if (stage != "open" && stage != "read") bad(where + ": stage '" + stage + "' is not open or read");
    if (!e.contains("message") || !e["message"].is_string()) bad(where + ": no message");
  }
  // The tar holds the planned items that did not fail, in planned order, two members each.
  std::vector<const Item*> expect;
  for (const Item& it : items)
    if (!failed.count(it.key)) expect.push_back(&it);
  if (index.size() != expect.size() || members.size() != 2 * index.size()) {
    bad(name + ": " + std::to_string(index.size()) + " indexed items and " + std::to_string(members.size()) +
        " tar members for " + std::to_string(expect.size()) + " planned items that did not fail");
    return check_done();
  }
  // The index's totals, of every line (as read_done sums them): what the .done is held to, also
  // where a line is out of place below (a partial sum was stated as "the index has").
  int64_t sum_frames = 0, sum_samples = 0;
  for (const json& ix : index)
    for (auto [k, sum] : {std::pair{"frames", &sum_frames}, std::pair{"samples", &sum_samples}})
      if (ix.is_object() && ix.contains(k) && ix[k].is_number_unsigned()) *sum += ix[k].get<int64_t>();
  for (size_t i = 0; i < index.size(); ++i) {
    const Item& it = *expect[i];
    const json& ix = index[i];
    const TarMember &npy = members[2 * i], &meta = members[2 * i + 1];
    const std::string where = name + ": " + it.key;
    const auto field = [&](const char* k) -> int64_t {  // -1: missing or not a count
      return ix.is_object() && ix.contains(k) && ix[k].is_number_unsigned() ? ix[k].get<int64_t>() : -1;
    };
    if (!ix.is_object() || ix.value("key", "") != it.key) {
      bad(where + ": index line " + std::to_string(i + 1) + " names '" + (ix.is_object() ? ix.value("key", "") : "") +
          "' at this place of the planned order");
      continue;
    }
    // "size" spans both members: from the .npy header to the end of the padded .json data.
    const uint64_t span = meta.data_offset + (meta.size + kTarBlock - 1) / kTarBlock * kTarBlock - npy.header_offset;
    if (npy.name != it.key + ".npy" || meta.name != it.key + ".json" || field("offset") != int64_t(npy.header_offset) ||
        field("size") != int64_t(span)) {
      bad(where + ": the tar members, offset or size do not match the index");
      continue;
    }
    Codes c;
    try {
      c = parse_npy_int16(tar.data() + npy.data_offset, size_t(npy.size), where + ".npy");
    } catch (const Error& e) {
      bad(e.what());
      continue;
    }
    json rec;
    try {
      rec = json::parse(tar.begin() + std::ptrdiff_t(meta.data_offset),
                        tar.begin() + std::ptrdiff_t(meta.data_offset + meta.size));
      if (!rec.is_object()) throw std::runtime_error("not an object");
      if (get_path(rec, "id") != it.id || get_path(rec, "path") != it.path || rec.value("key", "") != it.key ||
          rec.value("channel", "") != channel_name(it.channel) || rec.value("n_q", -1) != n_q ||
          rec.value("sample_rate", -1) != rate || std::fabs(rec.value("start", -1.0) - it.start) > 1e-9)
        bad(where + ".json: its id, path, key, channel, start, n_q or sample rate is not the planned item's");
    } catch (const std::exception& e) {
      bad(where + ".json: not the item's JSON record: " + e.what());
      continue;
    }
    const int64_t samples = rec.value("samples", int64_t(-1));
    if (c.n_q != n_q) bad(where + ": " + std::to_string(c.n_q) + " codebooks, the dataset has " + std::to_string(n_q));
    if (c.frames != field("frames") || c.frames != rec.value("frames", int64_t(-1)) || samples != field("samples") ||
        c.frames != (samples + frame_size - 1) / frame_size || c.frames < 1)
      bad(where + ": frames " + std::to_string(c.frames) + " disagree with the index, the item record or its " +
          std::to_string(samples) + " samples");
    // The planned length, by the worker's own rule: what it would have recorded as an error.
    if (const std::string m = check_encoded_length(it, samples, rate); !m.empty()) bad(where + ": " + m);
    for (size_t k = 0; k < c.data.size(); ++k)
      if (c.data[k] < 0 || c.data[k] >= bins) {
        bad(where + ": code " + std::to_string(c.data[k]) + " (codebook " + std::to_string(k / size_t(std::max<int64_t>(c.frames, 1))) + ") outside [0, " + std::to_string(bins) + ")");
        break;
      }
    tot.seconds += double(samples) / rate;
  }
  // Every field of the .done record against what the files hold, each disagreement by name.
  facts.ok = int64_t(index.size()), facts.errors = int64_t(failed.size());
  facts.samples = sum_samples, facts.frames = sum_frames;
  double planned = 0;  // summed as the worker sums it
  for (const Item& it : items) planned += it.duration;
  facts.planned_seconds = planned;
  check_done();
  tot.items += items.size();
  tot.errors += failed.size();
}

}  // namespace

int verify(const VerifyOptions& o) {
  refuse_std_streams_onto_dataset(o.out, o.plan.value_or(""));
  check_verify_options(o);
  const json ds = read_dataset_json(o.out);
  const std::string plan_dir = o.plan ? *o.plan : plan_named_by(ds, o.out);
  if (!o.plan) refuse_std_streams_onto_dataset("", plan_dir);  // (a given --plan was checked above)
  const Plan plan = read_plan(plan_dir);
  Checker bad;
  // The worker's and status's own decision (dataset_of_plan); for verify, a problem (exit 3):
  // nothing of this output can be checked against a plan it was not made from.
  try {
    dataset_of_plan(o.out, plan);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Usage) throw;
    bad(e.what());
    throw Error(ErrorKind::Input, "verify: " + o.out + " was not made from " + plan.dir);
  }
  Totals tot;
  for (int i = 0; i < plan.shards; ++i) {
    try {
      verify_shard(plan, i, ShardPaths(o.out, i), ds, bad, tot);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::Environment) throw;
      bad(shard_name(i) + ": " + e.what());
    }
  }
  if (bad.problems)
    throw Error(ErrorKind::Input, "verify: " + std::to_string(bad.problems) + " problems in " + o.out);
  spdlog::info("verify: ok: {} shards, {} items ({} recorded as errors), {:.3f} h of audio", plan.shards, tot.items,
               tot.errors, tot.seconds / 3600);
  return 0;
}

}  // namespace mimi::app::dataset
