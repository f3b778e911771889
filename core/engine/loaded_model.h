// A model ready to run: its config, the decoder on a device, and (for real folders) the
// tokenizer and chat template. Built from a Hugging Face folder or from a named shape with
// random weights (speed work only; no tokenizer unless one is named, see ModelSource).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "core/policies/layer_budget.h"
#include "core/runtime/decoder.h"
#include "core/runtime/device.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"

namespace engram {

struct ModelSource {
  std::filesystem::path dir;  // a Hugging Face folder, or
  std::string shape;          // a named shape (random weights)
  uint64_t seed = 0;          // for random weights
  // Shapes only: a SentencePiece tokenizer.model to chat with random weights (benchmarks that
  // need text, e.g. `bench restore`). Its pieces must fit the shape's vocabulary (ids of a 32k
  // tokenizer are valid rows of a 152k embedding); the chat template is detected from the
  // tokenizer's folder as for a model folder. A folder always uses its own tokenizer.model.
  std::filesystem::path tokenizer;
};

struct LoadedModel {
  ModelConfig config;
  std::unique_ptr<Decoder> decoder;
  std::unique_ptr<Tokenizer> tokenizer;  // null for folders without tokenizer.model and for
                                         // shapes without ModelSource::tokenizer
  std::optional<ChatTemplate> chat_template;
  std::string name;         // folder name or shape name
  std::string fingerprint;  // identifies weights + RoPE settings (for stored KV); for a shape,
                            // "shape:NAME:seedS:" + a hash of the random weights' bytes
  double load_seconds = 0;
  // EpiCache's layer sensitivity measured for these weights (`engram-cli calibrate`, stored in
  // the profile by fingerprint); set by whoever knows the profile (CLI, Assistant), else empty.
  std::optional<LayerCalibration> layer_calibration;
};

// Throws ModelError (bad folder or tokenizer, unknown shape, a tokenizer with more pieces than
// the model has embeddings), std::runtime_error (device), std::bad_alloc / c10::Error for
// out of memory (the caller reports them; nothing is half-loaded).
LoadedModel load_model(const ModelSource& source, const DeviceChoice& device,
                       const LoadProgressFn& progress);

}  // namespace engram
