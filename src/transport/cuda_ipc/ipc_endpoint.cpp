#include "transport/cuda_ipc/ipc_endpoint.h"

#include <fmt/format.h>

#include <cuda_runtime.h>

#include "core/check.h"
#include "core/logging.h"
#include "kernels/cuda/cuda_check.h"
#include "transport/frame.h"

namespace afd::transport::cuda_ipc {
namespace {

// Frames up to this size are copied by the put kernel itself (one launch, started before the kernel that made the
// frame ends); larger ones by cudaMemcpyAsync per segment, then a publishing put. Every frame of afd.max_num_tokens
// up to 2048 hidden-2048 FP32 rows goes the first way.
constexpr uint64_t kKernelCopyBytes = 16ull << 20;

uint32_t channelOf(uint32_t stage, size_t peer, size_t num_peers) {
    return stage * static_cast<uint32_t>(num_peers) + static_cast<uint32_t>(peer);
}

// The device calls (launches) throw core::Error; the faces return Status.
template <typename F>
core::Status guarded(std::string_view what, F&& f) {
    try {
        f();
    } catch (const core::Error& e) {
        return core::internalError("cuda_ipc {}: {}", what, e.what());
    }
    return core::Status::ok();
}

std::string_view abortReasonText(uint32_t reason) {
    switch (reason) {
        case kAbortPeerLost:
            return "its control connection closed (the process ended or dropped the connection)";
        case kAbortCancelled:
            return "this rank was stopped";
        default:
            return "this rank's connector failed";
    }
}

}  // namespace

core::Result<std::unique_ptr<IpcEndpoint>> IpcEndpoint::create(const IpcEndpointSetup& setup, size_t num_peers) {
    if (num_peers == 0) return core::invalidArgument("cuda_ipc: a rank without peers");
    std::unique_ptr<IpcEndpoint> e(new IpcEndpoint());
    e->setup_ = setup;
    AFD_ASSIGN_OR_RETURN(e->out_layout_, slotLayout(setup.out_spec, setup.max_rows));
    AFD_ASSIGN_OR_RETURN(e->in_layout_, slotLayout(setup.in_spec, setup.max_rows));
    const InboxLayout layout{static_cast<uint32_t>(num_peers), kMaxStages, e->in_layout_.bytes};
    AFD_ASSIGN_OR_RETURN(e->inbox_, LocalInbox::create(layout, setup.gpu));
    const uint32_t channels = static_cast<uint32_t>(num_peers) * kMaxStages;
    AFD_ASSIGN_OR_RETURN(e->counters_, DeviceCounters::create(channels, channels, setup.gpu));
    AFD_ASSIGN_OR_RETURN(e->signals_, HostSignals::create(static_cast<uint32_t>(num_peers), setup.gpu));
    e->remotes_.resize(num_peers);
    e->sender_index_.assign(num_peers, 0);
    e->peer_senders_.assign(num_peers, 0);
    AFD_LOG_INFO("cuda_ipc: inbox of {} MiB on cuda:{} ({} peers x {} stages, {} rows per frame)",
                 layout.totalBytes() >> 20, setup.gpu, num_peers, kMaxStages, setup.max_rows);
    return e;
}

IpcEndpoint::~IpcEndpoint() { watchdog_.stop(); }

core::Status IpcEndpoint::openPeer(size_t i, std::string_view blob, uint32_t sender_index, uint32_t peer_senders,
                                   std::string_view peer_name) {
    AFD_CHECK(i < remotes_.size(), "peer {} out of range", i);
    const InboxLayout expected{peer_senders, kMaxStages, out_layout_.bytes};
    AFD_ASSIGN_OR_RETURN(remotes_[i], RemoteInbox::open(blob, expected, setup_.gpu, peer_name));
    sender_index_[i] = sender_index;
    peer_senders_[i] = peer_senders;
    return core::Status::ok();
}

core::Status IpcEndpoint::connect(std::vector<int> control_fds, std::vector<PeerInfo> peers) {
    AFD_CHECK(control_fds.size() == remotes_.size() && peers.size() == remotes_.size(),
              "cuda_ipc: {} control connections and {} peers for {} inboxes", control_fds.size(), peers.size(),
              remotes_.size());
    for (size_t i = 0; i < remotes_.size(); ++i) {
        AFD_CHECK(remotes_[i] != nullptr, "cuda_ipc: peer {}'s inbox was not opened", i);
    }
    peers_ = std::move(peers);
    HostSignals* signals = signals_.get();
    std::vector<PeerInfo> names = peers_;
    return watchdog_.start(std::move(control_fds), [signals, names](size_t i) {
        AFD_LOG_DEBUG("cuda_ipc: {} hung up", names[i].describe());
        signals->abort(static_cast<uint32_t>(i), kAbortPeerLost);
    });
}

core::Status IpcEndpoint::checkPayload(size_t peer, const FramePayload& payload) const {
    const FrameSpec& spec = setup_.out_spec;
    if (payload.rows > setup_.max_rows) {
        return core::invalidArgument("cuda_ipc: a frame of {} rows to {} exceeds afd.max_num_tokens {}", payload.rows,
                                     peers_[peer].describe(), setup_.max_rows);
    }
    if (payload.segments.size() != spec.segments.size()) {
        return core::invalidArgument("cuda_ipc: a frame with {} segments to {}, expected {}", payload.segments.size(),
                                     peers_[peer].describe(), spec.segments.size());
    }
    for (size_t s = 0; s < spec.segments.size(); ++s) {
        const core::Tensor& t = payload.segments[s];
        const bool shape_ok = t.dim() == 2 && t.size(0) == payload.rows && t.size(1) == spec.segments[s].cols;
        if (t.dtype() != spec.segments[s].dtype || !shape_ok || (payload.rows > 0 && t.device().isCpu())) {
            return core::invalidArgument("cuda_ipc: segment {} to {} is {} {} on {}, expected [{}, {}] {} on a GPU", s,
                                         peers_[peer].describe(), core::dtypeName(t.dtype()),
                                         core::shapeToString(t.shape()), t.device().toString(), payload.rows,
                                         spec.segments[s].cols, core::dtypeName(spec.segments[s].dtype));
        }
    }
    return core::Status::ok();
}

core::Status IpcEndpoint::postFrames(const FrameKey& key, std::span<const FramePayload> payloads,
                                     std::span<const bool> send, void* stream) {
    AFD_CHECK(payloads.size() == remotes_.size() && send.size() == remotes_.size(),
              "cuda_ipc: {} payloads for {} peers", payloads.size(), remotes_.size());
    AFD_CHECK(key.stage < kMaxStages, "stage {} out of range", key.stage);
    for (size_t i = 0; i < remotes_.size(); ++i) {
        if (send[i]) AFD_RETURN_IF_ERROR(checkPayload(i, payloads[i]));
    }
    return guarded("post", [&] {
        for (size_t i = 0; i < remotes_.size(); ++i) {
            if (!send[i]) continue;
            const FramePayload& payload = payloads[i];
            const RemoteInbox& remote = *remotes_[i];
            const uint32_t out = channelOf(key.stage, i, remotes_.size());
            // This rank is sender sender_index_[i] of peer_senders_[i] in the peer's inbox.
            const uint32_t channel_there = key.stage * peer_senders_[i] + sender_index_[i];
            IpcPutParams p;
            uint64_t bytes = 0;
            for (size_t s = 0; s < payload.segments.size(); ++s) bytes += out_layout_.row_bytes[s] * payload.rows;
            // The put kernel copies and publishes in one launch; above kKernelCopyBytes the copy engine copies and
            // the put kernel only publishes.
            const bool copy_in_kernel = bytes <= kKernelCopyBytes;
            p.num_segments = copy_in_kernel ? static_cast<int>(payload.segments.size()) : 0;
            for (size_t s = 0; s < payload.segments.size(); ++s) {
                void* dst = remote.slot(channel_there) + out_layout_.offsets[s];
                const uint64_t n = out_layout_.row_bytes[s] * payload.rows;
                if (copy_in_kernel) {
                    p.src[s] = payload.segments[s].rawData();
                    p.dst[s] = dst;
                    p.bytes[s] = n;
                } else if (n > 0) {
                    AFD_CUDA_CHECK(cudaMemcpyAsync(dst, payload.segments[s].rawData(), n, cudaMemcpyDeviceToDevice,
                                                   static_cast<cudaStream_t>(stream)));
                }
            }
            p.system_scope = !remote.sameGpu();
            p.control = remote.control(channel_there);
            p.sent = counters_->sent(out);
            p.ctas_done = counters_->ctasDone(out);
            p.failed = counters_->failed();
            p.abort = signals_->abortWord(static_cast<uint32_t>(i));
            p.layer = key.layer;
            p.stage = key.stage;
            p.rows = payload.rows;
            launchIpcPut(p, stream);
        }
    });
}

core::Status IpcEndpoint::postWaits(const FrameKey& key, const FrameSpec& expected, std::span<const bool> take,
                                    std::span<const uint32_t> rows, void* stream, std::vector<ReceivedFrame>& frames) {
    AFD_CHECK(take.size() == remotes_.size() && rows.size() == remotes_.size(), "cuda_ipc: {} rows for {} peers",
              rows.size(), remotes_.size());
    AFD_CHECK(key.stage < kMaxStages, "stage {} out of range", key.stage);
    if (expected.segments != setup_.in_spec.segments) {
        return core::invalidArgument("cuda_ipc: a wait for frames of another spec than the connector's");
    }
    frames.assign(remotes_.size(), ReceivedFrame{});
    for (size_t i = 0; i < remotes_.size(); ++i) {
        ReceivedFrame& f = frames[i];
        f.active = take[i];
        if (!take[i]) continue;
        if (rows[i] > setup_.max_rows) {
            return core::invalidArgument("cuda_ipc: waiting for {} rows from {}, more than afd.max_num_tokens {}",
                                         rows[i], peers_[i].describe(), setup_.max_rows);
        }
        f.rows = rows[i];
        uint8_t* slot = inbox_->slot(channelOf(key.stage, i, remotes_.size()));
        for (size_t s = 0; s < expected.segments.size(); ++s) {
            f.segments.push_back(core::Tensor::view(slot + in_layout_.offsets[s], expected.segments[s].dtype,
                                                    {static_cast<int64_t>(rows[i]), expected.segments[s].cols},
                                                    core::Device::cuda(setup_.gpu)));
        }
    }
    return guarded("wait", [&] {
        IpcWaitParams p;
        auto flush = [&] {
            if (p.num_peers == 0) return;
            launchIpcWait(p, stream);
            p.num_peers = 0;
        };
        p.layer = key.layer;
        p.stage = key.stage;
        p.timeout_ns = static_cast<uint64_t>(setup_.step_timeout.count()) * 1000000ull;
        p.failed = counters_->failed();
        p.error = signals_->error();
        for (size_t i = 0; i < remotes_.size(); ++i) {
            if (!take[i]) continue;
            const uint32_t channel = channelOf(key.stage, i, remotes_.size());
            const int k = p.num_peers++;
            p.control[k] = inbox_->control(channel);
            p.received[k] = counters_->received(channel);
            p.abort[k] = signals_->abortWord(static_cast<uint32_t>(i));
            p.rows[k] = rows[i];
            p.peer_index[k] = static_cast<uint32_t>(i);
            p.system_scope[k] = !remotes_[i]->sameGpu();
            if (p.num_peers == kMaxWaitPeers) flush();
        }
        flush();
    });
}

core::Status IpcEndpoint::deviceStatus() const {
    const IpcDeviceError e = signals_->readError();
    if (e.code == kIpcOk) return core::Status::ok();
    const std::string peer = e.peer < peers_.size() ? peers_[e.peer].describe() : fmt::format("peer {}", e.peer);
    switch (e.code) {
        case kIpcTimeout:
            return core::timeoutError("cuda_ipc: no frame for layer {} stage {} from {} within the step timeout ({} s)",
                                      e.layer, e.stage, peer,
                                      std::chrono::duration<double>(setup_.step_timeout).count());
        case kIpcAborted:
            if (e.abort_reason == kAbortCancelled) {
                return core::makeStatus(core::StatusCode::kCancelled,
                                        "cuda_ipc: the wait for {}'s frame of layer {} stage {} was cancelled", peer,
                                        e.layer, e.stage);
            }
            return core::peerLost("{}: lost while this rank waited for its frame of layer {} stage {}: {}", peer,
                                  e.layer, e.stage, abortReasonText(e.abort_reason));
        default:
            return core::corrupt(
                "{}: frame #{} of layer {} stage {} with {} rows, expected frame #{} of layer {} stage {} with {} rows",
                peer, e.got_seq, e.got_layer, e.got_stage, e.got_rows, e.expected_seq, e.layer, e.stage,
                e.expected_rows);
    }
}

}  // namespace afd::transport::cuda_ipc
