#include "storage/conversation_export.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "storage/durable_file.h"

namespace engram::storage {

namespace {

using nlohmann::json;

// Roles the chat templates render (core/tokenizer/chat_template.cpp refuses any other): a
// conversation imported with another role could not be continued.
constexpr const char* kRoles[] = {"system", "user", "assistant"};

std::string describe_where(const std::string& file, const std::string& where) {
  return where.empty() ? file : file + " at " + where;
}

std::string article_type(const json& value) {
  switch (value.type()) {
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::null:
      return "null";
    case json::value_t::number_float:
      return "a fractional number";
    default:
      return "an integer";
  }
}

// Reads a parsed document field by field; every error names the JSON pointer of the value.
class DocumentReader {
 public:
  explicit DocumentReader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& where, const std::string& problem) const {
    throw ConversationFileError(file_, where, problem);
  }

  const json& field(const json& object, const std::string& where, const char* name) const {
    const auto it = object.find(name);
    if (it == object.end()) fail(where, std::string("missing field \"") + name + "\"");
    return *it;
  }

  void expect(const json& value, const std::string& where, bool ok, const char* expected) const {
    if (!ok) fail(where, std::string("expected ") + expected + ", found " + article_type(value));
  }

  const json& object(const json& value, const std::string& where) const {
    expect(value, where, value.is_object(), "an object");
    return value;
  }

  const json& array(const json& object, const std::string& where, const char* name) const {
    const json& value = field(object, where, name);
    expect(value, where + "/" + name, value.is_array(), "an array");
    return value;
  }

  std::string text(const json& value, const std::string& where) const {
    expect(value, where, value.is_string(), "a string");
    return value.get<std::string>();
  }

  std::string text(const json& object, const std::string& where, const char* name) const {
    return text(field(object, where, name), where + "/" + name);
  }

  std::string optional_text(const json& object, const std::string& where, const char* name) const {
    return object.contains(name) ? text(object, where, name) : std::string();
  }

  // A non-negative integer that fits int64 (times, budgets, token positions).
  std::int64_t count(const json& value, const std::string& where) const {
    expect(value, where, value.is_number_integer(), "an integer");
    if (value.is_number_unsigned()) {
      if (value.get<std::uint64_t>() >
          static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        fail(where, "integer too large");
      }
      return static_cast<std::int64_t>(value.get<std::uint64_t>());
    }
    const std::int64_t v = value.get<std::int64_t>();
    if (v < 0) fail(where, "expected a non-negative integer, found " + std::to_string(v));
    return v;
  }

  std::int64_t count(const json& object, const std::string& where, const char* name) const {
    return count(field(object, where, name), where + "/" + name);
  }

  std::int64_t optional_count(const json& object, const std::string& where,
                              const char* name) const {
    return object.contains(name) ? count(object, where, name) : 0;
  }

