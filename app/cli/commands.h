// The engram-cli subcommands. Each returns the process exit code; errors are exceptions that
// main() reports in one line.
#pragma once

namespace engram::cli {

int run_generate(int argc, char** argv);
int run_chat(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_bench_restore(int argc, char** argv);  // `bench restore`, dispatched by run_bench
int run_logits(int argc, char** argv);

}  // namespace engram::cli
