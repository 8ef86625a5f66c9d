// Host-side checks of pagedAttentionCuda (no GPU needed: every call here fails before any CUDA call, on pointers
// that are never dereferenced), and the decode split plan and workspace bound.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/check.h"
#include "kernels/cuda/paged_attention_launch.h"
#include "kernels/paged_attention_cuda.h"

namespace afd::kernels {
namespace {

// A valid decode call's params on dummy (aligned, never dereferenced) host pointers.
PagedAttentionCudaParams validParams() {
    alignas(16) static uint16_t data[64];
    alignas(16) static int32_t ints[64];
    PagedAttentionCudaParams p;
    p.num_seqs = 2;
    p.num_heads = 32;
    p.num_kv_heads = 4;
    p.head_dim = 128;
    p.block_size = 16;
    p.scale = 0.088f;
    p.q = data;
    p.k_cache = data;
    p.v_cache = data;
    p.q_start = ints;
    p.seq_len = ints;
    p.block_tables = ints;
    p.max_blocks_per_seq = 64;
    p.out = data;
    p.max_q_len = 1;
    p.max_seq_len = 1024;
    p.workspace = nullptr;
    p.workspace_bytes = 0;
    return p;
}

// The call throws core::Error whose message names `field`.
void expectRejected(const PagedAttentionCudaParams& p, const std::string& field) {
    try {
        pagedAttentionCuda(p, nullptr);
        ADD_FAILURE() << "accepted params with a bad " << field;
    } catch (const core::Error& e) {
        EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
}

TEST(PagedAttentionArgsTest, RejectsUnsupportedSizes) {
    for (int head_dim : {0, 8, 48, 96, 512}) {
        PagedAttentionCudaParams p = validParams();
        p.head_dim = head_dim;
        expectRejected(p, "head_dim");
    }
    for (int block_size : {0, 8, 24, 48, 256}) {
        PagedAttentionCudaParams p = validParams();
        p.block_size = block_size;
        expectRejected(p, "block_size");
    }
    PagedAttentionCudaParams p = validParams();
    p.num_kv_heads = 5;
    expectRejected(p, "num_kv_heads");
    p = validParams();
    p.num_heads = 0;
    expectRejected(p, "num_heads");
    p = validParams();
    p.scale = 0.0f;
    expectRejected(p, "scale");
    p = validParams();
    p.num_seqs = -1;
    expectRejected(p, "num_seqs");
    p = validParams();
    p.max_q_len = 0;
    expectRejected(p, "max_q_len");
}

TEST(PagedAttentionArgsTest, RejectsNullAndMisalignedPointers) {
    const char* fields[] = {"q", "k_cache", "v_cache", "q_start", "seq_len", "block_tables", "out"};
    for (const char* field : fields) {
        PagedAttentionCudaParams p = validParams();
        const std::string f = field;
        if (f == "q") p.q = nullptr;
        if (f == "k_cache") p.k_cache = nullptr;
        if (f == "v_cache") p.v_cache = nullptr;
        if (f == "q_start") p.q_start = nullptr;
        if (f == "seq_len") p.seq_len = nullptr;
        if (f == "block_tables") p.block_tables = nullptr;
        if (f == "out") p.out = nullptr;
        expectRejected(p, f + " is null");
    }
    PagedAttentionCudaParams p = validParams();
    p.k_cache = p.k_cache + 1;  // 2-byte offset
    expectRejected(p, "16-byte aligned");
}

TEST(PagedAttentionArgsTest, RejectsBoundsBeyondTheTable) {
    PagedAttentionCudaParams p = validParams();
    p.max_seq_len = p.max_blocks_per_seq * p.block_size + 1;
    expectRejected(p, "max_seq_len");
    p = validParams();
    p.max_seq_len = -1;
    expectRejected(p, "max_seq_len");
    p = validParams();
    p.max_blocks_per_seq = 0;
    expectRejected(p, "max_blocks_per_seq");
}

TEST(PagedAttentionArgsTest, RejectsMissingOrSmallWorkspace) {
    // One sequence of 4k tokens: the decode kernel splits it, so it needs the partials.
    PagedAttentionCudaParams p = validParams();
    p.num_seqs = 1;
    p.max_seq_len = 1024;
    const size_t needed = pagedAttentionWorkspaceBytes(1, 1, p.num_heads, p.head_dim, p.max_seq_len);
    ASSERT_GT(needed, 0u);
    expectRejected(p, "workspace");
    alignas(16) static uint8_t small[64];
    p.workspace = small;
    p.workspace_bytes = sizeof(small);
    expectRejected(p, "workspace");
    p.workspace = small + 4;
    p.workspace_bytes = needed;
    expectRejected(p, "workspace must be 16-byte aligned");
}

TEST(PagedAttentionArgsTest, RejectsTooManyPrefillChunks) {
    PagedAttentionCudaParams p = validParams();
    p.max_q_len = 16;
    p.num_seqs = cuda::kPrefillMaxSeqs + 1;
    expectRejected(p, "num_seqs");
}

TEST(PagedAttentionArgsTest, NoChunksIsANoOp) {
    PagedAttentionCudaParams p = validParams();
    p.num_seqs = 0;
    EXPECT_NO_THROW(pagedAttentionCuda(p, nullptr));
}

// The split size depends on a chunk's length alone (batch invariance): whole granules within [min, max], at most
// kDecodeSplitsPerChunk splits up to the length where the size reaches the maximum, covering the context exactly.
TEST(PagedAttentionArgsTest, SplitSizeDependsOnTheLengthAlone) {
    for (int len = 1; len <= 200000; len += len < 4096 ? 1 : 97) {
        SCOPED_TRACE("len " + std::to_string(len));
        const int tokens = cuda::decodeSplitTokens(len);
        const int splits = cuda::decodeSplits(len);
        ASSERT_EQ(tokens % cuda::kDecodeSplitGranule, 0);
        ASSERT_GE(tokens, cuda::kDecodeMinSplitTokens);
        ASSERT_LE(tokens, cuda::kDecodeMaxSplitTokens);
        ASSERT_GE(int64_t{splits} * tokens, len);
        ASSERT_LT(int64_t{splits - 1} * tokens, len);
        if (len <= cuda::kDecodeSplitsPerChunk * cuda::kDecodeMaxSplitTokens) {
            ASSERT_LE(splits, cuda::kDecodeSplitsPerChunk);
        }
    }
    EXPECT_EQ(cuda::decodeSplits(cuda::kDecodeMinSplitTokens), 1);
    EXPECT_EQ(cuda::decodeSplits(cuda::kDecodeMinSplitTokens + 1), 2);
}

// The grid takes every split at small batches and one CTA per (chunk, head block) once the batch fills the target;
// the workspace of any call fits the bound for its (num_seqs, max_seq_len), whatever its head counts, and the bound
// grows with both.
TEST(PagedAttentionArgsTest, SplitPlanAndWorkspaceBound) {
    for (int num_seqs : {1, 2, 3, 5, 8, 33, 64, 100, 256, 1000}) {
        size_t previous = 0;
        for (int max_seq_len : {0, 1, 63, 64, 65, 1000, 1024, 2048, 4097, 8192, 32768, 131072}) {
            const size_t bound = pagedAttentionWorkspaceBytes(num_seqs, 1, 32, 128, max_seq_len);
            EXPECT_GE(bound, previous) << "S " << num_seqs << " len " << max_seq_len;
            previous = bound;
            EXPECT_GE(bound, pagedAttentionWorkspaceBytes(num_seqs > 1 ? num_seqs - 1 : 1, 1, 32, 128, max_seq_len));
            EXPECT_EQ(bound, pagedAttentionWorkspaceBytes(num_seqs, 7, 32, 128, max_seq_len));
            for (int units_per_seq : {1, 2, 4, 8, 16, 64}) {
                const int64_t units = int64_t{num_seqs} * units_per_seq;
                const cuda::DecodeSplitPlan plan = cuda::decodeSplitPlan(units, max_seq_len);
                SCOPED_TRACE("S " + std::to_string(num_seqs) + " len " + std::to_string(max_seq_len) + " units " +
                             std::to_string(units_per_seq));
                EXPECT_EQ(plan.splits, cuda::decodeSplits(std::max(max_seq_len, 1)));
                EXPECT_GE(plan.grid, 1);
                EXPECT_LE(plan.grid, plan.splits);
                if (units >= cuda::kDecodeTargetCtas) {
                    EXPECT_EQ(plan.grid, 1);
                }
                EXPECT_LE(cuda::decodePartialBytes(num_seqs, plan.splits, 32, 128), bound);
            }
        }
    }
}

}  // namespace
}  // namespace afd::kernels
