// The conversation generator (World 2): the same seed gives the same conversation, lengths land
// in the requested range, every logged fact is said by its utterance, and every gold answer is
// re-derived here from the fact log and the text of its evidence utterances, not trusted.
#include <QtTest>

#include <algorithm>
#include <map>
#include <string>

#include "core/env/conversation_date.h"
#include "core/env/conversation_facts.h"
#include "core/env/conversation_generator.h"
#include "core/env/conversation_questions.h"

using namespace engram::env;

namespace {

Conversation make(uint64_t seed, int64_t min_tokens = 2000, int64_t max_tokens = 4000) {
  ConversationConfig config;
  config.seed = seed;
  config.min_tokens = min_tokens;
  config.max_tokens = max_tokens;
  return generate_conversation(config);
}

bool is_number(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The day an event told in `u` happened, from the text alone: the session's date, or the day
// before when the user says "yesterday".
CalendarDate told_day(const Utterance& u) {
  const CalendarDate session = CalendarDate::parse_iso(u.time);
  return mentions(u.text, "yesterday") ? session.plus_days(-1) : session;
}

std::vector<const Fact*> facts_at(const Conversation& c, int64_t utterance) {
  std::vector<const Fact*> out;
  for (const Fact& f : c.facts)
    if (f.utterance == utterance) out.push_back(&f);
  return out;
}

const Fact* fact_with_value(const Conversation& c, int64_t utterance, const std::string& value) {
  for (const Fact* f : facts_at(c, utterance))
    if (f->value == value) return f;
  return nullptr;
}

// The thing an unanswerable question asks about, parsed back from its wording.
std::string unanswerable_subject(const std::string& q) {
  const std::string name_of = "What is the name of the user's ";
  const std::string favorite = "What is the user's favorite ";
  if (q.rfind(name_of, 0) == 0) return q.substr(name_of.size(), q.size() - name_of.size() - 1);
  if (q.rfind(favorite, 0) == 0) return q.substr(favorite.size(), q.size() - favorite.size() - 1);
  for (const EventKind& k : event_kinds())
    if (k.when_question == q) return k.key;
  const std::map<std::string, std::string> fixed = {
      {"When did the user go skydiving?", "skydiving"},
      {"What kind of car does the user drive?", "car"},
      {"Which instrument does the user play?", "instrument"},
      {"Where did the user go to college?", "college"},
      {"What is the user's blood type?", "blood type"}};
  auto it = fixed.find(q);
  return it == fixed.end() ? std::string() : it->second;
}

// Checks one question against the conversation; returns an explanation, or "" when it holds.
std::string check_question(const Conversation& c, const Question& q) {
  const auto& u = c.utterances;
  for (int64_t e : q.evidence) {
    if (e < 0 || e >= static_cast<int64_t>(u.size())) return "evidence index out of range";
    if (u[e].speaker != kUserSpeaker) return "evidence is not a user utterance";
  }
  switch (q.type) {
    case QuestionType::kSingleHop: {
      if (q.evidence.size() != 1) return "single-hop needs one evidence utterance";
      const int64_t e = q.evidence[0];
      if (!mentions(u[e].text, q.answer)) return "evidence does not contain the answer";
      for (const Fact* f : facts_at(c, e))
        if (f->value == q.answer || f->subject == q.answer) return "";
      return "no fact at the evidence gives the answer";
    }
    case QuestionType::kMultiHop: {
      if (is_number(q.answer)) {
        int64_t pets = 0;
        for (const Fact& f : c.facts)
          pets += f.subject == "user" && (f.attribute == "pet" || f.attribute == "adopted_pet");
        if (std::to_string(pets) != q.answer) return "pet count differs from the fact log";
        if (static_cast<int64_t>(q.evidence.size()) != pets) return "one evidence per pet expected";
        return "";
      }
      if (q.evidence.size() != 2) return "multi-hop needs two evidence utterances";
      const int64_t first = q.evidence[0], second = q.evidence[1];
      if (!mentions(u[second].text, q.answer)) return "second evidence lacks the answer";
      const Fact* answer_fact = fact_with_value(c, second, q.answer);
      if (!answer_fact) return "no fact at the second evidence gives the answer";
      if (answer_fact->subject != "user") {
        // relation -> name -> attribute: the first utterance names the person the second is about.
        for (const Fact* intro : facts_at(c, first))
          if (intro->attribute == "name" && intro->value == answer_fact->subject &&
              mentions(u[first].text, intro->subject))
            return "";
        return "the two evidence utterances are not linked by a name";
      }
      // The user's city or job in effect on the day of the event/adoption told at `first`.
      const int64_t day = told_day(u[first]).day_number();
      const Fact* best = nullptr;
      int64_t best_start = INT64_MIN;
      for (const Fact& f : c.facts) {
        if (f.subject != "user" || f.attribute != answer_fact->attribute) continue;
        const int64_t start = f.dated ? told_day(u[f.utterance]).day_number() : INT64_MIN;
        if (start == day) return "a change falls on the asked day";
        if (start < day && (!best || start >= best_start)) best = &f, best_start = start;
      }
      return best == answer_fact ? "" : "the value in effect that day is another one";
    }
    case QuestionType::kTemporal: {
      if (q.evidence.size() == 1) {
        const CalendarDate d = told_day(u[q.evidence[0]]);
        if (d.text() != q.answer) return "date told by the evidence is " + d.text();
        for (const Fact* f : facts_at(c, q.evidence[0]))
          if (f->dated && f->date == d.iso()) return "";
        return "no dated fact with that day at the evidence";
      }
      if (q.evidence.size() != 2) return "temporal pair needs two evidence utterances";
      const CalendarDate a = told_day(u[q.evidence[0]]), b = told_day(u[q.evidence[1]]);
      if (is_number(q.answer))
        return std::to_string(std::abs(days_between(a, b))) == q.answer ? "" : "day count differs";
      const int64_t earlier = days_between(a, b) > 0 ? q.evidence[0] : q.evidence[1];
      if (a == b) return "the two events share a day";
      if (!mentions(u[earlier].text, q.answer)) return "answer is not the earlier event";
      return "";
    }
    case QuestionType::kKnowledgeUpdate: {
      if (q.evidence.size() != 1) return "knowledge-update needs one evidence utterance";
      const int64_t e = q.evidence[0];
      if (!mentions(u[e].text, q.answer)) return "evidence does not contain the answer";
      const Fact* f = fact_with_value(c, e, q.answer);
      if (!f) return "no fact at the evidence gives the answer";
      int64_t values = 0;
      for (const Fact& g : c.facts) {
        if (g.subject != f->subject || g.attribute != f->attribute) continue;
        ++values;
        if (g.utterance > e) return "a later utterance changes the value again";
      }
      return values >= 2 ? "" : "the value never changed";
    }
    case QuestionType::kUnanswerable: {
      if (q.answer != kUnknownAnswer || !q.evidence.empty()) return "unanswerable gold/evidence";
      const std::string subject = unanswerable_subject(q.question);
      if (subject.empty()) return "unrecognised unanswerable question";
      for (const Utterance& x : u)
        if (mentions(x.text, subject)) return "'" + subject + "' is mentioned: " + x.text;
      return "";
    }
  }
  return "unknown type";
}

}  // namespace

class TestConversationGenerator : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void sameSeedGivesIdenticalConversation() {
    for (uint64_t seed : {0ull, 7ull, 1000003ull}) {
      const Conversation a = make(seed), b = make(seed);
      QVERIFY(a.utterances == b.utterances);
      QVERIFY(a.facts == b.facts);
      QVERIFY(a.questions == b.questions);
    }
    QVERIFY(make(1).utterances != make(2).utterances);
  }

