// The chat templates of Qwen2.5, Qwen3 (thinking off), Llama-3, Llama-3.1, Mistral Nemo, ChatML
// and Llama-2 against transformers' apply_chat_template(add_generation_prompt=True): the rendered
// text and its ids with each family's fixture tokenizer, for multi-turn conversations with and
// without a system message (tests/data/tokenizers/chat_templates.json, made by
// tools/make_tokenizer_fixtures.py). Detection reads each family's template source.
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"

using namespace engram;

namespace {

const std::filesystem::path kFixtures = ENGRAM_TEST_DATA "/tokenizers";

nlohmann::json readJson(const std::filesystem::path& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

QString toQ(const std::vector<int32_t>& ids) {
  QStringList parts;
  for (const int32_t id : ids)
    parts << QString::number(id);
  return QStringLiteral("[") + parts.join(QStringLiteral(", ")) + QStringLiteral("]");
}

std::vector<ChatMessage> messagesOf(const nlohmann::json& conversation) {
  std::vector<ChatMessage> messages;
  for (const auto& m : conversation)
    messages.push_back({m["role"], m["content"]});
  return messages;
}

}  // namespace

class TestChatTemplateFamilies : public QObject {
  Q_OBJECT

 private:
  nlohmann::json fixture_;

 private Q_SLOTS:
  void initTestCase() { fixture_ = readJson(kFixtures / "chat_templates.json"); }

  void rendersAsTransformersDoes_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("conversation");
    for (const auto& [name, entry] : fixture_["templates"].items()) {
      for (const auto& [conversation, expected] : entry["conversations"].items()) {
        QTest::addRow("%s/%s", name.c_str(), conversation.c_str())
            << QString::fromStdString(name) << QString::fromStdString(conversation);
      }
    }
  }
  void rendersAsTransformersDoes() {
    QFETCH(QString, name);
    QFETCH(QString, conversation);
    const auto& entry = fixture_["templates"][name.toStdString()];
    const auto& expected = entry["conversations"][conversation.toStdString()];
    const auto messages = messagesOf(fixture_["conversations"][conversation.toStdString()]);
    const auto tokenizer =
        Tokenizer::load(kFixtures / entry["tokenizer"].get<std::string>() / "tokenizer.json");
    const ChatTemplate tmpl(parse_chat_template_kind(name.toStdString()));

    const std::string want_text = expected["text"];
    const std::string text = tmpl.render_text(messages, /*add_generation_prompt=*/true);
    if (tmpl.kind() == ChatTemplateKind::kChatML) {
      // Engram's ChatML shows a BOS in front; Qwen's vocabulary has none, so the ids do not.
      QCOMPARE(QString::fromStdString(text),
               QStringLiteral("<s>") + QString::fromStdString(want_text));
    } else {
      QCOMPARE(QString::fromStdString(text), QString::fromStdString(want_text));
    }
    const auto want_ids = expected["ids"].get<std::vector<int32_t>>();
    const auto ids = tmpl.encode(*tokenizer, messages, /*add_generation_prompt=*/true);
    QVERIFY2(ids == want_ids, qPrintable(QStringLiteral("got  ") + toQ(ids) +
                                         QStringLiteral("\nwant ") + toQ(want_ids)));
  }

  void detectRecognisesEachFamilysTemplate() {
    for (const auto& [name, entry] : fixture_["templates"].items()) {
      QTemporaryDir dir;
      std::ofstream(dir.filePath(QStringLiteral("tokenizer_config.json")).toStdString())
          << nlohmann::json{{"chat_template", entry["source"]}}.dump();
      const auto tokenizer =
          Tokenizer::load(kFixtures / entry["tokenizer"].get<std::string>() / "tokenizer.json");
      const ChatTemplateKind kind = ChatTemplate::detect(dir.path().toStdString(), *tokenizer);
      QCOMPARE(std::string(chat_template_kind_name(kind)), name);
    }
  }

