// The GPU FFN compute's class (cuda_ffn_compute.h has the contract), shared by its implementation files:
// cuda_ffn_compute.cpp (set-up, the layers' kernels and graphs, host and device calls), cuda_ffn_random.cpp (the
// weights drawn on the GPU). Internal to ffn/cuda/.
#pragma once

#include <cuda_runtime.h>

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <span>
#include <vector>

#include "core/bf16.h"
#include "core/env.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "ffn/cuda/cuda_ffn_compute.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/device_random.h"
#include "kernels/expert_count_cuda.h"
#include "kernels/fill_cuda.h"
#include "kernels/moe_cuda.h"
#include "kernels/router.h"
#include "model/synthetic.h"

namespace afd::ffn::cuda_ffn {

using kernels::cuda::DeviceBuffer;
using kernels::cuda::Event;
using kernels::cuda::GraphExec;
using kernels::cuda::PinnedBuffer;
using kernels::cuda::Stream;

inline int64_t bucketFor(int64_t tokens) {
    if (tokens <= 16) return 16;
    int64_t pow2 = 16;
    while (pow2 < tokens) pow2 *= 2;
    const int64_t step = std::max<int64_t>(16, pow2 / 8);
    return (tokens + step - 1) / step * step;
}

// Every bucket bucketFor returns for 1 ... rows (rows is itself a bucket).
inline std::vector<int64_t> bucketsUpTo(int64_t rows) {
    std::vector<int64_t> buckets;
    for (int64_t t = 1;;) {
        buckets.push_back(bucketFor(t));
        if (buckets.back() >= rows) return buckets;
        t = buckets.back() + 1;
    }
}

// The GPU router takes 1 <= num_experts <= 256 and top_k <= 32 (moe_cuda.h); other shapes are routed on the host
// with the reference router and the result uploaded like m2n routing.
inline bool gpuRouterTakes(const model::ModelConfig& config) {
    return config.num_experts >= 1 && config.num_experts <= 256 && config.num_experts_per_tok <= 32;
}

inline double gib(uint64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << 30); }

struct DeviceLayer {
    bool present = false;  // this rank computes something for the layer
    bool is_moe = false;
    bool route_here = false;              // p2p MoE: the router runs on this GPU
    bool counts_routing = false;          // p2p MoE (routed on the GPU or the host): its entries are counted
    std::vector<core::Bf16> host_router;  // p2p MoE whose shape the GPU router does not take: routed on the host
    int64_t num_experts = 0;
    int64_t inter = 0;  // the packed width (kernels::moePackedWidth of the checkpoint's)
    DeviceBuffer w13;   // packed (moePackWeightsCuda)
    DeviceBuffer w2;    // packed
    DeviceBuffer router;
};

class CudaFfnCompute : public FfnCompute {
public:
    CudaFfnCompute(const model::ModelConfig& config, int gpu, int64_t max_rows, int num_device_lanes, bool graphs)
        : config_(config), gpu_(gpu), max_rows_(max_rows), num_device_lanes_(num_device_lanes), allow_graphs_(graphs) {}

    core::Status init(model::ModelWeights weights);
    // The weights gen-model writes with `seed`, drawn on the GPU for `selection` (no checkpoint, no host copy).
    core::Status initRandom(const model::WeightSelection& selection, uint64_t seed);

