// libFuzzer target: config JSON in the Hugging Face MimiConfig and moshi styles
// (codec/config.cpp): Config::from_file through a file path as the CLI's --config, and
// from_json on the parsed value. An accepted config must be usable: positive hop/frame size,
// a whole downsample stride, the tensor list buildable, and to_json() reading back to itself.
#include <nlohmann/json.hpp>

#include "codec/config.h"
#include "codec/names.h"
#include "tests/fuzz/fuzz_common.h"

using namespace mimi;
using mimi::fuzz::refused_cleanly;

MIMI_FUZZ_TARGET {
  const fuzz::MemFd file(data, size);
  Config from_file;
  const bool file_ok = refused_cleanly([&] { from_file = Config::from_file(file.path()); });
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    MIMI_FUZZ_CHECK(!file_ok, "from_file accepted bytes that are not JSON");
    return 0;
  }
  Config c;
  const bool ok = refused_cleanly([&] { c = Config::from_json(j, "fuzz.json"); });
  if (file_ok) MIMI_FUZZ_CHECK(ok && c == from_file, "from_file and from_json disagree");
  if (!ok) return 0;
  refused_cleanly([&] { c.validate("again"); });  // idempotent: must not throw
  MIMI_FUZZ_CHECK(c.hop() > 0 && c.downsample_stride() >= 1 && c.frame_size() > 0, "frame geometry");
  MIMI_FUZZ_CHECK(c.head_dim() > 0 && c.head_dim() % 2 == 0, "head_dim");
  int64_t params = 0;
  for (const TensorSpec& s : mimi_tensor_specs(c)) {
    int64_t n = 1;
    for (int64_t d : s.shape) {
      MIMI_FUZZ_CHECK(d > 0, s.name + ": dimension " + std::to_string(d));
      n *= d;
    }
    params += n;
  }
  MIMI_FUZZ_CHECK(params > 0, "no parameters");
  Config back;
  MIMI_FUZZ_CHECK(refused_cleanly([&] { back = Config::from_json(c.to_json(), "to_json"); }), "to_json is refused");
  MIMI_FUZZ_CHECK(back == c, "to_json does not read back to the same config: " + c.to_json().dump());
  return 0;
}