  // No template in the folder: the vocabulary's chat tokens and config.json's model_type decide.
  void detectFallsBackToTheVocabulary() {
    QTemporaryDir dir;
    const std::filesystem::path path = dir.path().toStdString();
    const auto qwen = Tokenizer::load(kFixtures / "qwen2" / "tokenizer.json");
    QCOMPARE(ChatTemplate::detect(path, *qwen), ChatTemplateKind::kChatML);
    std::ofstream(path / "config.json") << R"({"model_type": "qwen2"})";
    QCOMPARE(ChatTemplate::detect(path, *qwen), ChatTemplateKind::kQwen25);
    std::ofstream(path / "config.json", std::ios::trunc) << R"({"model_type": "qwen3"})";
    QCOMPARE(ChatTemplate::detect(path, *qwen), ChatTemplateKind::kQwen3);
    const auto llama3 = Tokenizer::load(kFixtures / "llama3" / "tokenizer.json");
    QCOMPARE(ChatTemplate::detect(path, *llama3), ChatTemplateKind::kLlama31);
    const auto tekken = Tokenizer::load(kFixtures / "tekken" / "tokenizer.json");
    QCOMPARE(ChatTemplate::detect(path, *tekken), ChatTemplateKind::kMistral);
    // An unknown template: the vocabulary decides (and a warning names the template used).
    std::ofstream(path / "tokenizer_config.json") << R"({"chat_template": "{{ vicuna }}"})";
    QCOMPARE(ChatTemplate::detect(path, *llama3), ChatTemplateKind::kLlama31);
    const auto gpt2 = Tokenizer::load(kFixtures / "gpt2" / "tokenizer.json");
    QCOMPARE(ChatTemplate::detect(path, *gpt2), ChatTemplateKind::kPlain);
  }

  // The engine reuses the KV of a turn's prompt in the next turn: for these kinds the prompt's
  // ids are a prefix of the next turn's. Qwen3 (the empty think block after the generation
  // prompt is dropped once another user turn follows) and Mistral with a system prompt (it moves
  // to the last user turn) do not keep it, by their templates' design; the engine then
  // recomputes from where they differ.
  void promptIsAPrefixOfTheNextTurnsPrompt() {
    const std::vector<ChatMessage> asked = {{"system", "Be brief."}, {"user", "Hi there!"}};
    std::vector<ChatMessage> next_turn = asked;
    next_turn.push_back({"assistant", "Hello."});
    next_turn.push_back({"user", "Thanks."});
    const struct {
      const char* kind;
      const char* tokenizer;
      bool keeps_prefix;
    } cases[] = {{"llama3", "llama3", true},    {"llama3.1", "llama3", true},
                 {"qwen2.5", "qwen2", true},    {"chatml", "qwen2", true},
                 {"llama2", "llama2_sp", true}, {"qwen3", "qwen2", false},
                 {"mistral", "tekken", false}};
    for (const auto& c : cases) {
      const auto tokenizer = Tokenizer::load(kFixtures / c.tokenizer / "tokenizer.json");
      const ChatTemplate tmpl(parse_chat_template_kind(c.kind));
      const auto prompt = tmpl.encode(*tokenizer, asked, true);
      const auto next = tmpl.encode(*tokenizer, next_turn, true);
      const bool prefix =
          next.size() >= prompt.size() && std::equal(prompt.begin(), prompt.end(), next.begin());
      QVERIFY2(prefix == c.keeps_prefix, c.kind);
    }
  }

  void kindNamesRoundTrip() {
    for (const char* name : {"llama2", "chatml", "plain", "engram", "llama3", "llama3.1", "qwen2.5",
                             "qwen3", "mistral"}) {
      QCOMPARE(chat_template_kind_name(parse_chat_template_kind(name)), std::string_view(name));
    }
  }

  void mistralRejectsTurnsThatDoNotAlternate() {
    const ChatTemplate mistral(ChatTemplateKind::kMistral);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                             mistral.render_text({{"user", "a"}, {"user", "b"}}, true));
  }
};

QTEST_MAIN(TestChatTemplateFamilies)
#include "test_chat_template_families.moc"
