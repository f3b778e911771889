// Damaged files give errors that name the file and the unit, and everything undamaged keeps
// working: flipped bytes in the database header (the whole file is refused, untouched), a
// damaged page under one conversation's utterances (that conversation fails, the others read
// and write), a flipped byte, a truncation or a deletion of a blob file (BlobCorrupt), and a
// blob made for another model (BlobStale, never its bytes).
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <functional>
#include <iterator>

#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "storage/kv_blob_store.h"
#include "storage/store_error.h"
#include "store_file_damage.h"

using namespace engram::storage;
namespace fs = std::filesystem;

namespace {

using engram::test::overflow_pages;
using engram::test::overwrite;

struct Thrown {
  bool right_type = false;
  QString what;
  std::string file;
  std::string unit;
};

template <typename E>
Thrown thrown(const std::function<void()>& call) {
  try {
    call();
  } catch (const E& e) {
    return {true, QString::fromStdString(e.what()), e.file(), e.unit()};
  } catch (const std::exception& e) {
    return {false, QStringLiteral("wrong exception: ") + QString::fromUtf8(e.what()), {}, {}};
  }
  return {false, QStringLiteral("nothing thrown"), {}, {}};
}

std::string read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void flip_byte(const fs::path& file, std::uintmax_t offset) {
  std::fstream io(file, std::ios::binary | std::ios::in | std::ios::out);
  io.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  io.get(c);
  io.seekp(static_cast<std::streamoff>(offset));
  io.put(static_cast<char>(c ^ 0x5a));
}

std::vector<std::byte> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::byte> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    data[i] = static_cast<std::byte>(i * 31 + seed);
  return data;
}

const std::string kModel = "tiny-llama@theta10000";
const KvLayout kLayout{
    "fp16", {2, 2, 16, 32}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}};
constexpr std::size_t kBytes = 2 * 2 * 16 * 32 * 2;

}  // namespace

