// Host side of the CUDA MoE layer and router (moe_cuda.h): checks the params, lays out the workspace, encodes the
// weight tensor maps, picks the tile configuration and launches the four stages on the caller's stream.
#include "kernels/moe_cuda.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstring>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_grouped_gemm.h"
#include "kernels/cuda/moe_stages.h"

namespace afd::kernels {
namespace {

using cuda::GroupedGemmArgs;
using cuda::TileShape;

constexpr size_t kAlign = 256;

size_t alignUp(size_t value) { return (value + kAlign - 1) / kAlign * kAlign; }

struct WorkspaceLayout {
    size_t expert_count = 0;
    size_t slot_offset = 0;
    size_t tile_offset = 0;
    size_t entry_slot = 0;
    size_t slot_token = 0;
    size_t h = 0;
    size_t y = 0;
    size_t total = 0;
};

WorkspaceLayout workspaceLayout(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t inter) {
    const size_t entries = static_cast<size_t>(tokens * top_k);
    WorkspaceLayout l;
    size_t at = 0;
    l.expert_count = at;
    at = alignUp(at + static_cast<size_t>(experts) * 4);
    l.slot_offset = at;
    at = alignUp(at + static_cast<size_t>(experts + 1) * 4);
    l.tile_offset = at;
    at = alignUp(at + static_cast<size_t>(experts + 1) * 4);
    l.entry_slot = at;
    at = alignUp(at + entries * 4);
    l.slot_token = at;
    at = alignUp(at + entries * 4);
    l.h = at;
    at = alignUp(at + entries * static_cast<size_t>(inter) * 2);
    l.y = at;
    at = alignUp(at + entries * static_cast<size_t>(hidden) * 2);
    l.total = at;
    return l;
}

void checkMoeParams(const MoeParams& p) {
    AFD_CHECK(p.act_dtype == ActDType::kBf16, "moeForwardCuda: act_dtype must be kBf16");
    AFD_CHECK(p.num_tokens >= 0, "moeForwardCuda: num_tokens {} < 0", p.num_tokens);
    AFD_CHECK(p.hidden > 0 && p.hidden % 64 == 0, "moeForwardCuda: hidden {} must be a positive multiple of 64",
              p.hidden);
    AFD_CHECK(p.inter > 0 && p.inter % 32 == 0, "moeForwardCuda: inter {} must be a positive multiple of 32", p.inter);
    AFD_CHECK(p.top_k >= 1, "moeForwardCuda: top_k {} < 1", p.top_k);
    AFD_CHECK(p.num_experts >= 1 && p.num_experts <= cuda::kMaxPermuteExperts,
              "moeForwardCuda: num_experts {} outside [1, {}]", p.num_experts, cuda::kMaxPermuteExperts);
    AFD_CHECK(p.num_tokens * p.top_k < (int64_t{1} << 31), "moeForwardCuda: T * top_k {} too large",
              p.num_tokens * p.top_k);
    if (p.num_tokens > 0) {
        AFD_CHECK(p.x && p.topk_ids && p.topk_weights && p.w13 && p.w2 && p.out,
                  "moeForwardCuda: null device pointer in params");
    }
}

bool shapeFits(const MoeParams& p, const TileShape& s) {
    return p.inter % (32 * s.consumers) == 0 && p.hidden % (64 * s.consumers) == 0;
}

PFN_cuTensorMapEncodeTiled_v12000 tensorMapEncoder() {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* ptr = nullptr;
        cudaDriverEntryPointQueryResult query{};
        AFD_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault,
                                                        &query));
        AFD_CHECK(query == cudaDriverEntryPointSuccess && ptr != nullptr,
                  "cuTensorMapEncodeTiled is not available from the CUDA driver");
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
    }();
    return fn;
}

