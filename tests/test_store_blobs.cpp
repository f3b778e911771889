// The KV blob store on healthy data: a blob comes back byte for byte with its layout, into a
// caller's buffer or a vector; a replacement unlinks the old file only after its commit; a
// layout that does not account for the bytes is refused; a rolled-back put leaves no file;
// orphan and temporary files are swept at open; deleting a conversation removes its blob files
// and leaves world blobs; another model's blobs can be dropped in one call.
#include <QTemporaryDir>
#include <QtTest>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <set>

#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "storage/kv_blob_store.h"
#include "storage/store_error.h"
#include "storage/xxh64.h"

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

// bf16-sized test data: [2 (k/v), heads, tokens, head_dim] with a recognizable pattern.
std::vector<std::byte> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::byte> data(bytes);
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (std::byte& b : data) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    b = static_cast<std::byte>(state);
  }
  return data;
}

KvLayout bf16_layout(std::int64_t tokens) {
  std::vector<std::int64_t> positions;
  for (std::int64_t t = 0; t < tokens; ++t)
    positions.push_back(100 + 3 * t);
  return {"bf16", {2, 4, tokens, 64}, positions};
}

std::size_t bf16_bytes(std::int64_t tokens) {
  return 2 * 4 * tokens * 64 * 2;
}

std::set<std::string> kv_files(const Database& db) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(db.paths().kv)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

const std::string kModel = "tiny-llama@theta10000";

}  // namespace

