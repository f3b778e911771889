// config.json reading: every fixture folder (classic and transformers 5 dialects) yields the values
// its JSON states, named shapes match the published models, and anything missing or unsupported is
// refused with a ModelError naming the file and the field.
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <functional>

#include "core/model/model_config.h"
#include "core/model/model_error.h"

using namespace engram;

namespace {

const QString kModels = QStringLiteral(ENGRAM_TEST_DATA "/models");

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

QJsonObject readObject(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  return QJsonDocument::fromJson(f.readAll()).object();
}

void writeObject(const QString& path, const QJsonObject& object) {
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
  f.write(QJsonDocument(object).toJson());
}

std::string text(const QJsonObject& object) {
  return QJsonDocument(object).toJson().toStdString();
}

// A fixture's config.json, for tests that change one field.
QJsonObject fixtureConfig(const char* folder) {
  return readObject(kModels + "/" + folder + "/config.json");
}

ModelConfig parse(const QJsonObject& object) {
  return parse_model_config(text(object), "config.json");
}

std::vector<int64_t> ids(const QJsonValue& v) {
  if (v.isArray()) {
    std::vector<int64_t> out;
    for (const QJsonValue& e : v.toArray())
      out.push_back(e.toInteger());
    return out;
  }
  return {v.toInteger()};
}

}  // namespace

class TestModelConfig : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void fixtureConfigMatchesItsJson_data();
  void fixtureConfigMatchesItsJson();
  void llamaClassicDialectReadsRopeThetaAndTorchDtype();
  void qwen2AlwaysHasAttentionBiasAndDerivesHeadDim();
  void qwen3V5DialectReadsRopeParametersAndQkNorm();
  void llama3V5DialectReadsLlama3Scaling();
  void mistralNullSlidingWindowMeansNone();
  void mistralIntegerSlidingWindowIsKept();
  void classicAndV5DialectsAgree();
  void linearRopeScalingIsRead();
  void kvHeadsAndHeadDimDefaultWhenAbsent();
  void generationConfigOverridesEos();
  void namedShapesMatchPublishedParameterCounts_data();
  void namedShapesMatchPublishedParameterCounts();
  void tinyShapeIsSmallLlama();
  void unknownShapeListsKnownNames();

  void configFileMissingIsNamed();
  void configNotJsonIsRefused();
  void missingFieldIsNamed_data();
  void missingFieldIsNamed();
  void unsupportedArchitectureIsNamed();
  void modelTypeDisagreeingWithArchitectureIsRefused();
  void unsupportedRopeTypeIsNamed_data();
  void unsupportedRopeTypeIsNamed();
  void unsupportedFieldIsNamed_data();
  void unsupportedFieldIsNamed();
  void headsNotDivisibleByKvHeadsIsRefused();
  void wrongFieldTypeIsNamed();
};

void TestModelConfig::fixtureConfigMatchesItsJson_data() {
  QTest::addColumn<QString>("folder");
  for (const char* name :
       {"llama-gqa", "qwen2-bias-tied", "qwen3-qknorm", "llama3-rope-scaling", "mistral"}) {
    QTest::newRow(name) << kModels + "/" + name;
  }
}

void TestModelConfig::fixtureConfigMatchesItsJson() {
  QFETCH(QString, folder);
  const QJsonObject json = readObject(folder + "/config.json");
  const QJsonObject gen = readObject(folder + "/generation_config.json");
  QVERIFY(!json.isEmpty());
  const ModelConfig c = load_model_config(fsPath(folder));

  QCOMPARE(QString::fromStdString(c.architecture), json["architectures"].toArray()[0].toString());
  QCOMPARE(QString::fromStdString(c.model_type), json["model_type"].toString());
  QCOMPARE(c.vocab_size, json["vocab_size"].toInteger());
  QCOMPARE(c.hidden_size, json["hidden_size"].toInteger());
  QCOMPARE(c.intermediate_size, json["intermediate_size"].toInteger());
  QCOMPARE(c.num_layers, json["num_hidden_layers"].toInteger());
  QCOMPARE(c.num_heads, json["num_attention_heads"].toInteger());
  QCOMPARE(c.num_kv_heads, json["num_key_value_heads"].toInteger());
  QCOMPARE(c.head_dim,
           json.contains("head_dim") ? json["head_dim"].toInteger() : c.hidden_size / c.num_heads);
  QCOMPARE(c.rms_norm_eps, json["rms_norm_eps"].toDouble());
  QCOMPARE(c.max_positions, json["max_position_embeddings"].toInteger());
  QCOMPARE(c.tie_word_embeddings, json["tie_word_embeddings"].toBool());
  const QJsonObject& ids_from = gen.isEmpty() ? json : gen;
  QCOMPARE(c.bos_token_id, ids_from["bos_token_id"].toInteger());
  QCOMPARE(c.eos_token_ids, ids(ids_from["eos_token_id"]));
  const QString dtype =
      json.contains("dtype") ? json["dtype"].toString() : json["torch_dtype"].toString();
  QCOMPARE(c.weight_dtype, dtype_from_name(dtype.toStdString()));
  const double theta = json.contains("rope_parameters")
                           ? json["rope_parameters"].toObject()["rope_theta"].toDouble()
                           : json["rope_theta"].toDouble();
  QCOMPARE(c.rope.theta, theta);
  QCOMPARE(c.q_size(), c.num_heads * c.head_dim);
  QVERIFY(c.parameter_count() > 0);
}

