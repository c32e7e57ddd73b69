#include "app/dataset/shard_writer.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

#include "app/dataset/item_files.h"
#include "app/dataset/plan.h"
#include "app/dataset/tar.h"
#include "app/sys/file_io.h"
#include "app/sys/json_bytes.h"
#include "app/sys/progress.h"
#include "codec/error.h"
#include "codec/sha256.h"

namespace mimi::app::dataset {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& what, const char* op) {
  throw sys_error(errno, ErrorKind::Output, what, std::string(op) + " failed");  // EMFILE: the machine (75)
}

void fsync_dir(const std::string& file) {
  const std::string dir = fs::path(file).parent_path().string();
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);  // best effort: some file systems refuse fsync on directories
  ::close(fd);
}

uint64_t file_size(int fd, const std::string& what) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) fail(what, "stat");
  return uint64_t(st.st_size);
}

// How many of the journal's records (from the first) the tar in `fd` bears out. A record must be
// what the tar holds at its place: an item's two members (key.npy, key.json) with sound headers,
// from where the previous item ended to its own `end`, the .npy holding its `frames`; an error
// adds nothing to the tar. A journal edited or copied from elsewhere, or a tar rewritten under
// it, is believed only up to its first record that the tar contradicts.
size_t records_the_tar_bears_out(const std::vector<JournalEntry>& entries, int fd, const std::string& what) {
  constexpr uint64_t kMaxItemBytes = uint64_t(256) << 20;  // far above any item (codes of hours: MBs)
  uint64_t at = 0;
  std::vector<uint8_t> span;
  const std::vector<uint8_t> end_blocks = tar_end();
  for (size_t i = 0; i < entries.size(); ++i) {
    const JournalEntry& e = entries[i];
    if (!e.ok) {
      if (e.end != at) return i;
      continue;
    }
    if (e.offset != at || e.end <= e.offset || (e.end - e.offset) % kTarBlock != 0 || e.end - e.offset > kMaxItemBytes)
      return i;
    span.resize(size_t(e.end - e.offset));
    for (size_t got = 0; got < span.size();) {
      const ssize_t r = ::pread(fd, span.data() + got, span.size() - got, off_t(e.offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail(what, "read");  // the machine's failure (EIO...), not a contradiction
      if (r == 0) return i;           // the tar ends before the record does
      got += size_t(r);
    }
    // its bytes as written (a bit flipped since, in any member, is caught here, not in verify's
    // view of a finished shard whose .done was computed over the damage)
    if (!e.sha256.empty() && sha256_hex(span.data(), span.size()) != e.sha256) return i;
    span.insert(span.end(), end_blocks.begin(), end_blocks.end());
    try {
      const std::vector<TarMember> m = read_tar(span, what);
      if (m.size() != 2 || m[0].name != e.key + ".npy" || m[1].name != e.key + ".json" || m[0].header_offset != 0 ||
          m[1].data_offset + (m[1].size + kTarBlock - 1) / kTarBlock * kTarBlock != e.end - e.offset)
        return i;
      if (parse_npy_int16(span.data() + m[0].data_offset, size_t(m[0].size), what).frames != e.frames) return i;
    } catch (const Error& err) {
      if (err.kind() != ErrorKind::Input) throw;
      return i;
    }
    at = e.end;
  }
  return entries.size();
}

// The file's text, or "" when there is none yet (a shard's first run has no journal).
std::string read_all(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return "";
  const std::vector<uint8_t> b = read_input(path);
  return {b.begin(), b.end()};
}

void write_text(const std::string& path, const std::string& text) {
  write_output(path, std::vector<uint8_t>(text.begin(), text.end()), true);
}

}  // namespace

namespace {
bool is_sha256(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}
}  // namespace

// The path is bytes (put_path); the message is free text, dumped with json_dump (never a type_error).
json JournalEntry::to_json() const {
  if (ok)
    return {{"k", "ok"}, {"i", index}, {"key", key}, {"offset", offset}, {"end", end}, {"frames", frames},
            {"samples", samples}, {"sha256", sha256}};
  json j = {{"k", "err"}, {"i", index}, {"key", key}};
  put_path(j, "path", path);
  j["stage"] = stage;
  j["message"] = message;
  j["end"] = end;
  return j;
}

JournalEntry JournalEntry::from_json(const json& j) {
  JournalEntry e;
  e.ok = j.at("k") == "ok";
  if (!e.ok && j.at("k") != "err") throw std::runtime_error("unknown journal record");
  e.index = j.at("i").get<size_t>();
  e.key = j.at("key").get<std::string>();
  e.end = j.at("end").get<uint64_t>();
  if (e.ok) {
    e.offset = j.at("offset").get<uint64_t>();
    e.frames = j.at("frames").get<int64_t>();
    e.samples = j.at("samples").get<int64_t>();
    e.sha256 = j.value("sha256", "");
    if (!e.sha256.empty() && !is_sha256(e.sha256)) throw std::runtime_error("not a sha256");
  } else {
    e.path = get_path(j, "path");
    e.stage = j.at("stage").get<std::string>();
    e.message = j.at("message").get<std::string>();
  }
  return e;
}

ShardPaths::ShardPaths(const std::string& out_dir, int shard_index) : out(out_dir), shard(shard_index) {
  const std::string b = (fs::path(out) / "shards" / shard_name(shard)).string();
  tar = b + ".tar";
  partial = b + ".tar.partial";
  journal = b + ".journal";
  index = b + ".index.jsonl";
  errors = b + ".errors.jsonl";
  done = b + ".done";
  failed = b + ".failed";
  lock = b + ".lock";
  retry_tar = b + ".retry.tar";
}

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
    {"tar_sha256", FieldKind::String},    {"record_sha256", FieldKind::String}};

