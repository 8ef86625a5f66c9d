// Harness of the CUDA paged attention against the fp32 CPU reference (kernels::pagedAttentionCpu on the bf16 inputs):
// the decode kernel (batches 1 to 64 of mixed lengths up to 4096, a 32k context over many splits, GQA groups of 1 to
// 32 query heads, every head_dim and block size), both prefill kernels (one-shot, chunked, ragged, mixed with 1-row
// and zero-length chunks, empty chunks), chunked prefill against one-shot, decode rows bit for bit the same alone and
// in any batch, and CUDA graph replays with new lengths.
// Fresh random inputs behind shuffled block tables; outputs and workspace poisoned (NaN) before every run; relative L2
// error under 1e-2 over the output and under 2e-2 for every chunk (exact zeros where the reference is zero). The
// host-side argument checks are in paged_attention_args_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/paged_attention_launch.h"
#include "kernels_cuda/paged_attention_test_util.h"

namespace afd::kernels {
namespace {

using cuda::PagedPrefillKernel;
using test::AttentionShape;
using test::ChunkSpec;
using test::PagedProblem;

constexpr double kTolerance = 1e-2;
constexpr double kChunkTolerance = 2e-2;

std::string describe(const AttentionShape& s) {
    return "H " + std::to_string(s.num_heads) + " Hkv " + std::to_string(s.num_kv_heads) + " D " +
           std::to_string(s.head_dim) + " bs " + std::to_string(s.block_size);
}

const char* kernelName(PagedPrefillKernel k) {
    return k == PagedPrefillKernel::kMma ? "mma" : (k == PagedPrefillKernel::kWgmma ? "wgmma" : "auto");
}

void expectMatches(const PagedProblem& problem, const std::vector<float>& got, const std::vector<float>& want) {
    const test::ErrorReport e = test::compareOutputs(problem, got, want);
    EXPECT_LT(e.total, kTolerance);
    EXPECT_LT(e.worst_chunk, kChunkTolerance)
        << "chunk " << e.worst_chunk_index << " (rows " << problem.chunks[std::max(e.worst_chunk_index, 0)].rows
        << ", len " << problem.chunks[std::max(e.worst_chunk_index, 0)].len << ")";
}

void checkAgainstCpu(const PagedProblem& problem, PagedPrefillKernel prefill, int max_q_len = 0, int max_seq_len = 0) {
    const std::vector<float> got = test::runPagedAttention(problem, prefill, max_q_len, max_seq_len);
    expectMatches(problem, got, test::referencePagedAttention(problem));
}

std::vector<ChunkSpec> decodeBatch(int batch, int max_len, std::mt19937& rng) {
    std::uniform_int_distribution<int> len(1, max_len);
    std::vector<ChunkSpec> chunks;
    for (int i = 0; i < batch; ++i) {
        chunks.push_back({1, len(rng)});
    }
    return chunks;
}

// The shapes of the harness: every head_dim, block size and GQA ratio at least once; Qwen3-30B-A3B's (32 q / 4 kv
// heads, head_dim 128) at every block size.
const std::vector<AttentionShape>& shapes() {
    static const std::vector<AttentionShape> all = {
        {32, 4, 128, 16}, {32, 4, 128, 32}, {32, 4, 128, 64}, {32, 4, 128, 128},  // 8:1
        {4, 4, 64, 16},   {8, 4, 64, 64},   {8, 2, 256, 32},  {8, 1, 32, 128},    // 1:1, 2:1, 4:1, 8:1
        {2, 2, 16, 16},   {8, 8, 256, 64},  {64, 2, 128, 16}, {12, 4, 32, 32},    // 32:1 (two head blocks), 3:1
        {16, 1, 16, 64},  {6, 2, 64, 128},
    };
    return all;
}

TEST(PagedAttentionCudaTest, DecodeMatchesCpuReference) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(2901);
    for (const AttentionShape& shape : shapes()) {
        const bool qwen = shape.num_heads == 32 && shape.num_kv_heads == 4;
        for (int batch : {1, 3, 17, 64}) {
            if (batch == 64 && !qwen) {
                continue;  // the CPU reference of the large batches only where it matters
            }
            SCOPED_TRACE(describe(shape) + " batch " + std::to_string(batch));
            std::vector<ChunkSpec> chunks = decodeBatch(batch, 4096, rng);
            if (batch >= 3) {  // lengths around the sub-tile, split and page edges
                chunks[0].len = 1;
                chunks[1].len = 2049;
                chunks[2].len = 16 * (1 + static_cast<int>(rng() % 8)) + static_cast<int>(rng() % 2);
            }
            checkAgainstCpu(test::makePagedProblem(shape, chunks, rng), PagedPrefillKernel::kAuto);
        }
    }
}

// A host bound above every real length (as a captured graph has): more splits than any chunk fills.
TEST(PagedAttentionCudaTest, DecodeWithLooseLengthBound) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(2902);
    const AttentionShape shape{32, 4, 128, 16};
    const PagedProblem problem = test::makePagedProblem(shape, decodeBatch(5, 700, rng), rng, 16384 / 16);
    checkAgainstCpu(problem, PagedPrefillKernel::kAuto, 1, 16384);
}

