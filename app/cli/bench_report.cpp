#include "app/cli/bench_report.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <stdexcept>

namespace engram::cli {

std::string utc_now() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

void emit_bench_report(nlohmann::json& out, const Args& args) {
  out["date"] = utc_now();
  if (const char* commit = std::getenv("ENGRAM_COMMIT")) out["commit"] = commit;
  std::printf("%s\n", out.dump().c_str());
  if (!args.has("json")) return;
  const std::string path = args.str("json", "");
  std::ofstream f(path);
  f << out.dump(2) << '\n';
  if (!f) throw std::runtime_error("cannot write " + path);
}

}  // namespace engram::cli
