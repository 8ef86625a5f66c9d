#include "ffn/cuda/cuda_ffn_compute.h"

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
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/expert_count_cuda.h"
#include "kernels/moe_cuda.h"
#include "kernels/router.h"

namespace afd::ffn {
namespace {

using kernels::cuda::DeviceBuffer;
using kernels::cuda::GraphExec;
using kernels::cuda::PinnedBuffer;
using kernels::cuda::Stream;

int64_t bucketFor(int64_t tokens) {
    if (tokens <= 16) return 16;
    int64_t pow2 = 16;
    while (pow2 < tokens) pow2 *= 2;
    const int64_t step = std::max<int64_t>(16, pow2 / 8);
    return (tokens + step - 1) / step * step;
}

// Every bucket bucketFor returns for 1 ... rows (rows is itself a bucket).
std::vector<int64_t> bucketsUpTo(int64_t rows) {
    std::vector<int64_t> buckets;
    for (int64_t t = 1;;) {
        buckets.push_back(bucketFor(t));
        if (buckets.back() >= rows) return buckets;
        t = buckets.back() + 1;
    }
}

// The GPU router takes 1 <= num_experts <= 256 and top_k <= 32 (moe_cuda.h); other shapes are routed on the host
// with the reference router and the result uploaded like m2n routing.
bool gpuRouterTakes(const model::ModelConfig& config) {
    return config.num_experts >= 1 && config.num_experts <= 256 && config.num_experts_per_tok <= 32;
}

double gib(uint64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << 30); }

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
    CudaFfnCompute(const model::ModelConfig& config, int gpu, int64_t max_rows)
        : config_(config), gpu_(gpu), max_rows_(max_rows) {}

    core::Status init(model::ModelWeights weights);

    core::Status moePartial(int64_t layer, int64_t num_tokens, const float* x, const int32_t* ids, const float* weights,
                            float* out) override {
        return run(layer, num_tokens, x, ids, weights, out);
    }
    core::Status mlpBlock(int64_t layer, int64_t num_tokens, const float* x, float* out) override {
        return run(layer, num_tokens, x, nullptr, nullptr, out);
    }
    bool routedTokenTotals(std::span<uint64_t> totals) const override;
    std::string describe() const override { return fmt::format("cuda:{} ({})", gpu_, device_name_); }
    uint64_t deviceWeightBytes() const override { return weight_bytes_; }
    void release() override;

private:
    core::Status run(int64_t layer, int64_t T, const float* x, const int32_t* ids, const float* weights, float* out);
    // Enqueues the layer's kernels for `rows` staged rows on the stream.
    void enqueue(int64_t layer, int64_t rows);
    // The instantiated graph of enqueue(layer, bucket), captured on the stream the first time.
    const GraphExec& graphFor(int64_t layer, int64_t bucket);
    // Copies the device's per-expert totals into `totals` [num_experts] through the reader's own stream. Caller holds
    // totals_mutex_.
    void readRoutedTotals(std::span<uint64_t> totals) const;

    const model::ModelConfig& config_;
    const int gpu_;
    const int64_t max_rows_;
    std::string device_name_;
    uint64_t weight_bytes_ = 0;
    bool use_graphs_ = true;
    std::vector<DeviceLayer> layers_;
    std::unique_ptr<Stream> stream_;
    DeviceBuffer x_dev_, ids_dev_, weights_dev_, out_dev_, workspace_;
    DeviceBuffer router_workspace_;  // p2p layers routed here: the router's partial logits
    PinnedBuffer x_host_, ids_host_, weights_host_, out_host_;
    std::map<std::pair<int64_t, int64_t>, GraphExec> graphs_;  // (layer, bucket), all captured by init()
    bool released_ = false;

