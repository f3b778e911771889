#include "core/env/conversation_facts.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace engram::env {
namespace {

// No name here is also a word of the small talk, a city, a job or an event (a question about
// one must have one answer).
const std::vector<std::string> kPersonNames = {
    "Maya",  "Daniel", "Priya", "Lucas",  "Elena", "Omar",   "Hannah", "Mateo",  "Grace", "Noah",
    "Aisha", "Ethan",  "Sofia", "Leo",    "Chloe", "Ravi",   "Julia",  "Marcus", "Nora",  "Felix",
    "Ines",  "Tobias", "Zoe",   "Samuel", "Leila", "Adrian", "Clara",  "Victor", "Amara", "Jonas",
    "Mei",   "Oscar",  "Freya", "Hugo",   "Iris",  "Kofi",   "Lena",   "Rafael", "Yuki",  "Theo"};

const std::vector<std::string> kPetNames = {
    "Biscuit", "Pepper",  "Ziggy",  "Waffles", "Noodle", "Pickles", "Clover",  "Rocket",
    "Maple",   "Sprout",  "Peanut", "Juniper", "Bingo",  "Tofu",    "Pumpkin", "Comet",
    "Olive",   "Pretzel", "Nugget", "Sunny",   "Figaro", "Dottie",  "Gizmo",   "Marbles"};

const std::vector<std::string> kCities = {
    "Denver",     "Seattle",    "Austin",     "Boston",      "Portland",    "Chicago",
    "Atlanta",    "Phoenix",    "Nashville",  "Minneapolis", "San Diego",   "Pittsburgh",
    "Raleigh",    "Tucson",     "Madison",    "Savannah",    "Albuquerque", "Sacramento",
    "Baltimore",  "Milwaukee",  "Richmond",   "Boise",       "Omaha",       "Spokane",
    "Charleston", "Burlington", "Providence", "Asheville",   "Santa Fe",    "Ann Arbor"};

const std::vector<std::string> kJobs = {
    "nurse",         "teacher",           "software engineer",  "chef",
    "accountant",    "architect",         "pharmacist",         "librarian",
    "electrician",   "graphic designer",  "physical therapist", "journalist",
    "veterinarian",  "data analyst",      "paramedic",          "carpenter",
    "translator",    "marketing manager", "photographer",       "lab technician",
    "social worker", "civil engineer",    "park ranger",        "florist"};

const std::vector<std::string> kPlaces = {"Lake Tahoe", "Yosemite",   "Big Sur",     "Zion",
                                          "Acadia",     "Mount Hood", "Joshua Tree", "Glacier Bay",
                                          "Cape Cod",   "Sedona",     "Moab",        "Crater Lake"};

const std::vector<std::string> kBands = {"Silver Harbor", "Paper Lanterns", "Neon Orchard",
                                         "Blue Meridian", "Velvet Static",  "Copper Foxes",
                                         "Midnight Tram", "Echo Parade"};

// Draws `count` distinct items; throws when the vocabulary is too small (a scale bug).
std::vector<std::string> draw(SeededRng& rng, std::vector<std::string>& pool, size_t count,
                              const char* what) {
  if (count > pool.size()) {
    throw std::logic_error(std::string("conversation persona: not enough ") + what + " (" +
                           std::to_string(count) + " wanted, " + std::to_string(pool.size()) +
                           " left)");
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    const size_t k = rng.below(pool.size());
    out.push_back(pool[k]);
    pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(k));
  }
  return out;
}

int32_t clamp_round(double v, int32_t lo, int32_t hi) {
  return std::clamp(static_cast<int32_t>(std::lround(v)), lo, hi);
}

}  // namespace

const std::vector<std::string>& relation_words() {
  static const std::vector<std::string> words = {"sister", "brother", "cousin", "aunt",
                                                 "uncle",  "niece",   "nephew", "roommate"};
  return words;
}

const std::vector<std::string>& pet_kinds() {
  static const std::vector<std::string> kinds = {"dog",     "cat",    "parrot",   "rabbit",
                                                 "hamster", "turtle", "goldfish", "hedgehog"};
  return kinds;
}

const std::vector<PreferenceCategory>& preference_categories() {
  static const std::vector<PreferenceCategory> categories = {
      {"cuisine",
       {"Thai", "Italian", "Mexican", "Ethiopian", "Korean", "Greek", "Indian", "Japanese",
        "Lebanese", "Vietnamese"}},
      {"music genre",
       {"jazz", "reggae", "folk", "techno", "blues", "hip hop", "country", "classical"}},
      {"sport", {"tennis", "soccer", "basketball", "baseball", "hockey", "cricket", "volleyball"}},
      {"hobby",
       {"knitting", "gardening", "rock climbing", "painting", "photography", "birdwatching",
        "woodworking", "calligraphy"}},
      {"dessert",
       {"cheesecake", "tiramisu", "brownies", "apple pie", "baklava", "lemon tart", "churros"}},
      {"color", {"teal", "crimson", "mustard yellow", "lavender", "forest green", "navy blue"}},
      {"flower", {"tulips", "sunflowers", "peonies", "orchids", "lilacs", "marigolds"}},
  };
  return categories;
}

