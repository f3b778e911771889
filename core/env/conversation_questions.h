// Questions with gold answers built from a conversation's fact log, of the LongMemEval /
// LoCoMo kinds: single-hop (one fact), multi-hop (a relation and a person's attribute, the city
// or job in effect on an event's day, a count), temporal (when, which came first, days between),
// knowledge-update (the latest value after a change) and unanswerable (a subject that no
// utterance names; gold kUnknownAnswer).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/env/conversation_record.h"
#include "core/env/seeded_rng.h"

namespace engram::env {

// Up to `per_type` questions of each type, chosen by `rng` among all that the facts support.
std::vector<Question> build_questions(const std::vector<Utterance>& utterances,
                                      const std::vector<Fact>& facts, SeededRng& rng,
                                      int32_t per_type);

// True when the words of `phrase` occur consecutively in `text` (case-insensitive, on word
// boundaries): "cat" is not in "vacation".
bool mentions(const std::string& text, const std::string& phrase);

}  // namespace engram::env
