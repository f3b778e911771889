// The SentencePiece tokenizer over the real Llama-2 tokenizer.model (32,000 pieces, byte
// fallback): known ids, lossless round trips for ASCII, accents, CJK and emoji, byte-fallback
// pieces, range checks, and a ModelError naming the file for a missing or corrupt model.
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <optional>
#include <stdexcept>

#include "core/model/model_error.h"
#include "core/tokenizer/tokenizer.h"

using namespace engram;

namespace {

const char* const kLlamaTokenizer = ENGRAM_TEST_DATA "/models/llama-gqa/tokenizer.model";

QString toQ(const std::vector<int32_t>& ids) {
  QStringList parts;
  for (const int32_t id : ids)
    parts << QString::number(id);
  return QStringLiteral("[") + parts.join(QStringLiteral(", ")) + QStringLiteral("]");
}

// The ModelError thrown by loading `file`, or an empty optional with `why` filled in.
std::optional<ModelError> loadError(const std::filesystem::path& file, QString* why) {
  try {
    Tokenizer::load(file);
    *why = QStringLiteral("nothing thrown");
  } catch (const ModelError& e) {
    return e;
  } catch (const std::exception& e) {
    *why = QStringLiteral("not a ModelError: ") + QString::fromUtf8(e.what());
  }
  return std::nullopt;
}

}  // namespace

