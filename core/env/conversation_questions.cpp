#include "core/env/conversation_questions.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <set>

#include "core/env/conversation_date.h"
#include "core/env/conversation_facts.h"

namespace engram::env {
namespace {

std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::string w;
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      w += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!w.empty()) {
      out.push_back(w);
      w.clear();
    }
  }
  if (!w.empty()) out.push_back(w);
  return out;
}

// Things the user never has in any conversation, asked about to test abstention.
struct NeverMentioned {
  const char* question;
  const char* keyword;
};
constexpr NeverMentioned kNeverMentioned[] = {
    {"What is the name of the user's grandmother?", "grandmother"},
    {"What is the name of the user's grandfather?", "grandfather"},
    {"What is the user's favorite movie?", "movie"},
    {"What is the user's favorite book?", "book"},
    {"When did the user go skydiving?", "skydiving"},
    {"What kind of car does the user drive?", "car"},
    {"Which instrument does the user play?", "instrument"},
    {"Where did the user go to college?", "college"},
    {"What is the user's blood type?", "blood type"},
};

class QuestionBuilder {
 public:
  QuestionBuilder(const std::vector<Utterance>& u, const std::vector<Fact>& f) : u_(u), f_(f) {}

  std::map<QuestionType, std::vector<Question>> candidates() {
    single_hop();
    multi_hop();
    temporal();
    knowledge_update();
    unanswerable();
    return out_;
  }

 private:
  void add(QuestionType type, std::string question, std::string answer,
           std::vector<int64_t> evidence) {
    out_[type].push_back({std::move(question), std::move(answer), type, std::move(evidence)});
  }

  std::vector<const Fact*> all(const std::string& subject, const std::string& attribute) const {
    std::vector<const Fact*> out;
    for (const Fact& f : f_)
      if (f.subject == subject && f.attribute == attribute) out.push_back(&f);
    return out;
  }
  std::vector<const Fact*> with_attribute(const std::string& attribute) const {
    std::vector<const Fact*> out;
    for (const Fact& f : f_)
      if (f.attribute == attribute) out.push_back(&f);
    return out;
  }
  static int64_t day(const Fact& f) { return CalendarDate::parse_iso(f.date).day_number(); }

  // The value of (user, attribute) on day `d`: the fact with the latest start before `d`, where
  // an undated fact (stated, not happened) holds from before the conversation. Null when a
  // change falls on `d` itself (the answer would be ambiguous).
  const Fact* in_effect(const std::string& attribute, int64_t d) const {
    const Fact* best = nullptr;
    int64_t best_start = std::numeric_limits<int64_t>::min();
    for (const Fact* f : all("user", attribute)) {
      const int64_t start = f->dated ? day(*f) : std::numeric_limits<int64_t>::min();
      if (start == d) return nullptr;
      if (start < d && (best == nullptr || start >= best_start)) {
        best = f;
        best_start = start;
      }
    }
    return best;
  }

  void single_hop() {
    for (const Fact* f : all("user", "name"))
      add(QuestionType::kSingleHop, "What is the user's name?", f->value, {f->utterance});
    for (const Fact* f : all("user", "hometown"))
      add(QuestionType::kSingleHop, "Where did the user grow up?", f->value, {f->utterance});
    for (const std::string& relation : relation_words())
      for (const Fact* f : all(relation, "name"))
        add(QuestionType::kSingleHop, "What is the name of the user's " + relation + "?", f->value,
            {f->utterance});
    for (const Fact* f : with_attribute("kind")) {
      add(QuestionType::kSingleHop, "What kind of animal is " + f->subject + "?", f->value,
          {f->utterance});
      add(QuestionType::kSingleHop, "What is the name of the user's " + f->value + "?", f->subject,
          {f->utterance});
    }
    for (const PreferenceCategory& c : preference_categories()) {
      const auto facts = all("user", "favorite:" + c.name);
      if (facts.size() == 1)
        add(QuestionType::kSingleHop, "What is the user's favorite " + c.name + "?",
            facts[0]->value, {facts[0]->utterance});
    }
    for (const EventKind& k : event_kinds())
      if (!k.detail_kind.empty())
        for (const Fact* f : all(k.key, k.detail_kind))
          add(QuestionType::kSingleHop, k.detail_question, f->value, {f->utterance});
  }

  void multi_hop() {
    for (const std::string& relation : relation_words()) {
      for (const Fact* intro : all(relation, "name")) {
        for (const Fact* f : all(intro->value, "city"))
          add(QuestionType::kMultiHop, "Which city does the user's " + relation + " live in?",
              f->value, {intro->utterance, f->utterance});
        for (const Fact* f : all(intro->value, "job"))
          add(QuestionType::kMultiHop, "What does the user's " + relation + " do for work?",
              f->value, {intro->utterance, f->utterance});
      }
    }
    std::vector<int64_t> pets;
    for (const Fact& f : f_)
      if (f.subject == "user" && (f.attribute == "pet" || f.attribute == "adopted_pet"))
        pets.push_back(f.utterance);
    if (pets.size() >= 2)
      add(QuestionType::kMultiHop, "How many pets does the user have?", std::to_string(pets.size()),
          pets);
    for (const Fact* adoption : all("user", "adopted_pet"))
      if (const Fact* city = in_effect("home_city", day(*adoption)))
        add(QuestionType::kMultiHop,
            "Which city was the user living in when they adopted " + adoption->value + "?",
            city->value, {adoption->utterance, city->utterance});
    for (const Fact* event : all("user", "event"))
      if (const Fact* job = in_effect("job", day(*event)))
        add(QuestionType::kMultiHop,
            "What was the user's job at the time of the " + event->value + "?", job->value,
            {event->utterance, job->utterance});
  }

