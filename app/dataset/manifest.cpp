#include "app/dataset/manifest.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "app/audio_io.h"
#include "codec/sha256.h"
#include "app/dataset/tar.h"
#include "app/file_io.h"
#include "codec/error.h"

namespace mimi::app::dataset {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::set<std::string> kAudioExtensions = {".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aif",
                                                ".aiff", ".au", ".caf", ".w64", ".rf64", ".wave"};

// A manifest's text, through the project's one input reader (absolute paths: "-" is a file here).
std::string read_text(const std::string& path) {
  const std::vector<uint8_t> b = read_input(path);
  return {b.begin(), b.end()};
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream s(text);
  for (std::string l; std::getline(s, l);) {
    if (!l.empty() && l.back() == '\r') l.pop_back();
    lines.push_back(l);
  }
  return lines;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

bool skip_line(const std::string& t) { return t.empty() || t[0] == '#'; }

// An audio path of a manifest line, absolute; one that names a folder ("/", "a/", "..") is refused.
std::string absolute(const fs::path& base, const std::string& p, const std::string& where) {
  const fs::path q(p);
  const fs::path a = (q.is_absolute() ? q : base / q).lexically_normal();
  const std::string name = a.filename().string();
  if (name.empty() || name == "." || name == "..")
    throw Error(ErrorKind::Input, where + ": '" + p + "' is not a file path");
  return a.string();
}

// An id from a path: relative to the manifest's folder when inside it, without the extension.
std::string id_from_path(const fs::path& base, const std::string& abs) {
  fs::path rel = fs::path(abs).lexically_relative(base);
  if (rel.empty() || *rel.begin() == "..") rel = fs::path(abs).relative_path();
  return (rel.parent_path() / rel.stem()).string();
}

std::string segment_suffix(double start, double end) {
  return "_" + std::to_string(std::llround(start * 1000)) + "-" +
         (end < 0 ? std::string("end") : std::to_string(std::llround(end * 1000)));
}

double number(const json& v, const char* field, const std::string& where) {
  if (v.is_number() && std::isfinite(v.get<double>())) return v.get<double>();
  if (v.is_string()) {
    try {
      size_t used = 0;
      const double d = std::stod(v.get<std::string>(), &used);
      if (used == v.get<std::string>().size() && std::isfinite(d)) return d;  // not "inf" or "nan"
    } catch (...) {
    }
  }
  throw Error(ErrorKind::Input, where + ": '" + field + "' must be a number of seconds");
}

double parse_seconds(const std::string& s, const std::string& where) {
  try {
    size_t used = 0;
    const double d = std::stod(s, &used);
    if (used == s.size() && std::isfinite(d) && d >= 0) return d;
  } catch (...) {
  }
  throw Error(ErrorKind::Input, where + ": '" + s + "' is not a time in seconds");
}

void read_jsonl(const std::string& path, const std::string& text, std::vector<Item>& out) {
  const fs::path base = fs::path(path).parent_path();
  const std::vector<std::string> lines = lines_of(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string t = trim(lines[i]);
    if (skip_line(t)) continue;
    const std::string where = path + ":" + std::to_string(i + 1);
    json j;
    try {
      j = json::parse(t);
    } catch (const std::exception& e) {
      throw Error(ErrorKind::Input, where + ": not a JSON object: " + e.what());
    }
    if (!j.is_object()) throw Error(ErrorKind::Input, where + ": not a JSON object");
    const json* p = j.contains("path") ? &j["path"] : j.contains("audio_filepath") ? &j["audio_filepath"] : nullptr;
    if (!p || !p->is_string() || p->get<std::string>().empty())
      throw Error(ErrorKind::Input, where + ": no 'path' (or 'audio_filepath')");
    Item it;
    it.path = absolute(base, p->get<std::string>(), where);
    const char* start_key = j.contains("start") ? "start" : j.contains("offset") ? "offset" : nullptr;  // NeMo: offset
    if (start_key) it.start = number(j[start_key], start_key, where);
    if (j.contains("end")) it.end = number(j["end"], "end", where);
    if (j.contains("duration")) it.duration = number(j["duration"], "duration", where);
    if (it.start < 0 || !std::isfinite(it.start) || (it.end >= 0 && it.end <= it.start) ||
        (j.contains("duration") && !(it.duration > 0)))
      throw Error(ErrorKind::Input, where + ": empty or negative start/end/duration");
    if (j.contains("end") && it.end < 0 && it.end != -1)  // -1: to the end of the file, as in Kaldi
      throw Error(ErrorKind::Input, where + ": 'end' must be after 'start', or -1 for the end of the file");
    if (it.end >= 0) it.duration = it.end - it.start;
    else if (start_key && it.duration > 0) it.end = it.start + it.duration;
    if (!std::isfinite(it.end) || !std::isfinite(it.duration))  // 1e308 + 1e308
      throw Error(ErrorKind::Input, where + ": start/end/duration out of range");
    if (j.contains("channel")) {
      const json& c = j["channel"];
      if (c.is_string() && c.get<std::string>() == "mix") it.channel = -1;
      else if (c.is_number_integer() && c.get<int64_t>() >= 0 && c.get<int64_t>() < kMaxChannels) it.channel = c.get<int>();
      else throw Error(ErrorKind::Input, where + ": 'channel' must be a channel index or \"mix\"");
    }
    if (j.contains("id")) {
      const json& v = j["id"];
      if (v.is_string() && !v.get<std::string>().empty()) it.id = v.get<std::string>();
      else if (v.is_number_integer()) it.id = std::to_string(v.get<int64_t>());
      else throw Error(ErrorKind::Input, where + ": 'id' must be a non-empty string or an integer");
    } else {
      it.id = id_from_path(base, it.path);
      if (start_key || it.end >= 0) it.id += segment_suffix(it.start, it.end);
      if (it.channel >= 0) it.id += "_ch" + std::to_string(it.channel);
    }
    out.push_back(std::move(it));
  }
}

// wav.scp lines: "<recording-id> <path>"; Kaldi's piped commands ("sox ... |") are refused.
std::map<std::string, std::string> read_wav_scp(const std::string& path, const std::string& text,
                                                std::vector<std::string>* order) {
  const fs::path base = fs::path(path).parent_path();
  std::map<std::string, std::string> recs;
  const std::vector<std::string> lines = lines_of(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string t = trim(lines[i]);
    if (skip_line(t)) continue;
    const std::string where = path + ":" + std::to_string(i + 1);
    const size_t sp = t.find_first_of(" \t");
    if (sp == std::string::npos) throw Error(ErrorKind::Input, where + ": expected '<id> <path>'");
    const std::string id = t.substr(0, sp), file = trim(t.substr(sp));
    if (file.back() == '|' || file.find(' ') != std::string::npos)
      throw Error(ErrorKind::Input, where + ": piped or multi-word entries are not supported (give the audio file)");
    if (!recs.emplace(id, absolute(base, file, where)).second)
      throw Error(ErrorKind::Usage, where + ": duplicate recording id '" + id + "'");
    if (order) order->push_back(id);
  }
  return recs;
}

void read_segments(const std::string& path, const std::string& text, const std::map<std::string, std::string>& recs,
                   std::vector<Item>& out) {
  const std::vector<std::string> lines = lines_of(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string t = trim(lines[i]);
    if (skip_line(t)) continue;
    const std::string where = path + ":" + std::to_string(i + 1);
    std::istringstream s(t);
    std::string utt, rec, b, e, extra;
    if (!(s >> utt >> rec >> b >> e) || (s >> extra))
      throw Error(ErrorKind::Input, where + ": expected '<utterance-id> <recording-id> <start> <end>'");
    const auto r = recs.find(rec);
    if (r == recs.end()) throw Error(ErrorKind::Input, where + ": recording '" + rec + "' is not in the wav.scp");
    Item it;
    it.id = utt;
    it.path = r->second;
    it.start = parse_seconds(b, where);
    it.end = e == "-1" ? -1 : parse_seconds(e, where);  // Kaldi: -1 = to the end of the recording
    if (it.end >= 0 && it.end <= it.start) throw Error(ErrorKind::Input, where + ": the segment ends before it starts");
    if (it.end >= 0) it.duration = it.end - it.start;
    out.push_back(std::move(it));
  }
}

void read_list(const std::string& path, const std::string& text, std::vector<Item>& out) {
  const fs::path base = fs::path(path).parent_path();
  const std::vector<std::string> lines = lines_of(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string t = trim(lines[i]);
    if (skip_line(t)) continue;
    Item it;
    it.path = absolute(base, t, path + ":" + std::to_string(i + 1));
    it.id = id_from_path(base, it.path);
    out.push_back(std::move(it));
  }
}

std::string read_directory(const std::string& dir, std::vector<Item>& out) {
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec), end;
       !ec && it != end; it.increment(ec)) {
    std::string ext = it->path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (kAudioExtensions.count(ext) && it->is_regular_file()) files.push_back(it->path().string());
  }
  if (ec) throw Error(ErrorKind::Input, dir + ": cannot list: " + ec.message());
  std::sort(files.begin(), files.end());
  const fs::path base = fs::absolute(dir).lexically_normal();
  std::string listing;
  for (const std::string& f : files) {
    Item it;
    it.path = fs::absolute(f).lexically_normal().string();
    it.id = id_from_path(base, it.path);
    listing += it.path.substr(base.string().size()) + "\n";
    out.push_back(std::move(it));
  }
  return listing;
}

