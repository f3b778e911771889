// engram-cli bench pages: what bringing memory units from the pinned pool into the working set
// costs, against the physical limit and against not overlapping. Units of random KV for the
// model's shape wait in pinned pages; one forward of --fresh tokens then attends to all of them:
//   resident   the units' KV already in the working set (compute only);
//   serial     every layer copied first (load_now), then the forward;
//   pipelined  UnitLoadingKvSource: layer l+1 copied on the copy stream while layer l computes;
//   copy       the per-page copies alone, and one contiguous pinned->device copy of the same
//              bytes (the PCIe limit this machine gives).
// Never asserts a time (style rule 10); prints JSON.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "app/cli/bench_report.h"
#include "app/cli/commands.h"
#include "app/cli/model_loading.h"
#include "core/kv/kv_unit_pool.h"
#include "core/runtime/decoder.h"
#include "gpu/device_info.h"
#include "gpu/device_timeline.h"

namespace engram::cli {
namespace {

double median_ms(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median wall time of `body` over `repeat` runs after one warm-up, device work included.
double time_ms(at::Device device, int64_t repeat, const std::function<void()>& body) {
  std::vector<double> ms;
  for (int64_t r = -1; r < repeat; ++r) {
    gpu::synchronize(device);
    const auto t0 = std::chrono::steady_clock::now();
    body();
    gpu::synchronize(device);
    const double t =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 0) ms.push_back(t);
  }
  return median_ms(ms);
}

}  // namespace

int run_bench_pages(int argc, char** argv) {
  auto with_value = model_flags_with_value();
  with_value.insert({"units", "unit-tokens", "page-tokens", "fresh", "repeat", "json"});
  const Args args(argc, argv, 2, with_value, {});
  if (args.positional() != std::vector<std::string>{"pages"})
    throw UsageError("bench pages takes no other positional arguments");
  const int64_t n_units = args.integer("units", 16);
  const int64_t unit_tokens = args.integer("unit-tokens", 256);
  const int64_t page_tokens = args.integer("page-tokens", 64);
  const int64_t fresh = args.integer("fresh", 16);
  const int64_t repeat = std::max<int64_t>(1, args.integer("repeat", 5));
  LoadedModel model = load_model_from_args(args, /*allow_shape=*/true);
  const Decoder& decoder = *model.decoder;
  const ModelConfig& c = decoder.config();
  const at::Device device = decoder.device();
  const KvCacheShape shape{c.num_layers, c.num_kv_heads, c.head_dim};
  const int64_t total = n_units * unit_tokens;
  if (total + fresh > c.max_positions) throw UsageError("units and fresh tokens exceed positions");

  KvPagePoolOptions options;
  options.page_tokens = page_tokens;
  options.pinned_pages = n_units * ((unit_tokens + page_tokens - 1) / page_tokens);
  KvPagePool pages(shape, decoder.dtype(), device, options);
  KvUnitPool units(pages);
  std::vector<int64_t> ids;
  for (int64_t u = 0; u < n_units; ++u) {
    std::vector<int64_t> positions(unit_tokens);
    for (int64_t i = 0; i < unit_tokens; ++i)
      positions[i] = u * unit_tokens + i;
    const at::Tensor kv =
        at::randn({shape.layers, 2, shape.kv_heads, unit_tokens, shape.head_dim}) * 0.5;
    ids.push_back(units.add("segment", u * unit_tokens, kv, positions, PageTier::kPinned));
  }
  std::vector<int64_t> tokens(fresh), fresh_positions(fresh);
  for (int64_t i = 0; i < fresh; ++i) {
    tokens[i] = 3 + (i * 7919) % (c.vocab_size - 3);
    fresh_positions[i] = total + i;
  }
  ForwardRequest req;
  req.tokens = {tokens};
  req.positions = {fresh_positions};
  const int64_t capacity = total + fresh + page_tokens;
  KvCache cache(shape, 1, capacity, decoder.dtype(), device);
  gpu::DeviceTimeline timeline(device);

  auto forward = [&](KvSource& source) { (void)decoder.forward(req, source, timeline, nullptr); };
  // Every run starts from an empty working set of the same capacity (no allocation inside).
  const double pipelined = time_ms(device, repeat, [&] {
    cache.truncate(0, 0);
    UnitLoadingKvSource source(units, ids, cache);
    forward(source);
  });
  const double serial = time_ms(device, repeat, [&] {
    cache.truncate(0, 0);
    UnitLoadingKvSource source(units, ids, cache);
    source.load_now(timeline);
    forward(source);
  });
  int64_t bytes = 0;
  const double copy = time_ms(device, repeat, [&] {
    cache.truncate(0, 0);
    UnitLoadingKvSource source(units, ids, cache);
    source.load_now(timeline);
    bytes = source.copied_bytes();
  });
  // Resident: the units were loaded by the last run; each forward appends `fresh` tokens.
  const double resident = time_ms(device, repeat, [&] {
    cache.truncate(0, total);
    CacheKvSource source(cache);
    forward(source);
  });
  const at::Tensor host = gpu::empty_pinned({bytes / 2}, at::kShort);
  host.fill_(1);
  at::Tensor dst = at::empty({bytes / 2}, at::TensorOptions().dtype(at::kShort).device(device));
  const double raw = time_ms(device, repeat, [&] { dst.copy_(host, /*non_blocking=*/true); });

  const auto gbps = [&](double ms) { return ms > 0 ? bytes / (ms * 1e6) : 0.0; };
  const gpu::DeviceInfo info = gpu::device_info(device);
  nlohmann::json out;
  out["benchmark"] = "engram-pages";
  out["model"] = model.name;
  out["device"] = info.name;
  out["torch"] = info.torch_version;
  out["dtype"] = c10::toString(decoder.dtype());
  out["units"] = n_units;
  out["unit_tokens"] = unit_tokens;
  out["page_tokens"] = page_tokens;
  out["fresh_tokens"] = fresh;
  out["kv_bytes"] = bytes;
  out["resident_ms"] = resident;
  out["serial_ms"] = serial;
  out["pipelined_ms"] = pipelined;
  out["copy_ms"] = copy;
  out["raw_copy_ms"] = raw;
  out["copy_gbps"] = gbps(copy);
  out["raw_copy_gbps"] = gbps(raw);
  out["copy_fraction_of_raw"] = copy > 0 ? raw / copy : 0.0;
  // 1.0: the copies are hidden entirely behind compute (pipelined == max(copy, compute)).
  const double ideal = std::max(copy, resident);
  out["overlap_efficiency"] = pipelined > 0 ? ideal / pipelined : 0.0;
  out["speedup_vs_serial"] = pipelined > 0 ? serial / pipelined : 0.0;
  emit_bench_report(out, args);
  return 0;
}

}  // namespace engram::cli
