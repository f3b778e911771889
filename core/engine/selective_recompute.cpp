#include "core/engine/selective_recompute.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/runtime/attention.h"
#include "core/runtime/decoder_layer.h"
#include "core/trace/trace_recorder.h"
#include "gpu/device_timeline.h"
#include "gpu/rope_rotate.h"
#include "gpu/unit_attention_mass.h"

namespace engram {
namespace {

// The policy's rows, sorted; its contract checked against the rows of the layer before (none
// for layer 0).
std::vector<int64_t> checked_rows(const RecomputePolicy& policy, std::vector<int64_t> rows,
                                  const std::vector<int64_t>* before, const AssembledLayout& layout,
                                  int64_t layer) {
  const std::string who =
      "recompute policy '" + policy.name() + "' at layer " + std::to_string(layer) + ": ";
  std::sort(rows.begin(), rows.end());
  if (std::adjacent_find(rows.begin(), rows.end()) != rows.end())
    throw std::logic_error(who + "a row is listed twice");
  if (!rows.empty() && (rows.front() < 0 || rows.back() >= layout.total))
    throw std::logic_error(who + "a row is outside the prompt's " + std::to_string(layout.total) +
                           " rows");
  for (int64_t q : layout.query_rows())
    if (!std::binary_search(rows.begin(), rows.end(), q))
      throw std::logic_error(who + "query row " + std::to_string(q) + " is not recomputed");
  if (before && !std::includes(before->begin(), before->end(), rows.begin(), rows.end()))
    throw std::logic_error(who +
                           "the recompute set grew (a row dropped earlier has no hidden "
                           "state to recompute from)");
  return rows;
}

// The rows whose attention is measured when a policy asks for `last` rows per unit: each unit's
// last `last` recomputed rows and every query row; with their indices into `rows` (ascending).
std::pair<std::vector<int64_t>, std::vector<int64_t>> probe_rows_of(
    const std::vector<int64_t>& rows, const AssembledLayout& layout, int64_t last) {
  std::pair<std::vector<int64_t>, std::vector<int64_t>> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t unit = layout.unit_of_row(rows[i]);
    if (unit < 0) {
      if (rows[i] < layout.query_begin) continue;  // a prefix row is not a source
    } else {
      // Count this unit's rows after row i: keep row i when fewer than `last` follow.
      int64_t after = 0;
      for (size_t j = i + 1; j < rows.size() && after < last; ++j) {
        if (layout.unit_of_row(rows[j]) != unit) break;  // sorted rows: a unit's are contiguous
        ++after;
      }
      if (after >= last) continue;
    }
    out.first.push_back(rows[i]);
    out.second.push_back(static_cast<int64_t>(i));
  }
  return out;
}

// What a layer needs of its recomputed rows that depends on the rows alone, rebuilt only when
// the policy changes them: the layers with few rows are bound by the host's enqueueing, and a
// policy keeps the same rows over several layers.
struct RowTensors {
  at::Tensor idx, cos, sin, positions;
  std::vector<QueryRun> runs;
  int64_t probe_last = 0;  // the probes below are for this many rows per unit
  std::pair<std::vector<int64_t>, std::vector<int64_t>> probes;  // measured rows, their indices
  at::Tensor probe_at, probe_positions, probe_mask;  // the mask only with a sliding window

  RowTensors(const std::vector<int64_t>& rows, const at::Tensor& all_cos, const at::Tensor& all_sin,
             const at::Tensor& all_positions, std::optional<int64_t> window)
      : idx(gpu::upload_indices(rows, all_positions.device())),
        cos(all_cos.index_select(2, idx)),
        sin(all_sin.index_select(2, idx)),
        positions(all_positions.index_select(1, idx)),
        runs(query_runs(rows)) {}

  // The rows' mask [1, 1, R, n], built the first time a masked path needs it (attention per run
  // of rows reads none).
  const at::Tensor& mask(const at::Tensor& all_positions, std::optional<int64_t> window) {
    if (!mask_.defined()) mask_ = position_mask(positions, all_positions, window);
    return mask_;
  }

  void probe(const std::vector<int64_t>& rows, const AssembledLayout& layout, int64_t last,
             const at::Tensor& all_positions, std::optional<int64_t> window) {
    if (probe_last == last) return;
    probe_last = last;
    probes = probe_rows_of(rows, layout, last);
    probe_at = gpu::upload_indices(probes.second, all_positions.device());
    probe_positions = positions.index_select(1, probe_at);
    if (window) probe_mask = position_mask(probe_positions, all_positions, window);
  }

 private:
  at::Tensor mask_;
};

}  // namespace

