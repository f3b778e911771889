// XXH64, the checksum of KV blob files: our implementation must give the reference library's
// values (xxHash 0.8.1, libxxhash.so.0, queried once to make these vectors), whole or streamed
// in arbitrary pieces.
#include <QtTest>

#include <string>
#include <vector>

#include "storage/xxh64.h"

using engram::storage::xxh64;
using engram::storage::Xxh64;

namespace {

std::span<const std::byte> bytes(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

// 0..255 four times, then "xyz": crosses the 32-byte stripe and every tail branch.
std::string long_input() {
  std::string text;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 256; ++i)
      text += static_cast<char>(i);
  }
  return text + "xyz";
}

}  // namespace

class TestStoreChecksum : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void matchesReferenceVectors() {
    QCOMPARE(xxh64(bytes("")), 0xEF46DB3751D8E999ULL);
    QCOMPARE(xxh64(bytes("a")), 0xD24EC4F1A98C6E5BULL);
    QCOMPARE(xxh64(bytes("abc")), 0x44BC2CF5AD770999ULL);
    QCOMPARE(xxh64(bytes("The quick brown fox jumps over the lazy dog")), 0x0B242D361FDA71BCULL);
    QCOMPARE(xxh64(bytes(long_input())), 0xE146CB31B65BC21AULL);
    QCOMPARE(xxh64(bytes("Engram KV blob"), 0x9E3779B97F4A7C15ULL), 0xF91310F6EFAA9BC7ULL);
  }

  void streamingInAnyPiecesMatchesOneShot() {
    const std::string input = long_input();
    for (std::size_t piece : {1, 3, 7, 31, 32, 33, 100, 1027}) {
      Xxh64 state;
      for (std::size_t at = 0; at < input.size(); at += piece) {
        state.update(bytes(input).subspan(at, std::min(piece, input.size() - at)));
      }
      QCOMPARE(state.digest(), xxh64(bytes(input)));
    }
  }

  void oneFlippedBitChangesTheChecksum() {
    std::string input = long_input();
    const std::uint64_t before = xxh64(bytes(input));
    input[517] = static_cast<char>(input[517] ^ 0x10);
    QVERIFY(xxh64(bytes(input)) != before);
  }
};

QTEST_MAIN(TestStoreChecksum)
#include "test_store_checksum.moc"
