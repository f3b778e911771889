// Small talk between the facts: everyday exchanges on a dozen topics, each a user line and a
// brief assistant reply in the corpus's one style (acknowledge, then a short follow-up). No
// exchange names a person, a pet, a place, a job, a favourite or an event of the fact
// vocabularies, so small talk never answers, contradicts or leaks into a question.
#pragma once

#include <string>
#include <vector>

#include "core/env/seeded_rng.h"

namespace engram::env {

struct SmallTalkExchange {
  std::string user;
  std::string assistant;
};

// Draws exchanges from the topics, never one of the last few topics again (a conversation that
// asks the same thing twice in a row reads like a loop).
class SmallTalk {
 public:
  SmallTalkExchange next(SeededRng& rng);

 private:
  std::vector<size_t> recent_;
};

// The opening of a session after the first.
SmallTalkExchange session_greeting(SeededRng& rng);

}  // namespace engram::env
