// Ragged keep plans (issue 15: head-wise selection and layer budgets): per (layer, KV head) lists
// of different lengths. After a ragged plan a forward attends, per head, to exactly that head's
// kept tokens (checked against softmax attention in double over each head's own keys, a
// prefill block, a per-layer decode step and the recorded decode step); plans whose lists are
// equal stay bit-identical to the uniform plan and set no mask; EpiCache's joint selection keeps
// M_l·H_kv (head, token) pairs per layer; the store restores a ragged working set; decode-time
// retrieval (LouisKV, Quest) over a ragged set serves each head only the slots it sees.
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

#include "core/engine/chat_session.h"
#include "core/engine/conversation_store.h"
#include "core/engine/generator.h"
#include "core/kv/cache_kv_source.h"
#include "core/kv/retrieval_kv_source.h"
#include "core/kv/working_set.h"
#include "core/policies/epicache_policy.h"
#include "core/policies/full_policy.h"
#include "core/policies/louiskv_policy.h"
#include "core/policies/page_retrieval_policy.h"
#include "core/policies/policy_registry.h"
#include "core/runtime/decoder_layer.h"
#include "core/runtime/static_decode_step.h"
#include "gpu/device_timeline.h"
#include "storage/database.h"
#include "support/fixture_models.h"

using namespace engram;

namespace {

KvCacheShape shape_of(const ModelConfig& c) {
  return {c.num_layers, c.num_kv_heads, c.head_dim};
}

// Feeds `tokens` at the working set's next positions through the plain source.
ForwardResult feed(const Decoder& d, KvWorkingSet& ws, const std::vector<int64_t>& tokens,
                   const std::function<void(const LayerView&)>& on_layer = {}) {
  const auto len = static_cast<int64_t>(tokens.size());
  ForwardRequest req;
  req.tokens = {tokens};
  req.positions = {std::vector<int64_t>(static_cast<size_t>(len))};
  for (int64_t i = 0; i < len; ++i)
    req.positions[0][static_cast<size_t>(i)] = ws.next_position() + i;
  req.all_logits = true;
  req.on_layer = on_layer;
  CacheKvSource source(ws.cache());
  gpu::DeviceTimeline timeline(d.device());
  ForwardResult r = d.forward(req, source, timeline, nullptr);
  ws.appended(len);
  return r;
}

// Lists of different lengths per (layer, head), in ascending slot order, from `tokens` slots.
KeepPlan ragged_plan(int64_t layers, int64_t heads, int64_t tokens) {
  KeepPlan plan;
  plan.per_head.resize(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t stride = 2 + (l + 2 * h) % 3;  // 2, 3 or 4: lengths differ by head and layer
      std::vector<int64_t> list;
      for (int64_t j = (l + h) % stride; j < tokens; j += stride)
        list.push_back(j);
      plan.per_head[static_cast<size_t>(l)].push_back(list);
    }
  }
  return plan;
}

// The same plan as KeepPlan::slots: each list right-aligned after -1 padding.
KeepPlan as_slots(const KeepPlan& lists, int64_t layers, int64_t heads) {
  KeepPlan plan;
  const int64_t n = lists.kept();
  plan.slots = at::full({layers, heads, n}, -1, at::kLong);
  for (int64_t l = 0; l < layers; ++l) {
    for (int64_t h = 0; h < heads; ++h) {
      const std::vector<int64_t> list = lists.list(l, h);
      const auto len = static_cast<int64_t>(list.size());
      plan.slots[l][h].narrow(0, n - len, len).copy_(at::tensor(list, at::kLong));
    }
  }
  return plan;
}

// RoPE by `delta` positions in double (rotate-half convention), k [n, d].
at::Tensor rotate(const at::Tensor& k, const at::Tensor& deltas, const at::Tensor& inv_freq) {
  const int64_t half = k.size(-1) / 2;
  const at::Tensor angles =
      deltas.to(at::kDouble).unsqueeze(-1) * inv_freq.to(at::kDouble).unsqueeze(0);
  const at::Tensor x1 = k.narrow(-1, 0, half), x2 = k.narrow(-1, half, half);
  return at::cat({x1 * angles.cos() - x2 * angles.sin(), x2 * angles.cos() + x1 * angles.sin()},
                 -1);
}

// What one head's queries should see: its kept tokens (K/V of the dense prefill, rotated from
// slot j's position to the slot the plan puts them in) and then the fresh tokens.
struct HeadKv {
  at::Tensor keys;    // [n_h + S, d] double
  at::Tensor values;  // [n_h + S, d]
};

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

double max_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, max_diff(a[i], b[i]));
  return m;
}

// Logits of `tokens` decoded one by one after the working set, attention served by `source`
// (mirroring into the working set) or, when null, by the working set itself.
std::vector<at::Tensor> decode(const Decoder& d, KvWorkingSet& ws,
                               const std::vector<int64_t>& tokens, RetrievalKvSource* source) {
  gpu::DeviceTimeline timeline(d.device());
  std::vector<at::Tensor> out;
  const int64_t first = ws.next_position();
  for (size_t i = 0; i < tokens.size(); ++i) {
    ForwardRequest req;
    req.phase = ForwardPhase::kDecode;
    req.tokens = {{tokens[i]}};
    req.positions = {{first + static_cast<int64_t>(i)}};
    CacheKvSource plain(ws.cache());
    KvSource& s = source ? static_cast<KvSource&>(*source) : plain;
    out.push_back(d.forward(req, s, timeline, nullptr).logits.view({-1}).clone());
  }
  return out;
}

