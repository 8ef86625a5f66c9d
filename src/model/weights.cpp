#include "model/weights.h"

#include <fmt/format.h>

#include <sys/mman.h>

#include <cstring>
#include <initializer_list>

#include "core/check.h"
#include "core/thread_pool.h"

namespace afd::model {

using core::DType;
using core::Result;
using core::Shape;
using core::Status;
using core::Tensor;

WeightSelection WeightSelection::everything(const ModelConfig& config) {
    return {true, true, true, 0, config.num_experts};
}

WeightSelection WeightSelection::attentionRole(bool gate_on_attention) {
    return {true, gate_on_attention, gate_on_attention, 0, 0};
}

WeightSelection WeightSelection::ffnRole(bool gate_on_attention, const ModelConfig& config, int64_t expert_begin,
                                         int64_t expert_end) {
    if (gate_on_attention) return {false, false, false, expert_begin, expert_end};
    return {false, true, true, 0, config.num_experts};
}

std::string layerPrefix(int64_t layer) { return fmt::format("model.layers.{}.", layer); }

std::string expertTensorName(int64_t layer, int64_t expert, std::string_view proj) {
    return fmt::format("model.layers.{}.mlp.experts.{}.{}.weight", layer, expert, proj);
}

namespace {

// Maps a view's pages in one call instead of one fault per 4 KiB page during the copy (a hint: ignored where the
// kernel lacks MADV_POPULATE_READ).
void prefault(const Tensor& t) {
#ifdef MADV_POPULATE_READ
    constexpr uintptr_t kPage = 4096;
    const auto begin = reinterpret_cast<uintptr_t>(t.rawData()) & ~(kPage - 1);
    const auto end = reinterpret_cast<uintptr_t>(t.rawData()) + t.nbytes();
    if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ);
#else
    (void)t;
#endif
}

class Loader {
public:
    Loader(const Checkpoint& checkpoint, ModelWeights& weights) : checkpoint_(checkpoint), weights_(weights) {}

    Result<Tensor> view(const std::string& name, const Shape& shape) {
        Result<Tensor> t = checkpoint_.expect(name, DType::kBf16, shape);
        if (t.isOk()) {
            weights_.checkpoint_bytes += t->nbytes();
            prefault(*t);
        }
        return t;
    }

    // Copies the named [rows, cols] tensors, in order, into consecutive rows of `dst`.
    Status packRows(const std::vector<std::string>& names, int64_t rows, int64_t cols, uint8_t* dst) {
        const size_t bytes = static_cast<size_t>(rows * cols) * sizeof(uint16_t);
        std::vector<Tensor> sources;
        sources.reserve(names.size());
        for (const auto& name : names) {
            AFD_ASSIGN_OR_RETURN(Tensor t, view(name, {rows, cols}));
            sources.push_back(std::move(t));
        }
        core::parallelFor(static_cast<int64_t>(sources.size()), 1, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) {
                std::memcpy(dst + static_cast<size_t>(i) * bytes, sources[static_cast<size_t>(i)].rawData(), bytes);
            }
        });
        return Status::ok();
    }

private:
    const Checkpoint& checkpoint_;
    ModelWeights& weights_;
};

// The rows of `parts` ([rows_i, cols...] BF16, same trailing shape) one after the other, in owned memory.
Tensor concatRows(std::initializer_list<const Tensor*> parts, ModelWeights& weights) {
    Shape shape = (*parts.begin())->shape();
    shape[0] = 0;
    for (const Tensor* t : parts) shape[0] += t->size(0);
    Tensor out = Tensor::empty(DType::kBf16, shape);
    auto* dst = static_cast<uint8_t*>(out.rawData());
    for (const Tensor* t : parts) {
        std::memcpy(dst, t->rawData(), t->nbytes());
        dst += t->nbytes();
    }
    weights.owned_bytes += out.nbytes();
    return out;
}

Status loadAttentionLayer(Loader& loader, const ModelConfig& c, int64_t layer, AttentionLayerWeights& w,
                          ModelWeights& weights) {
    const std::string p = layerPrefix(layer);
    const int64_t H = c.hidden_size;
    AFD_ASSIGN_OR_RETURN(w.input_norm, loader.view(p + "input_layernorm.weight", {H}));
    AFD_ASSIGN_OR_RETURN(w.post_norm, loader.view(p + "post_attention_layernorm.weight", {H}));
    AFD_ASSIGN_OR_RETURN(w.q_proj, loader.view(p + "self_attn.q_proj.weight", {c.qSize(), H}));
    AFD_ASSIGN_OR_RETURN(w.k_proj, loader.view(p + "self_attn.k_proj.weight", {c.kvSize(), H}));
    AFD_ASSIGN_OR_RETURN(w.v_proj, loader.view(p + "self_attn.v_proj.weight", {c.kvSize(), H}));
    AFD_ASSIGN_OR_RETURN(w.o_proj, loader.view(p + "self_attn.o_proj.weight", {H, c.qSize()}));
    AFD_ASSIGN_OR_RETURN(w.q_norm, loader.view(p + "self_attn.q_norm.weight", {c.head_dim}));
    AFD_ASSIGN_OR_RETURN(w.k_norm, loader.view(p + "self_attn.k_norm.weight", {c.head_dim}));
    if (c.attention_bias) {
        AFD_ASSIGN_OR_RETURN(w.q_bias, loader.view(p + "self_attn.q_proj.bias", {c.qSize()}));
        AFD_ASSIGN_OR_RETURN(w.k_bias, loader.view(p + "self_attn.k_proj.bias", {c.kvSize()}));
        AFD_ASSIGN_OR_RETURN(w.v_bias, loader.view(p + "self_attn.v_proj.bias", {c.kvSize()}));
        AFD_ASSIGN_OR_RETURN(w.o_bias, loader.view(p + "self_attn.o_proj.bias", {H}));
        w.qkv_bias = concatRows({&w.q_bias, &w.k_bias, &w.v_bias}, weights);
        w.q_bias = w.qkv_bias.slice(0, c.qSize());
        w.k_bias = w.qkv_bias.slice(c.qSize(), c.qSize() + c.kvSize());
        w.v_bias = w.qkv_bias.slice(c.qSize() + c.kvSize(), c.qSize() + 2 * c.kvSize());
    }
    // q/k/v become views of the fused copy's rows, so the layer holds each projection once.
    w.qkv_proj = concatRows({&w.q_proj, &w.k_proj, &w.v_proj}, weights);
    w.q_proj = w.qkv_proj.slice(0, c.qSize());
    w.k_proj = w.qkv_proj.slice(c.qSize(), c.qSize() + c.kvSize());
    w.v_proj = w.qkv_proj.slice(c.qSize() + c.kvSize(), c.qSize() + 2 * c.kvSize());
    return Status::ok();
}