 private:
  std::string file_;
};

Utterance read_message(const DocumentReader& r, const json& value, const std::string& where) {
  r.object(value, where);
  Utterance u;
  u.role = r.text(value, where, "role");
  if (std::none_of(std::begin(kRoles), std::end(kRoles),
                   [&](const char* role) { return u.role == role; })) {
    r.fail(where + "/role", "role \"" + u.role + "\" is not one of system, user, assistant");
  }
  u.text = r.text(value, where, "text");
  u.time_ms = r.count(value, where, "time_ms");
  u.token_begin = r.optional_count(value, where, "token_begin");
  u.token_end = r.optional_count(value, where, "token_end");
  if (u.token_begin > u.token_end)
    r.fail(where, "token_begin " + std::to_string(u.token_begin) + " is after token_end " +
                      std::to_string(u.token_end));
  return u;
}

ConversationTranscript read_conversation(const DocumentReader& r, const json& value,
                                         const std::string& where) {
  r.object(value, where);
  ConversationTranscript t;
  Conversation& c = t.conversation;
  if (value.contains("id")) r.count(value, where, "id");  // the exporting profile's; not kept
  c.name = r.text(value, where, "title");
  if (c.name.empty()) r.fail(where + "/title", "a conversation needs a title");
  c.created_ms = r.count(value, where, "created_ms");
  c.updated_ms = r.count(value, where, "updated_ms");
  c.model_fingerprint = r.optional_text(value, where, "model_fingerprint");
  c.memory_policy = r.optional_text(value, where, "memory_policy");
  c.kv_budget = r.optional_count(value, where, "kv_budget");
  const json& messages = r.array(value, where, "messages");
  t.utterances.reserve(messages.size());
  for (std::size_t i = 0; i < messages.size(); ++i) {
    t.utterances.push_back(read_message(r, messages[i], where + "/messages/" + std::to_string(i)));
    t.utterances.back().index = static_cast<std::int64_t>(i);
  }
  return t;
}

// "2026-11-24 12:53 UTC"
std::string utc_minute(std::int64_t unix_ms) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

const char* speaker(const std::string& role) {
  if (role == "user") return "You";
  if (role == "assistant") return "Engram";
  if (role == "system") return "System";
  return nullptr;
}

// The text of parse_error::what() without its "[json.exception.parse_error.101] " prefix.
std::string parse_problem(const json::parse_error& e) {
  std::string message = e.what();
  if (const auto end = message.find("] ");
      message.rfind("[json.exception", 0) == 0 && end != std::string::npos) {
    message.erase(0, end + 2);
  }
  return message;
}

std::string unused_name(ConversationRepository& conversations, const std::string& title) {
  if (!conversations.find_by_name(title)) return title;
  for (int n = 1;; ++n) {
    const std::string name =
        title + (n == 1 ? " (imported)" : " (imported " + std::to_string(n) + ")");
    if (!conversations.find_by_name(name)) return name;
  }
}

}  // namespace

ConversationFileError::ConversationFileError(std::string file, std::string where,
                                             std::string problem)
    : std::runtime_error(describe_where(file, where) + ": " + problem),
      file_(std::move(file)),
      where_(std::move(where)),
      problem_(std::move(problem)) {}

std::vector<ConversationTranscript> read_transcripts(Database& db,
                                                     const std::vector<std::int64_t>& ids) {
  ConversationRepository conversations(db);
  std::vector<ConversationTranscript> out;
  out.reserve(ids.size());
  for (std::int64_t id : ids)
    out.push_back({conversations.load(id), conversations.utterances(id)});
  return out;
}

std::vector<ConversationTranscript> read_all_transcripts(Database& db) {
  ConversationRepository conversations(db);
  std::vector<Conversation> rows = conversations.list();
  std::sort(rows.begin(), rows.end(), [](const Conversation& a, const Conversation& b) {
    return a.created_ms != b.created_ms ? a.created_ms < b.created_ms : a.id < b.id;
  });
  std::vector<ConversationTranscript> out;
  out.reserve(rows.size());
  for (Conversation& c : rows) {
    std::vector<Utterance> utterances = conversations.utterances(c.id);
    out.push_back({std::move(c), std::move(utterances)});
  }
  return out;
}

std::string conversations_to_json(const std::vector<ConversationTranscript>& transcripts) {
  // In the order written here (format and version first), not sorted by key.
  using ordered = nlohmann::ordered_json;
  ordered list = ordered::array();
  for (const ConversationTranscript& t : transcripts) {
    const Conversation& c = t.conversation;
    ordered messages = ordered::array();
    for (const Utterance& u : t.utterances) {
      messages.push_back({{"role", u.role},
                          {"text", u.text},
                          {"time_ms", u.time_ms},
                          {"token_begin", u.token_begin},
                          {"token_end", u.token_end}});
    }
    list.push_back({{"id", c.id},
                    {"title", c.name},
                    {"created_ms", c.created_ms},
                    {"updated_ms", c.updated_ms},
                    {"model_fingerprint", c.model_fingerprint},
                    {"memory_policy", c.memory_policy},
                    {"kv_budget", c.kv_budget},
                    {"messages", std::move(messages)}});
  }
  const ordered document = {{"format", kConversationFileFormat},
                            {"version", kConversationFileVersion},
                            {"conversations", std::move(list)}};
  // Text the store holds is UTF-8 from the tokenizer; should a byte sequence not be, it becomes
  // U+FFFD rather than failing the whole export.
  return document.dump(2, ' ', false, ordered::error_handler_t::replace) + "\n";
}

