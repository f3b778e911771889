#include "app/cli/keep_household.h"

#include <algorithm>
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

double dot(const Embedding& a, const Embedding& b) {
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    d += static_cast<double>(a[i]) * b[i];
  return d;  // both unit-normalised
}

size_t segment_count(const env::EmbodiedPrompt& prompt) {
  if (prompt.parts.empty() || prompt.parts.back().kind != "query")
    throw std::invalid_argument("household prompt: the last part must be the query");
  return prompt.parts.size() - 1;
}

// Retrieval scores: non-object segments above every object (always kept), objects by lexical
// similarity to the query.
std::map<std::string, double> retrieval_scores(const env::EmbodiedPrompt& prompt) {
  std::vector<std::string> corpus;
  for (const env::PromptPart& p : prompt.parts)
    corpus.push_back(p.text);
  const LexicalEmbedder embedder(corpus);
  const Embedding query = embedder.embed(prompt.parts.back().text);
  std::map<std::string, double> score;
  for (size_t i = 0; i + 1 < prompt.parts.size(); ++i) {
    const env::PromptPart& p = prompt.parts[i];
    score[p.key] = p.kind == "object" ? dot(query, embedder.embed(p.text)) : 2.0;
  }
  return score;
}

std::vector<GroupedUnit> singleton_units(const env::EmbodiedPrompt& prompt) {
  std::vector<GroupedUnit> units;
  for (size_t i = 0; i < segment_count(prompt); ++i)
    units.push_back(
        {prompt.parts[i].key, prompt.parts[i].version, {prompt.parts[i].key}, false, 0});
  return units;
}

// Assembles `units[selected]` (members in trained order within a unit); blocks cut the
// retrieved tokens into `block_tokens` pieces instead.
KeepHouseholdPrompt build_prompt(const Tokenizer& tokenizer, const env::EmbodiedPrompt& prompt,
                                 const std::vector<GroupedUnit>& units,
                                 const std::vector<size_t>& selected, int64_t block_tokens) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i + 1 < prompt.parts.size(); ++i)
    index[prompt.parts[i].key] = i;
  KeepHouseholdPrompt out;
  out.available_segments = static_cast<int64_t>(segment_count(prompt));
  if (tokenizer.bos_id() >= 0) out.prefix.push_back(tokenizer.bos_id());

  bool first = true;
  std::string text;
  auto encode = [&](const std::string& t) {
    std::vector<int64_t> ids =
        first ? widen(tokenizer.encode(t)) : encode_after_newline(tokenizer, t);
    first = false;
    text += t;
    return ids;
  };
  std::vector<size_t> placed;  // segment indices in assembled order
  for (size_t u : selected) {
    const GroupedUnit& unit = units[u];
    MemoryUnit m{unit.key, "group", unit.version, {}};
    for (const std::string& key : unit.members) {
      const env::PromptPart& p = prompt.parts.at(index.at(key));
      const std::vector<int64_t> ids = encode(p.text);
      m.tokens.insert(m.tokens.end(), ids.begin(), ids.end());
      placed.push_back(index.at(key));
      if (unit.members.size() == 1) m.kind = p.kind;
    }
    out.units.push_back(std::move(m));
    out.members.push_back(unit.members);
  }
  out.retrieved_segments = static_cast<int64_t>(placed.size());
  const std::string& q = prompt.parts.back().text;
  out.query = encode(q);

  if (block_tokens > 0) {
    std::vector<int64_t> all;
    std::vector<std::string> owner;  // segment of each token
    for (size_t i = 0; i < out.units.size(); ++i) {
      all.insert(all.end(), out.units[i].tokens.begin(), out.units[i].tokens.end());
      owner.insert(owner.end(), out.units[i].tokens.size(), out.units[i].key);
    }
    out.units.clear();
    out.members.clear();
    for (size_t b = 0; b * static_cast<size_t>(block_tokens) < all.size(); ++b) {
      const size_t begin = b * static_cast<size_t>(block_tokens);
      const size_t end = std::min(all.size(), begin + static_cast<size_t>(block_tokens));
      // The block's KV is a function of its tokens alone (after the prefix): UnitKvStore
      // recomputes it when they differ.
      out.units.push_back({"block:" + std::to_string(b),
                           "block",
                           0,
                           {all.begin() + static_cast<std::ptrdiff_t>(begin),
                            all.begin() + static_cast<std::ptrdiff_t>(end)}});
      std::vector<std::string> touched;
      for (size_t t = begin; t < end; ++t)
        if (touched.empty() || touched.back() != owner[t]) touched.push_back(owner[t]);
      out.members.push_back(touched);
    }
  }

  std::vector<int64_t> whole = out.prefix;
  for (int64_t id : widen(tokenizer.encode(text)))
    whole.push_back(id);
  out.tokens_match_text = out.ids() == whole;

  std::vector<size_t> trained = placed;
  std::sort(trained.begin(), trained.end());
  out.in_trained_order = trained == placed;
  if (out.in_trained_order) {
    out.trained_order_ids = out.ids();
  } else {
    first = true;
    out.trained_order_ids = out.prefix;
    for (size_t i : trained) {
      const std::vector<int64_t> ids = encode(prompt.parts[i].text);
      out.trained_order_ids.insert(out.trained_order_ids.end(), ids.begin(), ids.end());
    }
    const std::vector<int64_t> ids = encode(q);
    out.trained_order_ids.insert(out.trained_order_ids.end(), ids.begin(), ids.end());
  }
  return out;
}

}  // namespace