void TestModelConfig::llamaClassicDialectReadsRopeThetaAndTorchDtype() {
  const ModelConfig c = load_model_config(fsPath(kModels + "/llama-gqa"));
  QCOMPARE(c.weight_dtype, DType::kBF16);
  QCOMPARE(c.rope.theta, 10000.0);
  QCOMPARE(c.rope.scaling, RopeScalingType::kNone);
  QCOMPARE(c.num_kv_heads, int64_t{2});
  QCOMPARE(c.head_dim, int64_t{16});
  QCOMPARE(c.rms_norm_eps, 1e-5);
  QVERIFY(!c.attention_bias);
  QVERIFY(!c.qk_norm);
  QVERIFY(!c.tie_word_embeddings);
  QVERIFY(!c.sliding_window.has_value());
  QVERIFY(c.is_eos(2));
  QVERIFY(!c.is_eos(1));
}

void TestModelConfig::qwen2AlwaysHasAttentionBiasAndDerivesHeadDim() {
  const ModelConfig c = load_model_config(fsPath(kModels + "/qwen2-bias-tied"));
  QCOMPARE(c.architecture, std::string("Qwen2ForCausalLM"));
  QVERIFY(c.attention_bias);  // the config never says so; Qwen2 hard-codes it
  QVERIFY(!c.qk_norm);
  QVERIFY(c.tie_word_embeddings);
  QCOMPARE(c.num_layers, int64_t{3});
  QCOMPARE(c.num_kv_heads, int64_t{1});
  QCOMPARE(c.head_dim, int64_t{16});
  QCOMPARE(c.rope.theta, 1e6);
  QCOMPARE(c.weight_dtype, DType::kF32);
  QCOMPARE(c.bos_token_id, int64_t{1000});
  QVERIFY(c.is_eos(1001));
  QVERIFY(!c.sliding_window.has_value());
}

void TestModelConfig::qwen3V5DialectReadsRopeParametersAndQkNorm() {
  const ModelConfig c = load_model_config(fsPath(kModels + "/qwen3-qknorm"));
  QVERIFY(c.qk_norm);
  QVERIFY(!c.attention_bias);
  QCOMPARE(c.head_dim, int64_t{32});  // explicit, not hidden / heads = 16
  QCOMPARE(c.q_size(), int64_t{128});
  QCOMPARE(c.kv_size(), int64_t{64});
  QCOMPARE(c.weight_dtype, DType::kF16);
  QCOMPARE(c.rope.theta, 1e6);
  QCOMPARE(c.rope.scaling, RopeScalingType::kNone);
  QVERIFY(c.tie_word_embeddings);
}

void TestModelConfig::llama3V5DialectReadsLlama3Scaling() {
  const ModelConfig c = load_model_config(fsPath(kModels + "/llama3-rope-scaling"));
  QCOMPARE(c.rope.scaling, RopeScalingType::kLlama3);
  QCOMPARE(c.rope.theta, 500000.0);
  QCOMPARE(c.rope.factor, 8.0);
  QCOMPARE(c.rope.low_freq_factor, 1.0);
  QCOMPARE(c.rope.high_freq_factor, 4.0);
  QCOMPARE(c.rope.original_max_positions, int64_t{16});
  QCOMPARE(c.num_heads, int64_t{8});
  QCOMPARE(c.head_dim, int64_t{8});
  QCOMPARE(c.weight_dtype, DType::kBF16);
  QCOMPARE(c.eos_token_ids, (std::vector<int64_t>{2, 3}));
  QVERIFY(c.is_eos(2));
  QVERIFY(c.is_eos(3));
  QVERIFY(!c.is_eos(1));
}

