#include "core/env/conversation_generator.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

#include "core/env/conversation_date.h"
#include "core/env/conversation_facts.h"
#include "core/env/conversation_format.h"
#include "core/env/conversation_questions.h"
#include "core/env/conversation_small_talk.h"
#include "core/env/seeded_rng.h"

namespace engram::env {
namespace {

struct FactDraft {
  std::string subject;
  std::string attribute;
  std::string value;
  bool dated = false;
};

// One user line and the assistant's reply. Fact exchanges carry the facts the user line states
// and `slot`, where in the conversation (0..1) the fact belongs.
struct Exchange {
  std::string user;
  std::string assistant;
  std::vector<FactDraft> facts;
  int32_t day_offset = 0;  // dated facts happened this many days from the session's date
  double slot = 0;
  bool small_talk = false;
};

double unit(SeededRng& rng) {
  return static_cast<double>(rng.next_u64() >> 11) * 0x1.0p-53;
}
double uniform(SeededRng& rng, double lo, double hi) {
  return lo + (hi - lo) * unit(rng);
}

void replace_all(std::string& text, const std::string& key, const std::string& value) {
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
    text.replace(at, key.size(), value);
}

std::string capitalize(std::string s) {
  if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return s;
}

std::string with_article(const std::string& noun) {
  const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(noun.at(0))));
  return (std::string("aeiou").find(c) != std::string::npos ? "an " : "a ") + noun;
}

struct When {
  const char* text;
  int32_t offset;
};

// Moves and new jobs happen "today": a change told as "yesterday" after another told as "today"
// in the same session would run the changes backwards.
When pick_when(SeededRng& rng, bool allow_yesterday = true) {
  const double u = unit(rng);
  if (u < 0.4) return {"today", 0};
  if (!allow_yesterday || u < 0.65) return {"this morning", 0};
  return {"yesterday", -1};
}

// Builds one exchange from a user template and an assistant template; {a}, {b}, {c} are filled
// in both, {A} is {a} capitalised.
Exchange exchange(SeededRng& rng, const std::vector<std::string>& user,
                  const std::vector<std::string>& assistant, const std::string& a,
                  const std::string& b = "", const std::string& c = "") {
  Exchange e;
  e.user = rng.pick(user);
  e.assistant = rng.pick(assistant);
  for (std::string* text : {&e.user, &e.assistant}) {
    replace_all(*text, "{a}", a);
    replace_all(*text, "{A}", capitalize(a));
    replace_all(*text, "{b}", b);
    replace_all(*text, "{c}", c);
  }
  return e;
}

