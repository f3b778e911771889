// engram-cli export chat / import chat (issue 19) as a person runs them: export all of a profile,
// import into a fresh profile, export again and get the same JSON but for the ids; one
// conversation by id or name, Markdown, stdout; a damaged file exits 1 with the place named and
// imports nothing; usage errors exit 2; and engram-cli chat continues an imported conversation
// (no KV came with it: the cache is rebuilt from the text).
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <nlohmann/json.hpp>

#include "storage/conversation_repository.h"
#include "storage/database.h"

using namespace engram::storage;
using nlohmann::json;

namespace {

struct Run {
  int rc = -1;
  QString out;
  QString err;
};

Run cli(const QStringList& args, const QByteArray& input = {}, const QString& cwd = {}) {
  QProcess p;
  if (!cwd.isEmpty()) p.setWorkingDirectory(cwd);
  p.start(QStringLiteral(ENGRAM_BINARY_DIR "/app/cli/engram-cli"), args);
  Run r;
  if (!p.waitForStarted()) {
    r.err = p.errorString();
    return r;
  }
  p.write(input);
  p.closeWriteChannel();
  p.waitForFinished(300000);
  r.rc = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
  r.out = QString::fromUtf8(p.readAllStandardOutput());
  r.err = QString::fromUtf8(p.readAllStandardError());
  return r;
}

json read_json(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  return json::parse(f.readAll().toStdString());
}

json without_ids(json document) {
  for (json& c : document.at("conversations"))
    c.erase("id");
  return document;
}

std::int64_t count(const QString& profile) {
  Database db(profile.toStdString(), Access::kReadOnly);
  return static_cast<std::int64_t>(ConversationRepository(db).list().size());
}

const QString kTinyModel = QStringLiteral(ENGRAM_TEST_DATA "/../../resources/models/engram-tiny");

Utterance message(const std::string& role, const std::string& text, std::int64_t time_ms) {
  Utterance u;
  u.role = role;
  u.text = text;
  u.time_ms = time_ms;
  return u;
}

}  // namespace

