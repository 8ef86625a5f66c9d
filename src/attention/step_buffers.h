// StepBuffers: the fixed buffers on the ops' device that one step's metadata (ForwardBatch) is uploaded into.
//
// Everything is allocated once at the engine's limits, so every step's metadata sits at the same device addresses (a
// captured decode step replays over them after the next upload). Layout, I32 elements, each section 64-byte aligned:
//   tokens [max_tokens] | positions [max_tokens] | slot_mapping [max_tokens] | logits_rows [max_chunks] | num_valid [1]
//   | per stage s < 2: q_start [max_chunks + 1] | seq_len [max_chunks] | block_tables [max_chunks, block_table_width]
// A step is written to a host staging buffer of the same layout (pinned on CUDA) and goes in at most two copies
// on the ops' stream: the step sections with stage 0's, then stage 1's.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/device_ops.h"
#include "attention/forward_batch.h"
#include "core/tensor.h"

namespace afd::attention {

struct StageTensors {
    int64_t begin = 0;  // the stage's rows [begin, end) of the step
    int64_t end = 0;
    AttentionChunks chunks;
};

// Views of the device buffers (I32 on the ops' device), valid until the next upload.
struct StepTensors {
    core::Tensor tokens;        // [T]
    core::Tensor positions;     // [T]
    core::Tensor slot_mapping;  // [T]
    core::Tensor logits_rows;   // [R]
    core::Tensor num_valid;     // [1]: the rows that are not padding (ForwardBatch::numValidTokens)
    bool padded = false;        // the batch had padding rows (num_padding > 0)
    std::vector<StageTensors> stages;
};

class StepBuffers {
public:
    StepBuffers(DeviceOps& ops, const StepLimits& limits);

    // Writes `batch` to the host staging buffer and enqueues its copies to the device buffers. The staging buffer is
    // rewritten by the next upload, so the stream must have passed this one's copies by then (the engine synchronises
    // every step to sample). Checks (AFD_CHECK) that the batch fits the limits.
    StepTensors upload(const ForwardBatch& batch);

    const StepLimits& limits() const { return limits_; }

private:
    struct StageSections {
        int64_t q_start = 0;
        int64_t seq_len = 0;
        int64_t block_tables = 0;
        int64_t end = 0;  // one past the stage's last element
    };

    DeviceOps& ops_;
    StepLimits limits_;
    int64_t tokens_ = 0;
    int64_t positions_ = 0;
    int64_t slot_mapping_ = 0;
    int64_t logits_rows_ = 0;
    int64_t num_valid_ = 0;
    StageSections stage_[2];
    core::Tensor host_;    // [total] I32, host staging
    core::Tensor device_;  // [total] I32 on the ops' device
};

}  // namespace afd::attention