  void lengthsLandInTheRequestedRange() {
    for (uint64_t seed = 0; seed < 40; ++seed) {
      const int64_t n = conversation_tokens(make(seed));
      QVERIFY2(n >= 2000 && n <= 4000, qPrintable(QString("seed %1: %2 tokens").arg(seed).arg(n)));
    }
    for (uint64_t seed = 0; seed < 10; ++seed) {
      const int64_t n = conversation_tokens(make(seed, 3000, 3100));
      QVERIFY2(n >= 3000 && n <= 3100, qPrintable(QString("seed %1: %2 tokens").arg(seed).arg(n)));
    }
    for (uint64_t seed = 0; seed < 3; ++seed) {
      const int64_t n = conversation_tokens(make(seed, 20000, 24000));
      QVERIFY2(n >= 20000 && n <= 24000, qPrintable(QString("seed %1: %2").arg(seed).arg(n)));
    }
  }

  void sessionsMoveForwardInTime() {
    const Conversation c = make(11, 20000, 24000);
    QVERIFY(c.utterances.back().session >= 40);
    for (size_t i = 1; i < c.utterances.size(); ++i) {
      const auto& a = c.utterances[i - 1];
      const auto& b = c.utterances[i];
      QVERIFY(b.session == a.session || b.session == a.session + 1);
      QVERIFY(days_between(CalendarDate::parse_iso(a.time), CalendarDate::parse_iso(b.time)) == 0 ||
              b.session == a.session + 1);
      QVERIFY(b.time >= a.time);
      QCOMPARE(b.speaker, std::string(i % 2 ? kAssistantSpeaker : kUserSpeaker));
    }
  }

