// QA metrics against hand-computed SQuAD values: normalisation, exact match, token F1 with
// repeated words and empty answers, and per-type means.
#include <QtTest>

#include "core/env/conversation_qa_metrics.h"

using namespace engram::env;

class TestConversationQaMetrics : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void normalisationDropsCasePunctuationArticlesAndSpace() {
    QCOMPARE(normalize_answer("  The Denver! "), std::string("denver"));
    QCOMPARE(normalize_answer("May 14, 2023."), std::string("may 14 2023"));
    QCOMPARE(normalize_answer("an apple\tpie"), std::string("apple pie"));
    QCOMPARE(normalize_answer("theater"), std::string("theater"));  // only whole words
    QCOMPARE(normalize_answer("A. An, the"), std::string(""));
  }

  void exactMatchComparesNormalisedAnswers() {
    QCOMPARE(exact_match("the Denver", "Denver"), 1.0);
    QCOMPARE(exact_match("may 14 2023", "May 14, 2023"), 1.0);
    QCOMPARE(exact_match("Denver, CO", "Denver"), 0.0);
    QCOMPARE(exact_match("Unknown.", "unknown"), 1.0);
  }

  void f1MatchesHandComputedValues() {
    QCOMPARE(token_f1("Denver", "Denver"), 1.0);
    // P = 1/2, R = 1 -> 2/3
    QVERIFY(qFuzzyCompare(token_f1("Denver Colorado", "Denver"), 2.0 / 3.0));
    // P = 2/3, R = 1 -> 0.8
    QVERIFY(qFuzzyCompare(token_f1("new york city", "york new"), 0.8));
    // pred [cat], gold [cat, cat]: common 1, P = 1, R = 1/2 -> 2/3
    QVERIFY(qFuzzyCompare(token_f1("the the cat", "cat cat"), 2.0 / 3.0));
    // pred [cat, cat, dog], gold [cat]: common 1 (counted once), P = 1/3, R = 1 -> 0.5
    QVERIFY(qFuzzyCompare(token_f1("cat cat dog", "cat"), 0.5));
    QCOMPARE(token_f1("Boston", "Denver"), 0.0);
    QCOMPARE(token_f1("", ""), 1.0);
    QCOMPARE(token_f1("the", "a"), 1.0);  // both empty after normalisation
    QCOMPARE(token_f1("unknown", ""), 0.0);
    QCOMPARE(token_f1("", "unknown"), 0.0);
  }

  void tallyAveragesPerTypeAndOverall() {
    QaTally t;
    t.add(QuestionType::kSingleHop, "Denver", "Denver");             // EM 1, F1 1
    t.add(QuestionType::kSingleHop, "Denver Colorado", "Denver");    // EM 0, F1 2/3
    t.add(QuestionType::kTemporal, "May 15, 2023", "May 14, 2023");  // EM 0, F1 2/3
    const auto per = t.per_type();
    QCOMPARE(per.size(), size_t(2));
    QCOMPARE(per.at(QuestionType::kSingleHop).count, int64_t{2});
    QCOMPARE(per.at(QuestionType::kSingleHop).exact_match, 0.5);
    QVERIFY(qFuzzyCompare(per.at(QuestionType::kSingleHop).f1, (1.0 + 2.0 / 3.0) / 2));
    QCOMPARE(per.at(QuestionType::kTemporal).exact_match, 0.0);
    QVERIFY(qFuzzyCompare(per.at(QuestionType::kTemporal).f1, 2.0 / 3.0));
    const QaScore all = t.overall();
    QCOMPARE(all.count, int64_t{3});
    QVERIFY(qFuzzyCompare(all.exact_match, 1.0 / 3.0));
    QVERIFY(qFuzzyCompare(all.f1, (1.0 + 4.0 / 3.0) / 3));
    QCOMPARE(QaTally().overall().count, int64_t{0});
  }
};

QTEST_GUILESS_MAIN(TestConversationQaMetrics)
#include "test_conversation_qa_metrics.moc"
