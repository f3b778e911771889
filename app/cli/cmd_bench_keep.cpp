// engram-cli bench keep: time to first token of an embodied planning step whose memory is KV
// (issue 16; KEEP §6), per method, on a real folder or a named shape with random weights. The
// memory holds --segments segments of random length after a shared --prefix-tokens prefix, and a
// --query-tokens instruction follows. Each step --changed segments have changed since the last
// one (the agent's state, objects it touched): their KV is invalid and is recomputed as part of
// the step. Methods (all over the same runtime, KV waiting in pinned host memory):
//   full-recompute  one plain prefill of the whole prompt (the text-memory baseline);
//   prefix-cache    the prefix's KV kept on the device, the rest prefilled;
//   full-reuse      every unit's cached KV, only the query computed;
//   cacheblend      memory cut into --chunk-tokens chunks (a changed segment invalidates its
//                   chunk); layers 0-1 recompute everything, then 15 % of the tokens by key
//                   deviation; next-layer loading;
//   keep            static/dynamic units (runs of unchanged segments one group, each changing
//                   segment alone); multi-hop importance propagation; layer-balanced loading;
//   keep-naive / keep-serial (w/o layer-balanced loading), keep-one-hop (w/o multi-hop),
//   keep-blocks (w/o static/dynamic: the fixed chunks as units), keep-mass (units scored by
//   the attention summed over their tokens instead of its average); --keep-options (e.g.
//   probe=8) apply to all of them; keep-all-rows is plain `keep` whatever --keep-options say.
// TTFT = recomputing the invalid units + the prefill to the first token's logits; by default
// (--invalidation overlapped) the invalid units are recomputed on a side stream beside the
// prefill, which reads each of their layers once it is written (serial: before it). Also the copy
// throughput of the unit loader against one contiguous pinned->device copy of the same bytes.
// Never asserts a time (style rule 10); prints JSON.
#include <ATen/Parallel.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "app/cli/bench_report.h"
#include "app/cli/commands.h"
#include "app/cli/model_loading.h"
#include "app/cli/torch_profile.h"
#include "core/engine/selective_recompute.h"
#include "core/kv/cache_kv_source.h"
#include "core/kv/kv_unit_pool.h"
#include "gpu/device_info.h"
#include "gpu/device_timeline.h"
#include "gpu/page_gather.h"
#include "gpu/stream_fork.h"

namespace engram::cli {
namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The calling thread's context switches so far (voluntary: it blocked; involuntary: the
// scheduler preempted it): a run whose host enqueue is slow for want of a core shows the latter.
std::pair<int64_t, int64_t> thread_context_switches() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return {u.ru_nvcsw, u.ru_nivcsw};
}

// The calling thread's time on a CPU and waiting for one (ns, Linux schedstat), and the
// machine's stolen time (ticks, /proc/stat: a virtual machine's host ran something else): a slow
// run with neither is slow in its own code.
struct HostClock {
  int64_t run_ns = 0, queued_ns = 0, steal_ticks = 0;
};
HostClock host_clock() {
  HostClock c;
  std::ifstream sched("/proc/thread-self/schedstat");
  sched >> c.run_ns >> c.queued_ns;
  std::ifstream stat("/proc/stat");
  std::string cpu;
  int64_t field = 0;
  stat >> cpu;
  for (int i = 0; i < 8 && stat >> field; ++i)
    if (i == 7) c.steal_ticks = field;
  return c;
}

// The process's threads now (Linux), 0 where /proc is not there.
int64_t process_threads() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("Threads:", 0) == 0) return std::stoll(line.substr(8));
  return 0;
}

