#include "app/cli/openai_protocol.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace engram::cli {
namespace {

using nlohmann::json;

// Generated text may hold bytes that are not UTF-8 (a byte-fallback token alone); they go out as
// U+FFFD instead of failing the response.
std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

json null_if_empty(const std::string& text) {
  return text.empty() ? json(nullptr) : json(text);
}

std::string type_name(const json& value) {
  return value.is_number() ? "number" : value.type_name();
}

// The text of a message's content: a string, or OpenAI's array of parts of which only
// {"type": "text", "text": ...} is supported.
std::string message_content(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    throw invalid_request(
        param + " must be a string or an array of text parts, not " + type_name(content), param);
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string part_param = param + "[" + std::to_string(i) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      throw invalid_request(part_param + " must be an object with a \"type\"", part_param);
    const std::string type = part["type"].get<std::string>();
    if (type != "text") {
      throw invalid_request(
          "content parts of type '" + type + "' are not supported (this model reads text)",
          part_param + ".type");
    }
    if (!part.contains("text") || !part["text"].is_string())
      throw invalid_request(part_param + ".text must be a string", part_param + ".text");
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> parse_messages(const json& body) {
  if (!body.contains("messages")) throw invalid_request("messages is required", "messages");
  const json& messages = body["messages"];
  if (!messages.is_array() || messages.empty())
    throw invalid_request("messages must be a non-empty array", "messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw invalid_request(param + " must be an object", param);
    if (!m.contains("role") || !m["role"].is_string())
      throw invalid_request(param + ".role must be a string", param + ".role");
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for the system prompt
    if (role != "system" && role != "user" && role != "assistant") {
      throw invalid_request("role '" + role +
                                "' is not supported: messages are system (or developer), user "
                                "and assistant",
                            param + ".role");
    }
    // The chat templates place a system prompt before the first turn only.
    if (role == "system" && i > 0)
      throw invalid_request("a system message can only be the first message", param + ".role");
    if (!m.contains("content"))
      throw invalid_request(param + ".content is required", param + ".content");
    out.push_back({role, message_content(m["content"], param + ".content")});
  }
  if (out.back().role != "user")
    throw invalid_request("the last message must be the user's", "messages");
  return out;
}

double number_in(const json& body, const char* name, double fallback, double lo, double hi) {
  if (!body.contains(name) || body[name].is_null()) return fallback;
  const json& v = body[name];
  if (!v.is_number())
    throw invalid_request(std::string(name) + " must be a number, not " + type_name(v), name);
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) {
    char range[64];
    std::snprintf(range, sizeof range, " must be between %g and %g", lo, hi);
    throw invalid_request(std::string(name) + range, name);
  }
  return x;
}

std::optional<int64_t> max_tokens(const json& body) {
  // max_completion_tokens is the current name; max_tokens the older one clients still send.
  for (const char* name : {"max_completion_tokens", "max_tokens"}) {
    if (!body.contains(name) || body[name].is_null()) continue;
    const json& v = body[name];
    if (!v.is_number_integer() || v.get<int64_t>() < 1)
      throw invalid_request(std::string(name) + " must be an integer of at least 1", name);
    return v.get<int64_t>();
  }
  return std::nullopt;
}

std::vector<std::string> stop_strings(const json& body) {
  if (!body.contains("stop") || body["stop"].is_null()) return {};
  const json& v = body["stop"];
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array() || v.size() > 4)
    throw invalid_request("stop must be a string or an array of at most 4 strings", "stop");
  std::vector<std::string> out;
  for (const json& s : v) {
    if (!s.is_string()) throw invalid_request("stop must hold strings only", "stop");
    out.push_back(s.get<std::string>());
  }
  return out;
}

bool flag(const json& body, const char* name) {
  if (!body.contains(name) || body[name].is_null()) return false;
  if (!body[name].is_boolean())
    throw invalid_request(std::string(name) + " must be a boolean", name);
  return body[name].get<bool>();
}

// Parameters whose effect this server cannot give refuse the request instead of silently
// answering something else; the rest of OpenAI's optional parameters (user, metadata,
// presence_penalty, frequency_penalty, ...) are accepted and ignored (docs/serve.md).
void refuse_unsupported(const json& body) {
  if (body.contains("n") && !body["n"].is_null() && body["n"] != 1)
    throw invalid_request("n must be 1: one choice per request", "n");
  for (const char* name : {"tools", "functions"}) {
    if (body.contains(name) && !body[name].is_null() && !body[name].empty())
      throw invalid_request(std::string(name) + " are not supported", name);
  }
  if (flag(body, "logprobs")) throw invalid_request("logprobs are not supported", "logprobs");
  if (body.contains("response_format") && !body["response_format"].is_null()) {
    const json& f = body["response_format"];
    if (!f.is_object() || f.value("type", std::string()) != "text") {
      throw invalid_request("response_format other than {\"type\": \"text\"} is not supported",
                            "response_format");
    }
  }
}

}  // namespace

