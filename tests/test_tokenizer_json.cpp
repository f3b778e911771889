// tokenizer.json against Hugging Face `tokenizers` token for token: small tokenizers trained on
// the GPU machine in each family's configuration (GPT-2, Llama-3, Qwen2 with NFC and Qwen3's
// <think>, Mistral Nemo's tekken, Llama-2 and Mistral v0.3 SentencePiece-style BPE with byte
// fallback), their ids and decoded text for multilingual, emoji, code, whitespace and special-token
// strings, 300 seeded random strings a family, and the decoded text of invalid UTF-8 byte runs
// (tests/data/tokenizers, made by tools/make_tokenizer_fixtures.py). Then streaming, folders, and
// hostile files.
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/model/model_error.h"
#include "core/tokenizer/token_stream.h"
#include "core/tokenizer/tokenizer.h"

using namespace engram;

namespace {

const std::filesystem::path kFixtures = ENGRAM_TEST_DATA "/tokenizers";
const char* const kFamilies[] = {"gpt2", "llama3", "qwen2", "tekken", "llama2_sp", "mistral_sp"};

nlohmann::json readJson(const std::filesystem::path& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

QString toQ(const std::vector<int32_t>& ids) {
  QStringList parts;
  for (const int32_t id : ids)
    parts << QString::number(id);
  return QStringLiteral("[") + parts.join(QStringLiteral(", ")) + QStringLiteral("]");
}

bool validUtf8(const std::string& s) {
  return QString::fromUtf8(s).toUtf8() == QByteArray::fromStdString(s);
}

void writeFile(const std::filesystem::path& file, const std::string& text) {
  std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
}

// The ModelError message for loading `file`, or a description of what happened instead.
QString loadError(const std::filesystem::path& file, bool* threw) {
  *threw = false;
  try {
    Tokenizer::load(file);
    return QStringLiteral("nothing thrown");
  } catch (const ModelError& e) {
    *threw = true;
    return QString::fromUtf8(e.what());
  } catch (const std::exception& e) {
    return QStringLiteral("not a ModelError: ") + QString::fromUtf8(e.what());
  }
}

}  // namespace

class TestTokenizerJson : public QObject {
  Q_OBJECT

 private:
  nlohmann::json cases_;

 private Q_SLOTS:
  void initTestCase() { cases_ = readJson(kFixtures / "cases.json"); }

  void encodeMatchesHuggingFace_data() {
    QTest::addColumn<QString>("family");
    QTest::addColumn<int>("index");
    for (const char* family : kFamilies) {
      const auto& encode = cases_["families"][family]["encode"];
      for (size_t i = 0; i < encode.size(); ++i) {
        QTest::addRow("%s/%zu", family, i) << QString::fromLatin1(family) << static_cast<int>(i);
      }
    }
  }
  void encodeMatchesHuggingFace() {
    QFETCH(QString, family);
    QFETCH(int, index);
    const auto tokenizer = Tokenizer::load(kFixtures / family.toStdString() / "tokenizer.json");
    const auto& c = cases_["families"][family.toStdString()]["encode"][static_cast<size_t>(index)];
    const std::string text = c["text"];
    const auto expected = c["ids"].get<std::vector<int32_t>>();
    const auto ids = tokenizer->encode(text);
    QVERIFY2(ids == expected, qPrintable(QString::fromUtf8(text) + QStringLiteral(": got ") +
                                         toQ(ids) + QStringLiteral(", HF ") + toQ(expected)));
    QCOMPARE(QString::fromStdString(tokenizer->decode(ids)),
             QString::fromStdString(c["decoded"].get<std::string>()));
  }

