// A model ready to run: its config, the decoder on a device, and (for real folders) the
// tokenizer and chat template. Built from a Hugging Face folder or from a named shape with
// random weights (speed work only: no tokenizer).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "core/runtime/decoder.h"
#include "core/runtime/device.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"

namespace engram {

struct ModelSource {
  std::filesystem::path dir;  // a Hugging Face folder, or
  std::string shape;          // a named shape (random weights)
  uint64_t seed = 0;          // for random weights
};

struct LoadedModel {
  ModelConfig config;
  std::unique_ptr<Decoder> decoder;
  std::unique_ptr<Tokenizer> tokenizer;  // null for shapes and folders without tokenizer.model
  std::optional<ChatTemplate> chat_template;
  std::string name;         // folder name or shape name
  std::string fingerprint;  // identifies weights + RoPE settings (for stored KV)
  double load_seconds = 0;
};

// Throws ModelError (bad folder), std::runtime_error (device), std::bad_alloc / c10::Error for
// out of memory (the caller reports them; nothing is half-loaded).
LoadedModel load_model(const ModelSource& source, const DeviceChoice& device,
                       const LoadProgressFn& progress);

}  // namespace engram
