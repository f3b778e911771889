// engram::cli::Args over CLI11: values in both spellings, flags, positionals in order, the last
// of a repeated option, negative numbers and "-" as values, and every misuse a UsageError whose
// message names the flag (a typo must not silently change a benchmark).
#include <QtTest>

#include <string>
#include <vector>

#include "app/cli/cli_args.h"

using engram::cli::Args;
using engram::cli::UsageError;

namespace {

Args parse(std::vector<std::string> words) {
  words.insert(words.begin(), {"engram-cli", "bench"});
  std::vector<char*> argv;
  for (auto& w : words)
    argv.push_back(w.data());
  return Args(static_cast<int>(argv.size()), argv.data(), 2, {"seed", "out", "temperature"},
              {"greedy"});
}

std::string usage_error(std::vector<std::string> words) {
  try {
    parse(std::move(words));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

class CliArgsTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void valuesFlagsAndPositionals() {
    const Args a =
        parse({"decode", "--seed", "-5", "--out=-", "--greedy", "extra", "--temperature", "0.25"});
    QCOMPARE(a.integer("seed", 0), int64_t(-5));
    QCOMPARE(a.str("out", ""), std::string("-"));
    QVERIFY(a.has("greedy"));
    QCOMPARE(a.real("temperature", 1.0), 0.25);
    QCOMPARE(a.positional(), (std::vector<std::string>{"decode", "extra"}));
    QVERIFY(!parse({}).has("greedy"));
    QCOMPARE(parse({}).integer("seed", 42), int64_t(42));
  }

  void theLastOfARepeatedOptionWins() {
    QCOMPARE(parse({"--seed", "1", "--seed=2"}).integer("seed", 0), int64_t(2));
  }

  void afterDoubleDashEverythingIsPositional() {
    const Args a = parse({"a", "--", "--seed", "-x"});
    QCOMPARE(a.positional(), (std::vector<std::string>{"a", "--seed", "-x"}));
    QVERIFY(!a.has("seed"));
  }

  void misuseIsAUsageErrorNamingTheFlag() {
    QVERIFY(usage_error({"--seeed", "1"}).find("--seeed") != std::string::npos);
    QCOMPARE(usage_error({"--seed"}), std::string("--seed needs a value"));
    const Args bad = parse({"--seed", "3x", "--temperature", "warm"});
    try {
      (void)bad.integer("seed", 0);
      QFAIL("a bad integer must throw");
    } catch (const UsageError& e) {
      QCOMPARE(std::string(e.what()), std::string("--seed expects an integer, got '3x'"));
    }
    try {
      (void)bad.real("temperature", 1.0);
      QFAIL("a bad number must throw");
    } catch (const UsageError& e) {
      QCOMPARE(std::string(e.what()), std::string("--temperature expects a number, got 'warm'"));
    }
    QVERIFY(usage_error({"-q"}).find("-q") != std::string::npos);
    try {
      (void)parse({}).required("out");
      QFAIL("a missing required option must throw");
    } catch (const UsageError& e) {
      QCOMPARE(std::string(e.what()), std::string("--out is required"));
    }
  }
};

QTEST_GUILESS_MAIN(CliArgsTest)
#include "test_cli_args.moc"
