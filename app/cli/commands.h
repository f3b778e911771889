// The engram-cli subcommands. Each returns the process exit code; errors are exceptions that
// main() reports in one line.
#pragma once

namespace engram::cli {

int run_generate(int argc, char** argv);
int run_chat(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_bench_restore(int argc, char** argv);   // `bench restore`, dispatched by run_bench
int run_bench_oxygen(int argc, char** argv);    // `bench oxygen`, dispatched by run_bench
int run_bench_pages(int argc, char** argv);     // `bench pages`: unit loads from the pinned pool
int run_bench_keep(int argc, char** argv);      // `bench keep`: KEEP's TTFT per method (issue 16)
int run_bench_epicache(int argc, char** argv);  // `bench epicache`: Table 3 (issue 15)
int run_logits(int argc, char** argv);
int run_sim(int argc, char** argv);              // the household simulator, interactive
int run_export_embodied(int argc, char** argv);  // `export embodied`: expert training data
int run_eval_embodied(int argc, char** argv);    // `eval embodied`: the model as planner
int run_eval_keep(int argc, char** argv);        // `eval keep`: selective recomputation fidelity
int run_eval_louiskv(int argc, char** argv);     // `eval louiskv`: decode-time policy fidelity
int run_export_conversation(int argc, char** argv);  // `export conversation`: QA/chat data
int run_eval_conversation(int argc, char** argv);    // `eval conversation`: QA over history
int run_export_chat(int argc, char** argv);  // `export chat`: a profile's conversations to a file
int run_import_chat(int argc, char** argv);  // `import chat`: a JSON file as new conversations
int run_serve(int argc, char** argv);        // `serve`: OpenAI-compatible HTTP API (issue 19)
int run_calibrate(int argc, char** argv);    // `calibrate`: layer sensitivity (EpiCache §3.2)

}  // namespace engram::cli
