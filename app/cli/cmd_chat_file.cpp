// engram-cli export chat and import chat (issue 19): a profile's conversations to a JSON or
// Markdown file (storage/conversation_export.h) and a JSON file back as new conversations.
// Export reads through a read-only connection, so it works while the app has the profile open;
// import writes, so it needs the profile free.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "app/cli/cli_args.h"
#include "app/cli/commands.h"
#include "storage/conversation_export.h"
#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "storage/profile_paths.h"

namespace engram::cli {
namespace {

std::filesystem::path profile_dir(const Args& args) {
  return args.has("profile") ? std::filesystem::path(args.str("profile", ""))
                             : storage::default_profile_dir();
}

// A number is a conversation id; anything else a name, as chat --conversation takes it.
int64_t conversation_id(storage::Database& db, const std::string& value) {
  storage::ConversationRepository conversations(db);
  if (!value.empty() && value.find_first_not_of("0123456789") == std::string::npos) {
    const int64_t id = std::stoll(value);
    if (conversations.find(id)) return id;
  }
  if (const auto row = conversations.find_by_name(value)) return row->id;
  throw UsageError("no conversation with id or name '" + value + "' in " + db.paths().dir.string());
}

int64_t message_count(const std::vector<storage::ConversationTranscript>& transcripts) {
  int64_t n = 0;
  for (const auto& t : transcripts)
    n += static_cast<int64_t>(t.utterances.size());
  return n;
}

}  // namespace

int run_export_chat(int argc, char** argv) {
  const Args args(argc, argv, 3, {"profile", "conversation", "format", "out"}, {"all"});
  if (args.has("all") == args.has("conversation"))
    throw UsageError("give one of --conversation ID and --all");
  const std::string format = args.required("format");
  if (format != "json" && format != "markdown")
    throw UsageError("--format must be json or markdown, not '" + format + "'");
  const std::string out = args.required("out");
  if (!args.positional().empty())
    throw UsageError("unexpected argument '" + args.positional().front() + "'");

  storage::Database db(profile_dir(args), storage::Access::kReadOnly);
  const std::vector<storage::ConversationTranscript> transcripts =
      args.has("all")
          ? storage::read_all_transcripts(db)
          : storage::read_transcripts(db, {conversation_id(db, args.str("conversation", ""))});
  const storage::ConversationFileFormat file_format =
      format == "json" ? storage::ConversationFileFormat::kJson
                       : storage::ConversationFileFormat::kMarkdown;
  if (out == "-") {
    const std::string text = file_format == storage::ConversationFileFormat::kJson
                                 ? storage::conversations_to_json(transcripts)
                                 : storage::conversations_to_markdown(transcripts);
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    const int64_t bytes = storage::export_conversation_file(transcripts, file_format, out);
    std::printf("wrote %zu conversation%s (%lld messages, %lld bytes, %s) to %s\n",
                transcripts.size(), transcripts.size() == 1 ? "" : "s",
                static_cast<long long>(message_count(transcripts)), static_cast<long long>(bytes),
                format.c_str(), out.c_str());
  }
  return 0;
}

int run_import_chat(int argc, char** argv) {
  const Args args(argc, argv, 3, {"profile"}, {});
  const std::vector<std::string> files = args.positional();
  if (files.size() != 1) throw UsageError("give one JSON file to import");
  storage::Database db(profile_dir(args));
  const std::vector<storage::Conversation> imported =
      storage::import_conversation_file(db, files.front());
  storage::ConversationRepository conversations(db);
  std::printf("imported %zu conversation%s from %s into %s\n", imported.size(),
              imported.size() == 1 ? "" : "s", files.front().c_str(),
              db.paths().dir.string().c_str());
  for (const storage::Conversation& c : imported) {
    std::printf("  %lld  %s  (%lld messages)\n", static_cast<long long>(c.id), c.name.c_str(),
                static_cast<long long>(conversations.utterance_count(c.id)));
  }
  return 0;
}

}  // namespace engram::cli