// The sha256 of the record's other fields (json_dump: keys sorted), written last into the record:
// any edit by hand, also one that keeps every value possible (a frame count one off, another
// digest), makes the record not this shard's. A record made before it existed lacks it.
const std::string kRecordDigest = "record_sha256";
std::string record_digest(json d) {
  d.erase(kRecordDigest);
  const std::string text = json_dump(d);
  return sha256_hex(text.data(), text.size());
}

// The one field a .done may lack: in an output whose dataset.json has none, made before the
// config was fingerprinted (its shards were finished without it).
const std::string kOptionalDoneField = "config_fingerprint";

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
  if (has("items") && has("ok") && has("errors") && c("items") != c("ok") + c("errors"))
    bad("items", std::to_string(c("items")) + " is not 'ok' " + std::to_string(c("ok")) + " + 'errors' " +
                     std::to_string(c("errors")));
  if (has("tar_bytes") && (c("tar_bytes") % 512 || c("tar_bytes") < 1024))
    bad("tar_bytes", std::to_string(c("tar_bytes")) + " is not a whole tar (512-byte blocks and its end blocks)");
  if (has("tar_sha256") && !is_sha256(v.at("tar_sha256").get<std::string>())) bad("tar_sha256", "is not a sha256");
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
  auto read = [&](const std::string& path) {
    try {
      return read_all(path);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::Environment) throw;
      throw Error(ErrorKind::Environment, std::string(e.what()) + " (the output's own record: a failure of the file "
                                                                  "system, not of the shard; run again once it reads)");
    }
  };
  try {
    d = json::parse(read(p.done));
    if (!d.is_object()) return invalid("not a JSON object");
    if (!dataset) {
      const std::string dj = (fs::path(p.out) / "dataset.json").string();
      if (!fs::exists(dj, ec)) return invalid("there is no dataset.json beside it: not taken as done");
      ds = json::parse(read(dj));
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

// A journal's fields that say where it came from without binding a run to them: the plan's folder
// (a plan moved elsewhere is the same plan; its digest decides). `status OUT/` reads it from the
// journals while no item has been recorded and so no dataset.json names the plan.
const char* const kJournalInfo[] = {"plan", "plan_hex"};

json journal_header(int shard, const json& dataset) {
  json h = {{"shard", shard}};
  for (const char* k : {"shards", "plan_sha256", "n_q", "weights_fingerprint", "config_fingerprint"})
    if (dataset.is_object() && dataset.contains(k)) h[k] = dataset[k];
  for (const char* k : kJournalInfo)
    if (dataset.is_object() && dataset.contains(k)) h[k] = dataset[k];
  return h;
}

json journal_begin(const std::string& journal) {
  std::ifstream f(journal, std::ios::binary);
  std::string line;
  if (!f || !std::getline(f, line)) return nullptr;
  try {
    json j = json::parse(line);
    if (j.is_object() && j.value("k", json()) == "begin") return j;
  } catch (const std::exception&) {
  }
  return nullptr;  // (a first line cut or garbled: the worker begins the journal anew)
}

namespace {

// The settings of `header` the journal's "begin" line does not share (the plan's folder only
// informs; a journal begun before the config was fingerprinted lacks it: resumed, as it was before).
std::vector<std::string> differing(const json& begin, const json& header) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : header.items()) {
    const bool info = std::find(std::begin(kJournalInfo), std::end(kJournalInfo), k) != std::end(kJournalInfo);
    const bool optional = k == kOptionalDoneField && begin.is_object() && !begin.contains(k);
    if (!info && !optional && (!begin.is_object() || begin.value(k, json()) != v)) keys.push_back(k);
  }
  return keys;
}

bool journal_agrees(const json& begin, const json& header) { return begin.is_object() && differing(begin, header).empty(); }

// Whether a journal's text holds any complete line after its "begin" line (which ends at `from`):
// a record of work (an item, an error, the seal), or at least something that may have been one.
bool holds_records(const std::string& text, size_t from) {
  for (size_t nl; (nl = text.find('\n', from)) != std::string::npos; from = nl + 1)
    if (nl > from) return true;
  return false;
}

bool journal_holds_records(const std::string& journal) {
  const std::string text = read_all(journal);
  const size_t nl = text.find('\n');
  return nl != std::string::npos && holds_records(text, nl + 1);
}

// The worker's refusal of a journal that holds work of other settings: naming them, with the exit
// code of the first that decides it (other weights or config: 4, as dataset.json's check says;
// any other setting: the command line's, 2).
Error refusal(const std::string& journal, const json& begin, const json& header) {
  std::string which;
  ErrorKind kind = ErrorKind::Usage;
  for (const std::string& k : differing(begin, header)) {
    which += (which.empty() ? "" : ", ") + k + " " + json_dump(begin.value(k, json())) + " there, " +
             json_dump(header[k]) + " here";
    if (k == "weights_fingerprint" || k == "config_fingerprint") kind = ErrorKind::Weights;
  }
  return Error(kind, journal + ": this shard was begun with other settings (" + which +
                         ") and holds their work; remove its files to start it over");
}

}  // namespace

