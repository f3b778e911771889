#include "core/kv/retrieval_kv_source.h"

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

#include "core/trace/trace_recorder.h"
#include "gpu/budgeted_select.h"
#include "gpu/decode_attention.h"
#include "gpu/device_info.h"
#include "gpu/device_timeline.h"
#include "gpu/page_gather.h"
#include "gpu/rope_kv_write.h"
#include "gpu/row_gather.h"

namespace engram {
namespace {

// Rows per pool page: a budget's gather reads single rows, so the page size only sets how
// finely the pool grows and how many table entries a segment's write takes.
constexpr int64_t kPoolPageRows = 64;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Units are scored, and their capacity grows, a block at a time (see count_scored_units). Each
// growth makes the recorded step again (tens of ms); a block of the index is 30 layers x 8 KV
// heads x 128 x 2 bytes x 256 = 15 MiB on the 8B shape. At 1,024 units the unused part of the
// last block was 3 % of full KV's bytes at 500 in / 16K out.
constexpr int64_t kUnitBlock = 256;

int64_t round_up(int64_t n, int64_t block) {
  return (n + block - 1) / block * block;
}

int64_t bytes(const at::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

}  // namespace

at::Tensor retrieval_prompt_keys(const at::Tensor& layer_keys, int64_t sinks) {
  const int64_t n = layer_keys.size(1), s = std::min(sinks, n);
  return layer_keys.narrow(1, s, n - s);
}

RetrievalKvSource::RetrievalKvSource(RetrievalPolicy& policy, const KvCache& working,
                                     int64_t max_new_tokens, KvCache* mirror,
                                     const std::vector<PromptUnits>* ready)
    : policy_(policy), mirror_(mirror), max_new_(max_new_tokens) {
  const auto t0 = std::chrono::steady_clock::now();
  const RetrievalSettings& s = policy.settings();
  if (working.batch() != 1) throw std::invalid_argument("retrieval: one sequence at a time");
  if (s.window < 1 || s.budget < 1)
    throw std::invalid_argument("retrieval: the window and the budget need at least one token");
  if (policy.page_tokens() > s.window)
    throw std::invalid_argument("retrieval: the local window is smaller than one page");
  const int64_t n = working.lengths()[0];
  const int64_t layers = static_cast<int64_t>(working.shape().layers);
  kv_heads_ = working.shape().kv_heads;
  sinks_ = std::min(s.sinks, n);
  const int64_t prompt = n - sinks_;
  policy_.begin_decode(layers, n, max_new_);
  layers_.resize(layers);
  if (layers > s.full_layers && prompt + max_new_ > 0) {
    // The pool: pages of the pinned tier (plain memory without CUDA), room for every layer's
    // prompt and offloaded rows; the gather reads them through unified addressing.
    KvPagePoolOptions o;
    o.page_tokens = kPoolPageRows;
    o.pinned_pages = (prompt + max_new_ + kPoolPageRows - 1) / kPoolPageRows;
    pool_ = std::make_unique<KvPagePool>(working.shape(), working.dtype(), working.device(), o);
    page_table_ =
        at::zeros({o.pinned_pages}, at::TensorOptions().dtype(at::kLong).device(working.device()));
    stats_.pool_bytes = o.pinned_pages * pool_->page_bytes();
  }
  for (int64_t li = 0; li < layers; ++li) {
    Layer& l = layers_[li];
    const at::Tensor keys = working.keys(li).select(0, 0).narrow(1, 0, n);  // [H, n, d]
    const at::Tensor values = working.values(li).select(0, 0).narrow(1, 0, n);
    const int64_t heads = keys.size(0), dim = keys.size(2);
    // A ragged working set's layer: [H, n] of the slots each head sees (undefined when all do,
    // so that the common case keeps attention's unmasked paths).
    at::Tensor visible = working.key_valid(li);
    if (visible.defined()) {
      visible = visible.select(0, 0).narrow(1, 0, n);
      if (visible.all().item<bool>()) visible = at::Tensor();
    }
    if (li < s.full_layers) {
      // With a mirror, a full layer attends to the working set itself (it holds every token):
      // no second copy of the layer's KV, no second write per token.
      stats_.device_kv_bytes +=
          2 * heads * (n + max_new_) * dim * static_cast<int64_t>(keys.element_size());
      if (mirror_) continue;
      l.keys = at::zeros({1, heads, n + max_new_, dim}, keys.options());
      l.values = at::zeros_like(l.keys);
      l.keys.select(0, 0).narrow(1, 0, n).copy_(keys);
      l.values.select(0, 0).narrow(1, 0, n).copy_(values);
      l.length = n;
      l.valid = at::ones({1, n + max_new_}, keys.options().dtype(at::kBool));
      if (visible.defined()) {
        l.head_valid = at::ones({1, heads, n + max_new_}, l.valid.options());
        l.head_valid.select(0, 0).narrow(1, 0, n).copy_(visible);
      }
      continue;
    }
    ++stats_.retrieval_layers;
    l.keys = at::zeros({1, heads, sinks_ + s.budget + s.window, dim}, keys.options());
    l.values = at::zeros_like(l.keys);
    l.valid = at::zeros({1, l.keys.size(2)}, keys.options().dtype(at::kBool));
    l.valid.narrow(1, 0, sinks_).fill_(true);
    l.keys.select(0, 0).narrow(1, 0, sinks_).copy_(keys.narrow(1, 0, sinks_));
    l.values.select(0, 0).narrow(1, 0, sinks_).copy_(values.narrow(1, 0, sinks_));
    if (visible.defined()) {
      l.head_valid = at::ones({1, heads, l.keys.size(2)}, l.valid.options());
      l.head_valid.select(0, 0).narrow(1, 0, sinks_).copy_(visible.narrow(1, 0, sinks_));
      l.head_retrieved_valid = at::zeros({heads, s.budget}, l.valid.options());
      l.head_rows.assign(static_cast<size_t>(heads), 0);
    }
    int64_t prompt_units = 0;
    PromptUnits units;
    if (prompt > 0) {
      const at::Tensor pk = retrieval_prompt_keys(keys, s.sinks),
                       pv = retrieval_prompt_keys(values, s.sinks);
      const PromptUnits* made =
          ready && li < static_cast<int64_t>(ready->size()) ? &(*ready)[li] : nullptr;
      if (visible.defined()) {
        const at::Tensor shown = visible.narrow(1, sinks_, prompt);
        units = policy_.ragged_prompt_units(li, pk, shown);
        const at::Tensor rows = shown.sum(1).cpu();
        for (int64_t h = 0; h < heads; ++h)
          l.head_rows[static_cast<size_t>(h)] = rows[h].item<int64_t>();
      } else if (made && made->order.defined() && made->order.size(1) == prompt) {
        units = *made;
        ++stats_.units_beside_prefill;
      } else {
        units = policy_.prompt_units(li, pk);
      }
      stats_.kmeans_rounds += units.kmeans_rounds;
      const at::Tensor order = units.order.to(keys.device()).unsqueeze(-1).expand({-1, -1, dim});
      write_rows(li, 0, pk.gather(1, order), pv.gather(1, order), 0, prompt);
      prompt_units = units.sizes.size(1);
    }
    // Room for offloaded units (each at least one token, so at most max_new + 1), allocated a
    // block at a time: at 32K in / 16K out the whole bound's index was 1 GiB on the 8B shape
    // while a stride of 16 offloads ~1K units.
    const int64_t capacity =
        std::min(max_new_ + 1, round_up(prompt_units + 1, kUnitBlock) - prompt_units);
    const int64_t width =
        prompt > 0 ? units.index.size(2) : policy_.unit_index(keys.narrow(1, 0, 1)).size(1);
    const auto longs = keys.options().dtype(at::kLong);
    l.sizes = at::zeros({heads, prompt_units + capacity}, longs);
    l.offsets = at::zeros_like(l.sizes);
    // In the keys' dtype: a bf16 model's f32 index was ~45 % of attention's device bytes
    // (8B shape, 32K prompt); scoring upcasts it.
    l.index = new_index({heads, prompt_units + capacity, width}, keys.options());
    if (prompt_units > 0) {
      l.sizes.narrow(1, 0, prompt_units).copy_(units.sizes);
      l.offsets.narrow(1, 0, prompt_units).copy_(units.offsets);
      l.index.narrow(1, 0, prompt_units).copy_(units.index);
    }
    l.units = prompt_units;
    l.prompt_units = prompt_units;
    count_scored_units(l);
    l.pool_rows = prompt;
    l.live = at::zeros({prompt_units + capacity}, keys.options().dtype(at::kBool));
    l.live.narrow(0, 0, prompt_units).fill_(true);
    l.retrieved_valid = at::zeros({s.budget}, keys.options().dtype(at::kBool));
    l.retrieved_valid.narrow(0, 0, reach(l)).fill_(true);
    update_head_reach(l);
    stats_.device_kv_bytes += bytes(l.keys) + bytes(l.values) + index_device_bytes(l.index) +
                              bytes(l.head_valid) + bytes(l.head_retrieved_valid);
  }
  const auto on_device = at::TensorOptions().device(working.device());
  recorded_inputs_ = at::zeros({1 + layers}, on_device.dtype(at::kLong));
  decisions_ = at::zeros({layers, 2}, on_device.dtype(at::kFloat));
  last_slot_ = at::full({1}, sinks_ + s.budget + s.window - 1, on_device.dtype(at::kLong));
  gpu::synchronize(working.device());  // the build's device work belongs to its time
  stats_.build_ms = ms_since(t0);
}

void RetrievalKvSource::write_rows(int64_t layer, int64_t first_row, const at::Tensor& keys,
                                   const at::Tensor& values, int64_t first_slot, int64_t n) {
  if (n <= 0) return;
  const int64_t p = pool_->page_tokens();
  const int64_t needed = (first_row + n + p - 1) / p;
  if (needed > page_table_.size(0)) throw std::logic_error("retrieval: the pool is full");
  while (static_cast<int64_t>(pool_pages_.size()) < needed) {
    pool_pages_.push_back(pool_->allocate(PageTier::kPinned));
    page_table_[static_cast<int64_t>(pool_pages_.size()) - 1].fill_(pool_pages_.back().index);
  }
  // One table entry per page the rows touch: its page, the first source slot, the count and the
  // row in the page where they start.
  std::vector<int64_t> entries[4];
  for (int64_t done = 0; done < n;) {
    const int64_t row = first_row + done, offset = row % p;
    const int64_t count = std::min(p - offset, n - done);
    const int64_t entry[4] = {pool_pages_[row / p].index, first_slot + done, count, offset};
    for (int64_t k = 0; k < 4; ++k)
      entries[k].push_back(entry[k]);
    done += count;
  }
  const auto m = static_cast<int64_t>(entries[0].size());
  const bool cuda = keys.is_cuda();
  at::Tensor host = cuda ? gpu::empty_pinned({4, m}, at::kLong) : at::empty({4, m}, at::kLong);
  for (int64_t k = 0; k < 4; ++k)
    std::copy(entries[k].begin(), entries[k].end(), host[k].data_ptr<int64_t>());
  const at::Tensor table = cuda ? host.to(keys.device(), /*non_blocking=*/true) : host;
  at::Tensor slab = pool_->slab(PageTier::kPinned);
  gpu::scatter_pages(slab, layer, keys, values, table[0], table[1], table[2], table[3]);
}

int64_t RetrievalKvSource::reach(const Layer& l) const {
  const int64_t budget = policy_.settings().budget;
  if (l.head_rows.empty()) return std::min(budget, l.pool_rows);
  return std::min(budget, *std::max_element(l.head_rows.begin(), l.head_rows.end()));
}

int64_t RetrievalKvSource::rows_per_retrieval(const Layer& l) const {
  const int64_t budget = policy_.settings().budget;
  if (l.head_rows.empty()) return std::min(budget, l.pool_rows) * l.keys.size(1);
  int64_t rows = 0;
  for (const int64_t r : l.head_rows)
    rows += std::min(budget, r);
  return rows;
}

void RetrievalKvSource::update_head_reach(Layer& l) {
  if (!l.head_retrieved_valid.defined()) return;
  const int64_t budget = policy_.settings().budget;
  at::Tensor host = at::zeros(l.head_retrieved_valid.sizes(), at::kBool);
  for (size_t h = 0; h < l.head_rows.size(); ++h)
    host[static_cast<int64_t>(h)].narrow(0, 0, std::min(budget, l.head_rows[h])).fill_(true);
  l.head_retrieved_valid.copy_(host);
}

at::Tensor RetrievalKvSource::new_index(at::IntArrayRef sizes,
                                        const at::TensorOptions& options) const {
  if (!policy_.settings().index_on_host) return at::zeros(sizes, options);
  at::Tensor host = gpu::empty_pinned(sizes, options.dtype().toScalarType());
  host.zero_();
  return gpu::device_view_of_pinned(host, options.device());
}

int64_t RetrievalKvSource::index_device_bytes(const at::Tensor& index) const {
  return policy_.settings().index_on_host ? 0 : bytes(index);
}

void RetrievalKvSource::note_similarity(int64_t layer) {
  map_->set_similarity(step_, layer, policy_.last_similarity(layer));
  const float own = policy_.last_threshold(layer);  // a layer's own τ (NaN with one τ)
  if (!std::isnan(own)) map_->set_threshold(step_, layer, own);
}

void RetrievalKvSource::record_map(int64_t request) {
  const RetrievalSettings& s = policy_.settings();
  map_ = std::make_unique<RetrievalMap>();
  map_->request = request;
  map_->policy = policy_.spec();
  map_->layers = static_cast<int64_t>(layers_.size());
  map_->full_layers = std::min(s.full_layers, map_->layers);
  map_->kv_heads = kv_heads_;
  map_->budget = s.budget;
  map_->tau = policy_.boundary_threshold();
}

int64_t RetrievalKvSource::loaded_units(const Layer& l) const {
  // The selection lists whole units in score order and cuts only the last one short, so a unit
  // was loaded exactly when its first row is among the selected rows (units never overlap).
  const int64_t u = l.scored_units;
  const at::Tensor rows = std::get<0>(l.selected_rows.sort(1));  // [H, B], the -1s first
  const at::Tensor offsets = l.offsets.narrow(1, 0, u);
  const at::Tensor at = at::searchsorted(rows, offsets).clamp_max(rows.size(1) - 1);
  const at::Tensor found = rows.gather(1, at).eq(offsets) & l.sizes.narrow(1, 0, u).gt(0) &
                           l.live.narrow(0, 0, u).view({1, -1});
  return found.sum().item<int64_t>();
}

void RetrievalKvSource::begin_forward(const ForwardContext& ctx) {
  if (ctx.batch != 1 || ctx.fresh_tokens != 1)
    throw std::invalid_argument("retrieval: decode feeds one token of one sequence per forward");
  if (step_ >= max_new_) {
    throw std::out_of_range("retrieval: the source was built for " + std::to_string(max_new_) +
                            " decode steps");
  }
  if (map_) map_->begin_step();
}

AttendKv RetrievalKvSource::layer_kv(int64_t layer, const FreshKv& fresh,
                                     const ForwardContext& ctx) {
  if (mirror_) mirror_->write(layer, fresh.keys, fresh.values, fresh.positions);
  const int64_t position = ctx.positions[0][0];
  Layer& l = layers_.at(layer);
  if (layer < policy_.settings().full_layers) {
    if (!mirror_) return full_layer(l, fresh, position);
    AttendKv out;  // as CacheKvSource: the working set with the token just written
    out.keys = mirror_->keys(layer, 1);
    out.values = mirror_->values(layer, 1);
    out.key_positions = mirror_->positions(1);
    out.key_valid = mirror_->key_valid(layer, 1);  // a ragged working set's hidden slots
    return out;
  }
  return retrieval_layer(layer, l, fresh, position, ctx.trace);
}

void RetrievalKvSource::end_forward(const ForwardContext& ctx) {
  if (mirror_) mirror_->commit(ctx.fresh_tokens, ctx.positions);
  ++step_;
  ++stats_.steps;
}

AttendKv RetrievalKvSource::full_layer(Layer& l, const FreshKv& fresh, int64_t position) {
  l.keys.narrow(2, l.length, 1).copy_(fresh.keys);
  l.values.narrow(2, l.length, 1).copy_(fresh.values);
  ++l.length;
  return attend(l, l.length, position);
}

AttendKv RetrievalKvSource::retrieval_layer(int64_t layer, Layer& l, const FreshKv& fresh,
                                            int64_t position, TraceRecorder* trace) {
  const RetrievalSettings& s = policy_.settings();
  const at::Tensor q = fresh.queries.select(0, 0).select(1, 0);  // [Hq, d]
  const bool retrieve = policy_.retrieve(layer, step_, q);
  if (map_) note_similarity(layer);
  if (l.local == s.window) offload_oldest(layer, l);
  if (retrieve) {
    // A "retrieve" interval on the layer's copy lane: scoring, selection and the rows' copy (the
    // layer timeline panel draws it; its tokens are the rows loaded per KV head).
    TraceRecorder::Open open;
    if (trace) open = trace->begin(layer, TraceLane::kCopy, "retrieve");
    load_retrieved(layer, l, q, page_table_.narrow(0, 0, static_cast<int64_t>(pool_pages_.size())));
    // Every head's units hold all of its pool rows, so the host knows the count each head
    // fills: no sync.
    l.retrieved = reach(l);
    l.valid.narrow(1, sinks_, l.retrieved).fill_(true);
    l.valid.narrow(1, sinks_ + l.retrieved, s.budget - l.retrieved).fill_(false);
    if (l.head_valid.defined())
      l.head_valid.select(0, 0).narrow(1, sinks_, s.budget).copy_(l.head_retrieved_valid);
    const int64_t rows = rows_per_retrieval(l);
    stats_.count_retrieval(layer);
    stats_.loaded_rows += rows;
    if (trace) {
      trace->end(open, l.retrieved,
                 2 * rows * l.keys.size(3) * static_cast<int64_t>(l.keys.element_size()));
    }
    // Counted after the interval closed: the count waits for the device.
    if (map_) map_->retrievals.push_back({step_, layer, l.retrieved, loaded_units(l)});
    if (policy_.page_tokens() == 0) l.segment_starts.push_back(l.local);
  }
  if (l.segment_starts.empty()) l.segment_starts.push_back(0);
  const int64_t local_begin = sinks_ + s.budget;
  l.keys.narrow(2, local_begin + l.local, 1).copy_(fresh.keys);
  l.values.narrow(2, local_begin + l.local, 1).copy_(fresh.values);
  l.valid.narrow(1, local_begin + l.local, 1).fill_(true);
  ++l.local;
  return attend(l, local_begin + s.window, position);
}

void RetrievalKvSource::offload_oldest(int64_t layer, Layer& l) {
  const RetrievalSettings& s = policy_.settings();
  const int64_t page = policy_.page_tokens();
  // The oldest temporal segment, joined with the next ones up to the first boundary at least
  // min_segment_tokens() in (or the last boundary there is); one that fills the whole window
  // leaves in halves.
  int64_t cut = page;
  if (page == 0) {
    const int64_t least = std::max<int64_t>(1, policy_.min_segment_tokens());
    for (size_t i = 1; i < l.segment_starts.size(); ++i) {
      cut = l.segment_starts[i];
      if (cut >= least) break;
    }
  }
  if (cut <= 0 || cut >= l.local) cut = std::max<int64_t>(1, l.local / 2);
  const int64_t local_begin = sinks_ + s.budget;
  const at::Tensor keys = l.keys.select(0, 0).narrow(1, local_begin, cut);  // [H, cut, d]
  if (l.units >= l.sizes.size(1)) grow_units(l);
  write_rows(layer, l.pool_rows, l.keys.select(0, 0), l.values.select(0, 0), local_begin, cut);
  l.sizes.select(1, l.units).fill_(cut);
  l.offsets.select(1, l.units).fill_(l.pool_rows);
  l.index.select(1, l.units).copy_(policy_.unit_index(keys));
  l.live[l.units].fill_(true);
  ++l.units;
  count_scored_units(l);
  l.pool_rows += cut;
  for (int64_t& rows : l.head_rows)
    rows += cut;
  update_head_reach(l);
  l.retrieved_valid.narrow(0, 0, reach(l)).fill_(true);
  ++stats_.offloaded_units;
  // Shift the rest of the window to its front (a clone: the spans overlap).
  const int64_t rest = l.local - cut;
  for (at::Tensor* t : {&l.keys, &l.values}) {
    t->narrow(2, local_begin, rest).copy_(t->narrow(2, local_begin + cut, rest).clone());
  }
  l.valid.narrow(1, local_begin + rest, cut).fill_(false);
  l.local = rest;
  std::vector<int64_t> starts{0};
  for (int64_t start : l.segment_starts) {
    if (start - cut > 0) starts.push_back(start - cut);
  }
  l.segment_starts = std::move(starts);
}

void RetrievalKvSource::load_retrieved(int64_t layer, Layer& l, const at::Tensor& queries,
                                       const at::Tensor& table, const at::Tensor& enabled) {
  const int64_t budget = policy_.settings().budget, u = l.scored_units;
  const at::Tensor scores =
      policy_.score(queries, l.index.narrow(1, 0, u), l.live.narrow(0, 0, u), enabled);
  const at::Tensor rows = gpu::budgeted_select_rows(scores, l.sizes.narrow(1, 0, u),
                                                    l.offsets.narrow(1, 0, u), budget, enabled);
  l.selected_rows = rows;
  at::Tensor keys = l.keys.select(0, 0).narrow(1, sinks_, budget);
  at::Tensor values = l.values.select(0, 0).narrow(1, sinks_, budget);
  gpu::gather_paged_rows(keys, values, pool_->slab(PageTier::kPinned), layer, table, rows, enabled);
}

void RetrievalKvSource::grow_units(Layer& l) {
  const int64_t limit = l.prompt_units + max_new_ + 1;
  if (l.units >= limit) throw std::logic_error("retrieval: the pool is full");
  const int64_t capacity = std::min(limit, l.sizes.size(1) + kUnitBlock);
  const auto grown = [&](const at::Tensor& t, bool index = false) {
    const int64_t unit_dim = t.dim() == 1 ? 0 : 1;  // live is [units]; the rest [H, units, ...]
    std::vector<int64_t> sizes = t.sizes().vec();
    sizes[unit_dim] = capacity;
    at::Tensor out = index ? new_index(sizes, t.options()) : at::zeros(sizes, t.options());
    out.narrow(unit_dim, 0, t.size(unit_dim)).copy_(t);
    return out;
  };
  stats_.device_kv_bytes -= index_device_bytes(l.index);
  l.sizes = grown(l.sizes);
  l.offsets = grown(l.offsets);
  at::Tensor index = grown(l.index, true);
  // A host index's old block goes back to the pinned cache when it is dropped, and the cache does
  // not see the device's reads of it (in place): the copy out of it finishes first (a growth is a
  // block of 256 units).
  if (policy_.settings().index_on_host) gpu::synchronize(index.device());
  l.index = std::move(index);
  l.live = grown(l.live);
  stats_.device_kv_bytes += index_device_bytes(l.index);
  ++recording_version_;  // a recording read the old tensors
}

void RetrievalKvSource::count_scored_units(Layer& l) {
  const int64_t scored = std::min(l.sizes.size(1), round_up(l.units, kUnitBlock));
  if (scored == l.scored_units) return;
  l.scored_units = scored;
  ++recording_version_;
}

bool RetrievalKvSource::recordable() const {
  if (!mirror_ || !pool_ || !policy_.decides_on_device()) return false;
  for (size_t li = 0; li < layers_.size(); ++li) {
    // A window offload before the next step may add one unit (and a block of scored ones).
    if (retrieves_at(static_cast<int64_t>(li)) &&
        layers_[li].scored_units + 1 > gpu::kBudgetedSelectMaxUnits)
      return false;
  }
  return true;
}

void RetrievalKvSource::before_recorded_step() {
  const RetrievalSettings& s = policy_.settings();
  if (step_ >= max_new_) {
    throw std::out_of_range("retrieval: the source was built for " + std::to_string(max_new_) +
                            " decode steps");
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto layers = static_cast<int64_t>(layers_.size());
  at::Tensor host = recorded_inputs_.is_cuda() ? gpu::empty_pinned({1 + layers}, at::kLong)
                                               : at::empty({1 + layers}, at::kLong);
  int64_t* in = host.data_ptr<int64_t>();
  in[0] = step_;
  idle_step_ = policy_.idle_at(step_);
  for (int64_t li = 0; li < layers; ++li) {
    Layer& l = layers_[li];
    in[1 + li] = 0;
    if (!retrieves_at(li)) continue;
    // The per-layer path offloads a full window before the layer retrieves; nothing in between
    // depends on the step's queries, so it can happen before the whole step.
    if (l.local == s.window) offload_oldest(li, l);
    in[1 + li] = sinks_ + s.budget + l.local;
  }
  recorded_inputs_.copy_(host, /*non_blocking=*/true);
  stats_.host_ms += ms_since(t0);
}

at::Tensor RetrievalKvSource::recorded_layer(int64_t layer, const at::Tensor& q_rot,
                                             const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& v, const at::Tensor& cos,
                                             const at::Tensor& sin, const at::Tensor& position,
                                             int64_t window, double scale) {
  const RetrievalSettings& s = policy_.settings();
  Layer& l = layers_.at(layer);
  const at::Tensor queries = q_rot.select(0, 0);  // [Hq, d]
  at::Tensor decision = decisions_.select(0, layer);
  policy_.retrieve_on_device(layer, recorded_inputs_.narrow(0, 0, 1), queries, decision);
  if (!idle_step_) {
    // Scoring and selection run at every step the host cannot rule out; the decision switches
    // the selection and the copy off inside their kernels, and the region's validity keeps its
    // value. (A lean recording, for steps known idle, leaves them out: ~1 ms a token on the 8B
    // shape.)
    const at::Tensor enabled = decision.select(0, 0).gt(0).view({1});
    load_retrieved(layer, l, queries, page_table_, enabled);
    at::Tensor region_valid = l.valid.narrow(1, sinks_, s.budget);
    region_valid.copy_(at::where(enabled, l.retrieved_valid.view({1, -1}), region_valid));
    if (l.head_valid.defined()) {
      at::Tensor heads_region = l.head_valid.select(0, 0).narrow(1, sinks_, s.budget);
      heads_region.copy_(at::where(enabled, l.head_retrieved_valid, heads_region));
    }
  }
  // The fresh token's key and value into the window at the layer's slot (a device input).
  const at::Tensor slot = recorded_inputs_.narrow(0, 1 + layer, 1);
  at::Tensor q_unused = at::empty_like(queries);
  at::Tensor key_rows = l.keys.select(0, 0), value_rows = l.values.select(0, 0);
  gpu::rope_kv_write(q, k, v, cos, sin, slot, q_unused, key_rows, value_rows);
  l.valid.select(0, 0).index_fill_(0, slot, true);
  const at::Tensor key_positions = at::where(l.valid, position.view({1, 1}), -1);
  return gpu::decode_attention(q_rot, l.keys, l.values, key_positions, l.head_valid,
                               position.view({1}), last_slot_, window, scale);
}

void RetrievalKvSource::after_recorded_step() {
  const RetrievalSettings& s = policy_.settings();
  const auto t0 = std::chrono::steady_clock::now();
  const at::Tensor decided = decisions_.cpu();  // the step's one sync besides its token
  stats_.wait_ms += ms_since(t0);
  const float* d = decided.data_ptr<float>();
  if (map_) map_->begin_step();
  for (int64_t li = 0; li < static_cast<int64_t>(layers_.size()); ++li) {
    if (!retrieves_at(li)) continue;
    Layer& l = layers_[li];
    policy_.similarity_seen(li, step_, d[2 * li + 1], d[2 * li] > 0);
    if (map_) note_similarity(li);
    if (d[2 * li] > 0) {
      l.retrieved = reach(l);
      stats_.count_retrieval(li);
      stats_.loaded_rows += rows_per_retrieval(l);
      if (map_) map_->retrievals.push_back({step_, li, l.retrieved, loaded_units(l)});
      if (policy_.page_tokens() == 0) l.segment_starts.push_back(l.local);
    }
    if (l.segment_starts.empty()) l.segment_starts.push_back(0);
    ++l.local;
  }
  ++step_;
  ++stats_.steps;
  ++stats_.recorded_steps;
}

AttendKv RetrievalKvSource::attend(const Layer& l, int64_t slots, int64_t position) const {
  // Every held key is in the past of the query: a valid slot gets the query's own position (seen,
  // also inside a sliding window), an empty one -1. RoPE is already in the keys. Computed on the
  // device from the slots' flags: no host tensor, no copy per layer.
  AttendKv out;
  out.keys = l.keys.narrow(2, 0, slots);
  out.values = l.values.narrow(2, 0, slots);
  out.key_positions = at::where(l.valid.narrow(1, 0, slots), position, -1).to(at::kLong);
  out.dense_causal = false;
  if (l.head_valid.defined()) out.key_valid = l.head_valid.narrow(2, 0, slots);
  return out;
}

}  // namespace engram