bool looks_like_jsonl(const std::string& path, const std::string& text) {
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".jsonl" || ext == ".json" || ext == ".ndjson") return true;
  const size_t b = text.find_first_not_of(" \t\r\n");
  return b != std::string::npos && text[b] == '{';
}

bool is_wav_scp(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  return name == "wav.scp" || fs::path(path).extension() == ".scp";
}

void check_unique(const std::vector<Item>& items) {
  std::map<std::string, int> ids, keys;
  for (const Item& it : items) ++ids[it.id], ++keys[it.key];
  auto report = [](const std::map<std::string, int>& counts, const char* what) {
    std::vector<std::string> dups;
    for (const auto& [k, n] : counts)
      if (n > 1) dups.push_back(k);
    if (dups.empty()) return;
    std::string msg = std::to_string(dups.size()) + " duplicate " + what + ":";
    for (size_t i = 0; i < dups.size() && i < 10; ++i) msg += " '" + dups[i] + "'";
    if (dups.size() > 10) msg += " ...";
    throw Error(ErrorKind::Usage, msg);
  };
  report(ids, "ids");
  report(keys, "keys (ids that differ only in characters outside [A-Za-z0-9_-/+=,@])");
}

}  // namespace

std::string key_for(const std::string& id) {
  std::string k;
  for (char c : id) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_-/+=,@", c);
    k += ok ? c : '_';
  }
  while (!k.empty() && k.front() == '/') k.erase(k.begin());
  for (size_t p; (p = k.find("//")) != std::string::npos;) k.erase(p, 1);
  if (k.empty() || k.back() == '/') k += '_';
  return k;
}

