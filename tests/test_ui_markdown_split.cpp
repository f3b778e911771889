// Cutting a streamed Markdown answer (ui/markdown_stream_split.h): freeze points only where no
// open block (fence, HTML block, list, quote, table) spans the cut and the next line starts a
// paragraph or heading; a document streamed through MarkdownStream, rendered after every character,
// equals one setMarkdown of the text so far (toHtml()) while parsing only the text after the last
// cut; seams in a long one-line paragraph keep its lines where they were (same height, same text)
// and bound what each render parses.
#include <QTextBlock>
#include <QTextDocument>
#include <QtTest>

#include "ui/markdown_stream_split.h"

using engram::ui::markdown_block_freeze_point;
using engram::ui::markdown_has_soft_break;
using engram::ui::markdown_paragraph_seam;
using engram::ui::MarkdownStream;

namespace {

QString html_of(const QString& markdown) {
  QTextDocument doc;
  doc.setMarkdown(markdown);
  return doc.toHtml();
}

// Every construct whose continuation could change earlier text, with blank lines inside.
const char* const kAnswer = R"md(# Streaming answers

Markdown answers arrive in pieces, and each piece is **rendered** again. Here is `inline code` and a [link](https://example.com).

## A list with blank lines between items

- first item

- second item, with a second paragraph

  that continues here

- third item

Text after the list.

1. one
2. two

   indented paragraph of two

3. three

```cpp
int main() {

  return 0;  // a blank line above, inside the fence
}
```

Looks like a paragraph but follows the fence.

~~~
tilde fence

Not a paragraph
~~~

| Name | Value |
|------|-------|
| a    | 1     |
| b    | 2     |

> A quote
>
> that goes on

Setext heading
--------------

**Bold start** of a paragraph, then `code` start:

`code` starts this one.

<!-- an HTML comment

Not a paragraph either -->

1. Install:

   ```bash
   pip install x

   more
   ```

2. Run it.

2024 was a year, and 3. is not a list here.

Final words with *emphasis* and ~~strike~~.
)md";

}  // namespace

class UiMarkdownSplitTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void freezePointsAreConservative() {
    struct Case {
      const char* text;
      const char* after;  // the text from the expected freeze point on; nullptr: none
    };
    const Case cases[] = {
        {"Para one.\n\nPara two.\n", "Para two.\n"},
        {"Para one.\n\nPara two", nullptr},  // the line at the cut is not complete yet
        {"# Title\n\n## Sub\n", "## Sub\n"},
        {"Intro\n\n- a\n\n- b\n", nullptr},           // a list item may continue the list
        {"- a\n\n- b\n\nAfter\n", "After\n"},         // a paragraph at column 0 ends it
        {"- a\n\n  b\n", nullptr},                    // indented: the item goes on
        {"1. a\n\n2. b\n", nullptr},                  // ordered list marker
        {"Text\n\n2024 was\n", "2024 was\n"},         // digits, not a list marker
        {"Text\n\n1) x\n", nullptr},                  // list marker with ')'
        {"```\ncode\n\nLooks like text\n", nullptr},  // inside a fence
        {"```\ncode\n\nx\n```\n\nAfter\n", "After\n"},
        {"````\na\n```\n\nStill code\n", nullptr},     // a shorter fence does not close it
        {"```\na\n    ```\n\nStill code\n", nullptr},  // nor one indented 4 spaces
        {"~~~\na\n```\n\nStill code\n", nullptr},      // nor one of the other character
        {"> ```\n> a\n\nB\n", nullptr},                // a fence in a quote stops the search
        {"   ```\n   a\n\nB\n", nullptr},              // still open at its own indentation
        {"   ```\n   a\n   ```\n\nB\n", "B\n"},
        {"   ```\na\n\nB\n", nullptr},  // left of an indented fence: stops the search
        {"Text\n\n| a | b |\n", nullptr},
        {"Text\n\nName | Age\n", nullptr},  // a table's header row
        {"Text\n\n> quote\n", nullptr},
        {"Text\n\n---\n", nullptr},
        {"Text\n\n***\n", nullptr},
        {"Text\n\n* item\n", nullptr},
        {"Text\n\n**Bold** start\n", "**Bold** start\n"},
        {"Text\n\n`code` start\n", "`code` start\n"},
        {"Text\n\n  Indented\n", nullptr},
        {"Text\n\n[x]: https://example.com\n", nullptr},
        {"Text\n\n<div>\n", nullptr},
        {"<!-- a\n\nB\n", nullptr},  // inside an HTML comment block
        {"<!-- a\n\nB -->\n\nC\n", "C\n"},
        {"<script>\n\nB\n", nullptr},
        {"<!-- a -->\n\nB\n", "B\n"},  // ends on its own line
    };
    for (const Case& c : cases) {
      const QString text = QString::fromUtf8(c.text);
      const qsizetype cut = markdown_block_freeze_point(text, 0);
      const QString after = cut > 0 ? text.mid(cut) : QString();
      QVERIFY2(
          c.after ? after == QString::fromUtf8(c.after) : cut == 0,
          qPrintable(QStringLiteral("%1 -> cut at %2 (\"%3\")").arg(text).arg(cut).arg(after)));
    }
  }

  // The check below can fail: a cut inside a fence renders differently.
  void aNaiveCutRendersDifferently() {
    const QString text = QString::fromUtf8(kAnswer);
    const qsizetype inside = text.indexOf(QStringLiteral("  return 0;"));
    QTextDocument doc;
    engram::ui::append_markdown(doc, text.left(inside));
    engram::ui::append_markdown(doc, text.mid(inside));
    QVERIFY(doc.toHtml() != html_of(text));
  }

  void streamedDocumentEqualsSetMarkdownAfterEveryCharacter() {
    const QString text = QString::fromUtf8(kAnswer);
    QTextDocument doc;
    MarkdownStream stream;
    qsizetype parsed_total = 0;
    QList<qsizetype> cuts;
    for (qsizetype n = 1; n <= text.size(); ++n) {
      const QString prefix = text.left(n);
      const qsizetype before = stream.frozen();
      stream.render(doc, prefix);
      parsed_total += stream.last_parsed();
      if (cuts.isEmpty() || cuts.back() != stream.frozen()) cuts << stream.frozen();
      QVERIFY(!stream.at_seam());                  // no text width: no seams
      QCOMPARE(stream.last_parsed(), n - before);  // only what follows the last cut
      if (doc.toHtml() != html_of(prefix)) {
        QFAIL(qPrintable(QStringLiteral("after %1 characters (cut at %2):\n%3")
                             .arg(n)
                             .arg(stream.frozen())
                             .arg(prefix.mid(stream.frozen()))));
      }
    }
    // It did cut, and at the places that matter.
    QVERIFY2(cuts.size() >= 10, qPrintable(QString::number(cuts.size())));
    for (const char* start :
         {"## A list", "Text after the list.", "Looks like a paragraph", "Setext heading",
          "**Bold start**", "`code` starts", "2024 was", "Final words"}) {
      QVERIFY2(cuts.contains(text.indexOf(QString::fromUtf8(start))), start);
    }
    for (const char* never : {"Not a paragraph\n~~~", "Not a paragraph either", "more\n"})
      QVERIFY2(!cuts.contains(text.indexOf(QString::fromUtf8(never))), never);
    // Whole-text renders would have parsed n(n+1)/2 characters.
    const qsizetype whole = text.size() * (text.size() + 1) / 2;
    QVERIFY2(parsed_total < whole / 4,
             qPrintable(QStringLiteral("parsed %1 of %2").arg(parsed_total).arg(whole)));
  }

  void seamsOnlyWhereNothingInlineIsOpen() {
    // rendered offset -> source offset
    QCOMPARE(markdown_paragraph_seam(u"one two three", 4), 4);
    QCOMPARE(markdown_paragraph_seam(u"  one two", 4), 6);   // leading spaces are not rendered
    QCOMPARE(markdown_paragraph_seam(u"one two", 2), -1);    // not after a space
    QCOMPARE(markdown_paragraph_seam(u"one 2two", 4), -1);   // not at a letter
    QCOMPARE(markdown_paragraph_seam(u"one\\* two", 5), 6);  // an escape renders one character
    QCOMPARE(markdown_paragraph_seam(u"a * b c", 6), 6);     // '*' before a space opens nothing
    QCOMPARE(markdown_paragraph_seam(u"a *b c", 5), -1);     // '*b' may open emphasis
    QCOMPARE(markdown_paragraph_seam(u"a _b c", 5), -1);
    QCOMPARE(markdown_paragraph_seam(u"a ~b c", 5), -1);
    QCOMPARE(markdown_paragraph_seam(u"a `b c", 5), -1);
    QCOMPARE(markdown_paragraph_seam(u"a [b c", 5), -1);
    QCOMPARE(markdown_paragraph_seam(u"a <b c", 5), -1);
    QCOMPARE(markdown_paragraph_seam(u"a < b c", 6), 6);
    QCOMPARE(markdown_paragraph_seam(u"a &amp; b c", 10), -1);
    QCOMPARE(markdown_paragraph_seam(u"AT&T is b", 8), 8);
    QCOMPARE(markdown_paragraph_seam(u"a\nb c", 4), -1);
    QCOMPARE(markdown_paragraph_seam(u"- a b", 4), -1);  // not a paragraph
    QCOMPARE(markdown_paragraph_seam(u"    a b", 2), -1);

    QVERIFY(!markdown_has_soft_break(u"rest of it"));
    QVERIFY(!markdown_has_soft_break(u"rest\n"));
    QVERIFY(!markdown_has_soft_break(u"rest\n  \nNext"));
    QVERIFY(markdown_has_soft_break(u"rest\n==="));
    QVERIFY(markdown_has_soft_break(u"rest\nmore"));
  }

  // A seam's two sides render as the paragraph's two parts, whatever follows.
  void seamSidesRenderAsTheWhole() {
    const QString para = QStringLiteral(
        "Plain words, an escaped \\* star, a * lone one, x < y, AT&T and 3.5 percent; then "
        "ünïcödé, 中文 and עברית words; *emphasis* comes late and `code` too.");
    QTextDocument whole;
    whole.setMarkdown(para);
    const QString rendered = whole.begin().text();
    int seams = 0;
    for (int r = 1; r < rendered.size(); ++r) {
      const qsizetype s = markdown_paragraph_seam(para, r);
      if (s < 0) continue;
      ++seams;
      QTextDocument before, after;
      before.setMarkdown(para.left(s));
      after.setMarkdown(para.mid(s));
      QCOMPARE(before.begin().text(), rendered.left(r).trimmed());
      QCOMPARE(after.begin().text(), rendered.mid(r));
      QVERIFY(r <= rendered.indexOf(QStringLiteral("emphasis")));  // never past an opener
    }
    QVERIFY2(seams > 10, qPrintable(QString::number(seams)));
  }

  // Streamed at a narrow and a wide width, wrapping as QTextEdit does, with seams in long
  // paragraphs (not in a list item's indented paragraph, which a seam would take out of the
  // list), the document is always as tall as one setMarkdown of the text so far.
  void heightMatchesAtEveryStep() {
    QString text = QString::fromUtf8(kAnswer);
    text += QStringLiteral(
        "- item\n\n  an indented paragraph of the item that is long enough to "
        "wrap over several lines at either width, so a seam could be tried "
        "here\n\n");
    for (int i = 0; i < 120; ++i)
      text += (i % 3 ? QStringLiteral("words ") : QStringLiteral("ünïcödé "));
    text += QStringLiteral("\n\nThe end.");
    QTextOption wrap;
    wrap.setWrapMode(QTextOption::WrapAtWordBoundaryOrAnywhere);
    for (int width : {100, 400}) {
      QTextDocument doc;
      doc.setDefaultTextOption(wrap);
      doc.setTextWidth(width);
      MarkdownStream stream;
      int seams = 0;
      for (qsizetype n = 5; n <= text.size() + 4; n += 5) {
        const QString prefix = text.left(n);
        stream.render(doc, prefix);
        seams += stream.at_seam() ? 1 : 0;
        QTextDocument ref;
        ref.setDefaultTextOption(wrap);
        ref.setTextWidth(width);
        ref.setMarkdown(prefix);
        QVERIFY2(qAbs(doc.size().height() - ref.size().height()) < 1.0,
                 qPrintable(QStringLiteral("width %1, %2 characters: %3 px, one setMarkdown %4 px")
                                .arg(width)
                                .arg(n)
                                .arg(doc.size().height())
                                .arg(ref.size().height())));
      }
      QVERIFY(seams > 0);
    }
    qsizetype open = 0;
    markdown_block_freeze_point(u"- a\n\n  with a second", 0, &open);
    QCOMPARE(open, -1);
    markdown_block_freeze_point(u"- a\n\nOn its own", 0, &open);
    QCOMPARE(open, 5);
  }

  // A long one-line paragraph streamed at a fixed width: cut at seams, it keeps the height and
  // text of one setMarkdown, and each render parses a few lines, not the paragraph.
  void longParagraphIsCutAtLineBreaks() {
    QString text = QStringLiteral("Intro paragraph.\n\n");
    const QStringList words = {QStringLiteral("memory"),   QStringLiteral("attention"),
                               QStringLiteral("tokens"),   QStringLiteral("cache"),
                               QStringLiteral("episodes"), QStringLiteral("ünïcödé"),
                               QStringLiteral("κλειδί"),   QStringLiteral("ключ")};
    for (int i = 0; text.size() < 6000; ++i)
      text += words[(i * 7 + i / 3) % words.size()] + QLatin1Char(' ');
    QTextDocument doc;
    doc.setTextWidth(400);
    MarkdownStream stream;
    qsizetype most = 0;
    bool cut = false;
    for (qsizetype n = 40; n <= text.size(); n += 17) {
      const QString prefix = text.left(n);
      stream.render(doc, prefix);
      cut = cut || stream.at_seam();
      if (n > 2000) most = std::max(most, stream.last_parsed());
      QTextDocument ref;
      ref.setTextWidth(400);
      ref.setMarkdown(prefix);
      QString shown = doc.toPlainText();
      shown.remove(QLatin1Char('\n'));
      QString want = ref.toPlainText();
      want.remove(QLatin1Char('\n'));
      QCOMPARE(shown, want);
      QVERIFY2(qAbs(doc.size().height() - ref.size().height()) < 1.0,
               qPrintable(QStringLiteral("%1 characters: %2 px, one setMarkdown %3 px")
                              .arg(n)
                              .arg(doc.size().height())
                              .arg(ref.size().height())));
    }
    QVERIFY(cut);
    QVERIFY2(most < 600, qPrintable(QStringLiteral("a render parsed %1 characters").arg(most)));
    // A new line in the cut paragraph (here a setext underline) renders it whole again.
    const QString heading = text + QStringLiteral("\n===\n");
    stream.render(doc, heading);
    QCOMPARE(doc.toHtml(), html_of(heading));
  }
};

QTEST_MAIN(UiMarkdownSplitTest)
#include "test_ui_markdown_split.moc"