bool output_holds_records(const std::string& out) {
  // What a worker leaves only once it has recorded an item: a .done, a sealed tar, a retry tar, a
  // journal with a line after its "begin". (.index/.errors files come with a .done.)
  std::error_code ec;
  std::vector<std::string> journals;
  const fs::path dir = fs::path(out) / "shards";
  if (!fs::exists(dir, ec)) return false;
  fs::directory_iterator it(dir, ec);
  if (ec) throw sys_error(ec.value(), ErrorKind::Output, dir.string(), "cannot list");
  for (const fs::directory_iterator end; it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    auto ends = [&](const std::string& x) { return name.size() > x.size() && name.compare(name.size() - x.size(), x.size(), x) == 0; };
    if (ends(".done") || ends(".retry.tar") || (ends(".tar") && !ends(".retry.tar"))) return true;
    if (ends(".journal")) journals.push_back(it->path().string());
  }
  if (ec) throw sys_error(ec.value(), ErrorKind::Output, dir.string(), "cannot list");
  return std::any_of(journals.begin(), journals.end(), journal_holds_records);
}

std::string journal_mismatch(const std::string& journal, const json& begin, const json& header) {
  if (journal_agrees(begin, header)) return "";
  // A journal begun but holding no item is no work of those settings: the worker begins it anew
  // (so a run refused at its first item - weights that overflow, exit 4 - leaves nothing that
  // refuses the next run with the fixed ones).
  if (!journal_holds_records(journal)) return "";
  return refusal(journal, begin, header).what();
}

