// `mimi dataset verify`: re-reads every finished shard and checks it against its index, its
// digest, the plan and the model's code range.
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "app/dataset/dataset.h"
#include "app/dataset/item_files.h"
#include "codec/sha256.h"
#include "app/dataset/shard_writer.h"
#include "app/dataset/tar.h"
#include "app/file_io.h"
#include "codec/error.h"

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

void verify_shard(const Plan& plan, int shard, const ShardPaths& p, const json& ds, Checker& bad, Totals& tot) {
  const std::string name = shard_name(shard);
  const json done = read_done(p);
  if (done.is_null()) {
    bad(name + ": not finished (no valid " + p.done + ")");
    return;
  }
  const int n_q = ds.at("n_q").get<int>(), bins = ds.at("codebook_size").get<int>();
  const int64_t frame_size = ds.at("frame_size").get<int64_t>();
  const int rate = ds.at("sample_rate").get<int>();
  if (done.value("plan_sha256", "") != plan.digest) bad(name + ": made from another plan");
  const std::vector<uint8_t> tar = read_input(p.tar);
  if (sha256_hex(tar.data(), tar.size()) != done.value("tar_sha256", ""))
    bad(name + ": " + p.tar + " does not match the sha256 in its .done record");
  std::vector<TarMember> members;
  try {
    members = read_tar(tar, p.tar);
  } catch (const Error& e) {
    bad(e.what());
    return;
  }
  std::vector<json> index, errors;
  try {
    index = read_json_lines(p.index);
    errors = read_json_lines(p.errors);
  } catch (const Error& e) {
    bad(e.what());
    return;
  }
  const std::vector<Item> items = read_shard_items(plan, shard);
  std::set<std::string> failed;
  for (const json& e : errors) failed.insert(e.value("key", ""));
  // The tar holds the planned items that did not fail, in planned order, two members each.
  std::vector<const Item*> expect;
  for (const Item& it : items)
    if (!failed.count(it.key)) expect.push_back(&it);
  if (expect.size() + failed.size() != items.size()) bad(name + ": the errors file names items that are not planned");
  if (index.size() != expect.size() || members.size() != 2 * index.size()) {
    bad(name + ": " + std::to_string(index.size()) + " indexed items and " + std::to_string(members.size()) +
        " tar members for " + std::to_string(expect.size()) + " planned items that did not fail");
    return;
  }
  if (done.value("items", size_t(0)) != items.size() || done.value("errors", size_t(0)) != failed.size())
    bad(name + ": the .done counts do not match the plan and the errors file");
  for (size_t i = 0; i < index.size(); ++i) {
    const Item& it = *expect[i];
    const json& ix = index[i];
    const TarMember &npy = members[2 * i], &meta = members[2 * i + 1];
    const std::string where = name + ": " + it.key;
    if (ix.value("key", "") != it.key) {
      bad(where + ": index names '" + ix.value("key", "") + "' at this place of the planned order");
      continue;
    }
    if (npy.name != it.key + ".npy" || meta.name != it.key + ".json" || ix.value("offset", uint64_t(0)) != npy.header_offset) {
      bad(where + ": the tar members or offsets do not match the index");
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
    } catch (const std::exception& e) {
      bad(where + ".json: not JSON: " + e.what());
      continue;
    }
    const int64_t samples = rec.value("samples", int64_t(-1));
    if (c.n_q != n_q) bad(where + ": " + std::to_string(c.n_q) + " codebooks, the dataset has " + std::to_string(n_q));
    if (c.frames != ix.value("frames", int64_t(-1)) || c.frames != rec.value("frames", int64_t(-1)) ||
        samples != ix.value("samples", int64_t(-2)) || c.frames != (samples + frame_size - 1) / frame_size || c.frames < 1)
      bad(where + ": frames " + std::to_string(c.frames) + " disagree with the index, the item record or its " +
          std::to_string(samples) + " samples");
    // The planned duration (from the manifest or the header) against what was encoded.
    if (it.probe_error.empty() && it.duration > 0) {
      const double got = double(samples) / rate;
      if (std::fabs(got - it.duration) > 0.05 + 1e-3 * it.duration)
        bad(where + ": " + std::to_string(got) + " s encoded, " + std::to_string(it.duration) + " s planned");
    }
    for (size_t k = 0; k < c.data.size(); ++k)
      if (c.data[k] < 0 || c.data[k] >= bins) {
        bad(where + ": code " + std::to_string(c.data[k]) + " (codebook " + std::to_string(k / size_t(std::max<int64_t>(c.frames, 1))) + ") outside [0, " + std::to_string(bins) + ")");
        break;
      }
    tot.seconds += double(samples) / rate;
  }
  tot.items += items.size();
  tot.errors += failed.size();
}

}  // namespace

int verify(const VerifyOptions& o) {
  const json ds = read_dataset_json(o.out);
  const Plan plan = read_plan(o.plan.empty() ? ds.value("plan", "") : o.plan);
  Checker bad;
  if (ds.value("plan_sha256", "") != plan.digest) bad(o.out + "/dataset.json: made from another plan than " + plan.dir);
  Totals tot;
  for (int i = 0; i < plan.shards; ++i) {
    try {
      verify_shard(plan, i, ShardPaths(o.out, i), ds, bad, tot);
    } catch (const Error& e) {
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
