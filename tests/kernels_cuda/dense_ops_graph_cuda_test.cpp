// The attention side's small device ops captured in one CUDA graph (embedding -> residual add + RMSNorm -> QKV
// post-processing with the paged KV write -> final norm of selected rows -> fp32 staging copy), replayed over several
// steps with new inputs written into the same buffers: every output equals an eager run's bit for bit.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/dense_cuda.h"
#include "kernels/rope.h"
#include "kernels_cuda/cuda_test_util.h"

namespace afd::kernels {
namespace {

using test::DeviceBuffer;

TEST(DenseOpsGraphCudaTest, CapturedOpsReplayAsEager) {
    AFD_REQUIRE_SM90();
    // The tiny fixture's attention shapes, 8 tokens of a padded decode batch.
    const int64_t tokens = 8, vocab = 384, hidden = 64, heads = 4, kv_heads = 2, head_dim = 16;
    const int64_t width = (heads + 2 * kv_heads) * head_dim;
    const int64_t block_size = 16, num_blocks = 4, max_position = 256;
    std::mt19937 rng(71);
    const auto table = test::randomBf16(static_cast<size_t>(vocab * hidden), 1.0f, rng);
    const auto norm_w = test::randomBf16(static_cast<size_t>(hidden), 1.0f, rng);
    const auto head_w = test::randomBf16(static_cast<size_t>(head_dim), 1.0f, rng);
    std::vector<int32_t> all_positions(static_cast<size_t>(max_position));
    std::iota(all_positions.begin(), all_positions.end(), 0);
    std::vector<float> cos(static_cast<size_t>(max_position * head_dim / 2));
    std::vector<float> sin(cos.size());
    ropeTableCpu(all_positions.data(), max_position, head_dim, 1e6, cos.data(), sin.data());

    DeviceBuffer d_table = DeviceBuffer::from(table), d_norm = DeviceBuffer::from(norm_w);
    DeviceBuffer d_head_w = DeviceBuffer::from(head_w), d_cos = DeviceBuffer::from(cos),
                 d_sin = DeviceBuffer::from(sin);
    DeviceBuffer d_ids(tokens * 4), d_delta(tokens * hidden * 2), d_qkv(tokens * width * 2);
    DeviceBuffer d_positions(tokens * 4), d_slots(tokens * 4), d_rows(2 * 4);
    DeviceBuffer d_residual(tokens * hidden * 4), d_normed(tokens * hidden * 2), d_q(tokens * heads * head_dim * 2);
    const size_t cache_bytes = static_cast<size_t>(num_blocks * block_size * kv_heads * head_dim) * 2;
    DeviceBuffer d_k_cache(cache_bytes), d_v_cache(cache_bytes), d_final(2 * hidden * 2), d_staged(tokens * hidden * 4);

    cudaStream_t stream = nullptr;
    AFD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    auto enqueueStep = [&] {
        embeddingCuda({tokens, vocab, hidden, d_ids.as<int32_t>(), d_table.as<core::Bf16>(), d_residual.as<float>()},
                      stream);
        AddRmsNormParams norm;
        norm.num_tokens = tokens;
        norm.hidden = hidden;
        norm.residual = d_residual.as<float>();
        norm.delta = d_delta.get();
        norm.delta_dtype = ActDType::kBf16;
        norm.weight = d_norm.as<core::Bf16>();
        norm.out = d_normed.as<core::Bf16>();
        addRmsNormCuda(norm, stream);
        QkvRopeParams qkv;
        qkv.num_tokens = tokens;
        qkv.num_heads = heads;
        qkv.num_kv_heads = kv_heads;
        qkv.head_dim = head_dim;
        qkv.qkv = d_qkv.as<core::Bf16>();
        qkv.q_norm = d_head_w.as<core::Bf16>();
        qkv.k_norm = d_head_w.as<core::Bf16>();
        qkv.positions = d_positions.as<int32_t>();
        qkv.rope_cos = d_cos.as<float>();
        qkv.rope_sin = d_sin.as<float>();
        qkv.max_position = max_position;
        qkv.slot_mapping = d_slots.as<int32_t>();
        qkv.num_blocks = num_blocks;
        qkv.block_size = block_size;
        qkv.q_out = d_q.as<core::Bf16>();
        qkv.k_cache = d_k_cache.as<core::Bf16>();
        qkv.v_cache = d_v_cache.as<core::Bf16>();
        qkvRopeCuda(qkv, stream);
        AddRmsNormParams final_norm;
        final_norm.num_tokens = tokens;
        final_norm.hidden = hidden;
        final_norm.residual = d_residual.as<float>();
        final_norm.weight = d_norm.as<core::Bf16>();
        final_norm.rows = d_rows.as<int32_t>();
        final_norm.num_rows = 2;
        final_norm.out = d_final.as<core::Bf16>();
        addRmsNormCuda(final_norm, stream);
        castCuda({tokens * hidden, ActDType::kBf16, ActDType::kF32, d_normed.get(), d_staged.get()}, stream);
    };
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    AFD_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    enqueueStep();
    AFD_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    AFD_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

    std::uniform_int_distribution<int32_t> any_id(0, static_cast<int32_t>(vocab - 1));
    std::uniform_int_distribution<int32_t> any_position(0, static_cast<int32_t>(max_position - 1));
    for (int step = 0; step < 3; ++step) {
        SCOPED_TRACE(testing::Message() << "step " << step);
        std::vector<int32_t> ids(tokens), positions(tokens), slots(tokens);
        for (int64_t t = 0; t < tokens; ++t) {
            ids[static_cast<size_t>(t)] = any_id(rng);
            positions[static_cast<size_t>(t)] = any_position(rng);
            slots[static_cast<size_t>(t)] = t < tokens - 2 ? static_cast<int32_t>(t * 7 + step) : -1;  // 2 padding
        }
        const std::vector<int32_t> rows = {static_cast<int32_t>(step), 5};
        const auto delta = test::randomBf16(static_cast<size_t>(tokens * hidden), 1.0f, rng);
        const auto qkv = test::randomBf16(static_cast<size_t>(tokens * width), 1.0f, rng);
        d_ids.upload(ids.data(), ids.size() * 4);
        d_positions.upload(positions.data(), positions.size() * 4);
        d_slots.upload(slots.data(), slots.size() * 4);
        d_rows.upload(rows.data(), rows.size() * 4);
        d_delta.upload(delta.data(), delta.size() * 2);
        d_qkv.upload(qkv.data(), qkv.size() * 2);
        std::vector<std::vector<uint8_t>> outputs[2];
        for (int replay = 0; replay < 2; ++replay) {
            for (DeviceBuffer* b : {&d_residual, &d_normed, &d_q, &d_k_cache, &d_v_cache, &d_final, &d_staged}) {
                b->poison();
            }
            AFD_CUDA_CHECK(cudaDeviceSynchronize());  // the uploads and memsets ran on the default stream
            if (replay == 1) {
                AFD_CUDA_CHECK(cudaGraphLaunch(exec, stream));
            } else {
                enqueueStep();
            }
            AFD_CUDA_CHECK(cudaStreamSynchronize(stream));
            for (DeviceBuffer* b : {&d_residual, &d_normed, &d_q, &d_k_cache, &d_v_cache, &d_final, &d_staged}) {
                outputs[replay].push_back(b->download<uint8_t>(b->bytes()));
            }
        }
        for (size_t i = 0; i < outputs[0].size(); ++i) {
            EXPECT_EQ(outputs[1][i], outputs[0][i]) << "output " << i << " differs between replay and eager";
        }
    }
    AFD_CUDA_CHECK(cudaGraphExecDestroy(exec));
    AFD_CUDA_CHECK(cudaGraphDestroy(graph));
    AFD_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace afd::kernels