std::vector<json> read_json_lines(const std::string& path) {
  std::vector<json> out;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(ErrorKind::Input, path + ": cannot open");
  size_t n = 0;
  for (std::string line; std::getline(f, line);) {
    ++n;
    try {
      out.push_back(json::parse(line));
    } catch (const std::exception& e) {
      throw Error(ErrorKind::Input, path + ":" + std::to_string(n) + ": not JSON: " + e.what());
    }
  }
  return out;
}

ShardWriter::ShardWriter(const ShardPaths& paths, const json& header, int sync_items, double sync_seconds)
    : p_(paths), sync_items_(std::max(1, sync_items)), sync_seconds_(sync_seconds), last_sync_(monotonic_seconds()) {
  std::error_code ec;
  fs::create_directories(fs::path(p_.tar).parent_path(), ec);  // its own error, not the lock's ENOENT after it
  if (ec) throw sys_error(ec.value(), ErrorKind::Output, fs::path(p_.tar).parent_path().string(), "cannot create the directory");
  lock_fd_ = ::open(p_.lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) fail(p_.lock, "open");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      throw Error(ErrorKind::Output, p_.lock + ": another worker is writing this shard right now");
    fail(p_.lock, "lock");
  }
  resume(header);
}

ShardWriter::~ShardWriter() {
  if (tar_fd_ >= 0) ::close(tar_fd_);
  if (journal_fd_ >= 0) ::close(journal_fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

void ShardWriter::resume(const json& header) {
  // The journal's complete, well-formed, consecutive lines; anything after them is cut off.
  const std::string text = read_all(p_.journal);
  uint64_t good = 0, end = 0;
  bool begun = false;
  size_t pos = 0;
  for (size_t nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    json j;
    try {
      j = json::parse(text.substr(pos, nl - pos));
    } catch (const std::exception&) {
      break;
    }
    if (!begun) {
      if (j.value("k", "") != "begin") break;
      if (!journal_agrees(j, header)) {
        if (holds_records(text, nl + 1)) throw refusal(p_.journal, j, header);
        spdlog::info("{}: begun with other settings but holding no item: begun again with this run's", p_.journal);
        break;  // (not begun: the journal and the tar start empty)
      }
      begun = true;
      begun_at_ = j.value("t", 0.0);
      header_end_ = nl + 1;
    } else if (j.value("k", "") == "sealed") {
      if (j.value("size", uint64_t(0)) != end + 2 * kTarBlock) break;
      sealed_ = true;
    } else {
      JournalEntry e;
      try {
        e = JournalEntry::from_json(j);
      } catch (const std::exception&) {
        break;
      }
      if (e.index != next_ || sealed_) break;
      end = e.end;
      errors_ += !e.ok;
      entries_.push_back(std::move(e));
      line_end_.push_back(nl + 1);
      ++next_;
    }
    good = nl + 1;
  }
  if (sealed_) {
    // Killed while finishing: the tar is complete under one of its two names.
    std::error_code ec;
    if (fs::exists(p_.partial, ec) && fs::file_size(p_.partial, ec) == end + 2 * kTarBlock) {
      if (::rename(p_.partial.c_str(), p_.tar.c_str()) != 0) fail(p_.tar, "rename");
      fsync_dir(p_.tar);
    }
    if (fs::file_size(p_.tar, ec) == end + 2 * kTarBlock && !ec) {
      const int fd = ::open(p_.tar.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) fail(p_.tar, "open");
      size_t agree = 0;
      try {
        agree = records_the_tar_bears_out(entries_, fd, p_.tar);
      } catch (...) {
        ::close(fd);
        throw;
      }
      ::close(fd);
      if (agree == entries_.size()) {
        tar_size_ = end + 2 * kTarBlock;
        return;
      }
      spdlog::warn("{}: journal record {} contradicts {}: the shard is done again", p_.journal, agree + 1, p_.tar);
    }
    sealed_ = false;  // the tar is gone (or not the journal's): redo the shard from the start
    good = 0, end = 0, next_ = 0, errors_ = 0, begun = false;
    entries_.clear();
    line_end_.clear();
  }
  tar_fd_ = ::open(p_.partial.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (tar_fd_ < 0) fail(p_.partial, "open");
  if (file_size(tar_fd_, p_.partial) < end) {  // the tar lost bytes the journal covers: start over
    good = 0, end = 0, next_ = 0, errors_ = 0, begun = false;
    entries_.clear();
    line_end_.clear();
  }
  if (const size_t agree = records_the_tar_bears_out(entries_, tar_fd_, p_.partial); agree < entries_.size()) {
    spdlog::warn("{}: journal record {} contradicts {}: resuming before it", p_.journal, agree + 1, p_.partial);
    entries_.resize(agree);
    line_end_.resize(agree);
    next_ = agree;
    errors_ = size_t(std::count_if(entries_.begin(), entries_.end(), [](const JournalEntry& e) { return !e.ok; }));
    end = agree ? entries_[agree - 1].end : 0;
    good = agree ? line_end_[agree - 1] : header_end_;
  }
  if (::ftruncate(tar_fd_, off_t(end)) != 0) fail(p_.partial, "truncate");
  if (::lseek(tar_fd_, off_t(end), SEEK_SET) < 0) fail(p_.partial, "seek");
  tar_size_ = end;
  journal_fd_ = ::open(p_.journal.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (journal_fd_ < 0) fail(p_.journal, "open");
  if (::ftruncate(journal_fd_, off_t(good)) != 0) fail(p_.journal, "truncate");
  if (::lseek(journal_fd_, off_t(good), SEEK_SET) < 0) fail(p_.journal, "seek");
  journal_bytes_ = good;
  if (!begun) {
    json b = header;
    b["k"] = "begin";
    b["t"] = begun_at_ = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const std::string line = json_dump(b) + "\n";
    write_all(journal_fd_, line.data(), line.size(), p_.journal);
    if (::fdatasync(journal_fd_) != 0) fail(p_.journal, "fsync");
    fsync_dir(p_.journal);
    journal_bytes_ = header_end_ = line.size();
  }
}

void ShardWriter::add_item(size_t index, const std::string& key, const std::vector<uint8_t>& members, int64_t frames,
                           int64_t samples) {
  if (index != next_ || sealed_) throw Error(ErrorKind::Internal, "shard items out of order");
  run_before_record();
  write_all(tar_fd_, members.data(), members.size(), p_.partial);
  JournalEntry e;
  e.index = index;
  e.key = key;
  e.offset = tar_size_;
  tar_size_ += members.size();
  e.end = tar_size_;
  e.frames = frames;
  e.samples = samples;
  e.sha256 = sha256_hex(members.data(), members.size());
  record(std::move(e));
}

void ShardWriter::add_error(size_t index, const std::string& key, const std::string& path, const std::string& stage,
                            const std::string& message) {
  if (index != next_ || sealed_) throw Error(ErrorKind::Internal, "shard items out of order");
  run_before_record();
  JournalEntry e;
  e.index = index;
  e.ok = false;
  e.key = key;
  e.path = path;
  e.stage = stage;
  e.message = message;
  e.end = tar_size_;
  ++errors_;
  record(std::move(e));
}

// The item is done (in the tar, or as an error): its journal line is queued, and written with the
// next batch.
void ShardWriter::record(JournalEntry e) {
  pend(e);
  entries_.push_back(std::move(e));
  ++next_;
  maybe_sync();
}

void ShardWriter::pend(const JournalEntry& e) {
  const std::string line = json_dump(e.to_json()) + "\n";
  pending_ += line;
  journal_bytes_ += line.size();
  line_end_.push_back(journal_bytes_);
}

void ShardWriter::rewind(size_t index) {
  if (sealed_ || index > entries_.size()) throw Error(ErrorKind::Internal, "cannot rewind a sealed shard");
  sync();
  const uint64_t tar_end = index == 0 ? 0 : entries_[index - 1].end;
  const uint64_t journal_end = index == 0 ? header_end_ : line_end_[index - 1];
  // The journal first: it must never cover bytes the tar no longer has.
  if (::ftruncate(journal_fd_, off_t(journal_end)) != 0 || ::fdatasync(journal_fd_) != 0) fail(p_.journal, "truncate");
  if (::lseek(journal_fd_, off_t(journal_end), SEEK_SET) < 0) fail(p_.journal, "seek");
  if (::ftruncate(tar_fd_, off_t(tar_end)) != 0) fail(p_.partial, "truncate");
  if (::lseek(tar_fd_, off_t(tar_end), SEEK_SET) < 0) fail(p_.partial, "seek");
  entries_.resize(index);
  line_end_.resize(index);
  journal_bytes_ = journal_end;
  tar_size_ = tar_end;
  next_ = index;
  errors_ = 0;
  for (const JournalEntry& e : entries_) errors_ += !e.ok;
}

void ShardWriter::maybe_sync() {
  if (++unsynced_ >= size_t(sync_items_) || monotonic_seconds() - last_sync_ >= sync_seconds_) sync();
}

void ShardWriter::sync() {
  if (pending_.empty()) return;
  // The tar first: a journal line never covers bytes that could still be lost.
  if (::fdatasync(tar_fd_) != 0) fail(p_.partial, "fsync");
  journal_line(json());
  unsynced_ = 0;
  last_sync_ = monotonic_seconds();
}

void ShardWriter::journal_line(const json& j) {
  if (!j.is_null()) pending_ += json_dump(j) + "\n";
  write_all(journal_fd_, pending_.data(), pending_.size(), p_.journal);
  if (::fdatasync(journal_fd_) != 0) fail(p_.journal, "fsync");
  pending_.clear();
}

void ShardWriter::run_before_record() {
  if (!before_record_) return;
  const std::function<void()> f = std::move(before_record_);
  before_record_ = nullptr;
  f();
}

json ShardWriter::finish(const json& extra) {
  run_before_record();  // (a shard of no items records its seal first)
  if (!sealed_) {
    sync();
    const std::vector<uint8_t> end = tar_end();
    write_all(tar_fd_, end.data(), end.size(), p_.partial);
    if (::fsync(tar_fd_) != 0) fail(p_.partial, "fsync");
    ::close(tar_fd_);
    tar_fd_ = -1;
    tar_size_ += end.size();
    journal_line({{"k", "sealed"}, {"size", tar_size_}});
    if (::rename(p_.partial.c_str(), p_.tar.c_str()) != 0) fail(p_.tar, "rename");
    fsync_dir(p_.tar);
    sealed_ = true;
  }
  std::string index, errors;
  size_t ok = 0;
  int64_t samples = 0, frames = 0;
  for (const JournalEntry& e : entries_) {
    if (e.ok) {
      index += json_dump({{"key", e.key}, {"offset", e.offset}, {"size", e.end - e.offset}, {"frames", e.frames},
                          {"samples", e.samples}}) +
               "\n";
      ++ok;
      samples += e.samples;
      frames += e.frames;
    } else {
      json r = {{"key", e.key}};
      put_path(r, "path", e.path);
      r["stage"] = e.stage;
      r["message"] = e.message;
      errors += json_dump(r) + "\n";
    }
  }
  write_text(p_.index, index);
  write_text(p_.errors, errors);
  json done = extra;
  done["items"] = entries_.size();
  done["ok"] = ok;
  done["errors"] = entries_.size() - ok;
  done["samples"] = samples;
  done["frames"] = frames;
  done["tar_bytes"] = tar_size_;
  done["tar_sha256"] = sha256_file(p_.tar);
  done[kRecordDigest] = record_digest(done);
  write_text(p_.done, json_dump(done, 1) + "\n");  // last: the shard is done once this exists
  fsync_dir(p_.done);
  if (journal_fd_ >= 0) ::close(journal_fd_);
  journal_fd_ = -1;
  std::error_code ec;
  fs::remove(p_.journal, ec);
  fs::remove(p_.failed, ec);
  fs::remove(p_.retry_tar, ec);
  return done;
}

}  // namespace mimi::app::dataset
