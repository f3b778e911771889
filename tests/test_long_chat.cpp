// Chats longer than the model's positions (issue 14), on the bundled engram-tiny (4,096
// positions) on the CPU: 200 real-length user turns (from the conversation world) piped into
// `engram-cli chat --policy streaming --kv-budget 1024 --conversation` complete, every turn is
// answered and every utterance is in SQLite, the chat says what moved out of attention, and a
// new process resumes the conversation. In process, the bytes that one more turn writes
// (the process's write counter around ConversationStore::save) stay a small fraction of the
// conversation's stored KV however long the history grows: persistence is append-only.
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/engine/chat_session.h"
#include "core/engine/conversation_store.h"
#include "core/engine/loaded_model.h"
#include "core/env/conversation_generator.h"
#include "storage/conversation_repository.h"
#include "storage/database.h"

using namespace engram;
namespace fs = std::filesystem;

namespace {

const fs::path kModelDir =
    fs::path(ENGRAM_TEST_DATA) / ".." / ".." / "resources" / "models" / "engram-tiny";

std::vector<std::string> user_turns(size_t n) {
  return env::user_turns(env::kHeldOutSeedBase + 500, n);
}

// Bytes this process has passed to write(2) so far (/proc/self/io "wchar"): blob files, SQLite
// pages and its WAL alike.
int64_t bytes_written() {
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (io >> key >> value)
    if (key == "wchar:") return value;
  return -1;
}

}  // namespace

class LongChatTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void cliChatOfTwoHundredTurnsCompletesAndResumes() {
    QTemporaryDir profile;
    const QString cli = QStringLiteral(ENGRAM_BINARY_DIR "/app/cli/engram-cli");
    const QStringList args = {
        "chat",      "--model",      QString::fromStdString(kModelDir.string()),
        "--policy",  "streaming",    "--kv-budget",
        "1024",      "--max-tokens", "24",
        "--profile", profile.path(), "--conversation",
        "long"};
    auto run = [&](const std::vector<std::string>& lines, const QStringList& a) {
      QByteArray input;
      for (const auto& l : lines)
        input += QByteArray::fromStdString(l) + '\n';
      QProcess p;
      p.start(cli, a);
      p.waitForStarted();
      p.write(input);
      p.closeWriteChannel();
      p.waitForFinished(900000);
      return std::pair<int, QString>{p.exitCode(), QString::fromUtf8(p.readAllStandardError())};
    };
    const std::vector<std::string> turns = user_turns(200);
    const auto [rc, err] = run(turns, args);
    QVERIFY2(rc == 0, qPrintable(err.right(2000)));
    // One stats line per answered turn, and the line saying what left attention.
    QCOMPARE(err.count(QRegularExpression(R"(\[\d+ prompt tokens)")), 200);
    QVERIFY2(err.contains("moved out of attention"), qPrintable(err.right(2000)));
    // The conversation outgrew the model's 4,096 positions: its stream is far longer.
    const auto holds = QRegularExpression(R"(attention holds (\d+) of (\d+) tokens)");
    QString last_hold;
    for (auto it = holds.globalMatch(err); it.hasNext();)
      last_hold = it.next().captured(0);
    const auto m = holds.match(last_hold);
    QVERIFY2(m.hasMatch(), qPrintable(err.right(2000)));
    QVERIFY(m.captured(1).toLongLong() <= 1024);
    QVERIFY2(m.captured(2).toLongLong() > 4096, qPrintable(last_hold));
    qInfo("200 turns: %s", qPrintable(last_hold));
    {
      storage::Database db(profile.path().toStdString(), storage::Access::kReadOnly);
      storage::ConversationRepository repo(db);
      const auto row = repo.find_by_name("long").value();
      QCOMPARE(repo.utterance_count(row.id), int64_t{400});
      QCOMPARE(row.memory_policy, std::string("streaming"));
      QCOMPARE(row.kv_budget, int64_t{1024});
      const auto utterances = repo.utterances(row.id);
      for (size_t i = 0; i < turns.size(); ++i)
        QCOMPARE(utterances[2 * i].text, turns[i]);
    }
    // A new process resumes it with the stored policy (no --policy given) and answers.
    QStringList resume = args;
    const int p = static_cast<int>(resume.indexOf("--policy"));
    resume.remove(p, 4);  // --policy streaming --kv-budget 1024
    const auto [rc2, err2] = run({"And what did I say about my sister?"}, resume);
    QVERIFY2(rc2 == 0, qPrintable(err2.right(2000)));
    QVERIFY2(err2.contains("restored 400 turns"), qPrintable(err2.left(2000)));
    QVERIFY2(err2.contains("memory policy: streaming, KV budget 1024"),
             qPrintable(err2.left(2000)));
    const auto reused = QRegularExpression(R"(\((\d+) reused\))").match(err2);
    QVERIFY2(reused.hasMatch() && reused.captured(1).toLongLong() > 0, qPrintable(err2));
    storage::Database db(profile.path().toStdString(), storage::Access::kReadOnly);
    storage::ConversationRepository repo(db);
    QCOMPARE(repo.utterance_count(repo.find_by_name("long").value().id), int64_t{402});
  }

  // A reply that decoded through retrieval with the working set's layers in host memory
  // (louiskv offload=1; on the CPU the same bookkeeping) starts them back to the device as it
  // ends, while the person reads, and every turn answers as a session that never moved them.
  void retrievalLayersComeBackWhenTheReplyEnds() {
    LoadedModel model = load_model({kModelDir, "", 0}, choose_device("cpu", "f32"), {});
    const std::string spec = "louiskv:sinks=4,window=16,budget=32,full_layers=1,stride=4";
    ChatSession moved(model, {}, {spec + ",offload=1", 0});
    ChatSession kept(model, {}, {spec + ",offload=0", 0});
    GenerationOptions options;
    options.max_new_tokens = 24;
    for (const std::string& turn : user_turns(3)) {
      const int64_t version = moved.cache().storage_version();
      const ChatReply a = moved.reply(turn, options, {});
      const ChatReply b = kept.reply(turn, options, {});
      QCOMPARE(a.text, b.text);
      QVERIFY(a.generation.retrieval.retrieval_layers > 0);
      QCOMPARE(moved.cache().host_layers(), int64_t{0});
      QVERIFY(moved.cache().storage_version() >= version + 2);  // moved out, and back
    }
    for (int64_t l = 0; l < model.config.num_layers; ++l)
      QVERIFY(moved.cache().keys(l).equal(kept.cache().keys(l)));
  }

  void oneMoreTurnWritesOnlyItsOwnKv() {
    LoadedModel model = load_model({kModelDir, "", 0}, choose_device("cpu", "f32"), {});
    QTemporaryDir profile;
    storage::Database db(profile.path().toStdString());
    ConversationStore store(db);
    ChatSession session(model, {}, {"streaming", 1024});
    GenerationOptions options;
    options.max_new_tokens = 24;
    const std::vector<std::string> turns = user_turns(150);
    int64_t late_written = 0, late_turns = 0, stored_bytes = 0;
    std::printf("turn,stream_tokens,attention_tokens,bytes_written,stored_kv_bytes\n");
    for (size_t i = 0; i < turns.size(); ++i) {
      session.reply(turns[i], options, {});
      const int64_t before = bytes_written();
      store.save("measured", session);
      const int64_t written = bytes_written() - before;
      const auto id = storage::ConversationRepository(db).find_by_name("measured").value().id;
      stored_bytes = store.stored_kv(id).value().kv_bytes;
      if (i % 10 == 9)
        std::printf("%zu,%lld,%lld,%lld,%lld\n", i + 1,
                    static_cast<long long>(session.cached_tokens()),
                    static_cast<long long>(session.working_set().tokens()),
                    static_cast<long long>(written), static_cast<long long>(stored_bytes));
      if (i >= turns.size() - 20) {
        late_written += written;
        ++late_turns;
      }
    }
    const double mean = static_cast<double>(late_written) / static_cast<double>(late_turns);
    qInfo("last 20 turns: %.0f bytes written per turn, stored KV %lld bytes (%.2f%%)", mean,
          static_cast<long long>(stored_bytes), 100.0 * mean / static_cast<double>(stored_bytes));
    QVERIFY(session.cached_tokens() > 4096);
    QVERIFY2(mean < 0.05 * static_cast<double>(stored_bytes),
             qPrintable(QString("%1 of %2").arg(mean).arg(stored_bytes)));
    // And what was stored restores: the next answer reuses the working set.
    ChatSession resumed(model, {}, {"streaming", 1024});
    const auto r = store.restore("measured", resumed, /*rebuild=*/false);
    QVERIFY(r && r->kv_restored);
    QCOMPARE(resumed.cached_tokens(), session.cached_tokens());
    QCOMPARE(resumed.working_set().tokens(), session.working_set().tokens());
    // The restored working set is the live one (keys re-rotated once instead of step by step).
    for (int64_t l = 0; l < model.config.num_layers; ++l) {
      const double dk =
          (resumed.cache().keys(l) - session.cache().keys(l)).abs().max().item<double>();
      const double dv =
          (resumed.cache().values(l) - session.cache().values(l)).abs().max().item<double>();
      QVERIFY2(dk < 1e-3 && dv == 0, qPrintable(QString("layer %1: %2 %3").arg(l).arg(dk).arg(dv)));
    }
    const ChatReply next = resumed.reply("What did I tell you about my work?", options, {});
    QVERIFY(next.reused_tokens > 0);
  }
};

QTEST_GUILESS_MAIN(LongChatTest)
#include "test_long_chat.moc"