  // 300 random strings a family (seeded): corpus words, unseen scripts, combining marks, emoji
  // sequences, whitespace and digit runs, contractions, special-token spellings.
  void fuzzStringsMatchHuggingFace() {
    for (const char* family : kFamilies) {
      const auto tokenizer = Tokenizer::load(kFixtures / family / "tokenizer.json");
      const auto& fuzz = cases_["families"][family]["fuzz"];
      QVERIFY(fuzz.size() >= 100);
      int mismatches = 0;
      QString first;
      for (const auto& c : fuzz) {
        const std::string text = c["text"];
        const auto expected = c["ids"].get<std::vector<int32_t>>();
        const auto ids = tokenizer->encode(text);
        if (ids != expected || tokenizer->decode(ids) != c["decoded"].get<std::string>()) {
          if (mismatches++ == 0) {
            first = QString::fromUtf8(text) + QStringLiteral(": got ") + toQ(ids) +
                    QStringLiteral(", HF ") + toQ(expected);
          }
        }
      }
      QVERIFY2(mismatches == 0, qPrintable(QString::fromLatin1(family) + QStringLiteral(": ") +
                                           QString::number(mismatches) +
                                           QStringLiteral(" mismatches; first ") + first));
    }
  }

  void decodeOfInvalidUtf8MatchesHuggingFace() {
    for (const char* family : kFamilies) {
      const auto tokenizer = Tokenizer::load(kFixtures / family / "tokenizer.json");
      for (const auto& c : cases_["families"][family]["decode"]) {
        const auto ids = c["ids"].get<std::vector<int32_t>>();
        const std::string text = tokenizer->decode(ids);
        QVERIFY2(text == c["decoded"].get<std::string>(),
                 qPrintable(QString::fromLatin1(family) + QStringLiteral(" ") + toQ(ids) +
                            QStringLiteral(": ") + QString::fromStdString(text)));
        QVERIFY(validUtf8(text));
      }
    }
  }

  void vocabularyAndSpecialsComeFromTheFiles() {
    for (const char* family : kFamilies) {
      const auto tokenizer = Tokenizer::load(kFixtures / family / "tokenizer.json");
      QCOMPARE(tokenizer->vocab_size(), cases_["families"][family]["vocab_size"].get<int>());
    }
    const auto llama3 = Tokenizer::load(kFixtures / "llama3" / "tokenizer.json");
    QCOMPARE(llama3->id_to_piece(llama3->bos_id()), std::string("<|begin_of_text|>"));
    QCOMPARE(llama3->id_to_piece(llama3->eos_id()), std::string("<|eot_id|>"));
    QVERIFY(llama3->is_control(llama3->eos_id()));
    QCOMPARE(llama3->decode({llama3->eos_id()}), std::string());
    const auto qwen = Tokenizer::load(kFixtures / "qwen2" / "tokenizer.json");
    QCOMPARE(qwen->bos_id(), -1);
    QCOMPARE(qwen->id_to_piece(qwen->eos_id()), std::string("<|im_end|>"));
    // Qwen3's <think> is an added token that is not special: one id, and it decodes as text.
    const int32_t think = qwen->piece_to_id("<think>");
    QVERIFY(think >= 0);
    QVERIFY(!qwen->is_control(think));
    QCOMPARE(qwen->decode({think}), std::string("<think>"));
    const auto llama2 = Tokenizer::load(kFixtures / "llama2_sp" / "tokenizer.json");
    const int32_t byte_e2 = llama2->piece_to_id("<0xE2>");
    QVERIFY(llama2->is_byte(byte_e2));
    QCOMPARE(llama2->byte_value(byte_e2), 0xE2);
    QVERIFY(!llama2->is_byte(llama2->bos_id()));
    QCOMPARE(llama2->piece_to_id("no such piece"), -1);
    QVERIFY_THROWS_EXCEPTION(std::out_of_range, llama2->decode({llama2->vocab_size()}));
  }

