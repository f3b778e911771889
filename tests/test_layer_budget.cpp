// Sensitivity-aware layer budgets (EpiCache §3.2, Eq. 10, with Engram's M/4 floor) and the stored
// calibration file: budgets always sum to L·M, respect the floor, are uniform at α = 0 or equal
// σ, grow with 1 − σ; the JSON round-trips and a bad or foreign file fails with a clear error.
#include <QtTest>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "core/policies/layer_budget.h"

using namespace engram;

namespace {

int64_t sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

LayerCalibration sample_calibration() {
  LayerCalibration c;
  c.model_fingerprint = "0123456789abcdef";
  c.model_name = "engram-tiny";
  c.key_cosine = {1.0, 0.97, 0.9123456789012345, 0.5, -0.25};
  c.sink = 16;
  c.window = 256;
  c.block = 512;
  c.tokens = 2048;
  c.samples = 1;
  c.text = "conversation seed 1";
  c.alpha = 1.25;
  c.date = "2026-11-25T17:00:00Z";
  c.dtype = "f32";
  return c;
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("engram-layer-budget-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

void write_text(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// The message of the LayerCalibrationError that `f` throws ("" when it throws none).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const LayerCalibrationError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

class LayerBudgetTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void budgetsSumToLayersTimesBudget() {
    const std::vector<std::vector<double>> cases = {
        {1.0, 0.99, 0.95, 0.8, 0.97, 0.999},
        {1.0, 0.2, 0.2, 0.2},
        {0.3, 0.31, 0.32},
        {1.0, 1.0, 0.0},
        {0.123, 0.456, 0.789, 0.012, 0.999, 0.5, 0.75},
    };
    for (const auto& cos : cases) {
      for (int64_t m : {1, 3, 7, 100, 512, 1023, 2048}) {
        for (double alpha : {0.0, 1.0, 1.2, 2.0, 4.0}) {
          const auto b = allocate_layer_budgets(cos, m, alpha);
          QCOMPARE(b.size(), cos.size());
          QCOMPARE(sum(b), static_cast<int64_t>(cos.size()) * m);
          for (int64_t x : b)
            QVERIFY2(x >= m / 4,
                     qPrintable(QString("M=%1 alpha=%2 got %3").arg(m).arg(alpha).arg(x)));
        }
      }
    }
  }

  void floorIsAQuarterOfTheBudget() {
    // Layer 0 never moves (σ = 1): without the floor it would get nothing.
    const auto b = allocate_layer_budgets({1.0, 0.5, 0.5, 0.5}, 512, 2.0);
    QCOMPARE(b[0], int64_t{128});
    QCOMPARE(b[1], int64_t{640});
    QCOMPARE(b[2], int64_t{640});
    QCOMPARE(b[3], int64_t{640});
    // Several layers pinned; the rest share L·M − pinned·M/4 by their weights.
    const auto c = allocate_layer_budgets({0.99, 0.999, 0.5, 0.0}, 400, 2.0);
    QCOMPARE(c[0], int64_t{100});
    QCOMPARE(c[1], int64_t{100});
    QCOMPARE(sum(c), int64_t{1600});
    // weights 0.25 and 1: the 1400 left split 280 / 1120
    QCOMPARE(c[2], int64_t{280});
    QCOMPARE(c[3], int64_t{1120});
  }

  void matchesEquationTenWhenNoLayerIsFloored() {
    // s = (0.2, 0.4, 0.4), α = 1: shares 0.2, 0.4, 0.4 of 3·1000.
    const auto b = allocate_layer_budgets({0.8, 0.6, 0.6}, 1000, 1.0);
    QCOMPARE(b, (std::vector<int64_t>{600, 1200, 1200}));
    // 1 : 1 : 2 of 6 is 1.5, 1.5, 3: the one token left over goes to the lower of the tied layers.
    QCOMPARE(allocate_layer_budgets({0.0, 0.0, -1.0}, 2, 1.0), (std::vector<int64_t>{2, 1, 3}));
  }

  void ceilingCapsALayerAndFeedsTheOthers() {
    const std::vector<double> cos = {1.0, 0.9, 0.5, 0.9};  // weights 0, .01, .25, .01
    const auto free = allocate_layer_budgets(cos, 100, 2.0);
    QVERIFY(free[2] > 150);
    // Layer 2 held at 150; layer 0 at the floor; 225 left for layers 1 and 3 (tie: lower first).
    QCOMPARE(allocate_layer_budgets(cos, 100, 2.0, 150), (std::vector<int64_t>{25, 113, 150, 112}));
    // A ceiling nothing reaches changes nothing.
    QCOMPARE(allocate_layer_budgets(cos, 100, 2.0, 100000), free);
    // Every weighted layer at the ceiling: the unweighted ones take what is left.
    QCOMPARE(allocate_layer_budgets({1.0, 0.5}, 100, 1.0, 120), (std::vector<int64_t>{80, 120}));
    for (int64_t ceiling : {100, 101, 130, 250, 400}) {
      const auto b = allocate_layer_budgets(cos, 100, 2.0, ceiling);
      QCOMPARE(sum(b), int64_t{400});
      for (int64_t x : b)
        QVERIFY(x >= 25 && x <= ceiling);
    }
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, allocate_layer_budgets(cos, 100, 2.0, 99));
  }

  void alphaZeroOrEqualSigmaIsUniform() {
    const std::vector<double> cos = {1.0, 0.9, 0.3, 0.95};
    QCOMPARE(allocate_layer_budgets(cos, 512, 0.0), std::vector<int64_t>(4, 512));
    QCOMPARE(allocate_layer_budgets({0.7, 0.7, 0.7}, 1024, 2.0), std::vector<int64_t>(3, 1024));
    // Nothing moved anywhere (Σw = 0): uniform, not a division by zero.
    QCOMPARE(allocate_layer_budgets({1.0, 1.0}, 100, 2.0), std::vector<int64_t>(2, 100));
    // σ a hair above 1 from rounding counts as 1.
    QCOMPARE(allocate_layer_budgets({1.0 + 1e-12, 1.0}, 100, 2.0), std::vector<int64_t>(2, 100));
  }

  void budgetGrowsWithSensitivity() {
    const std::vector<double> cos = {0.999, 0.95, 0.91, 0.9, 0.85, 0.7, 0.69, 0.4};
    for (double alpha : {0.5, 1.0, 2.0, 3.0}) {
      for (int64_t m : {64, 512, 2048}) {
        const auto b = allocate_layer_budgets(cos, m, alpha);
        for (size_t l = 1; l < b.size(); ++l)
          QVERIFY(b[l] >= b[l - 1]);  // 1 − σ grows with l
        QVERIFY(b.back() > b.front());
      }
    }
    // A larger α gives the most sensitive layer more.
    QVERIFY(allocate_layer_budgets(cos, 512, 3.0).back() >
            allocate_layer_budgets(cos, 512, 1.0).back());
  }

  void extremeAlphaStaysFinite() {
    // (1e-16)^25 underflows a double: such a layer counts as unweighted, the others share.
    const auto b = allocate_layer_budgets({1.0 - 1e-16, 0.5, 0.25}, 512, 25.0);
    QCOMPARE(sum(b), int64_t{1536});
    QCOMPARE(b[0], int64_t{128});
    QVERIFY(b[2] > b[1]);
    const auto c = allocate_layer_budgets({1.0 - 1e-16, 0.5, 0.25}, 512, 25.0, 600);
    QCOMPARE(c, (std::vector<int64_t>{336, 600, 600}));
  }

  void badArgumentsThrow() {
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, allocate_layer_budgets({}, 512));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, allocate_layer_budgets({0.5}, 0));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, allocate_layer_budgets({0.5}, 8, -1.0));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, allocate_layer_budgets({0.5, std::nan("")}, 8));
  }

  void calibrationRoundTripsThroughTheFile() {
    TempDir dir;
    const LayerCalibration c = sample_calibration();
    const auto path = layer_calibration_path(dir.path, c.model_fingerprint);
    QCOMPARE(path, dir.path / "calibration" / "0123456789abcdef.json");
    write_layer_calibration(path, c);
    const LayerCalibration r = read_layer_calibration(path, c.model_fingerprint, 5);
    QCOMPARE(r.model_fingerprint, c.model_fingerprint);
    QCOMPARE(r.model_name, c.model_name);
    QCOMPARE(r.key_cosine, c.key_cosine);  // exact: JSON keeps every double's digits
    QCOMPARE(r.sink, c.sink);
    QCOMPARE(r.window, c.window);
    QCOMPARE(r.block, c.block);
    QCOMPARE(r.tokens, c.tokens);
    QCOMPARE(r.samples, c.samples);
    QCOMPARE(r.text, c.text);
    QCOMPARE(r.alpha, c.alpha);
    QCOMPARE(r.date, c.date);
    QCOMPARE(r.dtype, c.dtype);
    // No temporary file is left beside it.
    int files = 0;
    for (const auto& e : std::filesystem::directory_iterator(path.parent_path()))
      files += e.is_regular_file();
    QCOMPARE(files, 1);
    // Overwriting replaces it.
    LayerCalibration d = c;
    d.key_cosine[1] = 0.5;
    write_layer_calibration(path, d);
    QCOMPARE(read_layer_calibration(path).key_cosine[1], 0.5);
    // find: present for this model, absent for another.
    QVERIFY(find_layer_calibration(dir.path, c.model_fingerprint, 5).has_value());
    QVERIFY(!find_layer_calibration(dir.path, "fedcba9876543210", 5).has_value());
  }

  void unusualFingerprintsMakeSafeFileNames() {
    const auto p = layer_calibration_path("/p", "shape:tiny:seed3:ab/cd");
    QCOMPARE(p.parent_path(), std::filesystem::path("/p/calibration"));
    QCOMPARE(p.filename().string(), std::string("shape_tiny_seed3_ab_cd.json"));
  }

  void badFilesFailWithTheReason() {
    TempDir dir;
    const auto path = dir.path / "c.json";
    QVERIFY(error_of([&] { read_layer_calibration(path); }).find("cannot be opened") !=
            std::string::npos);
    write_text(path, "{\"format\": \"engram-layer-calibration\", ");
    QVERIFY(error_of([&] { read_layer_calibration(path); }).find("not JSON") != std::string::npos);
    write_text(path, "[1, 2]");
    QVERIFY(error_of([&] { read_layer_calibration(path); }).find("not a JSON object") !=
            std::string::npos);

    nlohmann_like_edit(path, "\"format\": \"engram-layer-calibration\"", "\"format\": \"other\"",
                       "'format'");
    nlohmann_like_edit(path, "\"version\": 1", "\"version\": 9", "version 9");
    nlohmann_like_edit(path, "\"sink\": 16,", "", "'sink' is missing");
    nlohmann_like_edit(path, "\"tokens\": 2048", "\"tokens\": \"many\"",
                       "'tokens' is not an integer");
    nlohmann_like_edit(path, "0.97", "1.5", "'key_cosine[1]'");
    nlohmann_like_edit(path, "\"alpha\": 1.25", "\"alpha\": -1.0", "'alpha' is negative");
  }

  void anotherModelsFileIsRefused() {
    TempDir dir;
    const LayerCalibration c = sample_calibration();
    const auto path = dir.path / "c.json";
    write_layer_calibration(path, c);
    const std::string other = error_of([&] { read_layer_calibration(path, "ffff", 5); });
    QVERIFY2(other.find("fingerprint 0123456789abcdef") != std::string::npos, other.c_str());
    QVERIFY2(other.find("engram-cli calibrate") != std::string::npos, other.c_str());
    const std::string layers =
        error_of([&] { read_layer_calibration(path, c.model_fingerprint, 7); });
    QVERIFY2(layers.find("5 layers, the model has 7") != std::string::npos, layers.c_str());
    // A file stored under this model's name that belongs to another is refused by find too.
    const auto stored = layer_calibration_path(dir.path, "ffff");
    write_layer_calibration(stored, c);
    QVERIFY(!error_of([&] { find_layer_calibration(dir.path, "ffff", 5); }).empty());
  }

 private:
  // Writes the sample calibration with `from` replaced by `to` and checks the read error names
  // `expect`.
  void nlohmann_like_edit(const std::filesystem::path& path, const std::string& from,
                          const std::string& to, const std::string& expect) {
    std::string text = layer_calibration_to_json(sample_calibration());
    const size_t at = text.find(from);
    QVERIFY2(at != std::string::npos, from.c_str());
    text.replace(at, from.size(), to);
    write_text(path, text);
    const std::string e = error_of([&] { read_layer_calibration(path); });
    QVERIFY2(e.find(expect) != std::string::npos, (expect + " not in: " + e).c_str());
    QVERIFY2(e.find(path.string()) != std::string::npos, e.c_str());
  }
};

QTEST_APPLESS_MAIN(LayerBudgetTest)
#include "test_layer_budget.moc"
