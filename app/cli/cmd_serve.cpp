// engram-cli serve (issue 19): the model behind an OpenAI-compatible HTTP API on this machine
// (app/cli/openai_server.h; docs/serve.md), with chat's sessions, memory policies and stored
// conversations. Ctrl-C (SIGINT) or SIGTERM stops it: the running request is cancelled, every
// finished reply of a stored conversation is already saved.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "app/cli/chat_completion_worker.h"
#include "app/cli/commands.h"
#include "app/cli/model_loading.h"
#include "app/cli/openai_server.h"
#include "core/policies/policy_registry.h"
#include "storage/database.h"
#include "storage/profile_paths.h"

namespace engram::cli {
namespace {

// SIGINT and SIGTERM go to one thread (sigwait) instead of a handler, so that stopping the server
// may lock and join. They are blocked before any other thread starts (libtorch starts its own
// while the model loads), so no other thread receives them. Until arm(), a signal ends the
// process at once (nothing is open that needs saving).
class SignalStopper {
 public:
  SignalStopper() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    thread_ = std::thread([this] { wait(); });
  }
  ~SignalStopper() {
    disarm();
    pthread_kill(thread_.native_handle(), SIGTERM);  // wakes the waiting thread
    thread_.join();
  }
  void arm(std::function<void()> stop) {
    std::lock_guard lock(mutex_);
    stop_ = std::move(stop);
  }
  void disarm() {
    std::lock_guard lock(mutex_);
    done_ = true;
  }

 private:
  void wait() {
    int signal = 0;
    sigwait(&signals_, &signal);
    std::lock_guard lock(mutex_);
    if (done_) return;
    std::fprintf(stderr, "stopping (%s)\n", signal == SIGINT ? "SIGINT" : "SIGTERM");
    if (!stop_) std::_Exit(128 + signal);
    stop_();
  }

  sigset_t signals_;
  std::mutex mutex_;
  std::function<void()> stop_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

int run_serve(int argc, char** argv) {
  SignalStopper stopper;
  auto flags = model_flags_with_value();
  flags.merge(policy_flags());
  flags.insert({"host", "port", "profile", "max-tokens", "max-body-bytes", "sessions"});
  const Args args(argc, argv, 2, flags, {"stateless"});
  if (!args.positional().empty())
    throw UsageError("unexpected argument '" + args.positional().front() + "'");
  if (args.has("stateless") && args.has("profile"))
    throw UsageError("--stateless keeps no conversations; --profile has no use with it");
  OpenAiServerOptions server;
  server.host = args.str("host", server.host);
  const int64_t port = args.integer("port", server.port);
  if (port < 0 || port > 65535) throw UsageError("--port must be 0 (any free port) to 65535");
  server.port = static_cast<int>(port);
  server.max_body_bytes = args.integer("max-body-bytes", server.max_body_bytes);
  if (server.max_body_bytes < 1024) throw UsageError("--max-body-bytes must be at least 1024");
  CompletionSettings settings;
  settings.policy = policy_choice_from_args(args, default_policy_spec());
  settings.policy_given = args.has("policy");
  settings.kv_budget_given = args.has("kv-budget");
  settings.default_max_tokens = args.integer("max-tokens", 512);
  if (settings.default_max_tokens < 1) throw UsageError("--max-tokens must be at least 1");
  settings.max_sessions = args.integer("sessions", 4);
  if (settings.max_sessions < 1) throw UsageError("--sessions must be at least 1");

  // The profile opens before the model loads, so a profile in use fails fast.
  std::unique_ptr<storage::Database> db;
  if (!args.has("stateless")) {
    db = std::make_unique<storage::Database>(args.has("profile")
                                                 ? std::filesystem::path(args.str("profile", ""))
                                                 : storage::default_profile_dir());
  }
  LoadedModel model = load_text_model_from_args(args, "serve");
  server.model_id = model.name;

  // A client that disconnects mid-write must not kill the server (httplib writes without
  // MSG_NOSIGNAL).
  std::signal(SIGPIPE, SIG_IGN);

  ChatCompletionWorker worker(model, db.get(), settings);
  OpenAiServer http(worker, server);
  const int bound = http.bind();
  std::fprintf(stderr, "memory policy: %s, KV budget %s; %s\n", settings.policy.spec.c_str(),
               settings.policy.kv_budget > 0
                   ? (std::to_string(settings.policy.kv_budget) + " tokens").c_str()
                   : "the policy's default",
               db ? ("conversations in " + db->paths().dir.string()).c_str()
                  : "stateless (no conversations kept)");
  std::printf("serving %s at http://%s:%d/v1\n", model.name.c_str(), server.host.c_str(), bound);
  std::fflush(stdout);

  stopper.arm([&] {
    worker.stop();
    http.stop();
  });
  http.listen();
  stopper.disarm();
  return 0;
}

}  // namespace engram::cli