    // p2p routing counts: after each counted layer's MoE, a kernel in the same graph adds the entries of the call's
    // first *valid_rows_dev_ rows (the call's real rows: the bucket's padding rows are routed too, and left out) to
    // routed_counts_dev_ [num_experts] uint64, which only grows. No host synchronisation on the compute stream.
    bool counting_ = false;
    DeviceBuffer routed_counts_dev_;
    DeviceBuffer valid_rows_dev_;  // [1] int32, copied in before each launch
    PinnedBuffer valid_rows_host_;
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

core::Status CudaFfnCompute::init(model::ModelWeights weights) {
    AFD_CUDA_CHECK(cudaSetDevice(gpu_));
    device_name_ = kernels::cuda::deviceInfo(gpu_).name;
    auto graphs = core::envBool("AFD_FFN_CUDA_GRAPHS", true);
    if (!graphs.isOk()) return graphs.status();
    use_graphs_ = *graphs;
    const int64_t H = config_.hidden_size;
    const int64_t K = config_.num_experts_per_tok;
    if (H % 64 != 0) return core::unsupported("--device cuda needs hidden_size % 64 == 0, got {}", H);
    stream_ = std::make_unique<Stream>();
    layers_.resize(weights.mlp.size());
    int64_t max_experts = 1, max_inter = 1;
    for (size_t l = 0; l < weights.mlp.size(); ++l) {
        const model::MlpLayerWeights& w = weights.mlp[l];
        DeviceLayer& d = layers_[l];
        d.is_moe = w.is_moe;
        if (!w.hasExperts()) continue;
        d.present = true;
        d.num_experts = w.expert_end - w.expert_begin;
        d.inter = kernels::moePackedWidth(w.inter);  // any checkpoint width, padded with zeros to the GEMMs' unit
        {
            // The checkpoint's row-major matrices go up into staging buffers (freed at the end of the block) and
            // are packed on the device into the layout the grouped GEMMs stream.
            DeviceBuffer staging13(w.w13.nbytes());
            DeviceBuffer staging2(w.w2.nbytes());
            AFD_CUDA_CHECK(cudaMemcpy(staging13.get(), w.w13.rawData(), w.w13.nbytes(), cudaMemcpyHostToDevice));
            AFD_CUDA_CHECK(cudaMemcpy(staging2.get(), w.w2.rawData(), w.w2.nbytes(), cudaMemcpyHostToDevice));
            const kernels::MoePackedWeightBytes packed = kernels::moePackedWeightBytes(d.num_experts, H, w.inter);
            d.w13 = DeviceBuffer(packed.w13);
            d.w2 = DeviceBuffer(packed.w2);
            kernels::moePackWeightsCuda(staging13.as<core::Bf16>(), staging2.as<core::Bf16>(), d.num_experts, H,
                                        w.inter, d.w13.as<core::Bf16>(), d.w2.as<core::Bf16>(), nullptr);
            AFD_CUDA_CHECK(cudaDeviceSynchronize());
            weight_bytes_ += packed.w13 + packed.w2;
        }
        max_experts = std::max(max_experts, d.num_experts);
        max_inter = std::max(max_inter, d.inter);
        if (w.is_moe && w.router.rawData() != nullptr) {
            d.counts_routing = true;
            counting_ = true;
            if (!gpuRouterTakes(config_)) {
                const auto* src = w.router.data<core::Bf16>();
                d.host_router.assign(src, src + w.router.numel());
                continue;
            }
            d.route_here = true;
            d.router = DeviceBuffer(w.router.nbytes());
            AFD_CUDA_CHECK(cudaMemcpy(d.router.get(), w.router.rawData(), w.router.nbytes(), cudaMemcpyHostToDevice));
            weight_bytes_ += w.router.nbytes();
        }
    }
    const int64_t rows = bucketFor(max_rows_);
    x_dev_ = DeviceBuffer(static_cast<size_t>(rows * H) * sizeof(uint16_t));
    out_dev_ = DeviceBuffer(static_cast<size_t>(rows * H) * sizeof(float));
    ids_dev_ = DeviceBuffer(static_cast<size_t>(rows * K) * sizeof(int32_t));
    weights_dev_ = DeviceBuffer(static_cast<size_t>(rows * K) * sizeof(float));
    workspace_ = DeviceBuffer(kernels::moeCudaWorkspaceBytes(rows, K, max_experts, H, max_inter));
    if (std::any_of(layers_.begin(), layers_.end(), [](const DeviceLayer& d) { return d.route_here; })) {
        router_workspace_ = DeviceBuffer(kernels::routerCudaWorkspaceBytes(rows, H, config_.num_experts));
    }
    if (counting_) {
        if (config_.num_experts > kernels::kMaxCountedExperts) {
            return core::unsupported("--device cuda counts the p2p routing of at most {} experts, the model has {}",
                                     kernels::kMaxCountedExperts, config_.num_experts);
        }
        const size_t count_bytes = static_cast<size_t>(config_.num_experts) * sizeof(uint64_t);
        routed_counts_dev_ = DeviceBuffer(count_bytes);
        valid_rows_dev_ = DeviceBuffer(sizeof(int32_t));
        valid_rows_host_ = PinnedBuffer(sizeof(int32_t));
        totals_stream_ = std::make_unique<Stream>();
        totals_snapshot_dev_ = DeviceBuffer(count_bytes);
        totals_host_ = PinnedBuffer(count_bytes);
        // Zeroed on the compute stream and finished before any reader or graph can touch the totals.
        AFD_CUDA_CHECK(cudaMemsetAsync(routed_counts_dev_.get(), 0, count_bytes, stream_->get()));
        AFD_CUDA_CHECK(cudaStreamSynchronize(stream_->get()));
    }
    x_host_ = PinnedBuffer(static_cast<size_t>(rows * H) * sizeof(uint16_t));
    out_host_ = PinnedBuffer(static_cast<size_t>(rows * H) * sizeof(float));
    ids_host_ = PinnedBuffer(static_cast<size_t>(rows * K) * sizeof(int32_t));
    weights_host_ = PinnedBuffer(static_cast<size_t>(rows * K) * sizeof(float));
    AFD_LOG_INFO("{}: {} bytes of weights in device memory, staging for {} rows, CUDA graphs {}", describe(),
                 weight_bytes_, rows, use_graphs_ ? "on" : "off");
    if (use_graphs_) {
        // Every (layer, token bucket) graph now, so that no step pays for a capture (about a millisecond each).
        const auto start = std::chrono::steady_clock::now();
        const std::vector<int64_t> buckets = bucketsUpTo(rows);
        int64_t present = 0;
        for (size_t l = 0; l < layers_.size(); ++l) {
            if (!layers_[l].present) continue;
            ++present;
            for (const int64_t bucket : buckets) graphFor(static_cast<int64_t>(l), bucket);
        }
        AFD_CUDA_CHECK(cudaStreamSynchronize(stream_->get()));
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        AFD_LOG_INFO("{}: captured {} CUDA graphs ({} layers x {} token buckets, 16 ... {}) in {:.2f} s", describe(),
                     graphs_.size(), present, buckets.size(), rows, seconds);
    }
    return core::Status::ok();
}

const GraphExec& CudaFfnCompute::graphFor(int64_t layer, int64_t bucket) {
    const auto key = std::make_pair(layer, bucket);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
        cudaStream_t s = stream_->get();
        cudaGraph_t graph = nullptr;
        AFD_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        try {
            enqueue(layer, bucket);
        } catch (...) {
            // End the capture before the error leaves: a stream left capturing refuses every later call on it,
            // and the buffers' frees with it.
            if (cudaStreamEndCapture(s, &graph) == cudaSuccess && graph != nullptr) (void)cudaGraphDestroy(graph);
            throw;
        }
        AFD_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
        cudaGraphExec_t exec = nullptr;
        const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
        (void)cudaGraphDestroy(graph);
        AFD_CUDA_CHECK(instantiated);
        it = graphs_.emplace(key, GraphExec(exec)).first;
        AFD_CUDA_CHECK(cudaGraphUpload(exec, s));  // the device copy now, not at the first launch
    }
    return it->second;
}

