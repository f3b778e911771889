// Safetensors reading: every fixture folder loads tensor by tensor (single files and an index with
// shards), and every kind of malformed file is refused with a ModelError naming the file and the
// problem before a byte of tensor data is used.
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <cstring>
#include <functional>
#include <set>

#include "core/model/model_config.h"
#include "core/model/model_error.h"
#include "core/model/safetensors.h"

using namespace engram;

namespace {

const QString kModels = QStringLiteral(ENGRAM_TEST_DATA "/models");

// What a call threw: a ModelError's parts, or the text of whatever else it threw.
struct Thrown {
  bool model_error = false;
  bool anything = false;
  QString file;
  QString problem;
  QString what;
};

Thrown thrownBy(const std::function<void()>& call) {
  Thrown t;
  try {
    call();
  } catch (const ModelError& e) {
    t = {true, true, QString::fromStdString(e.file()), QString::fromStdString(e.problem()),
         QString::fromStdString(e.what())};
  } catch (const std::exception& e) {
    t.anything = true;
    t.what = QStringLiteral("not a ModelError: ") + QString::fromUtf8(e.what());
  }
  return t;
}

// The call must throw ModelError whose file contains `file_part` (and whose message shows it)
// and whose problem contains each of `problem_parts`.
#define VERIFY_MODEL_ERROR(call, file_part, problem_parts)                                    \
  do {                                                                                        \
    const Thrown thrown_ = thrownBy([&] { call; });                                           \
    QVERIFY2(thrown_.model_error,                                                             \
             qPrintable(thrown_.anything ? thrown_.what : QStringLiteral("nothing thrown"))); \
    QVERIFY2(thrown_.file.contains(file_part), qPrintable(thrown_.what));                     \
    QVERIFY2(thrown_.what.contains(file_part), qPrintable(thrown_.what));                     \
    for (const QString& part_ : QStringList(problem_parts)) {                                 \
      QVERIFY2(thrown_.problem.contains(part_, Qt::CaseInsensitive),                          \
               qPrintable(QStringLiteral("'%1' not in: %2").arg(part_, thrown_.what)));       \
    }                                                                                         \
  } while (0)

std::filesystem::path fsPath(const QString& path) {
  return std::filesystem::path(path.toStdString());
}

QByteArray leU64(quint64 v) {
  QByteArray out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

// A raw safetensors file: length prefix, header text, data bytes; nothing is checked.
void writeRaw(const QString& path, const QByteArray& bytes) {
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
  QCOMPARE(f.write(bytes), bytes.size());
}

QByteArray rawFile(const QByteArray& header, const QByteArray& data) {
  return leU64(static_cast<quint64>(header.size())) + header + data;
}

std::set<std::string> headerTensorNames(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  const QByteArray prefix = f.read(8);
  quint64 len = 0;
  for (int i = 7; i >= 0; --i)
    len = (len << 8) | static_cast<quint8>(prefix[i]);
  const QJsonObject header = QJsonDocument::fromJson(f.read(static_cast<qint64>(len))).object();
  std::set<std::string> names;
  for (const QString& key : header.keys()) {
    if (key != QStringLiteral("__metadata__")) names.insert(key.toStdString());
  }
  return names;
}

}  // namespace

class TestSafetensors : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void everyFixtureTensorLoadsWithItsConfigShape_data();
  void everyFixtureTensorLoadsWithItsConfigShape();
  void indexRoutesEachTensorToItsShard();
  void writtenFileReadsBackWithAlignedHeader();
  void emptyTensorIsAccepted();
  void atNamesTheMissingTensorAndFolder();
  void folderWithoutWeightsIsRefused();

  void fileShorterThanEightBytesIsRefused();
  void headerLengthPastFileEndIsRefused();
  void hugeHeaderIsRefused();
  void headerNotJsonIsRefused();
  void headerNotAnObjectIsRefused();
  void unknownDtypeIsNamedWithItsTensor();
  void negativeShapeIsRefused();
  void offsetsBeginAfterEndIsRefused();
  void shapeBytesMismatchIsNamed();
  void spanOutOfBoundsIsNamed();
  void overlappingSpansNameBothTensors();
  void truncatedFileIsRefused();
  void metadataMustMapStringsToStrings();
  void indexNamingMissingShardNamesShardAndIndex();
  void indexNamingTensorItsShardLacksIsRefused();
  void duplicateTensorAcrossShardsIsRefused();

