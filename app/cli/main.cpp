// engram-cli: chat, generate, bench and verification commands over the engine.
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <ucontext.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "app/cli/cli_args.h"
#include "app/cli/commands.h"
#include "core/runtime/cpu_threads.h"
#include "core/runtime/host_memory.h"

namespace {

// A crash should leave a report a person can send: the signal and the call stack (frames as
// "binary(+offset)"; `addr2line -f -C -e engram-cli OFFSET` names them). Only async-signal-safe
// calls here.
void write_text(const char* text) {
  (void)!write(STDERR_FILENO, text, std::strlen(text));
}

void write_hex(const char* label, uintptr_t value) {
  char buf[2 + 16 + 1];
  buf[0] = '0';
  buf[1] = 'x';
  for (int i = 0; i < 16; ++i)
    buf[2 + i] = "0123456789abcdef"[(value >> (60 - 4 * i)) & 0xf];
  buf[18] = '\0';
  write_text(label);
  write_text(buf);
}

void report_crash(int signal, siginfo_t* info, void* context) {
  write_text("engram-cli: crashed (");
  write_text(signal == SIGSEGV ? "SIGSEGV" : signal == SIGBUS ? "SIGBUS" : "SIGABRT");
  write_text(")");
  if (info) write_hex(" at address ", reinterpret_cast<uintptr_t>(info->si_addr));
#if defined(__x86_64__)
  // A jump through a bad pointer leaves no unwindable frame: the instruction pointer and the
  // return address on top of the stack say where it came from.
  if (context) {
    const auto* uc = static_cast<const ucontext_t*>(context);
    write_hex(", pc ", static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]));
    const auto sp = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
    if (sp) write_hex(", [sp] ", *reinterpret_cast<const uintptr_t*>(sp));
  }
#endif
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&report_crash), &self))
    write_hex(", engram-cli loaded at ", reinterpret_cast<uintptr_t>(self.dli_fbase));
  write_text("; call stack:\n");
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  // The memory map turns the addresses above into library + offset.
  if (const int maps = open("/proc/self/maps", O_RDONLY); maps >= 0) {
    write_text("memory map:\n");
    char buf[4096];
    for (ssize_t n; (n = read(maps, buf, sizeof buf)) > 0;)
      (void)!write(STDERR_FILENO, buf, static_cast<size_t>(n));
    close(maps);
  }
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

void install_crash_report() {
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler
  struct sigaction action {};
  action.sa_sigaction = report_crash;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  for (int s : {SIGSEGV, SIGBUS, SIGABRT})
    sigaction(s, &action, nullptr);
}

