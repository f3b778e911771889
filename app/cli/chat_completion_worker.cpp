#include "app/cli/chat_completion_worker.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <utility>

#include "core/tokenizer/stop_strings.h"
#include "storage/conversation_repository.h"

namespace engram::cli {
namespace {

bool starts_with(const std::vector<ChatMessage>& messages, const std::vector<ChatMessage>& prefix) {
  if (prefix.size() > messages.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (messages[i].role != prefix[i].role || messages[i].content != prefix[i].content)
      return false;
  }
  return true;
}

}  // namespace

ChatCompletionWorker::ChatCompletionWorker(LoadedModel& model, storage::Database* db,
                                           CompletionSettings settings)
    : model_(model),
      db_(db),
      settings_(std::move(settings)),
      stateless_(std::make_unique<ChatSession>(model, std::string(), settings_.policy)),
      seeds_(std::random_device{}()) {
  if (db_) store_ = std::make_unique<ConversationStore>(*db_);
  thread_ = std::thread([this] { run(); });
}

ChatCompletionWorker::~ChatCompletionWorker() {
  stop();
  thread_.join();
}

void ChatCompletionWorker::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    if (running_cancel_) running_cancel_->store(true);
    for (Job& job : queue_) {
      job.promise.set_exception(
          std::make_exception_ptr(ApiError(503, "the server is shutting down", "server_error")));
    }
    queue_.clear();
  }
  wake_.notify_all();
}

std::future<CompletionOutcome> ChatCompletionWorker::submit(
    ChatCompletionRequest request, CompletionTextSink on_text,
    std::shared_ptr<std::atomic<bool>> cancel) {
  Job job{std::move(request), std::move(on_text), std::move(cancel), {}};
  std::future<CompletionOutcome> result = job.promise.get_future();
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw ApiError(503, "the server is shutting down", "server_error");
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
  return result;
}

void ChatCompletionWorker::run() {
  while (true) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      if (waiting_.empty()) wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) break;
      if (queue_.empty()) {  // idle, with work between turns left: one block of it
        lock.unlock();
        prepare_step();
        continue;
      }
      job = std::move(queue_.front());
      queue_.pop_front();
      running_cancel_ = job.cancel;
    }
    try {
      job.promise.set_value(complete(job));
    } catch (...) {
      job.promise.set_exception(std::current_exception());
    }
    std::lock_guard lock(mutex_);
    running_cancel_.reset();
  }
  // Shutting down: what was prepared since the last save is kept.
  for (auto& [name, session] : conversations_)
    if (prepared_steps_.contains(name)) save_prepared(name, *session);
}

void ChatCompletionWorker::save_prepared(const std::string& name, ChatSession& session) {
  const int64_t steps = prepared_steps_[name];
  prepared_steps_.erase(name);
  try {
    const int64_t id = store_->save(name, session);
    const auto kv = store_->stored_kv(id);
    std::fprintf(stderr,
                 "conversation '%s': prepared between requests (%lld blocks), saved with %lld "
                 "episode caches\n",
                 name.c_str(), static_cast<long long>(steps),
                 static_cast<long long>(kv ? kv->episode_caches : 0));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conversation '%s': what was prepared could not be saved: %s\n",
                 name.c_str(), e.what());
  }
}

void ChatCompletionWorker::prepare_step() {
  for (auto& [name, session] : conversations_) {  // most recently used first
    if (!waiting_.contains(name)) continue;
    try {
      if (session->prepare_waiting_episode()) {
        ++prepared_steps_[name];
        return;
      }
      if (prepared_steps_.contains(name)) save_prepared(name, *session);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "conversation '%s': the work between turns stopped: %s\n", name.c_str(),
                   e.what());
      prepared_steps_.erase(name);
    }
    waiting_.erase(name);
    return;
  }
  waiting_.clear();  // the others left memory
}

ChatSession& ChatCompletionWorker::conversation_session(const std::string& name) {
  for (auto it = conversations_.begin(); it != conversations_.end(); ++it) {
    if (it->first == name) {
      conversations_.splice(conversations_.begin(), conversations_, it);
      return *conversations_.front().second;
    }
  }
  // As `chat --conversation`: a stored conversation keeps the policy it was saved with unless
  // the server was started with --policy.
  PolicyChoice choice = settings_.policy;
  if (!settings_.policy_given) {
    if (const auto row = storage::ConversationRepository(*db_).find_by_name(name);
        row && !row->memory_policy.empty()) {
      choice = {row->memory_policy,
                settings_.kv_budget_given ? settings_.policy.kv_budget : row->kv_budget};
    }
  }
  auto session = std::make_unique<ChatSession>(model_, std::string(), choice);
  session->keep_for_store(true);
  if (const auto restored = store_->restore(name, *session)) {
    std::fprintf(stderr, "conversation '%s': restored %lld messages, %s\n", name.c_str(),
                 static_cast<long long>(restored->utterances),
                 restored->kv_restored
                     ? (std::to_string(restored->cached_tokens) + " cached tokens").c_str()
                     : ("cache rebuilt from the text: " + restored->rebuild_reason).c_str());
  }
  conversations_.emplace_front(name, std::move(session));
  waiting_.insert(name);  // episodes the store lacks are built while no request waits
  while (conversations_.size() >
         static_cast<size_t>(std::max<int64_t>(1, settings_.max_sessions))) {
    auto& [leaving, left] = conversations_.back();
    if (prepared_steps_.contains(leaving)) save_prepared(leaving, *left);
    waiting_.erase(leaving);
    conversations_.pop_back();
  }
  return *conversations_.front().second;
}

