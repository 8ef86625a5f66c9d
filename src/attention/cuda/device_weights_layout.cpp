#include "attention/cuda/device_weights_layout.h"

#include "core/check.h"
#include "kernels/moe_cuda.h"
#include "kernels/paged_attention_cuda.h"

namespace afd::attention {
namespace {

using core::DType;
using core::Shape;
using core::Tensor;

class Arena {
public:
    size_t take(size_t bytes) {
        const size_t offset = (total_ + kDeviceTensorAlignment - 1) / kDeviceTensorAlignment * kDeviceTensorAlignment;
        total_ = offset + bytes;
        ++count_;
        return offset;
    }
    size_t total() const { return total_; }
    size_t count() const { return count_; }

private:
    size_t total_ = 0;
    size_t count_ = 0;
};

size_t bf16Bytes(int64_t elements) { return static_cast<size_t>(elements) * sizeof(uint16_t); }

int64_t roundUp(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace

int64_t deviceHeadDim(const model::ModelConfig& config) { return kernels::pagedAttentionHeadDim(config.head_dim); }

HeadRuns headRuns(const model::ModelConfig& config, int64_t heads, int64_t per_lane) {
    return {heads, config.head_dim * per_lane, deviceHeadDim(config) * per_lane};
}

DeviceWeightsLayout planDeviceWeights(const model::ModelConfig& c, const model::WeightSelection& sel) {
    const int64_t H = c.hidden_size;
    const int64_t hd = deviceHeadDim(c);
    const int64_t q_size = c.num_attention_heads * hd;
    const int64_t qkv_rows = q_size + 2 * c.num_key_value_heads * hd;
    Arena arena;
    DeviceWeightsLayout layout;
    if (sel.attention) {
        layout.embed = arena.take(bf16Bytes(c.vocab_size * H));
        layout.final_norm = arena.take(bf16Bytes(H));
        layout.lm_head = c.tie_word_embeddings ? layout.embed : arena.take(bf16Bytes(c.vocab_size * H));
    }
    layout.attention.resize(static_cast<size_t>(c.num_hidden_layers));
    layout.mlp.resize(static_cast<size_t>(c.num_hidden_layers));
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        if (sel.attention) {
            AttentionLayerSlots& a = layout.attention[static_cast<size_t>(l)];
            a.input_norm = arena.take(bf16Bytes(H));
            a.post_norm = arena.take(bf16Bytes(H));
            a.q_norm = arena.take(bf16Bytes(hd));
            a.k_norm = arena.take(bf16Bytes(hd));
            a.qkv_proj = arena.take(bf16Bytes(qkv_rows * H));
            a.o_proj = arena.take(bf16Bytes(H * q_size));
            if (c.attention_bias) {
                a.qkv_bias = arena.take(bf16Bytes(qkv_rows));
                a.o_bias = arena.take(bf16Bytes(H));
            }
        }
        MlpLayerSlots& m = layout.mlp[static_cast<size_t>(l)];
        m.is_moe = c.isMoeLayer(l);
        if (m.is_moe) {
            if (sel.router) m.router = arena.take(bf16Bytes(c.num_experts * H));
            m.expert_begin = sel.expert_begin;
            m.expert_end = sel.expert_end;
            m.checkpoint_inter = c.moe_intermediate_size;
        } else if (sel.dense_mlp) {
            m.expert_begin = 0;
            m.expert_end = 1;
            m.checkpoint_inter = c.intermediate_size;
        }
        m.inter = kernels::moePackedWidth(m.checkpoint_inter);
        if (m.numExperts() > 0) {
            const kernels::MoePackedWeightBytes packed = kernels::moePackedWeightBytes(m.numExperts(), H, m.inter);
            m.w13 = arena.take(packed.w13);
            m.w2 = arena.take(packed.w2);
        }
    }
    layout.total_bytes = arena.total();
    layout.num_tensors = arena.count();
    return layout;
}

model::ModelWeights deviceWeightTensors(const model::ModelConfig& c, const DeviceWeightsLayout& layout, void* base,
                                        core::Device device, const std::shared_ptr<void>& owner) {
    auto at = [&](size_t slot, Shape shape) {
        AFD_CHECK(slot != kNoSlot, "device weights: a tensor of shape {} has no slot", core::shapeToString(shape));
        return Tensor::wrap(static_cast<char*>(base) + slot, DType::kBf16, std::move(shape), device, owner);
    };
    const int64_t H = c.hidden_size;
    const int64_t hd = deviceHeadDim(c);
    const int64_t q = c.num_attention_heads * hd;
    const int64_t kv = c.num_key_value_heads * hd;
    model::ModelWeights w;
    if (layout.embed != kNoSlot) {
        w.embed = at(layout.embed, {c.vocab_size, H});
        w.final_norm = at(layout.final_norm, {H});
        w.lm_head = layout.lm_head == layout.embed ? w.embed : at(layout.lm_head, {c.vocab_size, H});
    }
    w.attention.resize(layout.attention.size());
    w.mlp.resize(layout.mlp.size());
    for (size_t l = 0; l < layout.attention.size(); ++l) {
        const AttentionLayerSlots& s = layout.attention[l];
        if (s.qkv_proj != kNoSlot) {
            model::AttentionLayerWeights& a = w.attention[l];
            a.input_norm = at(s.input_norm, {H});
            a.post_norm = at(s.post_norm, {H});
            a.q_norm = at(s.q_norm, {hd});
            a.k_norm = at(s.k_norm, {hd});
            a.qkv_proj = at(s.qkv_proj, {q + 2 * kv, H});
            a.q_proj = a.qkv_proj.slice(0, q);
            a.k_proj = a.qkv_proj.slice(q, q + kv);
            a.v_proj = a.qkv_proj.slice(q + kv, q + 2 * kv);
            a.o_proj = at(s.o_proj, {H, q});
            if (s.qkv_bias != kNoSlot) {
                a.qkv_bias = at(s.qkv_bias, {q + 2 * kv});
                a.q_bias = a.qkv_bias.slice(0, q);
                a.k_bias = a.qkv_bias.slice(q, q + kv);
                a.v_bias = a.qkv_bias.slice(q + kv, q + 2 * kv);
                a.o_bias = at(s.o_bias, {H});
            }
        }
        const MlpLayerSlots& s2 = layout.mlp[l];
        model::MlpLayerWeights& m = w.mlp[l];
        m.is_moe = s2.is_moe;
        m.expert_begin = s2.expert_begin;
        m.expert_end = s2.expert_end;
        m.inter = s2.inter;
        if (s2.router != kNoSlot) m.router = at(s2.router, {c.num_experts, H});
        if (s2.w13 != kNoSlot) {
            m.w13 = at(s2.w13, {s2.numExperts(), 2 * s2.inter, H});
            m.w2 = at(s2.w2, {s2.numExperts(), H, roundUp(s2.inter, 64)});
        }
    }
    return w;
}

}  // namespace afd::attention