double elapsed_ms(at::Device device, const std::function<void()>& body) {
  gpu::synchronize(device);
  const auto t0 = std::chrono::steady_clock::now();
  body();
  gpu::synchronize(device);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<int64_t> counts_of(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    out.push_back(std::stoll(item));
  if (out.empty()) throw UsageError("--segments: no count given");
  return out;
}

// A memory unit of the step: the segments it holds, contiguous in the prompt.
struct StepUnit {
  std::vector<int64_t> segments;
  std::vector<int64_t> tokens;
  bool invalid = false;  // holds a changed segment: recomputed this step
};

struct Memory {
  std::vector<std::vector<int64_t>> segments;
  std::vector<bool> dynamic;
  std::vector<bool> changed;
};

// Segment i is dynamic when i % period == period - 1; `changed` of the dynamic ones, evenly
// spread, changed since the last step.
Memory make_memory(int64_t n, int64_t lo, int64_t hi, double static_share, int64_t changed,
                   int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> length(lo, hi), id(3, vocab - 1);
  Memory m;
  const auto period =
      std::max<int64_t>(1, static_cast<int64_t>(1.0 / std::max(1e-9, 1.0 - static_share) + 0.5));
  std::vector<int64_t> dynamic_ids;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> t(static_cast<size_t>(length(rng)));
    for (auto& x : t)
      x = id(rng);
    m.segments.push_back(t);
    m.dynamic.push_back(i % period == period - 1);
    if (m.dynamic.back()) dynamic_ids.push_back(i);
  }
  m.changed.assign(static_cast<size_t>(n), false);
  const auto d = static_cast<int64_t>(dynamic_ids.size());
  for (int64_t k = 0; k < std::min(changed, d); ++k)
    m.changed[static_cast<size_t>(dynamic_ids[static_cast<size_t>(k * d / std::min(changed, d))])] =
        true;
  return m;
}

// KEEP's units: each run of static segments one group, each dynamic segment alone.
std::vector<StepUnit> static_dynamic_units(const Memory& m) {
  std::vector<StepUnit> units;
  for (size_t i = 0; i < m.segments.size(); ++i) {
    const bool open_group =
        !units.empty() && !m.dynamic[i] && !m.dynamic[units.back().segments.back()];
    if (!open_group) units.emplace_back();
    StepUnit& u = units.back();
    u.segments.push_back(static_cast<int64_t>(i));
    u.tokens.insert(u.tokens.end(), m.segments[i].begin(), m.segments[i].end());
    u.invalid = u.invalid || m.changed[i];
  }
  return units;
}

// Fixed chunks of `chunk` tokens over the memory text; a chunk holding a changed token is invalid.
std::vector<StepUnit> chunk_units(const Memory& m, int64_t chunk) {
  std::vector<StepUnit> units;
  for (size_t i = 0; i < m.segments.size(); ++i)
    for (int64_t t : m.segments[i]) {
      if (units.empty() || static_cast<int64_t>(units.back().tokens.size()) == chunk)
        units.emplace_back();
      units.back().tokens.push_back(t);
      if (units.back().segments.empty() || units.back().segments.back() != static_cast<int64_t>(i))
        units.back().segments.push_back(static_cast<int64_t>(i));
      units.back().invalid = units.back().invalid || m.changed[i];
    }
  return units;
}

KvCacheShape shape_of(const ModelConfig& c) {
  return {c.num_layers, c.num_kv_heads, c.head_dim};
}

// The units' KV as it waits before the step: valid units in pinned pages (computed after the
// prefix once, earlier), invalid ones recomputed during the step.
struct PooledStep {
  std::vector<StepUnit> units;
  std::vector<UnitKv> kv;         // every unit's KV (tokens for the prompt; KV of valid ones)
  std::vector<int64_t> pool_ids;  // -1 for invalid units until the step recomputes them
};

PooledStep pool_step(const Decoder& d, const PrefixKv& prefix, std::vector<StepUnit> units,
                     KvUnitPool& pool) {
  PooledStep s;
  s.units = std::move(units);
  for (size_t i = 0; i < s.units.size(); ++i) {
    const MemoryUnit mu{"unit_" + std::to_string(i), "segment", 1, s.units[i].tokens};
    UnitKv kv = compute_unit_kv(d, prefix, mu);
    std::vector<int64_t> positions;
    for (size_t t = 0; t < kv.tokens.size(); ++t)
      positions.push_back(kv.first_position + static_cast<int64_t>(t));
    s.pool_ids.push_back(s.units[i].invalid
                             ? -1
                             : pool.add("segment", -1, at::stack({kv.keys, kv.values}, 1),
                                        positions, PageTier::kPinned));
    kv.keys = kv.keys.cpu();  // the pool holds it; kept on the host for --check only
    kv.values = kv.values.cpu();
    s.kv.push_back(std::move(kv));
  }
  return s;
}

std::vector<int64_t> positions_of(const UnitKv& kv) {
  std::vector<int64_t> positions;
  for (size_t k = 0; k < kv.tokens.size(); ++k)
    positions.push_back(kv.first_position + static_cast<int64_t>(k));
  return positions;
}

