// CUDA (Hopper, sm_90a) implementation of the routed-expert MoE (moe.h) and the router (router.h).
// Includable by g++: no CUDA headers; streams are passed as `void*` (a cudaStream_t, nullptr = default stream).
//
// The layer runs as four stages on one stream, with no host synchronisation and no allocation, so a whole layer
// can be captured in a CUDA graph:
//   permute   counts the entries per expert, scans them into slot offsets and m-tile offsets, and lists the
//             token of every slot (slots are the routing entries grouped by expert, expert-major)
//   gate-up   grouped GEMM h[slot] = silu(Wg[e] x[token]) * (Wu[e] x[token])            (SwiGLU fused)
//   down      grouped GEMM y[slot] = W2[e] h[slot]
//   combine   out[t] = sum over t's local entries of topk_weight * y[slot]                 (fp32 sum, bf16 out)
// The grouped GEMMs are persistent kernels over (expert, weight-row tile, token tile) work items read from the
// device-side offsets; weights stream through TMA into a multi-stage shared-memory pipeline consumed by wgmma.
//
// Requirements (checked, AFD_CHECK): act_dtype kBf16; hidden % 64 == 0; inter % 32 == 0; 1 <= top_k;
// 1 <= num_experts <= 1024; all pointers device pointers, 16-byte aligned. Ids outside [-1, num_experts) are
// treated as -1 (the caller validates routing).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/moe.h"
#include "kernels/router.h"

namespace afd::kernels {

// Tile shape of the grouped GEMMs. kSmallN: one consumer warpgroup, items of 64 weight rows x up to N tokens,
// two CTAs per SM (memory-bound regime). kWideN: two consumer warpgroups, items of 128 weight rows x up to N
// tokens, one CTA per SM (compute-bound regime). kAuto picks from T * top_k / num_experts.
enum class MoeTileConfig { kAuto, kSmall16, kSmall32, kSmall64, kSmall128, kWide128, kWide256 };

// Parses "auto", "small16" … "wide256"; returns false for anything else.
bool parseMoeTileConfig(const char* text, MoeTileConfig* config);
const char* moeTileConfigName(MoeTileConfig config);

struct MoeCudaOptions {
    MoeTileConfig tile = MoeTileConfig::kAuto;
    // Launch gate-up, down and combine with programmatic dependent launch, so each kernel's prologue (and the
    // down kernel's first weight loads) overlaps the previous kernel's tail.
    bool programmatic_launch = true;
};

// The tile configuration moeForwardCuda uses for these params and options (never kAuto).
MoeTileConfig resolveMoeTileConfig(const MoeParams& params, const MoeCudaOptions& options);

// Bytes of device workspace moeForwardCuda needs for `num_tokens` tokens (size it with the largest T).
size_t moeCudaWorkspaceBytes(int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t hidden, int64_t inter);

// Typed views of the workspace (device pointers) after a run, for tests and benchmarks.
struct MoeWorkspaceView {
    int32_t* expert_count = nullptr;  // [E] routing entries per local expert
    int32_t* slot_offset = nullptr;   // [E + 1] first slot of each expert; slot_offset[E] = valid entries
    int32_t* tile_offset = nullptr;   // [E + 1] first token tile of each expert (tiles of the config's N tokens)
    int32_t* entry_slot = nullptr;    // [T * K] slot of entry (t, j), -1 when not served here
    int32_t* slot_token = nullptr;    // [T * K] token of each slot (first slot_offset[E] valid)
    core::Bf16* h = nullptr;          // [T * K, I] SwiGLU activations per slot
    core::Bf16* y = nullptr;          // [T * K, H] expert outputs per slot (unweighted)
};
MoeWorkspaceView moeWorkspaceView(const MoeParams& params, void* workspace, size_t workspace_bytes);

// out = MoE(x) as in moe.h, on `stream`. Asynchronous; no host synchronisation, no allocation; capturable.
void moeForwardCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                    const MoeCudaOptions& options = {});

// The four stages of moeForwardCuda, each on `stream`, for the harness and stage timing; run in order with the
// same params, workspace and options.
void moePermuteCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                    const MoeCudaOptions& options = {});
void moeGateUpCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                   const MoeCudaOptions& options = {});
void moeDownCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                 const MoeCudaOptions& options = {});
void moeCombineCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                    const MoeCudaOptions& options = {});

// Router as in router.h on `stream`: logits (fp32, tensor cores, fp32 accumulation), softmax, top-k (ties: lower
// expert id), optional renormalisation. Requires act_dtype kBf16, hidden % 16 == 0, num_experts % 8 == 0,
// num_experts <= 256, top_k <= num_experts and top_k <= 32. Asynchronous; capturable.
void routerForwardCuda(const RouterParams& params, void* stream);

}  // namespace afd::kernels