  // HF cannot encode bytes that are not UTF-8; we can: byte-level spells them, byte fallback
  // gives their <0xNN> pieces, and decoding gives them back as U+FFFD.
  void invalidUtf8InTextIsEncodedByteForByte() {
    const std::string text = "ok \xFF\xC3 end \xE2\x82";
    for (const char* family : {"llama3", "qwen2", "gpt2", "llama2_sp"}) {
      const auto tokenizer = Tokenizer::load(kFixtures / family / "tokenizer.json");
      const auto ids = tokenizer->encode(text);
      std::string spelled;
      for (const int32_t id : ids)
        spelled += tokenizer->token_bytes(id);
      if (std::string(family) != "llama2_sp") QCOMPARE(spelled, text);
      const std::string decoded = tokenizer->decode(ids);
      QVERIFY2(validUtf8(decoded), family);
      QVERIFY2(QString::fromStdString(decoded).contains(QStringLiteral("ok")), family);
    }
  }

  // Streaming gives the same text as decode(), in valid UTF-8 chunks, even where a byte-level
  // token ends inside a character.
  void streamingMatchesDecode() {
    const std::string text =
        "Größe 我们今天 👨‍👩‍👧‍👦 ok\n\tdef f(x): return 1  ا😀 한국어 "
        "ꙮ "
        "𝔘 "
        "<think>x</think>";
    for (const char* family : kFamilies) {
      const auto tokenizer = Tokenizer::load(kFixtures / family / "tokenizer.json");
      const auto ids = tokenizer->encode(text);
      TokenStream stream(*tokenizer);
      std::string streamed;
      for (const int32_t id : ids) {
        const std::string chunk = stream.push(id);
        QVERIFY2(validUtf8(chunk), family);
        streamed += chunk;
      }
      streamed += stream.finish();
      QCOMPARE(QString::fromStdString(streamed), QString::fromStdString(tokenizer->decode(ids)));
    }
  }

  void folderWithOnlyTokenizerJsonLoadsIt() {
    const auto tokenizer = Tokenizer::load(kFixtures / "qwen2");
    QCOMPARE(tokenizer->model_file().filename().string(), std::string("tokenizer.json"));
    QCOMPARE(Tokenizer::find_in(kFixtures / "qwen2").filename().string(),
             std::string("tokenizer.json"));
    QTemporaryDir dir;
    bool threw = false;
    const QString message = loadError(dir.path().toStdString(), &threw);
    QVERIFY2(threw, qPrintable(message));
    QVERIFY2(message.contains(QStringLiteral("tokenizer.model")) &&
                 message.contains(QStringLiteral("tokenizer.json")) && message.contains(dir.path()),
             qPrintable(message));
    QVERIFY(Tokenizer::find_in(dir.path().toStdString()).empty());
  }

  // BOS/EOS named in tokenizer_config.json must be tokens; a pad token need not be.
  void tokenizerConfigNamesTokensOfTheFile() {
    QTemporaryDir dir;
    const std::filesystem::path folder = dir.path().toStdString();
    std::filesystem::copy_file(kFixtures / "llama3" / "tokenizer.json", folder / "tokenizer.json");
    writeFile(folder / "tokenizer_config.json",
              R"({"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|eot_id|>"},
                  "pad_token": "<pad>"})");
    const auto tokenizer = Tokenizer::load(folder);
    QCOMPARE(tokenizer->id_to_piece(tokenizer->eos_id()), std::string("<|eot_id|>"));
    QCOMPARE(tokenizer->pad_id(), -1);
    writeFile(folder / "tokenizer_config.json", R"({"eos_token": "<|im_end|>"})");
    bool threw = false;
    QString message = loadError(folder, &threw);
    QVERIFY2(threw && message.contains(QStringLiteral("tokenizer_config.json")) &&
                 message.contains(QStringLiteral("<|im_end|>")),
             qPrintable(message));
    writeFile(folder / "tokenizer_config.json", "{ truncated");
    message = loadError(folder, &threw);
    QVERIFY2(threw && message.contains(QStringLiteral("tokenizer_config.json")),
             qPrintable(message));
  }