void TestModelConfig::mistralNullSlidingWindowMeansNone() {
  const ModelConfig c = load_model_config(fsPath(kModels + "/mistral"));
  QCOMPARE(c.architecture, std::string("MistralForCausalLM"));
  QVERIFY(!c.sliding_window.has_value());
  QCOMPARE(c.weight_dtype, DType::kF32);
  QCOMPARE(c.max_positions, int64_t{4096});
}

void TestModelConfig::mistralIntegerSlidingWindowIsKept() {
  QJsonObject json = fixtureConfig("mistral");
  json["sliding_window"] = 1024;
  const ModelConfig c = parse(json);
  QVERIFY(c.sliding_window.has_value());
  QCOMPARE(*c.sliding_window, int64_t{1024});
}

void TestModelConfig::classicAndV5DialectsAgree() {
  const QJsonObject v5 = fixtureConfig("llama3-rope-scaling");
  QJsonObject classic = v5;
  QJsonObject scaling = v5["rope_parameters"].toObject();
  classic["rope_theta"] = scaling.take("rope_theta");
  scaling["type"] = scaling.take("rope_type");  // the older spelling
  classic["rope_scaling"] = scaling;
  classic["torch_dtype"] = classic.take("dtype");
  classic.remove("rope_parameters");

  const ModelConfig a = parse(v5);
  const ModelConfig b = parse(classic);
  QCOMPARE(b.rope.scaling, a.rope.scaling);
  QCOMPARE(b.rope.theta, a.rope.theta);
  QCOMPARE(b.rope.factor, a.rope.factor);
  QCOMPARE(b.rope.low_freq_factor, a.rope.low_freq_factor);
  QCOMPARE(b.rope.high_freq_factor, a.rope.high_freq_factor);
  QCOMPARE(b.rope.original_max_positions, a.rope.original_max_positions);
  QCOMPARE(b.weight_dtype, a.weight_dtype);
}

void TestModelConfig::linearRopeScalingIsRead() {
  QJsonObject json = fixtureConfig("llama-gqa");
  json["rope_scaling"] = QJsonObject{{"rope_type", "linear"}, {"factor", 2.0}};
  const ModelConfig c = parse(json);
  QCOMPARE(c.rope.scaling, RopeScalingType::kLinear);
  QCOMPARE(c.rope.factor, 2.0);

  json["rope_scaling"] = QJsonObject{{"rope_type", "linear"}};
  VERIFY_MODEL_ERROR(parse(json), "config.json", (QStringList{"factor", "rope_scaling"}));
}

void TestModelConfig::kvHeadsAndHeadDimDefaultWhenAbsent() {
  QJsonObject json = fixtureConfig("llama-gqa");
  json.remove("num_key_value_heads");
  json["head_dim"] = QJsonValue::Null;
  const ModelConfig c = parse(json);
  QCOMPARE(c.num_kv_heads, c.num_heads);
  QCOMPARE(c.head_dim, int64_t{64 / 4});
}

void TestModelConfig::generationConfigOverridesEos() {
  QTemporaryDir dir;
  writeObject(dir.filePath("config.json"), fixtureConfig("llama-gqa"));
  writeObject(dir.filePath("generation_config.json"),
              QJsonObject{{"bos_token_id", 5}, {"eos_token_id", QJsonArray{7, 8}}});
  const ModelConfig c = load_model_config(fsPath(dir.path()));
  QCOMPARE(c.bos_token_id, int64_t{5});
  QCOMPARE(c.eos_token_ids, (std::vector<int64_t>{7, 8}));
  QVERIFY(!c.is_eos(2));  // config.json's eos no longer counts

  // Without generation_config.json, config.json's ids stand.
  QVERIFY(QFile::remove(dir.filePath("generation_config.json")));
  const ModelConfig plain = load_model_config(fsPath(dir.path()));
  QCOMPARE(plain.eos_token_ids, (std::vector<int64_t>{2}));

  writeObject(dir.filePath("generation_config.json"), QJsonObject{{"eos_token_id", "two"}});
  VERIFY_MODEL_ERROR(load_model_config(fsPath(dir.path())), "generation_config.json",
                     {"eos_token_id"});
}

