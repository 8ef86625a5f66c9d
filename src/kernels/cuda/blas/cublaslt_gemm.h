// Dense GEMMs through cuBLASLt: y[M, N] = x[M, K] · w[N, K]^T (+ bias[N]), x and w BF16 row-major, FP32 accumulation
// (compute type 32F), y BF16 or FP32 (the LM head's logits). The attention side's projections (fused QKV, o_proj) and
// the LM head.
//
// Batch invariance: a row of y depends only on its row of x, never on M or on the other rows. The algorithm of a shape
// is restricted to ones that reduce K in one pass inside a tile: tensor cores with an FP32 accumulator (no FMA
// kernels, which reduce K in another order), no split-K (CUBLASLT_ALGO_CONFIG_SPLITK_NUM 1, reduction scheme NONE),
// and first of all ones that need no workspace (where split-K and stream-K kernels keep their partial sums); only when
// cuBLASLt offers none of those for a shape, the best of the others without split-K (GemmAlgoInfo::workspace_bytes
// says so); where it offers none at all, the algorithm of kGemmReferenceRows rows of the same weight.
// GemmAlgoPolicy::kPerWeight goes further: one algorithm for every M of a weight (the one of kGemmReferenceRows).
//
// CUDA graphs: the algorithm and descriptors of a shape are chosen and cached the first time the shape is seen
// (prepare() does it ahead); matmul() of a cached shape makes no allocation, no synchronisation and no device query
// beyond the current device, and uses only the object's fixed workspace, so it can be captured. matmul() of a shape
// that is not cached while its stream captures is an error (the heuristic query does not belong in a capture).
//
// Threads and streams: one thread at a time per object. matmul() calls on different streams must not overlap (they
// share the workspace). The object belongs to one GPU: it allocates there and matmul() requires it to be current.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/bf16.h"

namespace afd::kernels::cuda {

enum class GemmOutDType : uint8_t { kBf16, kF32 };
const char* gemmOutDTypeName(GemmOutDType dtype);

// What an algorithm is chosen for (the cache key).
struct GemmShape {
    int64_t m = 0;
    int64_t n = 0;
    int64_t k = 0;
    int64_t ldx = 0;
    int64_t ldy = 0;
    GemmOutDType out_dtype = GemmOutDType::kBf16;
    bool bias = false;
    auto operator<=>(const GemmShape&) const = default;
    std::string toString() const;
};

// Requirements (checkGemmParams, AFD_CHECK naming the field): n >= 1; m >= 0 (0 does nothing); k % 8 == 0 and
// ldx % 8 == 0, ldx >= k (rows of x and w start on 16 bytes); ldy >= n with 16-byte rows (ldy % 8 == 0 for BF16,
// % 4 for FP32); a bias only with BF16 y; x, w, y and bias device pointers, 16-byte aligned. A column slice of a wider
// matrix is a pointer to its first column with the wide matrix's ld (its offset a multiple of 8 elements).
struct GemmParams {
    int64_t m = 0;                     // rows of x and y (tokens)
    int64_t n = 0;                     // output features (rows of w)
    int64_t k = 0;                     // input features
    const core::Bf16* x = nullptr;     // [m, ldx]: columns [0, k) read
    int64_t ldx = 0;                   // elements from one row of x to the next
    const core::Bf16* w = nullptr;     // [n, k], contiguous
    const core::Bf16* bias = nullptr;  // [n], or null
    void* y = nullptr;                 // [m, ldy] of out_dtype: columns [0, n) written, the others untouched
    int64_t ldy = 0;
    GemmOutDType out_dtype = GemmOutDType::kBf16;

