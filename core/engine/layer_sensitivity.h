// Layer sensitivity to block prefill (EpiCache §3.2, Eq. 8–9): the text is forwarded twice, once
// with the full causal mask and once with the authors' block mask (apple/ml-epicache,
// data/layer_scores/layer_profile.py), and σ_l is the mean over tokens and KV heads of the cosine
// between the two passes' keys (after RoPE) at layer l. Each pass feeds every layer the previous
// layer's output of that same pass, so a layer's deviation includes what earlier layers lost.
//
// The block mask: tokens go in blocks of `block`; a query sees the first `sink` tokens, the
// `window` tokens before its block and its block up to itself. The authors use sink 128, blocks
// of 4096 and half a block of overlap; Engram's defaults keep those ratios at its own block of
// 512 (sink 16, window 256). Both passes run block by block through the same KvSource, so when
// nothing is cut (sink + window reaches every block's start) the two are bit-identical and σ = 1.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/engine/loaded_model.h"
#include "core/policies/layer_budget.h"

namespace engram {

struct BlockMask {
  int64_t sink = 16;
  int64_t window = 256;
  int64_t block = 512;
};

// Forward blocks done of `total` over both passes (for a progress line).
using CalibrationProgressFn = std::function<void(int64_t done, int64_t total)>;

// The keys (after RoPE) of every layer, [1, Hkv, N, d] each, when `tokens` go through the model
// in blocks of mask.block with each block's queries seeing the sink, the window before the block
// and the block (`restricted`), or everything before them (the full causal mask).
std::vector<at::Tensor> block_pass_keys(const Decoder& decoder, const std::vector<int64_t>& tokens,
                                        const BlockMask& mask, bool restricted,
                                        const std::function<void()>& block_done = {});

// σ_l for every layer. Throws std::invalid_argument for no tokens or a bad mask and
// std::out_of_range (from the decoder) for a text longer than the model's positions.
std::vector<double> measure_key_cosine(const Decoder& decoder, const std::vector<int64_t>& tokens,
                                       const BlockMask& mask,
                                       const CalibrationProgressFn& progress = {});

// The calibration record of `model` (fingerprint, name, σ, the mask, today's date); `text` and
// `alpha` are for the caller to set if not the defaults. block 0: twice the window (the
// authors' half-block overlap).
LayerCalibration calibrate_layers(const LoadedModel& model, const std::vector<int64_t>& tokens,
                                  int64_t sink, int64_t window, int64_t block = 0,
                                  const CalibrationProgressFn& progress = {});

}  // namespace engram
