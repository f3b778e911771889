// A model folder with tokenizer.json and no tokenizer.model, chatted with end to end on the CPU:
// the qwen2-bias-tied fixture weights (1024 embeddings) with the Qwen2 fixture tokenizer (944
// tokens) and Qwen2.5's chat template. The loader finds tokenizer.json, detection picks qwen2.5,
// the prompt is the template's ids, the streamed reply is the decoded text, and the next turn
// reuses the cached prefix. What the random-ish weights say is not the point.
#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/engine/chat_session.h"
#include "core/engine/loaded_model.h"

using namespace engram;
namespace fs = std::filesystem;

namespace {

const fs::path kData = ENGRAM_TEST_DATA;

}  // namespace

class TokenizerJsonChatTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void folderWithOnlyTokenizerJsonChats() {
    QTemporaryDir dir;
    const fs::path folder = dir.path().toStdString();
    const fs::path weights = kData / "models" / "qwen2-bias-tied";
    for (const char* name : {"config.json", "generation_config.json", "model.safetensors"}) {
      fs::create_symlink(fs::absolute(weights / name), folder / name);
    }
    fs::copy_file(kData / "tokenizers" / "qwen2" / "tokenizer.json", folder / "tokenizer.json");
    std::ifstream in(kData / "tokenizers" / "chat_templates.json");
    const auto templates = nlohmann::json::parse(in);
    std::ofstream(folder / "tokenizer_config.json") << nlohmann::json{
        {"bos_token", nullptr},
        {"eos_token", "<|im_end|>"},
        {"chat_template",
         templates["templates"]["qwen2.5"]["source"]}}.dump();

    LoadedModel model = load_model({folder, "", 0}, choose_device("cpu", "f32"), {});
    QVERIFY(model.tokenizer && model.chat_template);
    QCOMPARE(model.tokenizer->model_file().filename().string(), std::string("tokenizer.json"));
    QCOMPARE(model.chat_template->kind(), ChatTemplateKind::kQwen25);

    ChatSession session(model);
    GenerationOptions options;
    options.max_new_tokens = 12;
    std::string streamed;
    const ChatReply first = session.reply("Hello! 東京? 😀", options,
                                          [&](const std::string& text) { streamed += text; });
    const std::vector<ChatMessage> asked = {{"user", "Hello! 東京? 😀"}};
    const auto prompt = model.chat_template->encode(*model.tokenizer, asked, true);
    QCOMPARE(first.generation.prompt_tokens, static_cast<int64_t>(prompt.size()));
    QVERIFY(!first.generation.tokens.empty());
    QCOMPARE(streamed, first.text);
    QCOMPARE(QString::fromUtf8(first.text).toUtf8().toStdString(), first.text);  // valid UTF-8
    qInfo("reply: %s (%s)", first.text.c_str(), first.generation.stop_reason.c_str());

    const ChatReply second = session.reply("And again?", options, {});
    QVERIFY2(second.reused_tokens >= static_cast<int64_t>(prompt.size()),
             qPrintable(QString::number(second.reused_tokens)));
  }
};

QTEST_GUILESS_MAIN(TokenizerJsonChatTest)
#include "test_tokenizer_json_chat.moc"
