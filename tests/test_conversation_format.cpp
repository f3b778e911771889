// Prompts for the conversation world: `Speaker said, "text"` lines under dated session headers,
// QA prompts that end in "Answer:" with the gold answer as target and fit the 4,096-token
// budget, chat prompts that end in "Assistant said," with the quoted reply as target.
#include <QtTest>

#include <sstream>

#include <nlohmann/json.hpp>

#include "core/env/conversation_format.h"
#include "core/env/conversation_generator.h"

using namespace engram::env;

class TestConversationFormat : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void historyIsRenderedAsSpeakerSaidLines() {
    const std::vector<Utterance> u = {{"User", "I moved to Denver today!", 0, "2023-05-14"},
                                      {"Assistant", "Congratulations!", 0, "2023-05-14"},
                                      {"User", "Hi again!", 1, "2023-05-17"}};
    const std::string expected =
        "Session 1 (May 14, 2023)\n"
        "User said, \"I moved to Denver today!\"\n"
        "Assistant said, \"Congratulations!\"\n"
        "\n"
        "Session 2 (May 17, 2023)\n"
        "User said, \"Hi again!\"\n";
    QCOMPARE(render_history(u, 0, u.size()), expected);
    QCOMPARE(history_tokens(u, 0, u.size()), estimate_tokens(expected));
    QCOMPARE(history_tokens(u, 1, u.size()), estimate_tokens(render_history(u, 1, u.size())));
  }

  void tokenEstimateCountsWordsDigitsAndPunctuation() {
    QCOMPARE(estimate_tokens("Hi"), int64_t{1});
    QCOMPARE(estimate_tokens("congratulations"), int64_t{3});  // 15 letters
    QCOMPARE(estimate_tokens("May 14, 2023"), int64_t{8});     // 1 + 2 digits + comma + 4 digits
    QCOMPARE(estimate_tokens("a\nb"), int64_t{3});
  }

  void qaPromptEndsWithQuestionAndFitsBudget() {
    ConversationConfig config;
    config.seed = 3;
    const Conversation c = generate_conversation(config);
    FormatOptions options;
    const auto examples = qa_examples(c, options);
    QCOMPARE(examples.size(), c.questions.size());  // 2,000-4,000 tokens: nothing is cut
    for (size_t i = 0; i < examples.size(); ++i) {
      const TrainingExample& e = examples[i];
      QCOMPARE(e.target, c.questions[i].answer);
      QCOMPARE(e.kind, std::string("qa"));
      QCOMPARE(e.type, std::string(question_type_name(c.questions[i].type)));
      QVERIFY(e.prompt.rfind(qa_instruction(), 0) == 0);
      const std::string tail = "\nQuestion: " + c.questions[i].question + "\nAnswer:";
      QVERIFY(e.prompt.size() > tail.size() &&
              e.prompt.compare(e.prompt.size() - tail.size(), tail.size(), tail) == 0);
      QVERIFY(estimate_tokens(e.prompt) <= options.max_prompt_tokens);
    }
  }

  void longHistoryIsCutFromTheFrontKeepingEvidence() {
    ConversationConfig config;
    config.seed = 4;
    config.min_tokens = 20000;
    config.max_tokens = 24000;
    config.questions_per_type = 20;
    const Conversation c = generate_conversation(config);
    const auto examples = qa_examples(c, FormatOptions{});
    QVERIFY(!examples.empty());
    QVERIFY(examples.size() < c.questions.size());
    for (const TrainingExample& e : examples) {
      QVERIFY(estimate_tokens(e.prompt) <= FormatOptions{}.max_prompt_tokens);
      QVERIFY(e.prompt.find("Session 1 (") == std::string::npos);
    }
  }

  void chatExamplesPredictTheQuotedReply() {
    ConversationConfig config;
    config.seed = 9;
    const Conversation c = generate_conversation(config);
    FormatOptions options;
    const auto examples = chat_examples(c, options);
    QCOMPARE(examples.size(), size_t(options.chat_examples_per_conversation));
    for (const TrainingExample& e : examples) {
      QVERIFY(e.prompt.size() > 15 &&
              e.prompt.compare(e.prompt.size() - 15, 15, "Assistant said,") == 0);
      QVERIFY(e.target.size() > 2 && e.target.front() == '"' && e.target.back() == '"');
      QVERIFY(estimate_tokens(e.prompt) <= options.chat_history_tokens + 40);
      bool found = false;
      for (const Utterance& u : c.utterances)
        found |= u.speaker == kAssistantSpeaker && "\"" + u.text + "\"" == e.target;
      QVERIFY(found);
    }
    QVERIFY(chat_examples(c, options)[0].prompt == examples[0].prompt);
  }

  void trainingExampleIsOneJsonLine() {
    std::ostringstream out;
    write_training_example(out, {"P \"q\"\nAnswer:", "Denver", "qa", "single-hop", 42});
    const std::string line = out.str();
    QCOMPARE(std::count(line.begin(), line.end(), '\n'), 1L);
    const auto j = nlohmann::json::parse(line);
    QCOMPARE(j.at("prompt").get<std::string>(), std::string("P \"q\"\nAnswer:"));
    QCOMPARE(j.at("target").get<std::string>(), std::string("Denver"));
    QCOMPARE(j.at("seed").get<uint64_t>(), uint64_t{42});
  }
};

QTEST_GUILESS_MAIN(TestConversationFormat)
#include "test_conversation_format.moc"