ApiError::ApiError(int status, const std::string& message, std::string type, std::string param,
                   std::string code)
    : std::runtime_error(message),
      status_(status),
      type_(std::move(type)),
      param_(std::move(param)),
      code_(std::move(code)) {}

ApiError invalid_request(const std::string& message, const std::string& param,
                         const std::string& code) {
  return ApiError(400, message, "invalid_request_error", param, code);
}

std::string api_error_json(const ApiError& error) {
  return dump({{"error",
                {{"message", error.what()},
                 {"type", error.type()},
                 {"param", null_if_empty(error.param())},
                 {"code", null_if_empty(error.code())}}}});
}

ChatCompletionRequest parse_chat_completion_request(std::string_view text,
                                                    const std::string& model_id) {
  json body;
  try {
    body = json::parse(text);
  } catch (const json::parse_error& e) {
    throw invalid_request(std::string("the body is not valid JSON: ") + e.what());
  }
  if (!body.is_object())
    throw invalid_request("the body must be a JSON object, not " + type_name(body));
  if (!body.contains("model") || !body["model"].is_string())
    throw invalid_request("model must be a string naming the served model", "model");
  const std::string model = body["model"].get<std::string>();
  if (model != model_id) {
    throw ApiError(
        404, "The model '" + model + "' does not exist; this server serves '" + model_id + "'",
        "invalid_request_error", "model", "model_not_found");
  }
  ChatCompletionRequest r;
  r.messages = parse_messages(body);
  refuse_unsupported(body);
  r.max_tokens = max_tokens(body);
  r.temperature = number_in(body, "temperature", 1.0, 0.0, 2.0);
  r.top_p = number_in(body, "top_p", 1.0, 0.0, 1.0);
  if (r.top_p == 0.0) r.temperature = 0.0;  // an empty nucleus keeps only the likeliest token
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer()) throw invalid_request("seed must be an integer", "seed");
    r.seed = static_cast<uint64_t>(body["seed"].get<int64_t>());
  }
  r.stop = stop_strings(body);
  r.stream = flag(body, "stream");
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const json& o = body["stream_options"];
    if (!r.stream)
      throw invalid_request("stream_options is only allowed with stream: true", "stream_options");
    if (!o.is_object()) throw invalid_request("stream_options must be an object", "stream_options");
    r.include_usage = flag(o, "include_usage");
  }
  if (body.contains(kConversationField) && !body[kConversationField].is_null()) {
    const json& c = body[kConversationField];
    if (!c.is_string() || c.get<std::string>().empty()) {
      throw invalid_request(std::string(kConversationField) +
                                " must be a non-empty string naming a stored conversation",
                            kConversationField);
    }
    r.conversation = c.get<std::string>();
  }
  return r;
}

std::string openai_finish_reason(const std::string& engine_stop_reason) {
  return engine_stop_reason == "length" ? "length" : "stop";
}

namespace {

json identity_fields(const CompletionIdentity& identity, const char* object) {
  json out = {{"id", identity.id},
              {"object", object},
              {"created", identity.created},
              {"model", identity.model},
              {"system_fingerprint", nullptr}};
  if (!identity.conversation.empty()) out[kConversationField] = identity.conversation;
  return out;
}

json usage_json(const CompletionUsage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

}  // namespace

std::string chat_completion_json(const CompletionIdentity& identity, const std::string& text,
                                 const std::string& finish_reason, const CompletionUsage& usage) {
  json out = identity_fields(identity, "chat.completion");
  out["choices"] = json::array({{{"index", 0},
                                 {"message", {{"role", "assistant"}, {"content", text}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", finish_reason}}});
  out["usage"] = usage_json(usage);
  return dump(out);
}

std::string chat_completion_chunk_json(const CompletionIdentity& identity,
                                       const std::optional<std::string>& role,
                                       const std::optional<std::string>& content,
                                       const std::optional<std::string>& finish_reason,
                                       bool include_usage) {
  json delta = json::object();
  if (role) delta["role"] = *role;
  if (content) delta["content"] = *content;
  json out = identity_fields(identity, "chat.completion.chunk");
  out["choices"] =
      json::array({{{"index", 0},
                    {"delta", delta},
                    {"logprobs", nullptr},
                    {"finish_reason", finish_reason ? json(*finish_reason) : json()}}});
  if (include_usage) out["usage"] = nullptr;
  return dump(out);
}

std::string usage_chunk_json(const CompletionIdentity& identity, const CompletionUsage& usage) {
  json out = identity_fields(identity, "chat.completion.chunk");
  out["choices"] = json::array();
  out["usage"] = usage_json(usage);
  return dump(out);
}

namespace {

json model_object(const std::string& model_id, int64_t created) {
  return {{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "engram"}};
}

}  // namespace

std::string model_json(const std::string& model_id, int64_t created) {
  return dump(model_object(model_id, created));
}

std::string model_list_json(const std::string& model_id, int64_t created) {
  return dump({{"object", "list"}, {"data", json::array({model_object(model_id, created)})}});
}

}  // namespace engram::cli