// Packs SwiGLU weights of `num` MLPs named by `name(i, proj)` into w13 [num, 2I, H] and w2 [num, H, I].
template <typename NameFn>
Status packMlps(Loader& loader, ModelWeights& weights, int64_t num, int64_t H, int64_t I, NameFn name,
                MlpLayerWeights& w) {
    w.inter = I;
    w.w13 = Tensor::empty(DType::kBf16, {num, 2 * I, H});
    w.w2 = Tensor::empty(DType::kBf16, {num, H, I});
    weights.owned_bytes += w.w13.nbytes() + w.w2.nbytes();
    std::vector<std::string> gate_up;
    std::vector<std::string> down;
    for (int64_t i = 0; i < num; ++i) {
        gate_up.push_back(name(i, "gate_proj"));
        gate_up.push_back(name(i, "up_proj"));
        down.push_back(name(i, "down_proj"));
    }
    // gate and up of MLP i are consecutive [I, H] blocks: exactly rows [0, I) and [I, 2I) of w13[i].
    AFD_RETURN_IF_ERROR(loader.packRows(gate_up, I, H, static_cast<uint8_t*>(w.w13.rawData())));
    return loader.packRows(down, H, I, static_cast<uint8_t*>(w.w2.rawData()));
}

}  // namespace

Result<ModelWeights> loadWeights(const Checkpoint& checkpoint, const ModelConfig& c, const WeightSelection& sel,
                                 const LoadProgress& progress) {
    if (sel.expert_begin < 0 || sel.expert_end < sel.expert_begin || sel.expert_end > c.num_experts) {
        return core::invalidArgument("expert range [{}, {}) is not inside [0, {})", sel.expert_begin, sel.expert_end,
                                     c.num_experts);
    }
    ModelWeights weights;
    Loader loader(checkpoint, weights);
    const int64_t H = c.hidden_size;
    if (sel.attention) {
        AFD_ASSIGN_OR_RETURN(weights.embed, loader.view("model.embed_tokens.weight", {c.vocab_size, H}));
        AFD_ASSIGN_OR_RETURN(weights.final_norm, loader.view("model.norm.weight", {H}));
        if (c.tie_word_embeddings) {
            weights.lm_head = weights.embed;
        } else {
            AFD_ASSIGN_OR_RETURN(weights.lm_head, loader.view("lm_head.weight", {c.vocab_size, H}));
        }
    }
    weights.attention.resize(static_cast<size_t>(c.num_hidden_layers));
    weights.mlp.resize(static_cast<size_t>(c.num_hidden_layers));
    for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
        if (sel.attention) {
            AFD_RETURN_IF_ERROR(
                loadAttentionLayer(loader, c, layer, weights.attention[static_cast<size_t>(layer)], weights));
        }
        MlpLayerWeights& mlp = weights.mlp[static_cast<size_t>(layer)];
        mlp.is_moe = c.isMoeLayer(layer);
        const std::string p = layerPrefix(layer);
        if (mlp.is_moe) {
            if (sel.router) {
                AFD_ASSIGN_OR_RETURN(mlp.router, loader.view(p + "mlp.gate.weight", {c.num_experts, H}));
            }
            mlp.expert_begin = sel.expert_begin;
            mlp.expert_end = sel.expert_end;
            mlp.inter = c.moe_intermediate_size;
            if (mlp.hasExperts()) {
                AFD_RETURN_IF_ERROR(packMlps(
                    loader, weights, sel.numExperts(), H, c.moe_intermediate_size,
                    [&](int64_t i, std::string_view proj) {
                        return expertTensorName(layer, sel.expert_begin + i, proj);
                    },
                    mlp));
            }
        } else if (sel.dense_mlp) {
            mlp.expert_begin = 0;
            mlp.expert_end = 1;
            AFD_RETURN_IF_ERROR(packMlps(
                loader, weights, 1, H, c.intermediate_size,
                [&](int64_t, std::string_view proj) { return fmt::format("{}mlp.{}.weight", p, proj); }, mlp));
        }
        if (progress && !progress(layer + 1, c.num_hidden_layers)) {
            return core::makeStatus(core::StatusCode::kCancelled, "the weights' load was stopped after {} of {} layers",
                                    layer + 1, c.num_hidden_layers);
        }
    }
    return weights;
}

}  // namespace afd::model