void CudaFfnCompute::enqueue(int64_t layer, int64_t rows) {
    const DeviceLayer& d = layers_[static_cast<size_t>(layer)];
    kernels::MoeParams p;
    p.num_tokens = rows;
    p.hidden = config_.hidden_size;
    p.inter = d.inter;
    p.num_experts = d.num_experts;
    p.top_k = d.is_moe ? config_.num_experts_per_tok : 1;
    // The routing chooses among every rank's experts; this rank serves d.num_experts of them (the kernels' choices
    // by entries per expert follow the share it serves).
    p.routed_experts = d.is_moe ? config_.num_experts : 0;
    p.act_dtype = kernels::ActDType::kBf16;
    p.x = x_dev_.get();
    p.topk_ids = ids_dev_.as<int32_t>();
    p.topk_weights = weights_dev_.as<float>();
    p.w13 = d.w13.as<core::Bf16>();
    p.w2 = d.w2.as<core::Bf16>();
    p.out = out_dev_.get();
    // The sums leave in FP32: an m2n attention rank adds its FFN ranks' partial sums as one rank's whole sum.
    p.out_f32 = true;
    if (d.route_here) {
        const kernels::RouterParams r =
            kernels::routerParams(config_, rows, kernels::ActDType::kBf16, x_dev_.get(), d.router.as<core::Bf16>(),
                                  ids_dev_.as<int32_t>(), weights_dev_.as<float>());
        kernels::routerForwardCuda(r, router_workspace_.get(), router_workspace_.bytes(), stream_->get());
    }
    kernels::moeForwardCuda(p, workspace_.get(), workspace_.bytes(), stream_->get());
    if (d.counts_routing) {
        // After the MoE, off the router-to-MoE path; it reads the ids the MoE leaves untouched.
        kernels::ExpertTokenCountParams c;
        c.num_rows = rows;
        c.top_k = config_.num_experts_per_tok;
        c.num_experts = config_.num_experts;
        c.num_valid = valid_rows_dev_.as<int32_t>();
        c.topk_ids = ids_dev_.as<int32_t>();
        c.counts = routed_counts_dev_.as<uint64_t>();
        kernels::countExpertTokensCuda(c, stream_->get());
    }
}

