// FfnCompute on the CPU: the reference kernels (FP32 from BF16 weights) over the weights the rank loaded. p2p MoE
// layers are routed here, and the tokens routed to each expert are counted (routedTokenTotals).
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "ffn/ffn_compute.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::ffn {

class CpuFfnCompute : public FfnCompute {
public:
    // Takes the rank's weights (m2n: its expert range; p2p: routers, dense MLPs and all experts).
    CpuFfnCompute(const model::ModelConfig& config, model::ModelWeights weights);

    core::Status moePartial(int64_t layer, int64_t num_tokens, const float* x, const int32_t* ids, const float* weights,
                            float* out) override;
    core::Status mlpBlock(int64_t layer, int64_t num_tokens, const float* x, float* out) override;
    bool routedTokenTotals(std::span<uint64_t> totals) const override;
    std::string describe() const override { return "cpu"; }
    uint64_t deviceWeightBytes() const override { return bytes_; }
    void release() override;

private:
    const model::ModelConfig& config_;
    model::ModelWeights weights_;
    uint64_t bytes_ = 0;
    std::vector<int32_t> ids_;  // p2p routing scratch [T, K]
    std::vector<float> weights_scratch_;
    std::vector<uint64_t> tally_;                             // [num_experts] per call
    std::unique_ptr<std::atomic<uint64_t>[]> routed_tokens_;  // [num_experts] totals, read from any thread
};

}  // namespace afd::ffn
