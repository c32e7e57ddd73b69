// libFuzzer target: the dataset mode's manifest readers (app/dataset/manifest.cpp read_manifests):
// JSON Lines, plain lists of paths, Kaldi wav.scp alone and wav.scp + segments. Byte 0 picks the
// layout; for wav.scp + segments the rest is split at the first NUL byte. The files are written
// under a private temporary folder with the names the reader keys on. Accepted items must be
// usable by the planner: a non-empty id, its tar-safe key, an absolute path, a finite start >= 0,
// an end after it (or "to the end"), a positive finite duration when known, unique ids and keys.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "app/dataset/manifest.h"
#include "tests/fuzz/fuzz_common.h"

using namespace mimi;
using mimi::fuzz::refused_cleanly;
namespace fs = std::filesystem;

namespace {

// One folder per process, removed at exit.
const std::string& work_dir() {
  static const std::string dir = [] {
    std::string t = (fs::temp_directory_path() / "mimi-fuzz-manifest-XXXXXX").string();
    if (!mkdtemp(t.data())) std::abort();
    static std::string keep = t;
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(keep, ec);
    });
    return t;
  }();
  return dir;
}

std::string put(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = work_dir() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), std::streamsize(size));
  return path;
}

}  // namespace

MIMI_FUZZ_TARGET {
  if (size < 1) return 0;
  const int layout = data[0] % 4;
  const uint8_t* body = data + 1;
  const size_t n = size - 1;
  std::error_code ec;
  for (const char* f : {"m.jsonl", "list.txt", "wav.scp", "segments"}) fs::remove(work_dir() + "/" + f, ec);
  std::vector<std::string> paths;
  switch (layout) {
    case 0: paths = {put("m.jsonl", body, n)}; break;
    case 1: paths = {put("list.txt", body, n)}; break;
    case 2: paths = {put("wav.scp", body, n)}; break;
    default: {
      size_t cut = 0;
      while (cut < n && body[cut] != 0) ++cut;
      paths = {put("wav.scp", body, cut), put("segments", body + std::min(cut + 1, n), n - std::min(cut + 1, n))};
    }
  }
  std::vector<app::dataset::Item> items;
  std::vector<app::dataset::Manifest> manifests;
  if (!refused_cleanly([&] { items = app::dataset::read_manifests(paths, manifests); })) return 0;
  std::set<std::string> ids, keys;
  for (const app::dataset::Item& it : items) {
    MIMI_FUZZ_CHECK(!it.id.empty(), "an item without an id");
    MIMI_FUZZ_CHECK(it.key == app::dataset::key_for(it.id), "key '" + it.key + "' is not key_for(id)");
    MIMI_FUZZ_CHECK(!it.key.empty() && it.key.find('.') == std::string::npos && it.key.front() != '/',
                    "key '" + it.key + "' is not tar/WebDataset-safe");
    MIMI_FUZZ_CHECK(!it.path.empty() && it.path.front() == '/', "path '" + it.path + "' is not absolute");
    MIMI_FUZZ_CHECK(std::isfinite(it.start) && it.start >= 0, "start " + std::to_string(it.start));
    MIMI_FUZZ_CHECK(it.end < 0 || (std::isfinite(it.end) && it.end > it.start), "end " + std::to_string(it.end));
    MIMI_FUZZ_CHECK(it.duration < 0 || (std::isfinite(it.duration) && it.duration > 0),
                    "duration " + std::to_string(it.duration));
    MIMI_FUZZ_CHECK(it.channel >= -1, "channel " + std::to_string(it.channel));
    MIMI_FUZZ_CHECK(ids.insert(it.id).second, "duplicate id '" + it.id + "' accepted");
    MIMI_FUZZ_CHECK(keys.insert(it.key).second, "duplicate key '" + it.key + "' accepted");
  }
  size_t counted = 0;
  for (const app::dataset::Manifest& m : manifests) counted += m.items;
  MIMI_FUZZ_CHECK(counted == items.size(), "the manifests' item counts do not add up");
  return 0;
}
