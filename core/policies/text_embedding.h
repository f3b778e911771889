// Text embeddings for EpiCache's clustering and routing, from the model itself: the mean over a
// text's tokens of the decoder's final normed hidden states (ForwardRequest::final_hidden),
// unit-normalised. The paper uses a small sentence encoder (Qwen3-Embedding); Engram bundles no
// separate embedding model and cannot download one, and the chat model is loaded anyway, so the
// model's own states are the default (DESIGN.md "Memory"). A window's text is its utterance lines.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/policies/episode_clustering.h"
#include "core/runtime/decoder.h"
#include "core/tokenizer/tokenizer.h"

namespace engram {

// One forward pass of BOS + `text` over a scratch cache (cut to the model's positions); the BOS
// row is left out of the mean (it is the same for every text).
Embedding embed_text(const Decoder& decoder, const Tokenizer& tokenizer, const std::string& text);

// The same for several texts, batched (rows padded after each text's end): what embed_text
// gives each text alone, in fewer forwards. `on_progress` (may be empty) hears how many texts are
// embedded after each forward (a long conversation's windows take seconds on a CPU).
std::vector<Embedding> embed_texts(const Decoder& decoder, const Tokenizer& tokenizer,
                                   const std::vector<std::string>& texts,
                                   const std::function<void(int64_t done)>& on_progress = {});

}  // namespace engram
