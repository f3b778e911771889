// The architecture of a Llama-family decoder, read from a Hugging Face folder's config.json
// (+ generation_config.json) or built for a named real shape. One decoder serves every family:
// the differences (q/k/v bias, per-head q/k RMSNorm, tied embeddings, RoPE scaling) are data.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/model/dtype.h"

namespace engram {

enum class RopeScalingType { kNone, kLinear, kLlama3 };

struct RopeConfig {
  double theta = 10000.0;
  RopeScalingType scaling = RopeScalingType::kNone;
  double factor = 1.0;                    // linear and llama3
  double low_freq_factor = 1.0;           // llama3
  double high_freq_factor = 4.0;          // llama3
  int64_t original_max_positions = 8192;  // llama3
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  std::string model_type;    // e.g. "llama"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  int64_t max_positions = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;            // q/k/v projections carry a bias (Qwen2 always)
  bool qk_norm = false;                   // per-head RMSNorm on q and k before RoPE (Qwen3)
  std::optional<int64_t> sliding_window;  // Mistral: attend to the last N positions only
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;
  DType weight_dtype = DType::kF32;  // dtype the checkpoint stores

  int64_t q_size() const { return num_heads * head_dim; }
  int64_t kv_size() const { return num_kv_heads * head_dim; }
  int64_t parameter_count() const;
  bool is_eos(int64_t token) const;
};

// Reads DIR/config.json and, when present, DIR/generation_config.json (its eos/bos ids win).
// Accepts the classic dialect (rope_theta, rope_scaling, torch_dtype) and transformers 5's
// (rope_parameters, dtype). Throws ModelError naming the file and the field that is missing,
// malformed or unsupported (a field that changes the math and is not implemented).
ModelConfig load_model_config(const std::filesystem::path& dir);

// Same, from JSON text; `origin` names the source in errors.
ModelConfig parse_model_config(const std::string& json_text, const std::string& origin);

// Real shapes with random weights for speed work: "qwen2.5-0.5b", "qwen2.5-7b",
// "qwen2.5-14b", "llama3-8b" (and "tiny", "tiny-32k" with the Llama-2 vocabulary, for tests).
// Throws ModelError for an unknown name.
ModelConfig named_shape(const std::string& name);
std::vector<std::string> named_shapes();

}  // namespace engram