class TestStoreCorruption : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  fs::path profile() const { return dir_.path().toStdString(); }
  std::int64_t healthy_ = 0;
  std::int64_t damaged_ = 0;

  // Two conversations with an utterance and a blob each; the damaged one also has a long
  // utterance that spills into overflow pages only it uses.
  void make_profile() {
    Database db(profile());
    ConversationRepository conversations(db);
    KvBlobStore blobs(db);
    healthy_ = conversations.create("healthy").id;
    damaged_ = conversations.create("damaged").id;
    conversations.append(healthy_, {0, 0, "user", "still fine", 0, 0, 2});
    conversations.append(damaged_, {0, 0, "user", std::string(20000, 'z'), 0, 0, 5000});
    blobs.put({{healthy_, "episode", 0}, 0, 2}, kLayout, pattern(kBytes, 1), kModel);
    blobs.put({{damaged_, "episode", 0}, 0, 2}, kLayout, pattern(kBytes, 2), kModel);
  }  // closing the only connection checkpoints the WAL into engram.db

  void checkHealthyConversationStillWorks(Database& db) {
    ConversationRepository conversations(db);
    QCOMPARE(conversations.utterances(healthy_).at(0).text, std::string("still fine"));
    conversations.append(healthy_, {0, 0, "assistant", "and writable", 0, 2, 4});
    QCOMPARE(conversations.utterance_count(healthy_), 2);
    QVERIFY(KvBlobStore(db).get({{healthy_, "episode", 0}, 0, 2}, kModel).data ==
            pattern(kBytes, 1));
  }

 private Q_SLOTS:
  void init() {
    QVERIFY(dir_.isValid());
    make_profile();
  }
  void cleanup() { fs::remove_all(profile()); }

  void flippedHeaderBytesRefuseTheFileByName() {
    const fs::path file = profile() / "engram.db";
    for (std::uintmax_t offset : {0, 5, 15})
      flip_byte(file, offset);  // the "SQLite format 3" magic
    const std::string before = read_bytes(file);
    const Thrown error = thrown<DatabaseCorrupt>([&] { Database db(profile()); });
    QVERIFY2(error.right_type, qPrintable(error.what));
    QCOMPARE(error.file, file.string());
    QVERIFY2(error.what.contains(QString::fromStdString(file.string())), qPrintable(error.what));
    QVERIFY2(error.what.contains("damaged"), qPrintable(error.what));
    QVERIFY(read_bytes(file) == before);
  }

  void damagedPageFailsOnlyItsConversation() {
    const fs::path file = profile() / "engram.db";
    const std::vector<std::int64_t> pages = overflow_pages(file, "utterances");
    QVERIFY2(pages.size() >= 3, "the long utterance should span several overflow pages");
    // Each overflow page starts with the number of the next one: point them past the file end.
    for (std::int64_t page : pages)
      overwrite(file, (page - 1) * 4096, "\x7f\xff\xff\xf0");

    Database db(profile());  // the schema and the other tables are intact
    QVERIFY(!db.integrity_problems().empty());
    ConversationRepository conversations(db);
    QCOMPARE(conversations.list().size(), std::size_t{2});
    const Thrown error = thrown<DatabaseCorrupt>([&] { conversations.utterances(damaged_); });
    QVERIFY2(error.right_type, qPrintable(error.what));
    QCOMPARE(error.file, file.string());
    QCOMPARE(error.unit, "conversation " + std::to_string(damaged_));
    checkHealthyConversationStillWorks(db);
  }

  void flippedBlobByteIsCaughtByItsChecksum() {
    Database db(profile());
    KvBlobStore blobs(db);
    const KvBlobKey key{{damaged_, "episode", 0}, 0, 2};
    const fs::path blob = blobs.path_of(*blobs.find(key));
    flip_byte(blob, kBytes / 2);
    const Thrown error = thrown<BlobCorrupt>([&] { blobs.get(key, kModel); });
    QVERIFY2(error.right_type, qPrintable(error.what));
    QCOMPARE(error.file, blob.string());
    QCOMPARE(error.unit, "conversation " + std::to_string(damaged_) + " episode 0 layers [0, 2)");
    QVERIFY2(error.what.contains("checksum"), qPrintable(error.what));
    QVERIFY(thrown<BlobCorrupt>([&] { blobs.verify(*blobs.find(key)); }).right_type);
    // The conversation's text is unaffected, and so is everyone else.
    QCOMPARE(ConversationRepository(db).utterances(damaged_).at(0).text.size(), std::size_t{20000});
    checkHealthyConversationStillWorks(db);
  }

  void truncatedBlobIsReportedWithItsSizes() {
    Database db(profile());
    KvBlobStore blobs(db);
    const KvBlobKey key{{damaged_, "episode", 0}, 0, 2};
    const fs::path blob = blobs.path_of(*blobs.find(key));
    fs::resize_file(blob, kBytes - 100);
    const Thrown error = thrown<BlobCorrupt>([&] { blobs.get(key, kModel); });
    QVERIFY2(error.right_type, qPrintable(error.what));
    QCOMPARE(error.file, blob.string());
    QVERIFY2(error.what.contains("truncated") && error.what.contains(QString::number(kBytes)),
             qPrintable(error.what));
    checkHealthyConversationStillWorks(db);
  }

  void missingBlobFileIsReported() {
    Database db(profile());
    KvBlobStore blobs(db);
    const KvBlobKey key{{damaged_, "episode", 0}, 0, 2};
    fs::remove(blobs.path_of(*blobs.find(key)));
    const Thrown error = thrown<BlobCorrupt>([&] { blobs.get(key, kModel); });
    QVERIFY2(error.right_type && error.what.contains("missing"), qPrintable(error.what));
    checkHealthyConversationStillWorks(db);
  }

  void blobOfAnotherModelIsStaleAndNeverRead() {
    Database db(profile());
    KvBlobStore blobs(db);
    const KvBlobKey key{{damaged_, "episode", 0}, 0, 2};
    std::vector<std::byte> destination(kBytes, std::byte{0x11});
    const Thrown error =
        thrown<BlobStale>([&] { blobs.get(key, "tiny-llama@theta500000", destination); });
    QVERIFY2(error.right_type, qPrintable(error.what));
    QCOMPARE(error.unit, "conversation " + std::to_string(damaged_) + " episode 0 layers [0, 2)");
    QVERIFY2(error.what.contains(QString::fromStdString(kModel)) && error.what.contains("rebuild"),
             qPrintable(error.what));
    QVERIFY(std::all_of(destination.begin(), destination.end(),
                        [](std::byte b) { return b == std::byte{0x11}; }));
    // Stale is not corrupt: the engine rebuilds and replaces it.
    blobs.put(key, kLayout, pattern(kBytes, 3), "tiny-llama@theta500000");
    QVERIFY(blobs.get(key, "tiny-llama@theta500000").data == pattern(kBytes, 3));
    checkHealthyConversationStillWorks(db);
  }
};

QTEST_MAIN(TestStoreCorruption)
#include "test_store_corruption.moc"
