// read_tokens: a token file in any format the CLI writes (.mimi, .npy, .safetensors, text),
// through the CLI's own reader and checks.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <nlohmann/json.hpp>

#include "app/engine_io/decode_output.h"
#include "app/formats/token_file.h"
#include "python/src/arrays.h"
#include "python/src/bind.h"

namespace mimi::py {

void bind_tokens(nb::module_& m) {
  m.def(
      "read_tokens",
      [](const nb::bytes& path, bool recover) {
        const std::string p(path.c_str(), path.size());
        app::TokenFile t;
        {
          nb::gil_scoped_release g;
          t = app::read_token_input(p, recover);
        }
        nlohmann::json meta = app::meta_to_json(t.meta);
        if (!t.complete) meta["damage"] = t.damage;  // recover: what was cut (its good frames are the codes)
        return std::make_tuple(codes_to_numpy(t.codes), meta.dump());
      },
      nb::arg("path"), nb::arg("recover"), "(codes int64 [n_q, frames], metadata as JSON text) of a token file");
}

}  // namespace mimi::py
