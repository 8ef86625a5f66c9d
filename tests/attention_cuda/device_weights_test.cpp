// Model weights on the GPU (attention/cuda/device_weights.h). Host only: the device bytes from the config
// (Qwen3-30B-A3B and selections of it, against the parameter count and an independent sum; a small model whose heads
// and MLP widths are padded), the layout of padded heads and widths, the selection a host ModelWeights holds, the
// refusals (no such GPU, a shape the packed layout cannot hold). On a GPU: the tiny HF fixture uploaded and read back
// (every tensor equal, the fused QKV rows the three projections, the packed experts unpacked on the host equal to the
// host's, padding zero); a model of head_dim 8 and MLP widths 16 and 44 uploaded and read back (the checkpoint's values
// in the real lanes and widths, zeros in the padded ones); random weights bit for bit the tensors of a gen-model
// checkpoint of the same seed (attention bias, a dense layer, tied and untied embeddings, an FFN rank's expert range,
// padded heads and widths); their statistics, reproducibility and independence; the full Qwen3-30B-A3B drawn on one
// GPU (its time printed, not asserted).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "attention/cuda/device_weights.h"
#include "attention/cuda/device_weights_layout.h"
#include "common/subprocess_util.h"
#include "core/bf16.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "model/checkpoint.h"
#include "model/model_config.h"
#include "model/synthetic.h"
#include "model/weights.h"

