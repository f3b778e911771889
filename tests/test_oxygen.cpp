// OxyGen (issue 18): generation states decoded in a ragged batch equal each decoded alone; a
// request interrupted, stored in host memory and resumed equals one never interrupted, without
// recomputing; the frame loop prefills a frame's shared observation once, gives the same tokens
// as isolated execution, meets deadlines at a feasible rate and counts misses at an infeasible
// one (an injected clock with a cost model); a memory note of the household world becomes a
// memory segment.
#include <QtTest>

#include "app/cli/oxygen_household.h"
#include "core/engine/batched_decode.h"
#include "core/engine/frame_loop.h"
#include "core/engine/generator.h"
#include "core/engine/loaded_model.h"
#include "core/kv/cache_kv_source.h"
#include "core/runtime/static_decode_step.h"
#include "core/trace/engine_observer.h"
#include "gpu/device_timeline.h"
#include "support/fixture_models.h"

using namespace engram;

namespace {

GenerationLimits no_stop(int64_t n) {
  GenerationLimits l;
  l.max_new_tokens = n;
  l.stop_at_eos = false;
  return l;
}

std::shared_ptr<GenerationState> prefilled(const Decoder& d, int64_t id,
                                           const std::vector<int64_t>& prompt, int64_t n) {
  const ModelConfig& c = d.config();
  auto s = std::make_shared<GenerationState>(id, "t", no_stop(n));
  gpu::DeviceTimeline timeline(d.device());
  s->prefill(
      d,
      std::make_unique<KvCache>(KvCacheShape{c.num_layers, c.num_kv_heads, c.head_dim}, 1,
                                static_cast<int64_t>(prompt.size()) + n, d.dtype(), d.device()),
      prompt, timeline, nullptr);
  return s;
}

// A world of synthetic prompts: a common observation of `shared` ids per frame, the action and
// two language tasks with suffixes of their own.
class SyntheticWorld : public FrameWorld {
 public:
  // The first `stable` ids of the observation are the same in every frame.
  SyntheticWorld(int64_t frames, int64_t shared, int64_t stable = 0)
      : frames_(frames), shared_(shared), stable_(stable) {}
  std::optional<Frame> observe(int64_t index) override {
    if (index >= frames_) return std::nullopt;
    std::vector<int64_t> obs = test::token_ids(stable_, 99);
    for (int64_t t : test::token_ids(shared_ - stable_, 10 + index))
      obs.push_back(t);
    auto with = [&](int64_t salt, int64_t n) {
      std::vector<int64_t> ids = obs;
      for (int64_t t : test::token_ids(n, salt))
        ids.push_back(t);
      return ids;
    };
    Frame f;
    f.action = {"action", with(1, 3), no_stop(4)};
    f.language.push_back({"narration", with(2, 5), no_stop(9)});
    if (index % 2 == 0) f.language.push_back({"memory_note", with(3, 7), no_stop(13)});
    return f;
  }
  void act(int64_t, const GenerationState& a) override { actions.push_back(a.tokens()); }
  void language_done(int64_t, const GenerationState& r) override {
    language[r.task() + std::to_string(r.id())] = r.tokens();
    finished.push_back(r.tokens());
  }
  std::vector<std::vector<int64_t>> actions;
  std::vector<std::vector<int64_t>> finished;
  std::map<std::string, std::vector<int64_t>> language;

 private:
  int64_t frames_;
  int64_t shared_;
  int64_t stable_;
};

// Time advances only by a cost model: deadlines are deterministic.
class CostClock : public FrameClock {
 public:
  double now_ms() override { return now_; }
  void wait_until_ms(double t) override { now_ = std::max(now_, t); }
  void charge(FrameWork work, int64_t rows, int64_t tokens) override {
    if (work == FrameWork::kPrefill) now_ += 2.0 + 0.05 * static_cast<double>(tokens);
    if (work == FrameWork::kDecode) now_ += 3.0;
    if (work == FrameWork::kBatchedStep) now_ += 3.0 + 1.0 * static_cast<double>(rows);
  }

