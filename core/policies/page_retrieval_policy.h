// `pageretrieval`: Quest (Tang et al., 2024) as the LouisKV paper's baseline: the KV is cut into
// pages of 16 tokens in text order, each indexed by the element-wise min and max of its keys; at
// every decode step and layer a page scores the upper bound of q·k over it,
// Σ_d max(q_d·kmax_d, q_d·kmin_d), and the top pages fill the budget (max(3, B/16) pages of 16).
// Group-consistent as in the paper's setup: the bound is averaged over the query heads of a group.
// Generated tokens leave the local window in pages of 16.
#pragma once

#include "core/policies/retrieval_policy.h"

namespace engram {

class PageRetrievalPolicy : public RetrievalPolicy {
 public:
  PageRetrievalPolicy(int64_t page, RetrievalSettings settings);
  std::string name() const override { return "pageretrieval"; }
  std::string spec() const override;
  std::unique_ptr<RetrievalPolicy> clone() const override {
    return std::make_unique<PageRetrievalPolicy>(*this);
  }
  void begin_decode(int64_t /*layers*/, int64_t /*prompt_tokens*/,
                    int64_t /*max_new_tokens*/) override {}
  PromptUnits prompt_units(int64_t layer, const at::Tensor& keys) override;
  at::Tensor unit_index(const at::Tensor& keys) const override;
  bool retrieve(int64_t /*layer*/, int64_t /*step*/, const at::Tensor& /*q*/) override {
    return true;
  }
  bool decides_on_device() const override { return true; }
  void retrieve_on_device(int64_t /*layer*/, const at::Tensor& /*step*/, const at::Tensor& /*q*/,
                          at::Tensor& decision) override {
    decision.select(0, 0).fill_(1);  // every step
  }
  using RetrievalPolicy::score;
  at::Tensor score(const at::Tensor& q, const at::Tensor& index, const at::Tensor& live,
                   const at::Tensor& enabled) const override;
  int64_t page_tokens() const override { return page_; }

 private:
  int64_t page_;
};

}  // namespace engram