void TestModelConfig::namedShapesMatchPublishedParameterCounts_data() {
  QTest::addColumn<QString>("name");
  QTest::addColumn<qint64>("parameters");  // as the published checkpoints report
  QTest::newRow("qwen2.5-0.5b") << "qwen2.5-0.5b" << qint64{494032768};
  QTest::newRow("qwen2.5-7b") << "qwen2.5-7b" << qint64{7615616512};
  QTest::newRow("qwen2.5-14b") << "qwen2.5-14b" << qint64{14770033664};
  QTest::newRow("llama3-8b") << "llama3-8b" << qint64{8030261248};
}

void TestModelConfig::namedShapesMatchPublishedParameterCounts() {
  QFETCH(QString, name);
  QFETCH(qint64, parameters);
  const ModelConfig c = named_shape(name.toStdString());
  QCOMPARE(c.parameter_count(), parameters);
  QCOMPARE(c.weight_dtype, DType::kBF16);
  QCOMPARE(c.num_heads % c.num_kv_heads, int64_t{0});
  QCOMPARE(c.attention_bias, c.model_type == "qwen2");
  QVERIFY(!c.eos_token_ids.empty());
  QVERIFY(c.bos_token_id >= 0);
}

void TestModelConfig::tinyShapeIsSmallLlama() {
  const ModelConfig c = named_shape("tiny");
  QCOMPARE(c.architecture, std::string("LlamaForCausalLM"));
  QCOMPARE(c.num_layers, int64_t{2});
  QCOMPARE(c.hidden_size, int64_t{64});
  QCOMPARE(c.num_heads, int64_t{4});
  QCOMPARE(c.num_kv_heads, int64_t{2});
  QCOMPARE(c.head_dim, int64_t{16});
  QCOMPARE(c.intermediate_size, int64_t{128});
  QCOMPARE(c.vocab_size, int64_t{512});
  QCOMPARE(c.max_positions, int64_t{2048});
  const auto names = named_shapes();
  QVERIFY(std::find(names.begin(), names.end(), "tiny") != names.end());
}

void TestModelConfig::unknownShapeListsKnownNames() {
  const Thrown t = thrownBy([] { named_shape("gpt-5"); });
  QVERIFY2(t.model_error, qPrintable(t.what));
  QVERIFY(t.problem.contains("gpt-5"));
  for (const std::string& name : named_shapes()) {
    QVERIFY2(t.problem.contains(QString::fromStdString(name)), qPrintable(t.what));
  }
}

void TestModelConfig::configFileMissingIsNamed() {
  QTemporaryDir dir;
  VERIFY_MODEL_ERROR(load_model_config(fsPath(dir.path())), "config.json", {"missing"});
}

void TestModelConfig::configNotJsonIsRefused() {
  VERIFY_MODEL_ERROR(parse_model_config("{\"hidden_size\": ", "config.json"), "config.json",
                     {"not valid JSON"});
}

void TestModelConfig::missingFieldIsNamed_data() {
  QTest::addColumn<QString>("field");
  for (const char* f : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                        "num_attention_heads", "rms_norm_eps", "max_position_embeddings"}) {
    QTest::newRow(f) << f;
  }
}

void TestModelConfig::missingFieldIsNamed() {
  QFETCH(QString, field);
  QJsonObject json = fixtureConfig("llama-gqa");
  json.remove(field);
  VERIFY_MODEL_ERROR(parse(json), "config.json", {"missing field '" + field + "'"});

  // Through the folder too, so the error names the file on disk.
  QTemporaryDir dir;
  writeObject(dir.filePath("config.json"), json);
  VERIFY_MODEL_ERROR(load_model_config(fsPath(dir.path())), dir.filePath("config.json"),
                     {"missing field '" + field + "'"});
}

void TestModelConfig::unsupportedArchitectureIsNamed() {
  QJsonObject json = fixtureConfig("llama-gqa");
  json["architectures"] = QJsonArray{"GPT2LMHeadModel"};
  json["model_type"] = "gpt2";
  VERIFY_MODEL_ERROR(
      parse(json), "config.json",
      (QStringList{"unsupported architecture", "GPT2LMHeadModel", "LlamaForCausalLM"}));
}

