#include "app/dataset/journal.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "app/dataset/plan.h"
#include "app/sys/file_io.h"
#include "app/sys/json_bytes.h"
#include "codec/error.h"

namespace mimi::app::dataset {
namespace fs = std::filesystem;
using nlohmann::json;

bool is_sha256(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::string read_file_or_empty(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return "";
  const std::vector<uint8_t> b = read_input(path);
  return {b.begin(), b.end()};
}

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

}  // namespace

bool journal_agrees(const json& begin, const json& header) { return begin.is_object() && differing(begin, header).empty(); }

// Whether a journal's text holds any complete line after its "begin" line (which ends at `from`):
// a record of work (an item, an error, the seal), or at least something that may have been one.
bool holds_records(const std::string& text, size_t from) {
  for (size_t nl; (nl = text.find('\n', from)) != std::string::npos; from = nl + 1)
    if (nl > from) return true;
  return false;
}

bool journal_holds_records(const std::string& journal) {
  const std::string text = read_file_or_empty(journal);
  const size_t nl = text.find('\n');
  return nl != std::string::npos && holds_records(text, nl + 1);
}

// The worker's refusal of a journal that holds work of other settings: naming them, with the exit
// code of the first that decides it (other weights or config: 4, as dataset.json's check says;
// any other setting: the command line's, 2).
Error journal_refusal(const std::string& journal, const json& begin, const json& header) {
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
  return journal_refusal(journal, begin, header).what();
}

std::vector<json> read_json_lines(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(ErrorKind::Input, path + ": cannot open");
  const std::vector<uint8_t> text{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  return parse_json_lines(text, path);
}

std::vector<json> parse_json_lines(const std::vector<uint8_t>& text, const std::string& path) {
  std::vector<json> out;
  size_t n = 0;
  // lines as getline gives them: split at '\n', a last line without one included
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = pos;
    while (nl < text.size() && text[nl] != '\n') ++nl;
    ++n;
    try {
      out.push_back(json::parse(text.begin() + std::ptrdiff_t(pos), text.begin() + std::ptrdiff_t(nl)));
    } catch (const std::exception& e) {
      throw Error(ErrorKind::Input, path + ":" + std::to_string(n) + ": not JSON: " + e.what());
    }
    pos = nl + 1;
  }
  return out;
}

}  // namespace mimi::app::dataset
