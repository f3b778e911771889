// Streaming detokenization against the real Llama-2 tokenizer: every chunk is valid UTF-8, the
// chunks concatenate to decode(all ids) (texts with emoji, accents, CJK, spaces and newlines, and
// random id sequences heavy in byte-fallback pieces), characters spelled by byte pieces appear
// whole, the first piece's leading space is dropped and later ones kept, control tokens are silent.
#include <QtTest>

#include <random>
#include <stdexcept>

#include "core/tokenizer/token_stream.h"
#include "core/tokenizer/tokenizer.h"

using namespace engram;

namespace {

const char* const kLlamaTokenizer = ENGRAM_TEST_DATA "/models/llama-gqa/tokenizer.model";

// Strict UTF-8: no overlongs, no surrogates, nothing past U+10FFFF, no truncated sequences.
bool isValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (int k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

QString hex(const std::string& s) {
  return QString::fromLatin1(QByteArray::fromStdString(s).toHex(' '));
}

QString toQ(const std::vector<int32_t>& ids) {
  QStringList parts;
  for (const int32_t id : ids)
    parts << QString::number(id);
  return parts.join(QStringLiteral(", "));
}

}  // namespace

class TestTokenStream : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<Tokenizer> tokenizer_;

  int32_t byteId(int byte) const {
    char piece[8];
    std::snprintf(piece, sizeof piece, "<0x%02X>", byte);
    return tokenizer_->piece_to_id(piece);
  }

  // Streams `ids`, checking each chunk is valid UTF-8; returns the chunks (finish() last).
  std::vector<std::string> streamAll(const std::vector<int32_t>& ids, bool* all_valid) const {
    TokenStream stream(*tokenizer_);
    std::vector<std::string> chunks;
    *all_valid = true;
    for (const int32_t id : ids)
      chunks.push_back(stream.push(id));
    chunks.push_back(stream.finish());
    for (const auto& chunk : chunks)
      *all_valid = *all_valid && isValidUtf8(chunk);
    return chunks;
  }

  static std::string joined(const std::vector<std::string>& chunks) {
    std::string all;
    for (const auto& chunk : chunks)
      all += chunk;
    return all;
  }

 private Q_SLOTS:
  void initTestCase() {
    tokenizer_ = Tokenizer::load(kLlamaTokenizer);
    QVERIFY(isValidUtf8("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"));
    QVERIFY(!isValidUtf8("\xE2\x82"));
    QVERIFY(!isValidUtf8("\xC0\xAF"));
  }

  void chunksAreValidUtf8AndConcatenateToDecode_data() {
    QTest::addColumn<QString>("text");
    QTest::newRow("ascii") << QStringLiteral("Hello world, this is a streamed reply.");
    QTest::newRow("emoji") << QStringLiteral(
        "Rocket 🚀, family 👨‍👩‍👧, flag 🇯🇵, face😀😀!");
    QTest::newRow("accents") << QStringLiteral("Ça va? Très bien — merci, señor Müller.");
    QTest::newRow("cjk") << QStringLiteral("東京は日本の首都です。北京是中国的首都。서울");
    QTest::newRow("spaces and newlines")
        << QStringLiteral("  leading\n\n  indented\ttab   wide  \n trailing ");
    QTest::newRow("euro and rare symbols") << QStringLiteral("€5 ≈ ¥800 ⊕ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ꙮ");
    QTest::newRow("leading space") << QStringLiteral(" starts with a space");
  }
  void chunksAreValidUtf8AndConcatenateToDecode() {
    QFETCH(QString, text);
    std::vector<int32_t> ids{tokenizer_->bos_id()};
    const auto body = tokenizer_->encode(text.toStdString());
    ids.insert(ids.end(), body.begin(), body.end());
    ids.push_back(tokenizer_->eos_id());
    bool valid = false;
    const auto chunks = streamAll(ids, &valid);
    QVERIFY2(valid, qPrintable(toQ(ids)));
    QCOMPARE(joined(chunks), tokenizer_->decode(ids));
    QCOMPARE(QString::fromStdString(joined(chunks)), text);
  }