std::string channel_name(int channel) { return channel < 0 ? "mix" : std::to_string(channel); }

std::vector<Item> read_manifests(const std::vector<std::string>& paths, std::vector<Manifest>& manifests) {
  std::vector<Item> items;
  std::set<std::string> segment_files;
  for (const std::string& p : paths)
    if (fs::path(p).filename() == "segments") segment_files.insert(fs::absolute(p).lexically_normal().string());
  std::set<std::string> used_segments;
  for (const std::string& p : paths) {
    const std::string abs = fs::absolute(p).lexically_normal().string();
    Manifest m;
    m.path = abs;
    const size_t before = items.size();
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      m.kind = "directory";
      const std::string listing = read_directory(p, items);
      m.sha256 = sha256_hex(listing.data(), listing.size());
    } else if (segment_files.count(abs)) {
      continue;  // read with its wav.scp
    } else {
      const std::string text = read_text(abs);
      m.sha256 = sha256_hex(text.data(), text.size());
      if (is_wav_scp(p)) {
        const std::string seg = (fs::path(abs).parent_path() / "segments").string();
        std::vector<std::string> order;
        const auto recs = read_wav_scp(abs, text, &order);
        if (segment_files.count(seg)) {
          const std::string stext = read_text(seg);
          used_segments.insert(seg);
          m.kind = "wav.scp";
          manifests.push_back(m);
          Manifest s{seg, "segments", sha256_hex(stext.data(), stext.size()), 0};
          read_segments(seg, stext, recs, items);
          s.items = items.size() - before;
          manifests.back().items = 0;
          manifests.push_back(s);
          continue;
        }
        m.kind = "wav.scp";
        for (const std::string& id : order) {
          Item it;
          it.id = id;
          it.path = recs.at(id);
          items.push_back(std::move(it));
        }
      } else if (looks_like_jsonl(p, text)) {
        m.kind = "jsonl";
        read_jsonl(abs, text, items);
      } else {
        m.kind = "list";
        read_list(abs, text, items);
      }
    }
    m.items = items.size() - before;
    manifests.push_back(m);
  }
  for (const std::string& s : segment_files)
    if (!used_segments.count(s))
      throw Error(ErrorKind::Usage, s + ": a segments file needs the wav.scp of its folder among the manifests");
  for (Item& it : items) it.key = key_for(it.id);
  check_unique(items);
  for (const Item& it : items)
    if (!ustar_fits(it.key + ".json"))
      throw Error(ErrorKind::Usage, "id '" + it.id + "' is too long for a tar member name (ustar: 255 bytes)");
  return items;
}

size_t probe_durations(std::vector<Item>& items, int threads) {
  std::vector<size_t> todo;
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].duration < 0) todo.push_back(i);
  std::atomic<size_t> next{0}, failed{0};
  auto work = [&] {
    for (size_t t; (t = next++) < todo.size();) {
      Item& it = items[todo[t]];
      try {
        AudioReader r(it.path);  // opens the header only; nothing is decoded
        if (r.frames() <= 0) throw Error(ErrorKind::Input, it.path + ": the header does not say its length");
        const double len = double(r.frames()) / r.sample_rate();
        it.duration = std::max(0.0, (it.end >= 0 ? std::min(it.end, len) : len) - it.start);
      } catch (const std::exception& e) {
        it.duration = 0;
        it.probe_error = e.what();
        ++failed;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < std::max(1, std::min<int>(threads, int(todo.size()))); ++i) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  return failed;
}

}  // namespace mimi::app::dataset