std::vector<Exchange> fact_exchanges(SeededRng& rng, const Persona& p) {
  std::vector<Exchange> out;
  auto add = [&](Exchange e, double slot, std::vector<FactDraft> facts) {
    e.slot = slot;
    e.facts = std::move(facts);
    out.push_back(std::move(e));
  };

  add(exchange(rng, {"Hi! I'm {a}, nice to meet you.", "Hello, my name is {a}."},
               {"Nice to meet you, {a}! How can I help today?", "Hi {a}! Happy to chat."}, p.name),
      0.0, {{"user", "name", p.name}});
  add(exchange(rng, {"I grew up in {a}, but I left after school.", "I was born and raised in {a}."},
               {"{a} must hold a lot of memories for you.", "Growing up in {a} sounds special."},
               p.hometown),
      uniform(rng, 0.005, 0.12), {{"user", "hometown", p.hometown}});
  add(exchange(rng, {"These days I live in {a}.", "I live in {a} right now, in a small apartment."},
               {"{a} sounds like a nice place to live.", "How do you like living in {a}?"},
               p.home_cities[0]),
      uniform(rng, 0.005, 0.12), {{"user", "home_city", p.home_cities[0]}});
  add(exchange(rng, {"I work as {a}.", "I am {a}, and it keeps me busy."},
               {"Being {a} sounds rewarding.", "Working as {a} must keep you on your toes."},
               with_article(p.jobs[0])),
      uniform(rng, 0.005, 0.12), {{"user", "job", p.jobs[0]}});

  const int32_t moves = static_cast<int32_t>(p.home_cities.size()) - 1;
  for (int32_t k = 0; k < moves; ++k) {
    const When when = pick_when(rng, false);
    Exchange e = exchange(
        rng, {"Big news: I moved to {a} {b}!", "I finally moved to {a} {b}; boxes everywhere."},
        {"Congratulations on the move to {a}!", "Welcome to {a}! I hope you settle in quickly."},
        p.home_cities[k + 1], when.text);
    e.day_offset = when.offset;
    add(e, uniform(rng, 0.2 + 0.78 * k / moves, 0.2 + 0.78 * (k + 1) / moves),
        {{"user", "home_city", p.home_cities[k + 1], true}});
  }
  const int32_t job_changes = static_cast<int32_t>(p.jobs.size()) - 1;
  for (int32_t k = 0; k < job_changes; ++k) {
    const When when = pick_when(rng, false);
    Exchange e = exchange(
        rng, {"I started a new job as {a} {b}.", "Guess what: I began working as {a} {b}!"},
        {"Congratulations on the new job! Good luck as {a}.",
         "That is exciting news. I hope you enjoy being {a}."},
        with_article(p.jobs[k + 1]), when.text);
    e.day_offset = when.offset;
    add(e, uniform(rng, 0.25 + 0.73 * k / job_changes, 0.25 + 0.73 * (k + 1) / job_changes),
        {{"user", "job", p.jobs[k + 1], true}});
  }

  for (const Relative& r : p.relatives) {
    const double intro = uniform(rng, 0.03, 0.45);
    add(exchange(rng,
                 {"My {b} is called {a}.", "I had lunch with my {b} {a} this week.",
                  "My {b}, {a}, is coming to visit next month."},
                 {"It is nice that you and {a} stay close.", "That is lovely. Say hi to {a}!"},
                 r.name, r.relation),
        intro, {{r.relation, "name", r.name}});
    add(exchange(rng,
                 {"{a} lives in {b} and loves it there.", "{a} has been living in {b} for years."},
                 {"{b} seems to suit {a}.", "It sounds like {a} is happy in {b}."}, r.name, r.city),
        uniform(rng, intro + 0.05, 0.98), {{r.name, "city", r.city}});
    if (rng.chance(0.6)) {
      add(exchange(rng, {"{a} works as {b} these days.", "{a} just got a job as {b}."},
                   {"That sounds like interesting work for {a}.", "Good for {a}!"}, r.name,
                   with_article(r.job)),
          uniform(rng, intro + 0.05, 0.98), {{r.name, "job", r.job}});
    }
  }

  for (const Pet& pet : p.pets) {
    if (!pet.adopted_during) {
      add(exchange(rng, {"I have {b} named {a}.", "My {c} {a} keeps me company at home."},
                   {"{a} sounds adorable!", "How lovely. {a} must be great company."}, pet.name,
                   with_article(pet.kind), pet.kind),
          uniform(rng, 0.02, 0.3), {{"user", "pet", pet.name}, {pet.name, "kind", pet.kind}});
      continue;
    }
    const When when = pick_when(rng);
    Exchange e = exchange(
        rng, {"I adopted {b} named {a} {c}!", "Meet {a}: I adopted {b} {c}."},
        {"Congratulations! {a} is lucky to have you.", "How exciting! I hope {a} settles in well."},
        pet.name, with_article(pet.kind), when.text);
    e.day_offset = when.offset;
    add(e, uniform(rng, 0.1, 0.98),
        {{"user", "adopted_pet", pet.name, true}, {pet.name, "kind", pet.kind}});
  }

  for (const Preference& pref : p.preferences) {
    const std::string attribute = "favorite:" + pref.category;
    double slot = uniform(rng, 0.03, 0.4);
    add(exchange(rng, {"My favorite {b} is {a}.", "I have to say {a} is my favorite {b}."},
                 {"{A} is a great choice.", "Good taste! {A} is hard to beat."}, pref.values[0],
                 pref.category),
        slot, {{"user", attribute, pref.values[0]}});
    for (size_t k = 1; k < pref.values.size(); ++k) {
      slot = uniform(rng, slot + 0.1, 0.98);
      add(exchange(rng,
                   {"I used to love {c}, but now my favorite {b} is {a}.",
                    "Funny thing: my favorite {b} is {a} now, not {c} anymore."},
                   {"Tastes change! {A} sounds great.", "{A} is a fun switch."}, pref.values[k],
                   pref.category, pref.values[k - 1]),
          slot, {{"user", attribute, pref.values[k]}});
    }
  }

  for (const PersonaEvent& ev : p.events) {
    const When when = pick_when(rng);
    Exchange e;
    e.user = ev.kind->statement;
    replace_all(e.user, "{when}", when.text);
    replace_all(e.user, "{detail}", ev.detail);
    e.assistant = rng.pick(std::vector<std::string>{
        "Thanks for telling me! How are you feeling about it?", "That sounds like quite a day.",
        "Wow, what an experience.", "I am glad you shared that with me."});
    e.day_offset = when.offset;
    std::vector<FactDraft> facts = {{"user", "event", ev.kind->key, true}};
    if (!ev.detail.empty()) facts.push_back({ev.kind->key, ev.kind->detail_kind, ev.detail});
    add(e, uniform(rng, 0.03, 0.98), facts);
  }

  std::stable_sort(out.begin(), out.end(),
                   [](const Exchange& a, const Exchange& b) { return a.slot < b.slot; });
  return out;
}