class TestStoreBlobs : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  fs::path profile() const { return dir_.path().toStdString(); }

 private Q_SLOTS:
  void init() { QVERIFY(dir_.isValid()); }
  void cleanup() { fs::remove_all(profile()); }

  void putThenGetReturnsTheBytesAndLayout() {
    KvBlobKey key;
    {
      Database db(profile());
      const Conversation c = ConversationRepository(db).create("c");
      key = {{c.id, "episode", 3}, 0, 16};
      const std::vector<std::byte> data = pattern(bf16_bytes(37), 1);
      const KvBlobRecord stored = KvBlobStore(db).put(key, bf16_layout(37), data, kModel);
      QCOMPARE(stored.byte_size, static_cast<std::int64_t>(data.size()));
      QCOMPARE(stored.checksum, xxh64(data));
      QVERIFY(fs::exists(db.paths().kv / stored.file_name));
    }
    Database db(profile());
    KvBlobStore blobs(db);
    const KvBlobStore::Blob blob = blobs.get(key, kModel);
    QVERIFY(blob.data == pattern(bf16_bytes(37), 1));
    QCOMPARE(blob.record.layout.dtype, std::string("bf16"));
    QCOMPARE(blob.record.layout.shape, (std::vector<std::int64_t>{2, 4, 37, 64}));
    QCOMPARE(blob.record.layout.positions, bf16_layout(37).positions);
    QCOMPARE(blob.record.key.layer_begin, 0);
    QCOMPARE(blob.record.key.layer_end, 16);
    QCOMPARE(blob.record.model_fingerprint, kModel);
    QCOMPARE(blobs.list(key.unit.conversation_id).size(), std::size_t{1});
  }

  void getFillsTheCallersBuffer() {
    Database db(profile());
    KvBlobStore blobs(db);
    const KvBlobKey key{{std::nullopt, "prompt_cluster", 0}, 8, 12};
    const std::vector<std::byte> data = pattern(bf16_bytes(5), 2);
    blobs.put(key, bf16_layout(5), data, kModel);
    // Stands in for pinned host memory: any caller-owned buffer of the recorded size.
    const std::size_t size = static_cast<std::size_t>(blobs.find(key)->byte_size);
    std::unique_ptr<std::byte[], decltype(&std::free)> buffer(
        static_cast<std::byte*>(std::aligned_alloc(4096, (size + 4095) / 4096 * 4096)), &std::free);
    blobs.get(key, kModel, std::span(buffer.get(), size));
    QVERIFY(std::equal(data.begin(), data.end(), buffer.get()));
    auto [wrong, message] = thrown<std::invalid_argument>(
        [&] { blobs.get(key, kModel, std::span(buffer.get(), size - 1)); });
    QVERIFY2(wrong && message.contains("destination"), qPrintable(message));
  }

  void replacingABlobUnlinksTheOldFileAfterCommit() {
    Database db(profile());
    KvBlobStore blobs(db);
    const KvBlobKey key{{std::nullopt, "segment", 9}, 0, 4};
    const KvBlobRecord first = blobs.put(key, bf16_layout(3), pattern(bf16_bytes(3), 3), kModel);
    const KvBlobRecord second = blobs.put(key, bf16_layout(6), pattern(bf16_bytes(6), 4), kModel);
    QVERIFY(first.file_name != second.file_name);
    QCOMPARE(kv_files(db), std::set<std::string>{second.file_name});
    QVERIFY(blobs.get(key, kModel).data == pattern(bf16_bytes(6), 4));
    QCOMPARE(blobs.list_all().size(), std::size_t{1});
  }

  void layoutThatDoesNotAccountForTheBytesIsRefused() {
    Database db(profile());
    KvBlobStore blobs(db);
    const KvBlobKey key{{std::nullopt, "segment", 1}, 0, 4};
    const std::vector<std::byte> data = pattern(bf16_bytes(3), 5);
    auto [short_shape, m1] =
        thrown<std::invalid_argument>([&] { blobs.put(key, bf16_layout(2), data, kModel); });
    QVERIFY2(short_shape && m1.contains("bytes"), qPrintable(m1));
    auto [unknown, m2] = thrown<std::invalid_argument>([&] {
      blobs.put(key, {"q4_k", {2, 4, 3, 64}, {}}, data, kModel);
    });
    QVERIFY2(unknown && m2.contains("q4_k"), qPrintable(m2));
    auto [layers, m3] = thrown<std::invalid_argument>([&] {
      blobs.put({key.unit, 4, 4}, bf16_layout(3), data, kModel);
    });
    QVERIFY2(layers && m3.contains("layer"), qPrintable(m3));
    auto [missing, m4] = thrown<NotFound>([&] {
      blobs.put({{77, "episode", 0}, 0, 1}, bf16_layout(3), data, kModel);
    });
    QVERIFY2(missing && m4.contains("conversation 77"), qPrintable(m4));
    QVERIFY(kv_files(db).empty());
    QVERIFY(blobs.list_all().empty());
  }

  void rolledBackPutLeavesNoRowAndNoFile() {
    Database db(profile());
    KvBlobStore blobs(db);
    const KvBlobKey key{{std::nullopt, "segment", 2}, 0, 4};
    {
      Transaction transaction(db, "test");
      blobs.put(key, bf16_layout(3), pattern(bf16_bytes(3), 6), kModel);
      QCOMPARE(kv_files(db).size(), std::size_t{1});
    }
    QVERIFY(!blobs.find(key));
    QVERIFY(kv_files(db).empty());
  }

  void orphanAndTemporaryFilesAreSweptAtOpenAndOthersKept() {
    std::string kept_blob;
    {
      Database db(profile());
      kept_blob = KvBlobStore(db)
                      .put({{std::nullopt, "segment", 1}, 0, 2}, bf16_layout(1),
                           pattern(bf16_bytes(1), 7), kModel)
                      .file_name;
      for (const char* name :
           {"w-segment-5-l0-2-00000000deadbeef.kv", "half-written.kv.tmp", "notes.txt"}) {
        std::ofstream(db.paths().kv / name) << "leftover";
      }
    }
    Database db(profile());
    QCOMPARE(db.swept_files(), std::size_t{2});
    QCOMPARE(kv_files(db), (std::set<std::string>{kept_blob, "notes.txt"}));
    QVERIFY(KvBlobStore(db).get({{std::nullopt, "segment", 1}, 0, 2}, kModel).data ==
            pattern(bf16_bytes(1), 7));
  }

  void deletingAConversationRemovesItsBlobFilesButNotWorldBlobs() {
    Database db(profile());
    ConversationRepository conversations(db);
    KvBlobStore blobs(db);
    const Conversation doomed = conversations.create("doomed");
    const Conversation kept = conversations.create("kept");
    for (int layer = 0; layer < 32; layer += 8) {
      blobs.put({{doomed.id, "episode", 0}, layer, layer + 8}, bf16_layout(2),
                pattern(bf16_bytes(2), layer), kModel);
    }
    const std::string kept_file =
        blobs
            .put({{kept.id, "episode", 0}, 0, 8}, bf16_layout(2), pattern(bf16_bytes(2), 8), kModel)
            .file_name;
    const std::string world_file = blobs
                                       .put({{std::nullopt, "segment", 0}, 0, 8}, bf16_layout(2),
                                            pattern(bf16_bytes(2), 9), kModel)
                                       .file_name;
    QCOMPARE(kv_files(db).size(), std::size_t{6});
    conversations.remove(doomed.id);
    QCOMPARE(kv_files(db), (std::set<std::string>{kept_file, world_file}));
    QVERIFY(blobs.list(doomed.id).empty());
    QCOMPARE(blobs.list_all().size(), std::size_t{2});
  }

  void removalsDeleteRowsAndFiles() {
    Database db(profile());
    KvBlobStore blobs(db);
    const UnitRef unit{std::nullopt, "episode", 4};
    for (int layer = 0; layer < 4; ++layer) {
      blobs.put({unit, layer, layer + 1}, bf16_layout(1), pattern(bf16_bytes(1), layer), kModel);
    }
    blobs.put({{std::nullopt, "episode", 5}, 0, 1}, bf16_layout(1), pattern(bf16_bytes(1), 9),
              "other-model");
    QVERIFY(blobs.remove({unit, 0, 1}));
    QVERIFY(!blobs.remove({unit, 0, 1}));
    QCOMPARE(blobs.remove_stale(kModel), std::size_t{1});
    QCOMPARE(blobs.remove_unit(unit), std::size_t{3});
    QVERIFY(blobs.list_all().empty());
    QVERIFY(kv_files(db).empty());
  }

  void emptyTensorIsAValidBlob() {
    Database db(profile());
    KvBlobStore blobs(db);
    const KvBlobKey key{{std::nullopt, "segment", 1}, 0, 1};
    blobs.put(key, {"fp32", {2, 0, 8}, {}}, {}, kModel);
    QVERIFY(blobs.get(key, kModel).data.empty());
  }
};

QTEST_MAIN(TestStoreBlobs)
#include "test_store_blobs.moc"
