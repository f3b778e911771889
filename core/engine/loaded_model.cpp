#include "core/engine/loaded_model.h"

#include <chrono>
#include <cstdio>
#include <sstream>

#include "core/log.h"
#include "core/model/model_error.h"
#include "core/model/safetensors.h"

namespace engram {
namespace {

// FNV-1a: enough to tell checkpoints apart, not a security property.
struct Fnv64 {
  uint64_t h = 1469598103934665603ull;
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i)
      h = (h ^ p[i]) * 1099511628211ull;
  }
  void add(const std::string& s) { add(s.data(), s.size()); }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
  }
};

std::string rope_text(const ModelConfig& c) {
  std::ostringstream rope;
  rope << c.rope.theta << '/' << static_cast<int>(c.rope.scaling) << '/' << c.rope.factor << '/'
       << c.rope.low_freq_factor << '/' << c.rope.high_freq_factor << '/'
       << c.rope.original_max_positions << '/' << c.head_dim;
  return rope.str();
}

// Fingerprint of the weights and the RoPE settings (stored KV is only valid for both): every
// tensor's name, dtype and shape, and the first and last 4 KiB of its bytes.
std::string fingerprint_folder(const std::filesystem::path& dir, const ModelConfig& c) {
  const WeightFiles files = WeightFiles::open_folder(dir);
  Fnv64 f;
  for (const std::string& name : files.names()) {
    const TensorView& t = files.at(name);
    f.add(name);
    f.add(dtype_safetensors_name(t.dtype));
    for (int64_t d : t.shape)
      f.add(&d, sizeof d);
    const size_t head = std::min<size_t>(t.nbytes, 4096);
    f.add(t.data, head);
    f.add(t.data + (t.nbytes - head), head);
  }
  f.add(rope_text(c));
  return f.hex();
}

// The same for random weights, over the tensors as generated. The name and seed alone would not
// do: the draws depend on the device (CPU and CUDA generators differ, and CUDA's may differ
// between GPU models), the dtype and the PyTorch version, and KV stored for other weights must
// never be restored. Copies 8 KiB per tensor to the host (a few hundred tensors for a 7B shape).
void add_tensor(Fnv64& f, const std::string& name, const at::Tensor& t) {
  if (!t.defined()) return;
  f.add(name);
  f.add(std::string(c10::toString(t.scalar_type())));
  for (int64_t d : t.sizes())
    f.add(&d, sizeof d);
  const at::Tensor bytes = t.contiguous().view(-1).view(at::kByte);
  const int64_t head = std::min<int64_t>(bytes.numel(), 4096);
  for (const at::Tensor& part :
       {bytes.narrow(0, 0, head), bytes.narrow(0, bytes.numel() - head, head)}) {
    const at::Tensor host = part.to(at::kCPU).contiguous();
    f.add(host.data_ptr(), static_cast<size_t>(host.numel()));
  }
}

std::string fingerprint_random(const std::string& shape, uint64_t seed, const DecoderWeights& w,
                               const ModelConfig& c) {
  Fnv64 f;
  add_tensor(f, "embed", w.embed);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    add_tensor(f, p + "input_norm", l.input_norm);
    add_tensor(f, p + "qkv_proj", l.qkv_proj);
    add_tensor(f, p + "qkv_bias", l.qkv_bias);
    add_tensor(f, p + "q_norm", l.q_norm);
    add_tensor(f, p + "k_norm", l.k_norm);
    add_tensor(f, p + "o_proj", l.o_proj);
    add_tensor(f, p + "post_norm", l.post_norm);
    add_tensor(f, p + "gate_up_proj", l.gate_up_proj);
    add_tensor(f, p + "down_proj", l.down_proj);
  }
  add_tensor(f, "final_norm", w.final_norm);
  if (!w.lm_head.is_same(w.embed)) add_tensor(f, "lm_head", w.lm_head);
  f.add(rope_text(c));
  return "shape:" + shape + ":seed" + std::to_string(seed) + ":" + f.hex();
}

// Loads `path` for a model of `vocab_size` embeddings, refusing a tokenizer whose ids would not
// fit (a corrupt tokenizer fails here, before the weights load).
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path, int64_t vocab_size) {
  std::unique_ptr<Tokenizer> tokenizer = Tokenizer::load(path);
  if (tokenizer->vocab_size() > vocab_size) {
    throw ModelError(path.string(), "the tokenizer has " + std::to_string(tokenizer->vocab_size()) +
                                        " pieces but the model only " + std::to_string(vocab_size) +
                                        " embeddings");
  }
  return tokenizer;
}

}  // namespace

LoadedModel load_model(const ModelSource& source, const DeviceChoice& device,
                       const LoadProgressFn& progress) {
  const auto start = std::chrono::steady_clock::now();
  LoadedModel m;
  DecoderWeights weights;
  if (!source.shape.empty()) {
    m.config = named_shape(source.shape);
    m.name = source.shape;
    if (!source.tokenizer.empty()) {
      // Random weights have no tokenizer of their own; any tokenizer whose ids are rows of the
      // embedding will do for timing (e.g. the Llama-2 32k tokenizer with a 152k Qwen2.5 shape).
      m.tokenizer = load_tokenizer(source.tokenizer, m.config.vocab_size);
      m.chat_template =
          ChatTemplate(ChatTemplate::detect(source.tokenizer.parent_path(), *m.tokenizer));
    }
    weights = random_decoder_weights(m.config, device.device, device.compute_dtype, source.seed);
    m.fingerprint = fingerprint_random(source.shape, source.seed, weights, m.config);
  } else {
    if (!source.tokenizer.empty()) {
      throw ModelError(source.tokenizer.string(),
                       "a separate tokenizer is for named shapes; the model folder " +
                           source.dir.string() + " uses its own tokenizer");
    }
    m.config = load_model_config(source.dir);
    m.name = source.dir.filename().string();
    if (m.name.empty()) m.name = source.dir.parent_path().filename().string();
    // tokenizer.model (SentencePiece) or tokenizer.json (Hugging Face), see Tokenizer::find_in.
    const std::filesystem::path tok = Tokenizer::find_in(source.dir);
    if (!tok.empty()) {
      m.tokenizer = load_tokenizer(tok, m.config.vocab_size);
      m.chat_template = ChatTemplate(ChatTemplate::detect(source.dir, *m.tokenizer));
    } else {
      log::info("no tokenizer.model or tokenizer.json in " + source.dir.string() +
                ": token ids only");
    }
    weights =
        load_decoder_weights(source.dir, m.config, device.device, device.compute_dtype, progress);
    m.fingerprint = fingerprint_folder(source.dir, m.config);
  }
  m.decoder =
      std::make_unique<Decoder>(m.config, std::move(weights), device.device, device.compute_dtype);
  m.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return m;
}

}  // namespace engram
