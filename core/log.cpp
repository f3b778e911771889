#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <stdexcept>

namespace engram::log {
namespace {

// Logs go to stderr so that stdout stays clean for generated text and JSON output.
spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto l = spdlog::stderr_color_mt("engram");
    l->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    l->set_level(spdlog::level::warn);
    return l;
  }();
  return *instance;
}

}  // namespace

void set_level(Level level) {
  static constexpr spdlog::level::level_enum kMap[] = {spdlog::level::debug, spdlog::level::info,
                                                       spdlog::level::warn, spdlog::level::err,
                                                       spdlog::level::off};
  logger().set_level(kMap[static_cast<int>(level)]);
}

void debug(std::string_view message) {
  logger().debug("{}", message);
}
void info(std::string_view message) {
  logger().info("{}", message);
}
void warn(std::string_view message) {
  logger().warn("{}", message);
}
void error(std::string_view message) {
  logger().error("{}", message);
}

Level parse_level(const std::string& name) {
  if (name == "debug") return Level::kDebug;
  if (name == "info") return Level::kInfo;
  if (name == "warn") return Level::kWarn;
  if (name == "error") return Level::kError;
  if (name == "off") return Level::kOff;
  throw std::invalid_argument("unknown log level '" + name + "' (debug, info, warn, error, off)");
}

}  // namespace engram::log
