// Conversations out of a profile and back in (issue 19). Two formats:
//   JSON      lossless and re-importable: {"format": "engram-conversations", "version": 1,
//             "conversations": [...]}, each conversation with its title, times, model
//             fingerprint, memory policy, KV budget and messages (role, text, time, token span);
//             docs/storage.md describes every field. KV caches are not exported: an imported
//             conversation has none, so the engine rebuilds it from the text when it is opened.
//   Markdown  a readable transcript (title, dates, "**You**" / "**Engram**" turns); export only.
// An import reads and checks the whole file before it writes anything, then stores every
// conversation under a new id in one transaction: a file with one bad field imports nothing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "storage/records.h"

namespace engram::storage {

class Database;

inline constexpr const char* kConversationFileFormat = "engram-conversations";
inline constexpr int kConversationFileVersion = 1;

enum class ConversationFileFormat { kJson, kMarkdown };

// One conversation as it leaves or enters a profile: its row and its utterances, in order.
struct ConversationTranscript {
  Conversation conversation;
  std::vector<Utterance> utterances;
};

// A conversation file that cannot be imported. `where` is a JSON pointer into the file
// ("/conversations/1/messages/4/role"; empty for the file as a whole).
class ConversationFileError : public std::runtime_error {
 public:
  ConversationFileError(std::string file, std::string where, std::string problem);
  const std::string& file() const { return file_; }
  const std::string& where() const { return where_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string file_;
  std::string where_;
  std::string problem_;
};

// The conversations `ids` in that order (NotFound for an id the profile lacks), or all of them,
// oldest first (by creation, then id, so that an imported copy lists in the same order).
std::vector<ConversationTranscript> read_transcripts(Database& db,
                                                     const std::vector<std::int64_t>& ids);
std::vector<ConversationTranscript> read_all_transcripts(Database& db);

std::string conversations_to_json(const std::vector<ConversationTranscript>& transcripts);
std::string conversations_to_markdown(const std::vector<ConversationTranscript>& transcripts);
// Parses and checks a whole JSON document; `file` names it in errors. Throws
// ConversationFileError (malformed JSON, another format or version, a missing field, a wrong
// type, a value out of range).
std::vector<ConversationTranscript> conversations_from_json(std::string_view text,
                                                            const std::string& file);

// Stores `transcripts` as new conversations in one transaction, in order (new ids; a title
// already in use, or used twice in the file, becomes "Title (imported)", "Title (imported 2)",
// ...). Returns the new rows. Throws StoreError (e.g. StorageFull) with nothing stored.
std::vector<Conversation> import_transcripts(
    Database& db, const std::vector<ConversationTranscript>& transcripts);

// Writes the conversations to `file` (complete or absent after a crash: a temporary file renamed
// over it). Returns the bytes written.
std::int64_t export_conversation_file(const std::vector<ConversationTranscript>& transcripts,
                                      ConversationFileFormat format,
                                      const std::filesystem::path& file);
// Reads, checks and imports a JSON conversation file: ConversationFileError when it cannot be
// read or is not a valid file, StoreError when the store refuses; nothing is imported then.
std::vector<Conversation> import_conversation_file(Database& db, const std::filesystem::path& file);

}  // namespace engram::storage
