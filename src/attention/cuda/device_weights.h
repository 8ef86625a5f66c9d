// Model weights on a GPU: a model::ModelWeights whose tensors live in one device allocation on cuda:gpu (freed when
// the last tensor goes), uploaded from host weights (model::loadWeights) or drawn on the device (--random-weights).
//
// What the device weights hold, per tensor the selection has (every tensor BF16):
//   embed, final_norm, lm_head (the embedding itself when tie_word_embeddings), and per layer input_norm, post_norm,
//   q_norm, k_norm, o_proj (o_bias) as on the host;
//   qkv_proj [(nh + 2 nkv) hs, H]: rows of q_proj, then k_proj, then v_proj, which are views of its rows (no copy of
//   their own); qkv_bias likewise with q_bias / k_bias / v_bias (attention_bias);
//   router [E, H];
//   w13 / w2 of the routed experts and of dense MLP layers in the layout of kernels::moePackWeightsCuda (weights.h):
//   w13 [E_local, 2I, H] and w2 [E_local, H, round_up(I, 64)] elements at the packed width I =
//   kernels::moePackedWidth(checkpoint width), which MlpLayerWeights::inter holds; expert_begin and expert_end as on
//   the host.
// Heads: hs = kernels::pagedAttentionHeadDim(head_dim) (CudaOps::storedHeadDim), the model's head_dim where the CUDA
// attention kernels take it. A smaller head_dim (8, say) is stored padded: each head's lanes [head_dim, hs) are zero
// rows of qkv_proj (and zeros of qkv_bias, q_norm, k_norm) and zero columns of o_proj, so the projections compute the
// model's values in the real lanes and zeros in the others. The ModelConfig stays the checkpoint's.
// checkpoint_bytes: the host weights' (bytes read from the checkpoint; 0 for random weights); owned_bytes: the device
// allocation.
//
// Threads: each function runs on the calling thread and makes `gpu` current on it (left current on return).
// Requirements (unsupported, naming the field): hidden_size % 64 == 0 wherever the selection holds MLP weights (the
// packed layout). Any MLP width is packed (padded to the packed width with zeros).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::attention {

struct DeviceWeightsOptions {
    // Pinned host staging of the upload (two halves, one filled while the other is copied).
    uint64_t host_staging_bytes = uint64_t{256} << 20;
    // Device staging of row-major experts before they are packed (whole experts, at least one).
    uint64_t device_staging_bytes = uint64_t{512} << 20;
};

struct DeviceWeightsReport {
    uint64_t device_bytes = 0;    // the weights' device allocation
    uint64_t uploaded_bytes = 0;  // host → device (0 for random weights)
    double seconds = 0.0;         // wall time of the whole call
    double gbPerSecond() const { return seconds > 0.0 ? static_cast<double>(uploaded_bytes) / seconds / 1e9 : 0.0; }
};

// Bytes of the device allocation that holds the weights of `selection`, from the config alone.
uint64_t deviceWeightBytes(const model::ModelConfig& config, const model::WeightSelection& selection);

// What loading them takes on the device besides, while it runs: uploadModelWeights' device staging of row-major
// experts (randomModelWeights needs a few KB of keys).
enum class WeightSource { kHost, kRandom };
uint64_t deviceWeightLoadBytes(const model::ModelConfig& config, const model::WeightSelection& selection,
                               WeightSource source, const DeviceWeightsOptions& options = {});

// Whether cuda:gpu's free memory holds deviceWeightBytes + deviceWeightLoadBytes + other_bytes (the caller's
// workspaces, the KV cache) + kDeviceWeightsHeadroomBytes: invalidArgument naming the GPU, the bytes needed and free
// when it does not; unsupported when the config breaks the requirements above; an error naming the device when there
// is no such GPU. Reads no weight.
inline constexpr uint64_t kDeviceWeightsHeadroomBytes = uint64_t{256} << 20;
core::Status checkDeviceWeightsFit(const model::ModelConfig& config, const model::WeightSelection& selection, int gpu,
                                   WeightSource source, uint64_t other_bytes = 0,
                                   const DeviceWeightsOptions& options = {});

// The selection a host ModelWeights holds (loadWeights'): attention if it has the embedding, routers and dense MLPs if
// any layer has one, the experts of its MoE layers.
model::WeightSelection selectionOf(const model::ModelConfig& config, const model::ModelWeights& host);

// Copies `host` (what selectionOf says it holds; each tensor checked against the config's shape) to cuda:gpu,
// packing the MLP weights there, and waits until it is done. The pinned staging is freed before returning.
core::Result<model::ModelWeights> uploadModelWeights(const model::ModelConfig& config, const model::ModelWeights& host,
                                                     int gpu, const DeviceWeightsOptions& options = {},
                                                     DeviceWeightsReport* report = nullptr);

// Every tensor of `selection` drawn on cuda:gpu, the values `afd gen-model --seed seed` writes for the same tensor
// names (model/synthetic_values.h; experts drawn straight into the packed layout), so the same model as that
// checkpoint without one. Waits until it is done.
core::Result<model::ModelWeights> randomModelWeights(const model::ModelConfig& config, uint64_t seed, int gpu);
core::Result<model::ModelWeights> randomModelWeights(const model::ModelConfig& config,
                                                     const model::WeightSelection& selection, uint64_t seed, int gpu,
                                                     DeviceWeightsReport* report = nullptr);

}  // namespace afd::attention