std::string conversations_to_markdown(const std::vector<ConversationTranscript>& transcripts) {
  std::ostringstream out;
  for (std::size_t i = 0; i < transcripts.size(); ++i) {
    const Conversation& c = transcripts[i].conversation;
    const std::vector<Utterance>& utterances = transcripts[i].utterances;
    if (i > 0) out << "\n---\n\n";
    out << "# " << c.name << "\n\n";
    out << "Started " << utc_minute(c.created_ms) << ", last updated " << utc_minute(c.updated_ms)
        << ", " << utterances.size() << (utterances.size() == 1 ? " message" : " messages")
        << ".\n";
    for (const Utterance& u : utterances) {
      const char* who = speaker(u.role);
      out << "\n**" << (who ? who : u.role.c_str()) << "** (" << utc_minute(u.time_ms) << ")\n\n";
      out << u.text << "\n";
    }
  }
  return out.str();
}

std::vector<ConversationTranscript> conversations_from_json(std::string_view text,
                                                            const std::string& file) {
  json document;
  try {
    document = json::parse(text);
  } catch (const json::parse_error& e) {
    throw ConversationFileError(file, {}, "not valid JSON: " + parse_problem(e));
  }
  const DocumentReader r(file);
  if (!document.is_object()) {
    r.fail({}, "expected a JSON object with \"format\": \"" + std::string(kConversationFileFormat) +
                   "\", found " + article_type(document));
  }
  const std::string format = r.text(document, "", "format");
  if (format != kConversationFileFormat) {
    r.fail("/format", "\"" + format + "\" is not an Engram conversation file (expected \"" +
                          kConversationFileFormat + "\")");
  }
  const json& version = r.field(document, "", "version");
  r.expect(version, "/version", version.is_number_integer(), "an integer");
  if (version != kConversationFileVersion) {
    r.fail("/version", "version " + version.dump() +
                           " is not supported (this Engram reads version " +
                           std::to_string(kConversationFileVersion) + ")");
  }
  const json& list = r.array(document, "", "conversations");
  std::vector<ConversationTranscript> out;
  out.reserve(list.size());
  for (std::size_t i = 0; i < list.size(); ++i)
    out.push_back(read_conversation(r, list[i], "/conversations/" + std::to_string(i)));
  return out;
}

std::vector<Conversation> import_transcripts(
    Database& db, const std::vector<ConversationTranscript>& transcripts) {
  ConversationRepository conversations(db);
  Transaction transaction(db, "conversation import");
  std::vector<Conversation> imported;
  imported.reserve(transcripts.size());
  for (const ConversationTranscript& t : transcripts) {
    Conversation row = t.conversation;
    row.name = unused_name(conversations, row.name);
    row = conversations.insert(row);
    for (Utterance u : t.utterances)
      conversations.append(row.id, std::move(u));
    // append() moves updated_ms up to the newest message; the file's value stays when later.
    imported.push_back(conversations.load(row.id));
  }
  transaction.commit();
  return imported;
}

std::int64_t export_conversation_file(const std::vector<ConversationTranscript>& transcripts,
                                      ConversationFileFormat format,
                                      const std::filesystem::path& file) {
  const std::string content = format == ConversationFileFormat::kJson
                                  ? conversations_to_json(transcripts)
                                  : conversations_to_markdown(transcripts);
  // Absolute: the directory of a bare file name is synced too.
  const std::filesystem::path target = std::filesystem::absolute(file);
  std::filesystem::path temp = target;
  temp += ".partial";
  write_file_durably(temp, target, std::as_bytes(std::span(content.data(), content.size())),
                     "conversation export to " + file.string());
  return static_cast<std::int64_t>(content.size());
}

std::vector<Conversation> import_conversation_file(Database& db,
                                                   const std::filesystem::path& file) {
  if (std::filesystem::is_directory(file))
    throw ConversationFileError(file.string(), {}, "is a directory, not a conversation file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConversationFileError(file.string(), {}, std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConversationFileError(file.string(), {}, "read failed");
  return import_transcripts(db, conversations_from_json(text.str(), file.string()));
}

}  // namespace engram::storage
