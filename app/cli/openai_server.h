// The HTTP side of `engram-cli serve` (cpp-httplib): POST /v1/chat/completions (JSON or, with
// "stream": true, server-sent events), GET /v1/models and /v1/models/{id}. httplib's thread pool
// reads requests and writes responses; every completion goes through the one
// ChatCompletionWorker. Errors use OpenAI's JSON shape: 400 bad JSON or parameters, 404 unknown
// model or URL, 405 a known URL with another method, 413 a body over the limit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "app/cli/chat_completion_worker.h"

namespace engram::cli {

struct OpenAiServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  int64_t max_body_bytes = int64_t{4} << 20;
  std::string model_id;  // what "model" must say: the model folder's name
};

class OpenAiServer {
 public:
  OpenAiServer(ChatCompletionWorker& worker, OpenAiServerOptions options);
  ~OpenAiServer();
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  // Binds the listening socket and returns its port; throws std::runtime_error when it cannot.
  int bind();
  // Serves until stop(); call after bind().
  void listen();
  // Any thread: stops accepting and makes listen() return.
  void stop();

 private:
  struct Routes;
  std::unique_ptr<Routes> routes_;
};

}  // namespace engram::cli