// Tensor map over a row-major bf16 matrix [rows, cols]: boxes of 64 columns x box_rows rows, 128-byte swizzle.
CUtensorMap weightTensorMap(const core::Bf16* base, int64_t rows, int64_t cols, uint32_t box_rows) {
    CUtensorMap map;
    std::memset(&map, 0, sizeof(map));
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
    const cuuint32_t box[2] = {64, box_rows};
    const cuuint32_t element_strides[2] = {1, 1};
    const CUresult result = tensorMapEncoder()(
        &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<core::Bf16*>(base), dims, strides, box,
        element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    AFD_CHECK(result == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed ({}) for a [{}, {}] weight matrix, box rows {}",
              static_cast<int>(result), rows, cols, box_rows);
    return map;
}

int smCount() {
    int device = 0;
    AFD_CUDA_CHECK(cudaGetDevice(&device));
    int count = 0;
    AFD_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
}

cudaError_t dispatchGroupedGemm(MoeTileConfig config, bool gate_up, const CUtensorMap& tmap,
                                const GroupedGemmArgs& args, cudaStream_t stream, bool programmatic) {
    const int sms = smCount();
    switch (config) {
        case MoeTileConfig::kSmall16:
            return cuda::launchGroupedGemmSmall16(gate_up, tmap, args, sms, stream, programmatic);
        case MoeTileConfig::kSmall32:
            return cuda::launchGroupedGemmSmall32(gate_up, tmap, args, sms, stream, programmatic);
        case MoeTileConfig::kSmall64:
            return cuda::launchGroupedGemmSmall64(gate_up, tmap, args, sms, stream, programmatic);
        case MoeTileConfig::kSmall128:
            return cuda::launchGroupedGemmSmall128(gate_up, tmap, args, sms, stream, programmatic);
        case MoeTileConfig::kWide128:
            return cuda::launchGroupedGemmWide128(gate_up, tmap, args, sms, stream, programmatic);
        case MoeTileConfig::kWide256:
            return cuda::launchGroupedGemmWide256(gate_up, tmap, args, sms, stream, programmatic);
        case MoeTileConfig::kAuto:
            break;
    }
    return cudaErrorInvalidValue;
}

cudaStream_t asStream(void* stream) { return static_cast<cudaStream_t>(stream); }

struct Resolved {
    MoeTileConfig config;
    TileShape shape;
    MoeWorkspaceView view;
};

Resolved prepare(const MoeParams& params, void* workspace, size_t workspace_bytes, const MoeCudaOptions& options) {
    checkMoeParams(params);
    Resolved r;
    r.config = resolveMoeTileConfig(params, options);
    r.shape = cuda::tileShape(r.config);
    r.view = moeWorkspaceView(params, workspace, workspace_bytes);
    return r;
}

GroupedGemmArgs commonArgs(const MoeParams& params, const Resolved& r) {
    GroupedGemmArgs args;
    args.slot_token = r.view.slot_token;
    args.slot_offset = r.view.slot_offset;
    args.tile_offset = r.view.tile_offset;
    args.num_experts = static_cast<int>(params.num_experts);
    args.inter = static_cast<int>(params.inter);
    return args;
}

}  // namespace

namespace cuda {

TileShape tileShape(MoeTileConfig config) {
    switch (config) {
        case MoeTileConfig::kSmall16:
            return kSmall16Shape;
        case MoeTileConfig::kSmall32:
            return kSmall32Shape;
        case MoeTileConfig::kSmall64:
            return kSmall64Shape;
        case MoeTileConfig::kSmall128:
            return kSmall128Shape;
        case MoeTileConfig::kWide128:
            return kWide128Shape;
        case MoeTileConfig::kWide256:
            return kWide256Shape;
        case MoeTileConfig::kAuto:
            break;
    }
    AFD_FAIL("tileShape: kAuto has no shape");
}

}  // namespace cuda

bool parseMoeTileConfig(const char* text, MoeTileConfig* config) {
    static constexpr MoeTileConfig kAll[] = {MoeTileConfig::kAuto,     MoeTileConfig::kSmall16, MoeTileConfig::kSmall32,
                                             MoeTileConfig::kSmall64,  MoeTileConfig::kSmall128,
                                             MoeTileConfig::kWide128, MoeTileConfig::kWide256};
    for (const MoeTileConfig c : kAll) {
        if (std::strcmp(text, moeTileConfigName(c)) == 0) {
            *config = c;
            return true;
        }
    }
    return false;
}

const char* moeTileConfigName(MoeTileConfig config) {
    switch (config) {
        case MoeTileConfig::kAuto:
            return "auto";
        case MoeTileConfig::kSmall16:
            return "small16";
        case MoeTileConfig::kSmall32:
            return "small32";
        case MoeTileConfig::kSmall64:
            return "small64";
        case MoeTileConfig::kSmall128:
            return "small128";
        case MoeTileConfig::kWide128:
            return "wide128";
        case MoeTileConfig::kWide256:
            return "wide256";
    }
    return "?";
}

