// Topology of an AFD deployment: which attention ranks talk to which FFN ranks, and which routed experts each
// FFN rank owns. Pure arithmetic on the counts; no I/O, no model knowledge beyond the expert count.
//
//   m2n (gate on attention): every attention rank talks to every FFN rank; FFN ranks own disjoint, contiguous,
//        balanced expert ranges (ExpertPartition).
//   p2p (gate on FFN): attention ranks form F contiguous, balanced blocks; FFN rank k serves the attention ranks
//        [ceil(k·A/F), ceil((k+1)·A/F)) and attention rank a talks to FFN rank floor(a·F/A). Needs A >= F.
//        Example 3A2F: {A0, A1} → F0, {A2} → F1.
//
// Values are immutable after creation and safe to share between threads.
#pragma once

#include <string_view>
#include <vector>

#include "core/status.h"

namespace afd::transport {

enum class AfdMode {
    kM2n,  // router on attention; FFN ranks hold expert ranges and return partial sums
    kP2p,  // router on FFN; each FFN rank runs the whole MLP/MoE block for its attention block
};

constexpr std::string_view modeName(AfdMode mode) { return mode == AfdMode::kM2n ? "m2n" : "p2p"; }

// Experts [begin, end) of one FFN rank.
struct ExpertRange {
    int begin = 0;
    int end = 0;

    int size() const { return end - begin; }
    bool contains(int expert) const { return expert >= begin && expert < end; }
    bool operator==(const ExpertRange&) const = default;
};

// Splits E experts over F FFN ranks: rank k holds a contiguous range; the first E % F ranks hold one expert
// more than the others. Every expert belongs to exactly one rank.
class ExpertPartition {
public:
    // Errors (kInvalidArgument): E <= 0, F <= 0, or F > E (an FFN rank would own no expert); messages name both.
    static core::Result<ExpertPartition> create(int num_experts, int num_ffn_ranks);

    int numExperts() const { return num_experts_; }
    int numFfnRanks() const { return num_ffn_ranks_; }
    // Precondition: 0 <= ffn_rank < numFfnRanks() (AFD_CHECK).
    ExpertRange rangeOf(int ffn_rank) const;
    // The FFN rank that owns `expert`. Precondition: 0 <= expert < numExperts() (AFD_CHECK). O(1).
    int ownerOf(int expert) const;

private:
    ExpertPartition(int num_experts, int num_ffn_ranks) : num_experts_(num_experts), num_ffn_ranks_(num_ffn_ranks) {}

    int num_experts_;
    int num_ffn_ranks_;
};

class Topology {
public:
    // Errors (kInvalidArgument): a count <= 0 or above kMaxRanks; p2p with A < F (an FFN rank without peers).
    static core::Result<Topology> create(int num_attention_ranks, int num_ffn_ranks, AfdMode mode);

    // Upper bound on either count; keeps per-rank tables small whatever a config says.
    static constexpr int kMaxRanks = 65536;

    int numAttentionRanks() const { return num_attention_ranks_; }
    int numFfnRanks() const { return num_ffn_ranks_; }
    AfdMode mode() const { return mode_; }

    // FFN ranks attention rank `a` exchanges frames with, ascending. m2n: all; p2p: exactly one.
    // Precondition: 0 <= a < numAttentionRanks() (AFD_CHECK).
    std::vector<int> ffnPeersOfAttention(int attention_rank) const;
    // Attention ranks FFN rank `k` exchanges frames with, ascending. m2n: all; p2p: its block (never empty).
    // Precondition: 0 <= k < numFfnRanks() (AFD_CHECK).
    std::vector<int> attentionPeersOfFfn(int ffn_rank) const;
    // The most peers any rank of a role exchanges frames with: an FFN rank's attention peers (m2n: A; p2p: the
    // largest block, ceil(A/F)) and an attention rank's FFN peers (m2n: F; p2p: 1).
    int mostAttentionPeersOfFfn() const;
    int mostFfnPeersOfAttention() const;

    // Expert ownership for a model with `num_experts` routed experts (meaningful in m2n; in p2p every FFN rank
    // holds all experts, and callers do not ask). Errors as ExpertPartition::create.
    core::Result<ExpertPartition> expertPartition(int num_experts) const;

private:
    Topology(int num_attention_ranks, int num_ffn_ranks, AfdMode mode)
        : num_attention_ranks_(num_attention_ranks), num_ffn_ranks_(num_ffn_ranks), mode_(mode) {}

    int num_attention_ranks_;
    int num_ffn_ranks_;
    AfdMode mode_;
};

}  // namespace afd::transport
