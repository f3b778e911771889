// Chat templates give the exact ids each family was trained on (Llama-2 as Meta's reference and
// HF's template produce them, our plain format), ChatML uses single ids for <|im_start|>/<|im_end|>
// when the vocabulary has them and text otherwise, detection reads the model folder, and the stop
// string matcher never lets part of a stop string through, whatever the chunk boundaries.
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <stdexcept>

#include "core/model/model_error.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/stop_strings.h"
#include "core/tokenizer/tokenizer.h"

using namespace engram;

namespace {

const QString kModels = QStringLiteral(ENGRAM_TEST_DATA "/models");
const char* const kLlamaTokenizer = ENGRAM_TEST_DATA "/models/llama-gqa/tokenizer.model";

const std::vector<ChatMessage> kConversation = {
    {"system", "You are terse."},
    {"user", "Hi"},
    {"assistant", "Hello."},
    {"user", "Bye"},
};

QString toQ(const std::vector<int32_t>& ids) {
  QStringList parts;
  for (const int32_t id : ids)
    parts << QString::number(id);
  return QStringLiteral("[") + parts.join(QStringLiteral(", ")) + QStringLiteral("]");
}

#define COMPARE_IDS(actual, expected)                                                         \
  do {                                                                                        \
    const std::vector<int32_t> a_ = (actual);                                                 \
    const std::vector<int32_t> e_ = (expected);                                               \
    QVERIFY2(a_ == e_, qPrintable(QStringLiteral("got  %1\nwant %2").arg(toQ(a_), toQ(e_)))); \
  } while (0)

void writeFile(const QString& path, const QByteArray& contents) {
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
  f.write(contents);
}

// Feeds `chunks` through a matcher; returns everything it released (finish() included).
std::string feed(StopStringMatcher& matcher, const std::vector<std::string>& chunks) {
  std::string shown;
  for (const auto& chunk : chunks)
    shown += matcher.push(chunk);
  return shown + matcher.finish();
}

}  // namespace