TEST(PagedAttentionCudaTest, DecodeLongContextManySplits) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(2903);
    for (const AttentionShape& shape :
         {AttentionShape{32, 4, 128, 16}, AttentionShape{32, 4, 128, 128}, AttentionShape{8, 1, 64, 64}}) {
        SCOPED_TRACE(describe(shape));
        checkAgainstCpu(test::makePagedProblem(shape, {{1, 32768}}, rng), PagedPrefillKernel::kAuto);
        checkAgainstCpu(test::makePagedProblem(shape, {{1, 32768}, {1, 5}, {1, 3000}}, rng), PagedPrefillKernel::kAuto);
    }
}

// Padding rows of a replayed graph (seq_len 0) get zeros; chunks without rows are passed over.
TEST(PagedAttentionCudaTest, DecodePaddingChunksWriteZeros) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(2904);
    for (const AttentionShape& shape : {AttentionShape{32, 4, 128, 16}, AttentionShape{64, 2, 64, 32}}) {
        SCOPED_TRACE(describe(shape));
        const std::vector<ChunkSpec> chunks = {{1, 100}, {1, 0}, {0, 50}, {1, 4000}, {1, 0}, {1, 1}};
        checkAgainstCpu(test::makePagedProblem(shape, chunks, rng, 4096 / shape.block_size, 3, 1 << 30),
                        PagedPrefillKernel::kAuto, 1, 4096);
    }
}

std::vector<PagedPrefillKernel> prefillKernels(int head_dim) {
    if (cuda::pagedPrefillWgmmaSupports(head_dim)) {
        return {PagedPrefillKernel::kMma, PagedPrefillKernel::kWgmma};
    }
    return {PagedPrefillKernel::kMma};
}

// The prefill cases: one-shot chunks (rows = len) of lengths around the tile edges, chunked pieces (rows < len),
// ragged mixes with 1-row (decode) chunks, empty chunks and zero-length padding chunks.
std::vector<std::vector<ChunkSpec>> prefillCases(std::mt19937& rng) {
    std::uniform_int_distribution<int> len(1, 1200);
    std::vector<ChunkSpec> mixed;
    for (int i = 0; i < 12; ++i) {
        const int l = len(rng);
        mixed.push_back({i % 3 == 0 ? std::max(1, l / 4) : 1, l});
    }
    return {
        {{1, 1}, {7, 7}, {64, 64}, {129, 129}, {300, 300}},
        {{1000, 1000}},
        {{100, 700}, {1, 900}, {33, 33}, {256, 1024}},
        mixed,
        {{5, 0}, {17, 40}, {0, 10}, {1, 0}, {64, 200}, {0, 0}, {2, 2}},
    };
}

TEST(PagedAttentionCudaTest, PrefillMatchesCpuReference) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(2905);
    const std::vector<std::vector<ChunkSpec>> cases = prefillCases(rng);
    for (const AttentionShape& shape : shapes()) {
        for (size_t c = 0; c < cases.size(); ++c) {
            if (c == 1 && shape.num_heads > 8 && shape.block_size != 16) {
                continue;  // the 1000-token one-shot chunk at the wide shapes once (the CPU reference is slow)
            }
            const PagedProblem problem = test::makePagedProblem(shape, cases[c], rng, 0, 3, 1 << 30);
            const std::vector<float> want = test::referencePagedAttention(problem);
            for (PagedPrefillKernel kernel : prefillKernels(shape.head_dim)) {
                SCOPED_TRACE(describe(shape) + " kernel " + kernelName(kernel) + " case " + std::to_string(c));
                expectMatches(problem, test::runPagedAttention(problem, kernel, std::max(problem.maxRows(), 2)), want);
            }
        }
    }
}

// Only 1-row chunks through the prefill kernel (a mixed step's decode rows), and a loose q-length bound.
// Decode rows in a call with prefill chunks (a mixed step): the decode kernel serves them, the prefill kernel the rest.
TEST(PagedAttentionCudaTest, DecodeRowsOfAMixedCall) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(2906);
    for (const AttentionShape& shape : {AttentionShape{32, 4, 128, 16}, AttentionShape{8, 8, 64, 64}}) {
        for (PagedPrefillKernel kernel : prefillKernels(shape.head_dim)) {
            SCOPED_TRACE(describe(shape) + " kernel " + kernelName(kernel));
            checkAgainstCpu(test::makePagedProblem(shape, decodeBatch(9, 3000, rng), rng), kernel, 512);
        }
    }
}