 private:
  double now_ = 0;
};

struct FrameEvents : EngineObserver {
  std::vector<LayerInterval> intervals;
  void on_layer_interval(const LayerInterval& i) override { intervals.push_back(i); }
};

}  // namespace

class OxygenTest : public QObject {
  Q_OBJECT

  test::FixtureModels models_;
  const Decoder& decoder() const { return models_.decoder("llama-gqa"); }

 private Q_SLOTS:
  void initTestCase() { models_.load({"llama-gqa"}); }

  // Three requests of different lengths stepped together give, token for token, what each gives
  // alone, and logits within f32 rounding.
  void batchedRaggedDecodeEqualsAlone() {
    const Decoder& d = decoder();
    const std::vector<std::vector<int64_t>> prompts = {
        test::token_ids(7, 1), test::token_ids(19, 2), test::token_ids(12, 3)};
    const int64_t n = 10;
    std::vector<std::shared_ptr<GenerationState>> alone, together;
    for (size_t i = 0; i < prompts.size(); ++i) {
      alone.push_back(prefilled(d, static_cast<int64_t>(i), prompts[i], n));
      together.push_back(prefilled(d, static_cast<int64_t>(i), prompts[i], n));
    }
    gpu::DeviceTimeline timeline(d.device());
    BatchedStates batch(together, 4);
    QCOMPARE(batch.rows(), 3);
    // Padding of the shorter rows: empty slots with zero KV (masked slots get probability 0, and
    // 0 x an uninitialised NaN would still poison the row).
    const KvCache& kv = *batch.kv();
    QCOMPARE(kv.max_length(), int64_t{19});
    QVERIFY(kv.positions()[0].narrow(0, 7, 12).eq(-1).all().item<bool>());
    for (int64_t l = 0; l < kv.shape().layers; ++l) {
      QVERIFY(kv.keys(l)[0].narrow(1, 7, 12).eq(0).all().item<bool>());
      QVERIFY(kv.values(l)[2].narrow(1, 12, 7).eq(0).all().item<bool>());
    }
    for (int64_t step = 0; step < n; ++step) {
      std::vector<at::Tensor> before;
      for (auto& s : together)
        before.push_back(s->last_logits().clone());
      batch.step(d, timeline, nullptr);
      for (size_t i = 0; i < alone.size(); ++i) {
        const double err = (before[i] - alone[i]->last_logits()).abs().max().item<double>();
        QVERIFY2(err < 1e-5, qPrintable(QString("row %1 step %2: %3").arg(i).arg(step).arg(err)));
        alone[i]->decode_alone(d, 1, timeline, nullptr);
      }
    }
    for (size_t i = 0; i < alone.size(); ++i) {
      QCOMPARE(together[i]->tokens(), alone[i]->tokens());
      QVERIFY(together[i]->done());
    }
    batch.unbatch();
  }

