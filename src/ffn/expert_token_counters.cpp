#include "ffn/expert_token_counters.h"

#include <string>

#include "core/check.h"

namespace afd::ffn {

ExpertTokenCounters::ExpertTokenCounters(core::MetricsRegistry& metrics, int64_t expert_begin, int64_t num_experts)
    : tally_(static_cast<size_t>(num_experts), 0), seen_(static_cast<size_t>(num_experts), 0) {
    AFD_CHECK(expert_begin >= 0 && num_experts >= 0, "expert range [{}, +{}) is invalid", expert_begin, num_experts);
    counters_.reserve(static_cast<size_t>(num_experts));
    for (int64_t e = 0; e < num_experts; ++e) {
        counters_.push_back(&metrics.counter(kName, "Tokens routed to each expert of this rank (summed over layers).",
                                             {{"expert", std::to_string(expert_begin + e)}}));
        // Counts are whole numbers far below 2^53: the double holds them exactly.
        seen_[static_cast<size_t>(e)] = static_cast<uint64_t>(counters_.back()->value());
    }
}

void ExpertTokenCounters::addLocalIds(std::span<const int32_t> ids) {
    const auto n = static_cast<int32_t>(counters_.size());
    for (const int32_t id : ids) {
        if (id < 0) continue;
        AFD_CHECK(id < n, "local expert id {} outside [0, {})", id, n);
        ++tally_[static_cast<size_t>(id)];
    }
    for (size_t e = 0; e < tally_.size(); ++e) {
        if (tally_[e] == 0) continue;
        counters_[e]->inc(static_cast<double>(tally_[e]));
        tally_[e] = 0;
    }
}

void ExpertTokenCounters::addTotals(std::span<const uint64_t> totals) {
    AFD_CHECK(totals.size() == counters_.size(), "{} expert totals for {} experts", totals.size(), counters_.size());
    for (size_t e = 0; e < totals.size(); ++e) {
        if (totals[e] <= seen_[e]) continue;
        counters_[e]->inc(static_cast<double>(totals[e] - seen_[e]));
        seen_[e] = totals[e];
    }
}

}  // namespace afd::ffn
