// Conversations as JSON lines: utterances, questions and facts survive a write/read round trip,
// on streams and as files next to a stem; a bad line is reported with its file and line.
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <sstream>

#include "core/env/conversation_generator.h"
#include "core/env/conversation_jsonl.h"

using namespace engram::env;

class TestConversationJsonl : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void streamsRoundTrip() {
    ConversationConfig config;
    config.seed = 12;
    const Conversation c = generate_conversation(config);
    std::stringstream u, q, f;
    write_utterances_jsonl(u, c.utterances);
    write_questions_jsonl(q, c.questions);
    write_facts_jsonl(f, c.facts);
    QVERIFY(read_utterances_jsonl(u) == c.utterances);
    QVERIFY(read_questions_jsonl(q) == c.questions);
    QVERIFY(read_facts_jsonl(f) == c.facts);
  }

  void oneUtteranceALineWithTheDocumentedKeys() {
    std::stringstream out;
    write_utterances_jsonl(out, {{"User", "Say \"hi\"\nplease", 2, "2023-05-14"}});
    QCOMPARE(out.str(), std::string("{\"session\":2,\"speaker\":\"User\",\"text\":\"Say "
                                    "\\\"hi\\\"\\nplease\",\"time\":\"2023-05-14\"}\n"));
    std::stringstream q;
    write_questions_jsonl(q, {{"When?", "May 14, 2023", QuestionType::kTemporal, {4, 9}}});
    QCOMPARE(q.str(), std::string("{\"answer\":\"May 14, 2023\",\"evidence\":[4,9],\"question\":"
                                  "\"When?\",\"type\":\"temporal\"}\n"));
  }

  void filesRoundTrip() {
    QTemporaryDir dir;
    ConversationConfig config;
    config.seed = 1000001;
    const Conversation c = generate_conversation(config);
    const std::filesystem::path stem = dir.path().toStdString() + "/sub/conv-1000001";
    save_conversation(stem, c);
    const Conversation back = load_conversation(stem);
    QVERIFY(back.utterances == c.utterances);
    QVERIFY(back.questions == c.questions);
    QVERIFY(back.facts == c.facts);
  }

  void badLineNamesItsLine() {
    std::stringstream in(
        "{\"speaker\":\"User\",\"text\":\"a\",\"session\":0,\"time\":\"x\"}\n"
        "\n"
        "{\"speaker\":\"User\",\"text\":\"b\"}\n");
    try {
      read_utterances_jsonl(in, "conv.jsonl");
      QFAIL("nothing thrown");
    } catch (const std::runtime_error& e) {
      QVERIFY2(std::string(e.what()).rfind("conv.jsonl:3:", 0) == 0, e.what());
    }
    std::stringstream q(
        "{\"question\":\"q\",\"answer\":\"a\",\"type\":\"sideways\",\"evidence\":[]}\n");
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, read_questions_jsonl(q));
  }

  void evidenceOutsideTheConversationIsRejected() {
    QTemporaryDir dir;
    const std::string stem = dir.path().toStdString() + "/c";
    std::ofstream(stem + ".utterances.jsonl")
        << "{\"speaker\":\"User\",\"text\":\"a\",\"session\":0,\"time\":\"2023-01-01\"}\n";
    std::ofstream(stem + ".questions.jsonl")
        << "{\"question\":\"q\",\"answer\":\"a\",\"type\":\"single-hop\",\"evidence\":[3]}\n";
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, load_conversation(stem));
  }
};

QTEST_GUILESS_MAIN(TestConversationJsonl)
#include "test_conversation_jsonl.moc"