void TestModelConfig::modelTypeDisagreeingWithArchitectureIsRefused() {
  QJsonObject json = fixtureConfig("llama-gqa");
  json["model_type"] = "qwen2";
  VERIFY_MODEL_ERROR(parse(json), "config.json", (QStringList{"model_type", "qwen2"}));
}

void TestModelConfig::unsupportedRopeTypeIsNamed_data() {
  QTest::addColumn<QString>("fixture");
  QTest::addColumn<QString>("field");
  QTest::addColumn<QString>("key");
  QTest::addColumn<QString>("type");
  QTest::newRow("classic yarn") << "llama-gqa"
                                << "rope_scaling"
                                << "rope_type"
                                << "yarn";
  QTest::newRow("classic dynamic, old key") << "llama-gqa"
                                            << "rope_scaling"
                                            << "type"
                                            << "dynamic";
  QTest::newRow("classic su") << "mistral"
                              << "rope_scaling"
                              << "type"
                              << "su";
  QTest::newRow("v5 longrope") << "qwen3-qknorm"
                               << "rope_parameters"
                               << "rope_type"
                               << "longrope";
  QTest::newRow("v5 yarn") << "llama3-rope-scaling"
                           << "rope_parameters"
                           << "rope_type"
                           << "yarn";
}

void TestModelConfig::unsupportedRopeTypeIsNamed() {
  QFETCH(QString, fixture);
  QFETCH(QString, field);
  QFETCH(QString, key);
  QFETCH(QString, type);
  QJsonObject json = fixtureConfig(fixture.toUtf8().constData());
  QJsonObject rope = json[field].toObject();
  rope.remove("rope_type");
  rope[key] = type;
  rope["factor"] = 4.0;
  json[field] = rope;
  VERIFY_MODEL_ERROR(parse(json), "config.json", (QStringList{field, "'" + type + "'"}));
}

void TestModelConfig::unsupportedFieldIsNamed_data() {
  QTest::addColumn<QString>("fixture");
  QTest::addColumn<QString>("field");
  QTest::addColumn<QJsonValue>("value");
  QTest::newRow("hidden_act gelu") << "llama-gqa"
                                   << "hidden_act" << QJsonValue("gelu");
  QTest::newRow("mlp_bias") << "llama-gqa"
                            << "mlp_bias" << QJsonValue(true);
  QTest::newRow("partial_rotary_factor") << "llama-gqa"
                                         << "partial_rotary_factor" << QJsonValue(0.5);
  QTest::newRow("quantization_config")
      << "llama-gqa"
      << "quantization_config" << QJsonValue(QJsonObject{{"quant_method", "awq"}});
  QTest::newRow("qwen2 use_sliding_window") << "qwen2-bias-tied"
                                            << "use_sliding_window" << QJsonValue(true);
  QTest::newRow("qwen3 use_sliding_window") << "qwen3-qknorm"
                                            << "use_sliding_window" << QJsonValue(true);
  QTest::newRow("fp8 weights") << "qwen3-qknorm"
                               << "dtype" << QJsonValue("float8_e4m3fn");
}

void TestModelConfig::unsupportedFieldIsNamed() {
  QFETCH(QString, fixture);
  QFETCH(QString, field);
  QFETCH(QJsonValue, value);
  QJsonObject json = fixtureConfig(fixture.toUtf8().constData());
  json[field] = value;
  VERIFY_MODEL_ERROR(parse(json), "config.json", (QStringList{"unsupported", "'" + field + "'"}));
}

void TestModelConfig::headsNotDivisibleByKvHeadsIsRefused() {
  QJsonObject json = fixtureConfig("llama-gqa");
  json["num_key_value_heads"] = 3;
  VERIFY_MODEL_ERROR(parse(json), "config.json",
                     (QStringList{"num_attention_heads", "num_key_value_heads"}));
}

void TestModelConfig::wrongFieldTypeIsNamed() {
  QJsonObject json = fixtureConfig("llama-gqa");
  json["hidden_size"] = "64";
  VERIFY_MODEL_ERROR(parse(json), "config.json", (QStringList{"'hidden_size'", "integer"}));
}

QTEST_MAIN(TestModelConfig)
#include "test_model_config.moc"
