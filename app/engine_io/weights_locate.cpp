#include "app/engine_io/weights_locate.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "codec/error.h"

namespace mimi::app {
namespace fs = std::filesystem;

namespace {

std::string in_dir(const fs::path& d) {
  std::error_code ec;
  for (const char* name : {"model.safetensors", "tokenizer-e351c8d8-checkpoint125.safetensors"})
    if (fs::is_regular_file(d / name, ec)) return (d / name).string();
  return "";
}

// A directory is searched for the weights file; anything else that exists is the weights source
// as named: a regular file, or a pipe, FIFO or device (`<(cat model.safetensors)`), which the
// reader reads as a stream (SafetensorsFile::open; /dev/zero is refused there, naming it). Only a
// path that stat cannot find "does not exist"; other stat failures say why (EACCES...).
std::string resolve(const std::string& p, const std::string& origin) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) throw Error(ErrorKind::Weights, origin + " '" + p + "' does not exist");
    throw sys_error(errno, ErrorKind::Weights, origin + " '" + p + "'", "cannot stat");
  }
  if (S_ISDIR(st.st_mode)) {
    std::string f = in_dir(p);
    if (!f.empty()) return f;
    throw Error(ErrorKind::Weights, origin + " '" + p + "' is a directory without model.safetensors");
  }
  return p;
}

}  // namespace

std::string locate_weights(const std::string& flag) {
  if (!flag.empty()) return resolve(flag, "--weights");
  if (const char* env = std::getenv("MIMI_WEIGHTS"); env && *env) return resolve(env, "$MIMI_WEIGHTS");
  // The hub cache as huggingface_hub finds it: $HF_HUB_CACHE, else $HF_HOME/hub, else
  // ~/.cache/huggingface/hub. In it, the snapshot refs/main names (the one the hub's own tools
  // load; broken, it is the error), then, without refs/main, the snapshots newest first (never the
  // directory's order: with two snapshots that took an arbitrary, possibly broken, one).
  fs::path hf, hub;
  if (const char* h = std::getenv("HF_HOME"); h && *h) hf = h;
  else if (const char* home = std::getenv("HOME"); home && *home) hf = fs::path(home) / ".cache" / "huggingface";
  if (const char* c = std::getenv("HF_HUB_CACHE"); c && *c) hub = c;
  else if (!hf.empty()) hub = hf / "hub";
  std::error_code ec;
  const fs::path repo = hub / "models--kyutai--mimi", snaps = repo / "snapshots";
  if (!hub.empty() && fs::is_directory(snaps, ec)) {
    // refs/main, when it is there at all, decides: one that cannot be read, or is empty, blank or
    // not a snapshot's name (an interrupted write), is the error, never a snapshot picked by age.
    const fs::path ref_path = repo / "refs" / "main";
    if (fs::exists(fs::symlink_status(ref_path, ec))) {
      const std::string rp = ref_path.string();
      std::ifstream ref(ref_path);
      std::string main_ref;
      if (!ref || fs::is_directory(ref_path, ec))
        throw Error(ErrorKind::Weights, rp + ": cannot be read: it should name the snapshot to load; download the "
                                             "weights again (scripts/download-weights.sh), or pass --weights");
      std::getline(ref, main_ref);
      while (!main_ref.empty() && std::isspace(static_cast<unsigned char>(main_ref.back()))) main_ref.pop_back();
      if (main_ref.empty() || main_ref.find('/') != std::string::npos || main_ref == "." || main_ref == "..")
        throw Error(ErrorKind::Weights, rp + ": " + (main_ref.empty() ? std::string("empty") : "'" + main_ref + "'") +
                                            ", not the name of a snapshot (an interrupted download?): download the "
                                            "weights again (scripts/download-weights.sh), or pass --weights");
      std::string f = in_dir(snaps / main_ref);
      if (!f.empty()) return f;
      // The snapshot the hub calls current is broken (an interrupted download leaves a dangling
      // link): an older snapshot is another model, never taken in its place without a word.
      throw Error(ErrorKind::Weights, rp + " names snapshot " + main_ref + ", and " + (snaps / main_ref).string() +
                                          " holds no readable model.safetensors (an interrupted download?): "
                                          "download it again (scripts/download-weights.sh), or pass --weights");
    }
    std::vector<std::pair<fs::file_time_type, fs::path>> all;
    for (const auto& e : fs::directory_iterator(snaps, ec)) {
      std::error_code tec;
      all.emplace_back(fs::last_write_time(e.path(), tec), e.path());
    }
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
    for (const auto& [t, dir] : all) {
      std::string f = in_dir(dir);
      if (!f.empty()) return f;
      // A snapshot that has a weights entry which does not read (a dangling link: an interrupted
      // download) is the newest model there is: an older snapshot is another model, never taken
      // in its place without a word. Snapshots without any weights entry (other files of the
      // repository) are passed over.
      for (const char* name : {"model.safetensors", "tokenizer-e351c8d8-checkpoint125.safetensors"})
        if (std::error_code lec; fs::exists(fs::symlink_status(dir / name, lec)))
          throw Error(ErrorKind::Weights, (dir / name).string() + " is the newest snapshot's weights (there is no " +
                                              (repo / "refs" / "main").string() + "), and it does not read as a "
                                              "file (an interrupted download?): download it again "
                                              "(scripts/download-weights.sh), or pass --weights");
    }
  }
  throw Error(ErrorKind::Weights,
              "no Mimi weights found. Pass --weights FILE (model.safetensors of kyutai/mimi, or moshi's "
              "tokenizer-e351c8d8-checkpoint125.safetensors), set MIMI_WEIGHTS, or download them with "
              "scripts/download-weights.sh (into the Hugging Face cache, " +
                  (hub.empty() ? std::string("~/.cache/huggingface/hub") : hub.string()) + ")");
}

}  // namespace mimi::app