CompletionOutcome ChatCompletionWorker::complete(Job& job) {
  const ChatCompletionRequest& request = job.request;
  CompletionOutcome outcome;
  if (job.cancel->load()) {
    outcome.finish_reason = "cancelled";
    return outcome;
  }
  const bool stored = !request.conversation.empty();
  if (stored && !store_) {
    throw invalid_request("this server keeps no conversations (started with --stateless)",
                          kConversationField);
  }
  ChatSession& session = stored ? conversation_session(request.conversation) : *stateless_;
  const std::vector<ChatMessage> before = session.history();

  // A stored conversation is the history: the request adds its messages after it. A client that
  // resends the whole conversation (as chat UIs do) adds only what follows the stored part.
  std::vector<ChatMessage> turns = request.messages;
  std::vector<ChatMessage> history;
  if (stored) {
    if (starts_with(turns, before)) turns.erase(turns.begin(), turns.begin() + before.size());
    if (turns.empty()) {
      throw invalid_request("the messages repeat the stored conversation and add no user message",
                            "messages");
    }
    if (turns.front().role == "system" && !before.empty()) {
      throw invalid_request("conversation '" + request.conversation +
                                "' has begun: a system message can only start it",
                            "messages");
    }
    history = before;
  }
  history.insert(history.end(), turns.begin(), turns.end() - 1);
  session.set_history(history);

  GenerationOptions options;
  options.max_new_tokens = request.max_tokens.value_or(settings_.default_max_tokens);
  options.sampling.temperature = request.temperature;
  options.sampling.top_p = request.top_p;
  options.sampling.seed = request.seed ? *request.seed : seeds_();
  options.cancel = job.cancel.get();

  // The request's stop strings over the text the session shows; a match stops generation at
  // the next token through the same flag a client's disconnect raises.
  StopStringMatcher stops(request.stop);
  auto forward = [&](const std::string& text) {
    if (text.empty()) return;
    outcome.text += text;
    if (job.on_text) job.on_text(text);
  };
  ChatReply reply;
  try {
    reply = session.reply(turns.back().content, options, [&](const std::string& piece) {
      if (stops.stopped()) return;
      forward(stops.push(piece));
      if (stops.stopped()) job.cancel->store(true);
    });
  } catch (const std::out_of_range& e) {
    session.set_history(before);
    // The policy keeps every token (e.g. --policy full) and the prompt passed the positions.
    throw invalid_request(e.what(), "messages", "context_length_exceeded");
  } catch (...) {
    session.set_history(before);
    throw;
  }
  if (!stops.stopped()) forward(stops.finish());
  outcome.usage.prompt_tokens = reply.reused_tokens + reply.generation.prompt_tokens;
  outcome.usage.completion_tokens = static_cast<int64_t>(reply.generation.tokens.size());
  const bool client_left = reply.generation.stop_reason == "cancelled" && !stops.stopped();
  std::fprintf(
      stderr,
      "completion (%s): %lld prompt tokens (%lld reused), %lld generated, %.1f tokens/s, "
      "%s\n",
      stored ? ("conversation '" + request.conversation + "'").c_str() : "stateless",
      static_cast<long long>(outcome.usage.prompt_tokens),
      static_cast<long long>(reply.reused_tokens),
      static_cast<long long>(outcome.usage.completion_tokens), reply.generation.decode_tokens_per_s,
      client_left ? "cancelled (client gone or server stopping)"
                  : ("finish " + std::string(stops.stopped() ? "stop (stop string)"
                                                             : reply.generation.stop_reason))
                        .c_str());
  if (client_left) {
    // The client went away: its reply was never read, so the conversation stays as it was (the
    // session's cache keeps the common prefix for the next request).
    session.set_history(before);
    outcome.finish_reason = "cancelled";
    return outcome;
  }
  outcome.finish_reason =
      stops.stopped() ? "stop" : openai_finish_reason(reply.generation.stop_reason);
  if (stops.stopped()) {
    // The history keeps what the client saw: the reply up to the stop string.
    std::vector<ChatMessage> kept = session.history();
    kept.back().content = outcome.text;
    session.set_history(std::move(kept));
  }
  if (stored) {
    store_->save(request.conversation, session);
    prepared_steps_.erase(request.conversation);  // that save kept it
    waiting_.insert(request.conversation);
  }
  return outcome;
}

}  // namespace engram::cli