AssembledLayout AssembledPrompt::layout() const {
  if (!prefix) throw std::invalid_argument("assembled prompt: no prefix");
  std::vector<int64_t> lengths;
  for (const UnitKv* u : units) {
    if (!u) throw std::invalid_argument("assembled prompt: a unit is missing");
    lengths.push_back(static_cast<int64_t>(u->tokens.size()));
  }
  return assemble_layout(static_cast<int64_t>(prefix->tokens.size()), lengths,
                         static_cast<int64_t>(query.size()));
}

std::vector<int64_t> AssembledPrompt::tokens() const {
  std::vector<int64_t> t = prefix->tokens;
  for (const UnitKv* u : units)
    t.insert(t.end(), u->tokens.begin(), u->tokens.end());
  t.insert(t.end(), query.begin(), query.end());
  return t;
}

at::Tensor unit_of_column(const AssembledLayout& layout, at::Device device) {
  // The prefix and the query go to one extra column, dropped after the sum.
  const auto u_count = static_cast<int64_t>(layout.units.size());
  std::vector<int64_t> owner(static_cast<size_t>(layout.total), u_count);
  for (int64_t u = 0; u < u_count; ++u)
    std::fill(owner.begin() + layout.units[u].begin, owner.begin() + layout.units[u].end, u);
  return gpu::upload_indices(owner, device);
}

at::Tensor unit_mass_of(const at::Tensor& probs, const at::Tensor& unit_of_column, int64_t units) {
  at::Tensor mass = at::zeros({probs.size(0), units + 1}, probs.options().dtype(at::kFloat));
  mass.index_add_(1, unit_of_column, probs.to(at::kFloat));
  return mass.narrow(1, 0, units);
}

UnitAttention unit_attention_of(const at::Tensor& probs, const std::vector<int64_t>& rows,
                                const AssembledLayout& layout) {
  return unit_attention_from_mass(unit_mass_of(probs, unit_of_column(layout, probs.device()),
                                               static_cast<int64_t>(layout.units.size())),
                                  rows, layout);
}

UnitAttention unit_attention_from_mass(const at::Tensor& mass_rows,
                                       const std::vector<int64_t>& rows,
                                       const AssembledLayout& layout) {
  UnitAttention a;
  if (layout.units.empty()) return a;
  const at::Tensor mass = mass_rows.to(at::kDouble).cpu().contiguous();  // [R, U]
  const auto* m = mass.data_ptr<double>();
  const auto u_count = static_cast<int64_t>(layout.units.size());

  // Sources: the query (group 0) and each unit with rows at this layer.
  std::vector<int64_t> position_of_unit(static_cast<size_t>(u_count), -1);
  std::vector<std::vector<double>> sums;  // [group][unit]
  std::vector<int64_t> counts;
  sums.emplace_back(static_cast<size_t>(u_count), 0.0);
  counts.push_back(0);
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t owner = layout.unit_of_row(rows[i]);
    size_t group = 0;
    if (owner >= 0) {
      if (position_of_unit[owner] < 0) {
        position_of_unit[owner] = static_cast<int64_t>(a.units.size());
        a.units.push_back(owner);
        sums.emplace_back(static_cast<size_t>(u_count), 0.0);
        counts.push_back(0);
      }
      group = static_cast<size_t>(position_of_unit[owner]) + 1;
    } else if (rows[i] < layout.query_begin) {
      continue;  // a prefix row (full recompute): not a source
    }
    for (int64_t u = 0; u < u_count; ++u)
      sums[group][u] += m[static_cast<int64_t>(i) * u_count + u];
    ++counts[group];
  }
  const size_t n = a.units.size();
  auto mean = [&](size_t group, int64_t unit) {
    return counts[group] ? sums[group][unit] / static_cast<double>(counts[group]) : 0.0;
  };
  a.from_query.resize(n);
  a.from_unit.assign(n, std::vector<double>(n, 0.0));
  for (size_t b = 0; b < n; ++b) {
    a.from_query[b] = mean(0, a.units[b]);
    for (size_t s = 0; s < n; ++s)
      a.from_unit[s][b] = mean(s + 1, a.units[b]);
  }
  return a;
}