  void everyFactIsSaidByItsUtterance() {
    for (uint64_t seed = 0; seed < 20; ++seed) {
      const Conversation c = make(seed);
      QVERIFY(!c.facts.empty());
      for (const Fact& f : c.facts) {
        const Utterance& u = c.utterances.at(f.utterance);
        QCOMPARE(u.speaker, std::string(kUserSpeaker));
        QVERIFY2(mentions(u.text, f.value),
                 qPrintable(QString::fromStdString(f.value + " / " + u.text)));
        if (f.dated) QCOMPARE(f.date, told_day(u).iso());
      }
    }
  }

  void goldAnswersFollowFromFactsAndEvidence() {
    std::map<QuestionType, int> counts;
    auto check_all = [&](const Conversation& c) {
      for (const Question& q : c.questions) {
        const std::string why = check_question(c, q);
        QVERIFY2(why.empty(), qPrintable(QString("seed %1, %2 \"%3\" -> \"%4\": %5")
                                             .arg(c.seed)
                                             .arg(question_type_name(q.type))
                                             .arg(QString::fromStdString(q.question))
                                             .arg(QString::fromStdString(q.answer))
                                             .arg(QString::fromStdString(why))));
        ++counts[q.type];
      }
    };
    for (uint64_t seed = 0; seed < 60; ++seed)
      check_all(make(seed));
    for (uint64_t seed = 0; seed < 3; ++seed) {
      ConversationConfig config;
      config.seed = kHeldOutSeedBase + seed;
      config.min_tokens = 20000;
      config.max_tokens = 24000;
      config.questions_per_type = 40;
      check_all(generate_conversation(config));
    }
    for (QuestionType t : all_question_types())
      QVERIFY2(counts[t] >= 100, question_type_name(t));
  }

  void everyTypeIsAskedInShortConversations() {
    int complete = 0;
    for (uint64_t seed = 0; seed < 20; ++seed) {
      std::map<QuestionType, int> types;
      for (const Question& q : make(seed).questions)
        ++types[q.type];
      complete += types.size() == all_question_types().size();
    }
    QVERIFY2(complete >= 18, qPrintable(QString::number(complete)));
  }

  void knowledgeUpdateAnswerIsTheLatestValue() {
    ConversationConfig config;
    config.seed = 5;
    config.min_tokens = 20000;
    config.max_tokens = 24000;
    config.questions_per_type = 100;
    const Conversation c = generate_conversation(config);
    std::map<std::string, std::string> latest;
    for (const Fact& f : c.facts)
      if (f.subject == "user") latest[f.attribute] = f.value;
    int checked = 0;
    for (const Question& q : c.questions) {
      if (q.question == "Which city does the user live in now?") {
        QCOMPARE(q.answer, latest["home_city"]);
        ++checked;
      }
      if (q.question == "What is the user's job now?") {
        QCOMPARE(q.answer, latest["job"]);
        ++checked;
      }
    }
    QCOMPARE(checked, 2);
  }

  void invertedRangeIsAnError() {
    ConversationConfig config;
    config.min_tokens = 500;
    config.max_tokens = 400;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, generate_conversation(config));
  }

  void datesRoundTrip() {
    const CalendarDate d = CalendarDate::parse_iso("2024-02-29");
    QCOMPARE(d.plus_days(1).iso(), std::string("2024-03-01"));
    QCOMPARE(d.text(), std::string("February 29, 2024"));
    QCOMPARE(
        days_between(CalendarDate::parse_iso("2022-12-25"), CalendarDate::parse_iso("2023-01-08")),
        int64_t{14});
    QCOMPARE(CalendarDate::from_day_number(0).iso(), std::string("1970-01-01"));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, CalendarDate::parse_iso("2023-02-29"));
    QVERIFY(mentions("I love my cat.", "cat"));
    QVERIFY(!mentions("Our vacation was long.", "cat"));
    QVERIFY(mentions("The blood type is O.", "Blood Type"));
  }
};

QTEST_GUILESS_MAIN(TestConversationGenerator)
#include "test_conversation_generator.moc"
