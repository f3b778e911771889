// engram-cli: chat, generate, bench and verification commands over the engine.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "app/cli/cli_args.h"
#include "app/cli/commands.h"

namespace {

void usage() {
  std::fputs(
      "usage: engram-cli <command> [options]\n"
      "  generate --model DIR --prompt TEXT [--max-tokens N] [--temperature T] [--top-p P]\n"
      "           [--top-k K] [--repetition-penalty R] [--seed S] [--device cpu|cuda]\n"
      "           [--dtype f32|bf16|f16] [--trace FILE]\n"
      "  chat     --model DIR [--system TEXT] [--conversation NAME [--profile DIR]]\n"
      "           [flags as generate]  (reads turns from stdin; --conversation resumes and saves)\n"
      "  bench    prefill|decode (--model DIR | --shape NAME) [--tokens N] [--decode-tokens N]\n"
      "           [--device cuda] [--repeat N] [--json FILE] [--trace FILE]\n"
      "  bench    restore (--model DIR | --shape NAME --tokenizer FILE) [--history-tokens N]\n"
      "           [--turn-tokens N] [--repeat N] [--device cuda] [--json FILE]\n"
      "           (first token after restoring KV vs re-prefilling the text)\n"
      "  logits   --model DIR --ids 1,523,87 [--out FILE.npy]\n"
      "  sim      [--seed S] [--tasks N] [--max-steps N]   (type actions; stdin when piped)\n"
      "  export embodied [--out FILE|-] [--sessions N] [--seed S] [--tasks N] [--detours P]\n"
      "  eval embodied --model DIR [--episodes N] [--seed S] [--tasks N] [--policy full]\n"
      "           [--device D] [--json FILE]\n"
      "  export conversation --conversations N --seed S --out FILE [--min-tokens A]\n"
      "           [--max-tokens B]\n"
      "  eval conversation --model DIR [--episodes N] [--seed S] [--policy full] [--json FILE]\n",
      stderr);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  try {
    if (command == "generate") return engram::cli::run_generate(argc, argv);
    if (command == "chat") return engram::cli::run_chat(argc, argv);
    if (command == "bench") return engram::cli::run_bench(argc, argv);
    if (command == "logits") return engram::cli::run_logits(argc, argv);
    if (command == "sim") return engram::cli::run_sim(argc, argv);
    const std::string sub = argc > 2 ? argv[2] : "";
    if (command == "export" && sub == "embodied")
      return engram::cli::run_export_embodied(argc, argv);
    if (command == "eval" && sub == "embodied") return engram::cli::run_eval_embodied(argc, argv);
    if (command == "export" && sub == "conversation") {
      return engram::cli::run_export_conversation(argc, argv);
    }
    if (command == "eval" && sub == "conversation") {
      return engram::cli::run_eval_conversation(argc, argv);
    }
    std::fprintf(stderr, "engram-cli: unknown command '%s'\n", command.c_str());
    usage();
    return 2;
  } catch (const engram::cli::UsageError& e) {
    std::fprintf(stderr, "engram-cli %s: %s\n", command.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    // c10::Error messages carry a C++ backtrace after the first line; the person needs the
    // first line only.
    std::string message = e.what();
    if (auto nl = message.find('\n'); nl != std::string::npos) message.resize(nl);
    std::fprintf(stderr, "engram-cli %s: error: %s\n", command.c_str(), message.c_str());
    return 1;
  }
}
