// Role-aware weight loading: which tensors of a Qwen3-MoE checkpoint a process needs, loaded and checked.
//
// Tensors the engine reads as they are (norms, o_proj, embeddings, router gates) are zero-copy views of the
// checkpoint's read-only mappings. Routed experts (and dense MLP layers) are packed into the layout of
// kernels/moe.h (w13 [E, 2I, H] = gate rows then up rows; w2 [E, H, I]) in owned CPU memory, and the q/k/v
// projections of each attention layer into one fused qkv_proj.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/checkpoint.h"
#include "model/model_config.h"

namespace afd::model {

struct WeightSelection {
    bool attention = true;  // embedding, attention projections and norms, final norm, LM head
    bool router = true;     // mlp.gate of every MoE layer
    bool dense_mlp = true;  // the SwiGLU MLP of every non-MoE layer
    int64_t expert_begin = 0;
    int64_t expert_end = 0;  // routed experts [expert_begin, expert_end) of every MoE layer; empty = none

    // The whole model in one process (the dense reference).
    static WeightSelection everything(const ModelConfig& config);
    // An m2n attention rank: everything but routed experts. A p2p attention rank: no MLP weights at all.
    static WeightSelection attentionRole(bool gate_on_attention);
    // An m2n FFN rank: only its expert range. A p2p FFN rank: router, dense MLPs and all experts.
    static WeightSelection ffnRole(bool gate_on_attention, const ModelConfig& config, int64_t expert_begin,
                                   int64_t expert_end);
    int64_t numExperts() const { return expert_end - expert_begin; }
};

struct AttentionLayerWeights {
    core::Tensor input_norm;  // [H]
    // The one projection the model runner runs: the rows of q_proj, then k_proj, then v_proj, and their biases
    // likewise (present iff attention_bias), in owned memory built at load; q/k/v_proj and their biases are views of
    // its rows.
    core::Tensor qkv_proj;                        // [(nh + 2 nkv) * hd, H]
    core::Tensor qkv_bias;                        // [(nh + 2 nkv) * hd]
    core::Tensor q_proj;                          // [nh * hd, H]
    core::Tensor k_proj;                          // [nkv * hd, H]
    core::Tensor v_proj;                          // [nkv * hd, H]
    core::Tensor o_proj;                          // [H, nh * hd]
    core::Tensor q_bias, k_bias, v_bias, o_bias;  // present iff attention_bias
    core::Tensor q_norm;                          // [hd]
    core::Tensor k_norm;                          // [hd]
    core::Tensor post_norm;                       // [H]
};

struct MlpLayerWeights {
    bool is_moe = false;
    core::Tensor router;  // [E, H] (MoE layers, when selected)
    // Packed weights: MoE layers hold experts [expert_begin, expert_end) of the model; a dense layer holds its one
    // SwiGLU MLP as expert 0 (inter = intermediate_size).
    // NOTE: on a CUDA device (attention/cuda/device_weights.h) they hold the layout of kernels::moePackWeightsCuda
    // (what the grouped GEMMs stream), not row-major: w13 [E_local, 2 * inter, H] elements in packed order, and w2
    // [E_local, H, round_up(inter, 64)] (the reduction padded with zeros), where inter is the packed width
    // (kernels::moePackedWidth of the checkpoint's; the extra rows and columns zero). Attention heads there may be
    // stored padded too (device_weights.h).
    core::Tensor w13;  // [E_local, 2 * inter, H]
    core::Tensor w2;   // [E_local, H, inter]
    int64_t expert_begin = 0;
    int64_t expert_end = 0;
    int64_t inter = 0;
    bool hasExperts() const { return expert_end > expert_begin; }
};

struct ModelWeights {
    core::Tensor embed;                            // [V, H]
    core::Tensor final_norm;                       // [H]
    core::Tensor lm_head;                          // [V, H] (the embedding when tie_word_embeddings)
    std::vector<AttentionLayerWeights> attention;  // per layer (empty tensors when not selected)
    std::vector<MlpLayerWeights> mlp;              // per layer
    uint64_t checkpoint_bytes = 0;                 // bytes of checkpoint tensors this selection uses
    uint64_t owned_bytes = 0;                      // bytes of packed copies held in owned memory
};

// Called after each layer's tensors are loaded, with the layers done and the model's layer count (a progress bar).
// Returns whether to go on: false stops the load there (a stop asked for while loading).
using LoadProgress = std::function<bool(int64_t layers_done, int64_t num_layers)>;

// Loads and checks (presence, dtype BF16, shape) every tensor the selection needs; errors name the tensor. A progress
// callback that returns false ends the load with kCancelled, naming the layers done.
core::Result<ModelWeights> loadWeights(const Checkpoint& checkpoint, const ModelConfig& config,
                                       const WeightSelection& selection, const LoadProgress& progress = {});

// Checkpoint tensor names (HF layout).
std::string layerPrefix(int64_t layer);  // "model.layers.{layer}."
std::string expertTensorName(int64_t layer, int64_t expert,
                             std::string_view proj);  // proj: gate_proj|up_proj|down_proj

}  // namespace afd::model
