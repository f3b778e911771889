// Chat with the bundled default model (resources/models/engram-tiny) on the CPU, end to end: its
// folder selects the engram template, a ChatSession reply to a corpus-style line comes back
// without the quotes the model writes around it (also while it streams), and the next turn
// reuses the KV of everything the first one computed, because the reply rendered back between
// its quotes gives the ids the model generated. What the reply says is the model's business.
#include <QtTest>

#include <filesystem>
#include <string>
#include <vector>

#include "core/engine/chat_session.h"
#include "core/engine/loaded_model.h"

using namespace engram;
namespace fs = std::filesystem;

namespace {

const fs::path kModelDir =
    fs::path(ENGRAM_TEST_DATA) / ".." / ".." / "resources" / "models" / "engram-tiny";

GenerationOptions greedy() {
  GenerationOptions o;
  o.max_new_tokens = 48;
  return o;
}

}  // namespace

class BundledChatTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() {
    model_ = std::make_unique<LoadedModel>(
        load_model({kModelDir, "", 0}, choose_device("cpu", "f32"), {}));
    QVERIFY(model_->tokenizer && model_->chat_template);
  }

  void folderSelectsTheEngramTemplate() {
    QCOMPARE(model_->chat_template->kind(), ChatTemplateKind::kEngram);
  }

  void repliesWithoutQuotesAndReusesTheTurnsKv() {
    ChatSession session(*model_);
    std::vector<std::string> chunks;
    const ChatReply first = session.reply("I made lasagna for dinner tonight.", greedy(),
                                          [&](const std::string& text) { chunks.push_back(text); });
    qInfo("engram-tiny: %s (%s)", first.text.c_str(), first.generation.stop_reason.c_str());
    QVERIFY(!first.text.empty());
    QVERIFY2(first.text.find('"') == std::string::npos, first.text.c_str());
    // The reply ends by itself: EOS after the closing quote, or the end of its line (the
    // template's stop string: the history the model also learned goes on with a newline).
    QVERIFY2(first.generation.stop_reason == "eos" || first.generation.stop_reason == "stop",
             first.generation.stop_reason.c_str());
    std::string streamed;
    for (const auto& chunk : chunks) {
      QVERIFY2(chunk.find('"') == std::string::npos, chunk.c_str());
      streamed += chunk;
    }
    QCOMPARE(streamed, first.text);
    QCOMPARE(session.history().back().role, std::string("assistant"));
    QCOMPARE(session.history().back().content, first.text);

    // The cache holds the prompt and the reply's ids up to its closing quote (EOS is not fed);
    // the re-rendered history starts with all of them.
    const int64_t after_first = session.cached_tokens();
    QVERIFY(after_first > first.generation.prompt_tokens);
    const ChatReply second = session.reply("It did, thanks!", greedy(), {});
    QCOMPARE(second.reused_tokens, after_first);
    QVERIFY(!second.text.empty());
    QVERIFY2(second.text.find('"') == std::string::npos, second.text.c_str());
  }

 private:
  std::unique_ptr<LoadedModel> model_;
};

QTEST_GUILESS_MAIN(BundledChatTest)
#include "test_bundled_chat.moc"
