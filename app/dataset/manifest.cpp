#include "app/dataset/manifest.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <mutex>
#include <sstream>
#include <sys/stat.h>

#include <thread>

#include "app/dataset/entries.h"
#include "app/dataset/item_files.h"
#include "app/dataset/tar.h"
#include "app/engine_io/pipeline.h"
#include "app/formats/audio_io.h"
#include "app/sys/file_io.h"
#include "app/sys/json_bytes.h"
#include "codec/error.h"
#include "codec/sha256.h"

namespace mimi::app::dataset {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A manifest's bytes, through the project's one input reader ("-": stdin), decoded to UTF-8 text.
std::string read_text(const std::string& path) {
  struct stat st{};
  if (path != "-" && ::stat(path.c_str(), &st) == 0 && (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) &&
      path != "/dev/null")  // (/dev/null: an empty manifest)
    throw Error(ErrorKind::Input, path + ": a device, not a manifest");
  const std::vector<uint8_t> b = read_input(path);
  return {b.begin(), b.end()};
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// An audio path of a manifest line, absolute; one that names a folder ("/", "a/", "..") or holds a
// NUL byte (a JSON "\u0000" would silently name another file) is refused.
std::string absolute(const fs::path& base, const std::string& p, const std::string& where) {
  // (a message cannot hold the NUL itself: what() is a C string)
  if (const size_t nul = p.find('\0'); nul != std::string::npos)
    throw Error(ErrorKind::Input, where + ": the path holds a NUL byte (after '" + p.substr(0, nul) + "')");
  const fs::path q(p);
  if (!q.is_absolute() && base.empty()) throw cwd_gone(p);  // a list on stdin, read from a deleted folder
  const fs::path joined = q.is_absolute() ? q : base / q;
  const std::string name = joined.filename().string();
  if (name.empty() || name == "." || name == "..")
    throw Error(ErrorKind::Input, where + ": '" + p + "' is not a file path");
  return normal_keeping_parents(joined).string();
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

// The one grammar of seconds written as text (a Kaldi segments field, a JSON string): plain
// decimal, [-]digits[.digits][e[+-]digits], nothing around it. strtod alone would also take hex
// ("0x1p-1"), "inf", "nan" and leading blanks, and turn garbage into other segment bounds.
std::optional<double> decimal_seconds(const std::string& s) {
  if (s.empty()) return std::nullopt;
  size_t i = s[0] == '-' ? 1 : 0, digits = 0;
  auto run = [&] {
    size_t n = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++n;
    return n;
  };
  digits += run();
  if (i < s.size() && s[i] == '.') ++i, digits += run();
  if (digits == 0) return std::nullopt;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (run() == 0) return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  const double d = std::strtod(s.c_str(), nullptr);
  if (!std::isfinite(d)) return std::nullopt;  // 1e999
  return d;
}

// The longest time a manifest may name: about 31 years. Every time becomes milliseconds in an
// item's key and samples in an int64 count (at any rate up to 9 MHz); past this it would not, and
// no recording is that long: 1e300 or 1e19 is a mistake, said as one, not a key of INT64_MIN.
constexpr double kMaxSeconds = 1e9;

double in_range(double d, const std::string& text, const std::string& where) {
  if (std::abs(d) <= kMaxSeconds) return d;
  throw Error(ErrorKind::Input, where + ": " + text + " s is out of range (a time in a manifest is at most " +
                                    std::to_string(int64_t(kMaxSeconds)) + " s, about 31 years)");
}

double number(const json& v, const char* field, const std::string& where) {
  if (v.is_number() && std::isfinite(v.get<double>())) return in_range(v.get<double>(), v.dump(), where);
  if (v.is_string())
    if (const auto d = decimal_seconds(v.get<std::string>())) return in_range(*d, v.get<std::string>(), where);
  throw Error(ErrorKind::Input, where + ": '" + field + "' must be a number of seconds");
}

double parse_seconds(const std::string& s, const std::string& where) {
  if (const auto d = decimal_seconds(s); d && *d >= 0) return in_range(*d, s, where);
  throw Error(ErrorKind::Input, where + ": '" + s + "' is not a time in seconds");
}

// Runs `f` for each line that is not blank or a comment; an Error(Input) of a line goes to
// `problems` and the next line is read: one run reports every bad line.
template <class F>
void each_line(const std::string& path, const std::string& text, Problems& problems, bool exact, F f) {
  const std::vector<std::string> lines = lines_of(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string t = exact ? lines[i] : trim(lines[i]);
    if (trim(t).empty() || t[0] == '#') continue;
    const std::string where = path + ":" + std::to_string(i + 1);
    try {
      f(t, where, i + 1);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Input) throw;
      problems.add(e.what());
    }
  }
}

void read_jsonl(const std::string& path, const std::string& base_dir, const std::string& text, int source,
                Problems& problems, std::vector<Item>& out) {
  const fs::path base(base_dir);
  each_line(path, text, problems, false, [&](const std::string& t, const std::string& where, size_t line) {
    json j;
    std::string twice;  // a member named twice: JSON parsers keep one of the two silently
    try {
      std::set<std::string> names;
      j = json::parse(t, [&](int depth, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::key && depth == 1 && !names.insert(parsed.get<std::string>()).second &&
            twice.empty())
          twice = parsed.get<std::string>();
        return true;
      });
    } catch (const std::exception& e) {
      throw Error(ErrorKind::Input, where + ": not a JSON object: " + e.what());
    }
    if (!j.is_object()) throw Error(ErrorKind::Input, where + ": not a JSON object");
    if (!twice.empty()) throw Error(ErrorKind::Input, where + ": '" + printable(twice) + "' is given twice");
    // Two names for one field (ours and NeMo's: "path"/"audio_filepath", "start"/"offset"), and
    // "end" beside "duration": any may be given, several only when they say the same. What they
    // say differently is refused, never settled by which name is looked up first.
    const char* field = nullptr;  // "path" (or NeMo's "audio_filepath"); a non-UTF-8 name as "path_hex" (json_bytes.h)
    std::string p;
    for (const char* name : {"path", "audio_filepath"}) {
      if (!j.contains(name) && !j.contains(std::string(name) + "_hex")) continue;
      std::string v;
      try {
        v = get_path(j, name);
      } catch (const std::invalid_argument& e) {  // a bad hex form, or one that disagrees with the name
        throw Error(ErrorKind::Input, where + ": '" + name + "': " + e.what());
      } catch (const std::exception&) {
        throw Error(ErrorKind::Input, where + ": '" + name + "' is not a string, or a bad '_hex' form of it");
      }
      if (field && v != p)
        throw Error(ErrorKind::Input, where + ": 'path' and 'audio_filepath' name different files; give one of them");
      if (!field) field = name, p = v;
    }
    if (!field || p.empty())
      throw Error(ErrorKind::Input, where + ": no 'path' (or 'audio_filepath') string, or a bad '_hex' form of it");
    Item it;
    it.source = source, it.line = line;
    it.path = absolute(base, p, where);
    const char* start_key = nullptr;  // NeMo: offset
    for (const char* name : {"start", "offset"}) {
      if (!j.contains(name)) continue;
      const double v = number(j[name], name, where);
      if (start_key && v != it.start)
        throw Error(ErrorKind::Input, where + ": 'start' and 'offset' (its NeMo name) differ; give one of them");
      if (!start_key) start_key = name, it.start = v;
    }
    if (j.contains("end")) it.end = number(j["end"], "end", where);
    if (j.contains("duration")) it.duration = number(j["duration"], "duration", where);
    if (it.start < 0 || !std::isfinite(it.start) || (it.end >= 0 && it.end <= it.start) ||
        (j.contains("duration") && !(it.duration > 0)))
      throw Error(ErrorKind::Input, where + ": empty or negative start/end/duration");
    if (j.contains("end") && it.end < 0 && it.end != -1)  // -1: to the end of the file, as in Kaldi
      throw Error(ErrorKind::Input, where + ": 'end' must be after 'start', or -1 for the end of the file");
    // end and duration both: the same span to a microsecond (a float sum's rounding is not a conflict)
    if (it.end >= 0 && j.contains("duration") && std::fabs((it.end - it.start) - it.duration) > 1e-6)
      throw Error(ErrorKind::Input, where + ": 'end' and 'start' + 'duration' disagree; give 'end' or 'duration'");
    if (it.end >= 0) it.duration = it.end - it.start;
    else if (start_key && it.duration > 0) it.end = it.start + it.duration;
    if (!std::isfinite(it.end) || !std::isfinite(it.duration))  // 1e308 + 1e308
      throw Error(ErrorKind::Input, where + ": start/end/duration out of range");
    if (j.contains("channel")) {
      const json& c = j["channel"];
      // A number may be written as text, as seconds may ("1" as 1: one grammar of numbers as text).
      const std::string text = c.is_string() ? c.get<std::string>() : "";
      const bool digits = !text.empty() && text.size() <= 6 && text.find_first_not_of("0123456789") == std::string::npos;
      if (text == "mix") it.channel = -1;
      else if (c.is_number_integer() && c.get<int64_t>() >= 0 && c.get<int64_t>() < kMaxChannels) it.channel = c.get<int>();
      else if (digits && std::stol(text) < kMaxChannels) it.channel = int(std::stol(text));
      else throw Error(ErrorKind::Input, where + ": 'channel' must be a channel index or \"mix\"");
    }
    if (j.contains("id_hex")) {  // the exact bytes, as the tool writes a non-UTF-8 id (as path_hex for a path)
      try {
        it.id = get_path(j, "id");
      } catch (const std::exception& e) {
        throw Error(ErrorKind::Input, where + ": 'id_hex': " + e.what());
      }
      if (it.id.empty()) throw Error(ErrorKind::Input, where + ": 'id_hex' names an empty id");
      if (it.id.find('\0') != std::string::npos) throw Error(ErrorKind::Input, where + ": the 'id' holds a NUL byte");
    } else if (j.contains("id")) {
      const json& v = j["id"];
      if (v.is_string() && !v.get<std::string>().empty()) it.id = v.get<std::string>();
      else if (v.is_number_integer()) it.id = std::to_string(v.get<int64_t>());
      else throw Error(ErrorKind::Input, where + ": 'id' must be a non-empty string or an integer");
      if (it.id.find('\0') != std::string::npos) throw Error(ErrorKind::Input, where + ": the 'id' holds a NUL byte");
    } else {
      it.id = id_from_path(base, it.path);
      if (start_key || it.end >= 0) it.id += segment_suffix(it.start, it.end);
      if (it.channel >= 0) it.id += "_ch" + std::to_string(it.channel);
    }
    out.push_back(std::move(it));
  });
}

struct Recording {
  std::string path;
  size_t line = 0;
};

// wav.scp lines: "<recording-id> <path>", the path the rest of the line (spaces and all, as in Kaldi);
// Kaldi's piped commands ("sox ... |") are refused.
std::map<std::string, Recording> read_wav_scp(const std::string& path, const std::string& base_dir,
                                              const std::string& text, Problems& problems,
                                              std::vector<std::string>* order) {
  const fs::path base(base_dir);
  std::map<std::string, Recording> recs;
  each_line(path, text, problems, false, [&](const std::string& t, const std::string& where, size_t line) {
    const size_t sp = t.find_first_of(" \t");
    const std::string id = sp == std::string::npos ? t : t.substr(0, sp), file = sp == std::string::npos ? "" : trim(t.substr(sp));
    if (file.empty()) throw Error(ErrorKind::Input, where + ": expected '<id> <path>'");
    // As Kaldi reads an rxfilename: the rest of the line is the file, spaces and all; one that
    // ends in '|' is a command to run, which is not supported.
    if (!file.empty() && file.back() == '|')
      throw Error(ErrorKind::Input, where + ": a piped entry (a command ending in '|') is not supported: give the audio file");
    if (!recs.emplace(id, Recording{absolute(base, file, where), line}).second)
      throw Error(ErrorKind::Input, where + ": duplicate recording id '" + id + "'");
    if (order) order->push_back(id);
  });
  return recs;
}

void read_segments(const std::string& path, const std::string& text, const std::map<std::string, Recording>& recs,
                   int source, Problems& problems, std::vector<Item>& out) {
  each_line(path, text, problems, false, [&](const std::string& t, const std::string& where, size_t line) {
    std::istringstream s(t);
    std::string utt, rec, b, e, extra;
    if (!(s >> utt >> rec >> b >> e) || (s >> extra))
      throw Error(ErrorKind::Input, where + ": expected '<utterance-id> <recording-id> <start> <end>'");
    const auto r = recs.find(rec);
    if (r == recs.end())
      throw Error(ErrorKind::Input, where + ": recording '" + rec + "' is not in the wav.scp");
    Item it;
    it.source = source, it.line = line;
    it.id = utt;
    it.path = r->second.path;
    it.start = parse_seconds(b, where);
    it.end = e == "-1" ? -1 : parse_seconds(e, where);  // Kaldi: -1 = to the end of the recording
    if (it.end >= 0 && it.end <= it.start) throw Error(ErrorKind::Input, where + ": the segment ends before it starts");
    if (it.end >= 0) it.duration = it.end - it.start;
    out.push_back(std::move(it));
  });
}

// One path per line, exactly as written (only the line end is dropped: a name may begin or end
// with blanks); blank lines and lines starting with '#' are skipped.
void read_list(const std::string& path, const std::string& base_dir, const std::string& text, int source,
               Problems& problems, std::vector<Item>& out) {
  const fs::path base(base_dir);
  each_line(path, text, problems, true, [&](const std::string& t, const std::string& where, size_t line) {
    Item it;
    it.source = source, it.line = line;
    it.path = absolute(base, t, where);
    it.id = id_from_path(base, it.path);
    out.push_back(std::move(it));
  });
}

// A directory's audio files (entries.h, walk_directory); returns the listing its digest is of.
std::string read_directory(const std::string& dir, int source, Problems& problems, std::vector<Item>& out) {
  const WalkResult w = walk_directory(dir);
  for (const std::string& r : w.refused) problems.add(r);
  for (size_t i = 0; i < w.notes.size(); ++i)
    if (i < Problems::kPrinted) spdlog::warn("{}", w.notes[i]);
  if (w.notes.size() > Problems::kPrinted)
    spdlog::warn("... and {} more links not followed", w.notes.size() - Problems::kPrinted);
  if (w.repeated_dirs || w.repeated_files)
    spdlog::info("{}: {} links to folders already walked (loops, second names) and {} second names of files "
                 "already listed were not taken again",
                 dir, w.repeated_dirs, w.repeated_files);
  const fs::path base(absolute_path(dir));
  std::string listing;
  for (const std::string& f : w.files) {
    Item it;
    it.source = source;
    it.path = normal_keeping_parents(f).string();
    it.id = id_from_path(base, it.path);
    listing += fs::path(it.path).lexically_relative(base).string();
    listing += '\0';  // names may hold newlines: NUL separates them
    out.push_back(std::move(it));
  }
  return listing;
}

std::string seconds(double s) {
  char b[64];  // (wide enough for any double: "%.3f" of 1e308 has 300+ digits, so those go as %g)
  std::snprintf(b, sizeof b, std::fabs(s) < 1e12 ? "%.3f s" : "%.6g s", s);
  return b;
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

// What a file's header tells, read once per file at plan time.
struct Header {
  int64_t frames = 0;  // 0: the header does not say (a streamed WAV)
  int rate = 0, channels = 0;
};

// The one judgement of an item against its file's header, for every kind of manifest: everything
// the header tells is checked now, so that the worker never meets an item the plan could have
// refused ("a plan is exact or not made"). "" when the item is planned - a segment that ends at
// most kMaxOvershootSeconds past the end is cut to the end (`clipped`), and an unknown duration
// is taken from the header - else every reason it is a bad entry: a channel the file does not
// have, a start at or after the end, an end too far past it, a duration the file cannot hold (the
// worker's own rule, check_encoded_length).
std::string check_against_header(Item& it, const Header& h, bool& clipped) {
  std::vector<std::string> why;
  if (it.channel >= h.channels)
    why.push_back("channel " + std::to_string(it.channel) + ", but the file has " + std::to_string(h.channels) +
                  (h.channels == 1 ? " channel (channel 0)" : " channels (0.." + std::to_string(h.channels - 1) + ")"));
  // the worker's own rule for a segment's samples (MonoSource): none at this rate is an empty one
  if (h.rate > 0 && it.end >= 0 && span_frames(it.start, it.end, h.rate).take < 1)
    why.push_back("the segment from " + seconds(it.start) + " to " + seconds(it.end) + " holds no sample at " +
                  std::to_string(h.rate) + " Hz");
  if (h.frames > 0) {
    const double len = double(h.frames) / h.rate;
    if (it.start >= len) {
      why.push_back("the segment starts at " + seconds(it.start) + ", the file lasts " + seconds(len));
    } else if (it.end > len && it.end - len > kMaxOvershootSeconds) {
      why.push_back("the segment ends at " + seconds(it.end) + ", " + seconds(it.end - len) +
                    " after the end of the file (" + seconds(len) + "; up to " + seconds(kMaxOvershootSeconds) +
                    " past it is read as its end)");
    } else if (it.end < 0 && it.duration > 0) {
      // a duration the manifest gives for the rest of the file: the worker holds the audio to it
      const int64_t left = h.frames - span_frames(it.start, -1, h.rate).skip;
      if (!check_encoded_length(it, left, h.rate).empty())
        why.push_back("the manifest gives a duration of " + seconds(it.duration) + ", the file holds " +
                      seconds(double(left) / h.rate) + (it.start > 0 ? " after its start" : ""));
    }
    if (why.empty()) {
      if (it.end > len) {
        it.end = len;  // a small overshoot (rounded times): to the end of the file, as the worker reads it
        it.duration = len - it.start;
        clipped = true;
      }
      if (it.duration < 0) it.duration = (it.end >= 0 ? it.end : len) - it.start;
    }
  }
  std::string all;
  for (const std::string& w : why) all += (all.empty() ? "" : "; ") + w;
  return all;
}

void check_unique(const std::vector<Item>& items, const std::vector<Manifest>& manifests, Problems& problems) {
  std::map<std::string, std::vector<const Item*>> ids, keys;
  for (const Item& it : items) ids[it.id].push_back(&it), keys[it.key].push_back(&it);
  auto report = [&](const std::map<std::string, std::vector<const Item*>>& by, const char* what) {
    for (const auto& entry : by) {  // (not a structured binding: clang 14 cannot capture one in a lambda)
      const std::string& k = entry.first;
      const std::vector<const Item*>& list = entry.second;
      if (list.size() < 2) continue;
      if (what[0] == 'k' && std::all_of(list.begin(), list.end(), [&](const Item* i) { return i->id == list[0]->id; }))
        continue;  // the same id twice: reported as such
      std::string msg = std::string("duplicate ") + what + " '" + k + "':";
      for (size_t i = 0; i < list.size() && i < 4; ++i) {
        msg += ' ';
        msg += list[i]->line ? origin_of(*list[i], manifests) : list[i]->path;
      }
      if (list.size() > 4) msg.append(" (").append(std::to_string(list.size())).append(" in all)");
      problems.add(msg, false);
    }
  };
  report(ids, "id");
  report(keys, "key");
}

}  // namespace

void Problems::add(const std::string& msg, bool skippable) {
  list_.push_back(msg);
  fatal_ += !skippable;
}

void Problems::warn_all() const {
  for (size_t i = 0; i < list_.size() && i < kPrinted; ++i) spdlog::warn("{}", list_[i]);
  if (list_.size() > kPrinted) spdlog::warn("... and {} more bad entries", list_.size() - kPrinted);
}

void Problems::fail(bool print) const {
  if (print) warn_all();
  std::string msg = std::to_string(list_.size()) + " bad manifest entr" + (list_.size() == 1 ? "y" : "ies");
  msg += print ? " (each listed above); the first: " + list_.front() : ": ";
  for (size_t i = 0; !print && i < list_.size() && i < 10; ++i) msg.append(i ? "; " : "").append(list_[i]);
  if (!print && list_.size() > 10) msg += "; ...";
  throw Error(ErrorKind::Input, msg);
}

std::string origin_of(const Item& it, const std::vector<Manifest>& manifests) {
  if (it.source < 0 || size_t(it.source) >= manifests.size()) return it.path;
  const std::string m = manifests[size_t(it.source)].path;
  return it.line ? m + ":" + std::to_string(it.line) : m;
}

std::string key_for(const std::string& id) {
  std::string k;
  for (char c : id) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || (c && std::strchr("_-/+=,@", c));
    k += ok ? c : '_';
  }
  while (!k.empty() && k.front() == '/') k.erase(k.begin());
  for (size_t p; (p = k.find("//")) != std::string::npos;) k.erase(p, 1);
  if (k.empty() || k.back() == '/') k += '_';
  // Anything changed: the id's own digest keeps it apart from the ids it now looks like.
  if (k != id) k += "_" + sha256_hex(id.data(), id.size()).substr(0, 8);
  return k;
}