    GemmShape shape() const { return {m, n, k, ldx, ldy, out_dtype, bias != nullptr}; }
};

// Checks the rules above without touching a GPU (the shape alone: sizes and leading dimensions).
void checkGemmShape(const GemmShape& shape);
void checkGemmParams(const GemmParams& params);

enum class GemmAlgoPolicy {
    kPerShape,   // the heuristic's best batch-invariant algorithm for each (M, N, K, ldx, ldy, dtype, bias)
    kPerWeight,  // one algorithm for every M of an (N, K, ldx, ldy, dtype, bias): the one chosen at kGemmReferenceRows
};
inline constexpr int64_t kGemmReferenceRows = 256;

struct CublasLtGemmOptions {
    size_t workspace_bytes = size_t{32} << 20;  // allocated once on the GPU; what cuBLASLt may use per call
    GemmAlgoPolicy policy = GemmAlgoPolicy::kPerShape;
};

// The chosen algorithm's configuration (cublasLtMatmulAlgoConfigAttributes_t), for logs and tests.
struct GemmAlgoInfo {
    int32_t algo_id = 0;
    uint32_t tile_id = 0;
    uint32_t stages_id = 0;
    int32_t split_k = 0;
    uint32_t reduction_scheme = 0;
    uint32_t cta_swizzling = 0;
    uint32_t custom_option = 0;
    uint16_t inner_shape_id = 0;
    uint16_t cluster_shape_id = 0;
    uint64_t numerical_impl_flags = 0;
    size_t workspace_bytes = 0;  // what the algorithm uses of the workspace for this shape
    float waves = 0.0f;          // the heuristic's estimated device utilisation
    int candidates = 0;          // heuristic results for the shape
    int rejected = 0;            // of them, refused as not batch-invariant
    // > 0: the algorithm chosen at this M for the same weight shape (kPerWeight, or kPerShape where the heuristic
    // offered no batch-invariant algorithm for this M), checked to run at this M.
    int64_t borrowed_from_m = 0;
    std::string toString() const;
};

// One algorithm cuBLASLt offers for a shape (its heuristic's results, or one of them with split-K forced), for the
// lab's comparison of algorithms (`afd bench gemm`); `algo` is the opaque cublasLtMatmulAlgo_t.
struct GemmCandidate {
    GemmAlgoInfo info;
    bool batch_invariant = false;  // the rule the engine's choice follows (the class header)
    bool forced_split = false;     // split-K set here on a heuristic result (deterministic reduction in FP32)
    std::array<uint64_t, 8> algo{};
};

class CublasLtGemm {
public:
    // Creates the cuBLASLt handle and allocates the workspace on `gpu` (made current for the call, then restored).
    explicit CublasLtGemm(int gpu, const CublasLtGemmOptions& options = {});
    ~CublasLtGemm();
    CublasLtGemm(const CublasLtGemm&) = delete;
    CublasLtGemm& operator=(const CublasLtGemm&) = delete;

    // Chooses and caches the algorithm of each shape not cached yet (host work only; no stream is used). Throws
    // core::Error naming the shape when cuBLASLt offers no batch-invariant algorithm for it.
    void prepare(const GemmShape& shape);
    void prepare(std::span<const GemmShape> shapes);

    // y = x · w^T (+ bias) on `stream`, asynchronous. The GPU of this object must be current.
    void matmul(const GemmParams& params, cudaStream_t stream);

    // Every algorithm the heuristic offers for `shape` (with no workspace, then with the object's), de-duplicated, in
    // the heuristic's order; then, for each of them that is batch-invariant, the same with split-K set to each of
    // `forced_splits` (> 1) and the reduction in FP32 through the workspace, where cuBLASLt accepts it for the shape
    // within the workspace. Host work only.
    std::vector<GemmCandidate> candidates(const GemmShape& shape, std::span<const int> forced_splits);
    // matmul() with a candidate of params' shape instead of the cached choice (no capture restrictions beyond
    // matmul()'s).
    void matmulWith(const GemmParams& params, const GemmCandidate& candidate, cudaStream_t stream);

    bool isPrepared(const GemmShape& shape) const;
    size_t numPrepared() const;
    // The algorithm of a prepared shape; throws when it is not prepared.
    GemmAlgoInfo algoInfo(const GemmShape& shape) const;

    int gpu() const;
    size_t workspaceBytes() const;
    GemmAlgoPolicy policy() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace afd::kernels::cuda
