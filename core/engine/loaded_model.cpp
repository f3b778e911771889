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
  std::ostringstream rope;
  rope << c.rope.theta << '/' << static_cast<int>(c.rope.scaling) << '/' << c.rope.factor << '/'
       << c.rope.low_freq_factor << '/' << c.rope.high_freq_factor << '/'
       << c.rope.original_max_positions << '/' << c.head_dim;
  f.add(rope.str());
  return f.hex();
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
    weights = random_decoder_weights(m.config, device.device, device.compute_dtype, source.seed);
    m.fingerprint = "shape:" + source.shape + ":" + std::to_string(source.seed);
  } else {
    m.config = load_model_config(source.dir);
    m.name = source.dir.filename().string();
    if (m.name.empty()) m.name = source.dir.parent_path().filename().string();
    const std::filesystem::path tok = source.dir / "tokenizer.model";
    if (std::filesystem::exists(tok)) {
      m.tokenizer = Tokenizer::load(tok);  // a corrupt tokenizer fails before the weights load
      if (m.tokenizer->vocab_size() > m.config.vocab_size) {
        throw ModelError(tok.string(), "the tokenizer has " +
                                           std::to_string(m.tokenizer->vocab_size()) +
                                           " pieces but the model only " +
                                           std::to_string(m.config.vocab_size) + " embeddings");
      }
      m.chat_template = ChatTemplate(ChatTemplate::detect(source.dir, *m.tokenizer));
    } else {
      log::info("no tokenizer.model in " + source.dir.string() + ": token ids only");
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
