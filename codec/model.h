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

}  // namespace mimi
