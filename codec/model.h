// The loaded model in one internal representation, whichever file dialect it came from:
// moshi names' semantics, interleaved-RoPE row order for q/k, codebooks already divided by
// their cluster usage.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "codec/config.h"
#include "codec/names.h"
#include "codec/tensor.h"
#include "kernels/ops.h"

namespace mimi {

struct Conv {
  Tensor weight;  // [Cout, Cin, K]
  Tensor bias;    // [Cout] or empty
  Conv1dShape shape;  // length_in filled in per plan
};

struct ConvTr {
  Tensor weight;  // [Cin, Cout/groups, K]
  Tensor bias;    // [Cout] or empty
  ConvTranspose1dShape shape;
};

struct ResBlock {  // x + conv2(ELU(conv1(ELU(x))))
  Conv conv1, conv2;
};

struct EncoderStage {  // resblocks, ELU, strided conv
  std::vector<ResBlock> res;
  Conv down;
};

struct DecoderStage {  // ELU, transposed conv, resblocks
  ConvTr up;
  std::vector<ResBlock> res;
};

struct TransformerLayer {
  Tensor in_proj;   // [3D, D]: q, k, v rows; q/k in interleaved-RoPE order
  Tensor out_proj;  // [D, D]
  Tensor norm1_w, norm1_b, norm2_w, norm2_b;  // [D]
  Tensor linear1;   // [FF, D]
  Tensor linear2;   // [D, FF]
  Tensor scale1, scale2;  // [D]
};

struct Codebook {
  Tensor embedding;  // [bins, Q] = embedding_sum / max(cluster_usage, 1e-5)
  Tensor sq_norm;    // [bins] = |embedding row|^2
};

struct QuantizerGroup {
  Tensor input_proj;   // [Q, D]
  Tensor output_proj;  // [D, Q]
  std::vector<Codebook> books;
};

struct Model {
  Config cfg;
  Dialect dialect = Dialect::Moshi;
  std::string source;       // file it came from
  std::string fingerprint;  // hex id of the weights (see weights.cpp)
  // Hex id of the config (weights.cpp): the weights fingerprint covers the tensors alone, and the
  // same tensors under another config (sliding_window, rope_theta, ...) give other codes.
  // Recorded beside it wherever codes are kept; a separate id so existing fingerprints stay valid.
  std::string config_fingerprint() const;
  // Whether the tensors of each direction were kept at load (weights.h Parts); a direction not
  // kept has empty tensors (shapes set, data == nullptr) and must not be run.
  bool has_encoder = true, has_decoder = true;
  // Whether the tensors live in a device's memory (place_model, engine.h), not the host's. A plan
  // checks it against its kernels: device kernels handed host pointers read out of bounds on a
  // GPU, while the emulated GPU (host memory underneath) would not notice.
  bool in_device_memory = false;

  Conv enc_in;
  std::vector<EncoderStage> enc;
  Conv enc_out;
  std::vector<TransformerLayer> enc_tf;
  Conv downsample;  // replicate padding
  QuantizerGroup semantic, acoustic;
  ConvTr upsample;  // depthwise
  std::vector<TransformerLayer> dec_tf;
  Conv dec_in;
  std::vector<DecoderStage> dec;
  Conv dec_out;
};

// Calls f(Tensor&) on every tensor of the model (e.g. to place a copy on a device).
template <class F>
void for_each_tensor(Model& m, F&& f) {
  auto conv = [&](Conv& c) { f(c.weight), f(c.bias); };
  auto res = [&](std::vector<ResBlock>& rs) {
    for (ResBlock& r : rs) conv(r.conv1), conv(r.conv2);
  };
  auto layers = [&](std::vector<TransformerLayer>& ls) {
    for (TransformerLayer& l : ls)
      for (Tensor* t : {&l.in_proj, &l.out_proj, &l.norm1_w, &l.norm1_b, &l.norm2_w, &l.norm2_b, &l.linear1,
                        &l.linear2, &l.scale1, &l.scale2})
        f(*t);
  };
  auto group = [&](QuantizerGroup& g) {
    f(g.input_proj), f(g.output_proj);
    for (Codebook& b : g.books) f(b.embedding), f(b.sq_norm);
  };
  conv(m.enc_in);
  for (EncoderStage& s : m.enc) res(s.res), conv(s.down);
  conv(m.enc_out);
  layers(m.enc_tf);
  conv(m.downsample);
  group(m.semantic);
  group(m.acoustic);
  f(m.upsample.weight), f(m.upsample.bias);
  layers(m.dec_tf);
  conv(m.dec_in);
  for (DecoderStage& s : m.dec) f(s.up.weight), f(s.up.bias), res(s.res);
  conv(m.dec_out);
}

}  // namespace mimi