class TestCliChatFile : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  QString path(const QString& name) const { return dir_.filePath(name); }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    Database db(path("source").toStdString());
    ConversationRepository conversations(db);
    Conversation trip;
    trip.name = "Lisbon";
    trip.created_ms = 1'700'000'000'000;
    trip.updated_ms = 1'700'000'200'000;
    trip.model_fingerprint = "0123abcd";
    trip.memory_policy = "streaming";
    const std::int64_t a = conversations.insert(trip).id;
    conversations.append(
        a, message("user", "Where do I stay? Near the river, please.", 1'700'000'100'000));
    conversations.append(a, message("assistant", "Alfama, by the Tejo.", 1'700'000'200'000));
    Conversation notes;
    notes.name = "Notes";
    notes.created_ms = 1'700'000'500'000;
    notes.updated_ms = 1'700'000'500'000;
    conversations.insert(notes);
  }

  void roundTripThroughAFreshProfileChangesOnlyIds() {
    const Run exported = cli({"export", "chat", "--profile", path("source"), "--all", "--format",
                              "json", "--out", path("all.json")});
    QVERIFY2(exported.rc == 0, qPrintable(exported.err));
    QVERIFY2(exported.out.contains(QStringLiteral("wrote 2 conversations (2 messages")),
             qPrintable(exported.out));
    const Run imported = cli({"import", "chat", "--profile", path("fresh"), path("all.json")});
    QVERIFY2(imported.rc == 0, qPrintable(imported.err));
    QVERIFY2(imported.out.contains(QStringLiteral("imported 2 conversations")),
             qPrintable(imported.out));
    QVERIFY2(imported.out.contains(QStringLiteral("Lisbon  (2 messages)")),
             qPrintable(imported.out));
    const Run again = cli({"export", "chat", "--profile", path("fresh"), "--all", "--format",
                           "json", "--out", path("again.json")});
    QVERIFY2(again.rc == 0, qPrintable(again.err));
    const json first = read_json(path("all.json"));
    const json second = read_json(path("again.json"));
    QCOMPARE(first.at("conversations").size(), 2u);
    QCOMPARE(without_ids(second).dump(1), without_ids(first).dump(1));
  }

  void exportsOneConversationByIdOrNameAsMarkdown() {
    const Run by_name = cli({"export", "chat", "--profile", path("source"), "--conversation",
                             "Lisbon", "--format", "markdown", "--out", "-"});
    QVERIFY2(by_name.rc == 0, qPrintable(by_name.err));
    QVERIFY(by_name.out.startsWith(QStringLiteral("# Lisbon\n")));
    QVERIFY(by_name.out.contains(QStringLiteral("**You** (2023-11-14 22:15 UTC)\n\nWhere do I")));
    QVERIFY(by_name.out.contains(QStringLiteral("**Engram** (2023-11-14 22:16 UTC)\n\nAlfama")));
    QVERIFY(!by_name.out.contains(QStringLiteral("Notes")));
    Database db(path("source").toStdString(), Access::kReadOnly);
    const auto id = ConversationRepository(db).find_by_name("Notes")->id;
    const Run by_id = cli({"export", "chat", "--profile", path("source"), "--conversation",
                           QString::number(id), "--format", "json", "--out", path("notes.json")});
    QVERIFY2(by_id.rc == 0, qPrintable(by_id.err));
    QVERIFY2(by_id.out.contains(QStringLiteral("wrote 1 conversation (0 messages")),
             qPrintable(by_id.out));
    QCOMPARE(read_json(path("notes.json")).at("conversations").at(0).at("title"), "Notes");
    // A bare file name lands in the working directory.
    const Run relative = cli({"export", "chat", "--profile", path("source"), "--conversation",
                              "Notes", "--format", "markdown", "--out", "notes.md"},
                             {}, dir_.path());
    QVERIFY2(relative.rc == 0, qPrintable(relative.err));
    QVERIFY(QFile::exists(path("notes.md")));
  }

  void damagedFileExitsOneAndImportsNothing() {
    QFile whole(path("all.json"));
    QVERIFY(whole.open(QIODevice::ReadOnly));
    const QByteArray text = whole.readAll();
    QFile cut(path("cut.json"));
    QVERIFY(cut.open(QIODevice::WriteOnly));
    cut.write(text.left(text.size() * 2 / 3));
    cut.close();
    const std::int64_t before = count(path("fresh"));
    const Run truncated = cli({"import", "chat", "--profile", path("fresh"), path("cut.json")});
    QCOMPARE(truncated.rc, 1);
    QVERIFY2(truncated.err.startsWith(QStringLiteral("engram-cli import: error: ") +
                                      path("cut.json") + QStringLiteral(": not valid JSON")),
             qPrintable(truncated.err));
    QVERIFY2(truncated.out.isEmpty(), qPrintable(truncated.out));

    json wrong = read_json(path("all.json"));
    wrong["conversations"][1]["created_ms"] = "last week";
    QFile typed(path("typed.json"));
    QVERIFY(typed.open(QIODevice::WriteOnly));
    typed.write(QByteArray::fromStdString(wrong.dump()));
    typed.close();
    const Run wrong_type = cli({"import", "chat", "--profile", path("fresh"), path("typed.json")});
    QCOMPARE(wrong_type.rc, 1);
    QVERIFY2(wrong_type.err.contains(QStringLiteral(
                 "typed.json at /conversations/1/created_ms: expected an integer, found a string")),
             qPrintable(wrong_type.err));
    QCOMPARE(count(path("fresh")), before);
  }

  void usageErrorsExitTwo() {
    const QString p = path("source");
    const QList<QStringList> cases = {
        {"export", "chat", "--profile", p, "--format", "json", "--out", path("x.json")},
        {"export", "chat", "--profile", p, "--all", "--conversation", "Notes", "--format", "json",
         "--out", path("x.json")},
        {"export", "chat", "--profile", p, "--all", "--format", "pdf", "--out", path("x.json")},
        {"export", "chat", "--profile", p, "--all", "--format", "json"},
        {"export", "chat", "--profile", p, "--conversation", "No such", "--format", "json", "--out",
         path("x.json")},
        {"import", "chat", "--profile", p},
    };
    for (const QStringList& args : cases) {
      const Run r = cli(args);
      QVERIFY2(r.rc == 2, qPrintable(args.join(' ') + QStringLiteral(": ") + r.err));
    }
    QVERIFY(!QFile::exists(path("x.json")));
  }

  void chatContinuesAnImportedConversation() {
    const Run r = cli({"chat", "--model", ENGRAM_TEST_DATA "/models/llama-gqa", "--device", "cpu",
                       "--max-tokens", "4", "--profile", path("fresh"), "--conversation", "Lisbon"},
                      "And for dinner?\n");
    QVERIFY2(r.rc == 0, qPrintable(r.err));
    QVERIFY2(r.err.contains(QStringLiteral("restored 2 turns, 0 cached tokens")),
             qPrintable(r.err));
    QVERIFY2(r.err.contains(QStringLiteral("memory policy: streaming")), qPrintable(r.err));
    Database db(path("fresh").toStdString(), Access::kReadOnly);
    ConversationRepository conversations(db);
    const auto utterances = conversations.utterances(conversations.find_by_name("Lisbon")->id);
    QCOMPARE(utterances.size(), 4u);
    QCOMPARE(utterances[2].text, std::string("And for dinner?"));
    QCOMPARE(utterances[1].text, std::string("Alfama, by the Tejo."));
  }

  // A long conversation under epicache with a small budget, never clustered (imported): with
  // --prepare the chat indexes, clusters and builds its episodes before the first prompt, so the
  // first question only routes; without it the first question clusters the history itself.
  void chatPreparesALongConversationBeforeItsFirstQuestion() {
    const auto long_profile = [&](const QString& name) {
      Database db(path(name).toStdString());
      ConversationRepository conversations(db);
      Conversation c;
      c.name = "A long chat";
      c.memory_policy = "epicache";
      c.kv_budget = 256;
      const std::int64_t id = conversations.insert(c).id;
      const char* topics[] = {"the garden and its roses", "the old bicycle in the shed",
                              "the chess club on Tuesdays", "the recipe for plum cake"};
      for (int i = 0; i < 160; ++i) {
        conversations.append(id, message(i % 2 ? "assistant" : "user",
                                         "Note " + std::to_string(i) + " is about " +
                                             topics[(i / 8) % 4] + ", which came up again today.",
                                         1'700'000'000'000 + i));
      }
      return QStringList{"chat",     "--model",        kTinyModel,   "--device",
                         "cpu",      "--max-tokens",   "4",          "--profile",
                         path(name), "--conversation", "A long chat"};
    };
    const QByteArray question = "What about the plum cake?\n";
    const Run prepared = cli(long_profile("long") + QStringList{"--prepare"}, question);
    QVERIFY2(prepared.rc == 0, qPrintable(prepared.err));
    QVERIFY2(prepared.err.contains(QStringLiteral("prepared between turns: ")),
             qPrintable(prepared.err));
    QVERIFY2(prepared.err.contains(QStringLiteral("indexing the windows")),
             qPrintable(prepared.err));
    QVERIFY2(prepared.err.contains(QStringLiteral("memory (epicache")), qPrintable(prepared.err));
    QVERIFY2(!prepared.err.contains(QStringLiteral("history clustered into episodes")),
             qPrintable(prepared.err));
    const Run unprepared = cli(long_profile("long-unprepared"), question);
    QVERIFY2(unprepared.rc == 0, qPrintable(unprepared.err));
    QVERIFY2(!unprepared.err.contains(QStringLiteral("prepared between turns: ")),
             qPrintable(unprepared.err));
    QVERIFY2(unprepared.err.contains(QStringLiteral("history clustered into episodes")),
             qPrintable(unprepared.err));
  }
};

QTEST_GUILESS_MAIN(TestCliChatFile)
#include "test_cli_chat_file.moc"
