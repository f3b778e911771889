// The error for a model folder that cannot be used: it names the file and what is wrong, so the
// person can fix the folder (style rule 7: errors name the file, the unit and what was expected).
#pragma once

#include <stdexcept>
#include <string>

namespace engram {

class ModelError : public std::runtime_error {
 public:
  ModelError(const std::string& file, const std::string& problem)
      : std::runtime_error(file.empty() ? problem : file + ": " + problem),
        file_(file),
        problem_(problem) {}
  const std::string& file() const { return file_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string file_;
  std::string problem_;
};

}  // namespace engram