core::Status CudaFfnCompute::run(int64_t layer, int64_t T, const float* x, const int32_t* ids, const float* weights,
                                 float* out) {
    AFD_CHECK(!released_, "GPU FFN compute used after release()");
    const DeviceLayer& d = layers_[static_cast<size_t>(layer)];
    AFD_CHECK(d.present, "layer {} has no weights on this rank", layer);
    AFD_CHECK(T <= max_rows_, "{} rows exceed the {} this rank was sized for", T, max_rows_);
    if (T == 0) return core::Status::ok();
    AFD_CUDA_CHECK(cudaSetDevice(gpu_));
    const int64_t H = config_.hidden_size;
    const int64_t K = d.is_moe ? config_.num_experts_per_tok : 1;
    const int64_t bucket = use_graphs_ ? bucketFor(T) : T;
    auto* xh = x_host_.as<uint16_t>();
    core::parallelFor(T, 64, [&](int64_t b, int64_t e) {
        for (int64_t i = b * H; i < e * H; ++i) xh[i] = core::floatToBf16Bits(x[i]);
    });
    std::memset(xh + T * H, 0, static_cast<size_t>((bucket - T) * H) * sizeof(uint16_t));
    const bool upload_routing = !d.route_here;
    if (upload_routing) {
        auto* ih = ids_host_.as<int32_t>();
        auto* wh = weights_host_.as<float>();
        if (ids != nullptr) {
            std::memcpy(ih, ids, static_cast<size_t>(T * K) * sizeof(int32_t));
            std::memcpy(wh, weights, static_cast<size_t>(T * K) * sizeof(float));
        } else if (d.is_moe) {  // p2p MoE routed on the host
            kernels::routerForwardCpu(
                kernels::routerParams(config_, T, kernels::ActDType::kF32, x, d.host_router.data(), ih, wh));
        } else {  // dense MLP layer: expert 0 with weight 1
            std::fill(ih, ih + T * K, 0);
            std::fill(wh, wh + T * K, 1.0f);
        }
        std::fill(ih + T * K, ih + bucket * K, -1);  // padding rows go to no expert
        std::fill(wh + T * K, wh + bucket * K, 0.0f);
    }
    cudaStream_t s = stream_->get();
    AFD_CUDA_CHECK(cudaMemcpyAsync(x_dev_.get(), xh, static_cast<size_t>(bucket * H) * sizeof(uint16_t),
                                   cudaMemcpyHostToDevice, s));
    if (upload_routing) {
        AFD_CUDA_CHECK(cudaMemcpyAsync(ids_dev_.get(), ids_host_.as<int32_t>(),
                                       static_cast<size_t>(bucket * K) * sizeof(int32_t), cudaMemcpyHostToDevice, s));
        AFD_CUDA_CHECK(cudaMemcpyAsync(weights_dev_.get(), weights_host_.as<float>(),
                                       static_cast<size_t>(bucket * K) * sizeof(float), cudaMemcpyHostToDevice, s));
    }
    if (d.counts_routing) {
        // The rows the count kernel takes: this call's, or none for ids the caller routed (m2n-style moePartial).
        // The pinned word is free to rewrite: the previous call synchronised the stream before it returned.
        *valid_rows_host_.as<int32_t>() = ids == nullptr ? static_cast<int32_t>(T) : 0;
        AFD_CUDA_CHECK(cudaMemcpyAsync(valid_rows_dev_.get(), valid_rows_host_.as<int32_t>(), sizeof(int32_t),
                                       cudaMemcpyHostToDevice, s));
    }
    if (use_graphs_) {
        AFD_CUDA_CHECK(cudaGraphLaunch(graphFor(layer, bucket).get(), s));
    } else {
        enqueue(layer, bucket);
    }
    AFD_CUDA_CHECK_LAUNCH();
    auto* oh = out_host_.as<float>();
    AFD_CUDA_CHECK(
        cudaMemcpyAsync(oh, out_dev_.get(), static_cast<size_t>(T * H) * sizeof(float), cudaMemcpyDeviceToHost, s));
    AFD_CUDA_CHECK(cudaStreamSynchronize(s));
    std::memcpy(out, oh, static_cast<size_t>(T * H) * sizeof(float));
    return core::Status::ok();
}

