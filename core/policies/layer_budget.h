// Sensitivity-aware layer budgets (EpiCache §3.2, Eq. 10): a layer whose keys move more when
// attention is cut to sink + recent tokens gets more of the KV budget. The calibration that
// measures each layer's key cosine (core/engine/layer_sensitivity.h) is stored once per model,
// keyed by its fingerprint, in the profile (`engram-cli calibrate`). No torch, no Qt.
//
// Engram's deviation from Eq. 10: every layer keeps at least M/4 (DESIGN.md, EpiCache). Layer 0's
// keys never differ (they are computed from the embeddings alone), so without a floor it would
// get nothing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace engram {

// Per-layer budgets M_l with Σ M_l == L·M exactly: w_l = (1 − σ_l)^α, M_l = L·M·w_l/Σw, raised to
// the floor M/4 where below it and, with a `ceiling` (> 0: e.g. the tokens a layer can hold at
// most), lowered to it where above; what a bound adds or frees is taken from or given to the
// other layers in proportion to their weights. Rounded by largest remainder (ties to the lower
// layer). Equal σ (or α = 0, or Σw = 0) gives M everywhere; σ above 1 (rounding) counts as 1.
// Throws std::invalid_argument for no layers, M < 1, α < 0, a σ that is not finite or a
// ceiling below M.
std::vector<int64_t> allocate_layer_budgets(const std::vector<double>& key_cosine, int64_t budget,
                                            double alpha = 2.0, int64_t ceiling = 0);

// NOTE: written to disk; a change of meaning bumps kLayerCalibrationVersion.
inline constexpr const char* kLayerCalibrationFormat = "engram-layer-calibration";
inline constexpr int kLayerCalibrationVersion = 1;

// One model's measured layer sensitivity and how it was measured.
struct LayerCalibration {
  std::string model_fingerprint;   // LoadedModel::fingerprint
  std::string model_name;          // for people; the fingerprint is what is checked
  std::vector<double> key_cosine;  // σ_l per layer (Eq. 9)
  int64_t sink = 0;                // tokens every query of the restricted pass sees
  int64_t window = 0;              // recent tokens before its block it also sees
  int64_t block = 0;               // block of the restricted pass (queries see their block)
  int64_t tokens = 0;              // calibration text length
  int64_t samples = 1;             // calibration texts averaged
  std::string text;                // what the text was ("conversation seed 1", a file name)
  double alpha = 2.0;              // the sharpness to allocate with (Eq. 10)
  std::string date;                // ISO 8601 UTC
  std::string dtype;               // compute dtype of the measurement ("f32")
};

// A calibration file that cannot be used: unreadable, not JSON, a missing or ill-typed field
// (named by its key), another format or version, or made for another model.
class LayerCalibrationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string layer_calibration_to_json(const LayerCalibration& c);  // pretty-printed, one object
// Unknown keys are ignored (a `calibrate --json` report with budgets reads back too).
LayerCalibration layer_calibration_from_json(const std::string& text, const std::string& source);

// Atomic replace (storage/durable_file.h): after a crash the file is the old one or the new one.
// Creates the parent directory. Throws storage::StoreError / StorageFull.
void write_layer_calibration(const std::filesystem::path& path, const LayerCalibration& c);
LayerCalibration read_layer_calibration(const std::filesystem::path& path);
// The same, and the file must be for this model: same fingerprint and `num_layers` cosines.
LayerCalibration read_layer_calibration(const std::filesystem::path& path,
                                        const std::string& expected_fingerprint,
                                        int64_t num_layers);

// <profile>/calibration/<fingerprint>.json (characters outside [A-Za-z0-9._-] become '_').
std::filesystem::path layer_calibration_path(const std::filesystem::path& profile_dir,
                                             const std::string& fingerprint);
// The stored calibration of a model, or nullopt when it was never calibrated; a file that is
// there but unusable throws LayerCalibrationError.
std::optional<LayerCalibration> find_layer_calibration(const std::filesystem::path& profile_dir,
                                                       const std::string& fingerprint,
                                                       int64_t num_layers);

}  // namespace engram