class TestTokenizer : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<Tokenizer> tokenizer_;

 private Q_SLOTS:
  void initTestCase() { tokenizer_ = Tokenizer::load(kLlamaTokenizer); }

  void llamaVocabularyHasKnownSpecialIds() {
    QCOMPARE(tokenizer_->vocab_size(), 32000);
    QCOMPARE(tokenizer_->unk_id(), 0);
    QCOMPARE(tokenizer_->bos_id(), 1);
    QCOMPARE(tokenizer_->eos_id(), 2);
    QCOMPARE(tokenizer_->pad_id(), -1);
    QCOMPARE(tokenizer_->id_to_piece(0), std::string("<unk>"));
    QCOMPARE(tokenizer_->id_to_piece(1), std::string("<s>"));
    QCOMPARE(tokenizer_->id_to_piece(2), std::string("</s>"));
    QVERIFY(tokenizer_->is_control(1));
    QVERIFY(tokenizer_->is_control(2));
    QVERIFY(!tokenizer_->is_control(15043));
  }

  void helloWorldEncodesToKnownIdsWithoutBosOrEos() {
    const auto ids = tokenizer_->encode("Hello world");
    QVERIFY2(ids == std::vector<int32_t>({15043, 3186}), qPrintable(toQ(ids)));
    QCOMPARE(tokenizer_->id_to_piece(15043), std::string("\xE2\x96\x81Hello"));
  }

  void pieceToIdAnswersMinusOneOutsideTheVocabulary() {
    QCOMPARE(tokenizer_->piece_to_id("\xE2\x96\x81Hello"), 15043);
    QCOMPARE(tokenizer_->piece_to_id("<s>"), 1);
    QCOMPARE(tokenizer_->piece_to_id("<unk>"), 0);
    QCOMPARE(tokenizer_->piece_to_id("<|im_start|>"), -1);
    QCOMPARE(tokenizer_->piece_to_id(""), -1);
  }

  void decodeRoundTripsText_data() {
    QTest::addColumn<QString>("text");
    QTest::newRow("ascii") << QStringLiteral("The quick brown fox jumps over the lazy dog.");
    QTest::newRow("accents") << QStringLiteral("Café crème, naïve façade, Ångström, Straße");
    QTest::newRow("cjk") << QStringLiteral("日本語のテキストと中文文本，한국어 텍스트");
    QTest::newRow("emoji") << QStringLiteral("Launch 🚀 at 12:00 👩‍💻 🇫🇷 ok 😀");
    QTest::newRow("spaces and newlines")
        << QStringLiteral("  two  leading\n\n\tindented line\n   trailing   ");
    QTest::newRow("code") << QStringLiteral("for (int i = 0; i < n; ++i) { x[i] = '\\0'; }");
  }
  void decodeRoundTripsText() {
    QFETCH(QString, text);
    const std::string utf8 = text.toStdString();
    const auto ids = tokenizer_->encode(utf8);
    QVERIFY(!ids.empty());
    QCOMPARE(QString::fromStdString(tokenizer_->decode(ids)), text);
  }

  void charactersOutsideTheVocabularyFallBackToBytes() {
    // U+1F600 is not a piece: it is spelled by its four UTF-8 bytes F0 9F 98 80.
    const auto ids = tokenizer_->encode("\xF0\x9F\x98\x80");
    std::vector<int> bytes;
    for (const int32_t id : ids) {
      if (tokenizer_->is_byte(id)) bytes.push_back(tokenizer_->byte_value(id));
    }
    QVERIFY2(bytes == std::vector<int>({0xF0, 0x9F, 0x98, 0x80}), qPrintable(toQ(ids)));
    QCOMPARE(tokenizer_->id_to_piece(tokenizer_->piece_to_id("<0xF0>")), std::string("<0xF0>"));
    QCOMPARE(tokenizer_->byte_value(15043), -1);
    QCOMPARE(tokenizer_->decode(ids), std::string("\xF0\x9F\x98\x80"));
  }

  void decodeGivesNoTextForControlTokens() {
    QCOMPARE(tokenizer_->decode({1, 15043, 3186, 2}), std::string("Hello world"));
    QCOMPARE(tokenizer_->decode({1, 2}), std::string());
  }

  void decodeDropsOnlyTheFirstPiecesLeadingSpace() {
    QCOMPARE(tokenizer_->decode({3186}), std::string("world"));
    QCOMPARE(tokenizer_->decode({15043, 3186}), std::string("Hello world"));
  }

  void outOfRangeIdsThrowNamingTheId() {
    for (const int32_t bad : {32000, -1, 1 << 30}) {
      bool thrown = false;
      try {
        tokenizer_->decode({15043, bad});
      } catch (const std::out_of_range& e) {
        thrown = true;
        QVERIFY2(QString::fromUtf8(e.what()).contains(QString::number(bad)), e.what());
      }
      QVERIFY2(thrown, qPrintable(QString::number(bad)));
      QVERIFY_EXCEPTION_THROWN(tokenizer_->id_to_piece(bad), std::out_of_range);
      QVERIFY_EXCEPTION_THROWN(tokenizer_->is_control(bad), std::out_of_range);
    }
  }

  void missingModelFileThrowsModelErrorNamingTheFile() {
    QTemporaryDir dir;
    const std::filesystem::path file =
        dir.filePath(QStringLiteral("tokenizer.model")).toStdString();
    QString why;
    const auto error = loadError(file, &why);
    QVERIFY2(error.has_value(), qPrintable(why));
    QCOMPARE(error->file(), file.string());
    QVERIFY2(QString::fromUtf8(error->what()).contains(QString::fromStdString(file.string())),
             error->what());
    QVERIFY2(QString::fromStdString(error->problem()).contains(QStringLiteral("not found")),
             error->what());
  }

  void corruptModelFileThrowsModelErrorNamingTheFile_data() {
    QTest::addColumn<QByteArray>("contents");
    QTest::newRow("text") << QByteArray("this is not a sentencepiece model\n");
    QTest::newRow("empty") << QByteArray();
    QFile real(QString::fromUtf8(kLlamaTokenizer));
    QVERIFY(real.open(QIODevice::ReadOnly));
    QTest::newRow("truncated") << real.read(1000);
  }
  void corruptModelFileThrowsModelErrorNamingTheFile() {
    QFETCH(QByteArray, contents);
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("tokenizer.model"));
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(contents);
    f.close();
    QString why;
    const auto error = loadError(path.toStdString(), &why);
    QVERIFY2(error.has_value(), qPrintable(why));
    QCOMPARE(QString::fromStdString(error->file()), path);
    QVERIFY2(QString::fromUtf8(error->what()).contains(path), error->what());
  }
};

QTEST_MAIN(TestTokenizer)
#include "test_tokenizer.moc"
