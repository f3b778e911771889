#include "app/cli/keep_household.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "core/policies/lexical_embedding.h"

namespace engram::cli {
namespace {

std::vector<int64_t> widen(const std::vector<int32_t>& ids) {
  return {ids.begin(), ids.end()};
}

// The ids `text` gets when it follows a newline: SentencePiece adds its dummy-prefix piece only
// at the start of an encoded text, never after a newline inside it.
std::vector<int64_t> encode_after_newline(const Tokenizer& tokenizer, const std::string& text) {
  const std::vector<int32_t> head = tokenizer.encode("\n");
  const std::vector<int32_t> ids = tokenizer.encode("\n" + text);
  if (ids.size() >= head.size() && std::equal(head.begin(), head.end(), ids.begin()))
    return widen({ids.begin() + static_cast<std::ptrdiff_t>(head.size()), ids.end()});
  return widen(tokenizer.encode(text));  // counted by tokens_match_text
}

double cosine(const Embedding& a, const Embedding& b) {
  double dot = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    dot += static_cast<double>(a[i]) * b[i];
  return dot;  // both unit-normalised
}

}  // namespace

KeepHouseholdPrompt assemble_household_prompt(const Tokenizer& tokenizer,
                                              const env::EmbodiedPrompt& prompt,
                                              int64_t max_segments) {
  if (prompt.parts.empty() || prompt.parts.back().kind != "query")
    throw std::invalid_argument("household prompt: the last part must be the query");
  const size_t segments = prompt.parts.size() - 1;
  KeepHouseholdPrompt out;
  out.available_segments = static_cast<int64_t>(segments);

  std::vector<std::string> corpus;
  for (const env::PromptPart& p : prompt.parts)
    corpus.push_back(p.text);
  const LexicalEmbedder embedder(corpus);
  const Embedding query = embedder.embed(prompt.parts.back().text);
  std::vector<double> score(segments);
  for (size_t i = 0; i < segments; ++i) {
    const env::PromptPart& p = prompt.parts[i];
    score[i] = p.kind == "object" ? cosine(query, embedder.embed(p.text)) : 2.0;  // always kept
  }
  std::vector<size_t> order(segments);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return score[a] > score[b]; });
  order.resize(std::min<size_t>(segments, static_cast<size_t>(std::max<int64_t>(0, max_segments))));
  std::sort(order.begin(), order.end());  // the trained order

  if (tokenizer.bos_id() >= 0) out.prefix.push_back(tokenizer.bos_id());
  std::string text;
  for (size_t k = 0; k < order.size(); ++k) {
    const env::PromptPart& p = prompt.parts[order[k]];
    text += p.text;
    out.units.push_back(
        {p.key, p.kind, p.version,
         k == 0 ? widen(tokenizer.encode(p.text)) : encode_after_newline(tokenizer, p.text)});
  }
  const std::string& q = prompt.parts.back().text;
  out.query = order.empty() ? widen(tokenizer.encode(q)) : encode_after_newline(tokenizer, q);
  text += q;

  std::vector<int64_t> assembled = out.prefix;
  for (const MemoryUnit& u : out.units)
    assembled.insert(assembled.end(), u.tokens.begin(), u.tokens.end());
  assembled.insert(assembled.end(), out.query.begin(), out.query.end());
  std::vector<int64_t> whole = out.prefix;
  for (int64_t id : widen(tokenizer.encode(text)))
    whole.push_back(id);
  out.tokens_match_text = assembled == whole;
  return out;
}

}  // namespace engram::cli
