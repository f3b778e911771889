// Layer sensitivity (EpiCache §3.2, Eq. 8–9) on fixture models: the full pass equals one causal
// forward; the block mask hides exactly what it should (a layer-1 key of a block depends on the
// sink, the window before the block and the block, nothing else); σ is exactly 1 for every layer
// when sink + window covers the text, below 1 past layer 0 when it does not, and deterministic.
#include <QtTest>

#include "core/engine/layer_sensitivity.h"
#include "core/kv/cache_kv_source.h"
#include "gpu/device_timeline.h"
#include "support/fixture_models.h"

using namespace engram;

namespace {

const std::vector<std::string> kModels = {"llama-gqa", "qwen2-bias-tied"};

// Every layer's keys from one ordinary causal forward of the whole text.
std::vector<at::Tensor> one_forward_keys(const Decoder& d, const std::vector<int64_t>& tokens) {
  const ModelConfig& c = d.config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  KvCache cache({c.num_layers, c.num_kv_heads, c.head_dim}, 1, n, d.dtype(), d.device());
  CacheKvSource source(cache);
  gpu::DeviceTimeline timeline(d.device());
  ForwardRequest req;
  req.tokens = {tokens};
  req.positions = {std::vector<int64_t>(tokens.size())};
  for (int64_t i = 0; i < n; ++i)
    req.positions[0][static_cast<size_t>(i)] = i;
  (void)d.forward(req, source, timeline, nullptr);
  std::vector<at::Tensor> keys;
  for (int64_t l = 0; l < c.num_layers; ++l)
    keys.push_back(cache.keys(l).narrow(2, 0, n).clone());
  return keys;
}

// Keys of tokens [begin, end) at `layer`.
at::Tensor span(const std::vector<at::Tensor>& keys, int64_t layer, int64_t begin, int64_t end) {
  return keys[static_cast<size_t>(layer)].narrow(2, begin, end - begin);
}

}  // namespace

class LayerSensitivityTest : public QObject {
  Q_OBJECT

  std::map<std::string, LoadedModel> models_;
  const Decoder& decoder(const std::string& name) { return *models_.at(name).decoder; }

 private Q_SLOTS:
  void initTestCase() {
    for (const std::string& name : kModels)
      models_.emplace(
          name, load_model({test::fixture_model(name), "", 0}, choose_device("cpu", "f32"), {}));
  }

  void fullPassIsTheCausalForward() {
    for (const std::string& name : kModels) {
      const auto tokens = test::token_ids(150);
      const auto reference = one_forward_keys(decoder(name), tokens);
      const auto blocks = block_pass_keys(decoder(name), tokens, {4, 8, 32}, /*restricted=*/false);
      QCOMPARE(blocks.size(), reference.size());
      for (size_t l = 0; l < blocks.size(); ++l)
        QVERIFY2(at::allclose(blocks[l], reference[l], 1e-4, 1e-5), name.c_str());
    }
  }

  void blockMaskHidesWhatLiesBetweenSinkAndWindow() {
    // Blocks of 16: block 3 (48..63) sees 0..3 (sink), 40..47 (window) and itself.
    const BlockMask mask{4, 8, 16};
    for (const std::string& name : kModels) {
      const Decoder& d = decoder(name);
      const auto tokens = test::token_ids(64);
      const auto base = block_pass_keys(d, tokens, mask, true);
      auto changed = [&](int64_t position) {
        auto other = tokens;
        other[static_cast<size_t>(position)] = tokens[static_cast<size_t>(position)] == 5 ? 6 : 5;
        const auto keys = block_pass_keys(d, other, mask, true);
        return !at::equal(span(keys, 1, 48, 64), span(base, 1, 48, 64));
      };
      // Layer 1's keys come from layer 0's attention alone: exactly what the mask shows counts.
      for (int64_t hidden : {4, 20, 39})
        QVERIFY2(!changed(hidden), name.c_str());
      for (int64_t seen : {0, 3, 40, 47, 50})
        QVERIFY2(changed(seen), name.c_str());
      // The full mask sees everything.
      auto other = tokens;
      other[20] = tokens[20] == 5 ? 6 : 5;
      QVERIFY(!at::equal(span(block_pass_keys(d, other, mask, false), 1, 48, 64),
                         span(block_pass_keys(d, tokens, mask, false), 1, 48, 64)));
    }
  }

  void sigmaIsExactlyOneWhenNothingIsCut() {
    for (const std::string& name : kModels) {
      const auto tokens = test::token_ids(200);
      // sink + window reach every block's start; one block holding everything.
      for (const BlockMask& mask :
           {BlockMask{8, 192, 40}, BlockMask{0, 0, 256}, BlockMask{4, 196, 1}}) {
        const auto sigma = measure_key_cosine(decoder(name), tokens, mask);
        QCOMPARE(static_cast<int64_t>(sigma.size()), decoder(name).config().num_layers);
        for (double s : sigma)
          QCOMPARE(s, 1.0);
      }
    }
  }

  void sigmaDropsPastLayerZeroWhenTheMaskCuts() {
    for (const std::string& name : kModels) {
      const auto sigma = measure_key_cosine(decoder(name), test::token_ids(200), {4, 16, 32});
      // Layer 0's keys come from the embeddings only: no mask can move them.
      QCOMPARE(sigma[0], 1.0);
      for (size_t l = 1; l < sigma.size(); ++l) {
        QVERIFY2(
            sigma[l] < 1.0 - 1e-6,
            qPrintable(
                QString("%1 layer %2: %3").arg(name.c_str()).arg(l).arg(sigma[l], 0, 'g', 17)));
        QVERIFY(sigma[l] > -1.0);
      }
    }
  }

  void measurementIsDeterministic() {
    const auto tokens = test::token_ids(180, 3);
    const BlockMask mask{4, 24, 48};
    const auto a = measure_key_cosine(decoder("qwen2-bias-tied"), tokens, mask);
    const auto b = measure_key_cosine(decoder("qwen2-bias-tied"), tokens, mask);
    QCOMPARE(a, b);
  }

  void calibrationRecordsTheModelAndTheMask() {
    const LoadedModel& m = models_.at("llama-gqa");
    int64_t calls = 0, last_total = 0;
    const auto tokens = test::token_ids(100);
    const LayerCalibration c =
        calibrate_layers(m, tokens, 4, 16, /*block=*/0, [&](int64_t done, int64_t total) {
          ++calls;
          QCOMPARE(done, calls);
          last_total = total;
        });
    QCOMPARE(c.model_fingerprint, m.fingerprint);
    QCOMPARE(c.model_name, m.name);
    QCOMPARE(c.block, int64_t{32});  // twice the window
    QCOMPARE(c.sink, int64_t{4});
    QCOMPARE(c.window, int64_t{16});
    QCOMPARE(c.tokens, int64_t{100});
    QCOMPARE(c.dtype, std::string("f32"));
    QCOMPARE(calls, int64_t{8});  // 4 blocks, two passes
    QCOMPARE(last_total, int64_t{8});
    QCOMPARE(c.key_cosine, measure_key_cosine(*m.decoder, tokens, {4, 16, 32}));
    QVERIFY(!c.date.empty());
    // Past the model's positions: the decoder's error, not a silent cut.
    QVERIFY_THROWS_EXCEPTION(
        std::out_of_range, calibrate_layers(m, test::token_ids(m.config.max_positions + 1), 4, 16));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, calibrate_layers(m, {}, 4, 16));
  }
};

QTEST_APPLESS_MAIN(LayerSensitivityTest)
#include "test_layer_sensitivity.moc"