 private:
  QTemporaryDir tmp_;
  QString tmpFile(const QString& name) const { return tmp_.filePath(name); }
};

void TestSafetensors::everyFixtureTensorLoadsWithItsConfigShape_data() {
  QTest::addColumn<QString>("folder");
  for (const char* name :
       {"llama-gqa", "qwen2-bias-tied", "qwen3-qknorm", "llama3-rope-scaling", "mistral"}) {
    QTest::newRow(name) << kModels + "/" + name;
  }
}

void TestSafetensors::everyFixtureTensorLoadsWithItsConfigShape() {
  QFETCH(QString, folder);
  const ModelConfig config = load_model_config(fsPath(folder));
  const WeightFiles weights = WeightFiles::open_folder(fsPath(folder));
  QVERIFY(!weights.names().empty());

  size_t total = 0;
  for (const std::string& name : weights.names()) {
    const TensorView& t = weights.at(name);
    QCOMPARE(t.name, name);
    QVERIFY2(t.data != nullptr, name.c_str());
    QCOMPARE(t.nbytes, static_cast<size_t>(t.numel()) * dtype_size(t.dtype));
    QVERIFY2(t.dtype == config.weight_dtype, name.c_str());
    // Touch every byte so a bad mapping shows here rather than in a model load.
    uint8_t sum = 0;
    for (size_t i = 0; i < t.nbytes; ++i)
      sum ^= static_cast<uint8_t>(t.data[i]);
    Q_UNUSED(sum);
    total += t.nbytes;
  }
  QCOMPARE(weights.total_bytes(), total);

  using Shape = std::vector<int64_t>;
  QCOMPARE(weights.at("model.embed_tokens.weight").shape,
           (Shape{config.vocab_size, config.hidden_size}));
  QCOMPARE(weights.at("model.norm.weight").shape, (Shape{config.hidden_size}));
  QCOMPARE(weights.find("lm_head.weight") == nullptr, config.tie_word_embeddings);
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    QCOMPARE(weights.at(p + "self_attn.q_proj.weight").shape,
             (Shape{config.q_size(), config.hidden_size}));
    QCOMPARE(weights.at(p + "self_attn.k_proj.weight").shape,
             (Shape{config.kv_size(), config.hidden_size}));
    QCOMPARE(weights.at(p + "self_attn.v_proj.weight").shape,
             (Shape{config.kv_size(), config.hidden_size}));
    QCOMPARE(weights.at(p + "self_attn.o_proj.weight").shape,
             (Shape{config.hidden_size, config.q_size()}));
    QCOMPARE(weights.at(p + "mlp.gate_proj.weight").shape,
             (Shape{config.intermediate_size, config.hidden_size}));
    QCOMPARE(weights.at(p + "mlp.up_proj.weight").shape,
             (Shape{config.intermediate_size, config.hidden_size}));
    QCOMPARE(weights.at(p + "mlp.down_proj.weight").shape,
             (Shape{config.hidden_size, config.intermediate_size}));
    QCOMPARE(weights.find(p + "self_attn.q_proj.bias") != nullptr, config.attention_bias);
    QCOMPARE(weights.find(p + "self_attn.q_norm.weight") != nullptr, config.qk_norm);
    if (config.attention_bias) {
      QCOMPARE(weights.at(p + "self_attn.k_proj.bias").shape, (Shape{config.kv_size()}));
    }
    if (config.qk_norm) {
      QCOMPARE(weights.at(p + "self_attn.k_norm.weight").shape, (Shape{config.head_dim}));
    }
  }

  // Nothing beyond what the files' headers list, and nothing left out.
  std::set<std::string> expected;
  for (const QString& file : QDir(folder).entryList({"*.safetensors"})) {
    const auto names = headerTensorNames(folder + "/" + file);
    expected.insert(names.begin(), names.end());
  }
  const auto names = weights.names();
  QCOMPARE(std::set<std::string>(names.begin(), names.end()), expected);
}

