// OpenAI's chat completions protocol (platform.openai.com/docs/api-reference/chat) as
// `engram-cli serve` speaks it: a request body checked into plain values, and the JSON of
// completions, stream chunks, the model list and errors. No HTTP and no engine here, so a test
// can feed it bodies (docs/serve.md lists what is supported).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer/chat_template.h"

namespace engram::cli {

// An error as OpenAI reports it: an HTTP status and
// {"error": {"message": ..., "type": ..., "param": ..., "code": ...}} (empty param/code: null).
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string type, std::string param = {},
           std::string code = {});
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string type_;
  std::string param_;
  std::string code_;
};

// 400 invalid_request_error naming the parameter at fault.
ApiError invalid_request(const std::string& message, const std::string& param = {},
                         const std::string& code = {});

std::string api_error_json(const ApiError& error);

// The request body field that names a stored conversation (an Engram extension; docs/serve.md).
inline constexpr const char* kConversationField = "engram_conversation";

struct ChatCompletionRequest {
  std::vector<ChatMessage> messages;  // roles "system" (first only), "user", "assistant"
  std::optional<int64_t> max_tokens;  // max_completion_tokens or max_tokens; none: the server's
  double temperature = 1.0;           // OpenAI's defaults; 0 = greedy
  double top_p = 1.0;
  std::optional<uint64_t> seed;  // none: a fresh seed per request, as OpenAI
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
  std::string conversation;    // engram_conversation; empty: stateless
};

// Parses and checks a POST /v1/chat/completions body for the served `model_id`. Throws ApiError:
// 400 invalid_request_error (bad JSON, a bad or unsupported parameter, named in `param`), 404
// model_not_found (another model).
ChatCompletionRequest parse_chat_completion_request(std::string_view body,
                                                    const std::string& model_id);

struct CompletionUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// What every response of one completion shares.
struct CompletionIdentity {
  std::string id;  // "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  std::string conversation;  // echoed as engram_conversation when not empty
};

// "eos", "stop" (a stop string) -> "stop"; "length" -> "length".
std::string openai_finish_reason(const std::string& engine_stop_reason);

std::string chat_completion_json(const CompletionIdentity& identity, const std::string& text,
                                 const std::string& finish_reason, const CompletionUsage& usage);
// One SSE chunk's JSON: the first carries the role, the middle ones content, the last the
// finish_reason with an empty delta. With include_usage every chunk has "usage": null.
std::string chat_completion_chunk_json(const CompletionIdentity& identity,
                                       const std::optional<std::string>& role,
                                       const std::optional<std::string>& content,
                                       const std::optional<std::string>& finish_reason,
                                       bool include_usage);
// The chunk after the last one when include_usage: no choices, the usage.
std::string usage_chunk_json(const CompletionIdentity& identity, const CompletionUsage& usage);

std::string model_json(const std::string& model_id, int64_t created);
std::string model_list_json(const std::string& model_id, int64_t created);

}  // namespace engram::cli
