// The transformers reference for one fixture checkpoint (tests/data/reference/<name>): token
// sequences with their logits, and a greedy continuation computed by full recomputation.
// Written by tools/make_fixtures.py on the GPU machine.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/model/npy.h"

namespace engram::test {

inline std::filesystem::path test_data() {
  return ENGRAM_TEST_DATA;
}
inline std::filesystem::path fixture_model(const std::string& name) {
  return test_data() / "models" / name;
}

inline std::vector<std::string> fixture_names() {
  return {"llama-gqa", "qwen2-bias-tied", "qwen3-qknorm", "llama3-rope-scaling", "mistral"};
}

struct ReferenceSequence {
  std::vector<int64_t> ids;
  NpyArray logits;  // [tokens, vocab]
  double logit_scale = 0;
};

struct Reference {
  std::vector<ReferenceSequence> sequences;
  std::vector<int64_t> greedy_prompt;
  std::vector<int64_t> greedy_continuation;
  double min_top2_gap = 0;
};

inline Reference load_reference(const std::string& name) {
  const auto dir = test_data() / "reference" / name;
  std::ifstream in(dir / "reference.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  Reference r;
  for (const auto& s : j.at("sequences")) {
    ReferenceSequence seq;
    seq.ids = s.at("ids").get<std::vector<int64_t>>();
    seq.logits = read_npy_f32(dir / s.at("logits").get<std::string>());
    seq.logit_scale = s.at("logit_scale").get<double>();
    r.sequences.push_back(std::move(seq));
  }
  r.greedy_prompt = j.at("greedy").at("prompt").get<std::vector<int64_t>>();
  r.greedy_continuation = j.at("greedy").at("continuation").get<std::vector<int64_t>>();
  r.min_top2_gap = j.at("greedy").at("min_top2_gap").get<double>();
  return r;
}

}  // namespace engram::test