void TestSafetensors::indexRoutesEachTensorToItsShard() {
  const QString folder = kModels + "/llama3-rope-scaling";
  QFile index_file(folder + "/model.safetensors.index.json");
  QVERIFY(index_file.open(QIODevice::ReadOnly));
  const QJsonObject map =
      QJsonDocument::fromJson(index_file.readAll()).object().value("weight_map").toObject();
  QVERIFY(map.size() > 0);

  const WeightFiles weights = WeightFiles::open_folder(fsPath(folder));
  QCOMPARE(weights.names().size(), static_cast<size_t>(map.size()));
  std::set<std::string> shards;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const TensorView& t = weights.at(it.key().toStdString());
    const std::string shard = it.value().toString().toStdString();
    QCOMPARE(std::filesystem::path(t.file).filename().string(), shard);
    shards.insert(shard);
  }
  QCOMPARE(shards.size(), size_t{2});
}

void TestSafetensors::writtenFileReadsBackWithAlignedHeader() {
  const std::vector<float> a = {1.f, -2.f, 3.5f, 4.f, 5.f, 6.f};
  const std::vector<uint16_t> b = {0x3f80, 0x4000, 0xc040};  // bf16 1, 2, -3
  const std::vector<int64_t> c = {-7};
  const QString path = tmpFile("round_trip.safetensors");
  write_safetensors(fsPath(path),
                    {{"a", DType::kF32, {2, 3}, a.data()},
                     {"b.weight", DType::kBF16, {3}, b.data()},
                     {"scalar", DType::kI64, {}, c.data()}},
                    {{"format", "pt"}});

  QFile f(path);
  QVERIFY(f.open(QIODevice::ReadOnly));
  const QByteArray bytes = f.readAll();
  quint64 header_len = 0;
  for (int i = 7; i >= 0; --i)
    header_len = (header_len << 8) | static_cast<quint8>(bytes[i]);
  QCOMPARE(header_len % 8, quint64{0});

  const auto file = SafetensorsFile::open(fsPath(path));
  QCOMPARE(file->tensors().size(), size_t{3});
  QCOMPARE(file->metadata().at("format"), std::string("pt"));
  QCOMPARE(file->file_size(), static_cast<size_t>(bytes.size()));
  const TensorView* ta = file->find("a");
  QVERIFY(ta != nullptr);
  QCOMPARE(ta->dtype, DType::kF32);
  QCOMPARE(ta->shape, (std::vector<int64_t>{2, 3}));
  QCOMPARE(std::memcmp(ta->data, a.data(), sizeof(float) * a.size()), 0);
  const TensorView* tb = file->find("b.weight");
  QVERIFY(tb != nullptr);
  QCOMPARE(tb->dtype, DType::kBF16);
  QCOMPARE(std::memcmp(tb->data, b.data(), 6), 0);
  const TensorView* tc = file->find("scalar");
  QVERIFY(tc != nullptr);
  QCOMPARE(tc->numel(), int64_t{1});
  QCOMPARE(std::memcmp(tc->data, c.data(), 8), 0);
  QVERIFY(file->find("absent") == nullptr);
}

void TestSafetensors::emptyTensorIsAccepted() {
  const std::vector<float> a = {1.f, 2.f};
  const QString path = tmpFile("empty_tensor.safetensors");
  write_safetensors(fsPath(path),
                    {{"empty", DType::kF32, {0, 4}, nullptr}, {"a", DType::kF32, {2}, a.data()}});
  const auto file = SafetensorsFile::open(fsPath(path));
  QCOMPARE(file->find("empty")->nbytes, size_t{0});
  QCOMPARE(file->find("a")->nbytes, size_t{8});
}

void TestSafetensors::atNamesTheMissingTensorAndFolder() {
  const QString folder = kModels + "/mistral";
  const WeightFiles weights = WeightFiles::open_folder(fsPath(folder));
  QVERIFY(weights.find("model.layers.9.mlp.up_proj.weight") == nullptr);
  VERIFY_MODEL_ERROR(weights.at("model.layers.9.mlp.up_proj.weight"), folder,
                     {"model.layers.9.mlp.up_proj.weight"});
}