std::vector<MemoryUnit> invalid_units(const PooledStep& step) {
  std::vector<MemoryUnit> changed;
  for (size_t i = 0; i < step.units.size(); ++i)
    if (step.units[i].invalid)
      changed.push_back({"unit_" + std::to_string(i), "segment", 2, step.units[i].tokens});
  return changed;
}

// The step's invalid units recomputed after the prefix, in one forward.
std::vector<UnitKv> recompute_invalid(const Decoder& d, const PrefixKv& prefix,
                                      const PooledStep& step) {
  return compute_unit_kvs(d, prefix, invalid_units(step));
}

// The step's invalid units recomputed on a side stream while the prefill that reads them runs on
// the compute stream: each layer's KV is written into the units' device pages (reserved here)
// as soon as it is computed and marked, and the loader's copies of that layer wait for the mark
// (PooledUnits::device_layer_ready). The forward of the changed units and the selective prefill
// then share the GPU instead of running one after the other. Fills `pooled`'s ids of the invalid
// units and `fresh`; returns the side stream's fork (join it after the prefill) and sets
// `inv_end` to the mark after the units' last layer.
std::unique_ptr<gpu::StreamFork> recompute_invalid_beside(const Decoder& d, const PrefixKv& prefix,
                                                          const PooledStep& step, KvUnitPool& pool,
                                                          PooledUnits& pooled,
                                                          std::vector<int64_t>& fresh,
                                                          std::vector<at::Tensor>& tables,
                                                          int64_t& inv_end) {
  const std::vector<MemoryUnit> changed = invalid_units(step);
  for (size_t i = 0, k = 0; i < step.units.size(); ++i) {
    if (!step.units[i].invalid) continue;
    std::vector<int64_t> positions;
    for (size_t t = 0; t < changed[k].tokens.size(); ++t)
      positions.push_back(prefix.end_position() + static_cast<int64_t>(t));
    pooled.ids[i] = pool.reserve("segment", -1, std::move(positions), PageTier::kDevice);
    fresh.push_back(pooled.ids[i]);
    ++k;
  }
  gpu::DeviceTimeline& tl = *pooled.timeline;
  pooled.device_layer_ready.assign(static_cast<size_t>(d.config().num_layers), -1);
  auto side = std::make_unique<gpu::StreamFork>(d.device());
  side->run([&] {
    at::Tensor table;
    (void)compute_unit_kvs(
        d, prefix, changed,
        [&](int64_t layer, const at::Tensor& keys, const at::Tensor& values,
            const std::vector<int64_t>& first_slots) {
          if (!table.defined()) {  // one page table for every layer, uploaded once
            PageTableRows rows;
            for (size_t u = 0; u < fresh.size(); ++u)
              rows.add_unit(pool.unit(fresh[u]), first_slots[u], PageTier::kDevice,
                            pool.pages().page_tokens());
            const at::Tensor host = rows.host_tensor(d.device().is_cuda());
            table = d.device().is_cuda() ? host.to(d.device(), /*non_blocking=*/true) : host;
            tables = {host, table};  // alive until the step has run
          }
          at::Tensor slab = pool.pages().slab(PageTier::kDevice);
          gpu::scatter_pages(slab, layer, keys, values, table[0], table[1], table[2]);
          pooled.device_layer_ready[static_cast<size_t>(layer)] = tl.mark(gpu::Lane::kCompute);
        });
    inv_end = tl.mark(gpu::Lane::kCompute);
  });
  return side;
}

}  // namespace