// The chunks `keep` of `problem` as a call of their own (the same caches and block table rows).
PagedProblem subProblem(const PagedProblem& problem, const std::vector<int>& keep) {
    PagedProblem sub = problem;
    sub.chunks.clear();
    sub.q_start = {0};
    sub.seq_len.clear();
    sub.block_tables.clear();
    sub.q.clear();
    const size_t row = static_cast<size_t>(problem.shape.num_heads) * problem.shape.head_dim;
    const auto width = static_cast<size_t>(problem.max_blocks_per_seq);
    for (const int i : keep) {
        const auto c = static_cast<size_t>(i);
        sub.chunks.push_back(problem.chunks[c]);
        sub.q_start.push_back(sub.q_start.back() + problem.chunks[c].rows);
        sub.seq_len.push_back(problem.seq_len[c]);
        sub.block_tables.insert(sub.block_tables.end(), problem.block_tables.begin() + static_cast<int64_t>(c * width),
                                problem.block_tables.begin() + static_cast<int64_t>((c + 1) * width));
        sub.q.insert(sub.q.end(), problem.q.begin() + static_cast<int64_t>(problem.q_start[c] * row),
                     problem.q.begin() + static_cast<int64_t>(problem.q_start[c + 1] * row));
    }
    return sub;
}

// Batch invariance: a decode row's output is the same bits alone, beside other decode rows (with the tight bound and
// with a graph's loose one) and beside prefill chunks; lengths around the split sizes.
TEST(PagedAttentionCudaTest, DecodeRowsAreBatchInvariant) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(2910);
    const AttentionShape shape{32, 4, 128, 16};
    const std::vector<ChunkSpec> chunks = {{1, 1},    {100, 300}, {1, 255},  {1, 256},   {1, 257}, {37, 37},
                                           {1, 1000}, {1, 3000},  {1, 8193}, {1, 33000}, {2, 500}, {1, 64}};
    const PagedProblem mixed = test::makePagedProblem(shape, chunks, rng, 65536 / shape.block_size);
    std::vector<int> decode_rows;
    for (int i = 0; i < mixed.numSeqs(); ++i) {
        if (chunks[static_cast<size_t>(i)].rows == 1) decode_rows.push_back(i);
    }
    const size_t row = static_cast<size_t>(shape.num_heads) * shape.head_dim;
    const auto rowOf = [&](const std::vector<float>& out, const PagedProblem& p, int chunk) {
        const auto first = out.begin() + static_cast<int64_t>(p.q_start[static_cast<size_t>(chunk)] * row);
        return std::vector<float>(first, first + static_cast<int64_t>(row));
    };
    const std::vector<float> in_mixed = test::runPagedAttention(mixed, PagedPrefillKernel::kAuto);
    const PagedProblem decodes = subProblem(mixed, decode_rows);
    const std::vector<float> tight = test::runPagedAttention(decodes, PagedPrefillKernel::kAuto);
    const std::vector<float> loose = test::runPagedAttention(decodes, PagedPrefillKernel::kAuto, 1, 65536);
    for (size_t d = 0; d < decode_rows.size(); ++d) {
        const int chunk = decode_rows[d];
        SCOPED_TRACE("len " + std::to_string(chunks[static_cast<size_t>(chunk)].len));
        const PagedProblem alone = subProblem(mixed, {chunk});
        const std::vector<float> want = test::runPagedAttention(alone, PagedPrefillKernel::kAuto);
        EXPECT_TRUE(rowOf(tight, decodes, static_cast<int>(d)) == want);
        EXPECT_TRUE(rowOf(loose, decodes, static_cast<int>(d)) == want);
        EXPECT_TRUE(rowOf(in_mixed, mixed, chunk) == want);
    }
    expectMatches(mixed, in_mixed, test::referencePagedAttention(mixed));
}

