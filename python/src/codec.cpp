// The binding of _Codec (codec.h).
#include "python/src/codec.h"

namespace mimi::py {

void bind_codec(nb::module_& m) {
  nb::class_<Codec>(m, "_Codec")
      .def(nb::init<const nb::bytes&, const nb::bytes&, const std::string&, int, bool>(), nb::arg("weights"),
           nb::arg("config"), nb::arg("device"), nb::arg("threads"), nb::arg("no_cache"))
      .def("encode_pcm", &Codec::encode_pcm, nb::arg("pcm"), nb::arg("rate"), nb::arg("n_q"), nb::arg("what"))
      .def("encode_batch", &Codec::encode_batch, nb::arg("items"), nb::arg("rate"), nb::arg("n_q"), nb::arg("slots"))
      .def("decode_codes", &Codec::decode_codes, nb::arg("codes"), nb::arg("n_q"), nb::arg("meta"),
           nb::arg("allow_weights_mismatch"))
      .def("encode_file", &Codec::encode_file, nb::arg("path"), nb::arg("n_q"))
      .def("decode_file", &Codec::decode_file, nb::arg("src"), nb::arg("out"), nb::arg("n_q"), nb::arg("force"),
           nb::arg("sample_format"), nb::arg("sample_rate"), nb::arg("allow_weights_mismatch"), nb::arg("recover"))
      .def("decode_codes_to_file", &Codec::decode_codes_to_file, nb::arg("codes"), nb::arg("length"), nb::arg("out"),
           nb::arg("n_q"), nb::arg("force"), nb::arg("sample_format"), nb::arg("sample_rate"), nb::arg("meta"),
           nb::arg("allow_weights_mismatch"))
      .def_prop_ro("sample_rate", [](Codec& c) { return c.cfg().sample_rate; })
      .def_prop_ro("frame_rate", [](Codec& c) { return c.cfg().frame_rate; })
      .def_prop_ro("frame_size", [](Codec& c) { return c.cfg().frame_size(); })
      .def_prop_ro("max_n_q", [](Codec& c) { return c.cfg().n_q; })
      .def_prop_ro("bins", [](Codec& c) { return c.cfg().bins; })
      .def_prop_ro("fingerprint", [](Codec& c) { return c.eng().model().fingerprint; })
      .def_prop_ro("weights_path", [](Codec& c) { return nb::bytes(c.le_.weights_path.data(), c.le_.weights_path.size()); })
      .def_prop_ro("device", [](Codec& c) { return describe(c.eng().device()); });
}

}  // namespace mimi::py
