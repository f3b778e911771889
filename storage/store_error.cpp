#include "storage/store_error.h"

namespace engram::storage {

namespace {

std::string compose(const std::string& file, const std::string& unit, const std::string& problem) {
  std::string message;
  if (!file.empty()) message += file + ": ";
  if (!unit.empty()) message += unit + ": ";
  return message + problem;
}

}  // namespace

StoreError::StoreError(std::string file, std::string unit, std::string problem)
    : std::runtime_error(compose(file, unit, problem)),
      file_(std::move(file)),
      unit_(std::move(unit)),
      problem_(std::move(problem)) {}

}  // namespace engram::storage
