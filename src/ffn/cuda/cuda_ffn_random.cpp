#include "ffn/cuda/cuda_ffn_compute_impl.h"
#include "kernels/device_random.h"
#include "model/synthetic.h"

namespace afd::ffn::cuda_ffn {

core::Status CudaFfnCompute::initRandom(const model::WeightSelection& selection, uint64_t seed) {
    AFD_RETURN_IF_ERROR(begin());
    const int64_t H = config_.hidden_size;
    layers_.resize(static_cast<size_t>(config_.num_hidden_layers));
    // Every layer's expert keys (model::syntheticTensorKey of the tensors gen-model writes) in one upload.
    std::vector<uint64_t> host_keys;
    std::vector<size_t> key_offset(layers_.size(), 0);
    for (size_t l = 0; l < layers_.size(); ++l) {
        DeviceLayer& d = layers_[l];
        const auto layer = static_cast<int64_t>(l);
        d.is_moe = config_.isMoeLayer(layer);
        const int64_t begin = d.is_moe ? selection.expert_begin : 0;
        const int64_t end = d.is_moe ? selection.expert_end : (selection.dense_mlp ? 1 : 0);
        key_offset[l] = host_keys.size();
        if (end <= begin) continue;
        d.present = true;
        d.num_experts = end - begin;
        for (int64_t e = begin; e < end; ++e) {
            for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
                host_keys.push_back(model::syntheticTensorKey(
                    d.is_moe ? model::expertTensorName(layer, e, proj)
                             : fmt::format("{}mlp.{}.weight", model::layerPrefix(layer), proj),
                    seed));
            }
        }
    }
    DeviceBuffer keys(std::max<size_t>(host_keys.size(), 1) * sizeof(uint64_t));
    AFD_CUDA_CHECK(
        cudaMemcpy(keys.get(), host_keys.data(), host_keys.size() * sizeof(uint64_t), cudaMemcpyHostToDevice));
    int64_t max_experts = 1, max_inter = 1;
    for (size_t l = 0; l < layers_.size(); ++l) {
        DeviceLayer& d = layers_[l];
        if (!d.present) continue;
        const auto layer = static_cast<int64_t>(l);
        const int64_t I = d.is_moe ? config_.moe_intermediate_size : config_.intermediate_size;
        d.inter = kernels::moePackedWidth(I);
        const kernels::MoePackedWeightBytes packed = kernels::moePackedWeightBytes(d.num_experts, H, I);
        d.w13 = DeviceBuffer(packed.w13);
        d.w2 = DeviceBuffer(packed.w2);
        const std::string first = d.is_moe ? model::expertTensorName(layer, selection.expert_begin, "gate_proj")
                                           : fmt::format("{}mlp.gate_proj.weight", model::layerPrefix(layer));
        const std::string down = d.is_moe ? model::expertTensorName(layer, selection.expert_begin, "down_proj")
                                          : fmt::format("{}mlp.down_proj.weight", model::layerPrefix(layer));
        kernels::SyntheticPackedMlpParams mp;
        mp.num_experts = d.num_experts;
        mp.hidden = H;
        mp.inter = I;
        mp.keys = keys.as<uint64_t>() + key_offset[l];
        mp.gate_up_half_width = model::syntheticDistribution(first, {I, H}).half_width;
        mp.down_half_width = model::syntheticDistribution(down, {H, I}).half_width;
        mp.w13_packed = d.w13.as<core::Bf16>();
        mp.w2_packed = d.w2.as<core::Bf16>();
        kernels::syntheticPackedMlpCuda(mp, nullptr);
        weight_bytes_ += packed.w13 + packed.w2;
        max_experts = std::max(max_experts, d.num_experts);
        max_inter = std::max(max_inter, d.inter);
        if (d.is_moe && selection.router) {
            if (!gpuRouterTakes(config_)) {
                return core::unsupported(
                    "--random-weights on an FFN rank routes on the GPU, whose router takes 1..256 "
                    "experts and top-k <= 32; this model has {} experts, top-k {}",
                    config_.num_experts, config_.num_experts_per_tok);
            }
            d.counts_routing = true;
            counting_ = true;
            d.route_here = true;
            const std::string name = model::layerPrefix(layer) + "mlp.gate.weight";
            const model::SyntheticDistribution dist = model::syntheticDistribution(name, {config_.num_experts, H});
            d.router = DeviceBuffer(static_cast<size_t>(config_.num_experts * H) * sizeof(uint16_t));
            kernels::SyntheticFillParams fill;
            fill.out = d.router.as<core::Bf16>();
            fill.count = config_.num_experts * H;
            fill.key = model::syntheticTensorKey(name, seed);
            fill.centre = dist.centre;
            fill.half_width = dist.half_width;
            kernels::syntheticFillCuda(fill, nullptr);
            weight_bytes_ += d.router.bytes();
        }
    }
    AFD_CUDA_CHECK(cudaDeviceSynchronize());
    AFD_LOG_INFO("{}: drew {} bytes of random weights (seed {})", describe(), weight_bytes_, seed);
    return setup(max_experts, max_inter);
}

}  // namespace afd::ffn::cuda_ffn
