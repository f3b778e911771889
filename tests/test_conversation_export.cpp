// Conversation export and import (issue 19) through real profiles: JSON round-trips every field
// the store holds into a fresh profile (only the ids differ), a second import keeps both copies
// under new names, Markdown reads as a transcript, and a malformed file (truncated anywhere,
// wrong types, missing fields, another version, a bad role) gets an error naming the place and
// imports nothing, even when the conversations before the bad one were fine. No torch.
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "storage/conversation_export.h"
#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "storage/store_error.h"

using namespace engram::storage;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

Utterance message(const std::string& role, const std::string& text, std::int64_t time_ms,
                  std::int64_t token_begin, std::int64_t token_end) {
  Utterance u;
  u.role = role;
  u.text = text;
  u.time_ms = time_ms;
  u.token_begin = token_begin;
  u.token_end = token_end;
  return u;
}

// Two conversations with every field set: a policy and budget, a fingerprint, a system prompt,
// text that JSON must escape, non-ASCII text.
void fill(Database& db) {
  ConversationRepository conversations(db);
  Conversation trip;
  trip.name = "Trip to \"Lisbon\"";
  trip.created_ms = 1'700'000'000'000;
  trip.updated_ms = 1'700'000'300'000;
  trip.model_fingerprint = "9f86d081884c7d65";
  trip.memory_policy = "snapkv:window=32";
  trip.kv_budget = 256;
  const std::int64_t a = conversations.insert(trip).id;
  conversations.append(a, message("system", "Be brief.", 1'700'000'000'000, 0, 7));
  conversations.append(
      a, message("user", "Where do I stay?\nNear the river\tplease.", 1'700'000'100'000, 7, 21));
  conversations.append(a, message("assistant", "Alfama — quiet, by the Tejo. \\o/ ünïcødé 日本",
                                  1'700'000'200'000, 21, 40));
  Conversation notes;
  notes.name = "Notes";
  notes.created_ms = 1'700'000'500'000;
  notes.updated_ms = 1'700'000'600'000;
  const std::int64_t b = conversations.insert(notes).id;
  conversations.append(b, message("user", "", 1'700'000'550'000, 0, 3));
}

// The document without the exporting profile's ids: what must survive a round trip.
json without_ids(const std::string& text) {
  json document = json::parse(text);
  for (json& c : document.at("conversations"))
    c.erase("id");
  return document;
}

std::int64_t conversation_count(Database& db) {
  return static_cast<std::int64_t>(ConversationRepository(db).list().size());
}

std::string valid_file() {
  return R"({"format": "engram-conversations", "version": 1, "conversations": [
  {"title": "Fine", "created_ms": 1, "updated_ms": 2, "messages": [
    {"role": "user", "text": "hi", "time_ms": 1}]},
  {"id": 7, "title": "Second", "created_ms": 3, "updated_ms": 4, "model_fingerprint": "ab",
   "memory_policy": "streaming", "kv_budget": 64, "messages": [
    {"role": "user", "text": "hello", "time_ms": 3, "token_begin": 0, "token_end": 5},
    {"role": "assistant", "text": "hi there", "time_ms": 4, "token_begin": 5, "token_end": 9}]}]})";
}

}  // namespace

