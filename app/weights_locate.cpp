#include "app/weights_locate.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

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
  fs::path hf;
  if (const char* h = std::getenv("HF_HOME"); h && *h) hf = h;
  else if (const char* home = std::getenv("HOME"); home && *home) hf = fs::path(home) / ".cache" / "huggingface";
  std::error_code ec;
  const fs::path snaps = hf / "hub" / "models--kyutai--mimi" / "snapshots";
  if (!hf.empty() && fs::is_directory(snaps, ec))
    for (const auto& e : fs::directory_iterator(snaps, ec)) {
      std::string f = in_dir(e.path());
      if (!f.empty()) return f;
    }
  throw Error(ErrorKind::Weights,
              "no Mimi weights found. Pass --weights FILE (model.safetensors of kyutai/mimi, or moshi's "
              "tokenizer-e351c8d8-checkpoint125.safetensors), set MIMI_WEIGHTS, or download them with "
              "scripts/download-weights.sh (into the Hugging Face cache, " +
                  (hf.empty() ? std::string("~/.cache/huggingface") : hf.string()) + ")");
}

}  // namespace mimi::app
