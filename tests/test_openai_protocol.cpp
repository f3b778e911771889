// The OpenAI chat completions protocol of engram-cli serve without a server or a model: bodies
// become requests with OpenAI's defaults, each bad body is refused with the status, type and
// param OpenAI would give, and the responses have OpenAI's shape (text that is not UTF-8 goes out
// as U+FFFD instead of failing).
#include <QtTest>
#include <nlohmann/json.hpp>

#include "app/cli/openai_protocol.h"

using engram::cli::ApiError;
using engram::cli::ChatCompletionRequest;
using engram::cli::CompletionIdentity;
using engram::cli::CompletionUsage;
using nlohmann::json;

namespace {

const std::string kModel = "engram-tiny";

json with(json patch) {
  json body = {{"model", kModel}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  if (!patch.is_null()) body.merge_patch(patch);  // with({}): {} is null, not an object
  return body;
}

ChatCompletionRequest parse(const json& body) {
  return engram::cli::parse_chat_completion_request(body.dump(), kModel);
}

// The ApiError a body gets; status 0 when it is accepted.
ApiError refusal(const std::string& body) {
  try {
    (void)engram::cli::parse_chat_completion_request(body, kModel);
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "accepted", "");
}

}  // namespace

class TestOpenAiProtocol : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void defaultsAreOpenAis() {
    const ChatCompletionRequest r = parse(with({}));
    QCOMPARE(r.messages.size(), 1u);
    QCOMPARE(r.messages[0].role, std::string("user"));
    QCOMPARE(r.temperature, 1.0);
    QCOMPARE(r.top_p, 1.0);
    QVERIFY(!r.max_tokens && !r.seed && r.stop.empty() && !r.stream && r.conversation.empty());
  }

  void everySupportedParameterIsRead() {
    const ChatCompletionRequest r = parse(with({
        {"messages",
         {{{"role", "developer"}, {"content", "Be brief."}},
          {{"role", "user"},
           {"content", json::array({{{"type", "text"}, {"text", "Hel"}},
                                    {{"type", "text"}, {"text", "lo"}}})}},
          {{"role", "assistant"}, {"content", "Hi."}},
          {{"role", "user"}, {"content", "Again"}}}},
        {"max_tokens", 7},
        {"temperature", 0},
        {"top_p", 0.5},
        {"seed", 42},
        {"stop", "\n"},
        {"stream", true},
        {"stream_options", {{"include_usage", true}}},
        {"engram_conversation", "trip"},
        {"user", "someone"},        // accepted and ignored
        {"presence_penalty", 0.5},  // accepted and ignored
    }));
    QCOMPARE(r.messages.size(), 4u);
    QCOMPARE(r.messages[0].role, std::string("system"));  // developer is OpenAI's newer name
    QCOMPARE(r.messages[1].content, std::string("Hello"));
    QCOMPARE(*r.max_tokens, int64_t{7});
    QCOMPARE(r.temperature, 0.0);
    QCOMPARE(r.top_p, 0.5);
    QCOMPARE(*r.seed, uint64_t{42});
    QCOMPARE(r.stop, std::vector<std::string>{"\n"});
    QVERIFY(r.stream && r.include_usage);
    QCOMPARE(r.conversation, std::string("trip"));
    // max_completion_tokens is the current name and wins over max_tokens.
    QCOMPARE(*parse(with({{"max_completion_tokens", 3}, {"max_tokens", 9}})).max_tokens,
             int64_t{3});
    // An empty nucleus keeps the likeliest token only: greedy.
    QCOMPARE(parse(with({{"top_p", 0}})).temperature, 0.0);
  }

