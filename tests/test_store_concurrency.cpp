// Who may open a profile at once. One read-write opener per profile: a second process (or a
// second read-write connection in the same process) is refused with "profile in use by process
// N", and the lock dies with its holder, even under SIGKILL. Read-only connections take no lock:
// the UI thread reads the last committed rows while the engine is inside a write transaction,
// and cannot write.
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <chrono>
#include <functional>

#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "storage/store_error.h"

using namespace engram::storage;
namespace fs = std::filesystem;

namespace {

template <typename E>
std::pair<bool, QString> thrown(const std::function<void()>& call) {
  try {
    call();
  } catch (const E& e) {
    return {true, QString::fromStdString(e.what())};
  } catch (const std::exception& e) {
    return {false, QStringLiteral("wrong exception: ") + QString::fromUtf8(e.what())};
  }
  return {false, QStringLiteral("nothing thrown")};
}

// Starts storage_fault_child holding the profile and waits until it says it holds it.
bool start_holder(QProcess& child, const fs::path& profile) {
  child.start(ENGRAM_STORAGE_FAULT_CHILD, {"hold", QString::fromStdString(profile.string())});
  if (!child.waitForStarted(10000)) return false;
  while (!child.canReadLine()) {
    if (!child.waitForReadyRead(10000)) return false;
  }
  return child.readLine().startsWith("ready");
}

}  // namespace

class TestStoreConcurrency : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  fs::path profile() const { return dir_.path().toStdString(); }

 private Q_SLOTS:
  void init() { QVERIFY(dir_.isValid()); }
  void cleanup() { fs::remove_all(profile()); }

  void secondProcessIsRefusedWhileTheProfileIsInUse() {
    { Database db(profile()); }  // create it, so the reader below has a file
    QProcess holder;
    QVERIFY(start_holder(holder, profile()));
    const QString pid = QString::number(holder.processId());

    auto [refused, message] = thrown<ProfileInUse>([&] { Database db(profile()); });
    QVERIFY2(refused, qPrintable(message));
    QVERIFY2(message.contains("in use by process " + pid), qPrintable(message));
    QVERIFY2(message.contains("engram.lock"), qPrintable(message));
    try {
      Database db(profile());
    } catch (const ProfileInUse& e) {
      QCOMPARE(e.holder_pid(), static_cast<long>(holder.processId()));
    }
    // Looking is allowed while another process writes.
    Database reader(profile(), Access::kReadOnly);
    QVERIFY(ConversationRepository(reader).list().empty());

    holder.closeWriteChannel();
    QVERIFY(holder.waitForFinished(10000));
    QCOMPARE(holder.exitCode(), 0);
    Database db(profile());  // free again
  }

  void lockDiesWithAKilledHolder() {
    QProcess holder;
    QVERIFY(start_holder(holder, profile()));
    holder.kill();  // SIGKILL: no destructor runs
    QVERIFY(holder.waitForFinished(10000));
    Database db(profile());
    QVERIFY(db.integrity_problems().empty());
  }

  void secondReadWriteConnectionInTheSameProcessIsRefused() {
    Database first(profile());
    auto [refused, message] = thrown<ProfileInUse>([&] { Database second(profile()); });
    QVERIFY2(refused, qPrintable(message));
    QVERIFY2(message.contains("in use by process " +
                              QString::number(QCoreApplication::applicationPid())),
             qPrintable(message));
  }

  void readerSeesCommittedRowsWhileTheWriterHoldsATransaction() {
    Database writer(profile());
    ConversationRepository writes(writer);
    writes.create("committed");
    Database reader(profile(), Access::kReadOnly);
    ConversationRepository reads(reader);

    Transaction transaction(writer, "test");
    writes.create("pending");
    const auto start = std::chrono::steady_clock::now();
    const std::vector<Conversation> seen = reads.list();
    const auto waited = std::chrono::steady_clock::now() - start;
    QCOMPARE(seen.size(), std::size_t{1});
    QCOMPARE(seen[0].name, std::string("committed"));
    // WAL readers do not wait for the writer (the busy timeout would be 5 s).
    QVERIFY(waited < std::chrono::seconds(1));
    transaction.commit();
    QCOMPARE(reads.list().size(), std::size_t{2});
  }

  void readOnlyConnectionCannotWrite() {
    { Database db(profile()); }
    Database reader(profile(), Access::kReadOnly);
    QVERIFY(reader.read_only());
    auto [refused, message] =
        thrown<StoreError>([&] { ConversationRepository(reader).create("nope"); });
    QVERIFY2(refused, qPrintable(message));
    QVERIFY2(message.contains("engram.db"), qPrintable(message));
  }
};

QTEST_MAIN(TestStoreConcurrency)
#include "test_store_concurrency.moc"
