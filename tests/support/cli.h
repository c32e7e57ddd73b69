// Harness for end-to-end tests of the mimi executable: a private sandbox directory per test,
// bash command lines run inside it with a deadline (the whole process group is killed past it),
// listings that include hidden files, and builders for WAV / .npy / safetensors / .mimi bytes.
// Used by test_cli.cpp and test_catalogue.cpp.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace mimi::test {

namespace fs = std::filesystem;

// The binary under test (MIMI_BINARY), and a directory holding a `mimi` symlink to it that the
// sandbox puts first on PATH (so `timeout 20 mimi ...` works in command lines).
const std::string& mimi_binary();
const std::string& mimi_bin_dir();

struct Run {
  int code = -1;           // exit status; 128+N when the shell saw a death by signal N
  std::string out, err;    // stdout, stderr
  bool timed_out = false;  // killed at the deadline (code 124)
  double seconds = 0;      // wall time
};
// The dynamic loader gave up before mimi ran (under `ulimit -v` or `ulimit -n` below what mapping
// its libraries needs): exit 127, which none of mimi's own codes is, with one of ld.so's messages
// ("error while loading shared libraries: ...", "cannot allocate TLS data structures", or a bare
// "out of memory" when its own allocation fails: seen on the 9.4 MB CUDA-enabled binary).
bool loader_gave_up(const Run& r);


// The invariants of every run in the class sweeps: finished, no crash (unless signal_ok: a run
// killed on purpose), no internal error (exit 70 or its message), no uncaught exception.
void check_sane(const Run& r, bool signal_ok = false);
// The seed of the generated tests: MIMI_TEST_SEED, else `fallback` (a failure names it to rerun).
unsigned test_seed(unsigned fallback = 26);

std::string slurp(const fs::path& p);
std::vector<std::string> lines_of(const std::string& s);  // split at '\n' (a last line without one too)
void spit(const fs::path& p, const std::string& bytes);
std::string lower(std::string s);
bool contains_ci(const std::string& hay, const std::string& needle);  // case-insensitive

// One entry of a recursive listing (hidden files included, links not followed).
struct Entry {
  char type = '?';     // 'f' file, 'd' directory, 'l' link, 'p' fifo, 'c' char device, '?' other
  uint64_t size = 0;
  size_t hash = 0;     // of the content, for regular files up to 64 MiB
  bool operator==(const Entry& o) const { return type == o.type && size == o.size && hash == o.hash; }
};
using Listing = std::map<std::string, Entry>;  // path relative to the listed directory
Listing list_tree(const fs::path& dir);

struct Sandbox {
  fs::path dir;         // unique per Sandbox: <tmp>/mimi-<tag>-<pid>-<counter>
  std::string weights;  // MIMI_WEIGHTS for the commands: the tiny HF weights, config.json beside
  explicit Sandbox(const std::string& tag = "cli");
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;
  fs::path operator/(const std::string& s) const { return dir / s; }

  // Runs a bash command line in the sandbox with `mimi` on PATH, MIMI_WEIGHTS set, HOME = the
  // sandbox and HF_HOME unset. stdout/stderr are captured outside the sandbox directory (so a
  // listing of it shows only what the commands made). Past timeout_s the process group is killed
  // and the result has timed_out set and code 124.
  Run sh(const std::string& cmd, int timeout_s = 300) const;
  static std::string escape(const std::string& s);  // for "..." inside bash -c "..."

  void put(const std::string& name, const std::string& bytes) const { spit(dir / name, bytes); }
  std::string get(const std::string& name) const { return slurp(dir / name); }

 private:
  fs::path capture_;  // <dir>.capture/: stdout and stderr files
};

// The options `mimi CMD --help` lists, each with a value it accepts (the first of a choice list,
// "x" for text, "2" for numbers), so a sweep covers options added later.
struct HelpOption {
  std::string name;   // the long name (or the only name)
  std::string value;  // a valid value when it takes one, else empty
};
std::vector<HelpOption> help_options(const Sandbox& box, const std::string& cmd);

// Starts `mimi args...` in `cwd` (own process group, stdin /dev/null, stdout to out_file, stderr
// to err_file), with MIMI_WEIGHTS = weights. Returns the child's pid.
pid_t spawn_mimi(const fs::path& cwd, const std::vector<std::string>& args, const std::string& weights,
                 const fs::path& out_file, const fs::path& err_file);
// waitpid with a deadline; returns the exit status as the shell would (128+signal for a death
// by signal), or 124 after killing the process group at the deadline.
int wait_exit(pid_t pid, double timeout_s, bool* signaled = nullptr, int* signal = nullptr);

// ---- audio helpers (libsndfile)
void write_wav(const fs::path& path, const std::vector<float>& interleaved, int rate, int channels, int format);
struct WavInfo {
  int rate = 0, channels = 0;
  int64_t frames = 0;
  int format = 0;
};
WavInfo wav_info(const fs::path& p);          // REQUIREs that the file opens
bool audio_opens(const fs::path& p, WavInfo* info = nullptr);  // no REQUIRE
std::vector<float> read_wav(const fs::path& p);  // mono samples as float
std::vector<float> tone(int64_t n, int channels, int rate);

// ---- byte builders for crafted inputs
std::string le16(uint16_t v);
std::string le32(uint32_t v);
std::string le64(uint64_t v);
std::string f32_bytes(const std::vector<float>& v);
std::string s16_bytes(const std::vector<float>& v);

// A RIFF/WAVE file from its parts; sizes default to the true ones.
struct WavSpec {
  uint16_t tag = 1;  // 1 PCM, 3 float
  uint16_t channels = 1;
  uint32_t rate = 24000;
  uint16_t bits = 16;
  std::string data;               // sample bytes
  int64_t riff_size = -1;         // -1: true size
  int64_t data_size = -1;         // -1: data.size()
  int64_t fmt_size = -1;          // -1: 16
  std::string chunks_before_data; // raw extra chunks (e.g. LIST) between fmt and data
};
std::string make_wav(const WavSpec& w);

// .npy version 1.0 with the given header dict text, padded to 64 bytes, then `data`.
std::string make_npy(const std::string& dict, const std::string& data);
// safetensors: u64 header length + header text + data.
std::string make_safetensors(const std::string& header_json, const std::string& data);

// A .mimi file split into preamble, header JSON and the rest (chunks and end record).
struct MimiParts {
  std::string preamble;  // 8 bytes
  std::string header;    // JSON text
  std::string rest;      // after the header CRC
};
MimiParts split_mimi(const std::string& bytes);
// Reassembles with a correct header length and CRC.
std::string join_mimi(const MimiParts& p);
uint32_t crc32_of(const std::string& s);

}  // namespace mimi::test
