#include "app/dataset/done_record.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string_view>

#include "app/dataset/plan.h"
#include "app/sys/file_io.h"
#include "app/sys/json_bytes.h"
#include "codec/error.h"
#include "codec/sha256.h"

namespace mimi::app::dataset {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A .done's fields, as finish() and encode_shard write them, by kind: a count (a JSON unsigned
// integer), a number (finite), a string. A field written but not listed here makes every .done
// invalid (a field the writer never writes), so a new one cannot go unchecked.
enum class FieldKind { Count, Number, String };
const std::vector<std::pair<std::string, FieldKind>> kDoneFields = {
    {"shard", FieldKind::Count},          {"shards", FieldKind::Count},
    {"plan_sha256", FieldKind::String},   {"n_q", FieldKind::Count},
    {"weights_fingerprint", FieldKind::String},   {"config_fingerprint", FieldKind::String},
    {"planned_seconds", FieldKind::Number}, {"audio_seconds", FieldKind::Number},
    {"started", FieldKind::Number},       {"finished", FieldKind::Number},
    {"last_run_seconds", FieldKind::Number},
    {"items", FieldKind::Count},          {"ok", FieldKind::Count},
    {"errors", FieldKind::Count},         {"samples", FieldKind::Count},
    {"frames", FieldKind::Count},         {"tar_bytes", FieldKind::Count},
    {"tar_sha256", FieldKind::String},    {"record_sha256", FieldKind::String},
    {"index_sha256", FieldKind::String},  {"errors_sha256", FieldKind::String}};

// The digests of the index and the errors file: any change to them (lines reordered, an offset one
// off, a key renamed) makes the shard not done for the worker and status, as verify fails it.
// Required where dataset.json says the records carry them ("done_files"); an older output's do not.
const std::vector<std::string> kFileDigests = {"index_sha256", "errors_sha256"};

// The sha256 of the record's other fields (json_dump: keys sorted), written last into the record:
// any edit by hand, also one that keeps every value possible (a frame count one off, another
// digest), makes the record not this shard's. A record made before it existed lacks it.
const std::string kRecordDigest = "record_sha256";
std::string record_digest(json d) {
  d.erase(kRecordDigest);
  const std::string text = json_dump(d);
  return sha256_hex(text.data(), text.size());
}

// Seconds summed item by item against a total divided once, or hours written and read back:
// equal up to rounding, while one sample (1/24000 s) more or less is not.
bool close(double a, double b) { return std::fabs(a - b) <= 1e-6 + 1e-9 * std::max(std::fabs(a), std::fabs(b)); }

}  // namespace