bool CudaFfnCompute::routedTokenTotals(std::span<uint64_t> totals) const {
    if (!counting_) return false;
    AFD_CHECK(totals.size() == static_cast<size_t>(config_.num_experts), "{} totals for {} experts", totals.size(),
              config_.num_experts);
    std::lock_guard<std::mutex> lock(totals_mutex_);
    if (totals_final_) {
        if (!final_totals_ok_) return false;
        std::copy(final_totals_.begin(), final_totals_.end(), totals.begin());
        return true;
    }
    try {
        readRoutedTotals(totals);
    } catch (const core::Error& e) {
        AFD_LOG_WARN("{}: reading the per-expert token counts: {}", describe(), e.what());
        return false;
    }
    return true;
}

void CudaFfnCompute::readRoutedTotals(std::span<uint64_t> totals) const {
    // Runs beside the compute stream's kernels: the snapshot kernel loads each total as one 64-bit word, so a racing
    // read gets a value the counter held (a layer or a step may be missing; the next read has it).
    AFD_CUDA_CHECK(cudaSetDevice(gpu_));
    cudaStream_t s = totals_stream_->get();
    const size_t bytes = totals.size() * sizeof(uint64_t);
    kernels::snapshotCountersCuda(routed_counts_dev_.as<uint64_t>(), totals_snapshot_dev_.as<uint64_t>(),
                                  static_cast<int64_t>(totals.size()), s);
    AFD_CUDA_CHECK(
        cudaMemcpyAsync(totals_host_.as<uint64_t>(), totals_snapshot_dev_.get(), bytes, cudaMemcpyDeviceToHost, s));
    AFD_CUDA_CHECK(cudaStreamSynchronize(s));
    std::memcpy(totals.data(), totals_host_.as<uint64_t>(), bytes);
}