// Greedy decoding of exactly `tokens` tokens, the prompt prefilled in blocks of 16.
GenerationOptions greedy(int64_t tokens) {
  GenerationOptions options;
  options.max_new_tokens = tokens;
  options.stop_at_eos = false;
  options.prefill_chunk = 16;
  options.sampling.temperature = 0;
  return options;
}

RetrievalSettings retrieval_settings(int64_t budget) {
  RetrievalSettings s;
  s.sinks = 8;
  s.window = 8;
  s.budget = budget;
  s.full_layers = 1;
  s.offload = 0;
  s.overlap_prefill = false;
  return s;
}

}  // namespace

class RaggedPlanTest : public QObject {
  Q_OBJECT

  test::FixtureModels models_;
  const Decoder& decoder(const std::string& name) { return models_.decoder(name); }

 private Q_SLOTS:
  void initTestCase() { models_.load({"llama-gqa", "qwen3-qknorm"}); }

  // A ragged plan, then a block of S fresh tokens: each layer's attention equals softmax
  // attention in double over exactly each head's kept tokens + the fresh ones (fed through the
  // layer's own o_proj/MLP, compared with the next layer's input and the logits).
  void raggedPlanAttendsEachHeadsKeptTokens_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("fresh");
    for (const char* m : {"llama-gqa", "qwen3-qknorm"})
      for (int s : {5, 1})
        QTest::newRow((std::string(m) + (s == 1 ? "/decode" : "/block")).c_str()) << m << s;
  }
  void raggedPlanAttendsEachHeadsKeptTokens() {
    QFETCH(QString, model);
    QFETCH(int, fresh);
    const Decoder& d = decoder(model.toStdString());
    const ModelConfig& c = d.config();
    const int64_t history = 31, hkv = c.num_kv_heads, g = c.num_heads / hkv;
    KvWorkingSet ws(shape_of(c), 64, d.dtype(), d.device(), c.max_positions);
    feed(d, ws, test::token_ids(history, 1));
    std::vector<at::Tensor> k0, v0;  // the dense prefill's KV: slot j at position j
    for (int64_t l = 0; l < c.num_layers; ++l) {
      k0.push_back(ws.cache().keys(l)[0].to(at::kDouble).clone());
      v0.push_back(ws.cache().values(l)[0].to(at::kDouble).clone());
    }
    const KeepPlan plan = ragged_plan(c.num_layers, hkv, history);
    const int64_t n = plan.kept();
    ws.apply(plan, d.rope().inverse_frequencies());
    QCOMPARE(ws.tokens(), n);
    QVERIFY(ws.cache().key_valid(0).defined());

    // Each list sits at the end of the n slots, after empty (-1) ones.
    const at::Tensor slots = ws.slot_stream();
    std::vector<std::vector<HeadKv>> want(static_cast<size_t>(c.num_layers));
    for (int64_t l = 0; l < c.num_layers; ++l) {
      for (int64_t h = 0; h < hkv; ++h) {
        const auto& list = plan.per_head[static_cast<size_t>(l)][static_cast<size_t>(h)];
        const auto len = static_cast<int64_t>(list.size());
        for (int64_t j = 0; j < n; ++j) {
          const int64_t expect = j < n - len ? -1 : list[static_cast<size_t>(j - (n - len))];
          QCOMPARE(slots[l][h][j].item<int64_t>(), expect);
        }
        const at::Tensor idx = at::tensor(list, at::kLong);
        const at::Tensor deltas = at::arange(n - len, n, at::kLong) - idx;
        want[l].push_back({rotate(k0[l][h].index_select(0, idx), deltas,
                                  d.rope().inverse_frequencies().to(at::kCPU)),
                           v0[l][h].index_select(0, idx)});
      }
    }

    std::vector<at::Tensor> inputs, queries, keys, values;
    KvWorkingSet decode_copy(shape_of(c), 64, d.dtype(), d.device(), c.max_positions);
    decode_copy.assign(ws);
    const auto tokens = test::token_ids(fresh, 2);
    const ForwardResult r = feed(d, ws, tokens, [&](const LayerView& v) {
      inputs.push_back(v.input.clone());
      queries.push_back(v.q.to(at::kDouble).clone());
      keys.push_back(v.k.to(at::kDouble).clone());
      values.push_back(v.v.to(at::kDouble).clone());
    });

    const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
    at::Tensor logits_want;
    for (int64_t l = 0; l < c.num_layers; ++l) {
      at::Tensor attn = at::zeros({1, c.num_heads, fresh, c.head_dim}, at::kDouble);
      for (int64_t qh = 0; qh < c.num_heads; ++qh) {
        const HeadKv& kept = want[l][qh / g];
        const at::Tensor k = at::cat({kept.keys, keys[l][0][qh / g]}, 0);
        const at::Tensor v = at::cat({kept.values, values[l][0][qh / g]}, 0);
        const int64_t seen_before = kept.keys.size(0);
        for (int64_t s = 0; s < fresh; ++s) {
          const int64_t seen = seen_before + s + 1;  // causal among the fresh tokens
          const at::Tensor p =
              at::softmax(at::matmul(k.narrow(0, 0, seen), queries[l][0][qh][s]) * scale, 0);
          attn[0][qh][s].copy_(at::matmul(p, v.narrow(0, 0, seen)));
        }
      }
      const at::Tensor out =
          finish_layer(c, d.weights().layers[l], inputs[l], attn.to(inputs[l].scalar_type()));
      if (l + 1 < c.num_layers) {
        const double diff = max_diff(out, inputs[l + 1]);
        QVERIFY2(diff < 1e-4, qPrintable(QString("layer %1: %2").arg(l).arg(diff)));
      } else {
        logits_want = decoder_logits(c, d.weights(), out);
      }
    }
    const double diff = max_diff(r.logits.view({fresh, -1}), logits_want.view({fresh, -1}));
    QVERIFY2(diff < 1e-3, qPrintable(QString("logits: %1").arg(diff)));

    // The recorded decode step (the CUDA graph path; run directly on the CPU) reads the same
    // validity: equal to the per-layer path on the copy of the ragged working set.
    if (fresh == 1) {
      StaticDecodeStep step(d, decode_copy.cache());
      const at::Tensor got = step.step(tokens[0], decode_copy.next_position());
      const double step_diff = max_diff(got, r.logits.view({-1}));
      QVERIFY2(step_diff < 1e-4, qPrintable(QString("recorded step: %1").arg(step_diff)));
    }
  }

  // A plan whose per-head lists are all equal is today's uniform plan: the same logits bit for
  // bit through a block and decode, and no validity mask (attention keeps its fast paths).
  void equalListsMatchTheUniformPlanBitForBit() {
    const Decoder& d = decoder("llama-gqa");
    const ModelConfig& c = d.config();
    std::vector<int64_t> kept;
    for (int64_t j = 0; j < 40; j += 3)
      kept.push_back(j);
    KeepPlan shared;
    shared.shared = kept;
    KeepPlan equal;
    equal.per_head.assign(
        static_cast<size_t>(c.num_layers),
        std::vector<std::vector<int64_t>>(static_cast<size_t>(c.num_kv_heads), kept));
    std::vector<at::Tensor> logits[2];
    for (int which = 0; which < 2; ++which) {
      KvWorkingSet ws(shape_of(c), 64, d.dtype(), d.device(), c.max_positions);
      feed(d, ws, test::token_ids(40, 3));
      ws.apply(which == 0 ? shared : equal, d.rope().inverse_frequencies());
      QVERIFY(!ws.cache().key_valid(0).defined());
      logits[which].push_back(feed(d, ws, test::token_ids(6, 4)).logits);
      logits[which].push_back(feed(d, ws, {17}).logits);
      StaticDecodeStep step(d, ws.cache());
      logits[which].push_back(step.step(18, ws.next_position()).clone());
    }
    for (size_t i = 0; i < logits[0].size(); ++i)
      QVERIFY(at::equal(logits[0][i], logits[1][i]));
  }

  // Successive per-head plans that pad no slot (EpiCache's shrinks): the slot map is each plan's
  // lists read through the map before it, the verbatim tail kept by every list stays exact (and
  // truncatable), and a plan ending on compacted slots leaves no exact tail.
  void successivePlansComposeTheSlotMap() {
    const Decoder& d = decoder("llama-gqa");
    const ModelConfig& c = d.config();
    const int64_t layers = c.num_layers, heads = c.num_kv_heads;
    KvWorkingSet ws(shape_of(c), 64, d.dtype(), d.device(), c.max_positions);
    feed(d, ws, test::token_ids(40, 3));
    // want[l][h]: the stream index each slot holds, by hand.
    std::vector<std::vector<std::vector<int64_t>>> want(
        static_cast<size_t>(layers), std::vector<std::vector<int64_t>>(static_cast<size_t>(heads)));
    for (auto& layer : want)
      for (auto& head : layer)
        for (int64_t j = 0; j < 40; ++j)
          head.push_back(j);
    // Each plan: every (layer, head) keeps up to 10 older slots by its own stride, then the
    // last `tail` slots verbatim (tail 0: the lists end on a compacted slot).
    const auto plan_of = [&](int64_t tokens, int64_t tail, int64_t round) {
      KeepPlan plan;
      plan.per_head.resize(static_cast<size_t>(layers));
      for (int64_t l = 0; l < layers; ++l) {
        for (int64_t h = 0; h < heads; ++h) {
          std::vector<int64_t> list;
          const int64_t stride = 1 + (l + h + round) % 2;
          const int64_t picks = std::min<int64_t>(10, (tokens - tail - 3) / 2);
          for (int64_t j = (l + 2 * h) % 3; static_cast<int64_t>(list.size()) < picks; j += stride)
            list.push_back(j);
          for (int64_t j = tokens - tail; j < tokens; ++j)
            list.push_back(j);
          plan.per_head[static_cast<size_t>(l)].push_back(list);
        }
      }
      return plan;
    };
    const auto check = [&](int64_t exact_tail) {
      const at::Tensor map = ws.slot_stream();
      QCOMPARE(map.size(2), ws.tokens());
      for (int64_t l = 0; l < layers; ++l)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t j = 0; j < ws.tokens(); ++j)
            QCOMPARE(map[l][h][j].item<int64_t>(), want[l][h][static_cast<size_t>(j)]);
      QCOMPARE(ws.exact_stream(), ws.stream_tokens() - exact_tail);
      QCOMPARE(ws.exact_slot(), ws.tokens() - exact_tail);
      QVERIFY(!ws.cache().key_valid(0).defined());
    };
    int64_t round = 0;
    for (const int64_t tail : {8, 5, 0, 6}) {
      const KeepPlan plan = plan_of(ws.tokens(), tail, round++);
      for (int64_t l = 0; l < layers; ++l) {
        for (int64_t h = 0; h < heads; ++h) {
          std::vector<int64_t> next;
          for (int64_t slot : plan.per_head[static_cast<size_t>(l)][static_cast<size_t>(h)])
            next.push_back(want[l][h][static_cast<size_t>(slot)]);
          want[l][h] = next;
        }
      }
      ws.apply(plan, d.rope().inverse_frequencies());
      check(tail);
      // Fresh tokens extend the map verbatim and the exact tail with it.
      const int64_t before = ws.stream_tokens();
      feed(d, ws, test::token_ids(7, 5 + round));
      for (auto& layer : want)
        for (auto& head : layer)
          for (int64_t j = 0; j < 7; ++j)
            head.push_back(before + j);
      check(tail + 7);
    }
    // The last exact tail truncates; the compacted slots do not.
    QVERIFY(ws.truncate(ws.stream_tokens() - 3));
    QVERIFY(!ws.truncate(ws.exact_stream() - 1));
  }

  // A plan handed over as slots (KeepPlan::slots, EpiCache's shrink: composed where it was
  // ranked) leaves the working set exactly as the same lists do: KV, slot map, exact tail, mask,
  // evicted count, captured runs, through ragged plans, plans over a ragged set and a shared one;
  // a slot outside the set is refused before anything moves.
  void slotsPlanEqualsItsLists() {
    const Decoder& d = decoder("llama-gqa");
    const ModelConfig& c = d.config();
    const int64_t layers = c.num_layers, heads = c.num_kv_heads;
    KvWorkingSet lists(shape_of(c), 64, d.dtype(), d.device(), c.max_positions);
    KvWorkingSet slots(shape_of(c), 64, d.dtype(), d.device(), c.max_positions);
    const auto same = [&](const char* step) {
      QVERIFY2(lists.tokens() == slots.tokens(), step);
      QVERIFY2(at::equal(lists.slot_stream(), slots.slot_stream()), step);
      QVERIFY2(lists.exact_slot() == slots.exact_slot(), step);
      QVERIFY2(lists.exact_stream() == slots.exact_stream(), step);
      QVERIFY2(lists.evicted_tokens() == slots.evicted_tokens(), step);
      QVERIFY2(lists.attention_share() == slots.attention_share(), step);
      const at::Tensor a = lists.cache().key_valid(0), b = slots.cache().key_valid(0);
      QVERIFY2(a.defined() == b.defined() && (!a.defined() || at::equal(a, b)), step);
      QVERIFY2(lists.cache().key_valid_suffix() == slots.cache().key_valid_suffix(), step);
      for (int64_t l = 0; l < layers; ++l) {
        QVERIFY2(at::equal(lists.cache().keys(l), slots.cache().keys(l)), step);
        QVERIFY2(at::equal(lists.cache().values(l), slots.cache().values(l)), step);
      }
      const std::vector<KvRun> ra = lists.pending(), rb = slots.pending();
      QVERIFY2(ra.size() == rb.size(), step);
      for (size_t i = 0; i < ra.size(); ++i)
        QVERIFY2(
            ra[i].begin == rb[i].begin && ra[i].end == rb[i].end && at::equal(ra[i].kv, rb[i].kv),
            step);
    };
    const auto both = [&](const KeepPlan& plan, const char* step) {
      lists.apply(plan, d.rope().inverse_frequencies());
      slots.apply(as_slots(plan, layers, heads), d.rope().inverse_frequencies());
      same(step);
    };
    for (KvWorkingSet* ws : {&lists, &slots}) {
      ws->set_capture(true);
      feed(d, *ws, test::token_ids(40, 3));
    }
    const KeepPlan first = ragged_plan(layers, heads, 40);
    // The slots and back to host lists (the ENGRAM_HOST_PLAN_LISTS peer) are the same lists.
    const KeepPlan back = with_host_lists(as_slots(first, layers, heads));
    QVERIFY(!back.slots.defined());
    QVERIFY(back.per_head == first.per_head);
    both(first, "ragged plan");
    for (KvWorkingSet* ws : {&lists, &slots})
      feed(d, *ws, test::token_ids(9, 4));
    same("fresh tokens");
    // Over the ragged set: every head keeps its first 6 slots (some empty) and the last 5.
    KeepPlan over;
    over.per_head.resize(static_cast<size_t>(layers));
    for (int64_t l = 0; l < layers; ++l) {
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<int64_t> list;
        for (int64_t j = h % 2; j < 6; ++j)
          list.push_back(j);
        for (int64_t j = lists.tokens() - 5; j < lists.tokens(); ++j)
          list.push_back(j);
        over.per_head[static_cast<size_t>(l)].push_back(list);
      }
    }
    both(over, "plan over a ragged set");
    for (KvWorkingSet* ws : {&lists, &slots}) {
      feed(d, *ws, test::token_ids(4, 6));
      QVERIFY(ws->truncate(ws->stream_tokens() - 2));
    }
    same("truncated tail");
    KeepPlan shared;
    shared.shared = {1, 2, 3, 7, 8, 9, 10};
    both(shared, "shared plan");
    // A plan that keeps nothing.
    KeepPlan none;
    none.per_head.assign(static_cast<size_t>(layers),
                         std::vector<std::vector<int64_t>>(static_cast<size_t>(heads)));
    both(none, "empty plan");
    for (KvWorkingSet* ws : {&lists, &slots})
      feed(d, *ws, test::token_ids(6, 7));
    same("fresh tokens after nothing");
    // Out of range: refused, nothing moved.
    KeepPlan bad = as_slots(ragged_plan(layers, heads, slots.tokens()), layers, heads);
    bad.slots[1][0][bad.slots.size(2) - 1] = slots.tokens();
    QVERIFY_EXCEPTION_THROWN(slots.apply(bad, d.rope().inverse_frequencies()), std::out_of_range);
    bad.slots[1][0][bad.slots.size(2) - 1] = -2;
    QVERIFY_EXCEPTION_THROWN(slots.apply(bad, d.rope().inverse_frequencies()), std::out_of_range);
    same("refused plan");
  }

  // Empty slots hold no token for attention_share() and a later plan; truncate() still cuts the
  // verbatim tail, which sits at the same slots in every head.
  void emptySlotsHoldNoToken() {
    const Decoder& d = decoder("llama-gqa");
    const ModelConfig& c = d.config();
    KvWorkingSet ws(shape_of(c), 64, d.dtype(), d.device(), c.max_positions);
    feed(d, ws, test::token_ids(20, 5));
    KeepPlan plan;
    plan.per_head.resize(static_cast<size_t>(c.num_layers));
    for (int64_t l = 0; l < c.num_layers; ++l) {
      plan.per_head[l].push_back({0, 1, 2, 3, 18, 19});
      for (int64_t h = 1; h < c.num_kv_heads; ++h)
        plan.per_head[l].push_back({5, 18, 19});
    }
    ws.apply(plan, d.rope().inverse_frequencies());
    QCOMPARE(ws.tokens(), int64_t{6});
    QCOMPARE(ws.exact_slot(), int64_t{4});  // slots 4, 5 hold stream tokens 18, 19 in every head
    const std::vector<float> share = ws.attention_share();
    const float heads = static_cast<float>(c.num_kv_heads);
    QCOMPARE(share[0], 1.0f / heads);
    QCOMPARE(share[5], (heads - 1.0f) / heads);
    QCOMPARE(share[4], 0.0f);
    QCOMPARE(share[19], 1.0f);
    feed(d, ws, {7, 8});
    QVERIFY(ws.truncate(21));
    QCOMPARE(ws.tokens(), int64_t{7});
    // A uniform plan over a ragged set keeps the empty slots empty (and hidden).
    KeepPlan uniform;
    uniform.shared = {0, 1, 4, 5, 6};
    ws.apply(uniform, d.rope().inverse_frequencies());
    const at::Tensor slots = ws.slot_stream();
    QCOMPARE(slots[0][1][0].item<int64_t>(), int64_t{-1});
    QCOMPARE(slots[0][0][0].item<int64_t>(), int64_t{0});
    QVERIFY(ws.cache().key_valid(0).defined());
    QVERIFY(!ws.cache().key_valid(0)[0][1][0].item<bool>());
    // A plan that fills every slot frees the mask.
    KeepPlan filled;
    filled.shared = {2, 3, 4};
    ws.apply(filled, d.rope().inverse_frequencies());
    QVERIFY(!ws.cache().key_valid(0).defined());
  }

  // A ragged plan pads each shorter list in front, so every head's hidden slots lead its valid
  // ones (KvCache::key_valid_suffix, which a CUDA prefill block reads as variable-length
  // sequences instead of a mask); fresh tokens and growth keep that; a mask that hides a slot
  // after a valid one is not a suffix (the masked path); no mask is one.
  void hiddenSlotsLeadEachHeadsList() {
    const Decoder& d = decoder("llama-gqa");
    const ModelConfig& c = d.config();
    KvWorkingSet ws(shape_of(c), 16, d.dtype(), d.device(), c.max_positions);
    feed(d, ws, test::token_ids(31, 1));
    ws.apply(ragged_plan(c.num_layers, c.num_kv_heads, 31), d.rope().inverse_frequencies());
    QVERIFY(ws.cache().key_valid(0).defined());
    QVERIFY(ws.cache().key_valid_suffix());
    std::vector<bool> seen;
    feed(d, ws, test::token_ids(40, 2), [&](const LayerView& v) {
      seen.push_back(v.kv.key_valid.defined() && v.kv.key_valid_suffix);
    });
    QCOMPARE(seen, std::vector<bool>(static_cast<size_t>(c.num_layers), true));
    QVERIFY(ws.cache().capacity() > 31);  // grown under the fresh tokens
    QVERIFY(ws.cache().key_valid_suffix());
    const int64_t n = ws.tokens();
    at::Tensor gap = ws.cache().key_valid(0).new_ones({c.num_layers, c.num_kv_heads, n});
    gap[c.num_layers - 1][c.num_kv_heads - 1][n - 2] = false;
    ws.cache().set_key_valid(gap);
    QVERIFY(!ws.cache().key_valid_suffix());
    seen.clear();
    feed(d, ws, {3}, [&](const LayerView& v) { seen.push_back(v.kv.key_valid_suffix); });
    QCOMPARE(seen, std::vector<bool>(static_cast<size_t>(c.num_layers), false));
    ws.cache().set_key_valid(at::Tensor());
    QVERIFY(ws.cache().key_valid_suffix());
  }

  // per_head=2 (Ada-KV): after a prefill past the budget each layer keeps exactly M_l·H_kv
  // (head, token) pairs, and with M_l below the budget (the slots) heads keep different numbers,
  // none more than the budget; the peak stays under budget + block + |patch|; decode through the
  // budget still runs. Without layer budgets every head fills the budget: per_head=1's plan.
  void jointSelectionKeepsTheLayerBudget_data() {
    QTest::addColumn<int>("layers");
    QTest::newRow("uniform M") << 0;
    QTest::newRow("layers=") << 1;                 // every layer ranked in one joint selection
    QTest::newRow("a layer below the tail") << 2;  // its tail differs: ranked layer by layer
  }
  void jointSelectionKeepsTheLayerBudget() {
    QFETCH(int, layers);
    const bool layer_budgets = layers > 0;
    const Decoder& d = decoder("llama-gqa");
    const ModelConfig& c = d.config();
    const int64_t budget = 48, block = 16, patch = 9;
    // Whole blocks, and M_0 + block past the budget: the last block ends with a shrink (the
    // runner shrinks only when the slots pass the budget; until then a layer below its budget
    // also holds the fresh tokens).
    const auto prompt = test::token_ids(13 * block, 7);
    std::vector<int64_t> m(static_cast<size_t>(c.num_layers), budget);
    if (layer_budgets) m = {40, layers == 1 ? 20 : 6};
    at::Tensor slots[2];
    for (const int64_t per_head : {1, 2}) {
      EpiCacheOptions o;
      o.per_head = per_head;
      o.tail = 8;
      EpiCachePolicy policy(o);
      policy.set_budget(budget);
      policy.set_patch(test::token_ids(patch, 6));
      if (layer_budgets) policy.set_layer_budgets(m);
      KvWorkingSet ws(shape_of(c), budget + block + patch, d.dtype(), d.device(), c.max_positions);
      gpu::DeviceTimeline timeline(d.device());
      policy.begin_request(ws.info());
      ws.reset_peak();
      prefill(d, policy, ws, prompt, block, timeline, nullptr);
      QVERIFY(ws.peak_tokens() <= budget + block + patch);
      QVERIFY(ws.tokens() <= budget);
      slots[per_head - 1] = ws.slot_stream();
      if (per_head == 1) continue;
      const at::Tensor held = ws.slot_stream().ge(0);  // [L, H, n]
      bool differ = false;
      for (int64_t l = 0; l < c.num_layers; ++l) {
        QCOMPARE(held[l].sum().item<int64_t>(), m[l] * c.num_kv_heads);
        const at::Tensor per_head_count = held[l].sum(1);
        differ =
            differ || per_head_count.max().item<int64_t>() != per_head_count.min().item<int64_t>();
        QVERIFY(per_head_count.max().item<int64_t>() <= budget);
      }
      QCOMPARE(differ, layer_budgets);
      // Every kept token is a distinct stream token per head, the last one included.
      const at::Tensor s = ws.slot_stream();
      for (int64_t h = 0; h < c.num_kv_heads; ++h) {
        const at::Tensor list = s[0][h].index({s[0][h].ge(0)});
        QCOMPARE(std::get<0>(at::_unique(list)).numel(), list.numel());
        QCOMPARE(list[-1].item<int64_t>(), static_cast<int64_t>(prompt.size()) - 1);
      }
      // Decode past the budget (shrinks at decode scale the layer budgets).
      GenerationOptions options;
      options.max_new_tokens = 40;
      options.stop_at_eos = false;
      options.sampling.temperature = 0;
      const GenerationResult r = generate(d, policy, ws, prompt, {11, 12}, options, nullptr);
      QCOMPARE(static_cast<int64_t>(r.tokens.size()), int64_t{40});
      QVERIFY(r.peak_kv_tokens <= budget + block + patch);
    }
    if (!layer_budgets) QVERIFY(at::equal(slots[0], slots[1]));
  }

  // A budget above the history evicts nothing: per_head=2 decodes full KV's tokens.
  void jointSelectionAboveTheHistoryEqualsFull() {
    const Decoder& d = decoder("qwen3-qknorm");
    const ModelConfig& c = d.config();
    const auto prompt = test::token_ids(70, 8);
    const GenerationOptions options = greedy(12);
    FullPolicy full;
    KvWorkingSet full_ws(shape_of(c), 0, d.dtype(), d.device(), c.max_positions);
    const GenerationResult want = generate(d, full, full_ws, {}, prompt, options, nullptr);
    auto policy = make_policy("epicache:per_head=2,layers=200,150");
    policy->set_budget(200);
    KvWorkingSet ws(shape_of(c), 200 + 16, d.dtype(), d.device(), c.max_positions);
    const GenerationResult got = generate(d, *policy, ws, {}, prompt, options, nullptr);
    QCOMPARE(got.tokens, want.tokens);
    QCOMPARE(got.evicted_tokens, int64_t{0});
  }

  // The store keeps a ragged working set's empty slots (-1 in the manifest) and restores them
  // empty: same slots, same validity, same logits for the next tokens.
  void storeRestoresARaggedWorkingSet() {
    LoadedModel model =
        load_model({test::fixture_model("llama-gqa"), "", 0}, choose_device("cpu", "f32"), {});
    const Decoder& d = *model.decoder;
    QTemporaryDir profile;
    ChatSession original(model);
    original.keep_for_store(true);  // what a plan drops is captured for the store first
    GenerationOptions options;
    options.max_new_tokens = 6;
    options.stop_at_eos = false;
    original.reply("Tell me about rivers and the sea.", options, {});
    KvWorkingSet& ws = original.working_set();
    const KeepPlan plan = ragged_plan(d.config().num_layers, d.config().num_kv_heads, ws.tokens());
    ws.apply(plan, d.rope().inverse_frequencies());
    {
      storage::Database db(profile.path().toStdString());
      ConversationStore(db).save("ragged", original);
    }
    ChatSession restored(model);
    {
      storage::Database db(profile.path().toStdString());
      const auto r = ConversationStore(db).restore("ragged", restored);
      QVERIFY(r.has_value());
      QVERIFY2(r->kv_restored, r->rebuild_reason.c_str());
    }
    const KvWorkingSet& back = restored.working_set();
    QVERIFY(at::equal(back.slot_stream(), ws.slot_stream()));
    QVERIFY(back.cache().key_valid(0).defined());
    for (int64_t l = 0; l < d.config().num_layers; ++l)
      QVERIFY(at::equal(back.cache().key_valid(l), ws.cache().key_valid(l)));
    KvWorkingSet a(shape_of(d.config()), 0, d.dtype(), d.device(), d.config().max_positions);
    KvWorkingSet b(shape_of(d.config()), 0, d.dtype(), d.device(), d.config().max_positions);
    a.assign(ws);
    b.assign(back);
    const auto next = test::token_ids(4, 9);
    const double diff = max_diff(feed(d, a, next).logits, feed(d, b, next).logits);
    QVERIFY2(diff < 1e-4, qPrintable(QString("logits after restore: %1").arg(diff)));
  }

  // Decode-time retrieval over a ragged working set (issue 17 composed with issue 15's head-wise
  // plans): each head's units hold only the slots it sees, so a budget covering the pool decodes
  // the ragged set's own logits, and at a small budget what a hidden slot holds changes nothing,
  // on the per-layer path and the recorded step alike.
  void retrievalServesEachHeadItsOwnSlots() {
    const Decoder& d = decoder("llama-gqa");
    const ModelConfig& c = d.config();
    const int64_t history = 160, steps = 40;
    const auto fed = test::token_ids(steps, 3);
    // The ragged working set; `poison`: its hidden slots then hold large keys and values.
    const auto ragged_set = [&](bool poison) {
      auto ws = std::make_unique<KvWorkingSet>(shape_of(c), history + steps + 1, d.dtype(),
                                               d.device(), c.max_positions);
      feed(d, *ws, test::token_ids(history, 2));
      ws->apply(ragged_plan(c.num_layers, c.num_kv_heads, history), d.rope().inverse_frequencies());
      for (int64_t l = 0; poison && l < c.num_layers; ++l) {
        const at::Tensor hidden = ws->cache().key_valid(l).logical_not().unsqueeze(-1);
        ws->cache().keys(l).masked_fill_(hidden, 40.0);
        ws->cache().values(l).masked_fill_(hidden, 1e3);
      }
      return ws;
    };
    const auto plain = ragged_set(false);
    const int64_t n = plain->tokens(), sinks = retrieval_settings(1).sinks;
    const auto want = decode(d, *plain, fed, nullptr);
    // Kinds: 0 LouisKV at every step, 1 Quest's pages, 2 LouisKV adaptive (mixed decisions).
    const auto make = [](int kind, int64_t budget) -> std::unique_ptr<RetrievalPolicy> {
      LouisKvOptions o;
      o.tau = 0.1;
      if (kind == 0) o.stride = 1;
      if (kind == 1) return std::make_unique<PageRetrievalPolicy>(4, retrieval_settings(budget));
      return std::make_unique<LouisKvPolicy>(o, retrieval_settings(budget));
    };
    for (int kind = 0; kind < 3; ++kind) {
      const std::string what = "kind " + std::to_string(kind);
      // A budget above the pool, retrieving at every step: the ragged set's own logits (a head
      // whose units fill fewer region slots than another's hides the rest).
      if (kind != 2) {
        const auto ws = ragged_set(true);
        const auto policy = make(kind, 400);
        RetrievalKvSource source(*policy, ws->cache(), steps, &ws->cache());
        const double diff = max_diff(want, decode(d, *ws, fed, &source));
        QVERIFY2(diff < 2e-4,
                 (what + " covering budget, max diff " + std::to_string(diff)).c_str());
        QVERIFY(source.stats().offloaded_units > 0);
        // Each head's units hold exactly its visible prompt tokens past the sinks, then the same
        // offloaded ones.
        for (int64_t l = 1; l < c.num_layers; ++l) {
          const at::Tensor shown =
              plain->cache().key_valid(l)[0].narrow(1, sinks, n - sinks).sum(1).to(at::kLong);
          const at::Tensor extra = source.unit_sizes(l).sum(1) - shown;
          QVERIFY(shown.min().item<int64_t>() < shown.max().item<int64_t>());  // really ragged
          QVERIFY(extra.eq(extra[0]).all().item<bool>());
          QVERIFY(extra[0].item<int64_t>() > 0);
        }
      }
      // A small budget, below every head's rows: hidden slots' contents change nothing, and the
      // recorded step equals the per-layer path.
      const int64_t budget = 16;
      const auto clean_ws = ragged_set(false);
      const auto clean_policy = make(kind, budget);
      RetrievalKvSource clean(*clean_policy, clean_ws->cache(), steps, &clean_ws->cache());
      const auto expect = decode(d, *clean_ws, fed, &clean);
      QVERIFY(max_diff(want, expect) > 1e-3);  // the budget does leave tokens out

      const auto poisoned_ws = ragged_set(true);
      const auto poisoned_policy = make(kind, budget);
      RetrievalKvSource poisoned(*poisoned_policy, poisoned_ws->cache(), steps,
                                 &poisoned_ws->cache());
      const double diff = max_diff(expect, decode(d, *poisoned_ws, fed, &poisoned));
      QVERIFY2(diff < 1e-5,
               (what + " hidden slots' contents, max diff " + std::to_string(diff)).c_str());

      const auto recorded_ws = ragged_set(true);
      const auto recorded_policy = make(kind, budget);
      RetrievalKvSource recorded(*recorded_policy, recorded_ws->cache(), steps,
                                 &recorded_ws->cache());
      QVERIFY(recorded.recordable());
      StaticDecodeStep step(d, recorded_ws->cache());
      step.attach(&recorded);
      std::vector<at::Tensor> got;
      for (int64_t i = 0; i < steps; ++i)
        got.push_back(step.step(fed[static_cast<size_t>(i)], n + i).clone());
      step.attach(nullptr);
      const double step_diff = max_diff(expect, got);
      QVERIFY2(step_diff < 1e-4,
               (what + " recorded step, max diff " + std::to_string(step_diff)).c_str());
      const RetrievalStats &a = clean.stats(), &b = recorded.stats();
      QCOMPARE(b.retrievals, a.retrievals);
      QCOMPARE(b.loaded_rows, a.loaded_rows);
      QCOMPARE(b.offloaded_units, a.offloaded_units);
      if (kind == 2)
        QVERIFY(a.retrievals > a.retrieval_layers && a.retrievals < steps * a.retrieval_layers);
    }
  }

  // `epicache:per_head=2+louiskv`: head-wise eviction, then decode-time retrieval over the ragged
  // set; with a retrieval budget above the set it decodes per_head=2's own tokens.
  void headWiseEpiCacheComposesWithRetrieval() {
    const Decoder& d = decoder("qwen3-qknorm");
    const ModelConfig& c = d.config();
    const auto prompt = test::token_ids(150, 8);
    const GenerationOptions options = greedy(16);
    const auto run = [&](const std::string& spec, KvWorkingSet& ws) {
      auto policy = make_policy(spec);
      policy->set_budget(64);
      return generate(d, *policy, ws, {}, prompt, options, nullptr);
    };
    KvWorkingSet alone_ws(shape_of(c), 64 + 16 + 32, d.dtype(), d.device(), c.max_positions);
    const GenerationResult alone = run("epicache:per_head=2,patch=2,layers=40,32", alone_ws);
    QVERIFY(alone.evicted_tokens > 0);
    QVERIFY(alone_ws.cache().key_valid(0).defined());  // the plan was ragged
    KvWorkingSet ws(shape_of(c), 64 + 16 + 32, d.dtype(), d.device(), c.max_positions);
    const GenerationResult got =
        run("epicache:per_head=2,patch=2,layers=40,32+louiskv:sinks=4,window=8,budget=400,full_"
            "layers=1,offload=0",
            ws);
    QCOMPARE(got.tokens, alone.tokens);
    QCOMPARE(got.retrieval.steps, int64_t{15});
    QVERIFY(got.retrieval.retrievals > 0);
  }

  void registryReadsPerHeadAndLayerBudgets() {
    auto p = make_policy("epicache:per_head=2,layers=400,600,500,patch=2");
    auto* e = dynamic_cast<EpiCachePolicy*>(p.get());
    QVERIFY(e);
    QCOMPARE(e->options().per_head, int64_t{2});
    QCOMPARE(e->options().patch, PatchKind::kSnapKv);
    QCOMPARE(e->layer_budgets(), (std::vector<int64_t>{400, 600, 500}));
    QCOMPARE(p->spec(), std::string("epicache:patch=2,per_head=2,layers=400,600,500"));
    QCOMPARE(make_policy(p->spec())->spec(), p->spec());
    QCOMPARE(make_policy("epicache:layers=7")->spec(), std::string("epicache:layers=7"));
    QVERIFY_EXCEPTION_THROWN(make_policy("epicache:per_head=3"), std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(make_policy("epicache:layers=4,x"), std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(make_policy("epicache:layers="), std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(make_policy("snapkv:layers=4"), std::invalid_argument);
    QVERIFY(make_policy("epicache:per_head=2,layers=400,600,500+louiskv"));
    QVERIFY(make_policy("epicache:per_head=1+louiskv"));
    // EpiCache's window scores itself (no probe probabilities), with decode retrieval too;
    // SnapKV's mean takes the runner's probabilities.
    QVERIFY(!p->probe_probabilities());
    QVERIFY(!make_policy("epicache:patch=2+louiskv")->probe_probabilities());
    QVERIFY(make_policy("snapkv")->probe_probabilities());
    // Budgets for another number of layers: a clear error at the first shrink.
    EpiCachePolicy wrong;
    wrong.set_budget(8);
    wrong.set_layer_budgets({8, 8, 8});
    WorkingSetInfo info;
    info.tokens = 12;
    info.layers = 2;
    info.kv_heads = 2;
    QVERIFY_EXCEPTION_THROWN(wrong.shrink(info, 8), std::invalid_argument);
  }
};

QTEST_GUILESS_MAIN(RaggedPlanTest)
#include "test_ragged_plan.moc"