std::vector<std::string> done_problems(const json& d, const DoneFacts& f) {
  if (!d.is_object()) return {"not a JSON object"};
  std::vector<std::string> out;
  auto bad = [&](const std::string& k, const std::string& why) { out.push_back("'" + k + "' " + why); };
  for (const auto& item : d.items()) {  // (not a structured binding: clang 14 cannot capture one in a lambda)
    const std::string k = item.key();
    if (std::none_of(kDoneFields.begin(), kDoneFields.end(), [&](const auto& e) { return e.first == k; }))
      bad(k, "is not a field of a .done record");
  }
  // Each field of the right kind, or named once as missing or mistyped; the checks below take
  // only well-typed fields.
  std::map<std::string, json> v;
  for (const auto& [k, kind] : kDoneFields) {
    if (!d.contains(k)) {
      // (required where dataset.json records one: this output's shards were all written with it)
      if (k == kOptionalDoneField && !(f.dataset && f.dataset->is_object() && f.dataset->contains(k))) continue;
      // (required in an output whose dataset.json says its records carry it: the older ones do not)
      if (k == kRecordDigest && !(f.dataset && f.dataset->is_object() && f.dataset->value("done_record", "") == k)) continue;
      if (std::count(kFileDigests.begin(), kFileDigests.end(), k) &&
          !(f.dataset && f.dataset->is_object() && f.dataset->contains("done_files")))
        continue;
      bad(k, "is missing");
      continue;
    }
    const json& x = d[k];
    const bool ok = kind == FieldKind::Count    ? x.is_number_unsigned()
                    : kind == FieldKind::Number ? x.is_number() && std::isfinite(x.get<double>())
                                                : x.is_string();
    if (ok) v[k] = x;
    else bad(k, std::string("is ") + json_dump(x) + ", not " +
                    (kind == FieldKind::Count ? "a count" : kind == FieldKind::Number ? "a number" : "a string"));
  }
  auto has = [&](const char* k) { return v.count(k) > 0; };
  auto n = [&](const char* k) { return v.at(k).get<double>(); };
  auto c = [&](const char* k) { return v.at(k).get<uint64_t>(); };
  auto differs = [&](const char* k, const json& want, const std::string& source) {
    if (has(k) && v.at(k) != want) bad(k, "is " + json_dump(v.at(k)) + ", " + source + " has " + json_dump(want));
  };
  // Where it belongs: this shard of this output's plan, n_q and weights.
  if (f.shard >= 0) differs("shard", f.shard, "its file name");
  if (f.dataset && f.dataset->is_object())
    for (const char* k : {"plan_sha256", "n_q", "weights_fingerprint", "config_fingerprint", "shards"})
      // (config_fingerprint: compared when dataset.json has one; an older one does not)
      if (std::string(k) != kOptionalDoneField || f.dataset->contains(k))
        differs(k, f.dataset->value(k, json()), "dataset.json (made by another run?)");
  const bool in_plan = f.plan && f.shard >= 0 && size_t(f.shard) < f.plan->shard_items.size();
  if (f.plan) {
    differs("plan_sha256", f.plan->digest, "the plan");
    differs("shards", f.plan->shards, "the plan");
  }
  if (in_plan) differs("items", f.plan->shard_items[size_t(f.shard)], "the plan");
  // Counts, against the files and against each other.
  if (f.ok) differs("ok", *f.ok, "the index");
  if (f.errors) differs("errors", *f.errors, "the errors file");
  if (f.samples) differs("samples", *f.samples, "the index");
  if (f.frames) differs("frames", *f.frames, "the index");
  if (f.tar_bytes) differs("tar_bytes", *f.tar_bytes, "the tar on disk");
  if (f.tar_sha256) differs("tar_sha256", *f.tar_sha256, "the tar on disk");
  if (f.index_sha256) differs("index_sha256", *f.index_sha256, "the index on disk (changed since it was written)");
  if (f.errors_sha256) differs("errors_sha256", *f.errors_sha256, "the errors file on disk (changed since it was written)");
  if (has("items") && has("ok") && has("errors") && c("items") != c("ok") + c("errors"))
    bad("items", std::to_string(c("items")) + " is not 'ok' " + std::to_string(c("ok")) + " + 'errors' " +
                     std::to_string(c("errors")));
  if (has("tar_bytes") && (c("tar_bytes") % 512 || c("tar_bytes") < 1024))
    bad("tar_bytes", std::to_string(c("tar_bytes")) + " is not a whole tar (512-byte blocks and its end blocks)");
  for (const char* k : {"tar_sha256", "index_sha256", "errors_sha256"})
    if (has(k) && !is_sha256(v.at(k).get<std::string>())) bad(k, "is not a sha256");
  if (has("record_sha256") && v.at("record_sha256").get<std::string>() != record_digest(d))
    bad("record_sha256", "does not match the record's other fields (edited by hand?)");
  // (a dataset.json field that is not a number: nothing to hold the record to)
  auto ds_int = [&](const char* k) -> int64_t {
    const json* d = f.dataset;
    return d && d->is_object() && d->contains(k) && (*d)[k].is_number_integer() ? (*d)[k].get<int64_t>() : 0;
  };
  const int64_t frame_size = ds_int("frame_size");
  if (has("frames") && has("samples") && has("ok") && frame_size > 0) {
    // each item holds at least one sample, and ceil(samples / frame size) frames
    using U = unsigned __int128;  // (a tampered count times the frame size must not wrap)
    const U fr = c("frames"), sa = c("samples"), ok = c("ok"), fs_ = U(frame_size);
    if (fr < ok || sa < ok || fr * fs_ < sa || (ok > 0 ? (fr - ok) * fs_ >= sa : fr != 0 || sa != 0))
      bad("frames", std::to_string(c("frames")) + " cannot be the frames of 'samples' " + std::to_string(c("samples")) +
                        " in 'ok' " + std::to_string(c("ok")) + " items at " + std::to_string(frame_size) +
                        " samples a frame");
  }
  // Seconds: what status adds up and presents.
  const int64_t rate = ds_int("sample_rate");
  if (has("audio_seconds") && has("samples") && rate > 0 && !close(n("audio_seconds"), double(c("samples")) / double(rate)))
    bad("audio_seconds", "is " + json_dump(v.at("audio_seconds")) + ", but 'samples' " + std::to_string(c("samples")) +
                             " at " + std::to_string(rate) + " Hz are " + json_dump(double(c("samples")) / double(rate)) + " s");
  if (has("planned_seconds")) {
    if (f.planned_seconds && !close(n("planned_seconds"), *f.planned_seconds))
      bad("planned_seconds", "is " + json_dump(v.at("planned_seconds")) + ", the planned items last " +
                                 json_dump(*f.planned_seconds) + " s");
    else if (in_plan && !close(n("planned_seconds"), f.plan->shard_seconds[size_t(f.shard)]))
      bad("planned_seconds", "is " + json_dump(v.at("planned_seconds")) + ", the plan has " +
                                 json_dump(f.plan->shard_seconds[size_t(f.shard)]) + " s for this shard");
  }
  // Times: not recomputable, but they can be impossible (status derives its rate and ETA from them).
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (has("started") && n("started") < 1e9) bad("started", "is " + json_dump(v.at("started")) + ", not a time (Unix seconds)");
  if (has("finished") && has("started") && n("finished") < n("started") - kClockSkewSeconds)
    bad("finished", "is before 'started'");
  if (has("finished") && n("finished") > now + kClockSkewSeconds) bad("finished", "is in the future");
  if (has("last_run_seconds") &&
      (n("last_run_seconds") < 0 ||
       (has("started") && has("finished") && n("last_run_seconds") > n("finished") - n("started") + kClockSkewSeconds)))
    bad("last_run_seconds", "is " + json_dump(v.at("last_run_seconds")) + ", not within 'started' .. 'finished'");
  return out;
}