  // The batch's rows are fixed slots: a finished member's row waits without growing, a member
  // that leaves frees its row, one that joins takes it and the storage stays, so the recorded
  // step (its code runs directly on the CPU) is recorded once; every member gets the tokens it
  // gets alone, and so does a request decoded alone through a recorded batch-1 step.
  void fixedRowsRecordedStepEqualsAlone() {
    const Decoder& d = decoder();
    const std::vector<std::vector<int64_t>> prompts = {
        test::token_ids(9, 1), test::token_ids(17, 2), test::token_ids(6, 3),
        test::token_ids(10, 4)};
    const std::vector<int64_t> limits = {8, 3, 8, 8};  // request 1 is done after 3 tokens
    gpu::DeviceTimeline timeline(d.device());
    std::vector<std::shared_ptr<GenerationState>> alone, together, solo;
    for (size_t i = 0; i < prompts.size(); ++i) {
      alone.push_back(prefilled(d, static_cast<int64_t>(i), prompts[i], limits[i]));
      together.push_back(prefilled(d, static_cast<int64_t>(i), prompts[i], limits[i]));
      solo.push_back(prefilled(d, static_cast<int64_t>(i), prompts[i], limits[i]));
      alone[i]->decode_alone(d, limits[i], timeline, nullptr);
    }
    StaticDecodeStep solo_step(d, *solo[0]->kv());
    for (size_t i = 0; i < solo.size(); ++i) {
      solo[i]->decode_alone(d, limits[i], timeline, nullptr, &solo_step);
      QCOMPARE(solo[i]->tokens(), alone[i]->tokens());
    }

    BatchedStates batch({together[0], together[1], together[2]}, 4);
    batch.set_recorded_step(BatchedStates::RecordedStep::kAlways);
    QCOMPARE(batch.kv()->batch(), int64_t{4});  // rows in powers of two: one is free
    const void* storage = batch.kv()->keys(0).data_ptr();
    for (int i = 0; i < 3; ++i)
      batch.step(d, timeline, nullptr);
    QVERIFY(together[1]->done());
    const int64_t waiting = batch.kv()->lengths()[1];
    batch.step(d, timeline, nullptr);
    QCOMPARE(batch.kv()->lengths()[1], waiting);
    QCOMPARE(batch.kv()->lengths()[3], int64_t{0});  // the free row too
    batch.rebatch({together[0], together[2], together[3]}, 4);
    QCOMPARE(batch.rows(), int64_t{3});
    QCOMPARE(together[1]->location(), StateLocation::kReleased);
    QCOMPARE(together[3]->location(), StateLocation::kBatched);
    QCOMPARE(batch.kv()->keys(0).data_ptr(), storage);
    while (batch.active_rows() > 0)
      batch.step(d, timeline, nullptr);
    QCOMPARE(batch.recordings(), int64_t{1});
    for (size_t i = 0; i < together.size(); ++i)
      QCOMPARE(together[i]->tokens(), alone[i]->tokens());
    batch.unbatch();
  }

  // New requests spawned from a shared prefix prefill their suffixes (3 and 8 ids) in one forward
  // over the batch's rows, beside a member already decoding: each gets the first logits and the
  // tokens of its own prompt prefilled alone, and the member's row keeps its length.
  void spawnPrefillsSuffixesInOneForward() {
    const Decoder& d = decoder();
    const ModelConfig& c = d.config();
    const auto prefix = test::token_ids(21, 5);
    const std::vector<std::vector<int64_t>> suffixes = {test::token_ids(3, 6),
                                                        test::token_ids(8, 7)};
    gpu::DeviceTimeline timeline(d.device());
    KvCache shared(KvCacheShape{c.num_layers, c.num_kv_heads, c.head_dim}, 1, 21, d.dtype(),
                   d.device());
    prefill(d, shared, prefix, 0, timeline, nullptr);
    auto member = prefilled(d, 0, test::token_ids(14, 8), 6);
    BatchedStates batch({member}, 4);
    batch.step(d, timeline, nullptr);
    const int64_t member_length = batch.kv()->lengths()[0];
    std::vector<BatchedStates::Spawn> spawns;
    std::vector<std::shared_ptr<GenerationState>> alone;
    for (size_t i = 0; i < suffixes.size(); ++i) {
      spawns.push_back(
          {std::make_shared<GenerationState>(static_cast<int64_t>(1 + i), "t", no_stop(6)),
           suffixes[i]});
      std::vector<int64_t> whole = prefix;
      whole.insert(whole.end(), suffixes[i].begin(), suffixes[i].end());
      alone.push_back(prefilled(d, 1 + static_cast<int64_t>(i), whole, 6));
    }
    batch.spawn(d, shared, 0, spawns, 4, timeline);
    QCOMPARE(batch.rows(), int64_t{3});
    QCOMPARE(batch.kv()->lengths()[0], member_length);
    for (size_t i = 0; i < spawns.size(); ++i) {
      const GenerationState& s = *spawns[i].state;
      QCOMPARE(s.location(), StateLocation::kBatched);
      QCOMPARE(s.next_position(), alone[i]->next_position());
      const double err = (s.last_logits() - alone[i]->last_logits()).abs().max().item<double>();
      QVERIFY2(err < 1e-5, qPrintable(QString("spawn %1: %2").arg(i).arg(err)));
    }
    while (batch.active_rows() > 0)
      batch.step(d, timeline, nullptr);
    for (size_t i = 0; i < spawns.size(); ++i) {
      alone[i]->decode_alone(d, 6, timeline, nullptr);
      QCOMPARE(spawns[i].state->tokens(), alone[i]->tokens());
    }
    batch.unbatch();
  }

