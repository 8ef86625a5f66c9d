// The floors `afd bench generate` states the engine's steps against (g++-includable, host only):
//   decode: the bytes one step of `batch` sequences must read from device memory, over the measured copy bandwidth
//     (bytes read + written of a large device-to-device copy): the weights of the experts the step's routing touches
//     (per MoE layer, the distinct experts among the batch's top-k ids), every attention projection and norm, the
//     routers, the dense MLP layers, the LM head and final norm, the embedding rows, and the KV cache read (every
//     position of every sequence, keys and values of every layer) and written (the new token's). Activations are not
//     counted.
//   prefill: the FLOPs of one sequence's prefill (every projection and expert of every token, causal attention, the
//     LM head of the row that samples) over the measured BF16 GEMM rate.
#pragma once

#include <cstdint>
#include <span>

#include "model/model_config.h"

namespace afd::lab {

struct DecodeStepBytes {
    double experts = 0;            // routed experts touched (w13 and w2 of each)
    double attention_weights = 0;  // q/k/v/o projections, their biases and the layers' norms
    double routers = 0;            // gate weights of the MoE layers
    double dense_mlp = 0;          // dense SwiGLU MLP layers
    double lm_head = 0;            // LM head, final norm and the embedding rows gathered
    double kv = 0;                 // KV cache read (and the new token's written)
    double total() const { return experts + attention_weights + routers + dense_mlp + lm_head + kv; }
};

// Distinct experts expected among `tokens` tokens' top-k choices when each token draws k distinct experts uniformly:
// E (1 - (1 - k / E)^tokens).
double expectedDistinctExperts(int64_t experts, int64_t top_k, int64_t tokens);

// Distinct ids in [0, experts) among `ids` (others, -1 included, are ignored).
int64_t countDistinctExperts(std::span<const int32_t> ids, int64_t experts);

// Bytes of expert weights one expert holds (3 * hidden * moe_intermediate BF16 values).
double expertBytes(const model::ModelConfig& config);
// KV bytes of one token position (every layer, keys and values, BF16).
double kvBytesPerPosition(const model::ModelConfig& config);

// One decode step: `batch` sequences whose attention reads `kv_positions` positions in all (the sum over the
// sequences of their KV length including the new token); `distinct_experts` holds, for each MoE layer in order, the
// experts the step touches there (empty: expectedDistinctExperts for every MoE layer).
DecodeStepBytes decodeStepBytes(const model::ModelConfig& config, int64_t batch, double kv_positions,
                                std::span<const double> distinct_experts = {});

// FLOPs of one sequence's prefill of `tokens` tokens (2 per multiply-add; causal attention counts the positions each
// query row reads), the LM head for its last row only.
double prefillFlops(const model::ModelConfig& config, int64_t tokens);

}  // namespace afd::lab