int run_bench_keep(int argc, char** argv) {
  auto with_value = model_flags_with_value();
  with_value.insert({"segments", "segment-tokens-min", "segment-tokens-max", "prefix-tokens",
                     "query-tokens", "changed", "static-share", "chunk-tokens", "page-tokens",
                     "methods", "repeat", "seed", "json", "keep-options", "profile",
                     "profile-method", "invalidation"});
  const Args args(argc, argv, 2, with_value, {"check"});
  // --check: every runner method's logits against the same prefill with the units' KV put in
  // place (no pool, no copy stream), and the runner's full recompute from the pool against the
  // plain prefill: the CUDA rows of the exactness tests.
  const bool check = args.has("check");
  if (args.positional() != std::vector<std::string>{"keep"})
    throw UsageError("bench keep takes no other positional arguments");
  const std::vector<int64_t> segment_counts = counts_of(args.str("segments", "10,20,30,40"));
  const int64_t lo = args.integer("segment-tokens-min", 64);
  const int64_t hi = args.integer("segment-tokens-max", 128);
  const int64_t prefix_tokens = args.integer("prefix-tokens", 128);
  const int64_t query_tokens = args.integer("query-tokens", 32);
  const int64_t changed = args.integer("changed", 4);
  const double static_share = args.real("static-share", 0.75);
  const int64_t chunk = args.integer("chunk-tokens", 256);
  const int64_t page_tokens = args.integer("page-tokens", 16);
  const int64_t repeat = std::max<int64_t>(1, args.integer("repeat", 5));
  const auto seed = static_cast<uint64_t>(args.integer("seed", 1));
  std::vector<std::string> methods;
  {
    std::stringstream in(args.str("methods",
                                  "full-recompute,prefix-cache,full-reuse,cacheblend,keep,"
                                  "keep-naive,keep-serial,keep-one-hop,keep-blocks,keep-mass"));
    for (std::string m; std::getline(in, m, ',');)
      methods.push_back(m);
  }
  // Options of every keep method (e.g. probe=8), the ablations included.
  const std::string keep_options = args.str("keep-options", "");
  // --profile PREFIX: a Kineto trace of one run of --profile-method (default keep) per segment
  // count, PREFIX-<segments>-<method>.json (CUDA builds).
  const std::string profile_path = args.str("profile", "");
  // overlapped: the changed units are recomputed on a side stream beside the prefill (each layer
  // read once written); serial: before it (the figures until 2026-11-26).
  const std::string invalidation = args.str("invalidation", "overlapped");
  if (invalidation != "overlapped" && invalidation != "serial")
    throw UsageError("--invalidation: overlapped or serial, not '" + invalidation + "'");
  const bool overlap_invalidation = invalidation == "overlapped";
  const std::string profile_method = args.str("profile-method", "keep");
  const auto keep_spec = [&](const std::string& more) {
    std::string o = keep_options;
    if (!more.empty()) o += (o.empty() ? "" : ",") + more;
    return o.empty() ? std::string("keep") : "keep:" + o;
  };
  if (lo <= 0 || hi < lo || prefix_tokens <= 0 || query_tokens <= 0 || chunk <= 0)
    throw UsageError("bench keep: lengths must be positive (min <= max)");

  LoadedModel model = load_model_from_args(args, /*allow_shape=*/true);
  const Decoder& d = *model.decoder;
  const ModelConfig& c = d.config();
  const at::Device device = d.device();
  gpu::DeviceTimeline timeline(device);

  nlohmann::json out;
  out["benchmark"] = "engram-keep-ttft";
  out["model"] = model.name;
  out["device"] = gpu::device_info(device).name;
  out["dtype"] = c10::toString(d.dtype());
  out["settings"] = {{"segment_tokens", {lo, hi}},
                     {"prefix_tokens", prefix_tokens},
                     {"query_tokens", query_tokens},
                     {"changed", changed},
                     {"static_share", static_share},
                     {"chunk_tokens", chunk},
                     {"page_tokens", page_tokens},
                     {"repeat", repeat},
                     {"seed", seed},
                     {"invalidation", invalidation}};
  // The host the runs share: the engine's CPU threads and the process's threads (the device
  // runtime's own among them).
  out["host"] = {{"torch_threads", at::get_num_threads()},
                 {"process_threads_at_start", process_threads()}};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> id(3, c.vocab_size - 1);
  std::vector<int64_t> prefix_ids(static_cast<size_t>(prefix_tokens)),
      query(static_cast<size_t>(query_tokens));
  for (auto& x : prefix_ids)
    x = id(rng);
  for (auto& x : query)
    x = id(rng);
  const PrefixKv prefix = compute_prefix_kv(d, prefix_ids);

  for (int64_t n : segment_counts) {
    const Memory memory = make_memory(n, lo, hi, static_share, changed, c.vocab_size, seed + n);
    int64_t memory_tokens = 0;
    for (const auto& s : memory.segments)
      memory_tokens += static_cast<int64_t>(s.size());
    const int64_t total = prefix_tokens + memory_tokens + query_tokens;
    if (total > c.max_positions) throw UsageError("the prompt exceeds the model's positions");

    KvPagePoolOptions options;
    options.page_tokens = page_tokens;
    options.pinned_pages = 2 * (memory_tokens / page_tokens + 2 * (n + memory_tokens / chunk + 2));
    options.device_pages = options.pinned_pages;
    KvPagePool pages(shape_of(c), d.dtype(), device, options);
    KvUnitPool pool(pages);
    PooledStep grouped = pool_step(d, prefix, static_dynamic_units(memory), pool);
    PooledStep chunks = pool_step(d, prefix, chunk_units(memory, chunk), pool);

    nlohmann::json row;
    row["segments"] = n;
    row["prompt_tokens"] = total;
    row["units_static_dynamic"] = grouped.units.size();
    row["units_chunks"] = chunks.units.size();
    const std::vector<int64_t> all_ids = [&] {
      std::vector<int64_t> ids = prefix_ids;
      for (const auto& s : memory.segments)
        ids.insert(ids.end(), s.begin(), s.end());
      ids.insert(ids.end(), query.begin(), query.end());
      return ids;
    }();
    std::vector<int64_t> all_positions(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i)
      all_positions[static_cast<size_t>(i)] = i;
    KvCache cache(shape_of(c), 1, total, d.dtype(), device);

    for (const std::string& method : methods) {
      nlohmann::json m;
      std::vector<double> ttft, invalidation_ms;
      // Per run, where the host went: its enqueue and wait time and the main thread's context
      // switches (the spread between runs follows the host, docs/keep.md).
      std::vector<double> enqueue_runs, wait_runs;
      std::vector<int64_t> blocked_runs, preempted_runs;
      std::vector<double> on_cpu_runs, queued_runs, steal_runs;  // ms, ms, ticks
      std::vector<std::vector<double>> enqueue_layer_runs;
      SelectivePrefill last;
      int64_t invalid_tokens = 0;
      if (method == "full-recompute" || method == "prefix-cache") {
        const bool reuse_prefix = method == "prefix-cache";
        if (reuse_prefix) {  // the prefix's KV computed once, kept on the device
          cache.truncate(0, 0);
          ForwardRequest req;
          req.tokens = {prefix_ids};
          req.positions = {
              std::vector<int64_t>(all_positions.begin(), all_positions.begin() + prefix_tokens)};
          CacheKvSource source(cache);
          (void)d.forward(req, source, timeline, nullptr);
        }
        ForwardRequest req;
        const int64_t from = reuse_prefix ? prefix_tokens : 0;
        req.tokens = {std::vector<int64_t>(all_ids.begin() + from, all_ids.end())};
        req.positions = {std::vector<int64_t>(all_positions.begin() + from, all_positions.end())};
        // With --profile, a second warm-up run is traced (as for the runner's methods).
        const bool profiled = !profile_path.empty() && method == profile_method;
        for (int64_t r = profiled ? -2 : -1; r < repeat; ++r) {
          cache.truncate(0, from);
          gpu::DeviceTimeline run_timeline(device);
          std::optional<TorchProfile> profile;
          if (profiled && r == -1)
            profile.emplace(profile_path + "-" + std::to_string(n) + "-" + method + ".json");
          const double t = elapsed_ms(device, [&] {
            CacheKvSource source(cache);
            (void)d.forward(req, source, run_timeline, nullptr);
          });
          profile.reset();
          if (r >= 0) ttft.push_back(t);
        }
        m["recompute_ratio"] = 1.0;
        if (check && !reuse_prefix) {
          cache.truncate(0, 0);
          CacheKvSource source(cache);
          const at::Tensor plain = d.forward(req, source, timeline, nullptr).logits.reshape({-1});
          AssembledPrompt prompt;
          prompt.prefix = &prefix;
          for (const UnitKv& u : grouped.kv)
            prompt.units.push_back(&u);
          prompt.query = query;
          PooledUnits pooled{&pool, grouped.pool_ids, LayerLoading::kBalanced, &timeline, nullptr};
          std::vector<int64_t> fresh;
          for (size_t i = 0; i < pooled.ids.size(); ++i)
            if (pooled.ids[i] < 0) {
              const UnitKv& kv = grouped.kv[i];
              std::vector<int64_t> positions;
              for (size_t k = 0; k < kv.tokens.size(); ++k)
                positions.push_back(kv.first_position + static_cast<int64_t>(k));
              pooled.ids[i] = pool.add("segment", -1, at::stack({kv.keys, kv.values}, 1), positions,
                                       PageTier::kPinned);
              fresh.push_back(pooled.ids[i]);
            }
          auto policy = make_recompute_policy("full-recompute");
          cache.truncate(0, 0);
          const SelectivePrefill r = selective_prefill(d, prompt, *policy, cache, &pooled);
          for (int64_t id : fresh)
            pool.remove(id);
          m["check_runner_vs_plain_max_diff"] =
              (r.logits.to(at::kDouble) - plain.to(at::kDouble)).abs().max().item<double>();
          m["check_runner_vs_plain_same_argmax"] =
              r.logits.argmax().item<int64_t>() == plain.argmax().item<int64_t>();
          // The step's changed units packed in one forward against each unit's plain prefill.
          const std::vector<UnitKv> packed = recompute_invalid(d, prefix, grouped);
          double packed_diff = 0;
          for (const UnitKv& kv : packed) {
            const UnitKv alone = compute_unit_kv(d, prefix, {kv.key, "segment", 2, kv.tokens});
            for (const auto& [a, b] : {std::pair{kv.keys, alone.keys}, {kv.values, alone.values}})
              packed_diff = std::max(
                  packed_diff, (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>());
          }
          m["check_changed_units_packed_vs_alone_max_diff"] = packed_diff;
        }
      } else {
        std::string spec = keep_spec("");
        LayerLoading loading = LayerLoading::kBalanced;
        bool use_chunks = false;
        if (method == "full-reuse") {
          spec = "full-reuse";
        } else if (method == "cacheblend") {
          spec = "cacheblend";
          loading = LayerLoading::kNaive;
          use_chunks = true;
        } else if (method == "keep-naive") {
          loading = LayerLoading::kNaive;
        } else if (method == "keep-serial") {
          loading = LayerLoading::kSerial;
        } else if (method == "keep-one-hop") {
          spec = keep_spec("iterations=1");
        } else if (method == "keep-mass") {
          spec = keep_spec("score=mass");
        } else if (method == "keep-all-rows") {
          spec = "keep";
        } else if (method == "keep-blocks") {
          use_chunks = true;
        } else if (method != "keep") {
          throw UsageError("bench keep: unknown method '" + method + "'");
        }
        PooledStep& step = use_chunks ? chunks : grouped;
        AssembledPrompt prompt;
        prompt.prefix = &prefix;
        for (const UnitKv& u : step.kv)
          prompt.units.push_back(&u);
        prompt.query = query;
        PooledUnits pooled;
        pooled.pool = &pool;
        pooled.timeline = &timeline;
        pooled.loading = loading;
        std::unique_ptr<gpu::DeviceTimeline> run_timeline;
        // With --profile, a second warm-up run (allocators warm, not counted) is traced.
        const bool profiled = !profile_path.empty() && method == profile_method;
        for (int64_t r = profiled ? -2 : -1; r < repeat; ++r) {
          std::vector<int64_t> fresh;            // this step's recomputed units, on the device tier
          std::vector<at::Tensor> fresh_tables;  // their page table, alive until the step's end
          double inv = 0;
          run_timeline = std::make_unique<gpu::DeviceTimeline>(device);
          pooled.timeline = run_timeline.get();
          std::optional<TorchProfile> profile;
          if (profiled && r == -1)
            profile.emplace(profile_path + "-" + std::to_string(n) + "-" + method + ".json");
          int64_t inv_begin = 0, inv_end = 0;
          const std::pair<int64_t, int64_t> switches_before = thread_context_switches();
          const HostClock clock_before = host_clock();
          const double t = elapsed_ms(device, [&] {
            // The invalidation's device time from marks: a host wait here would leave the
            // device idle while the host sets up the prefill.
            inv_begin = run_timeline->mark(gpu::Lane::kCompute);
            pooled.ids = step.pool_ids;
            pooled.device_layer_ready.clear();
            invalid_tokens = 0;
            for (const MemoryUnit& u : invalid_units(step))
              invalid_tokens += static_cast<int64_t>(u.tokens.size());
            std::unique_ptr<gpu::StreamFork> side;
            if (overlap_invalidation) {
              side = recompute_invalid_beside(d, prefix, step, pool, pooled, fresh, fresh_tables,
                                              inv_end);
            } else {
              const std::vector<UnitKv> kvs = recompute_invalid(d, prefix, step);
              for (size_t i = 0, k = 0; i < step.units.size(); ++i) {
                if (!step.units[i].invalid) continue;
                pooled.ids[i] = pool.add("segment", -1, at::stack({kvs[k].keys, kvs[k].values}, 1),
                                         positions_of(kvs[k]), PageTier::kDevice);
                fresh.push_back(pooled.ids[i]);
                ++k;
              }
              inv_end = run_timeline->mark(gpu::Lane::kCompute);
            }
            auto policy = make_recompute_policy(spec);
            cache.truncate(0, 0);
            last = selective_prefill(d, prompt, *policy, cache, &pooled);
            if (side) side->join();
          });
          profile.reset();
          const std::pair<int64_t, int64_t> switches_after = thread_context_switches();
          const HostClock clock_after = host_clock();
          {
            const std::vector<double> us = run_timeline->resolve_us();
            inv = (us[static_cast<size_t>(inv_end)] - us[static_cast<size_t>(inv_begin)]) / 1000;
          }
          for (int64_t id : fresh)
            pool.remove(id);
          if (r >= 0) {
            ttft.push_back(t);
            invalidation_ms.push_back(inv);
            enqueue_runs.push_back(last.host_enqueue_ms);
            wait_runs.push_back(last.host_wait_ms);
            blocked_runs.push_back(switches_after.first - switches_before.first);
            preempted_runs.push_back(switches_after.second - switches_before.second);
            on_cpu_runs.push_back(1e-6 *
                                  static_cast<double>(clock_after.run_ns - clock_before.run_ns));
            queued_runs.push_back(
                1e-6 * static_cast<double>(clock_after.queued_ns - clock_before.queued_ns));
            steal_runs.push_back(
                static_cast<double>(clock_after.steal_ticks - clock_before.steal_ticks));
            enqueue_layer_runs.push_back(last.host_enqueue_layer_ms);
          }
        }
        const double busy_ms = copy_busy_ms(*run_timeline, last.loads);
        if (check) {  // the same step with every unit's KV (the fresh ones too) put in place
          std::vector<UnitKv> in_place = step.kv;
          const std::vector<UnitKv> kvs = recompute_invalid(d, prefix, step);
          for (size_t i = 0, k = 0; i < in_place.size(); ++i)
            if (step.units[i].invalid) {
              in_place[i].keys = kvs[k].keys;
              in_place[i].values = kvs[k++].values;
            }
          AssembledPrompt p = prompt;
          p.units.clear();
          for (const UnitKv& u : in_place)
            p.units.push_back(&u);
          auto policy = make_recompute_policy(spec);
          cache.truncate(0, 0);
          const SelectivePrefill r = selective_prefill(d, p, *policy, cache);
          m["check_pooled_vs_in_place_max_diff"] =
              (r.logits.to(at::kDouble) - last.logits.to(at::kDouble)).abs().max().item<double>();
          m["check_same_plan"] = r.plan.rows == last.plan.rows;
        }
        m["spec"] = spec;
        m["loading"] = layer_loading_name(loading);
        m["units"] = step.units.size();
        m["invalid_tokens"] = invalid_tokens;
        m["invalidation_ms"] = median_of(invalidation_ms);
        m["recompute_ratio"] = last.plan.mean_recompute_ratio(last.layout);
        m["copied_bytes"] = last.loads.bytes;
        m["copy_jobs"] = last.loads.jobs;
        m["prefetched_jobs"] = last.loads.prefetched;
        m["waited_jobs"] = last.loads.waited;
        m["copy_busy_ms"] = busy_ms;
        m["host_wait_ms"] = last.host_wait_ms;
        const LayerProfile profile = layer_profile(*run_timeline, last);
        m["layers_ms"] = profile.layers_ms;
        m["between_layers_ms"] = profile.between_ms;
        m["layer_parts_ms"] = {{"qkv", profile.qkv_ms},
                               {"attention", profile.attention_ms},
                               {"attention_to_evidence", profile.evidence_ms},
                               {"mlp", profile.mlp_ms}};
        m["host_enqueue_ms"] = last.host_enqueue_ms;
        m["host_enqueue_runs_ms"] = enqueue_runs;
        m["host_wait_runs_ms"] = wait_runs;
        m["voluntary_switches_runs"] = blocked_runs;
        m["involuntary_switches_runs"] = preempted_runs;
        m["thread_on_cpu_runs_ms"] = on_cpu_runs;
        m["thread_queued_runs_ms"] = queued_runs;
        m["steal_ticks_runs"] = steal_runs;
        m["host_enqueue_layer_runs_ms"] = enqueue_layer_runs;
      }
      m["ttft_ms"] = median_of(ttft);
      m["ttft_runs_ms"] = ttft;
      row["methods"][method] = m;
      std::printf("segments %lld %-15s ttft %8.2f ms\n", static_cast<long long>(n), method.c_str(),
                  median_of(ttft));
      std::fflush(stdout);
    }

    // Copy throughput: every layer of every static/dynamic unit through the loader's gather
    // (balanced, everything dropped: all issued at once), against one contiguous
    // pinned->device copy of the same bytes.
    {
      std::vector<int64_t> ids = grouped.pool_ids;
      std::vector<int64_t> extra;
      for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] < 0) {
          const UnitKv kv = compute_unit_kv(
              d, prefix, {"unit_" + std::to_string(i), "segment", 2, grouped.units[i].tokens});
          std::vector<int64_t> positions;
          for (size_t k = 0; k < kv.tokens.size(); ++k)
            positions.push_back(kv.first_position + static_cast<int64_t>(k));
          ids[i] = pool.add("segment", -1, at::stack({kv.keys, kv.values}, 1), positions,
                            PageTier::kPinned);
          extra.push_back(ids[i]);
        }
      AssembledPrompt prompt;
      prompt.prefix = &prefix;
      for (const UnitKv& u : grouped.kv)
        prompt.units.push_back(&u);
      prompt.query = query;
      const AssembledLayout layout = prompt.layout();
      std::vector<double> span_ms;
      int64_t bytes = 0;
      for (int64_t r = -1; r < repeat; ++r) {
        at::Tensor k = at::empty({c.num_layers, c.num_kv_heads, layout.total, c.head_dim},
                                 at::TensorOptions().dtype(d.dtype()).device(device));
        at::Tensor v = at::empty_like(k);
        gpu::DeviceTimeline tl(device);
        PooledUnits pooled{&pool, ids, LayerLoading::kBalanced, &tl, nullptr};
        const double t = elapsed_ms(device, [&] {
          UnitLayerLoader loader(pooled, layout, k, v, d.rope().inverse_frequencies());
          loader.before_layer(0, std::vector<bool>(ids.size(), true), {}, {});
          loader.while_computing(0, tl.mark(gpu::Lane::kCompute));
          bytes = loader.stats().bytes;
          (void)copy_busy_ms(tl, loader.stats());  // waits for the copy lane
        });
        if (r >= 0) span_ms.push_back(t);
      }
      const at::Tensor host = gpu::empty_pinned({bytes / 2}, at::kShort);
      host.fill_(1);
      at::Tensor dst = at::empty({bytes / 2}, at::TensorOptions().dtype(at::kShort).device(device));
      std::vector<double> raw_ms;
      for (int64_t r = -1; r < repeat; ++r) {
        const double t = elapsed_ms(device, [&] { dst.copy_(host, /*non_blocking=*/true); });
        if (r >= 0) raw_ms.push_back(t);
      }
      for (int64_t id : extra)
        pool.remove(id);
      const double loader_ms = median_of(span_ms), raw = median_of(raw_ms);
      row["copy"] = {{"bytes", bytes},
                     {"loader_ms", loader_ms},
                     {"raw_ms", raw},
                     {"loader_gbps", loader_ms > 0 ? bytes / (loader_ms * 1e6) : 0.0},
                     {"raw_gbps", raw > 0 ? bytes / (raw * 1e6) : 0.0},
                     {"fraction_of_raw", loader_ms > 0 ? raw / loader_ms : 0.0}};
      std::printf("segments %lld copy: loader %.2f ms, raw %.2f ms (%.0f %% of raw)\n",
                  static_cast<long long>(n), loader_ms, raw,
                  loader_ms > 0 ? 100.0 * raw / loader_ms : 0.0);
    }
    out["rows"].push_back(row);
  }
  out["host"]["process_threads_at_end"] = process_threads();
  emit_bench_report(out, args);
  return 0;
}

}  // namespace engram::cli