void TestSafetensors::folderWithoutWeightsIsRefused() {
  QTemporaryDir dir;
  VERIFY_MODEL_ERROR(WeightFiles::open_folder(fsPath(dir.path())), dir.path(),
                     {"no model.safetensors or model.safetensors.index.json"});
}

void TestSafetensors::fileShorterThanEightBytesIsRefused() {
  const QString path = tmpFile("short.safetensors");
  writeRaw(path, QByteArray("\x05\x00\x00", 3));
  VERIFY_MODEL_ERROR(SafetensorsFile::open(fsPath(path)), path, {"shorter than"});
}

void TestSafetensors::headerLengthPastFileEndIsRefused() {
  const QString path = tmpFile("past_end.safetensors");
  writeRaw(path, leU64(4096) + QByteArray("{}      "));
  VERIFY_MODEL_ERROR(SafetensorsFile::open(fsPath(path)), path,
                     (QStringList{"header length", "file end"}));
}

void TestSafetensors::hugeHeaderIsRefused() {
  const QString path = tmpFile("huge.safetensors");
  writeRaw(path, leU64(200ull * 1000 * 1000) + QByteArray("{}      "));
  VERIFY_MODEL_ERROR(SafetensorsFile::open(fsPath(path)), path, {"huge header"});
}

void TestSafetensors::headerNotJsonIsRefused() {
  const QString path = tmpFile("not_json.safetensors");
  writeRaw(path, rawFile("{\"a\": {\"dtype\": ", QByteArray(8, '\0')));
  VERIFY_MODEL_ERROR(SafetensorsFile::open(fsPath(path)), path, {"not valid JSON"});
}

void TestSafetensors::headerNotAnObjectIsRefused() {
  const QString path = tmpFile("array.safetensors");
  writeRaw(path, rawFile("[1, 2, 3]", {}));
  VERIFY_MODEL_ERROR(SafetensorsFile::open(fsPath(path)), path, {"not a JSON object"});
}

void TestSafetensors::unknownDtypeIsNamedWithItsTensor() {
  const QString path = tmpFile("dtype.safetensors");
  writeRaw(path, rawFile(R"({"w": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}})",
                         QByteArray(4, '\0')));
  VERIFY_MODEL_ERROR(SafetensorsFile::open(fsPath(path)), path,
                     (QStringList{"unknown dtype", "F8_E4M3", "'w'"}));
}

void TestSafetensors::negativeShapeIsRefused() {
  const QString path = tmpFile("negative.safetensors");
  writeRaw(path, rawFile(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
                         QByteArray(4, '\0')));
  VERIFY_MODEL_ERROR(SafetensorsFile::open(fsPath(path)), path, (QStringList{"'w'", "shape"}));
}

void TestSafetensors::offsetsBeginAfterEndIsRefused() {
  const QString path = tmpFile("reversed.safetensors");
  writeRaw(path, rawFile(R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": [8, 4]}})",
                         QByteArray(8, '\0')));
  VERIFY_MODEL_ERROR(SafetensorsFile::open(fsPath(path)), path, (QStringList{"'w'", "after end"}));
}

void TestSafetensors::shapeBytesMismatchIsNamed() {
  const QString path = tmpFile("mismatch.safetensors");
  // [2, 3] of F32 needs 24 bytes; the span holds 16.
  writeRaw(path, rawFile(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]}})",
                         QByteArray(16, '\0')));
  VERIFY_MODEL_ERROR(SafetensorsFile::open(fsPath(path)), path,
                     (QStringList{"'w'", "shape/bytes mismatch", "24", "16"}));
}

void TestSafetensors::spanOutOfBoundsIsNamed() {
  const QString path = tmpFile("out_of_bounds.safetensors");
  // "far" starts past a gap and ends beyond the 16-byte data area.
  writeRaw(path, rawFile(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                             "far": {"dtype": "F32", "shape": [2], "data_offsets": [64, 72]}})",
                         QByteArray(16, '\0')));
  VERIFY_MODEL_ERROR(SafetensorsFile::open(fsPath(path)), path,
                     (QStringList{"'far'", "out of bounds"}));
}