std::string channel_name(int channel) { return channel < 0 ? "mix" : std::to_string(channel); }

std::vector<Item> read_manifests(const std::vector<std::string>& paths, std::vector<Manifest>& manifests,
                                 Problems* collect) {
  Problems own;
  Problems& problems = collect ? *collect : own;
  std::vector<Item> items;
  auto abs_of = [](const std::string& p) { return p == "-" ? p : absolute_path(p); };
  std::set<std::string> segment_files;
  for (const std::string& p : paths)
    if (fs::path(p).filename() == "segments") segment_files.insert(abs_of(p));
  if (std::count(paths.begin(), paths.end(), "-") > 1)
    throw Error(ErrorKind::Usage, "'-' (stdin) given as a manifest more than once");
  std::set<std::string> used_segments;
  for (const std::string& p : paths) {
    const std::string abs = abs_of(p);
    Manifest m;
    m.path = abs;
    const size_t before = items.size();
    const int source = int(manifests.size());
    std::error_code ec;
    if (p != "-" && fs::is_directory(p, ec)) {
      m.kind = "directory";
      const std::string listing = read_directory(p, source, problems, items);
      m.sha256 = sha256_hex(listing.data(), listing.size());
    } else if (segment_files.count(abs)) {
      continue;  // read with its wav.scp
    } else {
      const std::string raw = read_text(abs);
      m.sha256 = sha256_hex(raw.data(), raw.size());
      const std::string text = decode_manifest_text(raw, abs);
      const std::string base = manifest_base(abs);
      if (is_wav_scp(p)) {
        const std::string seg = (fs::path(abs).parent_path() / "segments").string();
        std::vector<std::string> order;
        const auto recs = read_wav_scp(abs, base, text, problems, &order);
        if (segment_files.count(seg)) {
          const std::string sraw = read_text(seg);
          used_segments.insert(seg);
          m.kind = "wav.scp";
          manifests.push_back(m);
          Manifest s{seg, "segments", sha256_hex(sraw.data(), sraw.size()), 0};
          manifests.push_back(s);
          read_segments(seg, decode_manifest_text(sraw, seg), recs, source + 1, problems, items);
          manifests.back().items = items.size() - before;
          continue;
        }
        m.kind = "wav.scp";
        for (const std::string& id : order) {
          Item it;
          it.source = source, it.line = recs.at(id).line;
          it.id = id;
          it.path = recs.at(id).path;
          items.push_back(std::move(it));
        }
      } else if (looks_like_jsonl(p, text)) {
        m.kind = "jsonl";
        read_jsonl(abs, base, text, source, problems, items);
      } else {
        m.kind = "list";
        read_list(abs, base, text, source, problems, items);
      }
    }
    m.items = items.size() - before;
    manifests.push_back(m);
  }
  for (const std::string& s : segment_files)
    if (!used_segments.count(s))
      throw Error(ErrorKind::Usage, s + ": a segments file needs the wav.scp of its folder among the manifests");
  for (Item& it : items) it.key = key_for(it.id);
  std::vector<Item> kept;
  kept.reserve(items.size());
  for (Item& it : items) {
    if (ustar_fits(it.key + ".json")) kept.push_back(std::move(it));
    else
      problems.add(origin_of(it, manifests) + ": id '" + it.id +
                   "' is too long for a tar member name (ustar: at most 100 bytes for the last path "
                   "component and 155 before it, split at a '/')");
  }
  check_unique(kept, manifests, problems);
  if (!collect && !problems.empty()) problems.fail(false);
  return kept;
}