// A long sequence prefilled in pieces (each call: the next rows against the cache written so far) gives what one call
// over the whole sequence gives, and both match the reference.
TEST(PagedAttentionCudaTest, ChunkedPrefillMatchesOneShot) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(2907);
    for (const AttentionShape& shape :
         {AttentionShape{32, 4, 128, 16}, AttentionShape{8, 2, 256, 64}, AttentionShape{4, 4, 32, 32}}) {
        constexpr int kLen = 1500;
        const PagedProblem whole = test::makePagedProblem(shape, {{kLen, kLen}}, rng);
        const std::vector<float> want = test::referencePagedAttention(whole);
        for (PagedPrefillKernel kernel : prefillKernels(shape.head_dim)) {
            SCOPED_TRACE(describe(shape) + " kernel " + kernelName(kernel));
            const std::vector<float> one_shot = test::runPagedAttention(whole, kernel);
            expectMatches(whole, one_shot, want);

            const size_t row = static_cast<size_t>(shape.num_heads) * shape.head_dim;
            std::vector<float> pieces;
            int done = 0;
            for (int piece : {1, 200, 513, 64, 722}) {
                PagedProblem part = whole;  // same cache and table, the piece's rows
                part.chunks = {{piece, done + piece}};
                part.q_start = {0, piece};
                part.seq_len = {done + piece};
                part.q.assign(whole.q.begin() + static_cast<int64_t>(done * row),
                              whole.q.begin() + static_cast<int64_t>((done + piece) * row));
                const std::vector<float> got = test::runPagedAttention(part, kernel, piece == 1 ? 2 : 0);
                pieces.insert(pieces.end(), got.begin(), got.end());
                done += piece;
            }
            ASSERT_EQ(done, kLen);
            EXPECT_LT(test::relativeL2(pieces, one_shot), kTolerance);
            EXPECT_LT(test::relativeL2(pieces, want), kTolerance);
        }
    }
}

// One capture with host bounds; replays after new lengths, row counts, block tables and contents were uploaded into
// the same buffers give the reference's results.
void checkGraphReplays(const AttentionShape& shape, int max_seqs, int max_q_len, int max_seq_len,
                       const std::vector<std::vector<ChunkSpec>>& steps, std::mt19937& rng) {
    const int table_blocks = max_seq_len / shape.block_size;
    std::vector<PagedProblem> problems;
    int64_t rows = 0;
    int64_t cache = 0;
    for (const auto& chunks : steps) {
        problems.push_back(test::makePagedProblem(shape, chunks, rng, table_blocks));
        ASSERT_EQ(problems.back().numSeqs(), max_seqs);
        rows = std::max(rows, problems.back().numRows());
        cache = std::max(cache, static_cast<int64_t>(problems.back().k_cache.size()));
    }
    const size_t ws = pagedAttentionWorkspaceBytes(max_seqs, max_q_len, shape.num_heads, shape.head_dim, max_seq_len);
    test::DeviceProblem device(rows, max_seqs, max_seqs * table_blocks, cache, shape, ws);
    cuda::Stream stream;
    // An eager call first (the kernels' attributes are set outside the capture), then the capture.
    device.upload(problems[0]);
    PagedAttentionCudaParams params = device.params(problems[0], max_q_len, max_seq_len);
    pagedAttentionCuda(params, stream.get());
    AFD_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    cudaGraph_t graph = nullptr;
    AFD_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
    pagedAttentionCuda(params, stream.get());
    AFD_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph));
    cudaGraphExec_t exec = nullptr;
    AFD_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cuda::GraphExec owned(exec);
    AFD_CUDA_CHECK(cudaGraphDestroy(graph));
    for (size_t i = 0; i < problems.size(); ++i) {
        SCOPED_TRACE("replay " + std::to_string(i));
        device.upload(problems[i]);
        device.poisonOutput();
        AFD_CUDA_CHECK(cudaGraphLaunch(owned.get(), stream.get()));
        AFD_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        expectMatches(problems[i], device.output(problems[i]), test::referencePagedAttention(problems[i]));
    }
}

TEST(PagedAttentionCudaTest, DecodeGraphReplaysNewLengths) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(2908);
    const AttentionShape shape{32, 4, 128, 16};
    checkGraphReplays(shape, 4, 1, 8192,
                      {{{1, 100}, {1, 5000}, {1, 1}, {1, 0}},
                       {{1, 8192}, {1, 3}, {1, 2048}, {1, 700}},
                       {{1, 0}, {1, 0}, {1, 17}, {1, 64}}},
                      rng);
}

TEST(PagedAttentionCudaTest, PrefillGraphReplaysNewLengths) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(2909);
    checkGraphReplays(AttentionShape{32, 4, 128, 64}, 3, 256, 1024,
                      {{{256, 256}, {1, 700}, {0, 0}}, {{10, 1000}, {100, 100}, {1, 1}}, {{3, 0}, {256, 1024}, {7, 9}}},
                      rng);
    checkGraphReplays(AttentionShape{4, 2, 32, 16}, 2, 128, 512, {{{128, 128}, {1, 300}}, {{5, 512}, {64, 64}}}, rng);
}

}  // namespace
}  // namespace afd::kernels
