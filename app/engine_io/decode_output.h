// Token files -> audio files: the checks and the writer every decoding command shares (decode,
// roundtrip, decode --batch).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/formats/audio_io.h"
#include "app/formats/token_file.h"
#include "app/sys/progress.h"
#include "codec/engine.h"

namespace mimi::app {

// How a decoded file is written (a decoding command's --sample-format, --sample-rate, --no-trim).
struct AudioOutSpec {
  SampleFormat format = SampleFormat::S16;
  std::string sample_rate;  // empty = the model's; a number; or "source" (the rate the tokens record)
  bool no_trim = false;     // keep the padding past the original length the tokens record
};

struct DecodeResult {
  int64_t samples = 0;
  int rate = 0;
  uint64_t bytes = 0;
  double compute = 0;
};

// Refuses, from its first bytes, an input that cannot be a token file of the format its name (or
// failing that, its content) says: /dev/zero or a WAV given to decode fails at once.
void check_token_prefix(std::optional<TokenFormat> declared, const uint8_t* p, size_t n, const std::string& what);

// A token file (or "-") read whole, its format from the name or the content; a damaged .mimi
// with `recover` keeps its good frames (with a warning).
TokenFile read_token_input(const std::string& path, bool recover);

// Checks tokens against the loaded model; returns the codebooks to decode with (n_q_flag > 0:
// that many; else n_q_default > 0 capped by the file, else all of the file's).
int check_tokens(Engine& eng, const TokenFile& t, int n_q_flag, int n_q_default, bool allow_mismatch,
                 const std::string& what);

// The rate to write: the model's, --sample-rate N, or "source" (the rate the tokens record).
int output_rate(const Config& c, const TokenFile& t, const std::string& flag, const std::string& what);

// One token file's audio file, written as the decoder hands out model-rate samples: trimmed to
// the original length unless no_trim, resampled to the output rate when asked; constant memory.
// Destroyed before finish(), it leaves no output (AudioWriter).
class DecodedAudioWriter {
 public:
  DecodedAudioWriter(const Config& c, const TokenFile& t, const AudioOutSpec& spec, const std::string& path,
                     bool force, const std::string& what, bool quiet);
  void write(const float* y, int64_t n);
  DecodeResult finish();  // compute: left at 0 for the caller

 private:
  DecodeResult r_;
  AudioWriter w_;
  StreamResampler rs_;
  int64_t remaining_, done_ = 0;
  std::vector<float> tmp_;
  Progress bar_;
};

// Decodes one token file to `path` with the engine's chunked decoder.
DecodeResult decode_to_file(Engine& eng, const TokenFile& t, int n_q, const AudioOutSpec& spec, const std::string& path,
                            bool force, const std::string& what, bool quiet);

}  // namespace mimi::app