  // Decode 4 tokens in one batch, stop, store in host memory, load back, continue in a batch of
  // other companions: the same tokens as 14 tokens decoded alone in one go, and every generated
  // token was fed exactly once (the KV holds prompt + fed tokens: nothing recomputed).
  void interruptedAndResumedEqualsUninterrupted() {
    const Decoder& d = decoder();
    const auto prompt = test::token_ids(23, 7);
    const int64_t n = 14;
    auto reference = prefilled(d, 1, prompt, n);
    gpu::DeviceTimeline timeline(d.device());
    reference->decode_alone(d, n, timeline, nullptr);
    QCOMPARE(static_cast<int64_t>(reference->tokens().size()), n);

    auto resumed = prefilled(d, 2, prompt, n);
    auto companion = prefilled(d, 3, test::token_ids(5, 8), 30);
    BatchedStates batch({resumed, companion}, 4);
    for (int i = 0; i < 4; ++i)
      batch.step(d, timeline, nullptr);
    batch.unbatch();
    QCOMPARE(resumed->location(), StateLocation::kDevice);
    resumed->store_to_host();
    QCOMPARE(resumed->location(), StateLocation::kHost);
    QVERIFY(resumed->kv()->device().is_cpu());
    resumed->load_to_device(d.device());
    auto late = prefilled(d, 4, test::token_ids(31, 9), 30);
    batch.rebatch({late, resumed, companion}, 4);
    QCOMPARE(batch.rows(), 3);
    while (!resumed->done())
      batch.step(d, timeline, nullptr);
    QCOMPARE(resumed->tokens(), reference->tokens());
    // The last token is chosen, not fed.
    QCOMPARE(resumed->next_position(), static_cast<int64_t>(prompt.size()) + n - 1);
    // A finished member leaves at the next rebatch with its KV dropped.
    batch.rebatch({late, resumed, companion}, 4);
    QCOMPARE(batch.rows(), 2);
    QCOMPARE(resumed->location(), StateLocation::kReleased);
    batch.unbatch();
  }

  // Unified execution prefills each frame's observation once (the report and the frame events
  // say so), computes fewer prompt tokens than isolated execution, and every request's tokens are
  // those of isolated execution.
  void sharedPrefillOnceSameTokensAsIsolated() {
    const Decoder& d = decoder();
    const int64_t frames = 4, shared = 40;
    SyntheticWorld isolated_world(frames, shared), unified_world(frames, shared);
    CostClock c1, c2;
    FrameLoopOptions o;
    o.mode = ExecutionMode::kIsolated;
    const FrameLoopReport iso = run_frame_loop(d, isolated_world, c1, o);
    o.mode = ExecutionMode::kUnified;
    o.language_steps = 3;
    FrameEvents events;
    o.observer = &events;
    const FrameLoopReport uni = run_frame_loop(d, unified_world, c2, o);
    QCOMPARE(static_cast<int64_t>(uni.frames.size()), frames);
    for (const FrameRecord& f : uni.frames) {
      QCOMPARE(f.shared_tokens, shared);
      const int64_t suffixes = 3 + 5 + (f.index % 2 == 0 ? 7 : 0);
      QCOMPARE(f.prefill_tokens, shared + suffixes);
    }
    for (const FrameRecord& f : iso.frames) {
      const int64_t prompts = 3 * shared + 3 + 5 + (f.index % 2 == 0 ? 7 + shared : 0) - shared;
      QCOMPARE(f.prefill_tokens, prompts);
    }
    int prefill_events = 0;
    for (const LayerInterval& i : events.intervals) {
      QCOMPARE(i.phase, std::string("frame"));
      if (i.what == "prefill") {  // the observation and the action's suffix, one forward
        ++prefill_events;
        QCOMPARE(i.tokens, shared + 3);
      }
    }
    QCOMPARE(prefill_events, frames);
    QVERIFY(uni.max_batch_rows >= 2);  // requests of different frames decoded together
    QCOMPARE(unified_world.actions, isolated_world.actions);
    QCOMPARE(unified_world.language, isolated_world.language);
    QCOMPARE(uni.language_tokens, iso.language_tokens);
    for (const LanguageRecord& l : uni.language)
      QVERIFY(l.frame_done >= l.frame_started);
  }

