// Chat templates give the exact ids each family was trained on (Llama-2 as Meta's reference and
// HF's template produce them, our plain format, engram-tiny's corpus lines), ChatML uses single
// ids for <|im_start|>/<|im_end|> when the vocabulary has them and text otherwise, detection reads
// the model folder, the stop string matcher never lets part of a stop string through, whatever
// the chunk boundaries, and neither does the reply delimiter stripper with engram's quotes.
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
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
// The bundled default model, trained on the corpus format that ChatTemplateKind::kEngram renders.
const QString kEngramTiny = QStringLiteral(ENGRAM_TEST_DATA "/../../resources/models/engram-tiny");

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

std::string strip_delimiters(const ReplyDelimiters& delimiters,
                             const std::vector<std::string>& chunks) {
  ReplyDelimiterStripper stripper(delimiters);
  std::string shown;
  for (const auto& chunk : chunks)
    shown += stripper.push(chunk);
  return shown + stripper.finish();
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The corpus's first exchange of a conversation, as env::chat_examples writes it.
const std::vector<ChatMessage> kLasagna = {
    {"user", "I made lasagna for dinner tonight."},
    {"assistant", "Lasagna sounds delicious. Did it turn out well?"},
    {"user", "It did, thanks!"},
};

}  // namespace

class TestChatTemplate : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<Tokenizer> llama_;
  std::unique_ptr<Tokenizer> engram_;

 private Q_SLOTS:
  void initTestCase() {
    llama_ = Tokenizer::load(kLlamaTokenizer);
    engram_ = Tokenizer::load((kEngramTiny + QStringLiteral("/tokenizer.model")).toStdString());
  }

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

  // A chat renders its whole history every turn; the memo reuses the ids of text runs already
  // encoded. Same ids as without it, turn after turn, and a new turn adds only its own runs.
  void memoisedEncodeGivesTheSameIdsAndReusesRuns() {
    for (const ChatTemplateKind kind : {ChatTemplateKind::kLlama2, ChatTemplateKind::kChatML}) {
      const ChatTemplate t(kind);
      ChatTemplate::EncodeMemo memo;
      std::vector<ChatMessage> messages{{"system", "You are terse."}};
      size_t runs = 0;
      for (int turn = 0; turn < 6; ++turn) {
        messages.push_back({"user", "Question number " + std::to_string(turn) + "?"});
        COMPARE_IDS(t.encode(*llama_, messages, true, memo), t.encode(*llama_, messages, true));
        messages.push_back({"assistant", "Answer " + std::to_string(turn) + "."});
        COMPARE_IDS(t.encode(*llama_, messages, false, memo), t.encode(*llama_, messages, false));
        if (kind == ChatTemplateKind::kLlama2 && turn > 0) {
          // Each Llama-2 turn is one run between <s> and </s>: one or two new runs per turn
          // (the open question, then the answered turn), never the history again.
          QVERIFY2(memo.size() - runs <= 2, qPrintable(QString::number(memo.size() - runs)));
        }
        runs = memo.size();
      }
    }
  }

  // With an atomic line break (engram-tiny's and the Llama-2 SentencePiece models), runs are
  // encoded a line at a time: the ids must be those of one call on the whole run, for text with
  // the whitespace and quotes a history holds, and the engram template's growing single run must
  // not be encoded again each turn.
  void lineAtATimeEncodingIsWholeTextEncoding() {
    QVERIFY(engram_->atomic_newline_id() >= 0);
    QVERIFY(llama_->atomic_newline_id() >= 0);
    const std::vector<std::string> texts{
        "Session 1 (May 2, 2024)\nUser said, \u201cHi  there \u201d\n\nAssistant said,",
        "  two leading\n\ttab line \n trailing  \n", "no break at all",
        "multi\nline\nmessage\n with \u00e9 accents and 123456 digits\n"};
    for (const Tokenizer* t : {engram_.get(), llama_.get()}) {
      for (const std::string& text : texts) {
        std::vector<int32_t> lines;
        size_t start = 0;
        for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
          const std::string_view line(text.data() + start, end - start);
          const auto part = start == 0 ? t->encode(line) : t->encode_after_newline(line);
          lines.insert(lines.end(), part.begin(), part.end());
          lines.push_back(t->atomic_newline_id());
        }
        const auto last =
            start == 0 ? t->encode(text) : t->encode_after_newline(text.substr(start));
        lines.insert(lines.end(), last.begin(), last.end());
        COMPARE_IDS(lines, t->encode(text));
      }
    }
    const ChatTemplate engram(ChatTemplateKind::kEngram);
    ChatTemplate::EncodeMemo memo;
    std::vector<ChatMessage> messages;
    size_t entries = 0;
    for (int turn = 0; turn < 40; ++turn) {
      messages.push_back({"user", "Turn " + std::to_string(turn) + ":  did you see the " +
                                      (turn % 3 ? "garden" : "new\nline") + " ?"});
      messages.push_back({"assistant", turn % 5 ? "Yes,  I did. " : ""});
      const std::string rendered = engram.render_text(messages, true);
      QVERIFY(rendered.rfind("<s>", 0) == 0);
      COMPARE_IDS(engram.encode(*engram_, messages, true, memo),
                  concat({engram_->bos_id()}, engram_->encode(rendered.substr(3))));
      if (turn > 0) {  // a turn adds its own lines (and the generation prompt's), not the history
        QVERIFY2(memo.size() - entries <= 5, qPrintable(QString::number(memo.size() - entries)));
      }
      entries = memo.size();
    }
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

  void engramRendersTheCorpusLines() {
    const ChatTemplate engram(ChatTemplateKind::kEngram);
    QCOMPARE(engram.render_text(kConversation, true),
             std::string("<s>You are terse.\nSession 1 (February 11, 2024)\nUser said, \"Hi\"\n"
                         "Assistant said, \"Hello.\"\nUser said, \"Bye\"\nAssistant said,"));
    QCOMPARE(engram.render_text({}, false), std::string("<s>Session 1 (February 11, 2024)\n"));
    QCOMPARE(engram.render_text({{"user", "Hi"}}, false),
             std::string("<s>Session 1 (February 11, 2024)\nUser said, \"Hi\"\n"));
    QVERIFY_EXCEPTION_THROWN(engram.encode(*engram_, {{"tool", "a"}}, true), std::invalid_argument);
  }

  void engramEncodeIsBosPlusOneCallOnTheRenderedText() {
    // The training prompt: BOS + SentencePiece(history + "Assistant said,") in one call.
    const std::string prompt =
        "Session 1 (February 11, 2024)\n"
        "User said, \"I made lasagna for dinner tonight.\"\n"
        "Assistant said, \"Lasagna sounds delicious. Did it turn out well?\"\n"
        "User said, \"It did, thanks!\"\n"
        "Assistant said,";
    const ChatTemplate engram(ChatTemplateKind::kEngram);
    QCOMPARE(engram_->bos_id(), 1);
    COMPARE_IDS(engram.encode(*engram_, kLasagna, true),
                concat({engram_->bos_id()}, engram_->encode(prompt)));
    QCOMPARE(engram.render_text(kLasagna, true), "<s>" + prompt);
    // No EOS between turns: the history without the generation prompt is a prefix of it.
    const auto without = engram.encode(*engram_, kLasagna, false);
    const auto with = engram.encode(*engram_, kLasagna, true);
    QVERIFY(std::equal(without.begin(), without.end(), with.begin()));
    QCOMPARE(engram_->decode({with.begin() + without.size(), with.end()}),
             std::string("Assistant said,"));
  }

  void engramReplyRendersBackToTheIdsTheModelWrites() {
    // The model was trained to write SentencePiece("\"reply\"") (its own call) + EOS after the
    // prompt; the reply kept without its quotes and rendered into the history must give back
    // those ids, so that the next turn reuses their KV.
    const ChatTemplate engram(ChatTemplateKind::kEngram);
    const std::vector<ChatMessage> asked(kLasagna.begin(), kLasagna.begin() + 1);
    const std::vector<ChatMessage> answered(kLasagna.begin(), kLasagna.begin() + 2);
    const auto written = concat(engram.encode(*engram_, asked, true),
                                engram_->encode("\"" + kLasagna[1].content + "\""));
    const auto rendered = engram.encode(*engram_, answered, false);
    QVERIFY2(
        rendered.size() > written.size() &&
            std::equal(written.begin(), written.end(), rendered.begin()),
        qPrintable(QStringLiteral("written  %1\nrendered %2").arg(toQ(written), toQ(rendered))));
    QCOMPARE(engram_->decode({rendered.begin() + written.size(), rendered.end()}),
             std::string("\n"));
  }

  void engramFolderTemplateRendersTheSameText() {
    // resources/models/engram-tiny/tokenizer_config.json's Jinja chat_template, rendered the way
    // transformers renders it, gives the text of ChatTemplateKind::kEngram.
    const QString python = QStandardPaths::findExecutable(QStringLiteral("python3"));
    if (python.isEmpty()) QSKIP("python3 is not installed");
    const std::vector<std::pair<std::vector<ChatMessage>, bool>> cases = {
        {{}, false}, {{{"user", "Hi"}}, true}, {kConversation, true}, {kLasagna, false}};
    QJsonArray input;
    for (const auto& [messages, generation_prompt] : cases) {
      QJsonArray list;
      for (const auto& m : messages) {
        list.append(QJsonObject{{QStringLiteral("role"), QString::fromStdString(m.role)},
                                {QStringLiteral("content"), QString::fromStdString(m.content)}});
      }
      input.append(QJsonObject{{QStringLiteral("messages"), list},
                               {QStringLiteral("add_generation_prompt"), generation_prompt}});
    }
    const QString script = QStringLiteral(R"(
import json, sys
try:
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit(77)
config = json.load(open(sys.argv[1]))
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
template = env.from_string(config["chat_template"])
json.dump([template.render(messages=c["messages"], add_generation_prompt=c["add_generation_prompt"],
                           bos_token=config["bos_token"], eos_token=config["eos_token"])
           for c in json.load(sys.stdin)], sys.stdout)
)");
    QProcess render;
    render.start(python, {QStringLiteral("-c"), script,
                          kEngramTiny + QStringLiteral("/tokenizer_config.json")});
    QVERIFY(render.waitForStarted());
    render.write(QJsonDocument(input).toJson());
    render.closeWriteChannel();
    QVERIFY(render.waitForFinished(30000));
    if (render.exitCode() == 77) QSKIP("python3 has no jinja2");
    QVERIFY2(render.exitCode() == 0, render.readAllStandardError().constData());
    const QJsonArray rendered = QJsonDocument::fromJson(render.readAllStandardOutput()).array();
    QCOMPARE(rendered.size(), qsizetype(cases.size()));
    const ChatTemplate engram(ChatTemplateKind::kEngram);
    for (size_t i = 0; i < cases.size(); ++i) {
      QCOMPARE(rendered[static_cast<qsizetype>(i)].toString().toStdString(),
               engram.render_text(cases[i].first, cases[i].second));
    }
  }

  void detectFindsTheEngramTemplate() {
    QCOMPARE(ChatTemplate::detect(kEngramTiny.toStdString(), *engram_), ChatTemplateKind::kEngram);
    // Its tokenizer_config.json names the pieces the tokenizer really has.
    QFile file(kEngramTiny + QStringLiteral("/tokenizer_config.json"));
    QVERIFY(file.open(QIODevice::ReadOnly));
    const QJsonObject config = QJsonDocument::fromJson(file.readAll()).object();
    QCOMPARE(config[QStringLiteral("bos_token")].toString().toStdString(),
             engram_->id_to_piece(engram_->bos_id()));
    QCOMPARE(config[QStringLiteral("eos_token")].toString().toStdString(),
             engram_->id_to_piece(engram_->eos_id()));

    QTemporaryDir dir;
    writeFile(dir.filePath(QStringLiteral("tokenizer_config.json")),
              R"({"chat_template": "{% for m in messages %}{{ 'User said, \"' }}{% endfor %}"})");
    QCOMPARE(ChatTemplate::detect(dir.path().toStdString(), *llama_), ChatTemplateKind::kEngram);
  }

  void engramRepliesEndAtTheLineAndLoseTheirQuotes() {
    const ChatTemplate engram(ChatTemplateKind::kEngram);
    QCOMPARE(engram.stop_strings(), std::vector<std::string>({"\n"}));
    QCOMPARE(engram.reply_delimiters().open, std::string("\""));
    QCOMPARE(engram.reply_delimiters().close, std::string("\""));
    for (const auto kind :
         {ChatTemplateKind::kLlama2, ChatTemplateKind::kChatML, ChatTemplateKind::kPlain}) {
      const ReplyDelimiters none = ChatTemplate(kind).reply_delimiters();
      QVERIFY(none.open.empty() && none.close.empty());
    }
  }

  void replyQuotesAreNeverShownWhileStreaming() {
    const ReplyDelimiters quotes{"\"", "\""};
    const std::string reply = "\"Lasagna sounds delicious. Did it turn out well?\"";
    ReplyDelimiterStripper stripper(quotes);
    std::string shown;
    for (const char c : reply) {
      const std::string chunk = stripper.push(std::string(1, c));
      QVERIFY2(chunk.find('"') == std::string::npos, chunk.c_str());
      shown += chunk;
    }
    QCOMPARE(shown, std::string("Lasagna sounds delicious. Did it turn out well?"));
    QCOMPARE(stripper.finish(), std::string());
    // As the session streams it: one chunk per token.
    QCOMPARE(strip_delimiters(quotes, {"\"", "Lasagna", " sounds", " good", ".\""}),
             std::string("Lasagna sounds good."));
  }

  void replyDelimitersComeOffOnlyWhereTheyAre() {
    const ReplyDelimiters quotes{"\"", "\""};
    // Quotes inside the reply are its own.
    QCOMPARE(strip_delimiters(quotes, {"\"She said \"", "hi\" to", " me\""}),
             std::string("She said \"hi\" to me"));
    // A reply cut short (length limit, stop string) keeps what it has.
    QCOMPARE(strip_delimiters(quotes, {"\"Unfinished"}), std::string("Unfinished"));
    QCOMPARE(strip_delimiters(quotes, {"No quotes"}), std::string("No quotes"));
    QCOMPARE(strip_delimiters(quotes, {"\""}), std::string());
    QCOMPARE(strip_delimiters(quotes, {}), std::string());
    QCOMPARE(strip_delimiters(quotes, {"\"\""}), std::string());
    // Longer delimiters are held piece by piece.
    const ReplyDelimiters angles{"<<", ">>"};
    ReplyDelimiterStripper stripper(angles);
    QCOMPARE(stripper.push("<"), std::string());
    QCOMPARE(stripper.push("<x>"), std::string("x"));
    QCOMPARE(stripper.push("y>"), std::string(">y"));
    QCOMPARE(stripper.push(">"), std::string());
    QCOMPARE(stripper.finish(), std::string());
    QCOMPARE(strip_delimiters(angles, {"<a"}), std::string("<a"));
    // Templates without delimiters pass every chunk straight through.
    ReplyDelimiterStripper none(ReplyDelimiters{});
    QCOMPARE(none.push("\"as is\""), std::string("\"as is\""));
    QCOMPARE(none.finish(), std::string());
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
    QCOMPARE(parse_chat_template_kind("engram"), ChatTemplateKind::kEngram);
    QCOMPARE(chat_template_kind_name(ChatTemplateKind::kChatML), std::string_view("chatml"));
    QCOMPARE(chat_template_kind_name(ChatTemplateKind::kEngram), std::string_view("engram"));
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
