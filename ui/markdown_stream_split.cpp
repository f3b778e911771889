#include "ui/markdown_stream_split.h"

#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>
#include <QTextDocumentFragment>
#include <QTextLayout>
#include <QTextTable>

namespace engram::ui {
namespace {

bool is_space(QChar c) {
  return c == u' ' || c == u'\t' || c == u'\r';
}

bool is_blank(QStringView line) {
  for (QChar c : line)
    if (!is_space(c)) return false;
  return true;
}

bool is_letter_at(QStringView s, qsizetype i) {
  if (i >= s.size()) return false;
  if (s[i].isHighSurrogate() && i + 1 < s.size() && s[i + 1].isLowSurrogate())
    return QChar::isLetter(QChar::surrogateToUcs4(s[i], s[i + 1]));
  return s[i].isLetter();
}

bool is_ascii_punct(QChar c) {
  const char16_t u = c.unicode();
  return (u >= 0x21 && u <= 0x2f) || (u >= 0x3a && u <= 0x40) || (u >= 0x5b && u <= 0x60) ||
         (u >= 0x7b && u <= 0x7e);
}

bool is_ascii_letter(QChar c) {
  const char16_t u = c.unicode();
  return (u >= u'a' && u <= u'z') || (u >= u'A' && u <= u'Z');
}

// A fence line: leading spaces, then three or more backticks or tildes (an info string after
// backticks has no backtick). Plain: only spaces before it. Exotic: a tab or a container marker
// ("> ", "- ", "1. ") before it, where whether it opens or closes anything depends on containers
// this scan does not follow.
enum class FenceLine { kNone, kPlain, kExotic };

struct Fence {
  QChar ch;
  qsizetype length = 0;
  qsizetype indent = 0;
};

FenceLine fence_line(QStringView line, Fence* fence) {
  qsizetype i = 0;
  bool tab = false;
  while (i < line.size() && (line[i] == u' ' || line[i] == u'\t')) {
    tab = tab || line[i] == u'\t';
    ++i;
  }
  const qsizetype indent = i;
  // Past any container markers: digits, '.', ')', '>', '-', '+', '*' and spaces.
  qsizetype j = i;
  while (j < line.size() && (line[j].isDigit() || QStringView(u".)>-+* \t").contains(line[j])))
    ++j;
  auto run_at = [&](qsizetype k, Fence* f) {
    if (k >= line.size() || (line[k] != u'`' && line[k] != u'~')) return false;
    qsizetype e = k;
    while (e < line.size() && line[e] == line[k])
      ++e;
    if (e - k < 3) return false;
    if (line[k] == u'`' && line.mid(e).contains(u'`')) return false;
    if (f) *f = {line[k], e - k, k};
    return true;
  };
  if (run_at(i, fence)) return tab ? FenceLine::kExotic : FenceLine::kPlain;
  if (j > i && run_at(j, nullptr)) return FenceLine::kExotic;
  return FenceLine::kNone;
}

bool closes_fence(QStringView line, const Fence& open) {
  qsizetype i = 0;
  while (i < line.size() && line[i] == u' ')
    ++i;
  // A fence at column 0 closes at 0-3 spaces; an indented one (top-level, in a list item or
  // indented code: this scan cannot tell) only at its own indentation, which closes it in all.
  if (open.indent == 0 ? i > 3 : i != open.indent) return false;
  qsizetype e = i;
  while (e < line.size() && line[e] == open.ch)
    ++e;
  return e - i >= open.length && is_blank(line.mid(e));
}

// HTML blocks of CommonMark types 1-5 run over blank lines until their end marker; returns the
// marker (empty: none starts here, or it ends on its own line).
QString html_block_end(QStringView line) {
  qsizetype i = 0;
  while (i < line.size() && (line[i] == u' ' || line[i] == u'\t' || line[i] == u'>'))
    ++i;
  const QStringView rest = line.mid(i);
  if (!rest.startsWith(u'<')) return {};
  QString end;
  for (const char* tag : {"script", "pre", "style", "textarea"}) {
    const QString open = QStringLiteral("<") + QLatin1String(tag);
    if (rest.startsWith(open, Qt::CaseInsensitive) &&
        (rest.size() == open.size() || rest[open.size()] == u' ' || rest[open.size()] == u'\t' ||
         rest[open.size()] == u'>')) {
      end = QStringLiteral("</") + QLatin1String(tag) + QStringLiteral(">");
    }
  }
  if (end.isEmpty()) {
    if (rest.startsWith(u"<!--"))
      end = QStringLiteral("-->");
    else if (rest.startsWith(u"<?"))
      end = QStringLiteral("?>");
    else if (rest.startsWith(u"<![CDATA["))
      end = QStringLiteral("]]>");
    else if (rest.size() > 2 && rest[1] == u'!' && is_ascii_letter(rest[2]))
      end = QStringLiteral(">");
  }
  if (end.isEmpty() || rest.mid(2).contains(end, Qt::CaseInsensitive)) return {};
  return end;
}

// The line starts a paragraph or an ATX heading at column 0 and cannot be a list item, a quote, a
// fence, HTML, a table row, a thematic break or a link reference definition.
bool starts_paragraph(QStringView line) {
  if (line.isEmpty() || line.contains(u'|')) return false;
  const QChar c = line[0];
  if (is_letter_at(line, 0) || c == u'#') return true;
  if (c.isDigit()) {
    qsizetype i = 0;
    while (i < line.size() && line[i].isDigit())
      ++i;
    return i < line.size() && line[i] != u'.' && line[i] != u')';
  }
  if (c == u'*' || c == u'_')
    return line.size() > 2 && line[1] == c && line[2] != c && !is_space(line[2]);
  if (c == u'`') {
    const qsizetype run = line.size() > 1 && line[1] == u'`' ? 2 : 1;
    return line.size() > run && line[run] != u'`' && !is_space(line[run]);
  }
  return false;
}

}  // namespace

qsizetype markdown_block_freeze_point(QStringView text, qsizetype from, qsizetype* open_line) {
  if (open_line) *open_line = -1;
  qsizetype best = from;
  qsizetype pos = from;
  bool prev_blank = false;
  bool in_fence = false;
  Fence fence;
  QString html_end;
  for (;;) {
    const qsizetype nl = text.indexOf(u'\n', pos);
    if (nl < 0) {
      // The last line is not complete yet; a paragraph may start there (at column 0: an indented
      // line after a blank one may go on with a list item).
      if (open_line && (pos == from ||
                        (prev_blank && !in_fence && html_end.isEmpty() && is_letter_at(text, pos))))
        *open_line = pos;
      break;
    }
    const QStringView line = text.mid(pos, nl - pos);
    const bool blank = is_blank(line);
    if (in_fence) {
      if (closes_fence(line, fence)) {
        in_fence = false;
      } else if (fence.indent > 0 && !blank) {
        // A line left of an indented fence may end the list item holding it: stop here.
        qsizetype i = 0;
        while (i < line.size() && line[i] == u' ')
          ++i;
        if (i < fence.indent) return best;
      }
      prev_blank = false;
    } else if (!html_end.isEmpty()) {
      if (fence_line(line, nullptr) != FenceLine::kNone) return best;
      if (line.contains(html_end, Qt::CaseInsensitive)) html_end.clear();
      prev_blank = false;
    } else {
      if (prev_blank && pos > from && starts_paragraph(line)) best = pos;
      const FenceLine f = fence_line(line, &fence);
      if (f == FenceLine::kExotic) return best;
      if (f == FenceLine::kPlain)
        in_fence = true;
      else if (!blank)
        html_end = html_block_end(line);
      prev_blank = blank;
    }
    pos = nl + 1;
  }
  return best;
}

qsizetype markdown_paragraph_seam(QStringView p, qsizetype rendered) {
  if (rendered <= 0) return -1;
  qsizetype i = 0;
  qsizetype indent = 0;
  while (i < p.size() && (p[i] == u' ' || p[i] == u'\n')) {
    indent = p[i] == u'\n' ? 0 : indent + 1;
    ++i;
  }
  if (indent > 3 || !is_letter_at(p, i)) return -1;
  qsizetype r = 0;
  while (i < p.size()) {
    if (r == rendered) return p[i - 1] == u' ' && is_letter_at(p, i) ? i : -1;
    if (r > rendered) return -1;
    const QChar c = p[i];
    if (c == u'\n' || c == u'\r' || c == u'`' || c == u'[') return -1;
    if (c == u'\\') {
      if (i + 1 >= p.size() || p[i + 1] == u'\n') return -1;
      i += is_ascii_punct(p[i + 1]) ? 2 : 1;
      ++r;
      continue;
    }
    if (c == u'*' || c == u'_' || c == u'~') {
      // A run that is followed by a space cannot open emphasis or strikethrough; nothing before it
      // is open for it to close.
      qsizetype e = i;
      while (e < p.size() && p[e] == c)
        ++e;
      if (e >= p.size() || !is_space(p[e])) return -1;
      r += e - i;
      i = e;
      continue;
    }
    if (c == u'<') {
      if (i + 1 >= p.size()) return -1;
      const QChar n = p[i + 1];
      if (is_ascii_letter(n) || n == u'/' || n == u'!' || n == u'?') return -1;
    }
    if (c == u'&') {
      // An entity ("&amp;", "&#38;") renders as fewer characters: no seam after one.
      qsizetype e = i + 1;
      while (e < p.size() && !is_space(p[e]) && p[e] != u'\n')
        ++e;
      if (e >= p.size() || p.mid(i, e - i).contains(u';')) return -1;
    }
    ++r;
    ++i;
  }
  return -1;
}

bool markdown_has_soft_break(QStringView text) {
  const qsizetype nl = text.indexOf(u'\n');
  if (nl < 0) return false;
  const qsizetype end = text.indexOf(u'\n', nl + 1);
  return !is_blank(text.mid(nl + 1, end < 0 ? -1 : end - nl - 1));
}

namespace {

// Renders `markdown` after the block at `cursor` (at its end). insertFragment puts a fragment's
// first block into the block at the cursor, with that block's format (a heading or a list item
// would lose its own), and a block format copied from another document names objects (lists) of
// that document: so the fragment starts at the end of a placeholder paragraph, and each block of
// `markdown` comes after a block separator, its formats and lists copied by Qt.
void insert_rendered(QTextDocument& doc, QTextCursor& cursor, const QString& markdown) {
  QTextDocument part;
  part.setDefaultFont(doc.defaultFont());
  part.setMarkdown(QStringLiteral("x\n\n") + markdown);
  QTextCursor source(&part);
  source.setPosition(part.begin().length() - 1);
  source.movePosition(QTextCursor::End, QTextCursor::KeepAnchor);
  cursor.insertFragment(QTextDocumentFragment(source));
}

}  // namespace

int append_markdown(QTextDocument& doc, const QString& markdown) {
  if (doc.isEmpty()) {
    doc.setMarkdown(markdown);
    return 0;
  }
  QTextCursor cursor(&doc);
  cursor.movePosition(QTextCursor::End);
  const int position = cursor.position() + 1;
  insert_rendered(doc, cursor, markdown);
  return position;
}

void replace_markdown_from(QTextDocument& doc, int position, const QString& markdown) {
  if (position <= 0) {
    doc.setMarkdown(markdown);
    return;
  }
  QTextCursor cursor(&doc);
  cursor.setPosition(position - 1);
  cursor.movePosition(QTextCursor::End, QTextCursor::KeepAnchor);
  cursor.removeSelectedText();
  insert_rendered(doc, cursor, markdown);
}

void MarkdownStream::reset() {
  *this = MarkdownStream();
}

int MarkdownStream::put(QTextDocument& doc, const QString& markdown) {
  int position = tail_pos_;
  if (position < 0)
    position = append_markdown(doc, markdown);
  else
    replace_markdown_from(doc, position, markdown);
  last_parsed_ += markdown.size();
  if (seam_) {
    // The rest of a cut paragraph: no margin above it, the direction of the paragraph's start.
    QTextCursor cursor(doc.findBlock(position));
    QTextBlockFormat format = cursor.blockFormat();
    format.setTopMargin(0);
    format.setLayoutDirection(seam_direction_);
    cursor.setBlockFormat(format);
  }
  return position;
}

void MarkdownStream::render(QTextDocument& doc, const QString& text) {
  last_parsed_ = 0;
  active_ = true;
  if (seam_ && markdown_has_soft_break(QStringView(text).mid(frozen_))) {
    // A new line in a cut paragraph could make all of it a heading: render it whole again.
    frozen_ = clean_;
    tail_pos_ = clean_tail_pos_;
    seam_ = false;
    seams_blocked_ = true;
  }
  qsizetype paragraph = -1;  // where the paragraph being written starts, if it may be cut
  const qsizetype cut = markdown_block_freeze_point(text, frozen_, &paragraph);
  if (cut > frozen_) {
    put(doc, text.mid(frozen_, cut - frozen_));
    clean_ = frozen_ = cut;
    seam_ = seams_blocked_ = false;
    tail_pos_ = -1;
  }
  tail_pos_ = put(doc, text.mid(frozen_));
  if (frozen_ == clean_) clean_tail_pos_ = tail_pos_;
  try_seam(doc, text, paragraph);
}

void MarkdownStream::try_seam(QTextDocument& doc, const QString& text, qsizetype paragraph) {
  constexpr int kMinLines = 3;  // cut when the live paragraph has this many lines
  if (seams_blocked_ || paragraph < 0 || doc.textWidth() <= 0) return;
  const QStringView source = QStringView(text).mid(paragraph);
  doc.size();  // lays the document out
  const QTextBlock block = doc.lastBlock();
  if (block.position() < tail_pos_ || block.textList() || block.blockFormat().headingLevel() != 0 ||
      block.blockFormat().nonBreakableLines() || QTextCursor(block).currentTable())
    return;
  const QTextLayout* layout = block.layout();
  if (!layout || layout->lineCount() < kMinLines) return;
  for (int line = layout->lineCount() - 1; line >= kMinLines - 1; --line) {
    const int rendered = layout->lineAt(line).textStart();
    const qsizetype seam = markdown_paragraph_seam(source, rendered);
    if (seam <= 0) continue;
    // The text before the seam on its own must render as the block's start (less the space at
    // which the line broke, which no longer ends a line but a paragraph).
    QTextDocument check;
    check.setMarkdown(source.left(seam).toString());
    last_parsed_ += seam;
    QStringView expected = QStringView(block.text()).left(rendered);
    while (!expected.isEmpty() && expected.back() == u' ')
      expected.chop(1);
    if (check.blockCount() != 1 || check.begin().text() != expected) return;
    const Qt::LayoutDirection direction = block.textDirection();
    QTextBlockFormat before = block.blockFormat();
    before.setBottomMargin(0);
    before.setLayoutDirection(direction);
    QTextBlockFormat after = block.blockFormat();
    after.setTopMargin(0);
    after.setLayoutDirection(direction);
    const int position = block.position();
    QTextCursor cursor(&doc);
    cursor.setPosition(position + rendered);
    cursor.insertBlock(after, block.charFormat());
    QTextCursor(doc.findBlock(position)).setBlockFormat(before);
    frozen_ = paragraph + seam;
    tail_pos_ = position + rendered + 1;
    seam_ = true;
    seam_direction_ = direction;
    return;
  }
}

}  // namespace engram::ui
