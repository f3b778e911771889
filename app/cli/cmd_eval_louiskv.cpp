// engram-cli eval louiskv: fidelity of decode-time memory policies (issue 17) in long decoding.
// Each held-out conversation's history is the prompt; full KV decodes --new-tokens greedily, then
// every policy is teacher-forced on the same tokens through the same runner (generate() with
// forced tokens), so each step compares the next-token distribution under the policy with full
// KV's: next-token agreement (argmax == full's greedy token) and KL(full || policy). Retrieval
// policies report retrievals per token (per retrieval layer) and the KV attention holds per layer
// beside full KV's. A policy is SPEC or SPEC@BUDGET (a KV budget for a dropping policy: h2o@576).
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/cli/bench_report.h"
#include "app/cli/commands.h"
#include "app/cli/model_loading.h"
#include "core/engine/generator.h"
#include "core/env/conversation_format.h"
#include "core/env/conversation_generator.h"
#include "core/policies/policy_registry.h"
#include "core/policies/retrieval_policy.h"

namespace engram::cli {
namespace {

const char* kDefaultPolicies =
    "louiskv:tau=50,sinks=64,window=128,budget=256;louiskv:tau=70,sinks=64,window=128,budget=256;"
    "louiskv:tau=85,sinks=64,window=128,budget=256;louiskv:tau=95,sinks=64,window=128,budget=256;"
    "louiskv:stride=4,sinks=64,window=128,budget=256;louiskv:stride=1,sinks=64,window=128,budget="
    "256;"
    "pageretrieval:sinks=64,window=128,budget=256;h2o@448;streaming@448";

struct PolicyRow {
  std::string spec;
  int64_t budget = 0;
  double agree = 0, kl = 0, retrievals = 0, steps = 0, attention_tokens = 0;
  std::vector<double> layer_retrievals;  // retrievals per token of each layer, summed over runs
  int64_t runs = 0;
};

std::vector<PolicyRow> parse_policies(const std::string& text) {
  std::vector<PolicyRow> rows;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ';');) {
    if (item.empty()) continue;
    PolicyRow row;
    const size_t at = item.find('@');
    row.spec = item.substr(0, at);
    if (at != std::string::npos) {
      try {
        row.budget = std::stoll(item.substr(at + 1));
      } catch (const std::exception&) {
        throw UsageError("--policies: '" + item + "': a budget after @ is a token count");
      }
    }
    try {
      (void)make_policy(row.spec);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--policies: ") + e.what());
    }
    rows.push_back(row);
  }
  if (rows.empty()) throw UsageError("--policies: none given");
  return rows;
}

}  // namespace

