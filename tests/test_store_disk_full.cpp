// A full disk, simulated with RLIMIT_FSIZE in a child process (no mount rights needed): a blob
// write and a transaction larger than the limit fail with StorageFull naming the file and the
// unit, the temporary file is gone, nothing of either is visible, and the store takes a small
// write right after. The parent then checks the file from outside the limit.
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "storage/kv_blob_store.h"

using namespace engram::storage;
namespace fs = std::filesystem;

class TestStoreDiskFull : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void writesPastTheLimitFailCleanlyAndRollBack() {
    QTemporaryDir dir;
    const fs::path profile = dir.path().toStdString();
    std::int64_t fill_id = 0;
    {
      Database db(profile);
      ConversationRepository conversations(db);
      fill_id = conversations.create("fill").id;
      conversations.append(fill_id, {0, 0, "user", "before", 0, 0, 1});
    }
    const long long limit = 1 << 20;
    QVERIFY(fs::file_size(profile / "engram.db") < static_cast<std::uintmax_t>(limit) / 2);

    QProcess child;
    child.setProcessChannelMode(QProcess::MergedChannels);
    child.start(ENGRAM_STORAGE_FAULT_CHILD,
                {"fill", QString::fromStdString(profile.string()), QString::number(limit)});
    QVERIFY(child.waitForFinished(60000));
    const QString output = QString::fromUtf8(child.readAll());
    qInfo().noquote() << output.trimmed();
    QVERIFY2(child.exitStatus() == QProcess::NormalExit && child.exitCode() == 0,
             qPrintable(output));
    QVERIFY2(output.contains("blob: ") && output.contains(".tmp"), qPrintable(output));
    QVERIFY2(output.contains("File too large") || output.contains("disk is full"),
             qPrintable(output));
    QVERIFY2(output.contains("transaction: ") && output.contains("engram.db"), qPrintable(output));

    Database db(profile);
    QVERIFY(db.integrity_problems().empty());
    ConversationRepository conversations(db);
    QVERIFY(!conversations.find_by_name("half"));
    QCOMPARE(conversations.list().size(), std::size_t{1});
    const std::vector<Utterance> utterances = conversations.utterances(fill_id);
    QCOMPARE(utterances.size(), std::size_t{2});
    QCOMPARE(utterances[0].text, std::string("before"));
    QCOMPARE(utterances[1].text, std::string("after"));
    QVERIFY(KvBlobStore(db).list_all().empty());
    QCOMPARE(db.swept_files(), std::size_t{0});  // the child already removed its temporary file
    QVERIFY(fs::is_empty(db.paths().kv));
  }
};

QTEST_MAIN(TestStoreDiskFull)
#include "test_store_disk_full.moc"