void TestSafetensors::overlappingSpansNameBothTensors() {
  const QString path = tmpFile("overlap.safetensors");
  writeRaw(path, rawFile(R"({"b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
                             "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                         QByteArray(12, '\0')));
  VERIFY_MODEL_ERROR(SafetensorsFile::open(fsPath(path)), path,
                     (QStringList{"'a'", "'b'", "overlap"}));
}

void TestSafetensors::truncatedFileIsRefused() {
  // A valid file with its last bytes cut off, as an interrupted download leaves it.
  const std::vector<float> a(16, 1.f);
  const std::vector<float> b(16, 2.f);
  const QString full = tmpFile("full.safetensors");
  write_safetensors(fsPath(full),
                    {{"a", DType::kF32, {16}, a.data()}, {"b", DType::kF32, {4, 4}, b.data()}});
  QFile f(full);
  QVERIFY(f.open(QIODevice::ReadOnly));
  const QByteArray bytes = f.readAll();
  const QString path = tmpFile("truncated.safetensors");
  writeRaw(path, bytes.left(bytes.size() - 10));
  VERIFY_MODEL_ERROR(SafetensorsFile::open(fsPath(path)), path, (QStringList{"truncated", "'b'"}));
}

void TestSafetensors::metadataMustMapStringsToStrings() {
  const QString path = tmpFile("metadata.safetensors");
  writeRaw(path, rawFile(R"({"__metadata__": {"format": 3}})", {}));
  VERIFY_MODEL_ERROR(SafetensorsFile::open(fsPath(path)), path,
                     (QStringList{"__metadata__", "format"}));
}

void TestSafetensors::indexNamingMissingShardNamesShardAndIndex() {
  QTemporaryDir dir;
  const std::vector<float> a = {1.f};
  write_safetensors(fsPath(dir.filePath("shard-1.safetensors")),
                    {{"a", DType::kF32, {1}, a.data()}});
  writeRaw(dir.filePath("model.safetensors.index.json"),
           R"({"weight_map": {"a": "shard-1.safetensors", "b": "shard-2.safetensors"}})");
  VERIFY_MODEL_ERROR(WeightFiles::open_folder(fsPath(dir.path())), "model.safetensors.index.json",
                     {"shard-2.safetensors"});
}

void TestSafetensors::indexNamingTensorItsShardLacksIsRefused() {
  QTemporaryDir dir;
  const std::vector<float> a = {1.f};
  write_safetensors(fsPath(dir.filePath("shard-1.safetensors")),
                    {{"a", DType::kF32, {1}, a.data()}});
  writeRaw(dir.filePath("model.safetensors.index.json"),
           R"({"weight_map": {"a": "shard-1.safetensors", "ghost": "shard-1.safetensors"}})");
  VERIFY_MODEL_ERROR(WeightFiles::open_folder(fsPath(dir.path())), "shard-1.safetensors",
                     (QStringList{"'ghost'", "model.safetensors.index.json", "missing"}));
}

void TestSafetensors::duplicateTensorAcrossShardsIsRefused() {
  QTemporaryDir dir;
  const std::vector<float> a = {1.f};
  write_safetensors(fsPath(dir.filePath("shard-1.safetensors")),
                    {{"a", DType::kF32, {1}, a.data()}});
  write_safetensors(fsPath(dir.filePath("shard-2.safetensors")),
                    {{"a", DType::kF32, {1}, a.data()}, {"b", DType::kF32, {1}, a.data()}});
  writeRaw(dir.filePath("model.safetensors.index.json"),
           R"({"weight_map": {"a": "shard-1.safetensors", "b": "shard-2.safetensors"}})");
  VERIFY_MODEL_ERROR(WeightFiles::open_folder(fsPath(dir.path())), "shard-",
                     (QStringList{"'a'", "duplicate"}));
}

QTEST_MAIN(TestSafetensors)
#include "test_safetensors.moc"