  // The frame loop through the recorded steps (their code runs directly on the CPU): the action
  // and isolated requests through the batch-1 step over caches that keep their storage, the
  // language requests through the batched step; every token as the per-layer path gives it, and
  // the steps are recorded a few times per run, not per frame.
  void recordedStepsGiveThePerLayerTokens() {
    const Decoder& d = decoder();
    const int64_t frames = 5, shared = 40;
    SyntheticWorld reference_world(frames, shared, 30);
    CostClock c0;
    FrameLoopOptions o;
    o.mode = ExecutionMode::kIsolated;
    o.recorded_step = BatchedStates::RecordedStep::kNever;
    const FrameLoopReport reference = run_frame_loop(d, reference_world, c0, o);
    QCOMPARE(reference.graph_recordings, int64_t{0});
    o.recorded_step = BatchedStates::RecordedStep::kAlways;
    for (ExecutionMode mode : {ExecutionMode::kIsolated, ExecutionMode::kUnified}) {
      SyntheticWorld world(frames, shared, 30);
      CostClock clock;
      o.mode = mode;
      o.language_steps = 2;
      const FrameLoopReport r = run_frame_loop(d, world, clock, o);
      QCOMPARE(world.actions, reference_world.actions);
      QCOMPARE(world.language, reference_world.language);
      QVERIFY(r.graph_recordings >= 1);
      QVERIFY2(r.graph_recordings < frames,
               qPrintable(QString("%1 recordings").arg(r.graph_recordings)));
    }
  }

  // With observations that start alike, each frame computes only the part of its prefix that
  // differs from the last frame's (the rest of the KV is kept), and the tokens stay those of
  // isolated execution.
  void prefixReusedAcrossFrames() {
    const Decoder& d = decoder();
    const int64_t frames = 4, shared = 40, stable = 30;
    SyntheticWorld isolated_world(frames, shared, stable), unified_world(frames, shared, stable);
    CostClock c1, c2;
    FrameLoopOptions o;
    o.mode = ExecutionMode::kIsolated;
    run_frame_loop(d, isolated_world, c1, o);
    o.mode = ExecutionMode::kUnified;
    const FrameLoopReport uni = run_frame_loop(d, unified_world, c2, o);
    for (const FrameRecord& f : uni.frames) {
      QCOMPARE(f.shared_tokens, shared);
      QCOMPARE(f.reused_tokens, f.index == 0 ? 0 : stable);
      const int64_t suffixes = 3 + 5 + (f.index % 2 == 0 ? 7 : 0);
      QCOMPARE(f.prefill_tokens, shared - f.reused_tokens + suffixes);
    }
    QCOMPARE(unified_world.actions, isolated_world.actions);
    QCOMPARE(unified_world.language, isolated_world.language);
  }