  void temporal() {
    const auto events = all("user", "event");
    for (const Fact* e : events)
      for (const EventKind& k : event_kinds())
        if (k.key == e->value)
          add(QuestionType::kTemporal, k.when_question, CalendarDate::parse_iso(e->date).text(),
              {e->utterance});
    for (const Fact* f : all("user", "home_city"))
      if (f->dated)
        add(QuestionType::kTemporal, "When did the user move to " + f->value + "?",
            CalendarDate::parse_iso(f->date).text(), {f->utterance});
    for (const Fact* f : all("user", "job"))
      if (f->dated)
        add(QuestionType::kTemporal,
            "When did the user start working as " + article(f->value) + "?",
            CalendarDate::parse_iso(f->date).text(), {f->utterance});
    for (const Fact* f : all("user", "adopted_pet"))
      add(QuestionType::kTemporal, "When did the user adopt " + f->value + "?",
          CalendarDate::parse_iso(f->date).text(), {f->utterance});
    for (size_t i = 0; i < events.size(); ++i) {
      for (size_t j = i + 1; j < events.size(); ++j) {
        const Fact& a = *events[i];
        const Fact& b = *events[j];
        if (day(a) == day(b)) continue;
        const Fact& first = day(a) < day(b) ? a : b;
        // The order in the question alternates so "the first named" is not a shortcut.
        const bool swap = (i + j) % 2 == 1;
        const Fact& x = swap ? b : a;
        const Fact& y = swap ? a : b;
        add(QuestionType::kTemporal,
            "Which happened first, the " + x.value + " or the " + y.value + "?", first.value,
            {x.utterance, y.utterance});
        add(QuestionType::kTemporal,
            "How many days passed between the " + x.value + " and the " + y.value + "?",
            std::to_string(std::abs(day(a) - day(b))), {x.utterance, y.utterance});
      }
    }
  }

  void knowledge_update() {
    auto latest = [&](const std::string& attribute, const std::string& question) {
      const auto facts = all("user", attribute);
      if (facts.size() >= 2)
        add(QuestionType::kKnowledgeUpdate, question, facts.back()->value,
            {facts.back()->utterance});
    };
    latest("home_city", "Which city does the user live in now?");
    latest("job", "What is the user's job now?");
    for (const PreferenceCategory& c : preference_categories())
      latest("favorite:" + c.name, "What is the user's favorite " + c.name + " now?");
  }

  void unanswerable() {
    std::vector<std::pair<std::string, std::string>> pool;  // question, keyword
    for (const NeverMentioned& n : kNeverMentioned)
      pool.emplace_back(n.question, n.keyword);
    for (const std::string& r : relation_words())
      pool.emplace_back("What is the name of the user's " + r + "?", r);
    for (const std::string& k : pet_kinds())
      pool.emplace_back("What is the name of the user's " + k + "?", k);
    for (const PreferenceCategory& c : preference_categories())
      pool.emplace_back("What is the user's favorite " + c.name + "?", c.name);
    for (const EventKind& k : event_kinds())
      pool.emplace_back(k.when_question, k.key);
    for (const auto& [question, keyword] : pool) {
      const bool said = std::any_of(u_.begin(), u_.end(),
                                    [&](const Utterance& u) { return mentions(u.text, keyword); });
      if (!said) add(QuestionType::kUnanswerable, question, kUnknownAnswer, {});
    }
  }

  static std::string article(const std::string& noun) {
    return (std::string("aeiou").find(noun.at(0)) != std::string::npos ? "an " : "a ") + noun;
  }

  const std::vector<Utterance>& u_;
  const std::vector<Fact>& f_;
  std::map<QuestionType, std::vector<Question>> out_;
};

}  // namespace

bool mentions(const std::string& text, const std::string& phrase) {
  const std::vector<std::string> t = words(text);
  const std::vector<std::string> p = words(phrase);
  if (p.empty()) return false;
  return std::search(t.begin(), t.end(), p.begin(), p.end()) != t.end();
}

std::vector<Question> build_questions(const std::vector<Utterance>& utterances,
                                      const std::vector<Fact>& facts, SeededRng& rng,
                                      int32_t per_type) {
  std::map<QuestionType, std::vector<Question>> candidates =
      QuestionBuilder(utterances, facts).candidates();
  std::vector<Question> out;
  for (QuestionType type : all_question_types()) {
    std::vector<Question>& c = candidates[type];
    // A question text asked twice would have two golds (two pets' counts cannot happen, but
    // keep the rule general): keep the first of each text.
    std::set<std::string> seen;
    std::vector<Question> unique;
    for (Question& q : c)
      if (seen.insert(q.question).second) unique.push_back(std::move(q));
    rng.shuffle(unique);
    if (unique.size() > static_cast<size_t>(per_type)) unique.resize(static_cast<size_t>(per_type));
    for (Question& q : unique)
      out.push_back(std::move(q));
  }
  return out;
}

}  // namespace engram::env
