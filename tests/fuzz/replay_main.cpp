// The `fuzz_regressions` ctest: every seed (tests/fuzz/seeds/<target>/) and every saved
// reproducer (tests/fuzz/regressions/<target>/) run once through its harness, built with the
// normal compiler and without libFuzzer (each harness' entry point renamed mimi_fuzz_<target>).
// A reproducer listed in regressions/<target>/OPEN (one file name a line, '#' comments) is a
// known bug in code another owner is fixing: it is skipped here (it may need a sanitizer or lots
// of memory to show) and listed as open; `scripts/fuzz.sh --replay` runs it under the sanitizers.
//   fuzz_regressions [TARGET...]   (default: all targets)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#define MIMI_FUZZ_TARGETS(X) \
  X(safetensors_weights)     \
  X(safetensors_tokens)      \
  X(npy)                     \
  X(text)                    \
  X(mimi)                    \
  X(config)                  \
  X(audio)                   \
  X(stream_encode)           \
  X(stream_decode)

#define DECLARE(name) extern "C" int mimi_fuzz_##name(const uint8_t* data, size_t size);
MIMI_FUZZ_TARGETS(DECLARE)
#undef DECLARE

namespace fs = std::filesystem;

namespace {

struct Target {
  const char* name;
  int (*run)(const uint8_t*, size_t);
};

#define ENTRY(name) {#name, mimi_fuzz_##name},
const Target kTargets[] = {MIMI_FUZZ_TARGETS(ENTRY)};
#undef ENTRY

std::set<std::string> open_list(const fs::path& dir) {
  std::set<std::string> names;
  std::ifstream f(dir / "OPEN");
  std::string line;
  while (std::getline(f, line)) {
    line.erase(std::find(line.begin(), line.end(), '#'), line.end());
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) line.pop_back();
    if (!line.empty()) names.insert(line);
  }
  return names;
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != "OPEN" && e.path().extension() != ".md") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path root = MIMI_FUZZ_DIR;
  const std::set<std::string> only(argv + 1, argv + argc);
  int ran = 0, failed = 0, open = 0;
  for (const Target& t : kTargets) {
    if (!only.empty() && !only.count(t.name)) continue;
    const std::set<std::string> known_open = open_list(root / "regressions" / t.name);
    for (const char* kind : {"seeds", "regressions"})
      for (const fs::path& p : files_in(root / kind / t.name)) {
        const std::string label = std::string(t.name) + ": " + kind + "/" + t.name + "/" + p.filename().string();
        if (std::string(kind) == "regressions" && known_open.count(p.filename().string())) {
          std::printf("OPEN  %s (known bug, see OPEN; not run here)\n", label.c_str());
          ++open;
          continue;
        }
        std::ifstream f(p, std::ios::binary);
        const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        ++ran;
        try {
          t.run(bytes.data(), bytes.size());
          std::printf("ok    %s\n", label.c_str());
        } catch (const std::exception& e) {
          std::printf("FAIL  %s: %s\n", label.c_str(), e.what());
          ++failed;
        }
        std::fflush(stdout);
      }
  }
  std::printf("%d inputs, %d failed, %d open (skipped)\n", ran, failed, open);
  return failed ? 1 : 0;
}
