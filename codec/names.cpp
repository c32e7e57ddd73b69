#include "codec/names.h"

#include <utility>

namespace mimi {
namespace {

void conv(std::vector<TensorSpec>& t, const std::string& name, int64_t cin, int64_t cout, int64_t k,
          int64_t stride = 1, int64_t groups = 1, bool bias = true, bool transposed = false) {
  if (transposed)
    t.push_back({name + ".weight", {cin, cout / groups, k}, "convtr_weight", (cin / groups) * k / stride});
  else
    t.push_back({name + ".weight", {cout, cin / groups, k}, "conv_weight", (cin / groups) * k});
  if (bias) t.push_back({name + ".bias", {cout}, "conv_bias", 0});
}

void resblock(std::vector<TensorSpec>& t, const std::string& prefix, int64_t dim, const Config& c) {
  const int64_t hidden = dim / c.compress;
  conv(t, prefix + ".block.1.conv.conv", dim, hidden, c.residual_kernel_size);
  conv(t, prefix + ".block.3.conv.conv", hidden, dim, 1);
}

void transformer(std::vector<TensorSpec>& t, const std::string& prefix, const Config& c) {
  const int64_t d = c.d_model, ff = c.dim_feedforward;
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = prefix + ".transformer.layers." + std::to_string(l);
    t.push_back({p + ".self_attn.in_proj_weight", {3 * d, d}, "linear_weight", d});
    t.push_back({p + ".self_attn.out_proj.weight", {d, d}, "linear_weight", d});
    t.push_back({p + ".norm1.weight", {d}, "norm_weight", 0});
    t.push_back({p + ".norm1.bias", {d}, "norm_bias", 0});
    t.push_back({p + ".norm2.weight", {d}, "norm_weight", 0});
    t.push_back({p + ".norm2.bias", {d}, "norm_bias", 0});
    t.push_back({p + ".linear1.weight", {ff, d}, "linear_weight", d});
    t.push_back({p + ".linear2.weight", {d, ff}, "linear_weight", ff});
    t.push_back({p + ".layer_scale_1.scale", {d}, "layer_scale", 0});
    t.push_back({p + ".layer_scale_2.scale", {d}, "layer_scale", 0});
  }
}

void rvq(std::vector<TensorSpec>& t, const std::string& prefix, int n, const Config& c) {
  const int64_t D = c.dimension, Q = c.q_dimension, bins = c.bins;
  t.push_back({prefix + ".input_proj.weight", {Q, D, 1}, "qproj_weight", D});
  t.push_back({prefix + ".output_proj.weight", {D, Q, 1}, "qproj_weight", Q});
  for (int i = 0; i < n; ++i) {
    const std::string p = prefix + ".vq.layers." + std::to_string(i) + "._codebook";
    t.push_back({p + "._initialized", {1}, "initialized", 0});
    t.push_back({p + ".cluster_usage", {bins}, "cluster_usage", 0});
    t.push_back({p + ".embedding_sum", {bins, Q}, "embedding_sum", 0});
  }
}

const std::pair<const char*, const char*> kHfRenames[] = {
    {"conv.conv.conv", "conv"},
    {"convtr.convtr.convtr", "conv"},
    {"conv.conv", "conv"},
    {"convtr.convtr", "conv"},
    {"quantizer.rvq_first.vq", "quantizer.semantic_residual_vector_quantizer"},
    {"quantizer.rvq_first", "quantizer.semantic_residual_vector_quantizer"},
    {"quantizer.rvq_rest.vq", "quantizer.acoustic_residual_vector_quantizer"},
    {"quantizer.rvq_rest", "quantizer.acoustic_residual_vector_quantizer"},
    {"_codebook", "codebook"},
    {"_initialized", "initialized"},
    {"embedding_sum", "embed_sum"},
    {"encoder.model", "encoder.layers"},
    {"decoder.model", "decoder.layers"},
    {"encoder_transformer.transformer", "encoder_transformer"},
    {"decoder_transformer.transformer", "decoder_transformer"},
    {"linear1", "mlp.fc1"},
    {"linear2", "mlp.fc2"},
    {"self_attn.out_proj", "self_attn.o_proj"},
    {"norm1", "input_layernorm"},
    {"norm2", "post_attention_layernorm"},
    {"layer_scale_1", "self_attn_layer_scale"},
    {"layer_scale_2", "mlp_layer_scale"},
};

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

}  // namespace

const char* dialect_name(Dialect d) { return d == Dialect::Moshi ? "moshi" : "hf"; }

std::vector<TensorSpec> mimi_tensor_specs(const Config& c) {
  std::vector<TensorSpec> t;
  const int64_t F = c.n_filters, D = c.dimension;
  conv(t, "encoder.model.0.conv.conv", c.channels, F, c.kernel_size);
  int idx = 1;
  int64_t mult = 1;
  for (auto it = c.ratios.rbegin(); it != c.ratios.rend(); ++it) {
    for (int j = 0; j < c.n_residual_layers; ++j) resblock(t, "encoder.model." + std::to_string(idx++), mult * F, c);
    ++idx;  // ELU
    conv(t, "encoder.model." + std::to_string(idx++) + ".conv.conv", mult * F, mult * F * 2, 2 * *it, *it);
    mult *= 2;
  }
  ++idx;  // ELU
  conv(t, "encoder.model." + std::to_string(idx) + ".conv.conv", mult * F, D, c.last_kernel_size);

  mult = int64_t(1) << c.ratios.size();
  conv(t, "decoder.model.0.conv.conv", D, mult * F, c.kernel_size);
  idx = 1;
  for (int r : c.ratios) {
    ++idx;  // ELU
    conv(t, "decoder.model." + std::to_string(idx++) + ".convtr.convtr", mult * F, mult * F / 2, 2 * r, r, 1,
         true, true);
    for (int j = 0; j < c.n_residual_layers; ++j)
      resblock(t, "decoder.model." + std::to_string(idx++), mult * F / 2, c);
    mult /= 2;
  }
  ++idx;  // ELU
  conv(t, "decoder.model." + std::to_string(idx) + ".conv.conv", F, c.channels, c.last_kernel_size);

  transformer(t, "encoder_transformer", c);
  transformer(t, "decoder_transformer", c);
  rvq(t, "quantizer.rvq_first", c.n_q_semantic, c);
  rvq(t, "quantizer.rvq_rest", c.n_q - c.n_q_semantic, c);
  const int64_t s = c.downsample_stride();
  conv(t, "downsample.conv.conv.conv", D, D, 2 * s, s, 1, false);
  t.back().kind = "down_weight";
  conv(t, "upsample.convtr.convtr.convtr", D, D, 2 * s, s, D, false, true);
  t.back().kind = "up_weight";
  return t;
}

std::string hf_name(const std::string& moshi_name) {
  std::string n = moshi_name;
  for (const auto& [from, to] : kHfRenames)
    if (n.find(from) != std::string::npos) n = replace_all(n, from, to);
  return n;
}

QkvNames hf_split_names(const std::string& moshi_in_proj_name) {
  const std::string n = hf_name(moshi_in_proj_name);
  return {replace_all(n, "in_proj_weight", "q_proj.weight"), replace_all(n, "in_proj_weight", "k_proj.weight"),
          replace_all(n, "in_proj_weight", "v_proj.weight")};
}

int64_t hf_row_to_moshi_row(int64_t hf_row, int64_t hd) {
  const int64_t h = hf_row / hd, r = hf_row % hd;
  const int64_t j = r / (hd / 2), p = r % (hd / 2);
  return h * hd + 2 * p + j;
}

}  // namespace mimi
