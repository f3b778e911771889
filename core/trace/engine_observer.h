// The one interface through which the engine reports what it does (DESIGN.md, "Events"). The UI
// adapts it to queued Qt signals; the CLI writes it as JSON lines. Calls come from the engine's
// thread; an observer must not block.
#pragma once

#include <cstdint>
#include <string>

#include "core/trace/layer_interval.h"
#include "core/trace/retrieval_map.h"

namespace engram {

struct RequestSummary {
  int64_t request = 0;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double time_to_first_token_ms = 0;
  double decode_tokens_per_s = 0;
};

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void on_layer_interval(const LayerInterval& /*interval*/) {}
  virtual void on_request_finished(const RequestSummary& /*summary*/) {}
  // A traced request that decoded through retrieval: its token x layer map, after its intervals.
  virtual void on_retrieval_map(const RetrievalMap& /*map*/) {}
};

}  // namespace engram
