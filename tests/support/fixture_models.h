// Fixture checkpoints loaded once per suite on the CPU in f32, and deterministic token ids for
// prompts: what the runtime and policy suites share.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/engine/loaded_model.h"
#include "reference_fixture.h"

namespace engram::test {

class FixtureModels {
 public:
  void load(const std::vector<std::string>& names) {
    for (const std::string& name : names)
      models_.emplace(name,
                      load_model({fixture_model(name), "", 0}, choose_device("cpu", "f32"), {}));
  }
  const Decoder& decoder(const std::string& name) const { return *models_.at(name).decoder; }
  const LoadedModel& model(const std::string& name) const { return models_.at(name); }

 private:
  std::map<std::string, LoadedModel> models_;
};

// n ids in [3, 903), spread by a prime stride; `salt` gives another sequence.
inline std::vector<int64_t> token_ids(int64_t n, int64_t salt = 0) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = 3 + (i * 7919 + salt * 104729) % 900;
  return v;
}

}  // namespace engram::test
