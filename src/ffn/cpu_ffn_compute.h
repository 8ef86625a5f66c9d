// FfnCompute on the CPU: the reference kernels (FP32 from BF16 weights) over the weights the rank loaded.
#pragma once

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
    std::string describe() const override { return "cpu"; }
    uint64_t deviceWeightBytes() const override { return bytes_; }
    void release() override;

private:
    const model::ModelConfig& config_;
    model::ModelWeights weights_;
    uint64_t bytes_ = 0;
};

}  // namespace afd::ffn
