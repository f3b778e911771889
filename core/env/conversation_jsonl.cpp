#include "core/env/conversation_jsonl.h"

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace engram::env {
namespace {

using nlohmann::json;

// Calls `parse` on every non-empty line; a parse or type error names the source and line.
void for_each_line(std::istream& in, const std::string& name,
                   const std::function<void(const json&)>& parse) {
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      parse(json::parse(line));
    } catch (const std::exception& e) {
      throw std::runtime_error(name + ":" + std::to_string(number) + ": " + e.what());
    }
  }
}

std::filesystem::path with_suffix(const std::filesystem::path& stem, const char* suffix) {
  return stem.string() + suffix;
}

std::ofstream open_out(const std::filesystem::path& path) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path);
  if (!out) throw std::runtime_error(path.string() + ": cannot open for writing");
  return out;
}

std::ifstream open_in(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path.string() + ": cannot open");
  return in;
}

}  // namespace

void write_utterances_jsonl(std::ostream& out, const std::vector<Utterance>& utterances) {
  for (const Utterance& u : utterances)
    out << json{{"speaker", u.speaker}, {"text", u.text}, {"session", u.session}, {"time", u.time}}
               .dump()
        << '\n';
}

void write_questions_jsonl(std::ostream& out, const std::vector<Question>& questions) {
  for (const Question& q : questions)
    out << json{{"question", q.question},
                {"answer", q.answer},
                {"type", question_type_name(q.type)},
                {"evidence", q.evidence}}
               .dump()
        << '\n';
}

void write_facts_jsonl(std::ostream& out, const std::vector<Fact>& facts) {
  for (const Fact& f : facts)
    out << json{{"subject", f.subject}, {"attribute", f.attribute}, {"value", f.value},
                {"date", f.date},       {"dated", f.dated},         {"utterance", f.utterance}}
               .dump()
        << '\n';
}

std::vector<Utterance> read_utterances_jsonl(std::istream& in, const std::string& name) {
  std::vector<Utterance> out;
  for_each_line(in, name, [&](const json& j) {
    out.push_back({j.at("speaker").get<std::string>(), j.at("text").get<std::string>(),
                   j.at("session").get<int32_t>(), j.at("time").get<std::string>()});
  });
  return out;
}

std::vector<Question> read_questions_jsonl(std::istream& in, const std::string& name) {
  std::vector<Question> out;
  for_each_line(in, name, [&](const json& j) {
    out.push_back({j.at("question").get<std::string>(), j.at("answer").get<std::string>(),
                   parse_question_type(j.at("type").get<std::string>()),
                   j.at("evidence").get<std::vector<int64_t>>()});
  });
  return out;
}

std::vector<Fact> read_facts_jsonl(std::istream& in, const std::string& name) {
  std::vector<Fact> out;
  for_each_line(in, name, [&](const json& j) {
    out.push_back({j.at("subject").get<std::string>(), j.at("attribute").get<std::string>(),
                   j.at("value").get<std::string>(), j.at("date").get<std::string>(),
                   j.at("dated").get<bool>(), j.at("utterance").get<int64_t>()});
  });
  return out;
}

void save_conversation(const std::filesystem::path& stem, const Conversation& c) {
  std::ofstream u = open_out(with_suffix(stem, ".utterances.jsonl"));
  write_utterances_jsonl(u, c.utterances);
  std::ofstream q = open_out(with_suffix(stem, ".questions.jsonl"));
  write_questions_jsonl(q, c.questions);
  std::ofstream f = open_out(with_suffix(stem, ".facts.jsonl"));
  write_facts_jsonl(f, c.facts);
  for (std::ofstream* s : {&u, &q, &f}) {
    s->flush();
    if (!*s) throw std::runtime_error(stem.string() + ".*.jsonl: write failed");
  }
}

Conversation load_conversation(const std::filesystem::path& stem) {
  Conversation c;
  const auto up = with_suffix(stem, ".utterances.jsonl");
  const auto qp = with_suffix(stem, ".questions.jsonl");
  const auto fp = with_suffix(stem, ".facts.jsonl");
  std::ifstream u = open_in(up);
  c.utterances = read_utterances_jsonl(u, up.string());
  std::ifstream q = open_in(qp);
  c.questions = read_questions_jsonl(q, qp.string());
  if (std::filesystem::exists(fp)) {
    std::ifstream f = open_in(fp);
    c.facts = read_facts_jsonl(f, fp.string());
  }
  for (const Question& question : c.questions)
    for (int64_t e : question.evidence)
      if (e < 0 || e >= static_cast<int64_t>(c.utterances.size()))
        throw std::runtime_error(qp.string() + ": evidence index " + std::to_string(e) +
                                 " outside the " + std::to_string(c.utterances.size()) +
                                 " utterances");
  return c;
}

}  // namespace engram::env