Inspection inspect_items(std::vector<Item>& items, const std::vector<Manifest>& manifests, int threads,
                         Problems& problems) {
  // One look per distinct file (the segments of a recording share it).
  struct File {
    std::string path;
    bool need_header = false;
    EntryCheck check;
    int64_t frames = 0;
    int rate = 0, channels = 0;
    std::string header_error;
    std::string truncated;  // the header says more than the file holds
  };
  std::vector<File> files;
  std::map<std::string, size_t> index;
  std::vector<size_t> file_of(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const auto [it, fresh] = index.emplace(items[i].path, files.size());
    if (fresh) files.emplace_back().path = items[i].path;
    file_of[i] = it->second;
    // the header is read when the item needs its length, or has a channel to look for
    files[it->second].need_header |= items[i].duration < 0 || items[i].end >= 0 || items[i].channel >= 0;
  }
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::exception_ptr fatal;
  auto work = [&] {
    try {
      for (size_t t; (t = next++) < files.size();) {
        File& f = files[t];
        f.check = check_entry(f.path);
        if (f.check.kind != EntryCheck::File || !f.need_header) continue;
        try {
          AudioReader r(f.path);  // a regular file (checked above): opens the header only
          f.frames = r.frames();
          f.rate = r.sample_rate();
          f.channels = r.channels();
          f.truncated = r.truncated_at_open();
          // frames 0: the header does not say its length (a streamed WAV): nothing to check a
          // segment against, and no duration for an item that needs one (below)
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::Input) throw;
          f.header_error = e.what();
        }
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!fatal) fatal = std::current_exception();
      next = files.size();
    }
  };
  std::vector<std::thread> pool;
  try {
    for (int i = 0; i < std::max(1, std::min<int>(threads, int(files.size()))); ++i) pool.emplace_back(work);
  } catch (const std::system_error&) {  // no more threads (memory or thread limits): fewer probe them
    if (pool.empty()) work();  // (this thread, then)
  }
  for (auto& t : pool) t.join();
  if (fatal) std::rethrow_exception(fatal);

  Inspection out;
  std::vector<std::string> unreadable;
  std::vector<Item> kept;
  kept.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    Item& it = items[i];
    const File& f = files[file_of[i]];
    // "MANIFEST:LINE: PATH" (a directory's file: its path)
    const std::string where = (it.line ? origin_of(it, manifests) + ": " : "") + it.path;
    if (f.check.kind == EntryCheck::Refused) {
      problems.add(where + ": " + f.check.why);
      continue;
    }
    std::string header_error = f.header_error;
    if (f.check.kind == EntryCheck::File && header_error.empty() && f.frames <= 0 && it.duration < 0)
      header_error = it.path + ": the header does not say its length";
    if (f.check.kind == EntryCheck::Unreadable || !header_error.empty()) {
      it.probe_error = f.check.kind == EntryCheck::Unreadable ? it.path + ": " + f.check.why : header_error;
      if (it.duration < 0) it.duration = 0;
      unreadable.push_back((it.line ? origin_of(it, manifests) + ": " : "") + it.probe_error);
    } else if (f.check.kind == EntryCheck::File && f.need_header) {
      // a file that holds less than its header says: the planned length would be what is there,
      // and the item a shorter one with exit 0, while the same file with a duration in a JSON
      // line is an error of its item: a bad entry, whatever the manifest kind (issue 26)
      if (!f.truncated.empty()) {
        problems.add(where + ": " + f.truncated);
        continue;
      }
      bool clipped = false;
      if (const std::string why = check_against_header(it, {f.frames, f.rate, f.channels}, clipped); !why.empty()) {
        problems.add(where + ": " + why);
        continue;
      }
      out.clipped += clipped;
    }
    kept.push_back(std::move(it));
  }
  items = std::move(kept);
  out.unreadable = unreadable.size();
  for (size_t i = 0; i < unreadable.size() && i < Problems::kPrinted; ++i)
    spdlog::warn("cannot be read now: {}", unreadable[i]);
  if (unreadable.size() > Problems::kPrinted)
    spdlog::warn("... and {} more files that cannot be read now", unreadable.size() - Problems::kPrinted);
  return out;
}

}  // namespace mimi::app::dataset
