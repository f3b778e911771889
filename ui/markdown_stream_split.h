// Cutting a streamed Markdown answer so that only its unfinished end is parsed again on each render
// (ui/chat_view.cpp): where text before a cut renders the same whatever comes after it, and how to
// append a rendered part to a document so that it equals one setMarkdown of the whole.
//
// Conservative on purpose: a cut is only proposed where nothing that is still open can span it.
// What is missed costs a longer re-render; what is wrong would show until the answer's final
// render (one setMarkdown of the whole text) replaces it. One exception is accepted: a link
// reference definition that arrives later does not turn "[label]" in text already cut into a link
// until that final render.
#pragma once

#include <QString>
#include <QStringView>

class QTextDocument;

namespace engram::ui {

// The largest offset F in (from, text.size()] where a top-level block starts that nothing before
// it can change and that changes nothing before it: the line before F is blank, no fenced code
// block or HTML block (types 1-5) is open there, and the line at F is complete and starts a
// paragraph or an ATX heading at column 0 (a letter, digits not followed by '.' or ')', '#',
// "**x", "__x", "`x", "``x"; no '|', so no table), which closes any list, quote or indented code
// before it. `from` must itself be such an offset (or 0, or a seam from markdown_paragraph_seam).
// Returns `from` when there is none. A fence inside a container or with an ambiguous indentation
// stops the search at that line (nothing after it is proposed). `open_line`, when given, is set to
// the start of the last line, not complete yet, when a paragraph may start there (it is `from`, or
// follows a blank line with nothing open and starts with a letter at column 0), else -1: where
// markdown_paragraph_seam may look.
qsizetype markdown_block_freeze_point(QStringView text, qsizetype from,
                                      qsizetype* open_line = nullptr);

// A cut inside the one-line paragraph `paragraph` (the text after a freeze point or a seam): the
// source offset whose rendered offset (in the paragraph's QTextBlock text) is `rendered`, when
// that is a safe seam, else -1. Safe: no newline before it, the text before it has no character
// that could open an inline span that text after it closes (code span, emphasis, strikethrough,
// link, raw HTML or autolink, entity), the character before it is a space and the one at it a
// letter (so the rest reads as the same paragraph's continuation, not as a list or heading).
qsizetype markdown_paragraph_seam(QStringView paragraph, qsizetype rendered);

// Whether `text` (the rest of a paragraph cut by a seam) continues that paragraph on a new line:
// a newline followed by a non-blank line. Such a line could make the whole paragraph a setext
// heading or a table, so the cut must be undone.
bool markdown_has_soft_break(QStringView text);

// Appends `markdown` rendered as setMarkdown renders it, after what `doc` holds, as blocks of their
// own. Returns the position of the first appended block. When `doc` held setMarkdown(T) and T
// ends at a freeze point, `doc` then equals setMarkdown(T + markdown) (toHtml()).
int append_markdown(QTextDocument& doc, const QString& markdown);

// Renders `markdown` in place of everything from `position` on: the start of a block that
// append_markdown returned (0: the whole document), so the same holds for the result.
void replace_markdown_from(QTextDocument& doc, int position, const QString& markdown);

// A streamed answer's document, re-rendered on each tick by parsing only its live end: what lies
// before the last freeze point stays as rendered, and so do the lines of a long one-line paragraph
// cut at seams (each piece its own block with no margin between them and the paragraph's
// direction, cut where the layout broke a line, so the lines stay where they were). With no seam
// the document equals setMarkdown(text); with seams it only looks the same, so a finished answer
// is rendered whole once (the caller's setMarkdown, then reset()).
class MarkdownStream {
 public:
  // `text` is the whole answer so far and grows by appending; `doc` holds what the last call left
  // (or anything, after reset()). Seams need the document's text width set.
  void render(QTextDocument& doc, const QString& text);
  // Forget the cuts: the next render() parses the whole text once again (after a full render, or
  // when the width changed and the seams no longer fall where lines break).
  void reset();
  // Whether the document holds a streamed rendering rather than one setMarkdown of the text.
  bool active() const { return active_; }
  // Characters of Markdown the last render() parsed.
  qsizetype last_parsed() const { return last_parsed_; }
  // Where the text is cut now (a freeze point or a seam) and whether that is a seam.
  qsizetype frozen() const { return frozen_; }
  bool at_seam() const { return seam_; }

 private:
  int put(QTextDocument& doc, const QString& markdown);
  void try_seam(QTextDocument& doc, const QString& text, qsizetype paragraph);

  qsizetype clean_ = 0;     // the last freeze point
  int clean_tail_pos_ = 0;  // where the text after it starts in the document
  qsizetype frozen_ = 0;    // clean_, or a seam in the paragraph after it
  int tail_pos_ = 0;        // where the text after frozen_ starts (-1: append a block)
  bool seam_ = false;
  bool seams_blocked_ = false;  // the paragraph after clean_ went on to a new line
  Qt::LayoutDirection seam_direction_ = Qt::LeftToRight;
  bool active_ = false;
  qsizetype last_parsed_ = 0;
};

}  // namespace engram::ui
