#include "transport/nccl/nccl_endpoint.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <utility>

#include "core/check.h"
#include "core/logging.h"
#include "kernels/cuda/device_memory.h"
#include "transport/nccl/nccl_device.h"
#include "transport/socket.h"

namespace afd::transport::nccl {
namespace {

// Host-mapped words: the error record, the failed word, then the per-peer progress copies.
constexpr size_t kFailedOffset = 64;
constexpr size_t kProgressOffset = 128;
// Device counters: the claimed word, then the per-peer frames checked.
constexpr size_t kFramesOffset = 64;
constexpr size_t kHeaderStride = kNcclSlotAlignment;  // send headers one alignment unit apart

static_assert(sizeof(NcclHeaderError) <= kFailedOffset);

core::Status cudaStatus(cudaError_t err, std::string_view what) {
    if (err == cudaSuccess) return core::Status::ok();
    return core::internalError("nccl: {}: {}", what, cudaGetErrorString(err));
}

// Kernel launches throw core::Error (AFD_CUDA_CHECK); the posts return Status.
template <typename F>
core::Status guarded(std::string_view what, F&& f) {
    try {
        return f();
    } catch (const core::Error& e) {
        return core::internalError("nccl {}: {}", what, e.what());
    }
}

}  // namespace

// ---- allocations ----

core::Result<DeviceAllocation> DeviceAllocation::zeroed(size_t bytes, int gpu) {
    DeviceAllocation a;
    a.gpu_ = gpu;
    AFD_RETURN_IF_ERROR(cudaStatus(cudaSetDevice(gpu), fmt::format("selecting cuda:{}", gpu)));
    AFD_RETURN_IF_ERROR(
        cudaStatus(cudaMalloc(&a.ptr_, std::max<size_t>(bytes, 1)), fmt::format("allocating {} bytes", bytes)));
    AFD_RETURN_IF_ERROR(cudaStatus(cudaMemset(a.ptr_, 0, std::max<size_t>(bytes, 1)), "zeroing device memory"));
    return a;
}

DeviceAllocation::~DeviceAllocation() {
    if (ptr_ == nullptr) return;
    (void)cudaSetDevice(gpu_);
    const cudaError_t err = cudaFree(ptr_);
    if (err != cudaSuccess) AFD_LOG_WARN("nccl: freeing device memory: {}", cudaGetErrorString(err));
}

DeviceAllocation::DeviceAllocation(DeviceAllocation&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), gpu_(other.gpu_) {}

DeviceAllocation& DeviceAllocation::operator=(DeviceAllocation&& other) noexcept {
    if (this != &other) {
        DeviceAllocation old(std::move(*this));
        ptr_ = std::exchange(other.ptr_, nullptr);
        gpu_ = other.gpu_;
    }
    return *this;
}

core::Result<HostMappedAllocation> HostMappedAllocation::zeroed(size_t bytes, int gpu) {
    HostMappedAllocation a;
    AFD_RETURN_IF_ERROR(cudaStatus(cudaSetDevice(gpu), fmt::format("selecting cuda:{}", gpu)));
    AFD_RETURN_IF_ERROR(cudaStatus(cudaHostAlloc(&a.host_, bytes, cudaHostAllocMapped | cudaHostAllocPortable),
                                   "allocating host-mapped memory"));
    std::memset(a.host_, 0, bytes);
    AFD_RETURN_IF_ERROR(cudaStatus(cudaHostGetDevicePointer(&a.device_, a.host_, 0), "mapping host memory"));
    return a;
}

HostMappedAllocation::~HostMappedAllocation() {
    if (host_ != nullptr) (void)cudaFreeHost(host_);
}

HostMappedAllocation::HostMappedAllocation(HostMappedAllocation&& other) noexcept
    : host_(std::exchange(other.host_, nullptr)), device_(std::exchange(other.device_, nullptr)) {}

HostMappedAllocation& HostMappedAllocation::operator=(HostMappedAllocation&& other) noexcept {
    if (this != &other) {
        HostMappedAllocation old(std::move(*this));
        host_ = std::exchange(other.host_, nullptr);
        device_ = std::exchange(other.device_, nullptr);
    }
    return *this;
}

// ---- NcclEndpoint ----

core::Result<std::unique_ptr<NcclEndpoint>> NcclEndpoint::create(const NcclEndpointSetup& setup) {
    if (setup.peer_ranks.empty()) return core::invalidArgument("nccl: a rank without peers");
    std::unique_ptr<NcclEndpoint> e(new NcclEndpoint());
    e->setup_ = setup;
    AFD_ASSIGN_OR_RETURN(e->out_layout_, ncclSlotLayout(setup.out_spec, setup.max_rows));
    AFD_ASSIGN_OR_RETURN(e->in_layout_, ncclSlotLayout(setup.in_spec, setup.max_rows));
    const size_t peers = setup.peer_ranks.size();
    const size_t channels = peers * kMaxStages;
    AFD_ASSIGN_OR_RETURN(e->slots_, DeviceAllocation::zeroed(channels * e->in_layout_.bytes, setup.gpu));
    AFD_ASSIGN_OR_RETURN(e->headers_, DeviceAllocation::zeroed(channels * kHeaderStride, setup.gpu));
    AFD_ASSIGN_OR_RETURN(e->counters_, DeviceAllocation::zeroed(kFramesOffset + peers * sizeof(uint64_t), setup.gpu));
    AFD_ASSIGN_OR_RETURN(e->host_, HostMappedAllocation::zeroed(kProgressOffset + peers * sizeof(uint64_t), setup.gpu));
    AFD_LOG_INFO("nccl: receive slots of {} MiB on cuda:{} ({} peers x {} stages, {} rows per frame)",
                 (channels * e->in_layout_.bytes) >> 20, setup.gpu, peers, kMaxStages, setup.max_rows);
    return e;
}

NcclEndpoint::~NcclEndpoint() = default;

void NcclEndpoint::attach(std::unique_ptr<NcclComms> comms) {
    AFD_CHECK(comms != nullptr && comms->numCommunicators() == kMaxStages, "nccl: one communicator per stage");
    comms_ = std::move(comms);
}

NcclComms& NcclEndpoint::comms() const {
    AFD_CHECK(comms_ != nullptr, "nccl: the endpoint has no communicators yet");
    return *comms_;
}

void NcclEndpoint::setPeers(std::vector<PeerInfo> peers) {
    AFD_CHECK(peers.size() == numPeers(), "nccl: {} peer names for {} peers", peers.size(), numPeers());
    peers_ = std::move(peers);
}

std::string NcclEndpoint::describePeer(size_t peer) const {
    if (peer < peers_.size()) return peers_[peer].describe();
    if (peer < numPeers()) return fmt::format("global rank {}", setup_.peer_ranks[peer]);
    return fmt::format("peer {}", peer);
}

uint8_t* NcclEndpoint::slot(uint32_t stage, size_t peer) const {
    return slots_.get() + (size_t{stage} * numPeers() + peer) * in_layout_.bytes;
}

uint8_t* NcclEndpoint::sendHeader(uint32_t stage, size_t peer) const {
    return headers_.get() + (size_t{stage} * numPeers() + peer) * kHeaderStride;
}

core::Status NcclEndpoint::warmUp(std::chrono::milliseconds timeout) {
    const Deadline deadline = deadlineAfter(timeout);
    AFD_RETURN_IF_ERROR(cudaStatus(cudaSetDevice(setup_.gpu), "selecting the GPU"));
    try {
        kernels::cuda::Stream stream;
        for (uint32_t stage = 0; stage < comms().numCommunicators(); ++stage) {
            transfers_.clear();
            for (size_t i = 0; i < numPeers(); ++i) {
                const int rank = setup_.peer_ranks[i];
                transfers_.push_back({true, sendHeader(stage, i), sizeof(NcclFrameHeader), rank});
                transfers_.push_back({false, slot(stage, i), sizeof(NcclFrameHeader), rank});
            }
            AFD_RETURN_IF_ERROR(comms().post(stage, transfers_, stream.get(),
                                             std::max(timeLeft(deadline), std::chrono::milliseconds(1))));
        }
        for (;;) {
            const cudaError_t state = cudaStreamQuery(stream.get());
            if (state == cudaSuccess) return core::Status::ok();
            if (state != cudaErrorNotReady) return cudaStatus(state, "the first exchange with the peers");
            if (Clock::now() >= deadline) {
                comms().abort();  // ends the exchange's kernels, so the stream can go
                (void)cudaStreamSynchronize(stream.get());
                std::vector<std::string> names;
                for (size_t i = 0; i < numPeers(); ++i) names.push_back(describePeer(i));
                return core::timeoutError(
                    "nccl: the first exchange with {} did not finish within afd.connect_timeout_s ({} s)",
                    fmt::join(names, ", "), std::chrono::duration<double>(timeout).count());
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    } catch (const core::Error& e) {
        return core::internalError("nccl: the first exchange with the peers: {}", e.what());
    }
}

core::Status NcclEndpoint::checkPayload(size_t peer, const FramePayload& payload) const {
    const FrameSpec& spec = setup_.out_spec;
    if (payload.rows > setup_.max_rows) {
        return core::invalidArgument("nccl: a frame of {} rows to {} exceeds afd.max_num_tokens {}", payload.rows,
                                     describePeer(peer), setup_.max_rows);
    }
    if (payload.segments.size() != spec.segments.size()) {
        return core::invalidArgument("nccl: a frame with {} segments to {}, expected {}", payload.segments.size(),
                                     describePeer(peer), spec.segments.size());
    }
    for (size_t s = 0; s < spec.segments.size(); ++s) {
        const core::Tensor& t = payload.segments[s];
        const bool shape_ok = t.dim() == 2 && t.size(0) == payload.rows && t.size(1) == spec.segments[s].cols;
        if (t.dtype() != spec.segments[s].dtype || !shape_ok || (payload.rows > 0 && t.device().isCpu())) {
            return core::invalidArgument("nccl: segment {} to {} is {} {} on {}, expected [{}, {}] {} on a GPU", s,
                                         describePeer(peer), core::dtypeName(t.dtype()), core::shapeToString(t.shape()),
                                         t.device().toString(), payload.rows, spec.segments[s].cols,
                                         core::dtypeName(spec.segments[s].dtype));
        }
    }
    return core::Status::ok();
}

void NcclEndpoint::launchHeaderWrites(const FrameKey& key, const Outgoing& out, void* stream) const {
    NcclHeaderWriteParams p;
    p.layer = key.layer;
    p.stage = key.stage;
    for (size_t i = 0; i < numPeers(); ++i) {
        if (!out.send[i]) continue;
        const int k = p.num_peers++;
        p.header[k] = reinterpret_cast<NcclFrameHeader*>(sendHeader(key.stage, i));
        p.rows[k] = out.payloads[i].rows;
        if (p.num_peers == kMaxLaunchPeers) {
            launchNcclHeaderWrite(p, stream);
            p.num_peers = 0;
        }
    }
    launchNcclHeaderWrite(p, stream);
}

void NcclEndpoint::launchHeaderChecks(const FrameKey& key, const Incoming& in, void* stream) const {
    NcclHeaderCheckParams p;
    p.layer = key.layer;
    p.stage = key.stage;
    p.frames = reinterpret_cast<unsigned long long*>(counters_.get() + kFramesOffset);
    p.progress = reinterpret_cast<uint64_t*>(host_.device() + kProgressOffset);
    p.claimed = reinterpret_cast<uint32_t*>(counters_.get());
    p.failed = reinterpret_cast<const uint32_t*>(host_.device() + kFailedOffset);
    p.error = reinterpret_cast<NcclHeaderError*>(host_.device());
    for (size_t i = 0; i < numPeers(); ++i) {
        if (!in.take[i]) continue;
        const int k = p.num_peers++;
        p.header[k] = reinterpret_cast<const NcclFrameHeader*>(slot(key.stage, i));
        p.rows[k] = in.rows[i];
        p.peer_index[k] = static_cast<uint32_t>(i);
        if (p.num_peers == kMaxLaunchPeers) {
            launchNcclHeaderCheck(p, stream);
            p.num_peers = 0;
        }
    }
    launchNcclHeaderCheck(p, stream);
}

core::Status NcclEndpoint::post(const FrameKey& key, const Outgoing* out, const Incoming* in, void* stream) {
    AFD_CHECK(key.stage < kMaxStages, "stage {} out of range", key.stage);
    const size_t P = numPeers();
    transfers_.clear();
    if (out != nullptr) {
        AFD_CHECK(out->payloads.size() == P && out->send.size() == P, "nccl: {} payloads for {} peers",
                  out->payloads.size(), P);
        for (size_t i = 0; i < P; ++i) {
            if (!out->send[i]) continue;
            const FramePayload& payload = out->payloads[i];
            AFD_RETURN_IF_ERROR(checkPayload(i, payload));
            const int rank = setup_.peer_ranks[i];
            transfers_.push_back({true, sendHeader(key.stage, i), sizeof(NcclFrameHeader), rank});
            for (int s = 0; s < out_layout_.count; ++s) {
                const uint64_t bytes = out_layout_.segmentBytes(s, payload.rows);
                if (bytes > 0) transfers_.push_back({true, payload.segments[s].rawData(), bytes, rank});
            }
        }
    }
    if (in != nullptr) {
        AFD_CHECK(in->take.size() == P && in->rows.size() == P && in->frames != nullptr && in->expected != nullptr,
                  "nccl: {} rows for {} peers", in->rows.size(), P);
        if (in->expected->segments != setup_.in_spec.segments) {
            return core::invalidArgument("nccl: a wait for frames of another spec than the connector's");
        }
        std::vector<ReceivedFrame>& frames = *in->frames;
        frames.assign(P, ReceivedFrame{});
        for (size_t i = 0; i < P; ++i) {
            ReceivedFrame& f = frames[i];
            f.active = in->take[i];
            if (!f.active) continue;
            const uint32_t rows = in->rows[i];
            if (rows > setup_.max_rows) {
                return core::invalidArgument("nccl: waiting for {} rows from {}, more than afd.max_num_tokens {}", rows,
                                             describePeer(i), setup_.max_rows);
            }
            f.rows = rows;
            uint8_t* base = slot(key.stage, i);
            const int rank = setup_.peer_ranks[i];
            transfers_.push_back({false, base, sizeof(NcclFrameHeader), rank});
            for (int s = 0; s < in_layout_.count; ++s) {
                const SegmentSpec& spec = setup_.in_spec.segments[static_cast<size_t>(s)];
                f.segments.push_back(core::Tensor::view(base + in_layout_.offsets[s], spec.dtype,
                                                        {static_cast<int64_t>(rows), spec.cols},
                                                        core::Device::cuda(setup_.gpu)));
                const uint64_t bytes = in_layout_.segmentBytes(s, rows);
                if (bytes > 0) transfers_.push_back({false, base + in_layout_.offsets[s], bytes, rank});
            }
        }
    }
    return guarded("post", [&]() -> core::Status {
        if (out != nullptr) launchHeaderWrites(key, *out, stream);
        AFD_RETURN_IF_ERROR(comms().post(key.stage, transfers_, stream));
        if (in != nullptr) launchHeaderChecks(key, *in, stream);
        return core::Status::ok();
    });
}

core::Status NcclEndpoint::postFrames(const FrameKey& key, std::span<const FramePayload> payloads,
                                      std::span<const bool> send, void* stream) {
    const Outgoing out{payloads, send};
    return post(key, &out, nullptr, stream);
}

core::Status NcclEndpoint::postWaits(const FrameKey& key, const FrameSpec& expected, std::span<const bool> take,
                                     std::span<const uint32_t> rows, void* stream, std::vector<ReceivedFrame>& frames) {
    const Incoming in{&expected, take, rows, &frames};
    return post(key, nullptr, &in, stream);
}

core::Status NcclEndpoint::headerStatus() const {
    const auto* record = reinterpret_cast<const NcclHeaderError*>(host_.host());
    if (*reinterpret_cast<const volatile uint32_t*>(&record->code) == kNcclCheckOk) return core::Status::ok();
    std::atomic_thread_fence(std::memory_order_acquire);
    NcclHeaderError e;
    std::memcpy(&e, record, sizeof(e));
    return core::corrupt(
        "nccl: {}: a frame with header (magic {:#x}, layer {}, stage {}, {} rows), expected (magic {:#x}, layer {}, "
        "stage {}, {} rows): the two ranks disagree on the frames of a step",
        describePeer(e.peer), e.got_magic, e.got_layer, e.got_stage, e.got_rows, kFrameHeaderMagic, e.expected_layer,
        e.expected_stage, e.expected_rows);
}

uint64_t NcclEndpoint::framesTaken(size_t peer) const {
    AFD_CHECK(peer < numPeers(), "peer {} of {}", peer, numPeers());
    const auto* progress = reinterpret_cast<const volatile uint64_t*>(host_.host() + kProgressOffset);
    return progress[peer];
}

void NcclEndpoint::markFailed() {
    std::atomic_ref<uint32_t> failed(*reinterpret_cast<uint32_t*>(host_.host() + kFailedOffset));
    failed.store(1, std::memory_order_seq_cst);
}

}  // namespace afd::transport::nccl
