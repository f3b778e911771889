// The engine side of `engram-cli serve`: one thread that runs chat completions in arrival order,
// because the engine (a LoadedModel and its sessions) is not thread-safe; HTTP threads queue
// requests and wait for futures. It holds the sessions `engram-cli chat` uses (ChatSession under
// a memory policy): one for stateless requests, whose messages are the whole prompt (its cached
// prefix still saves the prefill of a repeated history), and one per stored conversation (the
// engram_conversation field), restored from the profile's store with its KV and saved after
// every reply, as `chat --conversation` does. A cancelled request (its client went away) stops
// at the next token and leaves its conversation as it was. While no request waits, the stored
// conversations in memory get EpiCache's work between turns (ChatSession::
// prepare_waiting_episode), one block at a time so that a request waits for one block at most,
// most recently used first, each saved when its work is done.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "app/cli/openai_protocol.h"
#include "core/engine/chat_session.h"
#include "core/engine/conversation_store.h"
#include "core/engine/loaded_model.h"
#include "storage/database.h"

namespace engram::cli {

struct CompletionSettings {
  PolicyChoice policy;             // new conversations and stateless requests
  bool policy_given = false;       // --policy: also replaces a stored conversation's own policy
  bool kv_budget_given = false;    // --kv-budget: also replaces a stored conversation's budget
  int64_t default_max_tokens = 0;  // a request without max_tokens
  int64_t max_sessions = 0;        // stored conversations kept in memory (each holds its KV)
};

struct CompletionOutcome {
  std::string text;           // what the client was sent (before any stop string)
  std::string finish_reason;  // OpenAI's: "stop", "length"; "cancelled" when the client left
  CompletionUsage usage;
};

// Receives the reply's text as it is generated, on the worker thread.
using CompletionTextSink = std::function<void(const std::string&)>;

class ChatCompletionWorker {
 public:
  // `db` may be null (no profile: requests naming a conversation get a 400). Throws ModelError
  // when the model cannot chat (no tokenizer or chat template).
  ChatCompletionWorker(LoadedModel& model, storage::Database* db, CompletionSettings settings);
  ~ChatCompletionWorker();  // stop(), then waits for the running request to end
  ChatCompletionWorker(const ChatCompletionWorker&) = delete;
  ChatCompletionWorker& operator=(const ChatCompletionWorker&) = delete;

  // Queues `request`. The future holds the outcome, or the exception: ApiError for what the
  // client must change (e.g. 400 context_length_exceeded), anything else is the server's fault.
  // Setting `cancel` stops the request at its next token (or before it starts).
  std::future<CompletionOutcome> submit(ChatCompletionRequest request, CompletionTextSink on_text,
                                        std::shared_ptr<std::atomic<bool>> cancel);
  // Any thread: cancels the running request, fails the queued ones and refuses new ones (503).
  void stop();

 private:
  struct Job {
    ChatCompletionRequest request;
    CompletionTextSink on_text;
    std::shared_ptr<std::atomic<bool>> cancel;
    std::promise<CompletionOutcome> promise;
  };

  void run();
  CompletionOutcome complete(Job& job);
  ChatSession& conversation_session(const std::string& name);
  // One block of the work between turns for the first conversation in memory that has any;
  // a conversation whose work is done is saved (when it did some) and leaves waiting_.
  void prepare_step();
  void save_prepared(const std::string& name, ChatSession& session);

  LoadedModel& model_;
  storage::Database* db_;
  std::unique_ptr<ConversationStore> store_;
  CompletionSettings settings_;
  std::unique_ptr<ChatSession> stateless_;
  // Most recently used first; the least recently used leaves when there are more than
  // settings_.max_sessions (nothing is lost: every reply was saved).
  std::list<std::pair<std::string, std::unique_ptr<ChatSession>>> conversations_;
  std::mt19937_64 seeds_;
  // Worker thread only: conversations that may have work between turns, and the blocks of it
  // done since each one's last save.
  std::set<std::string> waiting_;
  std::map<std::string, int64_t> prepared_steps_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> queue_;
  std::shared_ptr<std::atomic<bool>> running_cancel_;  // the running request's flag
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace engram::cli
