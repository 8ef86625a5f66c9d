// Where each tensor of the device weights lives in their one device allocation (device_weights.h), from the config
// and the selection alone, and the ModelWeights tensors over such an allocation. Internal to attention/cuda.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::attention {

inline constexpr size_t kDeviceTensorAlignment = 256;  // every tensor's offset (TMA and cuBLASLt want >= 16)
inline constexpr size_t kNoSlot = SIZE_MAX;            // a tensor the selection does not hold

// The head_dim the device weights store attention heads at: kernels::pagedAttentionHeadDim(config.head_dim), as
// CudaOps::storedHeadDim (hs below; the model's head_dim hd where the kernels take it).
int64_t deviceHeadDim(const model::ModelConfig& config);

// How a checkpoint tensor sits in its device tensor when heads are padded from hd to hs lanes: it is `runs` runs of
// `elements` values, and on the device run r starts at element r * stored_elements, the rest of it zero.
struct HeadRuns {
    int64_t runs = 0;
    int64_t elements = 0;         // per run, in the checkpoint
    int64_t stored_elements = 0;  // per run, on the device
    bool padded() const { return stored_elements != elements; }
};
// The runs of a tensor made of `heads` heads whose every lane carries `per_lane` consecutive values: a projection's
// rows of nh heads (heads nh, per_lane H), its bias (per_lane 1), q_norm (heads 1, per_lane 1), o_proj's columns
// (heads H nh, per_lane 1).
HeadRuns headRuns(const model::ModelConfig& config, int64_t heads, int64_t per_lane);

struct AttentionLayerSlots {
    size_t input_norm = kNoSlot;
    size_t post_norm = kNoSlot;
    size_t q_norm = kNoSlot;    // [hs]
    size_t k_norm = kNoSlot;    // [hs]
    size_t qkv_proj = kNoSlot;  // [(nh + 2 nkv) hs, H]: q rows, k rows, v rows
    size_t o_proj = kNoSlot;    // [H, nh hs]
    size_t qkv_bias = kNoSlot;  // [(nh + 2 nkv) hs], attention_bias only
    size_t o_bias = kNoSlot;
};

struct MlpLayerSlots {
    bool is_moe = false;
    size_t router = kNoSlot;  // [E, H]
    size_t w13 = kNoSlot;     // packed (moePackWeightsCuda)
    size_t w2 = kNoSlot;
    int64_t expert_begin = 0;  // experts held, in the model's numbering (a dense layer: its MLP as expert 0)
    int64_t expert_end = 0;
    int64_t checkpoint_inter = 0;  // the checkpoint's MLP width
    int64_t inter = 0;             // the packed width: kernels::moePackedWidth(checkpoint_inter)
    int64_t numExperts() const { return expert_end - expert_begin; }
};

struct DeviceWeightsLayout {
    size_t embed = kNoSlot;
    size_t final_norm = kNoSlot;
    size_t lm_head = kNoSlot;                    // == embed when tie_word_embeddings
    std::vector<AttentionLayerSlots> attention;  // per layer; kNoSlot everywhere without attention
    std::vector<MlpLayerSlots> mlp;              // per layer
    size_t total_bytes = 0;
    size_t num_tensors = 0;
};

DeviceWeightsLayout planDeviceWeights(const model::ModelConfig& config, const model::WeightSelection& selection);

// The tensors of `layout` over `base` (an allocation of layout.total_bytes on `device`, alive while `owner` is), in
// ModelWeights' shapes with heads of hs lanes: q_proj / k_proj / v_proj (and their biases) are views of qkv_proj's
// (qkv_bias') rows; w13 and w2 hold the packed layout (weights.h) and MlpLayerWeights::inter is the packed width.
// checkpoint_bytes and owned_bytes are left 0.
model::ModelWeights deviceWeightTensors(const model::ModelConfig& config, const DeviceWeightsLayout& layout, void* base,
                                        core::Device device, const std::shared_ptr<void>& owner);

}  // namespace afd::attention