int64_t exchange_tokens(const Exchange& e) {
  return estimate_tokens(utterance_line({kUserSpeaker, e.user, 0, ""})) +
         estimate_tokens(utterance_line({kAssistantSpeaker, e.assistant, 0, ""}));
}

Exchange small_talk_exchange(SeededRng& rng, SmallTalk& talk) {
  const SmallTalkExchange s = talk.next(rng);
  Exchange e;
  e.user = s.user;
  e.assistant = s.assistant;
  e.small_talk = true;
  return e;
}

struct Session {
  CalendarDate date;
  std::vector<Exchange> exchanges;
};

int64_t sessions_tokens(const std::vector<Session>& sessions) {
  int64_t n = 0;
  for (size_t k = 0; k < sessions.size(); ++k) {
    n += estimate_tokens(session_header(static_cast<int32_t>(k), sessions[k].date.iso()) + "\n");
    if (k > 0) n += 1;  // the blank line between sessions
    for (const Exchange& e : sessions[k].exchanges)
      n += exchange_tokens(e);
  }
  return n;
}

}  // namespace

Conversation generate_conversation(const ConversationConfig& config) {
  if (config.min_tokens <= 0 || config.max_tokens < config.min_tokens)
    throw std::invalid_argument("conversation length: need 0 < min_tokens <= max_tokens, got " +
                                std::to_string(config.min_tokens) + ".." +
                                std::to_string(config.max_tokens));
  SeededRng rng(config.seed);
  const int64_t target = config.min_tokens + static_cast<int64_t>(rng.below(static_cast<uint64_t>(
                                                 config.max_tokens - config.min_tokens + 1)));
  const Persona persona = sample_persona(rng, PersonaScale::for_tokens(target));
  const std::vector<Exchange> beats = fact_exchanges(rng, persona);

  const int64_t session_count = std::max<int64_t>(
      2,
      std::lround(static_cast<double>(target) / std::max<int64_t>(config.tokens_per_session, 1)));
  // The longest header ("Session 12 (September 28, 2023)") bounds every header's cost.
  const int64_t header_cost =
      estimate_tokens(session_header(static_cast<int32_t>(session_count), "2023-09-28") + "\n") + 1;
  const int64_t greeting_cost = 16;  // a typical session_greeting() exchange, 60% of sessions
  int64_t budget = target - (header_cost + greeting_cost * 6 / 10) * session_count;
  for (const Exchange& b : beats)
    budget -= exchange_tokens(b);
  std::vector<Exchange> fillers;
  SmallTalk talk;
  while (true) {
    Exchange f = small_talk_exchange(rng, talk);
    if (exchange_tokens(f) > budget) break;
    budget -= exchange_tokens(f);
    fillers.push_back(std::move(f));
  }

  // Beats at their slots, small talk around them, in conversation order.
  std::vector<Exchange> sequence;
  const size_t total = beats.size() + fillers.size();
  for (size_t j = 0, b = 0, f = 0; j < total; ++j) {
    const bool beat_due = b < beats.size() && beats[b].slot * static_cast<double>(total) <= j;
    if (f == fillers.size() || beat_due) {
      sequence.push_back(beats[b++]);
    } else {
      sequence.push_back(fillers[f++]);
    }
  }

  // Sessions of roughly equal size, a few days apart.
  const size_t sessions_n = std::min<size_t>(static_cast<size_t>(session_count), sequence.size());
  std::vector<size_t> cuts = {0};
  for (size_t k = 1; k < sessions_n; ++k) {
    const double at = (static_cast<double>(k) + uniform(rng, -0.3, 0.3)) *
                      static_cast<double>(sequence.size()) / static_cast<double>(sessions_n);
    cuts.push_back(std::clamp<size_t>(static_cast<size_t>(std::lround(at)), cuts.back() + 1,
                                      sequence.size() - (sessions_n - k)));
  }
  cuts.push_back(sequence.size());
  std::vector<Session> sessions(sessions_n);
  CalendarDate date = CalendarDate{2022, 1, 1}.plus_days(static_cast<int64_t>(rng.below(3 * 365)));
  for (size_t k = 0; k < sessions_n; ++k) {
    if (k > 0) {
      date = date.plus_days(rng.between(1, 6));
      if (rng.chance(0.6)) {
        const SmallTalkExchange g = session_greeting(rng);
        Exchange e;
        e.user = g.user;
        e.assistant = g.assistant;
        e.small_talk = true;
        sessions[k].exchanges.push_back(e);
      }
    }
    sessions[k].date = date;
    for (size_t j = cuts[k]; j < cuts[k + 1]; ++j)
      sessions[k].exchanges.push_back(sequence[j]);
  }

  // Headers and greetings were budgeted roughly; land in [min, max] by dropping small talk from
  // the end or adding it there.
  int64_t tokens = sessions_tokens(sessions);
  for (size_t k = sessions.size(); k-- > 0 && tokens > config.max_tokens;) {
    std::vector<Exchange>& ex = sessions[k].exchanges;
    for (size_t j = ex.size(); j-- > 1 && tokens > config.max_tokens;) {
      if (!ex[j].small_talk) continue;
      tokens -= exchange_tokens(ex[j]);
      ex.erase(ex.begin() + static_cast<std::ptrdiff_t>(j));
    }
  }
  while (tokens < config.min_tokens) {
    Exchange f = small_talk_exchange(rng, talk);
    if (tokens + exchange_tokens(f) > config.max_tokens) break;
    tokens += exchange_tokens(f);
    sessions.back().exchanges.push_back(std::move(f));
  }

  Conversation c;
  c.seed = config.seed;
  for (size_t k = 0; k < sessions.size(); ++k) {
    const std::string iso = sessions[k].date.iso();
    for (const Exchange& e : sessions[k].exchanges) {
      const int64_t user_index = static_cast<int64_t>(c.utterances.size());
      c.utterances.push_back({kUserSpeaker, e.user, static_cast<int32_t>(k), iso});
      c.utterances.push_back({kAssistantSpeaker, e.assistant, static_cast<int32_t>(k), iso});
      for (const FactDraft& f : e.facts) {
        const std::string when = f.dated ? sessions[k].date.plus_days(e.day_offset).iso() : iso;
        c.facts.push_back({f.subject, f.attribute, f.value, when, f.dated, user_index});
      }
    }
  }
  c.questions = build_questions(c.utterances, c.facts, rng, config.questions_per_type);
  return c;
}

int64_t conversation_tokens(const Conversation& c) {
  return history_tokens(c.utterances, 0, c.utterances.size());
}

std::vector<std::string> user_turns(uint64_t first_seed, size_t count) {
  std::vector<std::string> out;
  for (uint64_t seed = first_seed; out.size() < count; ++seed) {
    ConversationConfig c;
    c.seed = seed;
    for (const Utterance& u : generate_conversation(c).utterances) {
      if (u.speaker != kUserSpeaker) continue;
      out.push_back(u.text);
      if (out.size() == count) break;
    }
  }
  return out;
}

}  // namespace engram::env
