// The JSON trace files the panels read (recompute_trace.h, episode_trace.h): typed field readers
// whose errors name the JSON path of the field ("steps[2].episodes[0].members: expected an array
// of integers"), the format/version check, a crash-safe write (storage/durable_file.h: temporary
// file, fsync, rename) and a read that names the file and, for bad JSON, the byte.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace engram::trace_json {

using nlohmann::json;

[[noreturn]] void bad(const std::string& where, const std::string& what);

// object[key] of the given type, `where` being the object's own path.
const json& field(const json& object, const char* key, const std::string& where);
int64_t integer(const json& object, const char* key, const std::string& where);
double number(const json& object, const char* key, const std::string& where);
std::string text(const json& object, const char* key, const std::string& where);
bool boolean(const json& object, const char* key, const std::string& where);
const json& array(const json& object, const char* key, const std::string& where);
std::vector<int64_t> integers(const json& object, const char* key, const std::string& where);
std::vector<double> numbers(const json& object, const char* key, const std::string& where);
// The same for a value already at hand, `where` being its path.
const json& array_of(const json& v, const std::string& where);
std::vector<int64_t> integers_of(const json& v, const std::string& where);
std::vector<double> numbers_of(const json& v, const std::string& where);

// The top object's "format" and "version" must be these.
void check_format(const json& top, const char* format, int version);

// `what` names the kind of file in errors ("episode trace").
void write_json_file(const std::filesystem::path& path, const json& j, const char* what);
json read_json_file(const std::filesystem::path& path, const char* what);

// read_json_file() + from_json, every error prefixed with the kind and the file.
template <class T>
T read_json_as(const std::filesystem::path& path, const char* what) {
  const json j = read_json_file(path, what);
  try {
    return j.get<T>();
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string(what) + " " + path.string() + ": " + e.what());
  }
}

}  // namespace engram::trace_json