MoeTileConfig resolveMoeTileConfig(const MoeParams& params, const MoeCudaOptions& options) {
    if (options.tile != MoeTileConfig::kAuto) {
        AFD_CHECK(shapeFits(params, cuda::tileShape(options.tile)),
                  "MoE tile config {} needs inter % {} == 0 and hidden % {} == 0 (inter {}, hidden {})",
                  moeTileConfigName(options.tile), 32 * cuda::tileShape(options.tile).consumers,
                  64 * cuda::tileShape(options.tile).consumers, params.inter, params.hidden);
        return options.tile;
    }
    // Mean routing entries per expert decides between the memory-bound shapes (one consumer, two CTAs per SM,
    // the token tile just above the typical count so each expert's weights stream once) and the wide shapes.
    const int64_t mean = params.num_experts > 0 ? params.num_tokens * params.top_k / params.num_experts : 0;
    MoeTileConfig config = MoeTileConfig::kSmall16;
    if (mean > 96) {
        config = MoeTileConfig::kWide256;
    } else if (mean > 16) {
        config = MoeTileConfig::kWide128;
    } else if (mean > 4) {
        config = MoeTileConfig::kSmall32;
    }
    if (!shapeFits(params, cuda::tileShape(config))) {
        config = mean > 16 ? MoeTileConfig::kSmall128 : config;
    }
    return config;
}

size_t moeCudaWorkspaceBytes(int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t hidden, int64_t inter) {
    return workspaceLayout(num_tokens, top_k, num_experts, hidden, inter).total;
}

MoeWorkspaceView moeWorkspaceView(const MoeParams& params, void* workspace, size_t workspace_bytes) {
    const WorkspaceLayout l =
        workspaceLayout(params.num_tokens, params.top_k, params.num_experts, params.hidden, params.inter);
    AFD_CHECK(workspace != nullptr && workspace_bytes >= l.total,
              "MoE CUDA workspace of {} bytes is too small: T {} needs {}", workspace_bytes, params.num_tokens,
              l.total);
    AFD_CHECK(reinterpret_cast<uintptr_t>(workspace) % kAlign == 0, "MoE CUDA workspace must be {}-byte aligned",
              kAlign);
    auto* base = static_cast<uint8_t*>(workspace);
    MoeWorkspaceView v;
    v.expert_count = reinterpret_cast<int32_t*>(base + l.expert_count);
    v.slot_offset = reinterpret_cast<int32_t*>(base + l.slot_offset);
    v.tile_offset = reinterpret_cast<int32_t*>(base + l.tile_offset);
    v.entry_slot = reinterpret_cast<int32_t*>(base + l.entry_slot);
    v.slot_token = reinterpret_cast<int32_t*>(base + l.slot_token);
    v.h = reinterpret_cast<core::Bf16*>(base + l.h);
    v.y = reinterpret_cast<core::Bf16*>(base + l.y);
    return v;
}

void moePermuteCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                    const MoeCudaOptions& options) {
    const Resolved r = prepare(params, workspace, workspace_bytes, options);
    if (params.num_tokens == 0) {
        return;
    }
    AFD_CUDA_CHECK(cuda::launchMoePermute(params.topk_ids, static_cast<int>(params.num_tokens * params.top_k),
                                          static_cast<int>(params.top_k), static_cast<int>(params.num_experts),
                                          r.shape.block_tokens, r.view.expert_count, r.view.slot_offset,
                                          r.view.tile_offset, r.view.entry_slot, r.view.slot_token, asStream(stream),
                                          options.programmatic_launch));
}

void moeGateUpCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                   const MoeCudaOptions& options) {
    const Resolved r = prepare(params, workspace, workspace_bytes, options);
    if (params.num_tokens == 0) {
        return;
    }
    GroupedGemmArgs args = commonArgs(params, r);
    args.b_src = reinterpret_cast<const uint16_t*>(params.x);
    args.out = reinterpret_cast<uint16_t*>(r.view.h);
    args.k = static_cast<int>(params.hidden);
    args.b_ld = static_cast<int>(params.hidden);
    args.out_ld = static_cast<int>(params.inter);
    args.a_rows = static_cast<int>(2 * params.inter);
    args.n_tiles = static_cast<int>(params.inter / cuda::gateUpColumnsPerItem(r.shape));
    const CUtensorMap tmap = weightTensorMap(params.w13, params.num_experts * 2 * params.inter, params.hidden, 8);
    AFD_CUDA_CHECK(dispatchGroupedGemm(r.config, true, tmap, args, asStream(stream), options.programmatic_launch));
}

void moeDownCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                 const MoeCudaOptions& options) {
    const Resolved r = prepare(params, workspace, workspace_bytes, options);
    if (params.num_tokens == 0) {
        return;
    }
    GroupedGemmArgs args = commonArgs(params, r);
    args.b_src = reinterpret_cast<const uint16_t*>(r.view.h);
    args.out = reinterpret_cast<uint16_t*>(r.view.y);
    args.k = static_cast<int>(params.inter);
    args.b_ld = static_cast<int>(params.inter);
    args.out_ld = static_cast<int>(params.hidden);
    args.a_rows = static_cast<int>(params.hidden);
    args.n_tiles = static_cast<int>(params.hidden / cuda::downRowsPerItem(r.shape));
    const CUtensorMap tmap = weightTensorMap(params.w2, params.num_experts * params.hidden, params.inter,
                                             static_cast<uint32_t>(cuda::downRowsPerItem(r.shape)));
    AFD_CUDA_CHECK(dispatchGroupedGemm(r.config, false, tmap, args, asStream(stream), options.programmatic_launch));
}

void moeCombineCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                    const MoeCudaOptions& options) {
    const Resolved r = prepare(params, workspace, workspace_bytes, options);
    if (params.num_tokens == 0) {
        return;
    }
    AFD_CUDA_CHECK(cuda::launchMoeCombine(r.view.entry_slot, params.topk_weights,
                                          reinterpret_cast<const uint16_t*>(r.view.y),
                                          static_cast<uint16_t*>(params.out), static_cast<int>(params.num_tokens),
                                          static_cast<int>(params.top_k), static_cast<int>(params.hidden),
                                          asStream(stream), options.programmatic_launch));
}

void moeForwardCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                    const MoeCudaOptions& options) {
    moePermuteCuda(params, workspace, workspace_bytes, stream, options);
    moeGateUpCuda(params, workspace, workspace_bytes, stream, options);
    moeDownCuda(params, workspace, workspace_bytes, stream, options);
    moeCombineCuda(params, workspace, workspace_bytes, stream, options);
}

void routerForwardCuda(const RouterParams& params, void* stream) {
    AFD_CHECK(params.act_dtype == ActDType::kBf16, "routerForwardCuda: act_dtype must be kBf16");
    AFD_CHECK(params.num_tokens >= 0, "routerForwardCuda: num_tokens {} < 0", params.num_tokens);
    if (params.num_tokens == 0) {
        return;
    }
    AFD_CHECK(params.x && params.gate_w && params.topk_ids && params.topk_weights,
              "routerForwardCuda: null device pointer in params");
    AFD_CHECK(params.hidden > 0 && params.hidden % 16 == 0, "routerForwardCuda: hidden {} must be a multiple of 16",
              params.hidden);
    AFD_CHECK(params.num_experts > 0 && params.num_experts % 32 == 0 && params.num_experts <= 256,
              "routerForwardCuda: num_experts {} must be a multiple of 32 and at most 256", params.num_experts);
    AFD_CHECK(params.top_k >= 1 && params.top_k <= 32 && params.top_k <= params.num_experts,
              "routerForwardCuda: top_k {} outside [1, min(32, num_experts)]", params.top_k);
    AFD_CUDA_CHECK(cuda::launchRouter(reinterpret_cast<const uint16_t*>(params.x),
                                      reinterpret_cast<const uint16_t*>(params.gate_w), params.logits,
                                      params.topk_ids, params.topk_weights, static_cast<int>(params.num_tokens),
                                      static_cast<int>(params.hidden), static_cast<int>(params.num_experts),
                                      static_cast<int>(params.top_k), params.norm_topk_prob, asStream(stream)));
}

}  // namespace afd::kernels