  void randomIdSequencesStreamToDecode() {
    // Byte pieces (ids 3..258) half the time, so characters are split, left unfinished, or
    // interrupted; the rest anywhere in the vocabulary, control tokens included.
    std::mt19937 rng(20240611);
    std::uniform_int_distribution<int32_t> any(0, tokenizer_->vocab_size() - 1);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_int_distribution<int> coin(0, 1);
    for (int round = 0; round < 300; ++round) {
      std::vector<int32_t> ids(1 + round % 40);
      for (auto& id : ids)
        id = coin(rng) ? byteId(byte(rng)) : any(rng);
      bool valid = false;
      const auto chunks = streamAll(ids, &valid);
      QVERIFY2(valid, qPrintable(toQ(ids)));
      const std::string expected = tokenizer_->decode(ids);
      QVERIFY2(joined(chunks) == expected,
               qPrintable(QStringLiteral("ids %1: got %2, want %3")
                              .arg(toQ(ids), hex(joined(chunks)), hex(expected))));
    }
  }

  void byteFallbackCharacterAppearsOnlyWhenComplete() {
    TokenStream stream(*tokenizer_);
    QCOMPARE(stream.push(15043), std::string("Hello"));
    QCOMPARE(stream.push(tokenizer_->piece_to_id("\xE2\x96\x81")), std::string(" "));
    QCOMPARE(stream.push(byteId(0xE2)), std::string());
    QCOMPARE(stream.push(byteId(0x82)), std::string());
    QCOMPARE(stream.push(byteId(0xAC)), std::string("\xE2\x82\xAC"));
    QCOMPARE(stream.push(byteId(0xF0)), std::string());
    QCOMPARE(stream.push(byteId(0x9F)), std::string());
    QCOMPARE(stream.push(byteId(0x98)), std::string());
    QCOMPARE(stream.push(byteId(0x80)), std::string("\xF0\x9F\x98\x80"));
    QCOMPARE(stream.finish(), std::string());
  }

  void firstLeadingSpaceIsDroppedAndLaterOnesKept() {
    TokenStream stream(*tokenizer_);
    QCOMPARE(stream.push(1), std::string());
    QCOMPARE(stream.push(15043), std::string("Hello"));
    QCOMPARE(stream.push(3186), std::string(" world"));
  }

  void spaceOnlyFirstPieceFollowsDecode() {
    const int32_t space = tokenizer_->piece_to_id("\xE2\x96\x81");
    const std::vector<int32_t> ids{1, space, 15043, space, space, 3186};
    bool valid = false;
    QCOMPARE(joined(streamAll(ids, &valid)), tokenizer_->decode(ids));
  }

  void controlTokensGiveNoText() {
    TokenStream stream(*tokenizer_);
    QCOMPARE(stream.push(tokenizer_->bos_id()), std::string());
    QCOMPARE(stream.push(tokenizer_->eos_id()), std::string());
    QCOMPARE(stream.finish(), std::string());
    TokenStream after_text(*tokenizer_);
    QCOMPARE(after_text.push(15043), std::string("Hello"));
    QCOMPARE(after_text.push(tokenizer_->eos_id()), std::string());
    QCOMPARE(after_text.finish(), std::string());
  }

  void unfinishedCharacterIsFlushedByFinishAsDecodeDoes() {
    const std::vector<int32_t> ids{15043, byteId(0xE2), byteId(0x82)};
    TokenStream stream(*tokenizer_);
    std::string all;
    for (const int32_t id : ids)
      all += stream.push(id);
    QCOMPARE(all, std::string("Hello"));
    const std::string rest = stream.finish();
    QVERIFY(isValidUtf8(rest));
    QCOMPARE(all + rest, tokenizer_->decode(ids));
  }

  void outOfRangeIdThrows() {
    TokenStream stream(*tokenizer_);
    QVERIFY_EXCEPTION_THROWN(stream.push(tokenizer_->vocab_size()), std::out_of_range);
  }
};

QTEST_MAIN(TestTokenStream)
#include "test_token_stream.moc"