json read_done(const ShardPaths& p, std::string* why, const json* dataset, const Plan* plan) {
  std::error_code ec;
  if (why) why->clear();
  if (!fs::exists(p.done, ec)) return nullptr;
  auto invalid = [&](const std::string& w) -> json {
    if (why) *why = p.done + ": " + w;
    return nullptr;
  };
  json d, ds;
  // A record that cannot be read is not a damaged one: the read's own error (EIO: the machine,
  // exit 75; permission denied) goes up, never "encoding the shard again" over a good shard.
  auto read = [&](auto&& what) {
    try {
      return what();
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::Environment) throw;
      throw Error(ErrorKind::Environment, std::string(e.what()) + " (the output's own record: a failure of the file "
                                                                  "system, not of the shard; run again once it reads)");
    }
  };
  try {
    d = json::parse(read([&] { return read_file_or_empty(p.done); }));
    if (!d.is_object()) return invalid("not a JSON object");
    if (!dataset) {
      const std::string dj = (fs::path(p.out) / "dataset.json").string();
      if (!fs::exists(dj, ec)) return invalid("there is no dataset.json beside it: not taken as done");
      ds = json::parse(read([&] { return read_file_or_empty(dj); }));
      dataset = &ds;
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    return invalid(std::string("damaged: ") + e.what());
  }
  DoneFacts facts;
  facts.shard = p.shard;
  facts.dataset = dataset;
  facts.plan = plan;
  const uint64_t size = fs::file_size(p.tar, ec);
  if (ec) return invalid("its tar " + p.tar + " is missing: not taken as done");
  facts.tar_bytes = size;
  // and its bytes: a tar damaged in place after it was finished (a flipped bit, a bad sector) is
  // not done, so the worker encodes the shard again and status lists it, as verify fails it. The
  // price: status reads every finished tar (~300 MB/s here; a shard's tar is a few MB).
  facts.tar_sha256 = read([&] { return sha256_file(p.tar); });
  // The index and the errors file are outputs of the shard as much as the tar: one lost (or cut)
  // would leave a shard that status calls done and the worker skips, and that verify fails
  // forever. Their line counts against the record's ok and errors (cheap: one line per item).
  for (const auto& [file, count] : {std::pair{&p.index, &facts.ok}, std::pair{&p.errors, &facts.errors}}) {
    if (!fs::exists(*file, ec)) {
      if (ec && is_environment_errno(ec.value())) throw sys_error(ec.value(), ErrorKind::Environment, *file, "cannot stat");
      return invalid("its " + *file + " is missing: not taken as done");
    }
    const std::vector<uint8_t> text = read_input(*file);  // (errno judged there)
    *count = int64_t(std::count(text.begin(), text.end(), uint8_t('\n')));
    (file == &p.index ? facts.index_sha256 : facts.errors_sha256) = sha256_hex(text.data(), text.size());
    if (file != &p.index) continue;
    // and the index's frames and samples summed, against the record's totals
    int64_t frames = 0, samples = 0;
    const std::string_view lines(reinterpret_cast<const char*>(text.data()), text.size());
    size_t pos = 0;
    for (size_t nl; (nl = lines.find('\n', pos)) != std::string_view::npos; pos = nl + 1) {
      const json j = json::parse(text.begin() + std::ptrdiff_t(pos), text.begin() + std::ptrdiff_t(nl), nullptr, false);
      if (!j.is_object() || !j.contains("frames") || !j["frames"].is_number_unsigned() || !j.contains("samples") ||
          !j["samples"].is_number_unsigned())
        return invalid("its " + p.index + " line " + std::to_string(std::count(text.begin(), text.begin() + std::ptrdiff_t(nl), uint8_t('\n')) + 1) +
                       " is not an index record: not taken as done");
      frames += j["frames"].get<int64_t>();
      samples += j["samples"].get<int64_t>();
    }
    facts.frames = frames;
    facts.samples = samples;
  }
  const std::vector<std::string> problems = done_problems(d, facts);
  if (problems.empty()) return d;
  std::string w;
  for (const std::string& m : problems) w += (w.empty() ? "" : "; ") + m;
  return invalid(w + ": not taken as done");
}

void seal_done_record(json& done) { done[kRecordDigest] = record_digest(done); }

}  // namespace mimi::app::dataset
