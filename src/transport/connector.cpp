#include "transport/connector.h"

#include <fmt/format.h>

namespace afd::transport {

std::string PeerInfo::describe() const {
    if (address.empty()) return fmt::format("{} rank {}", roleName(role), rank);
    return fmt::format("{} rank {} ({})", roleName(role), rank, address);
}

namespace {

core::Status hostOnly(std::string_view call) {
    return core::unsupported("{}: this connector moves host memory (its device data plane is not built)", call);
}

}  // namespace

core::Status AttentionConnector::postDispatch(const FrameKey&, std::span<const FramePayload>, void*) {
    return hostOnly("postDispatch");
}

core::Result<std::span<const ReceivedFrame>> AttentionConnector::postCombine(const FrameKey&, const FrameSpec&,
                                                                             std::span<const uint32_t>, void*) {
    return hostOnly("postCombine");
}

core::Status AttentionConnector::deviceStatus() { return core::Status::ok(); }

core::Result<std::span<const ReceivedFrame>> FfnConnector::postReceive(const FrameKey&, const FrameSpec&,
                                                                       std::span<const bool>, std::span<const uint32_t>,
                                                                       void*) {
    return hostOnly("postReceive");
}

core::Status FfnConnector::postSend(const FrameKey&, std::span<const FramePayload>, std::span<const bool>, void*) {
    return hostOnly("postSend");
}

core::Status FfnConnector::deviceStatus() { return core::Status::ok(); }

}  // namespace afd::transport
