#include "app/cli/openai_server.h"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <mutex>
#include <random>
#include <stdexcept>

namespace engram::cli {
namespace {

using namespace std::chrono_literals;

constexpr const char* kJson = "application/json";

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status();
  res.set_content(api_error_json(error), kJson);
}

// What the client gets for an exception from parsing or from the worker: an ApiError as it is,
// anything else as the server's fault with its message (e.g. the store is full).
ApiError as_api_error(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const ApiError& e) {
    return e;
  } catch (const std::exception& e) {
    return ApiError(500, e.what(), "server_error");
  } catch (...) {
    return ApiError(500, "unknown error", "server_error");
  }
}

std::string completion_id() {
  static std::mutex mutex;
  static std::mt19937_64 random(std::random_device{}());
  std::lock_guard lock(mutex);
  char id[32];
  std::snprintf(id, sizeof id, "chatcmpl-%016llx", static_cast<unsigned long long>(random()));
  return id;
}

std::string sse_event(const std::string& data) {
  return "data: " + data + "\n\n";
}

// The text pieces of one streamed completion, from the worker thread to the HTTP thread that
// writes them.
struct StreamChannel {
  std::mutex mutex;
  std::condition_variable arrived;
  std::deque<std::string> pieces;

  void push(const std::string& text) {
    {
      std::lock_guard lock(mutex);
      pieces.push_back(text);
    }
    arrived.notify_one();
  }
  // Waits up to `timeout` for pieces and takes them all.
  std::deque<std::string> take(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex);
    arrived.wait_for(lock, timeout, [&] { return !pieces.empty(); });
    return std::exchange(pieces, {});
  }
  bool empty() {
    std::lock_guard lock(mutex);
    return pieces.empty();
  }
};

bool ready(const std::shared_future<CompletionOutcome>& future) {
  return future.wait_for(0s) == std::future_status::ready;
}

}  // namespace

struct OpenAiServer::Routes {
  ChatCompletionWorker& worker;
  OpenAiServerOptions options;
  int64_t created = static_cast<int64_t>(std::time(nullptr));
  httplib::Server http;

