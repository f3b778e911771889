// The persona behind a generated conversation: who the user is, who they know, what they own,
// what they like and what happens to them, including the values that change later (a move, a
// new job, a changed favourite). Sampled from a seed out of fixed vocabularies; the vocabularies
// are disjoint where a question could otherwise have two right answers (person names vs pet
// names, the user's cities vs relatives' cities).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/env/seeded_rng.h"

namespace engram::env {

// Something that happens to the user on a day. `statement` holds "{when}" ("today",
// "yesterday", ...) and, when `detail_kind` is set, "{detail}"; it always contains `key`
// verbatim, so the key names the event in questions ("Which happened first, the wedding or the
// road trip?").
struct EventKind {
  std::string key;              // "half marathon"
  std::string statement;        // "I ran my first half marathon {when}! My legs are still sore."
  std::string when_question;    // "When did the user run the half marathon?"
  std::string detail_kind;      // "", "place" or "band"
  std::string detail_question;  // "Where did the user go camping?" (when detail_kind is set)
};

struct PreferenceCategory {
  std::string name;  // "cuisine": asked as "the user's favorite cuisine"
  std::vector<std::string> values;
};

struct Relative {
  std::string relation;  // "sister"
  std::string name;
  std::string city;
  std::string job;
};

struct Pet {
  std::string kind;  // "dog"
  std::string name;
  bool adopted_during = false;  // adopted on a day within the conversation (else already owned)
};

struct Preference {
  std::string category;
  std::vector<std::string> values;  // more than one: the favourite changed, latest last
};

struct PersonaEvent {
  const EventKind* kind = nullptr;
  std::string detail;  // the place or band, when the kind has one
};

struct Persona {
  std::string name;
  std::string hometown;
  std::vector<std::string> home_cities;  // initial first, then each move
  std::vector<std::string> jobs;         // initial first, then each new job
  std::vector<Relative> relatives;
  std::vector<Pet> pets;
  std::vector<Preference> preferences;
  std::vector<PersonaEvent> events;
};

// How much there is to tell; grows with the conversation's length.
struct PersonaScale {
  int32_t relatives = 2;
  int32_t pets = 1;
  int32_t preferences = 3;
  int32_t preference_changes = 1;
  int32_t moves = 1;
  int32_t job_changes = 1;
  int32_t events = 4;

  // About one fact exchange for every two small-talk exchanges at any length.
  static PersonaScale for_tokens(int64_t tokens);
};

Persona sample_persona(SeededRng& rng, const PersonaScale& scale);

// The vocabularies, also used to pose questions about things never mentioned.
const std::vector<std::string>& relation_words();
const std::vector<std::string>& pet_kinds();
const std::vector<PreferenceCategory>& preference_categories();
const std::vector<EventKind>& event_kinds();

}  // namespace engram::env
