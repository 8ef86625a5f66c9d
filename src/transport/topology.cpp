#include "transport/topology.h"

#include <cstdint>

#include "core/check.h"

namespace afd::transport {
namespace {

// ceil(n / d) for n >= 0, d > 0, in 64 bits so that k·A cannot overflow.
int64_t ceilDiv(int64_t n, int64_t d) { return (n + d - 1) / d; }

}  // namespace

core::Result<ExpertPartition> ExpertPartition::create(int num_experts, int num_ffn_ranks) {
    if (num_experts <= 0) return core::invalidArgument("num_experts must be > 0, got {}", num_experts);
    if (num_ffn_ranks <= 0) return core::invalidArgument("num_ffn_ranks must be > 0, got {}", num_ffn_ranks);
    if (num_ffn_ranks > num_experts) {
        return core::invalidArgument(
            "num_ffn_ranks ({}) must not exceed num_experts ({}): every FFN rank must own at least one expert",
            num_ffn_ranks, num_experts);
    }
    return ExpertPartition(num_experts, num_ffn_ranks);
}

ExpertRange ExpertPartition::rangeOf(int ffn_rank) const {
    AFD_CHECK(ffn_rank >= 0 && ffn_rank < num_ffn_ranks_, "FFN rank {} out of range [0, {})", ffn_rank, num_ffn_ranks_);
    const int base = num_experts_ / num_ffn_ranks_;
    const int extra = num_experts_ % num_ffn_ranks_;
    // Ranks below `extra` hold base + 1 experts.
    const int begin = ffn_rank * base + (ffn_rank < extra ? ffn_rank : extra);
    const int size = base + (ffn_rank < extra ? 1 : 0);
    return ExpertRange{begin, begin + size};
}

int ExpertPartition::ownerOf(int expert) const {
    AFD_CHECK(expert >= 0 && expert < num_experts_, "expert {} out of range [0, {})", expert, num_experts_);
    const int base = num_experts_ / num_ffn_ranks_;
    const int extra = num_experts_ % num_ffn_ranks_;
    const int wide_span = extra * (base + 1);  // experts held by the ranks with base + 1 experts
    if (expert < wide_span) return expert / (base + 1);
    return extra + (expert - wide_span) / base;
}

core::Result<Topology> Topology::create(int num_attention_ranks, int num_ffn_ranks, AfdMode mode) {
    if (num_attention_ranks <= 0 || num_attention_ranks > kMaxRanks) {
        return core::invalidArgument("num_attention_ranks must be in [1, {}], got {}", kMaxRanks, num_attention_ranks);
    }
    if (num_ffn_ranks <= 0 || num_ffn_ranks > kMaxRanks) {
        return core::invalidArgument("num_ffn_ranks must be in [1, {}], got {}", kMaxRanks, num_ffn_ranks);
    }
    if (mode == AfdMode::kP2p && num_attention_ranks < num_ffn_ranks) {
        return core::invalidArgument(
            "p2p mode (compute_gate_on_attention=false) requires num_attention_ranks >= num_ffn_ranks so that "
            "every FFN rank has an attention peer, got {} < {}",
            num_attention_ranks, num_ffn_ranks);
    }
    return Topology(num_attention_ranks, num_ffn_ranks, mode);
}

std::vector<int> Topology::ffnPeersOfAttention(int attention_rank) const {
    AFD_CHECK(attention_rank >= 0 && attention_rank < num_attention_ranks_, "attention rank {} out of range [0, {})",
              attention_rank, num_attention_ranks_);
    std::vector<int> peers;
    if (mode_ == AfdMode::kM2n) {
        peers.reserve(num_ffn_ranks_);
        for (int k = 0; k < num_ffn_ranks_; ++k) peers.push_back(k);
        return peers;
    }
    // floor(a·F / A)
    peers.push_back(static_cast<int>(int64_t{attention_rank} * num_ffn_ranks_ / num_attention_ranks_));
    return peers;
}

int Topology::mostAttentionPeersOfFfn() const {
    if (mode_ == AfdMode::kM2n) return num_attention_ranks_;
    return static_cast<int>(ceilDiv(int64_t{num_attention_ranks_}, num_ffn_ranks_));
}

int Topology::mostFfnPeersOfAttention() const { return mode_ == AfdMode::kM2n ? num_ffn_ranks_ : 1; }

std::vector<int> Topology::attentionPeersOfFfn(int ffn_rank) const {
    AFD_CHECK(ffn_rank >= 0 && ffn_rank < num_ffn_ranks_, "FFN rank {} out of range [0, {})", ffn_rank, num_ffn_ranks_);
    int64_t begin = 0;
    int64_t end = num_attention_ranks_;
    if (mode_ == AfdMode::kP2p) {
        // [ceil(k·A/F), ceil((k+1)·A/F)); non-empty because A >= F.
        begin = ceilDiv(int64_t{ffn_rank} * num_attention_ranks_, num_ffn_ranks_);
        end = ceilDiv(int64_t{ffn_rank + 1} * num_attention_ranks_, num_ffn_ranks_);
    }
    std::vector<int> peers;
    peers.reserve(static_cast<size_t>(end - begin));
    for (int64_t a = begin; a < end; ++a) peers.push_back(static_cast<int>(a));
    return peers;
}

core::Result<ExpertPartition> Topology::expertPartition(int num_experts) const {
    return ExpertPartition::create(num_experts, num_ffn_ranks_);
}

}  // namespace afd::transport