void CudaFfnCompute::release() {
    if (released_) return;
    released_ = true;
    (void)cudaSetDevice(gpu_);
    if (counting_) {
        // The last totals stay readable after the device side is gone.
        std::lock_guard<std::mutex> lock(totals_mutex_);
        final_totals_.assign(static_cast<size_t>(config_.num_experts), 0);
        if (totals_stream_ != nullptr) {  // null only when init() failed before allocating the counters
            try {
                AFD_CUDA_CHECK(cudaStreamSynchronize(stream_->get()));
                readRoutedTotals(final_totals_);
                final_totals_ok_ = true;
            } catch (const core::Error& e) {
                AFD_LOG_WARN("{}: reading the last per-expert token counts: {}", describe(), e.what());
            }
        }
        totals_final_ = true;
        totals_stream_.reset();
        totals_snapshot_dev_ = DeviceBuffer();
        totals_host_ = PinnedBuffer();
        routed_counts_dev_ = DeviceBuffer();
        valid_rows_dev_ = DeviceBuffer();
        valid_rows_host_ = PinnedBuffer();
    }
    graphs_.clear();
    layers_.clear();
    x_dev_ = DeviceBuffer();
    out_dev_ = DeviceBuffer();
    ids_dev_ = DeviceBuffer();
    weights_dev_ = DeviceBuffer();
    workspace_ = DeviceBuffer();
    router_workspace_ = DeviceBuffer();
    x_host_ = PinnedBuffer();
    out_host_ = PinnedBuffer();
    ids_host_ = PinnedBuffer();
    weights_host_ = PinnedBuffer();
    stream_.reset();
}

}  // namespace

namespace {

// What a rank holding `selection`'s MLP weights puts on its GPU, layer by layer (as init() allocates it).
struct RankDeviceShape {
    uint64_t weights = 0;  // packed experts, and the routers run on the GPU
    uint64_t staging = 0;  // one layer's checkpoint matrices at a time (init's upload)
    bool routes = false;
    bool counts = false;  // p2p MoE layers: the per-expert routing counters
    int64_t max_experts = 1;
    int64_t max_inter = 1;  // the packed width (kernels::moePackedWidth)
};

RankDeviceShape rankDeviceShape(const model::ModelConfig& config, const model::WeightSelection& selection) {
    const int64_t H = config.hidden_size;
    RankDeviceShape r;
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
        const bool moe = config.isMoeLayer(l);
        const int64_t experts = moe ? selection.numExperts() : (selection.dense_mlp ? 1 : 0);
        if (experts <= 0) continue;
        const int64_t inter = moe ? config.moe_intermediate_size : config.intermediate_size;
        const kernels::MoePackedWeightBytes packed = kernels::moePackedWeightBytes(experts, H, inter);
        r.weights += packed.w13 + packed.w2;
        r.staging = std::max(r.staging, static_cast<uint64_t>(experts * 3 * inter * H) * sizeof(uint16_t));
        r.counts = r.counts || (moe && selection.router);
        if (moe && selection.router && gpuRouterTakes(config)) {
            r.weights += static_cast<uint64_t>(config.num_experts * H) * sizeof(uint16_t);
            r.routes = true;
        }
        r.max_experts = std::max(r.max_experts, experts);
        r.max_inter = std::max(r.max_inter, kernels::moePackedWidth(inter));
    }
    return r;
}

}  // namespace

