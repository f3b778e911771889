// A deterministic generator of long user–assistant conversations over many sessions and days
// (the EpiCache workload): the user tells the assistant about themselves, the people and pets
// in their life, what they like and what happens to them; some of it changes later (a move, a
// new job, a new favourite), and small talk fills the rest. Every fact goes to the fact log
// with the utterance that states it, and the questions are built from that log. The same
// config gives the same conversation, byte for byte, on every platform.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/env/conversation_record.h"

namespace engram::env {

// Seeds from here on are the held-out evaluation split; training exports stay below it.
inline constexpr uint64_t kHeldOutSeedBase = 1'000'000;

struct ConversationConfig {
  uint64_t seed = 0;
  // Length of the rendered history in estimate_tokens() units; the generator picks a target in
  // [min_tokens, max_tokens] from the seed and lands within the range whenever it is at least
  // one small-talk exchange wide (~60 tokens) and min_tokens leaves room for the facts (~1,500).
  int64_t min_tokens = 2000;
  int64_t max_tokens = 4000;
  int64_t tokens_per_session = 350;  // average session length
  int32_t questions_per_type = 3;
};

// Throws std::invalid_argument for an empty or inverted token range.
Conversation generate_conversation(const ConversationConfig& config);

// estimate_tokens() of the whole rendered history.
int64_t conversation_tokens(const Conversation& c);

// The user's lines of the conversations of seeds first_seed, first_seed + 1, ... (default
// configuration), in order, until `count`: real-length chat turns for tests and benches.
std::vector<std::string> user_turns(uint64_t first_seed, size_t count);

}  // namespace engram::env