  void badBodiesAreRefusedNamingTheParameter_data() {
    QTest::addColumn<QByteArray>("body");
    QTest::addColumn<int>("status");
    QTest::addColumn<QString>("param");
    QTest::addColumn<QString>("code");
    auto row = [](const char* name, const json& body, int status, const char* param,
                  const char* code = "") {
      QTest::newRow(name) << QByteArray::fromStdString(body.dump()) << status << QString(param)
                          << QString(code);
    };
    QTest::newRow("not JSON") << QByteArray("{\"model\": ") << 400 << QString() << QString();
    QTest::newRow("deep nesting") << QByteArray::fromStdString(std::string(100000, '[') +
                                                               std::string(100000, ']'))
                                  << 400 << QString() << QString();
    QTest::newRow("bad UTF-8") << QByteArray("{\"model\": \"\xff\"}") << 400 << QString()
                               << QString();
    row("an array", json::array({1}), 400, "");
    row("no model", json{{"messages", json::array()}}, 400, "model");
    row("another model", with({{"model", "gpt-4o"}}), 404, "model", "model_not_found");
    row("no messages", json{{"model", kModel}}, 400, "messages");
    row("empty messages", with({{"messages", json::array()}}), 400, "messages");
    row("tool role", with({{"messages", {{{"role", "tool"}, {"content", "x"}}}}}), 400,
        "messages[0].role");
    row("late system",
        with({{"messages",
               {{{"role", "user"}, {"content", "a"}}, {{"role", "system"}, {"content", "b"}}}}}),
        400, "messages[1].role");
    row("reply last",
        with({{"messages",
               {{{"role", "user"}, {"content", "a"}}, {{"role", "assistant"}, {"content", "b"}}}}}),
        400, "messages");
    row("no content", with({{"messages", {{{"role", "user"}}}}}), 400, "messages[0].content");
    row("image part",
        with({{"messages",
               {{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", "x"}}}}}}}}),
        400, "messages[0].content[0].type");
    row("max_tokens 0", with({{"max_tokens", 0}}), 400, "max_tokens");
    row("max_tokens text", with({{"max_tokens", "9"}}), 400, "max_tokens");
    row("temperature 2.5", with({{"temperature", 2.5}}), 400, "temperature");
    row("top_p 1.5", with({{"top_p", 1.5}}), 400, "top_p");
    row("seed 1.5", with({{"seed", 1.5}}), 400, "seed");
    row("five stops", with({{"stop", {"a", "b", "c", "d", "e"}}}), 400, "stop");
    row("n 2", with({{"n", 2}}), 400, "n");
    row("tools", with({{"tools", {{{"type", "function"}}}}}), 400, "tools");
    row("logprobs", with({{"logprobs", true}}), 400, "logprobs");
    row("json mode", with({{"response_format", {{"type", "json_object"}}}}), 400,
        "response_format");
    row("stream_options alone", with({{"stream_options", {{"include_usage", true}}}}), 400,
        "stream_options");
    row("stream text", with({{"stream", "yes"}}), 400, "stream");
    row("empty conversation", with({{"engram_conversation", ""}}), 400, "engram_conversation");
  }

  void badBodiesAreRefusedNamingTheParameter() {
    QFETCH(QByteArray, body);
    QFETCH(int, status);
    QFETCH(QString, param);
    QFETCH(QString, code);
    const ApiError e = refusal(body.toStdString());
    QCOMPARE(e.status(), status);
    QCOMPARE(e.type(), std::string("invalid_request_error"));
    QCOMPARE(QString::fromStdString(e.param()), param);
    QCOMPARE(QString::fromStdString(e.code()), code);
    QVERIFY(std::string(e.what()).size() > 10);
  }

  void errorsHaveOpenAisShape() {
    const json e = json::parse(
        engram::cli::api_error_json(ApiError(400, "bad", "invalid_request_error")))["error"];
    QCOMPARE(e.size(), 4u);
    QCOMPARE(e["message"], "bad");
    QCOMPARE(e["type"], "invalid_request_error");
    QVERIFY(e["param"].is_null() && e["code"].is_null());
    const json f = json::parse(engram::cli::api_error_json(
        ApiError(404, "gone", "invalid_request_error", "model", "model_not_found")))["error"];
    QCOMPARE(f["param"], "model");
    QCOMPARE(f["code"], "model_not_found");
  }

  void responsesHaveOpenAisShape() {
    const CompletionIdentity id{"chatcmpl-1", 1700000000, kModel, "trip"};
    const json c = json::parse(
        engram::cli::chat_completion_json(id, "ok \xff", "length", CompletionUsage{12, 3}));
    QCOMPARE(c["object"], "chat.completion");
    QCOMPARE(c["choices"][0]["message"]["content"], "ok \xEF\xBF\xBD");
    QCOMPARE(c["choices"][0]["finish_reason"], "length");
    QCOMPARE(c["usage"]["total_tokens"], 15);
    QCOMPARE(c["engram_conversation"], "trip");
    const json first = json::parse(engram::cli::chat_completion_chunk_json(
        id, std::string("assistant"), std::string(), std::nullopt, true));
    QCOMPARE(first["object"], "chat.completion.chunk");
    QCOMPARE(first["choices"][0]["delta"]["role"], "assistant");
    QVERIFY(first["choices"][0]["finish_reason"].is_null());
    QVERIFY(first.contains("usage") && first["usage"].is_null());
    const json last = json::parse(engram::cli::chat_completion_chunk_json(
        id, std::nullopt, std::nullopt, std::string("stop"), false));
    QVERIFY(last["choices"][0]["delta"].empty() && !last.contains("usage"));
    const json usage = json::parse(engram::cli::usage_chunk_json(id, CompletionUsage{2, 1}));
    QVERIFY(usage["choices"].empty());
    QCOMPARE(usage["usage"]["total_tokens"], 3);
    const json models = json::parse(engram::cli::model_list_json(kModel, 5));
    QCOMPARE(models["object"], "list");
    QCOMPARE(models["data"][0]["id"], kModel);
    QCOMPARE(engram::cli::openai_finish_reason("eos"), std::string("stop"));
    QCOMPARE(engram::cli::openai_finish_reason("length"), std::string("length"));
  }
};

QTEST_GUILESS_MAIN(TestOpenAiProtocol)
#include "test_openai_protocol.moc"
