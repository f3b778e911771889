// engram-cli bench restore: time to the first token of the next answer in a long stored
// conversation, (a) restored from the store's KV blobs vs (b) re-prefilled from the stored text,
// measured in the same run on the same store. Each timing starts before the store opens, so it
// counts the open, the rows, the blob read (checksum included) or the prefill, and the first
// token. Prints and writes JSON; never asserts a time (style rule 10).
//
// The CPU fixtures have small max_position_embeddings (2048-4096). A longer history runs on a
// temporary copy of the folder whose config.json has a larger max_position_embeddings and whose
// other files are links to the original: the weights do not depend on that field, and the model
// fingerprint (weights + RoPE settings) is the same as the original's.
//
// `--shape NAME --tokenizer FILE` runs the same measurement on a named shape with random weights
// (e.g. qwen2.5-7b on a GPU, no checkpoint needed): the tokenizer (a SentencePiece
// tokenizer.model, chat template from its folder) turns the synthetic turns into ids, and the
// conversation goes through the same ChatSession and store (SQLite rows + KV blob files) as with
// --model. The tokenizer need not be the shape's own: ids of a smaller tokenizer are valid rows
// of a bigger embedding (the Llama-2 tokenizer has 32k pieces, a Qwen2.5 shape 152k), and the
// cost of a prefill or a restore depends on the number of tokens, not on which ids they are.
// A shape's positions are its family's limit (32768 for Qwen2.5); a longer history is refused
// before the weights are made.
#include <ftw.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "app/cli/bench_report.h"
#include "app/cli/commands.h"
#include "app/cli/model_loading.h"
#include "core/engine/chat_session.h"
#include "core/engine/conversation_store.h"
#include "core/log.h"
#include "core/model/model_config.h"
#include "gpu/device_info.h"
#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "storage/kv_blob_store.h"

namespace engram::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// A folder that reads as `model_dir` with max_position_embeddings raised to `positions`.
fs::path widened_copy(const fs::path& model_dir, int64_t positions, const fs::path& into) {
  fs::create_directories(into);
  for (const auto& entry : fs::directory_iterator(model_dir)) {
    if (entry.path().filename() == "config.json") continue;
    fs::create_symlink(fs::absolute(entry.path()), into / entry.path().filename());
  }
  std::ifstream in(model_dir / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["max_position_embeddings"] = positions;
  std::ofstream(into / "config.json") << config.dump(2) << '\n';
  return into;
}

// Synthetic turns: sentences of common words, so the tokenizer sees ordinary text.
std::vector<ChatMessage> synthetic_history(const LoadedModel& model, int64_t target_tokens,
                                           int64_t turn_tokens) {
  static const char* words[] = {
      "the",     "memory", "of",   "a",      "long",     "conversation", "keeps", "every",
      "detail",  "we",     "said", "about",  "travel",   "plans",        "books", "music",
      "weather", "and",    "work", "today",  "tomorrow", "yesterday",    "city",  "river",
      "garden",  "coffee", "tea",  "friend", "question", "answer",       "idea",  "reason"};
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<size_t> pick(0, std::size(words) - 1);
  auto sentence_block = [&](int64_t tokens) {
    std::string text;
    int64_t n = 0;
    while (n < tokens) {
      const int64_t len = 6 + static_cast<int64_t>(rng() % 10);
      for (int64_t i = 0; i < len; ++i)
        text += std::string(i ? " " : "") + words[pick(rng)];
      text += ". ";
      n = static_cast<int64_t>(model.tokenizer->encode(text).size());
    }
    return text;
  };
  std::vector<ChatMessage> messages;
  int64_t tokens = 0;
  while (tokens < target_tokens) {
    for (const char* role : {"user", "assistant"}) {
      messages.push_back({role, sentence_block(turn_tokens)});
      tokens += static_cast<int64_t>(model.tokenizer->encode(messages.back().content).size()) + 8;
    }
  }
  return messages;
}

}  // namespace

