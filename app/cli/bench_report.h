// What every `engram-cli bench` mode does with its result: stamp it with the UTC time and the
// commit (ENGRAM_COMMIT, set by the device scripts), print it as one JSON line on stdout and,
// with --json FILE, write it indented to FILE.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "app/cli/cli_args.h"

namespace engram::cli {

std::string utc_now();  // "2026-11-25T07:36:21Z"

// Adds "date" and, when ENGRAM_COMMIT is set, "commit"; prints; writes --json. Throws
// std::runtime_error naming the file when it cannot be written.
void emit_bench_report(nlohmann::json& out, const Args& args);

}  // namespace engram::cli
