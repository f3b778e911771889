#include "core/model/model_config.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "core/model/model_error.h"

namespace engram {
namespace {

using nlohmann::json;

struct Family {
  const char* architecture;
  const char* model_type;
};

constexpr Family kFamilies[] = {
    {"LlamaForCausalLM", "llama"},
    {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3"},
};

std::string in_quotes(const std::string& s) {
  return "'" + s + "'";
}

std::string supported_architectures() {
  std::string out;
  for (const Family& f : kFamilies)
    out += (out.empty() ? "" : ", ") + std::string(f.architecture);
  return out;
}

// Field readers over one JSON object; every failure names the origin and the field.
class ConfigReader {
 public:
  ConfigReader(const json& root, std::string origin) : root_(root), origin_(std::move(origin)) {}

  const std::string& origin() const { return origin_; }

  // Present and not null.
  bool has(const char* field) const {
    const auto it = root_.find(field);
    return it != root_.end() && !it->is_null();
  }
  const json& raw(const char* field) const { return root_.at(field); }

  [[noreturn]] void fail(const std::string& problem) const { throw ModelError(origin_, problem); }
  [[noreturn]] void unsupported(const std::string& field, const std::string& why) const {
    fail("unsupported " + in_quotes(field) + ": " + why);
  }

  const json& required(const char* field) const {
    if (!has(field)) fail("missing field " + in_quotes(field));
    return root_.at(field);
  }

  int64_t integer(const char* field) const { return as_integer(required(field), field); }
  int64_t integer_or(const char* field, int64_t fallback) const {
    return has(field) ? as_integer(root_.at(field), field) : fallback;
  }
  int64_t positive(const char* field) const {
    const int64_t v = integer(field);
    if (v <= 0) fail("field " + in_quotes(field) + " must be positive, got " + std::to_string(v));
    return v;
  }
  double number(const char* field) const { return as_number(required(field), field); }
  double number_or(const char* field, double fallback) const {
    return has(field) ? as_number(root_.at(field), field) : fallback;
  }
  bool boolean_or(const char* field, bool fallback) const {
    if (!has(field)) return fallback;
    const json& v = root_.at(field);
    if (!v.is_boolean())
      fail("field " + in_quotes(field) + " must be true or false, got " + v.dump());
    return v.get<bool>();
  }
  std::string string_or(const char* field, const std::string& fallback) const {
    if (!has(field)) return fallback;
    const json& v = root_.at(field);
    if (!v.is_string()) fail("field " + in_quotes(field) + " must be a string, got " + v.dump());
    return v.get<std::string>();
  }
  // An id or a list of ids (eos_token_id).
  std::vector<int64_t> integers(const char* field) const {
    const json& v = required(field);
    std::vector<int64_t> out;
    if (v.is_array()) {
      for (const json& e : v)
        out.push_back(as_integer(e, field));
    } else {
      out.push_back(as_integer(v, field));
    }
    return out;
  }

 private:
  int64_t as_integer(const json& v, const char* field) const {
    if (!v.is_number_integer()) {
      fail("field " + in_quotes(field) + " must be an integer, got " + v.dump());
    }
    return v.get<int64_t>();
  }
  double as_number(const json& v, const char* field) const {
    if (!v.is_number()) fail("field " + in_quotes(field) + " must be a number, got " + v.dump());
    return v.get<double>();
  }

  const json& root_;
  std::string origin_;
};

json parse_json_object(const std::string& text, const std::string& origin) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw ModelError(origin, std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object()) throw ModelError(origin, "not a JSON object");
  return root;
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelError(path.string(), std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// RoPE from either dialect. `field` is the key the parameters came from ("rope_scaling" or
// "rope_parameters"), so errors point at the right place.
void parse_rope(const ConfigReader& config, RopeConfig* rope) {
  rope->theta = config.number_or("rope_theta", 10000.0);  // transformers' default for these
  const bool v5 = config.has("rope_parameters");
  const char* field = v5 ? "rope_parameters" : "rope_scaling";
  if (!config.has(field)) return;
  const json& params = config.raw(field);
  if (!params.is_object()) config.fail("field " + in_quotes(field) + " must be an object");
  for (const auto& [key, value] : params.items()) {
    // transformers 5 can key parameters by layer type (sliding vs full attention).
    if (value.is_object()) config.unsupported(field, "per-layer-type entry " + in_quotes(key));
  }
  const ConfigReader sub(params, config.origin());
  if (v5) rope->theta = sub.number_or("rope_theta", rope->theta);

  std::string type = sub.string_or("rope_type", sub.string_or("type", "default"));
  if (sub.has("partial_rotary_factor") && sub.number("partial_rotary_factor") != 1.0) {
    config.unsupported(field, "partial_rotary_factor " + sub.raw("partial_rotary_factor").dump());
  }
  auto need = [&](const char* key) {
    if (!sub.has(key)) config.fail("missing field " + in_quotes(key) + " in " + in_quotes(field));
    return sub.number(key);
  };
  if (type == "default") {
    rope->scaling = RopeScalingType::kNone;
  } else if (type == "linear") {
    rope->scaling = RopeScalingType::kLinear;
    rope->factor = need("factor");
  } else if (type == "llama3") {
    rope->scaling = RopeScalingType::kLlama3;
    rope->factor = need("factor");
    rope->low_freq_factor = need("low_freq_factor");
    rope->high_freq_factor = need("high_freq_factor");
    if (!sub.has("original_max_position_embeddings")) {
      config.fail("missing field 'original_max_position_embeddings' in " + in_quotes(field));
    }
    rope->original_max_positions = sub.integer("original_max_position_embeddings");
    if (rope->high_freq_factor == rope->low_freq_factor) {
      config.fail(in_quotes(field) + ": llama3 high_freq_factor must differ from low_freq_factor");
    }
  } else {
    config.unsupported(field, "rope type " + in_quotes(type) +
                                  " is not implemented (supported: default, linear, llama3)");
  }
  if (rope->factor <= 0) config.fail(in_quotes(field) + ": factor must be positive");
}

}  // namespace

int64_t ModelConfig::parameter_count() const {
  const int64_t attention =
      hidden_size * q_size() + 2 * hidden_size * kv_size() + q_size() * hidden_size +
      (attention_bias ? q_size() + 2 * kv_size() : 0) + (qk_norm ? 2 * head_dim : 0);
  const int64_t mlp = 3 * hidden_size * intermediate_size;
  const int64_t layer = attention + mlp + 2 * hidden_size;  // + input and post-attention norms
  const int64_t embeddings = vocab_size * hidden_size * (tie_word_embeddings ? 1 : 2);
  return embeddings + num_layers * layer + hidden_size;  // + final norm
}

bool ModelConfig::is_eos(int64_t token) const {
  return std::find(eos_token_ids.begin(), eos_token_ids.end(), token) != eos_token_ids.end();
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& origin) {
  const json root = parse_json_object(json_text, origin);
  const ConfigReader config(root, origin);
  ModelConfig c;

  // The architecture picks the family; model_type must agree with it when both are given.
  std::string architecture;
  if (config.has("architectures")) {
    const json& archs = config.raw("architectures");
    if (!archs.is_array() || archs.empty() || !archs[0].is_string()) {
      config.fail("field 'architectures' must be a non-empty list of names");
    }
    architecture = archs[0].get<std::string>();
  }
  const std::string model_type = config.string_or("model_type", "");
  const Family* family = nullptr;
  for (const Family& f : kFamilies) {
    if (architecture.empty() ? model_type == f.model_type : architecture == f.architecture) {
      family = &f;
    }
  }
  if (family == nullptr) {
    if (architecture.empty() && model_type.empty()) {
      config.fail("missing field 'architectures' (and no 'model_type')");
    }
    config.fail("unsupported architecture " +
                in_quotes(architecture.empty() ? model_type : architecture) +
                " (supported: " + supported_architectures() + ")");
  }
  if (!model_type.empty() && model_type != family->model_type) {
    config.fail("model_type " + in_quotes(model_type) + " does not match architecture " +
                in_quotes(family->architecture) + " (expected " + in_quotes(family->model_type) +
                ")");
  }
  c.architecture = family->architecture;
  c.model_type = family->model_type;
  const bool qwen = c.model_type == "qwen2" || c.model_type == "qwen3";

  // Fields that change the math and are not implemented: refuse rather than compute something
  // else (STYLE rule 7).
  if (config.has("quantization_config")) {
    config.unsupported("quantization_config", "quantized checkpoints are not supported");
  }
  const std::string act = config.string_or("hidden_act", "silu");
  if (act != "silu") config.unsupported("hidden_act", in_quotes(act) + " (only 'silu')");
  if (config.boolean_or("mlp_bias", false)) {
    config.unsupported("mlp_bias", "MLP projections with bias are not implemented");
  }
  if (config.has("partial_rotary_factor") && config.number("partial_rotary_factor") != 1.0) {
    config.unsupported("partial_rotary_factor",
                       config.raw("partial_rotary_factor").dump() + " (only 1)");
  }

  c.vocab_size = config.positive("vocab_size");
  c.hidden_size = config.positive("hidden_size");
  c.intermediate_size = config.positive("intermediate_size");
  c.num_layers = config.positive("num_hidden_layers");
  c.num_heads = config.positive("num_attention_heads");
  c.num_kv_heads = config.integer_or("num_key_value_heads", c.num_heads);
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    config.fail("num_attention_heads " + std::to_string(c.num_heads) +
                " is not divisible by num_key_value_heads " + std::to_string(c.num_kv_heads));
  }
  if (config.has("head_dim")) {
    c.head_dim = config.positive("head_dim");
  } else {
    if (c.hidden_size % c.num_heads != 0) {
      config.fail("hidden_size " + std::to_string(c.hidden_size) +
                  " is not divisible by num_attention_heads and 'head_dim' is not given");
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  c.rms_norm_eps = config.number("rms_norm_eps");
  c.max_positions = config.positive("max_position_embeddings");
  c.tie_word_embeddings = config.boolean_or("tie_word_embeddings", false);
  // Qwen2 hard-codes q/k/v bias; its config does not say so.
  c.attention_bias = c.model_type == "qwen2" ? true : config.boolean_or("attention_bias", false);
  c.qk_norm = c.model_type == "qwen3";

  if (qwen) {
    if (config.boolean_or("use_sliding_window", false)) {
      config.unsupported("use_sliding_window", "sliding-window layers are not implemented");
    }
  } else if (c.model_type == "mistral" && config.has("sliding_window")) {
    c.sliding_window = config.positive("sliding_window");
  }
  if (config.has("layer_types")) {
    const json& types = config.raw("layer_types");
    if (!types.is_array()) config.fail("field 'layer_types' must be a list");
    for (const json& t : types) {
      if (t != "full_attention") config.unsupported("layer_types", "layer type " + t.dump());
    }
  }

  parse_rope(config, &c.rope);

  c.bos_token_id = config.integer_or("bos_token_id", -1);
  if (config.has("eos_token_id")) c.eos_token_ids = config.integers("eos_token_id");

  const char* dtype_field = config.has("dtype") ? "dtype" : "torch_dtype";
  if (config.has(dtype_field)) {
    const std::string name = config.string_or(dtype_field, "");
    try {
      c.weight_dtype = dtype_from_name(name);
    } catch (const std::invalid_argument&) {
      config.unsupported(dtype_field, "weight dtype " + in_quotes(name) +
                                          " (supported: float32, float16, bfloat16)");
    }
  }
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& dir) {
  const std::filesystem::path config_path = dir / "config.json";
  if (!std::filesystem::exists(config_path)) {
    throw ModelError(config_path.string(), "missing: the model folder has no config.json");
  }
  ModelConfig c = parse_model_config(read_text_file(config_path), config_path.string());

  // generation_config.json is what generate() honours; its ids win over config.json's.
  const std::filesystem::path gen_path = dir / "generation_config.json";
  if (std::filesystem::exists(gen_path)) {
    const json root = parse_json_object(read_text_file(gen_path), gen_path.string());
    const ConfigReader gen(root, gen_path.string());
    if (gen.has("bos_token_id")) c.bos_token_id = gen.integer("bos_token_id");
    if (gen.has("eos_token_id")) c.eos_token_ids = gen.integers("eos_token_id");
  }
  return c;
}

ModelConfig named_shape(const std::string& name) {
  ModelConfig c;
  c.weight_dtype = DType::kBF16;
  auto qwen25 = [&](int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv,
                    int64_t vocab, bool tied) {
    c.architecture = "Qwen2ForCausalLM";
    c.model_type = "qwen2";
    c.hidden_size = hidden;
    c.intermediate_size = inter;
    c.num_layers = layers;
    c.num_heads = heads;
    c.num_kv_heads = kv;
    c.head_dim = hidden / heads;
    c.vocab_size = vocab;
    c.tie_word_embeddings = tied;
    c.attention_bias = true;
    c.rms_norm_eps = 1e-6;
    c.rope.theta = 1e6;
    c.max_positions = 32768;
    c.bos_token_id = 151643;
    c.eos_token_ids = {151645, 151643};  // <|im_end|>, <|endoftext|>
  };
  auto llama = [&]() {
    c.architecture = "LlamaForCausalLM";
    c.model_type = "llama";
    c.rms_norm_eps = 1e-5;
  };
  // Llama 3's vocabulary, 8 KV heads of 128, RoPE theta 500K.
  auto llama3 = [&](int64_t hidden, int64_t inter, int64_t layers, int64_t heads, bool tied) {
    llama();
    c.hidden_size = hidden;
    c.intermediate_size = inter;
    c.num_layers = layers;
    c.num_heads = heads;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.vocab_size = 128256;
    c.tie_word_embeddings = tied;
    c.rope.theta = 500000.0;
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001};
  };
  if (name == "qwen2.5-0.5b") {
    qwen25(896, 4864, 24, 14, 2, 151936, true);
  } else if (name == "qwen2.5-7b") {
    qwen25(3584, 18944, 28, 28, 4, 152064, false);
  } else if (name == "qwen2.5-14b") {
    qwen25(5120, 13824, 48, 40, 8, 152064, false);
  } else if (name == "llama3-8b" || name == "llama3.1-8b") {
    // llama3.1-8b: the same layers with Llama 3.1's 128K positions (LouisKV's 32K+16K requests);
    // its RoPE scaling changes no cost, so random weights leave it out.
    llama3(4096, 14336, 32, 32, false);
    c.max_positions = name == "llama3-8b" ? 8192 : 131072;
  } else if (name == "llama3.2-3b") {
    // EpiCache's efficiency model (paper Table 3), 128K positions (RoPE scaling left out as above).
    llama3(3072, 8192, 28, 24, true);
    c.max_positions = 131072;
  } else if (name == "tiny" || name == "tiny-32k") {
    llama();
    c.hidden_size = 64;
    c.intermediate_size = 128;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 16;
    // tiny-32k: the Llama-2 vocabulary, for tests that chat with random weights through the
    // 32k tokenizer in tests/data (ModelSource::tokenizer needs every id to be an embedding row).
    c.vocab_size = name == "tiny" ? 512 : 32000;
    c.max_positions = 2048;
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
  } else {
    std::string known;
    for (const std::string& n : named_shapes())
      known += (known.empty() ? "" : ", ") + n;
    throw ModelError("", "unknown model shape " + in_quotes(name) + " (known: " + known + ")");
  }
  return c;
}

std::vector<std::string> named_shapes() {
  return {"qwen2.5-0.5b", "qwen2.5-7b",  "qwen2.5-14b", "llama3-8b",
          "llama3.1-8b",  "llama3.2-3b", "tiny",        "tiny-32k"};
}

}  // namespace engram
