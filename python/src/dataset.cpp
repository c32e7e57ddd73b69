// _dataset_shards: what mimi.read_dataset may read of a `mimi dataset encode` output, judged by the
// worker's and status's own functions (app/dataset/reader.h); the tar members are read in Python.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "app/dataset/item_files.h"
#include "app/dataset/reader.h"
#include "python/src/arrays.h"
#include "python/src/bind.h"

namespace mimi::py {

void bind_dataset(nb::module_& m) {
  m.def(
      "_dataset_shards",
      [](const nb::bytes& out, bool unfinished) {
        app::dataset::ReadableOutput o;
        {
          nb::gil_scoped_release g;
          o = app::dataset::readable_shards(std::string(out.c_str(), out.size()), unfinished);
        }
        std::vector<std::tuple<int, nb::bytes, uint64_t, std::string, int64_t>> v;
        for (const auto& s : o.shards)
          v.emplace_back(s.shard, nb::bytes(s.tar.data(), s.tar.size()), s.bytes, s.sha256, s.items);
        return std::make_tuple(o.dataset.dump(), v, o.stale);
      },
      nb::arg("out"), nb::arg("unfinished"),
      "(dataset.json as JSON text, [(shard, tar path, bytes to read, tar sha256 or '', items)], "
      "[why a .done there is not valid])");
  // An item's .npy member judged as the worker's resume and verify judge it (parse_npy_int16: npy
  // 1.0, '<i2', C order, [n_q, frames], nothing after the data): a member numpy would also load
  // (another shape over the same bytes, Fortran order) is refused, not read scrambled.
  m.def(
      "_dataset_npy",
      [](const nb::bytes& member, const nb::bytes& what) {
        const Codes c = app::dataset::parse_npy_int16(reinterpret_cast<const uint8_t*>(member.c_str()), member.size(),
                                                      std::string(what.c_str(), what.size()));
        return codes_to_numpy(c);
      },
      nb::arg("member"), nb::arg("what"), "codes int64 [n_q, frames] of an item's .npy member");
}

}  // namespace mimi::py
