#include "transport/nccl/nccl_connector.h"

namespace afd::transport::nccl {
namespace {

core::Status hostFramesRefused(std::string_view call) {
    return core::unsupported("{}: the nccl connector moves device tensors (post* calls), not host frames", call);
}

// Records a failed call's error with the monitor (the connector is unusable after it) and returns the reason that
// stands: the first one recorded.
core::Status failWith(NcclMonitor& monitor, core::Status status) {
    if (status.isOk()) return status;
    monitor.fail(std::move(status));
    return monitor.failure();
}

// After the caller has synchronised: the first failure, else what the device checks or the communicators found.
core::Status settle(NcclEndpoint& endpoint, NcclMonitor& monitor) {
    if (monitor.failed()) return monitor.failure();
    AFD_RETURN_IF_ERROR(failWith(monitor, endpoint.headerStatus()));
    AFD_RETURN_IF_ERROR(failWith(monitor, endpoint.comms().asyncError()));
    monitor.endStep();
    return core::Status::ok();
}

}  // namespace

// ---- attention ----

NcclAttentionConnector::NcclAttentionConnector(std::unique_ptr<AttentionConnector> control,
                                               std::unique_ptr<NcclEndpoint> endpoint,
                                               std::unique_ptr<NcclMonitor> monitor)
    : control_(std::move(control)),
      endpoint_(std::move(endpoint)),
      monitor_(std::move(monitor)),
      num_peers_(control_->peers().size()) {
    all_ = std::make_unique<bool[]>(num_peers_);
    for (size_t i = 0; i < num_peers_; ++i) all_[i] = true;
}

NcclAttentionConnector::~NcclAttentionConnector() { close(); }

core::Status NcclAttentionConnector::sendStep(const StepHeader& header) {
    if (monitor_->failed()) return monitor_->failure();
    const bool last = (header.flags & kStepShutdown) != 0;
    if (last) monitor_->leaving();  // the FFN ranks may close as soon as they read it
    AFD_RETURN_IF_ERROR(failWith(*monitor_, control_->sendStep(header)));
    if (!last) monitor_->beginStep(header.step, {all_.get(), num_peers_});
    return monitor_->failure();
}

core::Status NcclAttentionConnector::dispatch(const FrameKey&, std::span<const FramePayload>) {
    return hostFramesRefused("dispatch");
}

core::Result<std::span<const ReceivedFrame>> NcclAttentionConnector::combine(const FrameKey&, const FrameSpec&) {
    return hostFramesRefused("combine");
}

core::Status NcclAttentionConnector::postDispatch(const FrameKey& key, std::span<const FramePayload> payloads,
                                                  void* stream) {
    if (monitor_->failed()) return monitor_->failure();
    return failWith(*monitor_, endpoint_->postFrames(key, payloads, {all_.get(), num_peers_}, stream));
}

core::Result<std::span<const ReceivedFrame>> NcclAttentionConnector::postCombine(const FrameKey& key,
                                                                                 const FrameSpec& expected,
                                                                                 std::span<const uint32_t> rows,
                                                                                 void* stream) {
    if (monitor_->failed()) return monitor_->failure();
    std::vector<ReceivedFrame>& frames = results_[key.stage % kMaxStages];
    AFD_RETURN_IF_ERROR(
        failWith(*monitor_, endpoint_->postWaits(key, expected, {all_.get(), num_peers_}, rows, stream, frames)));
    return std::span<const ReceivedFrame>(frames);
}

core::Status NcclAttentionConnector::deviceStatus() { return settle(*endpoint_, *monitor_); }

void NcclAttentionConnector::close() {
    if (closed_) return;
    closed_ = true;
    monitor_->stop();
    control_->close();
    endpoint_->comms().abort();
}

// ---- ffn ----

NcclFfnConnector::NcclFfnConnector(std::unique_ptr<FfnConnector> control, std::unique_ptr<NcclEndpoint> endpoint,
                                   std::unique_ptr<NcclMonitor> monitor)
    : control_(std::move(control)), endpoint_(std::move(endpoint)), monitor_(std::move(monitor)) {
    active_ = std::make_unique<bool[]>(control_->peers().size());
}

NcclFfnConnector::~NcclFfnConnector() { close(); }

core::Result<StepInfo> NcclFfnConnector::receiveStep() {
    if (monitor_->failed()) return monitor_->failure();
    core::Result<StepInfo> info = control_->receiveStep();
    if (!info.isOk()) return failWith(*monitor_, info.status());
    const size_t P = control_->peers().size();
    if (!info->all_left) {
        for (size_t i = 0; i < P; ++i) {
            active_[i] = info->peers[i].active;
            if (!active_[i]) monitor_->markLeft(i);
        }
        monitor_->beginStep(info->step, {active_.get(), P});
    } else {
        for (size_t i = 0; i < P; ++i) monitor_->markLeft(i);
    }
    if (monitor_->failed()) return monitor_->failure();
    return info;
}

core::Result<std::span<const ReceivedFrame>> NcclFfnConnector::receive(const FrameKey&, const FrameSpec&) {
    return hostFramesRefused("receive");
}

core::Status NcclFfnConnector::send(const FrameKey&, std::span<const FramePayload>) {
    return hostFramesRefused("send");
}

core::Result<std::span<const ReceivedFrame>> NcclFfnConnector::postReceive(const FrameKey& key,
                                                                           const FrameSpec& expected,
                                                                           std::span<const bool> active,
                                                                           std::span<const uint32_t> rows,
                                                                           void* stream) {
    if (monitor_->failed()) return monitor_->failure();
    std::vector<ReceivedFrame>& frames = results_[key.stage % kMaxStages];
    AFD_RETURN_IF_ERROR(failWith(*monitor_, endpoint_->postWaits(key, expected, active, rows, stream, frames)));
    return std::span<const ReceivedFrame>(frames);
}

core::Status NcclFfnConnector::postSend(const FrameKey& key, std::span<const FramePayload> payloads,
                                        std::span<const bool> active, void* stream) {
    if (monitor_->failed()) return monitor_->failure();
    return failWith(*monitor_, endpoint_->postFrames(key, payloads, active, stream));
}

core::Status NcclFfnConnector::deviceStatus() { return settle(*endpoint_, *monitor_); }

void NcclFfnConnector::cancel() {
    monitor_->fail(core::makeStatus(core::StatusCode::kCancelled, "nccl: this ffn rank was stopped"));
    control_->cancel();
}

void NcclFfnConnector::close() {
    if (closed_) return;
    closed_ = true;
    monitor_->stop();
    control_->close();
    endpoint_->comms().abort();
}

}  // namespace afd::transport::nccl