  Routes(ChatCompletionWorker& w, OpenAiServerOptions o) : worker(w), options(std::move(o)) {
    http.set_payload_max_length(static_cast<size_t>(options.max_body_bytes));
    // httplib's default is SO_REUSEPORT, with which a second server binds the same port and the
    // kernel splits connections between the two; SO_REUSEADDR alone still allows a restart
    // while old connections linger in TIME_WAIT, and a port in use fails to bind.
    http.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(model_list_json(options.model_id, created), kJson);
    });
    http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] != options.model_id) {
        send_error(res, ApiError(404, "The model '" + req.matches[1].str() + "' does not exist",
                                 "invalid_request_error", "model", "model_not_found"));
        return;
      }
      res.set_content(model_json(options.model_id, created), kJson);
    });
    // The body is read here, not by httplib: httplib 0.11 limits a body with Content-Length
    // (413 before reading it) but not a chunked one, which this receiver caps.
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res,
                                             const httplib::ContentReader& content) {
      if (req.get_header_value("Content-Type").rfind("multipart/", 0) == 0) {
        send_error(res, invalid_request("the body must be JSON, not a multipart form"));
        return;
      }
      std::string body;
      bool too_large = false;
      const bool read = content([&](const char* data, size_t n) {
        if (static_cast<int64_t>(body.size() + n) > options.max_body_bytes) {
          too_large = true;
          return false;
        }
        body.append(data, n);
        return true;
      });
      if (too_large || res.status == 413) {
        res.status = 413;  // the error handler writes the JSON
        return;
      }
      if (!read) {
        send_error(res, invalid_request("the request body could not be read"));
        return;
      }
      chat_completion(body, res);
    });
    not_allowed("/v1/chat/completions", "POST");
    not_allowed("/v1/models", "GET");
    not_allowed(R"(/v1/models/(.+))", "GET");
    // Statuses httplib sets itself (no route: 404; over the body limit: 413; a malformed
    // request: 400) get OpenAI's error shape too.
    http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 404) {
        send_error(res, ApiError(404, "Unknown request URL: " + req.method + " " + req.path,
                                 "invalid_request_error", "", "unknown_url"));
      } else if (res.status == 413) {
        send_error(res, ApiError(413,
                                 "the request body is larger than this server accepts (" +
                                     std::to_string(options.max_body_bytes) + " bytes)",
                                 "invalid_request_error", "", "request_too_large"));
      } else {
        send_error(
            res, ApiError(res.status,
                          "the request could not be read (HTTP " + std::to_string(res.status) + ")",
                          res.status >= 500 ? "server_error" : "invalid_request_error"));
      }
    });
    http.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
          send_error(res, as_api_error(error));
        });
    http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      std::fprintf(stderr, "%s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
    });
  }

  void not_allowed(const std::string& pattern, const std::string& allowed) {
    auto refuse = [allowed](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", allowed);
      send_error(
          res,
          ApiError(405, req.method + " is not allowed on " + req.path + " (use " + allowed + ")",
                   "invalid_request_error", "", "method_not_allowed"));
    };
    if (allowed != "GET") http.Get(pattern, refuse);
    if (allowed != "POST") http.Post(pattern, refuse);
    http.Put(pattern, refuse);
    http.Patch(pattern, refuse);
    http.Delete(pattern, refuse);
  }

  void chat_completion(const std::string& body, httplib::Response& res) {
    ChatCompletionRequest request;
    try {
      request = parse_chat_completion_request(body, options.model_id);
    } catch (const ApiError& e) {
      send_error(res, e);
      return;
    }
    const CompletionIdentity identity{completion_id(), static_cast<int64_t>(std::time(nullptr)),
                                      options.model_id, request.conversation};
    auto cancel = std::make_shared<std::atomic<bool>>(false);
    if (!request.stream) {
      // A client that leaves during a non-streamed completion is noticed only when the answer
      // is written; the generation runs to its end.
      try {
        const CompletionOutcome outcome = worker.submit(request, nullptr, cancel).get();
        if (outcome.finish_reason == "cancelled")
          throw ApiError(503, "the server is shutting down", "server_error");
        res.set_content(
            chat_completion_json(identity, outcome.text, outcome.finish_reason, outcome.usage),
            kJson);
      } catch (...) {
        send_error(res, as_api_error(std::current_exception()));
      }
      return;
    }
    const bool include_usage = request.include_usage;
    auto channel = std::make_shared<StreamChannel>();
    std::shared_future<CompletionOutcome> result;
    try {
      result = worker
                   .submit(
                       std::move(request),
                       [channel](const std::string& text) { channel->push(text); }, cancel)
                   .share();
    } catch (...) {
      send_error(res, as_api_error(std::current_exception()));
      return;
    }
    // The status goes out with the first byte, so wait for the first text or the end: a
    // request that fails before its first token (e.g. too long a prompt) gets a plain 4xx.
    while (channel->empty() && result.wait_for(20ms) != std::future_status::ready) {
    }
    if (channel->empty()) {
      try {
        (void)result.get();
      } catch (...) {
        send_error(res, as_api_error(std::current_exception()));
        return;
      }
    }
    res.set_header("Cache-Control", "no-cache");
    auto role_sent = std::make_shared<bool>(false);
    res.set_chunked_content_provider(
        "text/event-stream",
        [=](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& data) {
            const std::string event = sse_event(data);
            if (sink.write(event.data(), event.size())) return true;
            cancel->store(true);  // the client went away: stop generating for it
            return false;
          };
          if (!*role_sent) {
            *role_sent = true;
            return write(chat_completion_chunk_json(identity, "assistant", std::string(),
                                                    std::nullopt, include_usage));
          }
          const bool finished = ready(result);  // before taking: no piece comes after the end
          for (const std::string& piece : channel->take(finished ? 0ms : 100ms)) {
            if (!write(chat_completion_chunk_json(identity, std::nullopt, piece, std::nullopt,
                                                  include_usage)))
              return false;
          }
          if (!finished) return true;
          try {
            const CompletionOutcome outcome = result.get();
            // The worker cancels a running request only when the server stops (a client that
            // left reads nothing more).
            if (outcome.finish_reason == "cancelled")
              throw ApiError(503, "the server is shutting down", "server_error");
            if (!write(chat_completion_chunk_json(identity, std::nullopt, std::nullopt,
                                                  outcome.finish_reason, include_usage)))
              return false;
            if (include_usage && !write(usage_chunk_json(identity, outcome.usage))) return false;
          } catch (...) {
            // Mid-stream the status is sent already: the error goes as an event, as OpenAI does.
            if (!write(api_error_json(as_api_error(std::current_exception())))) return false;
          }
          if (!write("[DONE]")) return false;
          sink.done();
          return true;
        },
        [cancel](bool success) {
          if (!success) cancel->store(true);
        });
  }
};

OpenAiServer::OpenAiServer(ChatCompletionWorker& worker, OpenAiServerOptions options)
    : routes_(std::make_unique<Routes>(worker, std::move(options))) {}

OpenAiServer::~OpenAiServer() = default;

int OpenAiServer::bind() {
  const OpenAiServerOptions& o = routes_->options;
  if (o.port == 0) {
    const int port = routes_->http.bind_to_any_port(o.host);
    if (port <= 0) throw std::runtime_error("cannot listen on " + o.host + " (any port)");
    return port;
  }
  if (!routes_->http.bind_to_port(o.host, o.port)) {
    throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(o.port) +
                             " (in use? --port 0 picks a free one)");
  }
  return o.port;
}

void OpenAiServer::listen() {
  routes_->http.listen_after_bind();
}

void OpenAiServer::stop() {
  routes_->http.stop();
}

}  // namespace engram::cli
