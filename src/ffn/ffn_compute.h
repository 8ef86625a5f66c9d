// The math an FFN rank runs for one (layer, stage), on its device. FfnRunner hands it the tokens gathered from
// every attention peer (host FP32 memory, as the TCP connector delivers them) and sends back what it writes.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"

namespace afd::ffn {

class FfnCompute {
public:
    virtual ~FfnCompute() = default;

    // m2n: out[t] = sum_j weights[t, j] * expert_{ids[t, j]}(x[t]) over this rank's experts, for `layer`.
    // x [T, H] F32; ids [T, K] local expert ids (-1 = not this rank's, already range-checked); weights [T, K];
    // out [T, H] F32. T may be 0.
    virtual core::Status moePartial(int64_t layer, int64_t num_tokens, const float* x, const int32_t* ids,
                                    const float* weights, float* out) = 0;
    // p2p: the whole MLP/MoE block of `layer` (router and experts, or the dense MLP). x, out [T, H] F32.
    virtual core::Status mlpBlock(int64_t layer, int64_t num_tokens, const float* x, float* out) = 0;

    // p2p: fills `totals` [num_experts] with the tokens this compute's own router has sent to each expert since it
    // was created (summed over layers; padding rows left out) and returns true; false when it keeps no such count
    // (then `totals` is untouched; m2n computes route nothing: FfnRunner counts the frames' ids). Thread-safe: any
    // thread, while calls run (the admin thread renders /metrics), also after release().
    virtual bool routedTokenTotals(std::span<uint64_t> totals) const {
        (void)totals;
        return false;
    }

    // "cpu", "cuda:3 (NVIDIA H200)".
    virtual std::string describe() const = 0;
    // Bytes of weights this compute holds on its device.
    virtual uint64_t deviceWeightBytes() const = 0;
    // Frees device memory (shutdown). Idempotent; nothing else may be called afterwards.
    virtual void release() = 0;
};

}  // namespace afd::ffn
