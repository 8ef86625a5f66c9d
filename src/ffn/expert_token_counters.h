// ExpertTokenCounters: an FFN rank's `afd_ffn_expert_tokens_total{expert="e"}`, the tokens routed to each of its
// experts summed over layers and stages (one series per expert the rank holds: bounded by num_experts). `expert` is
// the model's expert id (the rank's first expert + the local id). m2n: FfnRunner counts the local ids of the frames;
// p2p: the compute routes, and FfnRunner folds in its totals (FfnCompute::routedTokenTotals) when /metrics renders.
//
// Threads: addLocalIds and addTotals from one thread at a time each (the worker; the render collector); the
// counters themselves are atomic.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/metrics.h"

namespace afd::ffn {

class ExpertTokenCounters {
public:
    static constexpr const char* kName = "afd_ffn_expert_tokens_total";

    // Registers the series of experts [expert_begin, expert_begin + num_experts) at 0.
    ExpertTokenCounters(core::MetricsRegistry& metrics, int64_t expert_begin, int64_t num_experts);

    // Counts local ids in [0, num_experts); -1 (not this rank's) is skipped. Precondition: ids already checked
    // (AFD_CHECK otherwise). One atomic add per expert that occurs.
    void addLocalIds(std::span<const int32_t> ids);
    // `totals` [num_experts]: cumulative tokens per local expert kept elsewhere; adds what is new since the last call.
    // NOTE: the series belong to the registry and may outlive this object (the FFN service makes one runner, and so
    // one of these, per session, over one compute whose totals count from its start): the first call brings each
    // counter up to its total from the value it holds, so earlier sessions are not counted again.
    void addTotals(std::span<const uint64_t> totals);

    int64_t numExperts() const { return static_cast<int64_t>(counters_.size()); }

private:
    std::vector<core::Counter*> counters_;
    std::vector<uint64_t> tally_;  // addLocalIds' scratch
    std::vector<uint64_t> seen_;   // addTotals' last totals
};

}  // namespace afd::ffn
