// Bad input at the engine and CLI level: each case gives one clear error naming the file and
// the problem (weights that do not match the config, a corrupt tokenizer, a prompt past the
// maximum positions, CUDA asked for without CUDA), never a crash or a silent wrong answer.
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>

#include "core/engine/chat_session.h"
#include "core/engine/generator.h"
#include "core/engine/loaded_model.h"
#include "core/model/model_error.h"
#include "support/reference_fixture.h"

using namespace engram;
namespace fs = std::filesystem;

namespace {

fs::path copy_fixture(const QTemporaryDir& tmp, const std::string& name) {
  const fs::path dst = fs::path(tmp.path().toStdString()) / name;
  fs::copy(test::fixture_model(name), dst, fs::copy_options::recursive);
  return dst;
}

void replace_in_file(const fs::path& file, const std::string& from, const std::string& to) {
  std::ifstream in(file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto at = text.find(from);
  QVERIFY2(at != std::string::npos, from.c_str());
  text.replace(at, from.size(), to);
  std::ofstream(file, std::ios::trunc) << text;
}

struct CliResult {
  int code;
  QString err;
  QString out;
};

CliResult run_cli(const QStringList& args) {
  QProcess p;
  p.start(QStringLiteral(ENGRAM_BINARY_DIR "/app/cli/engram-cli"), args);
  p.waitForFinished(120000);
  return {p.exitCode(), QString::fromUtf8(p.readAllStandardError()),
          QString::fromUtf8(p.readAllStandardOutput())};
}

const DeviceChoice kCpu = choose_device("cpu", "f32");

}  // namespace

class BadInputTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void weightsNotMatchingTheConfigNameTheTensor() {
    QTemporaryDir tmp;
    const fs::path dir = copy_fixture(tmp, "qwen2-bias-tied");
    replace_in_file(dir / "config.json", "\"intermediate_size\": 128",
                    "\"intermediate_size\": 130");
    try {
      load_model({dir, "", 0}, kCpu, {});
      QFAIL("loaded weights of the wrong shape");
    } catch (const ModelError& e) {
      const QString m = e.what();
      QVERIFY2(m.contains("model.safetensors") && m.contains("mlp.gate_proj.weight") &&
                   m.contains("[128, 64]") && m.contains("[130, 64]"),
               qPrintable(m));
    }
  }

  void corruptTokenizerIsNamedBeforeWeightsLoad() {
    QTemporaryDir tmp;
    const fs::path dir = copy_fixture(tmp, "llama-gqa");
    std::ofstream(dir / "tokenizer.model", std::ios::trunc) << "not a sentencepiece model";
    try {
      load_model({dir, "", 0}, kCpu, {});
      QFAIL("loaded a corrupt tokenizer");
    } catch (const ModelError& e) {
      QVERIFY2(QString(e.what()).contains("tokenizer.model"), e.what());
    }
  }

  void chatWithoutTokenizerSaysSo() {
    LoadedModel m = load_model({test::fixture_model("mistral"), "", 0}, kCpu, {});
    QVERIFY(!m.tokenizer);
    QVERIFY_EXCEPTION_THROWN(ChatSession session(m), ModelError);
  }

  void promptLongerThanMaxPositionsIsRefused() {
    LoadedModel m = load_model({test::fixture_model("llama3-rope-scaling"), "", 0}, kCpu, {});
    const int64_t max = m.config.max_positions;
    const ModelConfig& c = m.config;
    KvCache cache({c.num_layers, c.num_kv_heads, c.head_dim}, 1, 8, at::kFloat, at::kCPU);
    std::vector<int64_t> prompt(static_cast<size_t>(max), 5);
    try {
      generate(*m.decoder, cache, {}, prompt, {}, {});
      QFAIL("accepted a prompt past the maximum positions");
    } catch (const std::out_of_range& e) {
      QVERIFY2(QString(e.what()).contains(QString::number(max)), e.what());
    }
    QCOMPARE(cache.lengths()[0], int64_t{0});  // nothing was half-computed into the cache
  }

  // A shape chats through a separate tokenizer only when every id is a row of its embedding.
  void shapeTokenizerLargerThanTheVocabularyIsRefused() {
    ModelSource source;
    source.shape = "tiny";  // 512 embeddings
    source.tokenizer = test::fixture_model("llama-gqa") / "tokenizer.model";
    try {
      load_model(source, kCpu, {});
      QFAIL("accepted a 32000-piece tokenizer for 512 embeddings");
    } catch (const ModelError& e) {
      const QString m = e.what();
      QVERIFY2(m.contains("tokenizer.model") && m.contains("32000") && m.contains("512"),
               qPrintable(m));
    }
  }

  // bench restore --shape: a history past the shape's positions and a missing tokenizer are
  // usage errors, said before any weights are made.
  void benchRestoreShapeLimitsAreClear() {
    const QString tok =
        QString::fromStdString((test::fixture_model("llama-gqa") / "tokenizer.model").string());
    const CliResult past = run_cli({"bench", "restore", "--shape", "qwen2.5-7b", "--tokenizer", tok,
                                    "--history-tokens", "40000", "--device", "cpu"});
    QCOMPARE(past.code, 2);
    QVERIFY2(past.err.contains("positions") && past.err.contains("32768"), qPrintable(past.err));
    const CliResult no_tokenizer =
        run_cli({"bench", "restore", "--shape", "tiny-32k", "--device", "cpu"});
    QCOMPARE(no_tokenizer.code, 2);
    QVERIFY2(no_tokenizer.err.contains("--tokenizer"), qPrintable(no_tokenizer.err));
  }

  void cudaWithoutCudaIsAnError() {
    if (cuda_available()) QSKIP("this machine has CUDA");
    QVERIFY_EXCEPTION_THROWN(choose_device("cuda", "auto"), std::runtime_error);
    const CliResult r = run_cli({"generate", "--model",
                                 QString::fromStdString(test::fixture_model("llama-gqa").string()),
                                 "--prompt", "hi", "--device", "cuda"});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("CUDA is not available"), qPrintable(r.err));
  }

  void cliNamesTheMissingConfig() {
    const CliResult r = run_cli({"logits", "--model", "/nonexistent/model", "--ids", "1,2"});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("/nonexistent/model/config.json"), qPrintable(r.err));
    QCOMPARE(run_cli({"logits", "--no-such-flag"}).code, 2);
  }

  // The verification command end to end: its .npy equals the transformers reference.
  void cliLogitsFileMatchesTheReference() {
    QTemporaryDir tmp;
    const test::Reference ref = test::load_reference("qwen3-qknorm");
    QStringList ids;
    for (int64_t id : ref.sequences[0].ids)
      ids << QString::number(id);
    const QString out = tmp.filePath("logits.npy");
    const CliResult r = run_cli(
        {"logits", "--model", QString::fromStdString(test::fixture_model("qwen3-qknorm").string()),
         "--ids", ids.join(','), "--out", out});
    QCOMPARE(r.code, 0);
    QVERIFY(r.out.contains("top-5"));
    const NpyArray ours = read_npy_f32(out.toStdString());
    QCOMPARE(ours.shape, ref.sequences[0].logits.shape);
    float worst = 0;
    for (size_t i = 0; i < ours.data.size(); ++i) {
      worst = std::max(worst, std::abs(ours.data[i] - ref.sequences[0].logits.data[i]));
    }
    QVERIFY2(worst / ref.sequences[0].logit_scale <= 1e-4, qPrintable(QString::number(worst)));
  }
};

QTEST_GUILESS_MAIN(BadInputTest)
#include "test_bad_input.moc"
