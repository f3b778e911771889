// engram-cli logits: the verification command. Runs token ids through the model in one forward
// pass and prints the top-5 of the last position; --out writes every position's logits as a
// float32 .npy [tokens, vocab] for comparison with a reference.
#include <cstdio>
#include <sstream>

#include "app/cli/commands.h"
#include "app/cli/model_loading.h"
#include "core/kv/cache_kv_source.h"
#include "core/model/npy.h"
#include "gpu/device_timeline.h"

namespace engram::cli {

int run_logits(int argc, char** argv) {
  auto with_value = model_flags_with_value();
  with_value.insert({"ids", "out"});
  const Args args(argc, argv, 2, with_value, {});
  const std::vector<int64_t> ids = parse_ids(args.required("ids"));
  LoadedModel model = load_model_from_args(args, /*allow_shape=*/true);
  const Decoder& decoder = *model.decoder;
  const ModelConfig& c = decoder.config();
  if (static_cast<int64_t>(ids.size()) > c.max_positions) {
    throw std::out_of_range(std::to_string(ids.size()) + " tokens exceed the model's maximum of " +
                            std::to_string(c.max_positions) + " positions");
  }
  KvCache cache({c.num_layers, c.num_kv_heads, c.head_dim}, 1, static_cast<int64_t>(ids.size()),
                decoder.dtype(), decoder.device());
  CacheKvSource source(cache);
  gpu::DeviceTimeline timeline(decoder.device());
  ForwardRequest req;
  req.tokens = {ids};
  req.positions = {std::vector<int64_t>(ids.size())};
  for (size_t i = 0; i < ids.size(); ++i)
    req.positions[0][i] = static_cast<int64_t>(i);
  req.all_logits = true;
  const at::Tensor logits = decoder.forward(req, source, timeline, nullptr).logits[0].to(at::kCPU);
  const at::Tensor last = logits[logits.size(0) - 1];
  auto [values, indices] = last.topk(std::min<int64_t>(5, last.numel()));
  std::printf("top-5 at position %lld:\n", static_cast<long long>(ids.size() - 1));
  for (int64_t i = 0; i < values.numel(); ++i) {
    const int64_t id = indices[i].item<int64_t>();
    std::string piece;
    if (model.tokenizer) piece = model.tokenizer->id_to_piece(static_cast<int32_t>(id));
    std::printf("  %lld\t%lld\t%.6f\t%s\n", static_cast<long long>(i + 1),
                static_cast<long long>(id), values[i].item<float>(), piece.c_str());
  }
  if (args.has("out")) {
    const at::Tensor contiguous = logits.contiguous();
    write_npy_f32(args.str("out", ""), {contiguous.size(0), contiguous.size(1)},
                  contiguous.data_ptr<float>());
    std::fprintf(stderr, "wrote %s [%lld, %lld]\n", args.str("out", "").c_str(),
                 static_cast<long long>(contiguous.size(0)),
                 static_cast<long long>(contiguous.size(1)));
  }
  return 0;
}

}  // namespace engram::cli
