// Logging facade. spdlog is built against fmt 9 while PyTorch 2.x ships fmt 12 headers in its
// include folder; a file that sees both fails to compile (DESIGN.md). So the engine logs through
// these plain functions and only core/log.cpp, built without torch include paths, sees spdlog.
#pragma once

#include <string>
#include <string_view>

namespace engram::log {

enum class Level { kDebug, kInfo, kWarn, kError, kOff };

void set_level(Level level);
void debug(std::string_view message);
void info(std::string_view message);
void warn(std::string_view message);
void error(std::string_view message);

// Parses "debug", "info", "warn", "error", "off"; throws std::invalid_argument otherwise.
Level parse_level(const std::string& name);

}  // namespace engram::log
