// engram-cli bench prefill|decode: tokens per second of the runtime on a real folder or a named
// shape with random weights. Prints a line and writes JSON; never asserts a time (style rule
// 10). For decode it also reports the HBM roofline: bandwidth / bytes read per token.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "app/cli/bench_report.h"
#include "app/cli/commands.h"
#include "app/cli/model_loading.h"
#include "app/cli/torch_profile.h"
#include "core/engine/generator.h"
#include "core/trace/trace_file_writer.h"
#include "core/trace/trace_recorder.h"
#include "gpu/device_info.h"
#include "gpu/device_timeline.h"

namespace engram::cli {
namespace {

std::vector<int64_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(3, vocab - 1);
  std::vector<int64_t> ids(n);
  for (auto& id : ids)
    id = dist(rng);
  return ids;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int run_bench(int argc, char** argv) {
  if (argc > 2 && std::string(argv[2]) == "restore") return run_bench_restore(argc, argv);
  if (argc > 2 && std::string(argv[2]) == "oxygen") return run_bench_oxygen(argc, argv);
  if (argc > 2 && std::string(argv[2]) == "pages") return run_bench_pages(argc, argv);
  if (argc > 2 && std::string(argv[2]) == "keep") return run_bench_keep(argc, argv);
  auto with_value = model_flags_with_value();
  with_value.insert({"tokens", "decode-tokens", "warmup-decode-tokens", "repeat", "json", "trace",
                     "hbm-gbps", "chunk", "profile"});
  with_value.merge(policy_flags());
  const Args args(argc, argv, 2, with_value, {"per-layer"});
  (void)policy_choice_from_args(args, "full");  // a typo fails before the model loads
  const auto pos = args.positional();
  if (pos.size() != 1 || (pos[0] != "prefill" && pos[0] != "decode")) {
    throw UsageError(
        "bench needs a mode: prefill, decode, restore, pages, oxygen, keep or epicache");
  }
  const std::string mode = pos[0];
  const int64_t tokens = args.integer("tokens", 4096);
  const int64_t decode_tokens = args.integer("decode-tokens", 256);
  const int64_t repeat = std::max<int64_t>(1, args.integer("repeat", 3));
  // The warm-up run's decode length: a 16K-token output need not be decoded twice to warm the
  // kernels and the allocator (its prompt, and so its allocations, are the same).
  const int64_t warmup_decode_tokens =
      std::clamp<int64_t>(args.integer("warmup-decode-tokens", decode_tokens), 1, decode_tokens);
  const double hbm_gbps = args.real("hbm-gbps", 3000.0);  // H100 measured (shared/device)
  LoadedModel model = load_model_from_args(args, /*allow_shape=*/true);
  const Decoder& decoder = *model.decoder;
  const ModelConfig& c = decoder.config();
  const std::vector<int64_t> prompt = random_ids(tokens, c.vocab_size, 7);
  const KvCacheShape kv_shape{c.num_layers, c.num_kv_heads, c.head_dim};
  const int64_t chunk = args.integer("chunk", tokens);
  const auto policy = policy_from_args(args, "full", model, std::min<int64_t>(chunk, 512));
  const int64_t block = policy->budget() > 0 ? std::min<int64_t>(chunk, 512) : chunk;

  std::unique_ptr<TraceFileWriter> trace_file;
  if (args.has("trace")) trace_file = std::make_unique<TraceFileWriter>(args.str("trace", ""));

  std::vector<double> rates;
  std::vector<double> ttfts;
  std::vector<double> requests;  // first token + decode, ms
  int64_t peak_kv = 0;
  RetrievalStats retrieval;
  double last_decode_ms = 0, last_decoded = 0;
  int64_t decode_peak_bytes = -1, decode_start_bytes = -1;
  int64_t restore_layers = 0, restore_bytes = 0;
  double restore_ms = 0;
  for (int64_t run = -1; run < repeat; ++run) {  // run -1 warms up kernels and the allocator
    const bool last = run == repeat - 1;
    // Full KV preallocates the whole request (as before policies); a bounded policy gets its
    // fixed working set of budget + one block.
    KvWorkingSet ws(kv_shape,
                    policy->budget() > 0 ? policy->budget() + block
                                         : tokens + (mode == "decode" ? decode_tokens : 0),
                    decoder.dtype(), decoder.device(), c.max_positions);
    const auto run_policy = policy->clone();
    // --profile PATH: a Kineto trace of the last run, its prefill and (decode) every decode step's
    // kernels, replayed graphs too (that run's time is then not clean).
    std::unique_ptr<TorchProfile> profile;
    if (last && args.has("profile"))
      profile = std::make_unique<TorchProfile>(args.str("profile", ""));
    if (mode == "prefill") {
      gpu::DeviceTimeline timeline(decoder.device());
      std::unique_ptr<TraceRecorder> trace;
      if (last && trace_file) {
        trace = std::make_unique<TraceRecorder>(timeline, trace_file.get(), next_request_id());
      }
      gpu::synchronize(decoder.device());
      const auto t0 = std::chrono::steady_clock::now();
      const at::Tensor logits =
          prefill(decoder, *run_policy, ws, prompt, block, timeline, trace.get());
      (void)logits.argmax().item<int64_t>();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      profile.reset();
      if (trace) trace->flush();
      if (run >= 0) rates.push_back(tokens / s);
    } else {
      GenerationOptions options;
      options.max_new_tokens = run < 0 ? warmup_decode_tokens : decode_tokens;
      options.stop_at_eos = false;
      options.prefill_chunk = block;
      options.observer = last ? trace_file.get() : nullptr;
      options.trace = last && trace_file;
      // --per-layer: the eager path every retrieval policy decodes on, for full KV beside them.
      options.recorded_step = !args.has("per-layer");
      options.measure_decode_memory = true;
      const GenerationResult r = generate(decoder, *run_policy, ws, {}, prompt, options, {});
      profile.reset();
      peak_kv = r.peak_kv_tokens;
      retrieval = r.retrieval;
      last_decode_ms = r.decode_ms;
      last_decoded = static_cast<double>(r.tokens.size()) - 1;
      decode_peak_bytes = r.decode_peak_device_bytes;
      decode_start_bytes = r.decode_start_device_bytes;
      // What the next turn pays first when the working set waited in host memory (offload):
      // its layers' copy back to the device (last run).
      if (last && ws.cache().host_layers() > 0) {
        restore_layers = ws.cache().host_layers();
        gpu::synchronize(decoder.device());
        const auto t0 = std::chrono::steady_clock::now();
        ws.cache().restore_layers();
        gpu::synchronize(decoder.device());
        restore_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        restore_bytes = restore_layers * 2 * ws.cache().capacity() * c.num_kv_heads * c.head_dim *
                        static_cast<int64_t>(at::elementSize(decoder.dtype()));
      }
      if (run >= 0) {
        rates.push_back(r.decode_tokens_per_s);
        ttfts.push_back(r.time_to_first_token_ms);
        requests.push_back(r.time_to_first_token_ms + r.decode_ms);
      }
    }
  }

  const gpu::DeviceInfo info = gpu::device_info(decoder.device());
  nlohmann::json out;
  out["benchmark"] = "engram-" + mode;
  out["model"] = model.name;
  out["policy"] = policy->spec();
  out["kv_budget"] = policy->budget();
  out["peak_kv_tokens"] = peak_kv;
  out["device"] = info.name;
  out["torch"] = info.torch_version;
  out["dtype"] = c10::toString(decoder.dtype());
  out["prompt_tokens"] = tokens;
  out["runs"] = repeat;
  out["tokens_per_s_runs"] = rates;
  out["tokens_per_s"] = median(rates);
  if (mode == "decode") {
    out["decode_tokens"] = decode_tokens;
    out["time_to_first_token_ms"] = median(ttfts);
    out["request_ms"] = median(requests);  // the prompt and every token of the reply
    // Bytes read per decoded token: every weight but the embedding table (one row is read),
    // plus K and V of the average context length.
    const DecoderWeights& w = decoder.weights();
    int64_t weight_bytes = w.bytes();
    if (!w.lm_head.is_same(w.embed)) weight_bytes -= w.embed.numel() * w.embed.element_size();
    const double avg_context = tokens + decode_tokens / 2.0;
    const double kv_bytes = 2.0 * c.num_layers * c.num_kv_heads * c.head_dim * avg_context *
                            static_cast<double>(at::elementSize(decoder.dtype()));
    const double bytes_per_token = static_cast<double>(weight_bytes) + kv_bytes;
    const double roofline = hbm_gbps * 1e9 / bytes_per_token;
    out["bytes_per_token"] = bytes_per_token;
    out["hbm_gbps"] = hbm_gbps;
    out["roofline_tokens_per_s"] = roofline;
    out["fraction_of_roofline"] = median(rates) / roofline;
    out["per_layer"] = args.has("per-layer");
    out["per_token_latency_ms"] = median(rates) > 0 ? 1000.0 / median(rates) : 0;
    // GPU KV: what attention holds on the device (full KV: the whole context at the end).
    const double full_kv_bytes = 2.0 * c.num_layers * c.num_kv_heads * c.head_dim *
                                 (tokens + decode_tokens) *
                                 static_cast<double>(at::elementSize(decoder.dtype()));
    // What the device really held while decoding (the allocator's peak of the last run: weights,
    // the working set and what attention reads); -1 off CUDA.
    out["decode_peak_device_bytes"] = decode_peak_bytes;
    out["decode_start_device_bytes"] = decode_start_bytes;
    out["weight_bytes"] = w.bytes();
    if (decode_peak_bytes >= 0)
      out["decode_peak_above_weights_bytes"] = decode_peak_bytes - w.bytes();
    if (retrieval.steps > 0) {
      out["retrievals_per_token"] = retrieval.retrievals_per_token();
      // Each layer's (a full layer's 0): where the boundary rule spends its retrievals.
      nlohmann::json by_layer = nlohmann::json::array();
      for (const int64_t n : retrieval.layer_retrievals)
        by_layer.push_back(retrieval.steps ? double(n) / double(retrieval.steps) : 0.0);
      out["retrievals_per_token_by_layer"] = std::move(by_layer);
      out["loaded_rows_per_token"] =
          static_cast<double>(retrieval.loaded_rows) / static_cast<double>(retrieval.steps);
      out["device_kv_bytes"] = retrieval.device_kv_bytes;
      out["offloaded_units"] = retrieval.offloaded_units;
      out["pool_bytes"] = retrieval.pool_bytes;
      // The source is built after the first token (k-means of every layer's prompt keys, unless
      // made beside the prefill: overlap), so the per-token latency above carries it; this one
      // is decoding alone (last run).
      out["retrieval_build_ms"] = retrieval.build_ms;
      out["units_beside_prefill_layers"] = retrieval.units_beside_prefill;
      out["beside_prefill_worker_ms"] = retrieval.beside_prefill_ms;
      out["beside_prefill_wait_ms"] = retrieval.beside_prefill_wait_ms;
      // The copy of the layers that waited in host memory back to the device (the next turn's
      // first work), and its rate.
      out["restore_layers"] = restore_layers;
      out["restore_ms"] = restore_ms;
      out["restore_bytes"] = restore_bytes;
      out["restore_gbps"] =
          restore_ms > 0 ? static_cast<double>(restore_bytes) / restore_ms / 1e6 : 0.0;
      out["kmeans_rounds_per_layer"] =
          retrieval.retrieval_layers
              ? static_cast<double>(retrieval.kmeans_rounds) / retrieval.retrieval_layers
              : 0.0;
      out["per_token_latency_ms_without_build"] =
          last_decoded > 0
              ? (last_decode_ms - retrieval.build_ms - retrieval.beside_prefill_wait_ms) /
                    last_decoded
              : 0.0;
      out["recorded_steps"] = retrieval.recorded_steps;
      out["recorded_host_ms_per_token"] =
          retrieval.recorded_steps ? retrieval.host_ms / double(retrieval.recorded_steps) : 0.0;
      out["recorded_wait_ms_per_token"] =
          retrieval.recorded_steps ? retrieval.wait_ms / double(retrieval.recorded_steps) : 0.0;
      out["device_kv_fraction_of_full"] = retrieval.device_kv_bytes / full_kv_bytes;
    } else {
      out["device_kv_bytes"] = full_kv_bytes;
    }
  }
  emit_bench_report(out, args);
  return 0;
}

}  // namespace engram::cli