void usage() {
  std::fputs(
      "usage: engram-cli <command> [options]\n"
      "  generate --model DIR --prompt TEXT [--max-tokens N] [--temperature T] [--top-p P]\n"
      "           [--top-k K] [--repetition-penalty R] [--seed S] [--device cpu|cuda]\n"
      "           [--dtype f32|bf16|f16] [--trace FILE] [--policy P] [--kv-budget TOKENS]\n"
      "  chat     --model DIR [--system TEXT] [--conversation NAME [--profile DIR]]\n"
      "           [flags as generate] [--prepare]  (reads turns from stdin; --conversation\n"
      "           resumes and saves; epicache's work between turns runs while the next line is\n"
      "           typed, or with --prepare to the end before each prompt)\n"
      "           memory policies (--policy): full, streaming[:sinks=N], epicache[:episodes=E,\n"
      "           tau=P,max_episodes=N,rebuild=T,per_head=0|1|2] (chat's default),\n"
      "           snapkv[:window=N,kernel=K]; --kv-budget caps the KV attention sees per layer\n"
      "  bench    prefill|decode (--model DIR | --shape NAME) [--tokens N] [--decode-tokens N]\n"
      "           [--device cuda] [--repeat N] [--json FILE] [--trace FILE] [--policy P]\n"
      "           [--kv-budget TOKENS] [--chunk N] [--warmup-decode-tokens N]\n"
      "  bench    restore (--model DIR | --shape NAME --tokenizer FILE) [--history-tokens N]\n"
      "           [--turn-tokens N] [--repeat N] [--device cuda] [--json FILE]\n"
      "           (first token after restoring KV vs re-prefilling the text)\n"
      "  bench    oxygen (--model DIR | --shape NAME --tokenizer FILE) [--frames N]\n"
      "           [--action-hz H] [--mode unified|isolated|both] [--language-steps K] [--json F]\n"
      "           (household frames: action + language tasks, shared prefill vs isolated)\n"
      "  bench    pages (--model DIR | --shape NAME) [--units N] [--unit-tokens T]\n"
      "           [--page-tokens P] [--fresh S] [--device cuda] [--repeat N] [--json FILE]\n"
      "           (memory units from the pinned pool: per-layer loads vs serial vs resident)\n"
      "  bench    keep (--model DIR | --shape NAME) [--segments 10,20,30,40] [--changed N]\n"
      "           [--chunk-tokens T] [--methods M,...] [--keep-options probe=8] [--check]\n"
      "           [--device cuda] [--repeat N] [--json FILE]   (KEEP: TTFT per method, KV pinned)\n"
      "  bench    epicache (--model DIR | --shape NAME --tokenizer FILE) [--history-tokens N]\n"
      "           [--turns T] [--kv-budget M] [--decode-tokens D] [--full-turns K]\n"
      "           [--methods epicache,prefix,full] [--sweep N1,N2,...] [--policy epicache:...]\n"
      "           [--device cuda] [--json FILE]   (EpiCache Table 3: T turns over a long history,\n"
      "           vs prefix caching and full re-prefill; peak memory; --sweep: one episode build\n"
      "           vs a full prefill per history length)\n"
      "  logits   --model DIR --ids 1,523,87 [--out FILE.npy]\n"
      "  sim      [--seed S] [--tasks N] [--max-steps N]   (type actions; stdin when piped)\n"
      "           [--model DIR [--device D]]   (the model plans, closed loop)\n"
      "  export embodied [--out FILE|-] [--sessions N] [--seed S] [--tasks N] [--detours P]\n"
      "           [--model DIR [--model-share P] [--device D]]   (the model drives: DAgger)\n"
      "  eval embodied --model DIR [--episodes N] [--seed S] [--tasks N] [--policy P]\n"
      "           [--kv-budget TOKENS]\n"
      "           [--device D] [--json FILE]\n"
      "  eval keep --model DIR [--episodes N] [--seed S] [--segments 10,20,30,40]\n"
      "           [--methods full-recompute,prefix-cache,full-reuse,cacheblend,keep] [--every K]\n"
      "           [--grouping static-dynamic|clusters|segments|blocks:N] [--static-after T]\n"
      "           [--group-max N] [--group-threshold C] [--group-no-join]\n"
      "           [--closed-loop] [--trace FILE] [--json FILE]   (selective recomputation vs full\n"
      "           prefill; --trace: KEEP's plans for the importance panel)\n"
      "  eval louiskv --model DIR [--episodes N] [--seed S] [--new-tokens M]\n"
      "           [--policies 'SPEC[@BUDGET];...'] [--json FILE]   (decode policies vs full KV)\n"
      "  export conversation --conversations N --seed S --out FILE [--min-tokens A]\n"
      "           [--max-tokens B]\n"
      "  eval conversation --model DIR [--episodes N] [--seed S] [--policy P] [--kv-budget T]\n"
      "           [--min-tokens A] [--max-tokens B] [--json FILE] [--episodes-trace FILE]\n"
      "           (epicache: the episodes panel's trace of the first conversation)\n"
      "  calibrate --model DIR [--text FILE | --seed S] [--tokens N] [--sink S] [--window W]\n"
      "           [--block B] [--alpha A] [--profile DIR] [--json FILE]   (EpiCache layer\n"
      "           sensitivity: key cosine, full vs sink + blocked mask; stored per model)\n"
      "  export chat [--profile DIR] (--conversation ID|NAME | --all) --format json|markdown\n"
      "           --out FILE|-   (stored conversations, without their KV caches)\n"
      "  import chat [--profile DIR] FILE   (a JSON export, as new conversations)\n"
      "  serve    --model DIR [--port P (8080; 0: any free)] [--host H (127.0.0.1)]\n"
      "           [--policy P] [--kv-budget T] [--profile DIR | --stateless] [--max-tokens N]\n"
      "           [--sessions N] [--max-body-bytes B]   (OpenAI-compatible /v1/chat/completions\n"
      "           and /v1/models; \"engram_conversation\": NAME continues a stored chat)\n",
      stderr);
}

}  // namespace

int main(int argc, char** argv) {
  install_crash_report();
  engram::keep_freed_host_memory();
  engram::use_cpu_threads();
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  try {
    if (command == "generate") return engram::cli::run_generate(argc, argv);
    if (command == "chat") return engram::cli::run_chat(argc, argv);
    if (command == "bench" && argc > 2 && !std::strcmp(argv[2], "epicache"))
      return engram::cli::run_bench_epicache(argc, argv);
    if (command == "bench") return engram::cli::run_bench(argc, argv);
    if (command == "logits") return engram::cli::run_logits(argc, argv);
    if (command == "sim") return engram::cli::run_sim(argc, argv);
    if (command == "calibrate") return engram::cli::run_calibrate(argc, argv);
#ifndef ENGRAM_NO_SERVE
    if (command == "serve") return engram::cli::run_serve(argc, argv);
#else
    if (command == "serve")
      throw engram::cli::UsageError("built without serve (ENGRAM_BUILD_SERVE)");
#endif
    const std::string sub = argc > 2 ? argv[2] : "";
    if (command == "export" && sub == "embodied")
      return engram::cli::run_export_embodied(argc, argv);
    if (command == "eval" && sub == "embodied") return engram::cli::run_eval_embodied(argc, argv);
    if (command == "eval" && sub == "keep") return engram::cli::run_eval_keep(argc, argv);
    if (command == "eval" && sub == "louiskv") return engram::cli::run_eval_louiskv(argc, argv);
    if (command == "export" && sub == "conversation") {
      return engram::cli::run_export_conversation(argc, argv);
    }
    if (command == "eval" && sub == "conversation") {
      return engram::cli::run_eval_conversation(argc, argv);
    }
    if (command == "export" && sub == "chat") return engram::cli::run_export_chat(argc, argv);
    if (command == "import" && sub == "chat") return engram::cli::run_import_chat(argc, argv);
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
