// The two faces of the cuda_ipc connector (cuda_ipc_backend.h): the control plane delegated to a tcp connector, the
// device data plane to an IpcEndpoint. The host data plane (dispatch/combine, receive/send) is refused: a device
// connector carries device tensors only.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "transport/connector.h"
#include "transport/cuda_ipc/ipc_endpoint.h"

namespace afd::transport::cuda_ipc {

class CudaIpcAttentionConnector final : public AttentionConnector {
public:
    CudaIpcAttentionConnector(std::unique_ptr<AttentionConnector> control, std::unique_ptr<IpcEndpoint> endpoint);
    ~CudaIpcAttentionConnector() override;

    std::span<const PeerInfo> peers() const override { return control_->peers(); }
    core::Status sendStep(const StepHeader& header) override;
    core::Status dispatch(const FrameKey& key, std::span<const FramePayload> payloads) override;
    core::Result<std::span<const ReceivedFrame>> combine(const FrameKey& key, const FrameSpec& expected) override;
    core::Status postDispatch(const FrameKey& key, std::span<const FramePayload> payloads, void* stream) override;
    core::Result<std::span<const ReceivedFrame>> postCombine(const FrameKey& key, const FrameSpec& expected,
                                                             std::span<const uint32_t> rows, void* stream) override;
    core::Status deviceStatus() override;
    void close() override;

private:
    std::unique_ptr<AttentionConnector> control_;
    std::unique_ptr<IpcEndpoint> endpoint_;
    std::unique_ptr<bool[]> all_;  // [peers] all true: an attention rank posts to and waits for every peer
    size_t num_peers_ = 0;
    std::array<std::vector<ReceivedFrame>, kMaxStages> results_;
    bool closed_ = false;
};

class CudaIpcFfnConnector final : public FfnConnector {
public:
    CudaIpcFfnConnector(std::unique_ptr<FfnConnector> control, std::unique_ptr<IpcEndpoint> endpoint);
    ~CudaIpcFfnConnector() override;

    std::span<const PeerInfo> peers() const override { return control_->peers(); }
    core::Result<StepInfo> receiveStep() override;
    core::Result<std::span<const ReceivedFrame>> receive(const FrameKey& key, const FrameSpec& expected) override;
    core::Status send(const FrameKey& key, std::span<const FramePayload> payloads) override;
    core::Result<std::span<const ReceivedFrame>> postReceive(const FrameKey& key, const FrameSpec& expected,
                                                             std::span<const bool> active,
                                                             std::span<const uint32_t> rows, void* stream) override;
    core::Status postSend(const FrameKey& key, std::span<const FramePayload> payloads, std::span<const bool> active,
                          void* stream) override;
    core::Status deviceStatus() override;
    void cancel() override;
    void close() override;

private:
    std::unique_ptr<FfnConnector> control_;
    std::unique_ptr<IpcEndpoint> endpoint_;
    std::array<std::vector<ReceivedFrame>, kMaxStages> results_;
    bool closed_ = false;
};

}  // namespace afd::transport::cuda_ipc
