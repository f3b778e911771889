// engram-cli generate and chat: text in, streamed text out. Generation statistics go to stderr
// so that stdout carries only the model's words.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "app/cli/commands.h"
#include "app/cli/model_loading.h"
#include "core/engine/chat_session.h"
#include "core/model/model_error.h"
#include "core/tokenizer/token_stream.h"
#include "core/trace/trace_file_writer.h"

namespace engram::cli {
namespace {

std::set<std::string> generation_flags() {
  auto f = model_flags_with_value();
  f.insert({"prompt", "max-tokens", "temperature", "top-p", "top-k", "repetition-penalty", "trace",
            "system", "ids"});
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
               "%.1f tokens/s, stop: %s]\n",
               static_cast<long long>(r.prompt_tokens + reused), static_cast<long long>(reused),
               r.tokens.size(), r.time_to_first_token_ms, r.decode_tokens_per_s,
               r.stop_reason.c_str());
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
  LoadedModel model = load_model_from_args(args, /*allow_shape=*/false);
  const ModelConfig& c = model.config;
  std::vector<int64_t> ids;
  if (args.has("ids")) {
    ids = parse_ids(args.str("ids", ""));
    KvCache cache({c.num_layers, c.num_kv_heads, c.head_dim}, 1,
                  static_cast<int64_t>(ids.size()) + options.max_new_tokens, model.decoder->dtype(),
                  model.decoder->device());
    const GenerationResult r = generate(*model.decoder, cache, {}, ids, options, {});
    for (size_t i = 0; i < r.tokens.size(); ++i)
      std::printf(i ? ",%lld" : "%lld", static_cast<long long>(r.tokens[i]));
    std::printf("\n");
    print_stats(r, 0);
    return 0;
  }
  if (!model.tokenizer) {
    throw ModelError(args.str("model", ""), "generate needs tokenizer.model in the model folder");
  }
  if (model.tokenizer->bos_id() >= 0) ids.push_back(model.tokenizer->bos_id());
  for (int32_t id : model.tokenizer->encode(args.str("prompt", "")))
    ids.push_back(id);
  KvCache cache({c.num_layers, c.num_kv_heads, c.head_dim}, 1,
                static_cast<int64_t>(ids.size()) + options.max_new_tokens, model.decoder->dtype(),
                model.decoder->device());
  TokenStream stream(*model.tokenizer);
  const GenerationResult r = generate(*model.decoder, cache, {}, ids, options, [&](int64_t t) {
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

int run_chat(int argc, char** argv) {
  const Args args(argc, argv, 2, generation_flags(), {"ignore-eos"});
  std::unique_ptr<TraceFileWriter> trace;
  if (args.has("trace")) trace = std::make_unique<TraceFileWriter>(args.str("trace", ""));
  const GenerationOptions options = generation_options(args, trace.get());
  LoadedModel model = load_model_from_args(args, /*allow_shape=*/false);
  ChatSession session(model, args.str("system", ""));
  const bool interactive = isatty(STDIN_FILENO);
  if (interactive)
    std::fprintf(stderr, "chatting with %s; an empty line or Ctrl-D ends\n", model.name.c_str());
  std::string line;
  while (true) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) {
      if (interactive) break;
      continue;
    }
    const ChatReply reply = session.reply(line, options, [](const std::string& text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    });
    std::fputc('\n', stdout);
    print_stats(reply.generation, reply.reused_tokens);
  }
  return 0;
}

}  // namespace engram::cli