SelectivePrefill selective_prefill(const Decoder& decoder, const AssembledPrompt& prompt,
                                   RecomputePolicy& policy, KvCache& out,
                                   const PooledUnits* pooled) {
  const ModelConfig& c = decoder.config();
  const DecoderWeights& w = decoder.weights();
  SelectivePrefill result;
  result.layout = prompt.layout();
  const AssembledLayout& layout = result.layout;
  const int64_t n = layout.total, layers = c.num_layers;
  if (prompt.prefix->first_position != 0)
    throw std::invalid_argument("assembled prompt: the prefix must start at position 0");
  if (n > c.max_positions)
    throw std::invalid_argument("the assembled prompt has " + std::to_string(n) +
                                " tokens; the model's maximum is " +
                                std::to_string(c.max_positions) + " positions");
  if (out.batch() != 1 || out.lengths()[0] != 0)
    throw std::invalid_argument("selective prefill: the output cache must be one empty row");
  const std::vector<int64_t> tokens = prompt.tokens();
  for (int64_t t : tokens)
    if (t < 0 || t >= c.vocab_size)
      throw std::out_of_range("token id " + std::to_string(t) + " outside the vocabulary of " +
                              std::to_string(c.vocab_size));

  const at::Device device = decoder.device();
  const auto opts = at::TensorOptions().dtype(decoder.dtype()).device(device);
  // Cached KV of every row, [layers, kv_heads, n, head_dim]; query rows stay zero (always
  // fresh). Layer i's slice is read by layer i only, so the fresh rows are written into it.
  at::Tensor cached_k = at::zeros({layers, c.num_kv_heads, n, c.head_dim}, opts);
  at::Tensor cached_v = at::zeros_like(cached_k);
  if (layout.prefix_tokens > 0) {
    cached_k.narrow(2, 0, layout.prefix_tokens).copy_(prompt.prefix->keys);
    cached_v.narrow(2, 0, layout.prefix_tokens).copy_(prompt.prefix->values);
  }
  const at::Tensor inv_freq = decoder.rope().inverse_frequencies();
  // What the policy reads is copied to the host behind the attention that measures it; the host
  // waits for that copy alone while the layer's MLP runs (KEEP §4.2: the propagation overlaps
  // the MLP), so the device is not drained at every layer.
  std::optional<gpu::DeviceTimeline> own_timeline;
  gpu::DeviceTimeline& timeline = pooled ? *pooled->timeline : own_timeline.emplace(device);
  std::optional<UnitLayerLoader> loader;
  if (pooled) {
    loader.emplace(*pooled, layout, cached_k, cached_v, inv_freq);
  } else {
    for (const UnitSpan& span : layout.units) {
      const UnitKv& unit = *prompt.units[static_cast<size_t>(span.unit)];
      if (unit.keys.size(2) != span.tokens())
        throw std::invalid_argument("memory unit '" + unit.key + "': its KV holds " +
                                    std::to_string(unit.keys.size(2)) + " tokens, expected " +
                                    std::to_string(span.tokens()));
      at::Tensor keys = unit.keys.to(opts).contiguous().clone();
      if (span.begin != unit.first_position) {
        const at::Tensor deltas =
            at::full({span.tokens()}, span.begin - unit.first_position, opts.dtype(at::kLong));
        gpu::rope_rotate_(keys, deltas, inv_freq);
      }
      cached_k.narrow(2, span.begin, span.tokens()).copy_(keys);
      cached_v.narrow(2, span.begin, span.tokens()).copy_(unit.values);
    }
  }

  std::vector<int64_t> all_positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    all_positions[static_cast<size_t>(i)] = i;
  const at::Tensor positions = gpu::upload_indices(all_positions, device).view({1, n});
  const std::pair<at::Tensor, at::Tensor> cos_sin =
      decoder.rope().cos_sin(positions, decoder.dtype());
  const at::Tensor& cos = cos_sin.first;
  const at::Tensor& sin = cos_sin.second;
  const at::Tensor ids = gpu::upload_indices(tokens, device);

  std::vector<int64_t> rows =
      checked_rows(policy, policy.first_rows(layout, layers), nullptr, layout, 0);
  std::optional<RowTensors> rt;
  rt.emplace(rows, cos, sin, positions, c.sliding_window);
  at::Tensor h = w.embed.index_select(0, ids.index_select(0, rt->idx))
                     .view({1, static_cast<int64_t>(rows.size()), c.hidden_size});
  out.ensure_room(n);
  const std::vector<bool> every_unit(layout.units.size(), true);
  // Built once: a host tensor copied inside a layer would make the host wait for the stream.
  const at::Tensor column_unit = unit_of_column(layout, device);
  std::vector<int64_t> begins, ends;
  for (const UnitSpan& span : layout.units) {
    begins.push_back(span.begin);
    ends.push_back(span.end);
  }
  const at::Tensor unit_begin = gpu::upload_indices(begins, device),
                   unit_end = gpu::upload_indices(ends, device);

  for (int64_t li = 0; li < layers; ++li) {
    const bool last = li == layers - 1;
    const RecomputeNeeds needs = last ? RecomputeNeeds{} : policy.needs(li);
    if (loader) {
      const bool next_deviation =
          !last && li + 1 < layers - 1 && policy.needs(li + 1).key_deviation;
      loader->before_layer(li, dropped_units(layout, rows),
                           needs.key_deviation ? every_unit : std::vector<bool>{},
                           next_deviation ? every_unit : std::vector<bool>{});
    }
    const int64_t layer_start = timeline.mark(gpu::Lane::kCompute);
    const auto enqueue_start = std::chrono::steady_clock::now();
    LayerEvidence evidence;
    evidence.layer = li;
    evidence.rows = rows;
    at::Tensor layer_k = cached_k[li].unsqueeze(0), layer_v = cached_v[li].unsqueeze(0);
    at::Tensor mass, deviation;  // in host memory once `evidence_mark` is reached
    int64_t evidence_mark = -1;
    std::vector<int64_t> measured;  // the rows whose attention is measured
    // Every row recomputed (ratio 1.0, full recompute) keeps the torch expressions of the norms,
    // bit-equal to the plain prefill. Partly recomputed rows are approximate by design and their
    // layers launch-bound: they take the norms' kernel (last-bit differences). RoPE is one kernel
    // bit-equal to its expression either way (gpu/rope_apply.h).
    const bool exact = static_cast<int64_t>(rows.size()) == n;
    const auto attend = [&](const LayerQkv& p) -> at::Tensor {
      const at::Tensor& idx = rt->idx;
      const at::Tensor q = Rope::apply(p.q, rt->cos, rt->sin);
      const at::Tensor k = Rope::apply(p.k, rt->cos, rt->sin);
      if (needs.key_deviation) {
        const at::Tensor before = cached_k[li].index_select(1, idx).to(at::kFloat);  // [H, R, d]
        deviation =
            timeline.copy_to_host((k[0].to(at::kFloat) - before).pow(2).sum(at::IntArrayRef{0, 2}));
        evidence_mark = timeline.mark(gpu::Lane::kCompute);
      }
      layer_k.index_copy_(2, idx, k);
      layer_v.index_copy_(2, idx, p.v);
      const AttendKv kv{layer_k, layer_v, positions, exact};
      // The same keys with the rows' mask, kept across layers, for the masked paths.
      const auto masked = [&] {
        AttendKv m = kv;
        m.mask = rt->mask(positions, c.sliding_window);
        return m;
      };
      const at::Tensor& row_positions = rt->positions;
      // The output of every row: a call per run of contiguous rows (whole units: KEEP's
      // granularity), one masked call over rows scattered in many runs (CacheBlend's tokens).
      const auto attend_rows = [&]() -> at::Tensor {
        if (kv.dense_causal) return attention(q, kv, row_positions, c.sliding_window);
        if (rt->runs.size() > kMaxQueryRuns)
          return attention(q, masked(), row_positions, c.sliding_window);
        return attention_by_runs(q, kv, row_positions, rt->runs, c.sliding_window);
      };
      if (!needs.unit_attention) return attend_rows();
      if (needs.probe_rows > 0) {  // the output for every row, probabilities for a few
        rt->probe(rows, layout, needs.probe_rows, positions, c.sliding_window);
        measured = rt->probes.first;
        const auto probe = [&] {
          // Scores in the compute dtype, as the all-rows path (attention_with_probabilities) and
          // the eager attention compute them (tensor cores), then the softmax and each unit's
          // mass in one kernel (gpu/unit_attention_mass.h). A sliding window takes the mask.
          const at::Tensor q_probe = q.index_select(2, rt->probe_at);
          if (c.sliding_window) {
            AttendKv probe_kv = kv;
            probe_kv.mask = rt->probe_mask;
            const at::Tensor probs = attention_probabilities(
                q_probe, probe_kv, rt->probe_positions, c.sliding_window, /*f32_scores=*/false);
            mass = unit_mass_of(probs[0].mean(0), column_unit,
                                static_cast<int64_t>(layout.units.size()));
          } else {
            mass = gpu::unit_attention_mass(attention_scores(q_probe, layer_k)[0],
                                            rt->probe_positions.reshape({-1}), unit_begin, unit_end,
                                            1.0 / std::sqrt(static_cast<double>(c.head_dim)));
          }
          mass = timeline.copy_to_host(mass);
          evidence_mark = timeline.mark(gpu::Lane::kCompute);
        };
        // Runs of whole units: the probes run on a high-priority side stream beside the runs'
        // attention, and the host's wait for the evidence does not include that attention.
        if (!kv.dense_causal && rt->runs.size() <= kMaxQueryRuns)
          return attention_by_runs(q, kv, row_positions, rt->runs, c.sliding_window, probe);
        probe();
        return attend_rows();
      }
      measured = rows;
      AttentionWithProbabilities a =
          attention_with_probabilities(q, masked(), row_positions, c.sliding_window);
      mass = timeline.copy_to_host(
          unit_mass_of(a.mean_probs[0], column_unit, static_cast<int64_t>(layout.units.size())));
      evidence_mark = timeline.mark(gpu::Lane::kCompute);
      return a.out;
    };
    LayerMarks marks{layer_start};
    h = run_decoder_layer(
        c, w.layers[li], h,
        [&](const LayerQkv& p) {
          marks.qkv = timeline.mark(gpu::Lane::kCompute);
          at::Tensor o = attend(p);
          marks.evidence = evidence_mark;
          marks.attention = timeline.mark(gpu::Lane::kCompute);
          return o;
        },
        /*fused_norms=*/!exact);
    out.write(li, layer_k, layer_v, positions);
    const int64_t layer_end = marks.end = timeline.mark(gpu::Lane::kCompute);
    result.host_enqueue_layer_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - enqueue_start)
            .count());
    result.host_enqueue_ms += result.host_enqueue_layer_ms.back();
    if (pooled) result.layer_marks.push_back(marks);
    if (pooled && pooled->trace)
      pooled->trace->add(li, TraceLane::kCompute, "layer", layer_start, layer_end,
                         static_cast<int64_t>(rows.size()), 0);
    result.plan.rows.push_back(rows);
    if (last) break;
    // The host needs the layer's evidence, not its end: the MLP enqueued after it keeps the
    // device busy while the host decides the next rows (and balanced loading fills the copy
    // lane until then).
    const int64_t host_needs = evidence_mark >= 0 ? evidence_mark : layer_end;
    const auto wait_start = std::chrono::steady_clock::now();
    if (loader) loader->while_computing(li, host_needs);
    if (evidence_mark >= 0) timeline.wait(evidence_mark);
    result.host_wait_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wait_start)
            .count();
    if (mass.defined()) evidence.unit_attention = unit_attention_from_mass(mass, measured, layout);
    if (deviation.defined()) {
      const at::Tensor d = deviation.to(at::kDouble).cpu().contiguous();
      evidence.key_deviation.assign(d.data_ptr<double>(), d.data_ptr<double>() + rows.size());
      for (size_t i = 0; i < rows.size(); ++i)
        if (rows[i] >= layout.query_begin) evidence.key_deviation[i] = 0;  // nothing cached
    }

    std::vector<ImportanceHop> hops;
    std::vector<int64_t> next = checked_rows(
        policy, policy.next_rows(layout, layers, evidence, &hops), &rows, layout, li + 1);
    result.plan.hops.push_back(std::move(hops));
    result.plan.attention.push_back(std::move(evidence.unit_attention));
    if (next != rows) {
      std::vector<int64_t> keep;  // positions of next's rows in rows
      for (size_t i = 0, j = 0; i < rows.size() && j < next.size(); ++i)
        if (rows[i] == next[j]) {
          keep.push_back(static_cast<int64_t>(i));
          ++j;
        }
      h = h.index_select(1, gpu::upload_indices(keep, device));
      rows = std::move(next);
      rt.emplace(rows, cos, sin, positions, c.sliding_window);
    }
  }
  out.commit(n, {all_positions});
  result.logits = decoder_logits(c, w, h.narrow(1, h.size(1) - 1, 1)).reshape({-1});
  if (loader) result.loads = loader->stats();
  return result;
}

LayerProfile layer_profile(gpu::DeviceTimeline& timeline, const SelectivePrefill& prefill) {
  LayerProfile p;
  if (prefill.layer_marks.empty()) return p;
  const std::vector<double> us = timeline.resolve_us();
  const auto at = [&](int64_t mark) { return us.at(static_cast<size_t>(mark)) / 1e3; };
  for (size_t i = 0; i < prefill.layer_marks.size(); ++i) {
    const LayerMarks& m = prefill.layer_marks[i];
    p.layers_ms += at(m.end) - at(m.start);
    p.qkv_ms += at(m.qkv) - at(m.start);
    p.attention_ms += at(m.attention) - at(m.qkv);
    if (m.evidence >= 0) p.evidence_ms += at(m.evidence) - at(m.qkv);
    p.mlp_ms += at(m.end) - at(m.attention);
    if (i > 0) p.between_ms += at(m.start) - at(prefill.layer_marks[i - 1].end);
  }
  return p;
}

}  // namespace engram
