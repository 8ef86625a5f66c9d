#include "transport/cuda_ipc/cuda_ipc_connector.h"

namespace afd::transport::cuda_ipc {
namespace {

core::Status hostFramesRefused(std::string_view call) {
    return core::unsupported("{}: the cuda_ipc connector moves device tensors (post* calls), not host frames", call);
}

}  // namespace

// ---- attention ----

CudaIpcAttentionConnector::CudaIpcAttentionConnector(std::unique_ptr<AttentionConnector> control,
                                                     std::unique_ptr<IpcEndpoint> endpoint)
    : control_(std::move(control)), endpoint_(std::move(endpoint)), num_peers_(control_->peers().size()) {
    all_ = std::make_unique<bool[]>(num_peers_);
    for (size_t i = 0; i < num_peers_; ++i) all_[i] = true;
}

CudaIpcAttentionConnector::~CudaIpcAttentionConnector() { close(); }

core::Status CudaIpcAttentionConnector::sendStep(const StepHeader& header) { return control_->sendStep(header); }

core::Status CudaIpcAttentionConnector::dispatch(const FrameKey&, std::span<const FramePayload>) {
    return hostFramesRefused("dispatch");
}

core::Result<std::span<const ReceivedFrame>> CudaIpcAttentionConnector::combine(const FrameKey&, const FrameSpec&) {
    return hostFramesRefused("combine");
}

core::Status CudaIpcAttentionConnector::postDispatch(const FrameKey& key, std::span<const FramePayload> payloads,
                                                     void* stream) {
    return endpoint_->postFrames(key, payloads, {all_.get(), num_peers_}, stream);
}

core::Result<std::span<const ReceivedFrame>> CudaIpcAttentionConnector::postCombine(const FrameKey& key,
                                                                                    const FrameSpec& expected,
                                                                                    std::span<const uint32_t> rows,
                                                                                    void* stream) {
    std::vector<ReceivedFrame>& frames = results_[key.stage % kMaxStages];
    AFD_RETURN_IF_ERROR(endpoint_->postWaits(key, expected, {all_.get(), num_peers_}, rows, stream, frames));
    return std::span<const ReceivedFrame>(frames);
}

core::Status CudaIpcAttentionConnector::deviceStatus() { return endpoint_->deviceStatus(); }

void CudaIpcAttentionConnector::close() {
    if (closed_) return;
    closed_ = true;
    endpoint_->stopWatchdog();
    control_->close();
}

// ---- ffn ----

CudaIpcFfnConnector::CudaIpcFfnConnector(std::unique_ptr<FfnConnector> control, std::unique_ptr<IpcEndpoint> endpoint)
    : control_(std::move(control)), endpoint_(std::move(endpoint)) {}

CudaIpcFfnConnector::~CudaIpcFfnConnector() { close(); }

core::Result<StepInfo> CudaIpcFfnConnector::receiveStep() { return control_->receiveStep(); }

core::Result<std::span<const ReceivedFrame>> CudaIpcFfnConnector::receive(const FrameKey&, const FrameSpec&) {
    return hostFramesRefused("receive");
}

core::Status CudaIpcFfnConnector::send(const FrameKey&, std::span<const FramePayload>) {
    return hostFramesRefused("send");
}

core::Result<std::span<const ReceivedFrame>> CudaIpcFfnConnector::postReceive(const FrameKey& key,
                                                                              const FrameSpec& expected,
                                                                              std::span<const bool> active,
                                                                              std::span<const uint32_t> rows,
                                                                              void* stream) {
    std::vector<ReceivedFrame>& frames = results_[key.stage % kMaxStages];
    AFD_RETURN_IF_ERROR(endpoint_->postWaits(key, expected, active, rows, stream, frames));
    return std::span<const ReceivedFrame>(frames);
}

core::Status CudaIpcFfnConnector::postSend(const FrameKey& key, std::span<const FramePayload> payloads,
                                           std::span<const bool> active, void* stream) {
    return endpoint_->postFrames(key, payloads, active, stream);
}

core::Status CudaIpcFfnConnector::deviceStatus() { return endpoint_->deviceStatus(); }

void CudaIpcFfnConnector::cancel() {
    endpoint_->abortAll(kAbortCancelled);
    control_->cancel();
}

void CudaIpcFfnConnector::close() {
    if (closed_) return;
    closed_ = true;
    endpoint_->stopWatchdog();
    control_->close();
}

}  // namespace afd::transport::cuda_ipc