uint64_t cudaFfnDeviceBytes(const model::ModelConfig& config, const model::WeightSelection& selection,
                            int64_t max_rows) {
    const int64_t H = config.hidden_size;
    const int64_t K = config.num_experts_per_tok;
    const RankDeviceShape r = rankDeviceShape(config, selection);
    const int64_t rows = bucketFor(max_rows);
    uint64_t calls = static_cast<uint64_t>(rows * H) * (sizeof(uint16_t) + sizeof(float)) +  // x, out
                     static_cast<uint64_t>(rows * K) * (sizeof(int32_t) + sizeof(float)) +   // ids, weights
                     kernels::moeCudaWorkspaceBytes(rows, K, r.max_experts, H, r.max_inter);
    if (r.routes) calls += kernels::routerCudaWorkspaceBytes(rows, H, config.num_experts);
    if (r.counts) calls += 2 * static_cast<uint64_t>(config.num_experts) * sizeof(uint64_t) + sizeof(int32_t);
    return r.weights + r.staging + calls;
}

core::Status checkCudaFfnFits(const model::ModelConfig& config, const model::WeightSelection& selection, int gpu,
                              int64_t max_rows) {
    // The kernels index rows of x, x_sorted, h and y with 32-bit element offsets (moeForwardCuda): the largest token
    // bucket this rank stages must keep T top_k max(hidden, inter) below 2^31.
    const int64_t K = config.num_experts_per_tok;
    const int64_t widest = std::max(config.hidden_size, rankDeviceShape(config, selection).max_inter);
    const int64_t rows = bucketFor(max_rows);
    if (rows * K * widest >= (int64_t{1} << 31)) {
        int64_t limit = 0;  // the largest token bucket within the offsets
        for (const int64_t b : bucketsUpTo(rows)) {
            if (b * K * widest < (int64_t{1} << 31)) limit = b;
        }
        return core::invalidArgument(
            "this FFN rank stages calls of up to {} rows (its attention peers x afd.max_num_tokens, rounded up to a "
            "token bucket), and {} rows x top_k {} x {} columns pass the GPU kernels' 32-bit offsets (2^31 "
            "elements): lower afd.max_num_tokens so that a call carries at most {} rows",
            max_rows, rows, K, widest, limit);
    }
    const uint64_t needed = cudaFfnDeviceBytes(config, selection, max_rows);
    size_t free_bytes = 0, total_bytes = 0;
    std::string name;
    try {
        AFD_CUDA_CHECK(cudaSetDevice(gpu));
        AFD_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        name = kernels::cuda::deviceInfo(gpu).name;
    } catch (const core::Error& e) {
        return core::internalError("reading cuda:{}'s free memory: {}", gpu, e.what());
    }
    if (needed + kCudaFfnHeadroomBytes > free_bytes) {
        return core::invalidArgument(
            "cuda:{} ({}) has {:.2f} GiB free of {:.2f} GiB, and this FFN rank needs {:.2f} GiB ({} experts of {} "
            "per MoE layer, calls of up to {} rows) plus {:.2f} GiB of headroom: use more FFN ranks "
            "(afd.num_ffn_ranks), fewer tokens per step (afd.max_num_tokens) or a GPU with more free memory",
            gpu, name, gib(free_bytes), gib(total_bytes), gib(needed), selection.numExperts(), config.num_experts,
            max_rows, gib(kCudaFfnHeadroomBytes));
    }
    return core::Status::ok();
}

core::Result<std::unique_ptr<FfnCompute>> createCudaFfnCompute(const model::ModelConfig& config,
                                                               model::ModelWeights weights, int gpu, int64_t max_rows) {
    auto compute = std::make_unique<CudaFfnCompute>(config, gpu, max_rows);
    try {
        AFD_RETURN_IF_ERROR(compute->init(std::move(weights)));
    } catch (const core::Error& e) {
        return core::internalError("setting up the GPU FFN compute on cuda:{}: {}", gpu, e.what());
    }
    return std::unique_ptr<FfnCompute>(std::move(compute));
}

}  // namespace afd::ffn
