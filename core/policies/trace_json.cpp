#include "core/policies/trace_json.h"

#include <unistd.h>

#include <fstream>
#include <span>
#include <sstream>

#include "storage/durable_file.h"

namespace engram::trace_json {

void bad(const std::string& where, const std::string& what) {
  throw std::runtime_error(where + ": " + what);
}

const json& field(const json& object, const char* key, const std::string& where) {
  if (!object.is_object()) bad(where, "expected an object");
  const auto it = object.find(key);
  if (it == object.end()) bad(where + "." + key, "missing");
  return *it;
}

int64_t integer(const json& object, const char* key, const std::string& where) {
  const json& v = field(object, key, where);
  if (!v.is_number_integer()) bad(where + "." + key, "expected an integer");
  return v.get<int64_t>();
}

double number(const json& object, const char* key, const std::string& where) {
  const json& v = field(object, key, where);
  if (!v.is_number()) bad(where + "." + key, "expected a number");
  return v.get<double>();
}

std::string text(const json& object, const char* key, const std::string& where) {
  const json& v = field(object, key, where);
  if (!v.is_string()) bad(where + "." + key, "expected a string");
  return v.get<std::string>();
}

bool boolean(const json& object, const char* key, const std::string& where) {
  const json& v = field(object, key, where);
  if (!v.is_boolean()) bad(where + "." + key, "expected true or false");
  return v.get<bool>();
}

const json& array_of(const json& v, const std::string& where) {
  if (!v.is_array()) bad(where, "expected an array");
  return v;
}

std::vector<int64_t> integers_of(const json& v, const std::string& where) {
  std::vector<int64_t> out;
  for (const json& x : array_of(v, where)) {
    if (!x.is_number_integer()) bad(where, "expected an array of integers");
    out.push_back(x.get<int64_t>());
  }
  return out;
}

std::vector<double> numbers_of(const json& v, const std::string& where) {
  std::vector<double> out;
  for (const json& x : array_of(v, where)) {
    if (!x.is_number()) bad(where, "expected an array of numbers");
    out.push_back(x.get<double>());
  }
  return out;
}

const json& array(const json& object, const char* key, const std::string& where) {
  return array_of(field(object, key, where), where + "." + key);
}

std::vector<int64_t> integers(const json& object, const char* key, const std::string& where) {
  return integers_of(field(object, key, where), where + "." + key);
}

std::vector<double> numbers(const json& object, const char* key, const std::string& where) {
  return numbers_of(field(object, key, where), where + "." + key);
}

void check_format(const json& top, const char* format, int version) {
  if (!top.is_object()) bad("(top)", "expected an object");
  const std::string found = text(top, "format", "(top)");
  if (found != format)
    bad("format", "expected \"" + std::string(format) + "\", got \"" + found + "\"");
  const int64_t v = integer(top, "version", "(top)");
  if (v != version)
    bad("version",
        std::to_string(v) + " is not supported (this build reads " + std::to_string(version) + ")");
}

void write_json_file(const std::filesystem::path& path, const json& j, const char* what) {
  const std::filesystem::path final_path = std::filesystem::absolute(path);
  std::filesystem::path temp = final_path;
  temp += ".tmp." + std::to_string(::getpid());
  storage::remove_file_quietly(temp);  // ours, left by a run of the same pid that died
  const std::string bytes = j.dump() + "\n";
  storage::write_file_durably(
      temp, final_path,
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
      what);
}

json read_json_file(const std::filesystem::path& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(std::string(what) + " " + path.string() + ": cannot be opened");
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return json::parse(buffer.str());
  } catch (const json::parse_error& e) {
    throw std::runtime_error(std::string(what) + " " + path.string() + ": not JSON (byte " +
                             std::to_string(e.byte) + "): " + e.what());
  }
}

}  // namespace engram::trace_json