int run_bench_restore(int argc, char** argv) {
  auto with_value = model_flags_with_value();
  with_value.insert({"history-tokens", "turn-tokens", "repeat", "json", "profile", "tokenizer"});
  const Args args(argc, argv, 2, with_value, {});
  if (args.positional() != std::vector<std::string>{"restore"})
    throw UsageError("bench restore takes no other positional arguments");
  const bool use_shape = args.has("shape");
  if (args.has("model") == use_shape) {
    throw UsageError(
        "bench restore needs --model DIR (with a tokenizer) or --shape NAME --tokenizer FILE");
  }
  if (use_shape && !args.has("tokenizer")) {
    throw UsageError(
        "bench restore --shape needs --tokenizer FILE (a SentencePiece tokenizer.model or a "
        "Hugging Face tokenizer.json, e.g. tests/data/models/llama-gqa/tokenizer.model)");
  }
  if (!use_shape && args.has("tokenizer"))
    throw UsageError("--tokenizer is for --shape; a model folder uses its own tokenizer");
  const int64_t history_tokens = args.integer("history-tokens", 20000);
  const int64_t turn_tokens = args.integer("turn-tokens", 200);
  const int64_t repeat = std::max<int64_t>(1, args.integer("repeat", 3));
  if (history_tokens < 16) throw UsageError("--history-tokens must be at least 16");

  const fs::path model_dir = args.str("model", "");
  const std::string shape = args.str("shape", "");
  const int64_t needed_positions = history_tokens + 2 * turn_tokens + 512;
  int64_t original_positions = 0;
  if (use_shape) {
    original_positions = named_shape(shape).max_positions;  // unknown names fail here
    if (needed_positions > original_positions) {
      throw UsageError("--history-tokens " + std::to_string(history_tokens) +
                       " with --turn-tokens " + std::to_string(turn_tokens) + " needs up to " +
                       std::to_string(needed_positions) + " positions; shape " + shape + " has " +
                       std::to_string(original_positions) + " (history + 2 turns + 512 must fit)");
    }
  }
  char scratch_template[] = "/tmp/engram-bench-restore-XXXXXX";
  if (!mkdtemp(scratch_template)) throw std::runtime_error("cannot create a temporary folder");
  const fs::path scratch = scratch_template;
  // The scratch folder (with the default profile: a KV blob of up to a gigabyte) goes on any exit.
  // nftw, not std::filesystem::remove_all: PyTorch 2.x's libtorch.so exports its own copy of
  // remove_all, which interposes ours and jumps through a null pointer (crash seen on the H100).
  struct RemoveOnExit {
    fs::path dir;
    ~RemoveOnExit() {
      nftw(
          dir.c_str(),
          [](const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }, 16,
          FTW_DEPTH | FTW_PHYS);
    }
  } remove_scratch{scratch};
  const fs::path profile =
      args.has("profile") ? fs::path(args.str("profile", "")) : scratch / "profile";

  ModelSource source;
  fs::path load_dir = model_dir;
  if (use_shape) {
    source.shape = shape;
    source.tokenizer = args.str("tokenizer", "");
    source.seed = static_cast<uint64_t>(args.integer("seed", 0));
  } else {
    std::ifstream config_in(model_dir / "config.json");
    if (!config_in) throw std::runtime_error("cannot read " + (model_dir / "config.json").string());
    original_positions =
        nlohmann::json::parse(config_in).value("max_position_embeddings", int64_t{0});
    if (needed_positions > original_positions)
      load_dir = widened_copy(model_dir, needed_positions, scratch / model_dir.filename());
    source.dir = load_dir;
  }

  if (args.has("log-level")) log::set_level(log::parse_level(args.str("log-level", "warn")));
  const DeviceChoice device = choose_device(args.str("device", "auto"), args.str("dtype", "auto"));
  LoadedModel model = load_model(source, device, {});
  if (!model.tokenizer)
    throw UsageError("bench restore needs a model folder with tokenizer.model or tokenizer.json");
  std::fprintf(stderr, "loaded %s (%s, %s) in %.1f s\n", model.name.c_str(),
               model.decoder->device().str().c_str(), c10::toString(model.decoder->dtype()),
               model.load_seconds);

  // The stored conversation: synthetic turns, prefilled once and saved with their KV.
  std::vector<ChatMessage> history = synthetic_history(model, history_tokens, turn_tokens);
  const auto t_build = Clock::now();
  int64_t built_tokens = 0;
  {
    ChatSession session(model);
    session.set_history(history);
    built_tokens = session.prefill_history();
    storage::Database db(profile);
    ConversationStore(db).save("bench-restore", session);
  }
  const double build_s = ms_since(t_build) / 1000;
  int64_t blob_bytes = 0;
  {
    storage::Database db(profile, storage::Access::kReadOnly);
    for (const auto& r : storage::KvBlobStore(db).list_all())
      blob_bytes += r.byte_size;
  }
  std::fprintf(stderr, "history: %zu utterances, %lld tokens, prefilled and saved in %.1f s\n",
               history.size(), static_cast<long long>(built_tokens), build_s);

  GenerationOptions options;
  options.max_new_tokens = 1;  // the first token is what is measured
  options.stop_at_eos = false;
  const std::string next_turn = "Please remind me what we said about the river and the garden.";

  std::vector<double> restored_ms, restored_open_ms, restored_install_ms, restored_reply_ms;
  std::vector<double> reprefill_ms, reprefill_reply_ms;
  int64_t restored_reused = 0, reprefill_prompt = 0;
  bool same_first_token = true;
  for (int64_t run = 0; run < repeat; ++run) {
    int64_t token_a = -1, token_b = -1;
    {
      const auto t0 = Clock::now();
      storage::Database db(profile);
      ChatSession session(model);
      const auto r = ConversationStore(db).restore("bench-restore", session, /*rebuild=*/false);
      if (!r || !r->kv_restored) {
        throw std::runtime_error("bench restore: the KV was not restored: " +
                                 (r ? r->rebuild_reason : std::string("no conversation")));
      }
      const ChatReply reply = session.reply(next_turn, options, {});
      restored_ms.push_back(ms_since(t0));
      restored_open_ms.push_back(r->open_ms);
      restored_install_ms.push_back(r->install_ms);
      restored_reply_ms.push_back(reply.generation.time_to_first_token_ms);
      restored_reused = reply.reused_tokens;
      token_a = reply.generation.tokens.at(0);
    }
    {
      const auto t0 = Clock::now();
      storage::Database db(profile);
      storage::ConversationRepository conversations(db);
      std::vector<ChatMessage> text;
      for (const auto& u :
           conversations.utterances(conversations.find_by_name("bench-restore").value().id))
        text.push_back({u.role, u.text});
      ChatSession session(model);
      session.set_history(std::move(text));
      const ChatReply reply = session.reply(next_turn, options, {});
      reprefill_ms.push_back(ms_since(t0));
      reprefill_reply_ms.push_back(reply.generation.time_to_first_token_ms);
      reprefill_prompt = reply.generation.prompt_tokens;
      token_b = reply.generation.tokens.at(0);
    }
    same_first_token = same_first_token && token_a == token_b;
    std::fprintf(stderr, "run %lld: restored %.1f ms, re-prefilled %.1f ms\n",
                 static_cast<long long>(run), restored_ms.back(), reprefill_ms.back());
  }

  const gpu::DeviceInfo info = gpu::device_info(model.decoder->device());
  nlohmann::json out;
  out["benchmark"] = "engram-restore";
  out["model"] = model.name;
  out["model_dir"] = use_shape ? nlohmann::json(nullptr) : nlohmann::json(model_dir.string());
  if (use_shape) {
    out["shape"] = shape;
    out["shape_note"] =
        "random weights (seed " + std::to_string(source.seed) + ") of the named shape; text " +
        "tokenized with " + source.tokenizer.string() + " (" +
        std::to_string(model.tokenizer->vocab_size()) + " pieces, valid ids in the shape's " +
        std::to_string(model.config.vocab_size) + "-row embedding); timings depend on the " +
        "token count, not on the ids";
  }
  out["model_fingerprint"] = model.fingerprint;
  out["max_position_embeddings_original"] = original_positions;
  out["max_position_embeddings_used"] = model.config.max_positions;
  if (load_dir != model_dir) {
    out["max_position_note"] =
        "temporary copy of the folder with a larger max_position_embeddings in config.json; "
        "weights and RoPE settings unchanged (same fingerprint); positions past the original "
        "limit are outside what the checkpoint was trained on, which does not change the cost";
  }
  out["device"] = info.name;
  out["torch"] = info.torch_version;
  out["dtype"] = c10::toString(model.decoder->dtype());
  out["history_utterances"] = history.size();
  out["history_tokens"] = built_tokens;
  out["history_build_prefill_and_save_s"] = build_s;
  out["kv_blob_bytes"] = blob_bytes;
  out["runs"] = repeat;
  out["restored"] = {{"time_to_first_token_ms", median(restored_ms)},
                     {"time_to_first_token_ms_runs", restored_ms},
                     {"store_open_and_blob_read_ms", median(restored_open_ms)},
                     {"install_into_cache_ms", median(restored_install_ms)},
                     {"reply_prefill_and_first_token_ms", median(restored_reply_ms)},
                     {"reused_tokens", restored_reused}};
  out["reprefilled"] = {{"time_to_first_token_ms", median(reprefill_ms)},
                        {"time_to_first_token_ms_runs", reprefill_ms},
                        {"reply_prefill_and_first_token_ms", median(reprefill_reply_ms)},
                        {"prefilled_tokens", reprefill_prompt}};
  out["speedup"] = median(reprefill_ms) / std::max(median(restored_ms), 1e-9);
  out["same_first_token"] = same_first_token;
  out["timing_scope"] =
      "from before the store opens to the first token of the next answer, model already loaded; "
      "blob files were written in the same run, so they are read from the page cache";
  emit_bench_report(out, args);
  return 0;
}

}  // namespace engram::cli