  // At 20 Hz (50 ms frames; prefill + action cost ~27 ms on the cost clock) no action misses its
  // deadline and language fills the rest of each frame; at 100 Hz every frame misses.
  void deadlinesMetAtFeasibleRateMissedAtInfeasible() {
    const Decoder& d = decoder();
    const int64_t frames = 6;
    {
      SyntheticWorld world(frames, 40);
      CostClock clock;
      FrameLoopOptions o;
      o.action_hz = 20;
      const FrameLoopReport r = run_frame_loop(d, world, clock, o);
      QCOMPARE(r.deadline_misses, int64_t{0});
      QVERIFY(r.worst_action_latency_ms <= 50.0);
      int64_t steps = 0;
      for (const FrameRecord& f : r.frames) {
        steps += f.language_steps;
        QVERIFY2(f.end_ms <= f.tick_ms + 50.0 + 1e-9,
                 qPrintable(QString("frame %1 ends at %2").arg(f.index).arg(f.end_ms)));
      }
      QVERIFY(steps > 0);
      QCOMPARE(r.frames.back().tick_ms, 50.0 * (frames - 1));
      for (const LanguageRecord& l : r.language)
        QVERIFY(l.frame_done >= 0);  // the drain finished them all
    }
    {
      SyntheticWorld world(frames, 40);
      CostClock clock;
      FrameLoopOptions o;
      o.action_hz = 100;
      const FrameLoopReport r = run_frame_loop(d, world, clock, o);
      QCOMPARE(r.deadline_misses, frames);
    }
  }

  // On the household world with the bundled model, unified execution gives every request the
  // tokens isolated execution gives it.
  void householdUnifiedEqualsIsolated() {
    LoadedModel tiny = load_model(
        {test::test_data() / ".." / ".." / "resources" / "models" / "engram-tiny", "", 0},
        choose_device("cpu", "f32"), {});
    cli::HouseholdFrameOptions ho;
    ho.chat_every = 3;
    ho.note_every = 2;
    std::vector<std::vector<cli::FinishedText>> texts;
    for (ExecutionMode m : {ExecutionMode::kIsolated, ExecutionMode::kUnified}) {
      cli::HouseholdFrames world(tiny, ho);
      SteadyFrameClock clock;
      FrameLoopOptions o;
      o.mode = m;
      o.language_steps = 4;
      run_frame_loop(*tiny.decoder, world, clock, o, 4);
      std::vector<cli::FinishedText> t = world.finished();
      std::sort(t.begin(), t.end(), [](const auto& a, const auto& b) {
        return std::tie(a.task, a.text) < std::tie(b.task, b.text);
      });
      texts.push_back(t);
    }
    QCOMPARE(texts[0].size(), texts[1].size());
    for (size_t i = 0; i < texts[0].size(); ++i)
      QCOMPARE(texts[1][i].text, texts[0][i].text);
  }

  // The household world: the action is a parsed skill line, and a memory note that finishes
  // becomes a memory segment (kind "note").
  void memoryNoteBecomesMemorySegment() {
    LoadedModel tiny = load_model(
        {test::test_data() / ".." / ".." / "resources" / "models" / "engram-tiny", "", 0},
        choose_device("cpu", "f32"), {});
    cli::HouseholdFrameOptions ho;
    ho.narrate_every = 0;
    ho.chat_every = 0;
    ho.note_every = 1;
    ho.note_tokens = 8;
    cli::HouseholdFrames world(tiny, ho);
    SteadyFrameClock clock;
    FrameLoopOptions o;
    o.language_steps = 2;
    const FrameLoopReport r = run_frame_loop(*tiny.decoder, world, clock, o, 2);
    QCOMPARE(static_cast<int64_t>(r.frames.size()), int64_t{2});
    QCOMPARE(world.actions().size(), size_t{2});
    QVERIFY(!world.actions()[0].empty());
    QCOMPARE(world.notes().segments().size(), size_t{2});
    for (const env::MemorySegment& s : world.notes().segments()) {
      QCOMPARE(s.kind, std::string("note"));
      QVERIFY(s.text.rfind("note: ", 0) == 0);
      QCOMPARE(s.version, int64_t{1});
    }
  }
};

QTEST_GUILESS_MAIN(OxygenTest)
#include "test_oxygen.moc"