class TestConversationExport : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  int profiles_ = 0;

  fs::path fresh_profile() {
    return fs::path(dir_.path().toStdString()) / std::to_string(++profiles_);
  }
  fs::path file(const std::string& name) const {
    return fs::path(dir_.path().toStdString()) / name;
  }

  // Imports `text` into a profile holding one conversation; the error must name `where` and say
  // `problem`, and the profile must still hold just that conversation.
  void expect_refused(const std::string& text, const std::string& where,
                      const std::string& problem) {
    Database db(fresh_profile());
    ConversationRepository(db).create("Already here");
    try {
      import_transcripts(db, conversations_from_json(text, "chats.json"));
      QFAIL(qPrintable(QString::fromStdString("imported: " + text.substr(0, 200))));
    } catch (const ConversationFileError& e) {
      const std::string what = e.what();
      QVERIFY2(e.where() == where, qPrintable(QString::fromStdString(what)));
      QVERIFY2(what.find(problem) != std::string::npos, qPrintable(QString::fromStdString(what)));
      QVERIFY2(what.rfind("chats.json", 0) == 0, qPrintable(QString::fromStdString(what)));
    }
    QCOMPARE(conversation_count(db), 1);
  }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  void jsonRoundTripsIntoAFreshProfile() {
    std::string first;
    {
      Database db(fresh_profile());
      fill(db);
      first = conversations_to_json(read_all_transcripts(db));
      export_conversation_file(read_all_transcripts(db), ConversationFileFormat::kJson,
                               file("all.json"));
    }
    QVERIFY2(first.rfind("{\n  \"format\": \"engram-conversations\",\n  \"version\": 1,\n", 0) == 0,
             first.substr(0, 80).c_str());
    const json document = json::parse(first);
    QCOMPARE(document.at("format"), "engram-conversations");
    QCOMPARE(document.at("version"), 1);
    QCOMPARE(document.at("conversations").size(), 2u);
    const json& trip = document.at("conversations").at(0);  // oldest first
    QCOMPARE(trip.at("title"), "Trip to \"Lisbon\"");
    QCOMPARE(trip.at("memory_policy"), "snapkv:window=32");
    QCOMPARE(trip.at("kv_budget"), 256);
    QCOMPARE(trip.at("model_fingerprint"), "9f86d081884c7d65");
    QCOMPARE(trip.at("created_ms"), 1'700'000'000'000);
    QCOMPARE(trip.at("messages").size(), 3u);
    QCOMPARE(trip.at("messages").at(2).at("text"),
             "Alfama — quiet, by the Tejo. \\o/ ünïcødé 日本");
    QCOMPARE(trip.at("messages").at(1).at("token_end"), 21);

    Database fresh(fresh_profile());
    const std::vector<Conversation> imported = import_conversation_file(fresh, file("all.json"));
    QCOMPARE(imported.size(), 2u);
    QCOMPARE(imported[0].name, "Trip to \"Lisbon\"");
    QCOMPARE(imported[0].updated_ms, 1'700'000'300'000);
    QCOMPARE(ConversationRepository(fresh).utterance_count(imported[0].id), 3);
    const std::string second = conversations_to_json(read_all_transcripts(fresh));
    QCOMPARE(without_ids(second).dump(1), without_ids(first).dump(1));
  }

  void exportsTheChosenConversationsInTheirOrder() {
    Database db(fresh_profile());
    fill(db);
    const std::vector<Conversation> rows = ConversationRepository(db).list();  // newest first
    const auto chosen = read_transcripts(db, {rows[0].id});
    QCOMPARE(chosen.size(), 1u);
    QCOMPARE(chosen[0].conversation.name, "Notes");
    QVERIFY_THROWS_EXCEPTION(NotFound, read_transcripts(db, {rows[0].id, 999}));
  }

  void importingTwiceKeepsBothCopies() {
    Database db(fresh_profile());
    const auto parsed = conversations_from_json(valid_file(), "chats.json");
    const auto first = import_transcripts(db, parsed);
    const auto second = import_transcripts(db, parsed);
    const auto third = import_transcripts(db, parsed);
    QCOMPARE(conversation_count(db), 6);
    QCOMPARE(first[1].name, "Second");
    QCOMPARE(second[1].name, "Second (imported)");
    QCOMPARE(third[1].name, "Second (imported 2)");
    QVERIFY(second[1].id != first[1].id);
    QCOMPARE(second[1].memory_policy, "streaming");
    QCOMPARE(second[1].kv_budget, 64);
    const auto messages = ConversationRepository(db).utterances(third[1].id);
    QCOMPARE(messages.size(), 2u);
    QCOMPARE(messages[1].text, "hi there");
    QCOMPARE(messages[1].index, 1);
    QCOMPARE(messages[1].token_begin, 5);
  }

  void titlesRepeatedInOneFileGetDistinctNames() {
    Database db(fresh_profile());
    json document = json::parse(valid_file());
    document["conversations"][1]["title"] = "Fine";
    const auto imported = import_transcripts(db, conversations_from_json(document.dump(), "f"));
    QCOMPARE(imported[0].name, "Fine");
    QCOMPARE(imported[1].name, "Fine (imported)");
  }

  void markdownReadsAsATranscript() {
    Database db(fresh_profile());
    fill(db);
    const std::string md = conversations_to_markdown(read_all_transcripts(db));
    QVERIFY(md.rfind("# Trip to \"Lisbon\"\n\nStarted 2023-11-14 22:13 UTC", 0) == 0);
    QVERIFY(md.find("3 messages") != std::string::npos);
    QVERIFY(md.find("**System** (2023-11-14 22:13 UTC)\n\nBe brief.\n") != std::string::npos);
    QVERIFY(md.find("**You** (2023-11-14 22:15 UTC)\n\nWhere do I stay?\nNear the river") !=
            std::string::npos);
    QVERIFY(md.find("**Engram** (2023-11-14 22:16 UTC)\n\nAlfama") != std::string::npos);
    QVERIFY(md.find("\n---\n\n# Notes\n") != std::string::npos);
    QVERIFY(md.find("1 message.") != std::string::npos);
  }

  void truncatedFilesImportNothing() {
    Database db(fresh_profile());
    {
      Database source(fresh_profile());
      fill(source);
      export_conversation_file(read_all_transcripts(source), ConversationFileFormat::kJson,
                               file("cut.json"));
    }
    std::ifstream in(file("cut.json"), std::ios::binary);
    const std::string whole((std::istreambuf_iterator<char>(in)), {});
    // Every cut point of the file (the whole file minus its trailing newline and closing brace
    // included): a prefix is never a valid document.
    for (std::size_t cut = 0; cut + 2 < whole.size(); ++cut) {
      try {
        import_transcripts(db,
                           conversations_from_json(std::string_view(whole).substr(0, cut), "x"));
        QFAIL(qPrintable(QStringLiteral("a prefix of %1 bytes imported").arg(cut)));
      } catch (const ConversationFileError& e) {
        QVERIFY2(std::string(e.what()).find("not valid JSON") != std::string::npos, e.what());
      }
    }
    QCOMPARE(conversation_count(db), 0);
    {
      std::ofstream out(file("half.json"), std::ios::binary);
      out << whole.substr(0, whole.size() / 2);
    }
    try {
      import_conversation_file(db, file("half.json"));
      QFAIL("a half file imported");
    } catch (const ConversationFileError& e) {
      QVERIFY2(std::string(e.what()).find("half.json: not valid JSON: parse error at line") !=
                   std::string::npos,
               e.what());
    }
    QVERIFY_THROWS_EXCEPTION(ConversationFileError,
                             import_conversation_file(db, file("no-such-file.json")));
    QVERIFY_THROWS_EXCEPTION(ConversationFileError,
                             import_conversation_file(db, dir_.path().toStdString()));
    QCOMPARE(conversation_count(db), 0);
  }

  void wrongDocumentsNameWhatAndWhere() {
    expect_refused("[]", "", "expected a JSON object");
    expect_refused(R"({"version": 1, "conversations": []})", "", "missing field \"format\"");
    expect_refused(R"({"format": "chatgpt", "version": 1, "conversations": []})", "/format",
                   "not an Engram conversation file");
    expect_refused(R"({"format": "engram-conversations", "version": 2, "conversations": []})",
                   "/version", "version 2 is not supported (this Engram reads version 1)");
    expect_refused(R"({"format": "engram-conversations", "version": "1", "conversations": []})",
                   "/version", "expected an integer, found a string");
    expect_refused(R"({"format": "engram-conversations", "version": 1})", "",
                   "missing field \"conversations\"");
    expect_refused(R"({"format": "engram-conversations", "version": 1, "conversations": {}})",
                   "/conversations", "expected an array, found an object");
  }

  // The second conversation is the bad one: the first, valid, must not be imported either.
  void wrongFieldsNameWhatAndWhere() {
    const json good = json::parse(valid_file());
    struct Case {
      std::function<void(json&)> damage;
      std::string where;
      std::string problem;
    };
    const Case cases[] = {
        {[](json& c) { c.erase("title"); }, "/conversations/1", "missing field \"title\""},
        {[](json& c) { c["title"] = ""; }, "/conversations/1/title", "needs a title"},
        {[](json& c) { c["title"] = 5; }, "/conversations/1/title",
         "expected a string, found an integer"},
        {[](json& c) { c["created_ms"] = "yesterday"; }, "/conversations/1/created_ms",
         "expected an integer, found a string"},
        {[](json& c) { c["updated_ms"] = 1.5; }, "/conversations/1/updated_ms",
         "expected an integer, found a fractional number"},
        {[](json& c) { c["updated_ms"] = -4; }, "/conversations/1/updated_ms",
         "expected a non-negative integer, found -4"},
        {[](json& c) { c["kv_budget"] = 18446744073709551615ULL; }, "/conversations/1/kv_budget",
         "integer too large"},
        {[](json& c) { c["kv_budget"] = nullptr; }, "/conversations/1/kv_budget",
         "expected an integer, found null"},
        {[](json& c) { c["memory_policy"] = json::array(); }, "/conversations/1/memory_policy",
         "expected a string, found an array"},
        {[](json& c) { c["id"] = "seven"; }, "/conversations/1/id", "expected an integer"},
        {[](json& c) { c.erase("messages"); }, "/conversations/1", "missing field \"messages\""},
        {[](json& c) { c["messages"][1] = "hi"; }, "/conversations/1/messages/1",
         "expected an object, found a string"},
        {[](json& c) { c["messages"][1].erase("text"); }, "/conversations/1/messages/1",
         "missing field \"text\""},
        {[](json& c) { c["messages"][1]["text"] = true; }, "/conversations/1/messages/1/text",
         "expected a string, found a boolean"},
        {[](json& c) { c["messages"][1]["role"] = "tool"; }, "/conversations/1/messages/1/role",
         "role \"tool\" is not one of system, user, assistant"},
        {[](json& c) { c["messages"][1].erase("time_ms"); }, "/conversations/1/messages/1",
         "missing field \"time_ms\""},
        {[](json& c) { c["messages"][1]["token_begin"] = 10; }, "/conversations/1/messages/1",
         "token_begin 10 is after token_end 9"},
    };
    for (const Case& c : cases) {
      json damaged = good;
      c.damage(damaged["conversations"][1]);
      expect_refused(damaged.dump(), c.where, c.problem);
    }
    json not_object = good;
    not_object["conversations"][1] = 3;
    expect_refused(not_object.dump(), "/conversations/1", "expected an object, found an integer");
  }

  void deepNestingAndBadUtf8AreRefused() {
    const std::size_t depth = 200000;
    expect_refused(R"({"format": "engram-conversations", "version": 1, "conversations": )" +
                       std::string(depth, '[') + std::string(depth, ']') + "}",
                   "/conversations/0", "expected an object, found an array");
    expect_refused(std::string(depth, '['), "", "not valid JSON");
    expect_refused(R"({"format": "engram-conversations", "version": 1, "conversations": [
      {"title": "a)" + std::string(1, '\xff') +
                       R"(", "created_ms": 1, "updated_ms": 1, "messages": []}]})",
                   "", "ill-formed UTF-8");
    // Bytes in the store that are not UTF-8 export as U+FFFD instead of failing the export.
    Database db(fresh_profile());
    ConversationRepository conversations(db);
    const std::int64_t id = conversations.create("bytes").id;
    conversations.append(id, message("user", "ok \xff end", 1, 0, 0));
    const json document = json::parse(conversations_to_json(read_all_transcripts(db)));
    QCOMPARE(document["conversations"][0]["messages"][0]["text"], "ok \xEF\xBF\xBD end");
  }

  void hugeTextsRoundTrip() {
    // 24 MiB in one message and 2,000 messages in one conversation.
    const std::string huge(24u << 20, 'x');
    json document = json::parse(valid_file());
    document["conversations"][0]["messages"][0]["text"] = huge + "\"end\"";
    json& many = document["conversations"][1]["messages"];
    for (int i = 0; i < 2000; ++i)
      many.push_back(
          {{"role", i % 2 ? "assistant" : "user"}, {"text", std::to_string(i)}, {"time_ms", 5}});
    Database db(fresh_profile());
    const auto imported = import_transcripts(db, conversations_from_json(document.dump(), "big"));
    ConversationRepository conversations(db);
    QCOMPARE(conversations.utterances(imported[0].id)[0].text.size(), huge.size() + 5);
    QCOMPARE(conversations.utterance_count(imported[1].id), 2002);
    const json again = json::parse(conversations_to_json(read_transcripts(db, {imported[0].id})));
    QCOMPARE(again["conversations"][0]["messages"][0]["text"].get<std::string>(), huge + "\"end\"");
  }
};

QTEST_GUILESS_MAIN(TestConversationExport)
#include "test_conversation_export.moc"