  void hostileFilesGiveModelErrorNamingTheProblem_data() {
    QTest::addColumn<QString>("edit");
    QTest::addColumn<QString>("expected");
    QTest::newRow("truncated") << "truncate"
                               << "not valid JSON";
    QTest::newRow("not an object") << "[1, 2, 3]"
                                   << "top level is not an object";
    QTest::newRow("no model") << R"({"added_tokens": []})"
                              << "no \"model\"";
    QTest::newRow("vocab of wrong type") << "vocab=[1,2]"
                                         << "model.vocab is not an object";
    QTest::newRow("id of wrong type") << R"(vocab={"a": "zero"})"
                                      << "wrong type";
    QTest::newRow("negative id") << R"(vocab={"a": -5})"
                                 << "outside";
    QTest::newRow("huge id") << R"(vocab={"a": 99999999999})"
                             << "outside";
    QTest::newRow("duplicate id") << R"(vocab={"a": 0, "b": 0})"
                                  << "gives id 0 to both";
    QTest::newRow("merge of unknown token") << R"(merges=[["zz", "qq"]])"
                                            << "not in the vocabulary";
    QTest::newRow("merge not a pair") << R"(merges=[["a"]])"
                                      << "neither";
    QTest::newRow("unigram") << R"(type="Unigram")"
                             << "only BPE";
    QTest::newRow("bad regex") << "badregex"
                               << "does not compile";
    QTest::newRow("unknown decoder") << "decoder=WordPiece"
                                     << "decoder type 'WordPiece'";
    QTest::newRow("added id outside") << "added=999999999"
                                      << "outside";
    QTest::newRow("huge file") << "huge"
                               << "more than";
    QTest::newRow("deeply nested") << "nested"
                                   << "top level is not an object";
  }
  void hostileFilesGiveModelErrorNamingTheProblem() {
    QFETCH(QString, edit);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    const std::filesystem::path file = dir.filePath(QStringLiteral("tokenizer.json")).toStdString();
    const std::filesystem::path source = kFixtures / "qwen2" / "tokenizer.json";
    std::ifstream in(source, std::ios::binary);
    const std::string original((std::istreambuf_iterator<char>(in)), {});
    nlohmann::json spec = nlohmann::json::parse(original);
    const std::string e = edit.toStdString();
    if (e == "truncate") {
      writeFile(file, original.substr(0, original.size() / 2));
    } else if (e == "nested") {
      writeFile(file, std::string(200000, '[') + std::string(200000, ']'));
    } else if (e == "huge") {
      writeFile(file, original);
      std::filesystem::resize_file(file, std::uintmax_t{300} << 20);  // sparse: costs no disk
    } else {
      if (e.starts_with("vocab=")) {
        spec["model"]["vocab"] = nlohmann::json::parse(e.substr(6));
        spec["model"]["merges"] = nlohmann::json::array();
        spec["model"]["unk_token"] = nullptr;
        spec["added_tokens"] = nlohmann::json::array();
      } else if (e.starts_with("merges=")) {
        spec["model"]["merges"].push_back(nlohmann::json::parse(e.substr(7))[0]);
      } else if (e.starts_with("type=")) {
        spec["model"]["type"] = nlohmann::json::parse(e.substr(5));
      } else if (e == "badregex") {
        spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{L}+";
      } else if (e == "decoder=WordPiece") {
        spec["decoder"] = {{"type", "WordPiece"}};
      } else if (e == "added=999999999") {
        spec["added_tokens"][0]["id"] = 999999999;
      } else {
        spec = nlohmann::json::parse(e);
      }
      writeFile(file, spec.dump());
    }
    bool threw = false;
    const QString message = loadError(file, &threw);
    QVERIFY2(threw, qPrintable(message));
    QVERIFY2(message.contains(QString::fromStdString(file.string())), qPrintable(message));
    QVERIFY2(message.contains(expected), qPrintable(message));
  }
};

QTEST_MAIN(TestTokenizerJson)
#include "test_tokenizer_json.moc"
