#include "ffn/cuda/cuda_ffn_compute_impl.h"
#include "kernels/afd_frames_cuda.h"
#include "transport/connector_factory.h"

namespace afd::ffn::cuda_ffn {

static_assert(kernels::kMaxGatheredPeers >= transport::kMaxDevicePeers,
              "the gather kernel must take every attention peer a device connector allows");

core::Status CudaFfnCompute::begin() {
    AFD_CUDA_CHECK(cudaSetDevice(gpu_));
    device_name_ = kernels::cuda::deviceInfo(gpu_).name;
    shared_sms_ = kernels::cuda::sharedThroughMps(gpu_);
    auto graphs = core::envBool("AFD_FFN_CUDA_GRAPHS", true);
    if (!graphs.isOk()) return graphs.status();
    use_graphs_ = *graphs && allow_graphs_;
    const int64_t H = config_.hidden_size;
    if (H % 64 != 0) return core::unsupported("--device cuda needs hidden_size % 64 == 0, got {}", H);
    return core::Status::ok();
}

core::Status CudaFfnCompute::init(model::ModelWeights weights) {
    AFD_RETURN_IF_ERROR(begin());
    const int64_t H = config_.hidden_size;
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
    return setup(max_experts, max_inter);
}

core::Status CudaFfnCompute::setup(int64_t max_experts, int64_t max_inter) {
    const int64_t H = config_.hidden_size;
    const int64_t K = config_.num_experts_per_tok;
    const int64_t rows = bucketFor(max_rows_);
    m2n_ = std::none_of(layers_.begin(), layers_.end(), [](const DeviceLayer& d) { return d.counts_routing; });
    if (num_device_lanes_ > 0 && !m2n_) {
        for (const DeviceLayer& d : layers_) {
            if (d.counts_routing && !d.route_here) {
                return core::unsupported(
                    "the device data plane routes p2p MoE layers on the GPU, whose router takes 1..256 experts and "
                    "top-k <= 32; this model has {} experts, top-k {}: use the tcp connector",
                    config_.num_experts, config_.num_experts_per_tok);
            }
        }
    }
    if (num_device_lanes_ > 0 && m2n_) {
        // m2n device calls: the frames' local ids are counted here (the host never sees them).
        for (DeviceLayer& d : layers_) {
            if (d.present && d.is_moe) {
                d.counts_routing = true;
                counting_ = true;
                counted_experts_ = std::max(counted_experts_, d.num_experts);
            }
        }
    } else if (counting_) {
        counted_experts_ = config_.num_experts;
    }
    const bool routes = std::any_of(layers_.begin(), layers_.end(), [](const DeviceLayer& d) { return d.route_here; });
    lanes_.resize(static_cast<size_t>(std::max(1, num_device_lanes_)));
    for (Lane& lane : lanes_) {
        lane.stream = std::make_unique<Stream>();
        lane.x = DeviceBuffer(static_cast<size_t>(rows * H) * sizeof(uint16_t));
        lane.out = DeviceBuffer(static_cast<size_t>(rows * H) * sizeof(float));
        lane.ids = DeviceBuffer(static_cast<size_t>(rows * K) * sizeof(int32_t));
        lane.weights = DeviceBuffer(static_cast<size_t>(rows * K) * sizeof(float));
        lane.workspace = DeviceBuffer(kernels::moeCudaWorkspaceBytes(rows, K, max_experts, H, max_inter));
        if (routes)
            lane.router_workspace = DeviceBuffer(kernels::routerCudaWorkspaceBytes(rows, H, config_.num_experts));
        lane.valid_rows = DeviceBuffer(sizeof(int32_t));
    }
    if (num_device_lanes_ > 0) {
        // The device calls' id check records here (read after synchronizeLanes).
        bad_ids_ = DeviceBuffer(4 * sizeof(int32_t));
        AFD_CUDA_CHECK(cudaMemset(bad_ids_.get(), 0, 4 * sizeof(int32_t)));
    }
    fork_events_.resize(lanes_.size());
    join_events_.resize(lanes_.size());
    if (counting_) {
        if (counted_experts_ > kernels::kMaxCountedExperts) {
            return core::unsupported("--device cuda counts the routing of at most {} experts, the model has {}",
                                     kernels::kMaxCountedExperts, counted_experts_);
        }
        const size_t count_bytes = static_cast<size_t>(counted_experts_) * sizeof(uint64_t);
        routed_counts_dev_ = DeviceBuffer(count_bytes);
        valid_rows_host_ = PinnedBuffer(sizeof(int32_t));
        totals_stream_ = std::make_unique<Stream>();
        totals_snapshot_dev_ = DeviceBuffer(count_bytes);
        totals_host_ = PinnedBuffer(count_bytes);
        // Zeroed on a lane's stream and finished before any reader or graph can touch the totals.
        AFD_CUDA_CHECK(cudaMemsetAsync(routed_counts_dev_.get(), 0, count_bytes, lanes_[0].stream->get()));
    }
    AFD_CUDA_CHECK(cudaStreamSynchronize(lanes_[0].stream->get()));
    x_host_ = PinnedBuffer(static_cast<size_t>(rows * H) * sizeof(uint16_t));
    out_host_ = PinnedBuffer(static_cast<size_t>(rows * H) * sizeof(float));
    ids_host_ = PinnedBuffer(static_cast<size_t>(rows * K) * sizeof(int32_t));
    weights_host_ = PinnedBuffer(static_cast<size_t>(rows * K) * sizeof(float));
    AFD_LOG_INFO("{}: {} bytes of weights in device memory, staging for {} rows, CUDA graphs {}", describe(),
                 weight_bytes_, rows, use_graphs_ ? "on" : "off");
    if (use_graphs_) {
        // Every (lane, layer, token bucket) graph now, so that no step pays for a capture (about a millisecond each).
        const auto start = std::chrono::steady_clock::now();
        const std::vector<int64_t> buckets = bucketsUpTo(rows);
        int64_t present = 0;
        size_t graphs = 0;
        for (Lane& lane : lanes_) {
            present = 0;
            for (size_t l = 0; l < layers_.size(); ++l) {
                if (!layers_[l].present) continue;
                ++present;
                for (const int64_t bucket : buckets) graphFor(lane, static_cast<int64_t>(l), bucket);
            }
            AFD_CUDA_CHECK(cudaStreamSynchronize(lane.stream->get()));
            graphs += lane.graphs.size();
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        AFD_LOG_INFO("{}: captured {} CUDA graphs ({} lanes x {} layers x {} token buckets, 16 ... {}) in {:.2f} s",
                     describe(), graphs, lanes_.size(), present, buckets.size(), rows, seconds);
    }
    return core::Status::ok();
}

const GraphExec& CudaFfnCompute::graphFor(Lane& lane, int64_t layer, int64_t bucket) {
    const auto key = std::make_pair(layer, bucket);
    auto it = lane.graphs.find(key);
    if (it == lane.graphs.end()) {
        cudaStream_t s = lane.stream->get();
        cudaGraph_t graph = nullptr;
        AFD_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        try {
            enqueue(lane, layer, bucket, /*count=*/true);
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
        it = lane.graphs.emplace(key, GraphExec(exec)).first;
        AFD_CUDA_CHECK(cudaGraphUpload(exec, s));  // the device copy now, not at the first launch
    }
    return it->second;
}

void CudaFfnCompute::launch(Lane& lane, int64_t layer, int64_t bucket) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    AFD_CUDA_CHECK(cudaStreamIsCapturing(lane.stream->get(), &capture));
    // Inside a step graph's capture the layer's kernels are recorded themselves (no graph launched in a graph).
    if (use_graphs_ && capture == cudaStreamCaptureStatusNone) {
        AFD_CUDA_CHECK(cudaGraphLaunch(graphFor(lane, layer, bucket).get(), lane.stream->get()));
    } else {
        enqueue(lane, layer, bucket, /*count=*/true);
    }
    AFD_CUDA_CHECK_LAUNCH();
}

void CudaFfnCompute::enqueue(Lane& lane, int64_t layer, int64_t rows, bool count) {
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
    p.x = lane.x.get();
    p.topk_ids = lane.ids.as<int32_t>();
    p.topk_weights = lane.weights.as<float>();
    p.w13 = d.w13.as<core::Bf16>();
    p.w2 = d.w2.as<core::Bf16>();
    p.out = lane.out.get();
    // The sums leave in FP32: an m2n attention rank adds its FFN ranks' partial sums as one rank's whole sum.
    p.out_f32 = true;
    p.shared_sms = shared_sms_;
    if (d.route_here) {
        const kernels::RouterParams r =
            kernels::routerParams(config_, rows, kernels::ActDType::kBf16, lane.x.get(), d.router.as<core::Bf16>(),
                                  lane.ids.as<int32_t>(), lane.weights.as<float>());
        kernels::routerForwardCuda(r, lane.router_workspace.get(), lane.router_workspace.bytes(), lane.stream->get());
    }
    kernels::moeForwardCuda(p, lane.workspace.get(), lane.workspace.bytes(), lane.stream->get());
    if (count && d.counts_routing) {
        // After the MoE, off the router-to-MoE path; it reads the ids the MoE leaves untouched.
        kernels::ExpertTokenCountParams c;
        c.num_rows = rows;
        c.top_k = config_.num_experts_per_tok;
        c.num_experts = counted_experts_;
        c.num_valid = lane.valid_rows.as<int32_t>();
        c.topk_ids = lane.ids.as<int32_t>();
        c.counts = routed_counts_dev_.as<uint64_t>();
        kernels::countExpertTokensCuda(c, lane.stream->get());
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
    Lane& lane = lanes_[0];
    cudaStream_t s = lane.stream->get();
    AFD_CUDA_CHECK(cudaMemcpyAsync(lane.x.get(), xh, static_cast<size_t>(bucket * H) * sizeof(uint16_t),
                                   cudaMemcpyHostToDevice, s));
    if (upload_routing) {
        AFD_CUDA_CHECK(cudaMemcpyAsync(lane.ids.get(), ids_host_.as<int32_t>(),
                                       static_cast<size_t>(bucket * K) * sizeof(int32_t), cudaMemcpyHostToDevice, s));
        AFD_CUDA_CHECK(cudaMemcpyAsync(lane.weights.get(), weights_host_.as<float>(),
                                       static_cast<size_t>(bucket * K) * sizeof(float), cudaMemcpyHostToDevice, s));
    }
    if (d.counts_routing) {
        // The rows the count kernel takes: this call's, or none for ids the caller routed (m2n-style moePartial).
        // The pinned word is free to rewrite: the previous call synchronised the stream before it returned.
        *valid_rows_host_.as<int32_t>() = ids == nullptr ? static_cast<int32_t>(T) : 0;
        AFD_CUDA_CHECK(cudaMemcpyAsync(lane.valid_rows.get(), valid_rows_host_.as<int32_t>(), sizeof(int32_t),
                                       cudaMemcpyHostToDevice, s));
    }
    launch(lane, layer, bucket);
    auto* oh = out_host_.as<float>();
    AFD_CUDA_CHECK(
        cudaMemcpyAsync(oh, lane.out.get(), static_cast<size_t>(T * H) * sizeof(float), cudaMemcpyDeviceToHost, s));
    AFD_CUDA_CHECK(cudaStreamSynchronize(s));
    std::memcpy(out, oh, static_cast<size_t>(T * H) * sizeof(float));
    return core::Status::ok();
}

core::Status CudaFfnCompute::computeDevice(int lane_index, int64_t layer, std::span<const DevicePeerRows> peers) {
    AFD_CHECK(!released_, "GPU FFN compute used after release()");
    AFD_CHECK(lane_index >= 0 && lane_index < num_device_lanes_, "lane {} of {}", lane_index, num_device_lanes_);
    const DeviceLayer& d = layers_[static_cast<size_t>(layer)];
    AFD_CHECK(d.present, "layer {} has no weights on this rank", layer);
    int64_t T = 0;
    for (const DevicePeerRows& p : peers) T += p.rows;
    AFD_CHECK(T <= max_rows_, "{} rows exceed the {} this rank was sized for", T, max_rows_);
    if (T == 0) return core::Status::ok();
    AFD_CUDA_CHECK(cudaSetDevice(gpu_));
    Lane& lane = lanes_[static_cast<size_t>(lane_index)];
    cudaStream_t s = lane.stream->get();
    const int64_t H = config_.hidden_size;
    const int64_t K = d.is_moe ? config_.num_experts_per_tok : 1;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    AFD_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
    // A step graph is captured for its exact rows; eager calls replay the layer graph of their bucket.
    const bool capturing = capture != cudaStreamCaptureStatusNone;
    const int64_t bucket = use_graphs_ && !capturing ? bucketFor(T) : T;
    AFD_CHECK(peers.size() <= static_cast<size_t>(kernels::kMaxGatheredPeers), "{} peers' frames (at most {})",
              peers.size(), kernels::kMaxGatheredPeers);
    // One launch: the peers' rows back to back (each peer's slot holds its rows contiguously), the bucket's padding
    // rows (zero inputs, routed nowhere), the frames' ids checked and counted.
    kernels::GatherFfnRowsParams g;
    for (const DevicePeerRows& p : peers) {
        if (p.rows == 0) continue;
        const int k = g.num_peers++;
        g.x[k] = static_cast<const uint16_t*>(p.x);
        g.rows[k] = p.rows;
        if (d.is_moe && !d.route_here) {
            AFD_CHECK(p.ids != nullptr && p.weights != nullptr, "m2n rows without ids or weights");
            g.ids[k] = p.ids;
            g.weights[k] = p.weights;
        }
    }
    g.hidden = H;
    g.top_k = K;
    g.padded_rows = bucket;
    g.routing = !d.is_moe      ? kernels::GatheredRouting::kDense
                : d.route_here ? kernels::GatheredRouting::kRouterHere
                               : kernels::GatheredRouting::kFromFrames;
    g.num_local = static_cast<int32_t>(d.num_experts);
    g.layer = static_cast<int32_t>(layer);
    g.out_x = lane.x.as<uint16_t>();
    g.out_ids = lane.ids.as<int32_t>();
    g.out_weights = lane.weights.as<float>();
    g.bad = bad_ids_.as<int32_t>();
    // In a step graph the gather counts the frames' local ids itself (no count kernel on the way to the send);
    // otherwise the count kernel the layer graph holds takes the gathered rows, as it does after a p2p router.
    const bool gather_counts = capturing && d.counts_routing && g.routing == kernels::GatheredRouting::kFromFrames;
    g.counts = gather_counts ? routed_counts_dev_.as<uint64_t>() : nullptr;
    if (d.counts_routing && !gather_counts) g.valid_rows = lane.valid_rows.as<int32_t>();
    kernels::gatherFfnRowsCuda(g, s);
    if (capturing) {
        enqueue(lane, layer, bucket, /*count=*/!gather_counts);
        AFD_CUDA_CHECK_LAUNCH();
        return core::Status::ok();
    }
    launch(lane, layer, bucket);
    return core::Status::ok();
}

core::Status CudaFfnCompute::beginStepCapture(int lane) {
    AFD_CHECK(lane == 0, "step graphs are captured from lane 0, got {}", lane);
    AFD_CUDA_CHECK(cudaSetDevice(gpu_));
    cudaStream_t origin = lanes_[0].stream->get();
    AFD_CUDA_CHECK(cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal));
    // The other lanes join the capture (fork): what they enqueue becomes parallel branches of the one graph.
    for (size_t l = 1; l < lanes_.size(); ++l) {
        AFD_CUDA_CHECK(cudaEventRecord(fork_events_[l].get(), origin));
        AFD_CUDA_CHECK(cudaStreamWaitEvent(lanes_[l].stream->get(), fork_events_[l].get(), 0));
    }
    return core::Status::ok();
}

core::Result<int> CudaFfnCompute::endStepCapture(int lane, bool keep) {
    AFD_CHECK(lane == 0, "step graphs are captured from lane 0, got {}", lane);
    AFD_CUDA_CHECK(cudaSetDevice(gpu_));
    cudaStream_t s = lanes_[0].stream->get();
    // Join every lane back into the origin before the capture ends.
    for (size_t l = 1; l < lanes_.size(); ++l) {
        AFD_CUDA_CHECK(cudaEventRecord(join_events_[l].get(), lanes_[l].stream->get()));
        AFD_CUDA_CHECK(cudaStreamWaitEvent(s, join_events_[l].get(), 0));
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(s, &graph);
    if (!keep || ended != cudaSuccess) {
        if (graph != nullptr) (void)cudaGraphDestroy(graph);
        AFD_CUDA_CHECK(ended);
        return -1;
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    AFD_CUDA_CHECK(instantiated);
    step_graphs_.emplace_back(exec);
    AFD_CUDA_CHECK(cudaGraphUpload(exec, s));
    return static_cast<int>(step_graphs_.size() - 1);
}

core::Status CudaFfnCompute::launchStepGraph(int graph, int lane) {
    AFD_CHECK(graph >= 0 && graph < static_cast<int>(step_graphs_.size()), "step graph {} of {}", graph,
              step_graphs_.size());
    AFD_CUDA_CHECK(cudaSetDevice(gpu_));
    AFD_CUDA_CHECK(cudaGraphLaunch(step_graphs_[static_cast<size_t>(graph)].get(),
                                   lanes_.at(static_cast<size_t>(lane)).stream->get()));
    return core::Status::ok();
}

core::Status CudaFfnCompute::synchronizeLanes() {
    AFD_CUDA_CHECK(cudaSetDevice(gpu_));
    for (Lane& lane : lanes_) AFD_CUDA_CHECK(cudaStreamSynchronize(lane.stream->get()));
    if (bad_ids_.get() == nullptr) return core::Status::ok();
    int32_t bad[4] = {};
    AFD_CUDA_CHECK(cudaMemcpy(bad, bad_ids_.get(), sizeof(bad), cudaMemcpyDeviceToHost));
    if (bad[0] != 0) {
        return core::corrupt(
            "an attention peer's frame for layer {} carried expert id {} (entry {} of the gathered rows), outside "
            "[-1, {}) of this rank",
            bad[1], bad[3], bad[2], layers_[static_cast<size_t>(bad[1])].num_experts);
    }
    return core::Status::ok();
}

core::Status CudaFfnCompute::resetForNextSession() {
    AFD_CHECK(!released_, "GPU FFN compute used after release()");
    AFD_CUDA_CHECK(cudaSetDevice(gpu_));
    for (Lane& lane : lanes_) AFD_CUDA_CHECK(cudaStreamSynchronize(lane.stream->get()));
    step_graphs_.clear();
    if (bad_ids_.get() != nullptr) AFD_CUDA_CHECK(cudaMemset(bad_ids_.get(), 0, 4 * sizeof(int32_t)));
    return core::Status::ok();
}

bool CudaFfnCompute::routedTokenTotals(std::span<uint64_t> totals) const {
    if (!counting_) return false;
    AFD_CHECK(totals.size() == static_cast<size_t>(counted_experts_), "{} totals for {} experts", totals.size(),
              counted_experts_);
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
        final_totals_.assign(static_cast<size_t>(counted_experts_), 0);
        if (totals_stream_ != nullptr) {  // null only when init() failed before allocating the counters
            try {
                for (Lane& lane : lanes_) AFD_CUDA_CHECK(cudaStreamSynchronize(lane.stream->get()));
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
        valid_rows_host_ = PinnedBuffer();
    }
    step_graphs_.clear();
    lanes_.clear();
    bad_ids_ = DeviceBuffer();
    layers_.clear();
    x_host_ = PinnedBuffer();
    out_host_ = PinnedBuffer();
    ids_host_ = PinnedBuffer();
    weights_host_ = PinnedBuffer();
}

}  // namespace afd::ffn::cuda_ffn

namespace afd::ffn {

using cuda_ffn::CudaFfnCompute;

core::Result<std::unique_ptr<FfnCompute>> createRandomCudaFfnCompute(const model::ModelConfig& config,
                                                                     const model::WeightSelection& selection,
                                                                     uint64_t seed, int gpu, int64_t max_rows,
                                                                     int num_device_lanes, bool enforce_eager) {
    auto compute = std::make_unique<CudaFfnCompute>(config, gpu, max_rows, num_device_lanes, !enforce_eager);
    try {
        AFD_RETURN_IF_ERROR(compute->initRandom(selection, seed));
    } catch (const core::Error& e) {
        return core::internalError("drawing the GPU FFN compute's random weights on cuda:{}: {}", gpu, e.what());
    }
    return std::unique_ptr<FfnCompute>(std::move(compute));
}

core::Result<std::unique_ptr<FfnCompute>> createCudaFfnCompute(const model::ModelConfig& config,
                                                               model::ModelWeights weights, int gpu, int64_t max_rows,
                                                               int num_device_lanes, bool enforce_eager) {
    auto compute = std::make_unique<CudaFfnCompute>(config, gpu, max_rows, num_device_lanes, !enforce_eager);
    try {
        AFD_RETURN_IF_ERROR(compute->init(std::move(weights)));
    } catch (const core::Error& e) {
        return core::internalError("setting up the GPU FFN compute on cuda:{}: {}", gpu, e.what());
    }
    return std::unique_ptr<FfnCompute>(std::move(compute));
}

}  // namespace afd::ffn
