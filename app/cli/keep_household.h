// The household planner's prompt as KEEP assembles it (issue 16): the shared system prefix (BOS:
// the trained prompt has no system text), then the retrieved memory segments, one unit each, in
// the order the model was trained to read them, then the query (task, history, "next:").
//
// Retrieval keeps at most `max_segments` segments: the few non-object ones (the examples, the
// room list, finished tasks, the agent's state) always, then the objects most similar to the
// query (LexicalEmbedder cosine; the paper's sentence encoder cannot be bundled). A segment's
// tokens are encoded as they read after a newline, so the assembled ids equal the trained
// encoding of the whole text (`tokens_match_text` says when they do not).
#pragma once

#include <cstdint>
#include <vector>

#include "core/engine/memory_unit_kv.h"
#include "core/env/embodied_prompt.h"
#include "core/tokenizer/tokenizer.h"

namespace engram::cli {

struct KeepHouseholdPrompt {
  std::vector<int64_t> prefix;    // BOS
  std::vector<MemoryUnit> units;  // retrieved, prompt order
  std::vector<int64_t> query;
  int64_t available_segments = 0;  // segments the full prompt holds
  bool tokens_match_text = true;   // prefix + units + query == BOS + encode(their text)
};

KeepHouseholdPrompt assemble_household_prompt(const Tokenizer& tokenizer,
                                              const env::EmbodiedPrompt& prompt,
                                              int64_t max_segments);

}  // namespace engram::cli