namespace afd::attention {
namespace {

using core::Tensor;
using model::ModelConfig;
using model::ModelWeights;
using model::WeightSelection;

const std::string kTiny = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";

#define SKIP_WITHOUT_GPU()                                                       \
    do {                                                                         \
        if (kernels::cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device"; \
    } while (0)

int64_t roundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// The head_dim the device stores, written apart from the code: the first of 16, 32, ... 256 that holds the model's.
int64_t storedHeadDim(int64_t head_dim) {
    int64_t stored = 16;
    while (stored < head_dim) stored *= 2;
    return stored;
}

// An independent count of the bf16 elements the device weights hold (heads at the stored head_dim, MLP widths rounded
// up to 32, packed w2 padded to 64 reduction columns).
int64_t deviceElements(const ModelConfig& c, const WeightSelection& s) {
    const int64_t H = c.hidden_size;
    const int64_t hs = storedHeadDim(c.head_dim);
    const int64_t q = c.num_attention_heads * hs;
    const int64_t kv = c.num_key_value_heads * hs;
    int64_t n = 0;
    if (s.attention) {
        n += c.vocab_size * H * (c.tie_word_embeddings ? 1 : 2) + H;
        n += c.num_hidden_layers * (2 * H + 2 * hs + (q + 2 * kv) * H + H * q);
        if (c.attention_bias) n += c.num_hidden_layers * (q + 2 * kv + H);
    }
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        if (c.isMoeLayer(l)) {
            if (s.router) n += c.num_experts * H;
            const int64_t I = roundUp(c.moe_intermediate_size, 32);
            n += s.numExperts() * (2 * I * H + H * roundUp(I, 64));
        } else if (s.dense_mlp) {
            const int64_t I = roundUp(c.intermediate_size, 32);
            n += 2 * I * H + H * roundUp(I, 64);
        }
    }
    return n;
}

// A small model whose every shape the device pads: 8 heads of head_dim 8 (hf_crosscheck's mha_headdim8), experts of
// width 16 (its experts64_top8), a dense layer of width 44 (not even a multiple of 8), attention bias.
ModelConfig paddedShapesConfig() {
    ModelConfig c = ModelConfig::preset("tiny").value();
    c.num_attention_heads = 8;
    c.num_key_value_heads = 8;
    c.head_dim = 8;
    c.moe_intermediate_size = 16;
    c.intermediate_size = 44;
    c.mlp_only_layers = {1};
    c.attention_bias = true;
    return c;
}

// Bytes within alignment slack (256 bytes per tensor) of the independent count.
void expectBytesNear(const ModelConfig& c, const WeightSelection& s) {
    const uint64_t bytes = deviceWeightBytes(c, s);
    const auto want = static_cast<uint64_t>(deviceElements(c, s)) * 2;
    const auto tensors = static_cast<uint64_t>(3 + c.num_hidden_layers * 12);
    EXPECT_GE(bytes, want);
    EXPECT_LE(bytes, want + tensors * 256);
}

TEST(DeviceWeightBytesTest, Qwen3FullModelAndRoleSelections) {
    const ModelConfig c = ModelConfig::preset("qwen3-30b-a3b").value();
    const WeightSelection all = WeightSelection::everything(c);
    const uint64_t bytes = deviceWeightBytes(c, all);
    // Every parameter once (moe_intermediate_size 768 needs no padding), about 61 GB.
    EXPECT_GE(bytes, static_cast<uint64_t>(c.numParameters()) * 2);
    EXPECT_LE(bytes, static_cast<uint64_t>(c.numParameters()) * 2 + 4096 * 256);
    EXPECT_GT(bytes, 60'000'000'000u);
    EXPECT_LT(bytes, 62'000'000'000u);
    expectBytesNear(c, all);
    expectBytesNear(c, WeightSelection::attentionRole(true));
    expectBytesNear(c, WeightSelection::attentionRole(false));
    expectBytesNear(c, WeightSelection::ffnRole(true, c, 32, 64));
    expectBytesNear(c, WeightSelection::ffnRole(false, c, 0, c.num_experts));
    // An m2n FFN rank's 32 experts: 48 layers of 32 experts of 3 x 2048 x 768 BF16.
    EXPECT_EQ(deviceWeightBytes(c, WeightSelection::ffnRole(true, c, 32, 64)), uint64_t{48} * 32 * 9'437'184);
}

TEST(DeviceWeightBytesTest, BiasDenseLayersTiedEmbeddingsAndPadding) {
    ModelConfig c = ModelConfig::preset("tiny").value();
    c.attention_bias = true;
    c.mlp_only_layers = {1};
    c.intermediate_size = 96;  // w2 padded to 128 reduction columns
    expectBytesNear(c, WeightSelection::everything(c));
    c.tie_word_embeddings = true;
    expectBytesNear(c, WeightSelection::everything(c));
    expectBytesNear(c, WeightSelection::ffnRole(true, c, 1, 3));
}

TEST(DeviceWeightBytesTest, PaddedHeadsAndMlpWidths) {
    ModelConfig c = paddedShapesConfig();
    expectBytesNear(c, WeightSelection::everything(c));
    expectBytesNear(c, WeightSelection::attentionRole(true));
    expectBytesNear(c, WeightSelection::ffnRole(true, c, 2, 6));
    c.tie_word_embeddings = true;
    expectBytesNear(c, WeightSelection::everything(c));
    // Staging: a padded layer's largest attention tensor whole (the checkpoint's qkv_proj), experts at their width.
    const uint64_t qkv_bytes = static_cast<uint64_t>((c.qSize() + 2 * c.kvSize()) * c.hidden_size) * 2;
    EXPECT_GE(deviceWeightLoadBytes(c, WeightSelection::everything(c), WeightSource::kHost), qkv_bytes);
    EXPECT_GE(deviceWeightLoadBytes(c, WeightSelection::everything(c), WeightSource::kRandom), qkv_bytes);
    EXPECT_EQ(deviceWeightLoadBytes(c, WeightSelection::ffnRole(true, c, 0, 8), WeightSource::kHost),
              uint64_t{8} * 3 * 16 * 64 * 2);
}

TEST(DeviceWeightsLayoutTest, PaddedHeadsAndMlpWidthsInTheDeviceShapes) {
    const ModelConfig c = paddedShapesConfig();
    const int64_t H = c.hidden_size;
    EXPECT_EQ(deviceHeadDim(c), 16);
    const HeadRuns rows = headRuns(c, c.num_attention_heads, H);  // q_proj's rows
    EXPECT_EQ(rows.runs, 8);
    EXPECT_EQ(rows.elements, 8 * H);
    EXPECT_EQ(rows.stored_elements, 16 * H);
    EXPECT_TRUE(rows.padded());
    const HeadRuns columns = headRuns(c, H * c.num_attention_heads, 1);  // o_proj's columns
    EXPECT_EQ(columns.runs, H * 8);
    EXPECT_EQ(columns.elements, 8);
    EXPECT_EQ(columns.stored_elements, 16);
    EXPECT_FALSE(headRuns(ModelConfig::preset("tiny").value(), 4, H).padded());
    EXPECT_FALSE(headRuns(ModelConfig::preset("qwen3-30b-a3b").value(), 32, 2048).padded());

    const DeviceWeightsLayout layout = planDeviceWeights(c, WeightSelection::everything(c));
    // The tensors' shapes only: the base is never read.
    std::vector<uint8_t> base(layout.total_bytes);
    const ModelWeights w = deviceWeightTensors(c, layout, base.data(), core::Device::cuda(0), nullptr);
    const model::AttentionLayerWeights& a = w.attention[0];
    EXPECT_EQ(a.q_norm.shape(), (core::Shape{16}));
    EXPECT_EQ(a.qkv_proj.shape(), (core::Shape{(8 + 2 * 8) * 16, H}));
    EXPECT_EQ(a.q_proj.shape(), (core::Shape{8 * 16, H}));
    EXPECT_EQ(a.v_proj.shape(), (core::Shape{8 * 16, H}));
    EXPECT_EQ(a.qkv_bias.shape(), (core::Shape{(8 + 2 * 8) * 16}));
    EXPECT_EQ(a.o_proj.shape(), (core::Shape{H, 8 * 16}));
    for (const int64_t l : {0, 1}) {
        SCOPED_TRACE(::testing::Message() << "layer " << l);
        const MlpLayerSlots& slots = layout.mlp[static_cast<size_t>(l)];
        const int64_t width = l == 1 ? 44 : 16;
        const int64_t packed = l == 1 ? 64 : 32;
        EXPECT_EQ(slots.checkpoint_inter, width);
        EXPECT_EQ(slots.inter, packed);
        const model::MlpLayerWeights& m = w.mlp[static_cast<size_t>(l)];
        EXPECT_EQ(m.inter, packed);
        EXPECT_EQ(m.w13.shape(), (core::Shape{m.expert_end - m.expert_begin, 2 * packed, H}));
        EXPECT_EQ(m.w2.shape(), (core::Shape{m.expert_end - m.expert_begin, H, 64}));
    }
}

TEST(DeviceWeightBytesTest, LoadingStagesWholeExpertsWithinTheBound) {
    const ModelConfig c = ModelConfig::preset("qwen3-30b-a3b").value();
    const WeightSelection all = WeightSelection::everything(c);
    const uint64_t expert = 9'437'184;
    DeviceWeightsOptions options;
    const uint64_t staging = deviceWeightLoadBytes(c, all, WeightSource::kHost, options);
    EXPECT_EQ(staging % expert, 0u);
    EXPECT_LE(staging, options.device_staging_bytes);
    EXPECT_GT(staging + expert, options.device_staging_bytes);
    options.device_staging_bytes = 1;  // still one whole expert
    EXPECT_EQ(deviceWeightLoadBytes(c, all, WeightSource::kHost, options), expert);
    EXPECT_LT(deviceWeightLoadBytes(c, all, WeightSource::kRandom), uint64_t{1} << 20);  // the tensors' keys
    EXPECT_EQ(deviceWeightLoadBytes(c, WeightSelection::attentionRole(false), WeightSource::kHost), 0u);
}

TEST(DeviceWeightsFitTest, NamesTheDeviceAndWhatIsMissing) {
    const ModelConfig c = ModelConfig::preset("tiny").value();
    const WeightSelection all = WeightSelection::everything(c);
    const int count = kernels::cuda::deviceCount();
    const core::Status missing = checkDeviceWeightsFit(c, all, count, WeightSource::kRandom);
    EXPECT_FALSE(missing.isOk());
    EXPECT_THAT(missing.toString(), ::testing::HasSubstr("cuda:" + std::to_string(count) + " is not a visible"));
    ModelConfig odd = c;
    odd.hidden_size = 96;
    const core::Status unsupported =
        checkDeviceWeightsFit(odd, WeightSelection::everything(odd), 0, WeightSource::kRandom);
    EXPECT_EQ(unsupported.code(), core::StatusCode::kUnsupported);
    EXPECT_THAT(unsupported.toString(), ::testing::HasSubstr("hidden_size"));
    // Attention weights alone need no packed layout.
    if (count > 0) {
        EXPECT_TRUE(checkDeviceWeightsFit(odd, WeightSelection::attentionRole(false), 0, WeightSource::kRandom).isOk());
        const core::Status too_big = checkDeviceWeightsFit(c, all, 0, WeightSource::kRandom, uint64_t{1} << 50);
        EXPECT_EQ(too_big.code(), core::StatusCode::kInvalidArgument);
        EXPECT_THAT(too_big.toString(), ::testing::HasSubstr("cuda:0"));
        EXPECT_THAT(too_big.toString(), ::testing::HasSubstr("free"));
    }
}

TEST(DeviceWeightsSelectionTest, SelectionOfHostWeights) {
    const ModelConfig c = ModelConfig::fromFile(kTiny + "/config.json").value();
    const model::Checkpoint checkpoint = model::Checkpoint::open(kTiny).value();
    for (const WeightSelection& want :
         {WeightSelection::everything(c), WeightSelection::ffnRole(true, c, 2, 6),
          WeightSelection::ffnRole(false, c, 0, 0), WeightSelection{true, true, false, 0, 0},
          WeightSelection{true, false, false, 0, 0}}) {
        const ModelWeights host = model::loadWeights(checkpoint, c, want).value();
        const WeightSelection got = selectionOf(c, host);
        EXPECT_EQ(got.attention, want.attention);
        EXPECT_EQ(got.router, want.router);
        EXPECT_EQ(got.expert_begin, want.expert_begin);
        EXPECT_EQ(got.expert_end, want.expert_end);
        EXPECT_EQ(deviceWeightBytes(c, got), deviceWeightBytes(c, want));
    }
}

// --- GPU -----------------------------------------------------------------------------------------------------------

std::vector<uint16_t> download(const Tensor& t) {
    EXPECT_EQ(t.device(), core::Device::cuda(0));
    std::vector<uint16_t> v(static_cast<size_t>(t.numel()));
    AFD_CUDA_CHECK(cudaMemcpy(v.data(), t.rawData(), t.nbytes(), cudaMemcpyDeviceToHost));
    return v;
}

std::vector<uint16_t> hostBits(const Tensor& t) {
    const auto* p = static_cast<const uint16_t*>(t.rawData());
    return std::vector<uint16_t>(p, p + t.numel());
}

// The packed layout (moe_pack_weights.cu) undone on the host: w13 [E, 2I, H] and w2 [E, H, I] row-major, and the
// count of nonzero padding elements.
struct Unpacked {
    std::vector<uint16_t> w13, w2;
    int64_t nonzero_padding = 0;
};

Unpacked unpack(const std::vector<uint16_t>& p13, const std::vector<uint16_t>& p2, int64_t E, int64_t H, int64_t I) {
    Unpacked u;
    u.w13.assign(static_cast<size_t>(E * 2 * I * H), 0);
    u.w2.assign(static_cast<size_t>(E * H * I), 0);
    size_t i = 0;
    const int64_t kb13 = (H + 63) / 64, units13 = I / 32;
    for (int64_t e = 0; e < E; ++e)
        for (int64_t kb = 0; kb < kb13; ++kb)
            for (int64_t unit = 0; unit < units13; ++unit)
                for (int64_t r = 0; r < 64; ++r)
                    for (int64_t c = 0; c < 64; ++c, ++i) {
                        const int64_t col = kb * 64 + c;
                        if (col >= H) {
                            u.nonzero_padding += p13[i] != 0;
                            continue;
                        }
                        const int64_t row = ((r / 8) % 2) * I + unit * 32 + (r / 16) * 8 + r % 8;
                        u.w13[static_cast<size_t>((e * 2 * I + row) * H + col)] = p13[i];
                    }
    i = 0;
    const int64_t kb2 = (I + 63) / 64, units2 = H / 64;
    for (int64_t e = 0; e < E; ++e)
        for (int64_t kb = 0; kb < kb2; ++kb)
            for (int64_t unit = 0; unit < units2; ++unit)
                for (int64_t r = 0; r < 64; ++r)
                    for (int64_t c = 0; c < 64; ++c, ++i) {
                        const int64_t col = kb * 64 + c;
                        if (col >= I) {
                            u.nonzero_padding += p2[i] != 0;
                            continue;
                        }
                        u.w2[static_cast<size_t>((e * H + unit * 64 + r) * I + col)] = p2[i];
                    }
    return u;
}

TEST(DeviceWeightsTest, UploadsTheTinyFixtureAndReadsBackTheHostWeights) {
    SKIP_WITHOUT_GPU();
    const ModelConfig c = ModelConfig::fromFile(kTiny + "/config.json").value();
    const model::Checkpoint checkpoint = model::Checkpoint::open(kTiny).value();
    const ModelWeights host = model::loadWeights(checkpoint, c, WeightSelection::everything(c)).value();
    DeviceWeightsOptions options;
    options.host_staging_bytes = 4 << 20;  // more than one staging round
    options.device_staging_bytes = 1;      // one expert at a time
    DeviceWeightsReport report;
    auto uploaded = uploadModelWeights(c, host, 0, options, &report);
    ASSERT_TRUE(uploaded.isOk()) << uploaded.status().toString();
    const ModelWeights& dev = *uploaded;
    EXPECT_EQ(report.device_bytes, deviceWeightBytes(c, WeightSelection::everything(c)));
    EXPECT_EQ(dev.owned_bytes, report.device_bytes);
    EXPECT_EQ(report.uploaded_bytes, host.checkpoint_bytes);  // every checkpoint tensor crossed once
    std::cout << "[ UPLOAD   ] " << report.uploaded_bytes << " bytes in " << report.seconds << " s\n";

    EXPECT_EQ(download(dev.embed), hostBits(host.embed));
    EXPECT_EQ(download(dev.final_norm), hostBits(host.final_norm));
    EXPECT_EQ(download(dev.lm_head), hostBits(host.lm_head));
    for (size_t l = 0; l < host.attention.size(); ++l) {
        SCOPED_TRACE(::testing::Message() << "layer " << l);
        const model::AttentionLayerWeights& h = host.attention[l];
        const model::AttentionLayerWeights& d = dev.attention[l];
        for (const auto& [dt, ht] :
             {std::pair{&d.input_norm, &h.input_norm}, std::pair{&d.post_norm, &h.post_norm},
              std::pair{&d.q_norm, &h.q_norm}, std::pair{&d.k_norm, &h.k_norm}, std::pair{&d.q_proj, &h.q_proj},
              std::pair{&d.k_proj, &h.k_proj}, std::pair{&d.v_proj, &h.v_proj}, std::pair{&d.o_proj, &h.o_proj}}) {
            EXPECT_EQ(dt->shape(), ht->shape());
            EXPECT_EQ(download(*dt), hostBits(*ht));
        }
        // The fused projection: q rows, then k rows, then v rows, the three projections views of it.
        std::vector<uint16_t> qkv = hostBits(h.q_proj);
        for (const Tensor* t : {&h.k_proj, &h.v_proj}) {
            const auto bits = hostBits(*t);
            qkv.insert(qkv.end(), bits.begin(), bits.end());
        }
        EXPECT_EQ(d.qkv_proj.shape(), (core::Shape{c.qSize() + 2 * c.kvSize(), c.hidden_size}));
        EXPECT_EQ(download(d.qkv_proj), qkv);
        EXPECT_EQ(d.q_proj.rawData(), d.qkv_proj.rawData());
        EXPECT_EQ(d.v_proj.data<core::Bf16>() + d.v_proj.numel(), d.qkv_proj.data<core::Bf16>() + d.qkv_proj.numel());

        const model::MlpLayerWeights& hm = host.mlp[l];
        const model::MlpLayerWeights& dm = dev.mlp[l];
        EXPECT_EQ(download(dm.router), hostBits(hm.router));
        ASSERT_TRUE(dm.hasExperts());
        EXPECT_EQ(dm.expert_begin, hm.expert_begin);
        EXPECT_EQ(dm.expert_end, hm.expert_end);
        EXPECT_EQ(dm.inter, hm.inter);
        const int64_t E = dm.expert_end - dm.expert_begin;
        EXPECT_EQ(dm.w2.shape(), (core::Shape{E, c.hidden_size, roundUp(dm.inter, 64)}));
        const Unpacked u = unpack(download(dm.w13), download(dm.w2), E, c.hidden_size, dm.inter);
        EXPECT_TRUE(u.w13 == hostBits(hm.w13)) << "w13 does not unpack to the host's";
        EXPECT_TRUE(u.w2 == hostBits(hm.w2)) << "w2 does not unpack to the host's";
        EXPECT_EQ(u.nonzero_padding, 0);
    }
}

// The checkpoint's elements of a device tensor stored as `runs` runs of `stored` elements, the first `elements` of each
// real; counts the padded elements that are not zero.
std::vector<uint16_t> realRuns(const std::vector<uint16_t>& device, int64_t runs, int64_t elements, int64_t stored,
                               int64_t& nonzero_padding) {
    EXPECT_EQ(static_cast<int64_t>(device.size()), runs * stored);
    std::vector<uint16_t> real;
    for (int64_t r = 0; r < runs; ++r) {
        for (int64_t i = 0; i < stored; ++i) {
            const uint16_t v = device[static_cast<size_t>(r * stored + i)];
            if (i < elements) {
                real.push_back(v);
            } else {
                nonzero_padding += v != 0;
            }
        }
    }
    return real;
}

TEST(DeviceWeightsTest, UploadsPaddedHeadsAndNarrowMlpsWithZerosInThePadding) {
    SKIP_WITHOUT_GPU();
    const ModelConfig c = paddedShapesConfig();
    testing::TempDir dir;
    ASSERT_TRUE(model::writeSyntheticCheckpoint(dir.path(), c, {.seed = 4}).isOk());
    const model::Checkpoint checkpoint = model::Checkpoint::open(dir.path()).value();
    const ModelWeights host = model::loadWeights(checkpoint, c, WeightSelection::everything(c)).value();
    auto uploaded = uploadModelWeights(c, host, 0);
    ASSERT_TRUE(uploaded.isOk()) << uploaded.status().toString();
    const ModelWeights& dev = *uploaded;
    const int64_t H = c.hidden_size;
    const int64_t hd = c.head_dim;  // 8, stored at 16
    const int64_t hs = 16;
    const int64_t heads = c.num_attention_heads + 2 * c.num_key_value_heads;
    for (size_t l = 0; l < host.attention.size(); ++l) {
        SCOPED_TRACE(::testing::Message() << "layer " << l);
        const model::AttentionLayerWeights& h = host.attention[l];
        const model::AttentionLayerWeights& d = dev.attention[l];
        int64_t nonzero = 0;
        EXPECT_EQ(realRuns(download(d.q_norm), 1, hd, hs, nonzero), hostBits(h.q_norm));
        EXPECT_EQ(realRuns(download(d.k_norm), 1, hd, hs, nonzero), hostBits(h.k_norm));
        EXPECT_EQ(realRuns(download(d.qkv_proj), heads, hd * H, hs * H, nonzero), hostBits(h.qkv_proj));
        EXPECT_EQ(realRuns(download(d.qkv_bias), heads, hd, hs, nonzero), hostBits(h.qkv_bias));
        EXPECT_EQ(realRuns(download(d.o_proj), H * c.num_attention_heads, hd, hs, nonzero), hostBits(h.o_proj));
        EXPECT_EQ(download(d.o_bias), hostBits(h.o_bias));
        EXPECT_EQ(nonzero, 0) << "padded lanes are not zero";

        const model::MlpLayerWeights& hm = host.mlp[l];
        const model::MlpLayerWeights& dm = dev.mlp[l];
        ASSERT_TRUE(dm.hasExperts());
        const int64_t I = hm.inter;  // 16 (MoE) or 44 (the dense layer)
        const int64_t packed = roundUp(I, 32);
        EXPECT_EQ(dm.inter, packed);
        const int64_t E = dm.expert_end - dm.expert_begin;
        const Unpacked u = unpack(download(dm.w13), download(dm.w2), E, H, packed);
        EXPECT_EQ(u.nonzero_padding, 0);
        // w13 [E, 2 packed, H]: gate rows [0, I) then zeros, up rows [packed, packed + I) then zeros.
        int64_t nonzero_mlp = 0;
        const std::vector<uint16_t> w13 = realRuns(u.w13, 2 * E, I * H, packed * H, nonzero_mlp);
        const std::vector<uint16_t> w2 = realRuns(u.w2, E * H, I, packed, nonzero_mlp);
        EXPECT_TRUE(w13 == hostBits(hm.w13)) << "w13 does not unpack to the host's";
        EXPECT_TRUE(w2 == hostBits(hm.w2)) << "w2 does not unpack to the host's";
        EXPECT_EQ(nonzero_mlp, 0) << "the padded MLP width is not zero";
    }
}

// Every tensor of two device weights bit for bit equal (both on cuda:0, same layout).
void expectSameTensors(const ModelWeights& a, const ModelWeights& b) {
    auto same = [](const Tensor& x, const Tensor& y, const std::string& what) {
        ASSERT_EQ(x.rawData() == nullptr, y.rawData() == nullptr) << what;
        if (x.rawData() == nullptr) return;
        EXPECT_EQ(x.shape(), y.shape()) << what;
        EXPECT_TRUE(download(x) == download(y)) << what << " differs";
    };
    same(a.embed, b.embed, "embed");
    same(a.final_norm, b.final_norm, "final_norm");
    same(a.lm_head, b.lm_head, "lm_head");
    ASSERT_EQ(a.attention.size(), b.attention.size());
    for (size_t l = 0; l < a.attention.size(); ++l) {
        const std::string p = "layer " + std::to_string(l) + " ";
        const auto& x = a.attention[l];
        const auto& y = b.attention[l];
        same(x.input_norm, y.input_norm, p + "input_norm");
        same(x.post_norm, y.post_norm, p + "post_norm");
        same(x.q_norm, y.q_norm, p + "q_norm");
        same(x.k_norm, y.k_norm, p + "k_norm");
        same(x.qkv_proj, y.qkv_proj, p + "qkv_proj");
        same(x.o_proj, y.o_proj, p + "o_proj");
        same(x.qkv_bias, y.qkv_bias, p + "qkv_bias");
        same(x.o_bias, y.o_bias, p + "o_bias");
        same(a.mlp[l].router, b.mlp[l].router, p + "router");
        same(a.mlp[l].w13, b.mlp[l].w13, p + "w13");
        same(a.mlp[l].w2, b.mlp[l].w2, p + "w2");
        EXPECT_EQ(a.mlp[l].expert_begin, b.mlp[l].expert_begin);
        EXPECT_EQ(a.mlp[l].expert_end, b.mlp[l].expert_end);
        EXPECT_EQ(a.mlp[l].inter, b.mlp[l].inter);
    }
}

TEST(DeviceWeightsTest, RandomWeightsAreTheGenModelCheckpointOfTheSameSeed) {
    SKIP_WITHOUT_GPU();
    ModelConfig base = ModelConfig::preset("tiny").value();
    base.attention_bias = true;
    base.mlp_only_layers = {1};
    base.intermediate_size = 96;
    for (const auto& [tied, padded] : {std::pair{false, false}, std::pair{true, false}, std::pair{false, true}}) {
        ModelConfig c = padded ? paddedShapesConfig() : base;
        c.tie_word_embeddings = tied;
        SCOPED_TRACE(::testing::Message() << "tied " << tied << " padded heads and widths " << padded);
        testing::TempDir dir;
        model::SyntheticOptions options;
        options.seed = 9;
        ASSERT_TRUE(model::writeSyntheticCheckpoint(dir.path(), c, options).isOk());
        const model::Checkpoint checkpoint = model::Checkpoint::open(dir.path()).value();
        for (const WeightSelection& sel : {WeightSelection::everything(c), WeightSelection::ffnRole(true, c, 2, 6),
                                           WeightSelection::attentionRole(true)}) {
            const ModelWeights host = model::loadWeights(checkpoint, c, sel).value();
            auto uploaded = uploadModelWeights(c, host, 0);
            ASSERT_TRUE(uploaded.isOk()) << uploaded.status().toString();
            DeviceWeightsReport report;
            auto random = randomModelWeights(c, sel, options.seed, 0, &report);
            ASSERT_TRUE(random.isOk()) << random.status().toString();
            EXPECT_EQ(report.device_bytes, deviceWeightBytes(c, sel));
            expectSameTensors(*uploaded, *random);
        }
    }
}

struct Moments {
    double mean = 0, variance = 0;
};

Moments moments(const std::vector<uint16_t>& bits) {
    double sum = 0, sum2 = 0;
    for (uint16_t b : bits) {
        const double v = core::bf16BitsToFloat(b);
        sum += v;
        sum2 += v * v;
    }
    const double n = static_cast<double>(bits.size());
    return {sum / n, sum2 / n - (sum / n) * (sum / n)};
}

// Mean within 5 standard errors of `mean`, variance within 3 % of `variance`.
void expectMoments(const std::vector<uint16_t>& bits, double mean, double variance, const std::string& what) {
    const Moments m = moments(bits);
    EXPECT_NEAR(m.mean, mean, 5.0 * std::sqrt(variance / static_cast<double>(bits.size()))) << what;
    EXPECT_NEAR(m.variance, variance, 0.03 * variance) << what;
}

TEST(DeviceWeightsTest, RandomWeightsStatisticsReproducibilityAndIndependence) {
    SKIP_WITHOUT_GPU();
    const ModelConfig c = ModelConfig::preset("small").value();
    auto a = randomModelWeights(c, 1, 0);
    auto b = randomModelWeights(c, 1, 0);
    auto other = randomModelWeights(c, 2, 0);
    ASSERT_TRUE(a.isOk() && b.isOk() && other.isOk()) << a.status().toString();
    const double H = static_cast<double>(c.hidden_size);
    const double I = static_cast<double>(c.moe_intermediate_size);
    const model::AttentionLayerWeights& at = a->attention[3];
    expectMoments(download(at.q_proj), 0.0, 1.0 / H, "q_proj: var 1 / fan_in");
    expectMoments(download(at.o_proj), 0.0, 1.0 / static_cast<double>(c.qSize()), "o_proj");
    expectMoments(download(a->embed), 0.0, 1.0 / 3.0, "embedding: U(-1, 1)");
    expectMoments(download(a->lm_head), 0.0, 1.0 / H, "lm_head");
    expectMoments(download(a->mlp[2].router), 0.0, 1.0 / H, "router");
    expectMoments(download(a->mlp[2].w13), 0.0, 1.0 / H, "experts' gate and up");
    const int64_t E = c.num_experts;
    const Unpacked u =
        unpack(download(a->mlp[2].w13), download(a->mlp[2].w2), E, c.hidden_size, c.moe_intermediate_size);
    EXPECT_EQ(u.nonzero_padding, 0);
    expectMoments(u.w2, 0.0, 1.0 / I, "experts' down");
    // Norm weights: 1 + U(-0.2, 0.2) (few elements: a loose check).
    const Moments norm = moments(download(at.input_norm));
    EXPECT_NEAR(norm.mean, 1.0, 0.03);
    EXPECT_NEAR(norm.variance, 0.04 / 3.0, 0.004);

    EXPECT_TRUE(download(at.qkv_proj) == download(b->attention[3].qkv_proj)) << "not reproducible for a seed";
    EXPECT_TRUE(download(a->mlp[5].w2) == download(b->mlp[5].w2)) << "not reproducible for a seed";
    EXPECT_FALSE(download(at.qkv_proj) == download(other->attention[3].qkv_proj)) << "the seed changes nothing";
    // Tensors are independent: the same elements of two tensors, of two layers, of two experts differ.
    auto correlation = [](const std::vector<uint16_t>& x, const std::vector<uint16_t>& y) {
        const size_t n = std::min(x.size(), y.size());
        double sxy = 0, sxx = 0, syy = 0;
        for (size_t i = 0; i < n; ++i) {
            const double p = core::bf16BitsToFloat(x[i]), q = core::bf16BitsToFloat(y[i]);
            sxy += p * q;
            sxx += p * p;
            syy += q * q;
        }
        return sxy / std::sqrt(sxx * syy);
    };
    EXPECT_LT(std::abs(correlation(download(at.q_proj), download(at.k_proj))), 0.05);
    EXPECT_LT(std::abs(correlation(download(at.q_proj), download(a->attention[4].q_proj))), 0.05);
    const auto w13 = download(a->mlp[2].w13);
    const size_t per_expert = w13.size() / static_cast<size_t>(E);
    EXPECT_LT(std::abs(correlation(std::vector<uint16_t>(w13.begin(), w13.begin() + per_expert),
                                   std::vector<uint16_t>(w13.begin() + per_expert, w13.begin() + 2 * per_expert))),
              0.05);
}

TEST(DeviceWeightsTest, UploadRefusesHostWeightsOfAnotherShape) {
    SKIP_WITHOUT_GPU();
    const ModelConfig c = ModelConfig::fromFile(kTiny + "/config.json").value();
    const model::Checkpoint checkpoint = model::Checkpoint::open(kTiny).value();
    ModelWeights host = model::loadWeights(checkpoint, c, WeightSelection::everything(c)).value();
    host.attention[1].o_proj = host.attention[1].o_proj.reshape({c.qSize(), c.hidden_size / 2, 2});
    auto uploaded = uploadModelWeights(c, host, 0);
    ASSERT_FALSE(uploaded.isOk());
    EXPECT_THAT(uploaded.status().toString(), ::testing::HasSubstr("model.layers.1.self_attn.o_proj.weight"));
}

TEST(DeviceWeightsTest, FullQwen3RandomWeightsOnOneGpu) {
    SKIP_WITHOUT_GPU();
    const ModelConfig c = ModelConfig::preset("qwen3-30b-a3b").value();
    const WeightSelection all = WeightSelection::everything(c);
    AFD_CUDA_CHECK(cudaSetDevice(0));
    size_t free_bytes = 0, total_bytes = 0;
    AFD_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (free_bytes < deviceWeightBytes(c, all) + (uint64_t{1} << 30)) {
        GTEST_SKIP() << "cuda:0 has " << free_bytes << " bytes free, the full model needs "
                     << deviceWeightBytes(c, all);
    }
    DeviceWeightsReport report;
    auto w = randomModelWeights(c, all, 0, 0, &report);
    ASSERT_TRUE(w.isOk()) << w.status().toString();
    std::cout << "[ RANDOM   ] Qwen3-30B-A3B: " << report.device_bytes << " bytes drawn in " << report.seconds
              << " s\n";
    EXPECT_EQ(report.device_bytes, deviceWeightBytes(c, all));
    expectMoments(download(w->attention[47].q_proj), 0.0, 1.0 / 2048.0, "last layer's q_proj");
    const Tensor& w2 = w->mlp[47].w2;
    expectMoments(download(w2.slice(w2.size(0) - 1, w2.size(0))), 0.0, 1.0 / 768.0, "last expert's down_proj");
}

}  // namespace
}  // namespace afd::attention