    core::Status moePartial(int64_t layer, int64_t num_tokens, const float* x, const int32_t* ids, const float* weights,
                            float* out) override {
        return run(layer, num_tokens, x, ids, weights, out);
    }
    core::Status mlpBlock(int64_t layer, int64_t num_tokens, const float* x, float* out) override {
        return run(layer, num_tokens, x, nullptr, nullptr, out);
    }
    bool routedTokenTotals(std::span<uint64_t> totals) const override;
    int numDeviceLanes() const override { return num_device_lanes_; }
    void* laneStream(int lane) override { return lanes_.at(static_cast<size_t>(lane)).stream->get(); }
    core::Status computeDevice(int lane, int64_t layer, std::span<const DevicePeerRows> peers) override;
    const float* laneOutput(int lane) const override { return lanes_.at(static_cast<size_t>(lane)).out.as<float>(); }
    core::Status synchronizeLanes() override;
    core::Status resetForNextSession() override;
    core::Status beginStepCapture(int lane) override;
    core::Result<int> endStepCapture(int lane, bool keep) override;
    core::Status launchStepGraph(int graph, int lane) override;
    std::string describe() const override { return fmt::format("cuda:{} ({})", gpu_, device_name_); }
    uint64_t deviceWeightBytes() const override { return weight_bytes_; }
    void release() override;

private:
    struct Lane;
    core::Status begin();
    // Buffers, lanes and graphs, once the layers' weights are on the GPU.
    core::Status setup(int64_t max_experts, int64_t max_inter);
    core::Status run(int64_t layer, int64_t T, const float* x, const int32_t* ids, const float* weights, float* out);
    // Enqueues the layer's kernels for `rows` staged rows on the lane's stream; `count`: with the routing count
    // kernel where the layer counts its routing.
    void enqueue(Lane& lane, int64_t layer, int64_t rows, bool count);
    // The instantiated graph of enqueue(lane, layer, bucket), captured on the lane's stream the first time.
    const GraphExec& graphFor(Lane& lane, int64_t layer, int64_t bucket);
    // Runs enqueue(lane, layer, bucket) as its graph, or eagerly.
    void launch(Lane& lane, int64_t layer, int64_t bucket);
    // Copies the device's per-expert totals into `totals` [num_experts] through the reader's own stream. Caller holds
    // totals_mutex_.
    void readRoutedTotals(std::span<uint64_t> totals) const;

    // One stream with its own buffers, workspaces and graphs: lane 0 serves the host calls too.
    struct Lane {
        std::unique_ptr<Stream> stream;
        DeviceBuffer x, ids, weights, out, workspace;
        DeviceBuffer router_workspace;                            // p2p layers routed here: the router's partial logits
        DeviceBuffer valid_rows;                                  // [1] int32: the rows the count kernel takes
        std::map<std::pair<int64_t, int64_t>, GraphExec> graphs;  // (layer, bucket), all captured by init()
    };

    const model::ModelConfig& config_;
    const int gpu_;
    const int64_t max_rows_;
    const int num_device_lanes_;
    const bool allow_graphs_;  // false: --enforce-eager
    std::string device_name_;
    uint64_t weight_bytes_ = 0;
    bool use_graphs_ = true;
    bool shared_sms_ = false;  // an MPS client: other processes' kernels may hold SMs (MoeParams::shared_sms)
    bool m2n_ = false;         // no layer routes here: the callers send ids (m2n)
    std::vector<DeviceLayer> layers_;
    std::vector<Lane> lanes_;
    std::vector<GraphExec> step_graphs_;            // whole steps (FfnRunner), by id
    std::vector<Event> fork_events_, join_events_;  // [lane]: lanes 1.. joining a step capture of lane 0
    DeviceBuffer bad_ids_;  // [4] int32: the first out-of-range id of a device call (kernels::GatherFfnRowsParams)
    PinnedBuffer x_host_, ids_host_, weights_host_, out_host_;
    PinnedBuffer valid_rows_host_;
    bool released_ = false;

    // Routing counts (p2p; m2n device calls): after each counted layer's MoE, a kernel in the same graph adds the
    // entries of the call's first *lane.valid_rows rows (the call's real rows: the bucket's padding rows are routed
    // too, and left out) to routed_counts_dev_ [num_experts] uint64, which only grows. No host synchronisation on the
    // compute stream.
    bool counting_ = false;
    int64_t counted_experts_ = 0;  // p2p: every expert of the model; m2n device calls: this rank's (local ids)
    DeviceBuffer routed_counts_dev_;
    // The reader (routedTokenTotals, on the admin thread while the worker computes): a stream, a device snapshot and a
    // pinned copy of its own, so that it synchronises nothing of the compute's. totals_mutex_ serialises readers and
    // release(), which keeps the last totals in final_totals_ before it frees the device side.
    mutable std::mutex totals_mutex_;
    std::unique_ptr<Stream> totals_stream_;
    DeviceBuffer totals_snapshot_dev_;
    PinnedBuffer totals_host_;
    bool totals_final_ = false;     // released: final_totals_ answers
    bool final_totals_ok_ = false;  // the last read before release succeeded
    std::vector<uint64_t> final_totals_;
};

}  // namespace afd::ffn::cuda_ffn
