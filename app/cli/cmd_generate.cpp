// engram-cli generate and chat: text in, streamed text out. Generation statistics go to stderr
// so that stdout carries only the model's words.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include "app/cli/commands.h"
#include "app/cli/model_loading.h"
#include "core/engine/chat_session.h"
#include "core/engine/conversation_store.h"
#include "core/engine/turn_progress.h"
#include "core/model/model_error.h"
#include "core/policies/policy_registry.h"
#include "core/tokenizer/token_stream.h"
#include "core/trace/trace_file_writer.h"
#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "storage/profile_paths.h"

namespace engram::cli {
namespace {

std::set<std::string> generation_flags() {
  auto f = model_flags_with_value();
  f.insert({"prompt", "max-tokens", "temperature", "top-p", "top-k", "repetition-penalty", "trace",
            "system", "ids"});
  f.merge(policy_flags());
  return f;
}

GenerationOptions generation_options(const Args& args, EngineObserver* observer) {
  GenerationOptions o;
  o.max_new_tokens = args.integer("max-tokens", 128);
  if (o.max_new_tokens < 1) throw UsageError("--max-tokens must be at least 1");
  o.sampling.temperature = args.real("temperature", 0.0);
  o.sampling.top_p = args.real("top-p", 1.0);
  o.sampling.top_k = args.integer("top-k", 0);
  o.sampling.repetition_penalty = args.real("repetition-penalty", 1.0);
  o.sampling.seed = static_cast<uint64_t>(args.integer("seed", 0));
  o.stop_at_eos = !args.has("ignore-eos");
  o.observer = observer;
  o.trace = observer != nullptr;
  return o;
}

void print_stats(const GenerationResult& r, int64_t reused) {
  std::fprintf(stderr,
               "[%lld prompt tokens (%lld reused), %zu generated, first token %.1f ms, "
               "%.1f tokens/s, peak KV %lld tokens, stop: %s]\n",
               static_cast<long long>(r.prompt_tokens + reused), static_cast<long long>(reused),
               r.tokens.size(), r.time_to_first_token_ms, r.decode_tokens_per_s,
               static_cast<long long>(r.peak_kv_tokens), r.stop_reason.c_str());
}

// Bytes this process has passed to write(2) so far (/proc/self/io "wchar"); -1 if unknown.
int64_t process_bytes_written() {
  std::ifstream io("/proc/self/io");
  std::string key;
  long long value = 0;
  while (io >> key >> value)
    if (key == "wchar:") return value;
  return -1;
}

}  // namespace

// With --ids the prompt is token ids and the output is the generated ids, comma-separated
// (verification against a reference needs no tokenizer).
int run_generate(int argc, char** argv) {
  const Args args(argc, argv, 2, generation_flags(), {"ignore-eos"});
  if (args.has("prompt") == args.has("ids")) throw UsageError("give one of --prompt and --ids");
  std::unique_ptr<TraceFileWriter> trace;
  if (args.has("trace")) trace = std::make_unique<TraceFileWriter>(args.str("trace", ""));
  const GenerationOptions options = generation_options(args, trace.get());
  (void)policy_choice_from_args(args, "full");  // a typo fails before the model loads
  LoadedModel model = load_model_from_args(args, /*allow_shape=*/false);
  const auto policy = policy_from_args(args, "full", model, options.prefill_chunk);
  std::vector<int64_t> ids;
  if (args.has("ids")) {
    ids = parse_ids(args.str("ids", ""));
    const auto ws = working_set_for(*policy, model, options.prefill_chunk);
    const GenerationResult r = generate(*model.decoder, *policy, *ws, {}, ids, options, {});
    for (size_t i = 0; i < r.tokens.size(); ++i)
      std::printf(i ? ",%lld" : "%lld", static_cast<long long>(r.tokens[i]));
    std::printf("\n");
    print_stats(r, 0);
    return 0;
  }
  if (!model.tokenizer) {
    throw ModelError(args.str("model", ""),
                     "generate needs tokenizer.model or tokenizer.json in the model folder");
  }
  if (model.tokenizer->bos_id() >= 0) ids.push_back(model.tokenizer->bos_id());
  for (int32_t id : model.tokenizer->encode(args.str("prompt", "")))
    ids.push_back(id);
  const auto ws = working_set_for(*policy, model, options.prefill_chunk);
  TokenStream stream(*model.tokenizer);
  const GenerationResult r =
      generate(*model.decoder, *policy, *ws, {}, ids, options, [&](int64_t t) {
        const std::string text = stream.push(static_cast<int32_t>(t));
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
        return true;
      });
  const std::string rest = stream.finish();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  print_stats(r, 0);
  return 0;
}

namespace {

// EpiCache's work while nobody waits, as the app does it (ChatSession::prepare_waiting_episode):
// a long conversation indexed, clustered and its episodes built, episodes caught up. In an
// interactive chat it runs on its own thread while the next line is typed, and stop() ends it
// after its current block (the session is the main thread's again once stop() returns); `done`
// runs on that thread when nothing is left (the save).
class BackgroundPreparation {
 public:
  BackgroundPreparation(ChatSession& session, std::function<void()> done)
      : session_(session), done_(std::move(done)) {}
  ~BackgroundPreparation() { stop(); }
  void start() {
    stop();
    stop_ = false;
    thread_ = std::thread([this] {
      try {
        bool any = false;
        while (!stop_.load() && session_.prepare_waiting_episode())
          any = true;
        if (any && !stop_.load() && done_) done_();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "\nnote: the work between turns stopped: %s\n", e.what());
      }
    });
  }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  ChatSession& session_;
  std::function<void()> done_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

// With --conversation NAME the chat lives in the profile's store (--profile DIR, default
// storage::default_profile_dir()): a stored conversation resumes from its KV caches (rebuilt from
// text for another model or a damaged blob) and every turn is saved after its reply.
// Under EpiCache the work between turns (clustering a long conversation, building and catching
// up its episodes) runs while the next line is typed; --prepare runs it to the end before each
// prompt instead (scripts: the next line waits for it).
int run_chat(int argc, char** argv) {
  auto flags = generation_flags();
  flags.insert({"conversation", "profile"});
  const Args args(argc, argv, 2, flags, {"ignore-eos", "prepare"});
  if (args.has("profile") && !args.has("conversation"))
    throw UsageError("--profile needs --conversation NAME");
  std::unique_ptr<TraceFileWriter> trace;
  if (args.has("trace")) trace = std::make_unique<TraceFileWriter>(args.str("trace", ""));
  const GenerationOptions options = generation_options(args, trace.get());
  // The store opens before the model loads, so a profile in use fails fast.
  std::unique_ptr<storage::Database> db;
  const std::string conversation = args.str("conversation", "");
  if (args.has("conversation")) {
    if (conversation.empty()) throw UsageError("--conversation needs a name");
    db = std::make_unique<storage::Database>(args.has("profile")
                                                 ? std::filesystem::path(args.str("profile", ""))
                                                 : storage::default_profile_dir());
  }
  // New chats continue past the model's positions under the default policy (epicache).
  PolicyChoice choice = policy_choice_from_args(args, default_policy_spec());
  // A stored conversation keeps the policy it was saved with unless --policy names another.
  if (db && !args.has("policy")) {
    if (const auto row = storage::ConversationRepository(*db).find_by_name(conversation);
        row && !row->memory_policy.empty()) {
      choice = {row->memory_policy, args.has("kv-budget") ? choice.kv_budget : row->kv_budget};
    }
  }
  LoadedModel model = load_model_from_args(args, /*allow_shape=*/false);
  ChatSession session(model, args.str("system", ""), choice);
  if (!session.policy_note().empty())
    std::fprintf(stderr, "note: %s\n", session.policy_note().c_str());
  std::fprintf(stderr, "memory policy: %s, KV budget %s\n", session.policy().spec().c_str(),
               session.policy().budget() > 0
                   ? (std::to_string(session.policy().budget()) + " tokens").c_str()
                   : "unbounded");
  std::optional<ConversationStore> store;
  if (db) {
    session.keep_for_store(true);
    store.emplace(*db);
    if (const auto restored = store->restore(conversation, session)) {
      if (restored->kv_restored) {
        std::fprintf(stderr, "restored %lld turns, %lld cached tokens (%.1f ms)\n",
                     static_cast<long long>(restored->utterances),
                     static_cast<long long>(restored->cached_tokens),
                     restored->open_ms + restored->install_ms);
      } else {
        std::fprintf(stderr,
                     "restored %lld turns, 0 cached tokens: %s; rebuilt the cache from the text "
                     "(%lld tokens prefilled, %.1f ms)\n",
                     static_cast<long long>(restored->utterances), restored->rebuild_reason.c_str(),
                     static_cast<long long>(restored->prefilled_tokens), restored->rebuild_ms);
      }
    } else {
      std::fprintf(stderr, "new conversation '%s' in %s\n", conversation.c_str(),
                   db->paths().dir.c_str());
    }
  }
  // What one save costs, from the process's own write counter: the append-only store writes the
  // turn's new KV, not the history's.
  const auto save = [&] {
    if (!store) return;
    const int64_t before = process_bytes_written();
    const int64_t id = store->save(conversation, session);
    const int64_t written = process_bytes_written() - before;
    if (const auto kv = store->stored_kv(id); kv && kv->episode_caches > 0) {
      std::fprintf(stderr,
                   "saved: %lld bytes written (stored KV %lld bytes in %lld episode caches)\n",
                   static_cast<long long>(written), static_cast<long long>(kv->episode_kv_bytes),
                   static_cast<long long>(kv->episode_caches));
    } else if (kv) {
      std::fprintf(stderr,
                   "saved: %lld bytes written (stored KV %lld bytes, %lld tokens in %lld runs)\n",
                   static_cast<long long>(written), static_cast<long long>(kv->kv_bytes),
                   static_cast<long long>(kv->tokens), static_cast<long long>(kv->runs));
    }
  };
  const bool interactive = isatty(STDIN_FILENO);
  BackgroundPreparation background(session, [&] {
    if (store) store->save(conversation, session);  // quietly: the person is typing
  });
  // --prepare: the waiting work to the end, with its count on stderr, then a save.
  const auto prepare_now = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    int64_t steps = 0, indexing = 0;
    while (const auto step = session.prepare_waiting_episode()) {
      ++steps;
      if (step->stage == TurnProgress::Stage::kIndexing) ++indexing;
    }
    if (steps == 0) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "prepared between turns: %lld steps (%lld indexing the windows), %.1f s\n",
                 static_cast<long long>(steps), static_cast<long long>(indexing), s);
    save();
  };
  const auto between_turns = [&] {
    if (args.has("prepare")) {
      prepare_now();
    } else if (interactive) {
      background.start();
    }
  };
  if (interactive)
    std::fprintf(stderr, "chatting with %s; an empty line or Ctrl-D ends\n", model.name.c_str());
  std::string line;
  while (true) {
    between_turns();
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    const bool got = static_cast<bool>(std::getline(std::cin, line));
    background.stop();  // waits for the block under way at most
    if (!got) break;
    if (line.empty()) {
      if (interactive) break;
      continue;
    }
    // What the turn does before its first token (an episode's build takes minutes on a CPU), on
    // one terminal line that the reply's text erases.
    bool progress_shown = false;
    const auto erase_progress = [&] {
      if (!progress_shown) return;
      std::fputs("\r\x1b[K", stderr);
      progress_shown = false;
    };
    TurnProgressFn on_progress;
    if (interactive && isatty(STDERR_FILENO)) {
      on_progress = [&](const TurnProgress& p) {
        std::fprintf(stderr, "\r%s\x1b[K", describe_turn_progress(p).c_str());
        progress_shown = true;
      };
    }
    const ChatReply reply = session.reply(
        line, options,
        [&](const std::string& text) {
          erase_progress();
          std::fwrite(text.data(), 1, text.size(), stdout);
          std::fflush(stdout);
        },
        on_progress);
    erase_progress();
    std::fputc('\n', stdout);
    print_stats(reply.generation, reply.reused_tokens);
    if (!reply.memory_note.empty()) std::fprintf(stderr, "%s\n", reply.memory_note.c_str());
    save();
  }
  return 0;
}

}  // namespace engram::cli