std::vector<int64_t> KeepHouseholdPrompt::ids() const {
  std::vector<int64_t> out = prefix;
  for (const MemoryUnit& u : units)
    out.insert(out.end(), u.tokens.begin(), u.tokens.end());
  out.insert(out.end(), query.begin(), query.end());
  return out;
}

std::string HouseholdGrouping::name() const {
  switch (kind) {
    case Kind::kSegments:
      return "segments";
    case Kind::kStaticDynamic:
      return options.fixed_clusters ? "clusters" : "static-dynamic";
    case Kind::kBlocks:
      return "blocks:" + std::to_string(block_tokens);
  }
  return "?";
}

HouseholdGrouping parse_household_grouping(const std::string& spec) {
  HouseholdGrouping g;
  if (spec == "segments") {
    g.kind = HouseholdGrouping::Kind::kSegments;
  } else if (spec == "static-dynamic") {
    g.kind = HouseholdGrouping::Kind::kStaticDynamic;
  } else if (spec == "clusters") {
    g.kind = HouseholdGrouping::Kind::kStaticDynamic;
    g.options.fixed_clusters = true;
  } else if (spec.rfind("blocks:", 0) == 0) {
    g.kind = HouseholdGrouping::Kind::kBlocks;
    const std::string n = spec.substr(7);
    size_t used = 0;
    try {
      g.block_tokens = std::stoll(n, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != n.size() || g.block_tokens <= 0)
      throw std::invalid_argument("grouping '" + spec + "': blocks:N needs a positive N");
  } else {
    throw std::invalid_argument("unknown grouping '" + spec +
                                "' (known: static-dynamic, clusters, segments, blocks:N)");
  }
  return g;
}

HouseholdMemoryUnits::HouseholdMemoryUnits(HouseholdGrouping grouping, SegmentEmbedder embed)
    : grouping_(std::move(grouping)), embed_(std::move(embed)), machine_(grouping_.options) {
  if (grouping_.kind == HouseholdGrouping::Kind::kStaticDynamic && !embed_)
    throw std::invalid_argument("static-dynamic grouping needs a segment embedder");
}

const GroupingStep& HouseholdMemoryUnits::observe(const Tokenizer& tokenizer,
                                                  const env::EmbodiedPrompt& prompt) {
  std::vector<GroupingSegment> segments;
  for (size_t i = 0; i < segment_count(prompt); ++i) {
    const env::PromptPart& p = prompt.parts[i];
    GroupingSegment s{
        p.key, p.version, static_cast<int64_t>(encode_after_newline(tokenizer, p.text).size()), {}};
    if (grouping_.kind == HouseholdGrouping::Kind::kStaticDynamic) {
      auto it = embeddings_.find({p.key, p.version});
      if (it == embeddings_.end())
        it = embeddings_.emplace(std::make_pair(p.key, p.version), embed_(p.text)).first;
      s.embedding = it->second;
    }
    segments.push_back(std::move(s));
  }
  return machine_.step(segments);
}

KeepHouseholdPrompt HouseholdMemoryUnits::assemble(const Tokenizer& tokenizer,
                                                   const env::EmbodiedPrompt& prompt,
                                                   int64_t max_segments) const {
  const std::map<std::string, double> score = retrieval_scores(prompt);
  if (grouping_.kind != HouseholdGrouping::Kind::kStaticDynamic) {
    const std::vector<GroupedUnit> units = singleton_units(prompt);
    return build_prompt(
        tokenizer, prompt, units, select_units(units, score, max_segments),
        grouping_.kind == HouseholdGrouping::Kind::kBlocks ? grouping_.block_tokens : 0);
  }
  const std::vector<GroupedUnit>& units = machine_.last().units;
  size_t members = 0;
  for (const GroupedUnit& u : units)
    for (const std::string& key : u.members) {
      ++members;
      if (!score.count(key))
        throw std::logic_error("household memory: '" + key + "' is not in the prompt observed");
    }
  if (members != segment_count(prompt))
    throw std::logic_error("household memory: assemble() of a prompt that was not observed");
  return build_prompt(tokenizer, prompt, units, select_units(units, score, max_segments), 0);
}

KeepHouseholdPrompt assemble_household_prompt(const Tokenizer& tokenizer,
                                              const env::EmbodiedPrompt& prompt,
                                              int64_t max_segments) {
  const std::vector<GroupedUnit> units = singleton_units(prompt);
  return build_prompt(tokenizer, prompt, units,
                      select_units(units, retrieval_scores(prompt), max_segments), 0);
}

}  // namespace engram::cli