class TestChatTemplate : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<Tokenizer> llama_;

 private Q_SLOTS:
  void initTestCase() { llama_ = Tokenizer::load(kLlamaTokenizer); }

  void llama2SystemAndTwoTurnsGiveExactIds() {
    // <s> ▁[INST] ▁<<SYS>> \n You are terse. \n <</SYS>> \n \n Hi ▁[/INST] ▁Hello. ▁ </s>
    // <s> ▁[INST] ▁Bye ▁[/INST]
    const std::vector<int32_t> expected = {
        1,     518,   25580, 29962, 3532,  14816, 29903, 6778,  13,   3492, 526,
        1935,  344,   29889, 13,    29966, 829,   14816, 29903, 6778, 13,   13,
        18567, 518,   29914, 25580, 29962, 15043, 29889, 29871, 2,    1,    518,
        25580, 29962, 2648,  29872, 518,   29914, 25580, 29962};
    const ChatTemplate llama2(ChatTemplateKind::kLlama2);
    COMPARE_IDS(llama2.encode(*llama_, kConversation, true), expected);
    // "[/INST]" already is the generation prompt.
    COMPARE_IDS(llama2.encode(*llama_, kConversation, false), expected);
  }

  void llama2TurnIsBosPlusOneSentencePieceCallPlusEos() {
    const ChatTemplate llama2(ChatTemplateKind::kLlama2);
    const std::vector<ChatMessage> messages = {{"user", "  What is 2+2? "}, {"assistant", " 4 "}};
    std::vector<int32_t> expected{1};
    const auto body = llama_->encode("[INST] What is 2+2? [/INST] 4 ");
    expected.insert(expected.end(), body.begin(), body.end());
    expected.push_back(2);
    COMPARE_IDS(llama2.encode(*llama_, messages, false), expected);
  }

  void llama2RenderTextFoldsSystemIntoFirstUserTurn() {
    const ChatTemplate llama2(ChatTemplateKind::kLlama2);
    QCOMPARE(llama2.render_text(kConversation, true),
             std::string("<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello. "
                         "</s><s>[INST] Bye [/INST]"));
    QVERIFY(llama2.stop_strings().empty());
  }

  void llama2RejectsTurnsThatDoNotAlternate() {
    const ChatTemplate llama2(ChatTemplateKind::kLlama2);
    QVERIFY_EXCEPTION_THROWN(llama2.encode(*llama_, {{"user", "a"}, {"user", "b"}}, true),
                             std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(llama2.encode(*llama_, {{"assistant", "a"}}, true),
                             std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(llama2.encode(*llama_, {{"tool", "a"}}, true), std::invalid_argument);
  }

  void plainTemplateGivesExactIds() {
    // <s> ▁### System : \n You are terse. \n \n ## # User : \n Hi \n \n ## # Assistant : \n
    // Hello . \n \n </s> ▁### User : \n Bye \n \n ## # Assistant : \n
    const std::vector<int32_t> expected = {
        1,     835,   2184,  29901, 13,    3492,  526,   1935,  344,  29889, 13,   13,
        2277,  29937, 4911,  29901, 13,    18567, 13,    13,    2277, 29937, 4007, 22137,
        29901, 13,    10994, 29889, 13,    13,    2,     835,   4911, 29901, 13,   2059,
        29872, 13,    13,    2277,  29937, 4007,  22137, 29901, 13};
    const ChatTemplate plain(ChatTemplateKind::kPlain);
    COMPARE_IDS(plain.encode(*llama_, kConversation, true), expected);
    QCOMPARE(plain.render_text(kConversation, true),
             std::string("<s>### System:\nYou are terse.\n\n### User:\nHi\n\n### Assistant:\n"
                         "Hello.\n\n</s>### User:\nBye\n\n### Assistant:\n"));
  }

  void plainGenerationPromptIsTheOnlyDifference() {
    const ChatTemplate plain(ChatTemplateKind::kPlain);
    const auto without = plain.encode(*llama_, kConversation, false);
    const auto with = plain.encode(*llama_, kConversation, true);
    QVERIFY(with.size() > without.size());
    QVERIFY(std::equal(without.begin(), without.end(), with.begin()));
    QCOMPARE(llama_->decode({with.begin() + without.size(), with.end()}),
             std::string("### Assistant:\n"));
    QCOMPARE(plain.stop_strings(), std::vector<std::string>({"### User:", "### System:"}));
  }

  void chatmlFallsBackToTextWithoutChatPieces() {
    const ChatTemplate chatml(ChatTemplateKind::kChatML);
    const std::vector<ChatMessage> messages = {{"user", "Hi"}};
    const auto ids = chatml.encode(*llama_, messages, true);
    const std::string text = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    std::vector<int32_t> expected{1};
    const auto body = llama_->encode(text);
    expected.insert(expected.end(), body.begin(), body.end());
    COMPARE_IDS(ids, expected);
    QCOMPARE(llama_->decode(ids), text);
    QCOMPARE(chatml.render_text(messages, true), "<s>" + text);
    QCOMPARE(chatml.stop_strings().front(), std::string("<|im_end|>"));
  }

  void chatmlUsesSingleIdsWhenTheVocabularyHasThem() {
    const QString spm_train = QStandardPaths::findExecutable(QStringLiteral("spm_train"));
    if (spm_train.isEmpty()) QSKIP("spm_train (Debian package sentencepiece) is not installed");
    QTemporaryDir dir;
    QString corpus;
    const QStringList words = {QStringLiteral("hello"),     QStringLiteral("world"),
                               QStringLiteral("system"),    QStringLiteral("user"),
                               QStringLiteral("assistant"), QStringLiteral("terse")};
    for (int line = 0; line < 200; ++line) {
      for (int w = 0; w < 7; ++w)
        corpus += words[(line * 7 + w * 3) % words.size()] + ' ';
      corpus += '\n';
    }
    writeFile(dir.filePath(QStringLiteral("corpus.txt")), corpus.toUtf8());
    QProcess train;
    train.setWorkingDirectory(dir.path());
    train.start(spm_train,
                {QStringLiteral("--input=corpus.txt"), QStringLiteral("--model_prefix=chatml"),
                 QStringLiteral("--vocab_size=300"), QStringLiteral("--model_type=bpe"),
                 QStringLiteral("--byte_fallback=true"),
                 QStringLiteral("--user_defined_symbols=<|im_start|>,<|im_end|>"),
                 QStringLiteral("--minloglevel=2")});
    QVERIFY(train.waitForFinished(60000));
    QVERIFY2(train.exitCode() == 0, train.readAllStandardError().constData());
    const auto tokenizer =
        Tokenizer::load(dir.filePath(QStringLiteral("chatml.model")).toStdString());
    const int32_t start = tokenizer->piece_to_id("<|im_start|>");
    const int32_t end = tokenizer->piece_to_id("<|im_end|>");
    QVERIFY(start >= 0 && end >= 0);

    auto text = [&](const std::string& s) { return tokenizer->encode(s); };
    std::vector<int32_t> expected{tokenizer->bos_id()};
    for (const auto& part : std::vector<std::vector<int32_t>>{{start},
                                                              text("system\nYou are terse."),
                                                              {end},
                                                              text("\n"),
                                                              {start},
                                                              text("user\nHi"),
                                                              {end},
                                                              text("\n"),
                                                              {start},
                                                              text("assistant\n")}) {
      expected.insert(expected.end(), part.begin(), part.end());
    }
    const ChatTemplate chatml(ChatTemplateKind::kChatML);
    const std::vector<ChatMessage> messages = {{"system", "You are terse."}, {"user", "Hi"}};
    COMPARE_IDS(chatml.encode(*tokenizer, messages, true), expected);
    QCOMPARE(ChatTemplate::detect(dir.path().toStdString(), *tokenizer), ChatTemplateKind::kChatML);
  }

  void detectReadsTheModelFolder() {
    // llama-gqa: config.json says llama, the vocabulary has 32000 pieces, no tokenizer_config.json.
    QCOMPARE(ChatTemplate::detect((kModels + QStringLiteral("/llama-gqa")).toStdString(), *llama_),
             ChatTemplateKind::kLlama2);

    QTemporaryDir dir;
    const std::filesystem::path path = dir.path().toStdString();
    QCOMPARE(ChatTemplate::detect(path, *llama_), ChatTemplateKind::kPlain);

    writeFile(dir.filePath(QStringLiteral("config.json")), R"({"model_type": "qwen2"})");
    QCOMPARE(ChatTemplate::detect(path, *llama_), ChatTemplateKind::kPlain);
    writeFile(dir.filePath(QStringLiteral("config.json")), R"({"model_type": "mistral"})");
    QCOMPARE(ChatTemplate::detect(path, *llama_), ChatTemplateKind::kLlama2);

    const QString config = dir.filePath(QStringLiteral("tokenizer_config.json"));
    writeFile(
        config,
        R"({"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"})");
    QCOMPARE(ChatTemplate::detect(path, *llama_), ChatTemplateKind::kChatML);
    writeFile(config, R"({"chat_template": [{"name": "tool_use", "template": "x"},
                                            {"name": "default", "template": "[INST] {{ m }}"}]})");
    QCOMPARE(ChatTemplate::detect(path, *llama_), ChatTemplateKind::kLlama2);
    writeFile(config, R"({"add_bos_token": true})");
    QCOMPARE(ChatTemplate::detect(path, *llama_), ChatTemplateKind::kLlama2);  // from config.json

    writeFile(config, "{ not json");
    bool thrown = false;
    try {
      ChatTemplate::detect(path, *llama_);
    } catch (const ModelError& e) {
      thrown = true;
      QVERIFY2(QString::fromStdString(e.file()).endsWith(QStringLiteral("tokenizer_config.json")),
               e.what());
    }
    QVERIFY(thrown);
  }

  void templateKindParsesFromItsName() {
    QCOMPARE(parse_chat_template_kind("llama2"), ChatTemplateKind::kLlama2);
    QCOMPARE(parse_chat_template_kind("chatml"), ChatTemplateKind::kChatML);
    QCOMPARE(parse_chat_template_kind("plain"), ChatTemplateKind::kPlain);
    QCOMPARE(chat_template_kind_name(ChatTemplateKind::kChatML), std::string_view("chatml"));
    QVERIFY_EXCEPTION_THROWN(parse_chat_template_kind("vicuna"), std::invalid_argument);
  }

  void stopStringIsHeldBackAcrossChunkBoundaries() {
    StopStringMatcher matcher({"<|im_end|>"});
    QCOMPARE(matcher.push("Sure thing<|im"), std::string("Sure thing"));
    QCOMPARE(matcher.held_size(), size_t(4));
    QCOMPARE(matcher.push("_en"), std::string());
    QVERIFY(!matcher.stopped());
    QCOMPARE(matcher.push("d|>\nmore"), std::string());
    QVERIFY(matcher.stopped());
    QCOMPARE(matcher.matched(), std::string("<|im_end|>"));
    QCOMPARE(matcher.push("after the stop"), std::string());
    QCOMPARE(matcher.finish(), std::string());
  }

  void heldTextIsReleasedWhenItStopsMatching() {
    StopStringMatcher matcher({"### User:"});
    QCOMPARE(matcher.push("Answer.\n\n##"), std::string("Answer.\n\n"));
    QCOMPARE(matcher.push("# Use"), std::string());
    QCOMPARE(matcher.push("d tabs"), std::string("### Used tabs"));
    QCOMPARE(matcher.push(" ###"), std::string(" "));
    QCOMPARE(matcher.finish(), std::string("###"));
    QVERIFY(!matcher.stopped());
  }

  void stopStringSplitIntoSingleBytesNeverLeaks() {
    const std::string reply = "Fine, thanks.\n\n";
    const std::string stream = reply + "### User:\nand then";
    StopStringMatcher matcher({"### User:", "### System:"});
    std::string shown;
    for (const char c : stream) {
      shown += matcher.push(std::string(1, c));
      QVERIFY2(shown.find('#') == std::string::npos, shown.c_str());
    }
    QCOMPARE(shown, reply);
    QVERIFY(matcher.stopped());
    QCOMPARE(matcher.matched(), std::string("### User:"));
  }

  void earliestStopStringWins() {
    StopStringMatcher matcher({"END", "<|im_end|>"});
    QCOMPARE(feed(matcher, {"a<|im_end|>b END"}), std::string("a"));
    QCOMPARE(matcher.matched(), std::string("<|im_end|>"));
  }

  void multibyteTextAroundAStopStringStaysWhole() {
    StopStringMatcher matcher({"→停"});
    QCOMPARE(matcher.push("é→"), std::string("é"));
    QCOMPARE(matcher.push("x"), std::string("→x"));
    QCOMPARE(matcher.push("日→停止"), std::string("日"));
    QVERIFY(matcher.stopped());
  }

  void noStopStringsPassEverythingThrough() {
    StopStringMatcher matcher({});
    QCOMPARE(matcher.push("<|im_end|>"), std::string("<|im_end|>"));
    StopStringMatcher empty_only({""});
    QCOMPARE(empty_only.push("text"), std::string("text"));
    QVERIFY(!empty_only.stopped());
  }
};

QTEST_MAIN(TestChatTemplate)
#include "test_chat_template.moc"