const std::vector<EventKind>& event_kinds() {
  static const std::vector<EventKind> kinds = {
      {"half marathon", "I ran my first half marathon {when}! My legs are still sore.",
       "When did the user run the half marathon?", "", ""},
      {"wedding", "I went to a wedding {when}; the ceremony was outdoors and lovely.",
       "When did the user go to the wedding?", "", ""},
      {"dentist appointment", "I had a dentist appointment {when}, and no cavities this time.",
       "When did the user have the dentist appointment?", "", ""},
      {"camping trip", "I went on a camping trip at {detail} {when}.",
       "When did the user go on the camping trip?", "place",
       "Where did the user go on the camping trip?"},
      {"concert", "I saw {detail} at a concert {when}, and they were amazing.",
       "When did the user go to the concert?", "band", "Which band did the user see in concert?"},
      {"pottery class", "I took a pottery class {when} and made a lopsided bowl.",
       "When did the user take the pottery class?", "", ""},
      {"bake sale", "I helped at a charity bake sale {when} and we sold out by noon.",
       "When did the user help at the bake sale?", "", ""},
      {"flu", "I came down with the flu {when}, so I am taking it easy.",
       "When did the user come down with the flu?", "", ""},
      {"surprise party", "My coworkers threw me a surprise party {when}!",
       "When did the user get the surprise party?", "", ""},
      {"hiking trip", "I went on a hiking trip to {detail} {when}.",
       "When did the user go on the hiking trip?", "place",
       "Where did the user go on the hiking trip?"},
      {"cooking class", "I took a cooking class {when} and learned to make fresh pasta.",
       "When did the user take the cooking class?", "", ""},
      {"chess tournament", "I played in a chess tournament {when} and won two games.",
       "When did the user play in the chess tournament?", "", ""},
      {"beach day", "I had a beach day with friends {when} and got a little sunburned.",
       "When did the user have the beach day?", "", ""},
      {"volunteering", "I did some volunteering at the animal shelter {when}.",
       "When did the user go volunteering at the animal shelter?", "", ""},
      {"dinner party", "I hosted a dinner party {when} for six people.",
       "When did the user host the dinner party?", "", ""},
      {"sprained ankle", "I got a sprained ankle {when} tripping on the stairs.",
       "When did the user get the sprained ankle?", "", ""},
      {"road trip", "I went on a road trip to {detail} {when}.",
       "When did the user go on the road trip?", "place",
       "Where did the user go on the road trip?"},
      {"art exhibition", "I went to an art exhibition {when} downtown.",
       "When did the user go to the art exhibition?", "", ""},
      {"swimming lesson", "I had my first swimming lesson {when}.",
       "When did the user have the first swimming lesson?", "", ""},
      {"garage sale", "I held a garage sale {when} and cleared out half the closet.",
       "When did the user hold the garage sale?", "", ""},
  };
  return kinds;
}

PersonaScale PersonaScale::for_tokens(int64_t tokens) {
  const double s = static_cast<double>(tokens) / 3000.0;
  PersonaScale p;
  p.relatives = clamp_round(2 * s, 1, 7);
  p.pets = clamp_round(0.5 + s / 2, 1, 4);
  p.preferences = clamp_round(2 + s, 2, 6);
  p.preference_changes = clamp_round(s, 1, p.preferences);
  p.moves = clamp_round(0.7 * s, 1, 4);
  p.job_changes = clamp_round(s / 2, 1, 3);
  p.events = clamp_round(4 * s, 3, 16);
  return p;
}

Persona sample_persona(SeededRng& rng, const PersonaScale& scale) {
  std::vector<std::string> people = kPersonNames, cities = kCities, jobs = kJobs;
  std::vector<std::string> pet_names = kPetNames, places = kPlaces, bands = kBands;
  Persona p;
  p.name = draw(rng, people, 1, "names")[0];
  p.hometown = draw(rng, cities, 1, "cities")[0];
  p.home_cities = draw(rng, cities, 1 + scale.moves, "cities");
  p.jobs = draw(rng, jobs, 1 + scale.job_changes, "jobs");

  std::vector<std::string> relations = relation_words();
  for (const std::string& relation : draw(rng, relations, scale.relatives, "relations")) {
    Relative r;
    r.relation = relation;
    r.name = draw(rng, people, 1, "names")[0];
    r.city = draw(rng, cities, 1, "cities")[0];
    r.job = draw(rng, jobs, 1, "jobs")[0];
    p.relatives.push_back(r);
  }

  std::vector<std::string> kinds = pet_kinds();
  for (const std::string& kind : draw(rng, kinds, scale.pets, "pet kinds")) {
    Pet pet;
    pet.kind = kind;
    pet.name = draw(rng, pet_names, 1, "pet names")[0];
    pet.adopted_during = !p.pets.empty() || rng.chance(0.5);
    p.pets.push_back(pet);
  }

  std::vector<size_t> category_order(preference_categories().size());
  for (size_t i = 0; i < category_order.size(); ++i)
    category_order[i] = i;
  rng.shuffle(category_order);
  for (int32_t i = 0; i < scale.preferences; ++i) {
    const PreferenceCategory& c = preference_categories()[category_order[i]];
    std::vector<std::string> values = c.values;
    const int32_t changes = i < scale.preference_changes ? 1 : 0;
    p.preferences.push_back({c.name, draw(rng, values, 1 + changes, "preference values")});
  }

  std::vector<size_t> event_order(event_kinds().size());
  for (size_t i = 0; i < event_order.size(); ++i)
    event_order[i] = i;
  rng.shuffle(event_order);
  for (int32_t i = 0; i < scale.events; ++i) {
    PersonaEvent e;
    e.kind = &event_kinds()[event_order[i]];
    if (e.kind->detail_kind == "place") e.detail = draw(rng, places, 1, "places")[0];
    if (e.kind->detail_kind == "band") e.detail = draw(rng, bands, 1, "bands")[0];
    p.events.push_back(e);
  }
  return p;
}

}  // namespace engram::env