int run_eval_louiskv(int argc, char** argv) {
  auto with_value = model_flags_with_value();
  with_value.insert({"episodes", "json", "new-tokens", "policies"});
  const Args args(argc, argv, 3, with_value, {});
  const int64_t episodes = std::max<int64_t>(1, args.integer("episodes", 5));
  const int64_t first = args.integer("seed", static_cast<int64_t>(env::kHeldOutSeedBase));
  const int64_t new_tokens = std::max<int64_t>(2, args.integer("new-tokens", 512));
  std::vector<PolicyRow> rows = parse_policies(args.str("policies", kDefaultPolicies));
  LoadedModel model = load_text_model_from_args(args, "eval louiskv");
  const Decoder& decoder = *model.decoder;
  const ModelConfig& c = decoder.config();
  const Tokenizer& tokenizer = *model.tokenizer;
  constexpr int64_t kBlock = 512;

  for (int64_t episode = 0; episode < episodes; ++episode) {
    env::ConversationConfig config;
    config.seed = static_cast<uint64_t>(first + episode);
    const env::Conversation conversation = env::generate_conversation(config);
    const auto& u = conversation.utterances;
    // The history's last tokens that leave room for the reply within the model's positions.
    std::vector<int32_t> text = tokenizer.encode(env::qa_history_prompt(u, 0, u.size()));
    const auto room = static_cast<size_t>(c.max_positions - new_tokens - 1);
    if (text.size() > room) text.erase(text.begin(), text.end() - static_cast<int64_t>(room));
    std::vector<int64_t> prompt;
    if (tokenizer.bos_id() >= 0) prompt.push_back(tokenizer.bos_id());
    prompt.insert(prompt.end(), text.begin(), text.end());

    GenerationOptions options;
    options.max_new_tokens = new_tokens;
    options.stop_at_eos = false;
    options.sampling.temperature = 0;
    options.prefill_chunk = kBlock;
    std::vector<at::Tensor> reference;
    options.on_logits = [&](const at::Tensor& l) { reference.push_back(l.to(at::kFloat).cpu()); };
    auto full = make_policy("full");
    auto full_ws = working_set_for(*full, model, kBlock);
    const GenerationResult greedy = generate(decoder, *full, *full_ws, {}, prompt, options, {});
    const double context = static_cast<double>(prompt.size()) + new_tokens / 2.0;

    for (PolicyRow& row : rows) {
      auto policy = make_policy(row.spec, row.budget, c.max_positions, kBlock);
      auto ws = working_set_for(*policy, model, kBlock);
      GenerationOptions forced = options;
      forced.forced_tokens = &greedy.tokens;
      int64_t step = 0;
      double agree = 0, kl = 0;
      forced.on_logits = [&](const at::Tensor& l) {
        const at::Tensor ref = reference.at(static_cast<size_t>(step)).log_softmax(-1);
        const at::Tensor got = l.to(at::kFloat).cpu().log_softmax(-1);
        agree += got.argmax().item<int64_t>() == greedy.tokens[static_cast<size_t>(step)];
        kl += (ref.exp() * (ref - got)).sum().item<double>();
        ++step;
      };
      const GenerationResult r = generate(decoder, *policy, *ws, {}, prompt, forced, {});
      row.agree += agree / static_cast<double>(step);
      row.kl += kl / static_cast<double>(step);
      row.retrievals += r.retrieval.retrievals_per_token();
      const auto& by_layer = r.retrieval.layer_retrievals;
      row.layer_retrievals.resize(std::max(row.layer_retrievals.size(), by_layer.size()), 0.0);
      for (size_t i = 0; i < by_layer.size() && r.retrieval.steps > 0; ++i)
        row.layer_retrievals[i] += double(by_layer[i]) / double(r.retrieval.steps);
      // KV tokens attention holds per (retrieval) layer at the end, as a share of full KV's.
      double held = context;
      if (RetrievalPolicy* retrieval = policy->decode_retrieval()) {
        const RetrievalSettings& s = retrieval->settings();
        held = static_cast<double>(s.sinks + s.budget + s.window);
      } else if (policy->budget() > 0) {
        held = static_cast<double>(policy->budget());
      }
      row.attention_tokens += std::min(1.0, held / context);
      ++row.runs;
    }
    std::fprintf(stderr, "episode %lld: %zu prompt tokens, %lld decoded\n",
                 static_cast<long long>(episode), prompt.size(),
                 static_cast<long long>(new_tokens));
  }

  nlohmann::json out;
  out["benchmark"] = "engram-eval-louiskv";
  out["model"] = model.name;
  out["episodes"] = episodes;
  out["first_seed"] = first;
  out["new_tokens"] = new_tokens;
  out["policies"] = nlohmann::json::array();
  for (const PolicyRow& row : rows) {
    const double n = static_cast<double>(std::max<int64_t>(1, row.runs));
    nlohmann::json by_layer = nlohmann::json::array();
    std::string layers_text;
    for (const double v : row.layer_retrievals) {
      by_layer.push_back(v / n);
      char cell[16];
      std::snprintf(cell, sizeof cell, " %.2f", v / n);
      layers_text += cell;
    }
    out["policies"].push_back({{"policy", row.spec},
                               {"retrievals_per_token_by_layer", by_layer},
                               {"kv_budget", row.budget},
                               {"next_token_agreement", row.agree / n},
                               {"kl_full_policy", row.kl / n},
                               {"retrievals_per_token", row.retrievals / n},
                               {"attention_kv_share", row.attention_tokens / n}});
    std::fprintf(stderr,
                 "%-58s agreement %.3f  KL %.4f  retrievals/token %.3f  KV share %.3f%s%s\n",
                 (row.spec + (row.budget ? "@" + std::to_string(row.budget) : "")).c_str(),
                 row.agree / n, row.kl / n, row.retrievals / n, row.attention_tokens / n,
                 layers_text.empty() ? "" : "  by layer", layers_text.c_str());
  }
  emit_bench_report(out, args);
  return 0;
}

}  // namespace engram::cli
