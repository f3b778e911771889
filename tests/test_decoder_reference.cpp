// The model runtime against Hugging Face transformers: f32 CPU logits of every fixture family
// (Llama GQA, Qwen2 bias + tied, Qwen3 q/k norm, Llama 3 RoPE scaling, Mistral), the greedy
// continuation token for token, and incremental decode against one full forward pass.
#include <QtTest>

#include "core/engine/generator.h"
#include "core/engine/loaded_model.h"
#include "core/kv/cache_kv_source.h"
#include "gpu/device_timeline.h"
#include "support/reference_fixture.h"

using namespace engram;

namespace {

LoadedModel load_cpu(const std::string& name) {
  return load_model({test::fixture_model(name), "", 0}, choose_device("cpu", "f32"), {});
}

at::Tensor full_forward_logits(const Decoder& d, const std::vector<int64_t>& ids) {
  const ModelConfig& c = d.config();
  KvCache cache({c.num_layers, c.num_kv_heads, c.head_dim}, 1, static_cast<int64_t>(ids.size()),
                d.dtype(), d.device());
  CacheKvSource source(cache);
  gpu::DeviceTimeline timeline(d.device());
  ForwardRequest req;
  req.tokens = {ids};
  req.positions = {std::vector<int64_t>(ids.size())};
  for (size_t i = 0; i < ids.size(); ++i)
    req.positions[0][i] = static_cast<int64_t>(i);
  req.all_logits = true;
  return d.forward(req, source, timeline, nullptr).logits[0];
}

}  // namespace

class DecoderReferenceTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void logitsMatchTransformers_data() {
    QTest::addColumn<QString>("fixture");
    for (const auto& n : test::fixture_names())
      QTest::newRow(n.c_str()) << QString::fromStdString(n);
  }

  // Metric: max |ours − transformers| over all positions and the vocabulary, divided by the
  // largest |logit| of the reference (the logit scale). Bound: 1e-4.
  void logitsMatchTransformers() {
    QFETCH(QString, fixture);
    const LoadedModel m = load_cpu(fixture.toStdString());
    const test::Reference ref = test::load_reference(fixture.toStdString());
    for (const auto& seq : ref.sequences) {
      const at::Tensor ours = full_forward_logits(*m.decoder, seq.ids);
      const at::Tensor theirs =
          at::from_blob(const_cast<float*>(seq.logits.data.data()), seq.logits.shape, at::kFloat);
      QCOMPARE(ours.sizes().vec(), theirs.sizes().vec());
      const double err = (ours - theirs).abs().max().item<double>() / seq.logit_scale;
      qInfo("%s: %zu tokens, relative max error %.3g", qPrintable(fixture), seq.ids.size(), err);
      QVERIFY2(err <= 1e-4, qPrintable(QString("relative error %1").arg(err)));
    }
  }

  void greedyContinuationMatchesTokenForToken_data() { logitsMatchTransformers_data(); }
  void greedyContinuationMatchesTokenForToken() {
    QFETCH(QString, fixture);
    const LoadedModel m = load_cpu(fixture.toStdString());
    const test::Reference ref = test::load_reference(fixture.toStdString());
    const ModelConfig& c = m.config;
    KvCache cache({c.num_layers, c.num_kv_heads, c.head_dim}, 1, 64, at::kFloat, at::kCPU);
    GenerationOptions options;
    options.max_new_tokens = static_cast<int64_t>(ref.greedy_continuation.size());
    options.stop_at_eos = false;
    const GenerationResult r = generate(*m.decoder, cache, {}, ref.greedy_prompt, options, {});
    QCOMPARE(r.tokens, ref.greedy_continuation);
  }

  void incrementalDecodeMatchesFullForward_data() { logitsMatchTransformers_data(); }
  void incrementalDecodeMatchesFullForward() {
    QFETCH(QString, fixture);
    const LoadedModel m = load_cpu(fixture.toStdString());
    const Decoder& d = *m.decoder;
    const std::vector<int64_t> ids = test::load_reference(fixture.toStdString()).sequences[0].ids;
    const at::Tensor full = full_forward_logits(d, ids);
    const ModelConfig& c = d.config();
    // Prefill 9 tokens in chunks of 4, then decode the rest one at a time.
    KvCache cache({c.num_layers, c.num_kv_heads, c.head_dim}, 1, 4, at::kFloat, at::kCPU);
    gpu::DeviceTimeline timeline(d.device());
    const std::vector<int64_t> head(ids.begin(), ids.begin() + 9);
    at::Tensor last = prefill(d, cache, head, 4, timeline, nullptr);
    QVERIFY(at::allclose(last, full[8], 1e-5, 1e-5));
    CacheKvSource source(cache);
    for (size_t i = 9; i < ids.size(); ++i) {
      ForwardRequest req;
      req.tokens = {{ids[i]}};
      req.positions = {{static_cast<int64_t>(i)}};
      last = d.forward(req, source, timeline, nullptr).logits.view({-1});
      const double err = (last - full[i]).abs().max().item<double>();
      QVERIFY2(err < 1e-5, qPrintable(QString("step %1: error %2").arg(i).arg(err)));
    }
  }
};

QTEST_GUILESS_MAIN(DecoderReferenceTest)
#include "test_decoder_reference.moc"
