#include "transport/transport_test_util.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "core/check.h"
#include "transport/frame.h"
#include "transport/socket.h"
#include "transport/tcp/tcp_handshake.h"

namespace afd::transport::testing {

int pickFreePort() {
    core::Result<int> port = pickServerPort("127.0.0.1");
    AFD_CHECK(port.isOk(), "cannot pick a free port: {}", port.status().message());
    return *port;
}

tcp::TcpConnectorOptions baseOptions(Role role, int rank, int num_attention, int num_ffn, int store_port) {
    tcp::TcpConnectorOptions o;
    o.role = role;
    o.rank = rank;
    o.num_attention_ranks = num_attention;
    o.num_ffn_ranks = num_ffn;
    o.store_host = "127.0.0.1";
    o.store_port = store_port;
    o.fingerprint = "qwen3-moe-test/2a2f";
    o.rendezvous_timeout = 20s;
    o.step_timeout = 20s;
    o.max_rows = 64;
    o.max_frame_bytes = 1 << 20;
    return o;
}

FrameLimits limitsOf(const tcp::TcpConnectorOptions& o) { return {o.max_rows, o.max_frame_bytes}; }

void fillBytes(void* data, size_t bytes, uint64_t seed) {
    std::mt19937_64 rng(seed);
    auto* p = static_cast<uint8_t*>(data);
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        const uint64_t v = rng();
        std::memcpy(p + i, &v, 8);
    }
    const uint64_t v = rng();
    std::memcpy(p + i, &v, bytes - i);
}

uint64_t seedOf(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (uint64_t x : {a, b, c, d, e, f}) h = (h ^ x) * 0x100000001b3ull + (h >> 29);
    return h;
}

core::Tensor makeTensor(core::DType dtype, int64_t rows, int64_t cols, uint64_t seed) {
    core::Tensor t = core::Tensor::empty(dtype, {rows, cols});
    if (t.nbytes() > 0) fillBytes(t.rawData(), t.nbytes(), seed);
    return t;
}

std::string compareTensor(const core::Tensor& t, core::DType dtype, int64_t rows, int64_t cols, uint64_t seed) {
    if (t.dtype() != dtype || t.shape() != core::Shape{rows, cols}) {
        return fmt::format("got {} {}, expected {} [{}, {}]", core::dtypeName(t.dtype()),
                           core::shapeToString(t.shape()), core::dtypeName(dtype), rows, cols);
    }
    const core::Tensor want = makeTensor(dtype, rows, cols, seed);
    if (want.nbytes() == 0) return "";
    const auto* a = static_cast<const uint8_t*>(t.rawData());
    const auto* b = static_cast<const uint8_t*>(want.rawData());
    for (size_t i = 0; i < want.nbytes(); ++i) {
        if (a[i] != b[i]) return fmt::format("byte {} of {} differs", i, want.nbytes());
    }
    return "";
}

core::Result<Deployment> connectAll(const std::vector<tcp::TcpConnectorOptions>& options) {
    std::vector<std::future<core::Result<std::unique_ptr<AttentionConnector>>>> attention;
    std::vector<std::future<core::Result<std::unique_ptr<FfnConnector>>>> ffn;
    for (const auto& o : options) {
        if (o.role == Role::kAttention) {
            attention.push_back(runAsync([o] { return tcp::createAttentionConnector(o); }));
        } else {
            ffn.push_back(runAsync([o] { return tcp::createFfnConnector(o); }));
        }
    }
    Deployment d;
    core::Status first;
    for (auto& f : attention) {
        auto r = f.get();
        if (r.isOk()) {
            d.attention.push_back(std::move(*r));
        } else if (first.isOk()) {
            first = r.status();
        }
    }
    for (auto& f : ffn) {
        auto r = f.get();
        if (r.isOk()) {
            d.ffn.push_back(std::move(*r));
        } else if (first.isOk()) {
            first = r.status();
        }
    }
    if (!first.isOk()) return first;
    return d;
}

std::vector<int> allRanks(int count) {
    std::vector<int> ranks;
    for (int r = 0; r < count; ++r) ranks.push_back(r);
    return ranks;
}

std::vector<int> p2pPeers(Role role, int rank, int num_attention, int num_ffn) {
    if (role == Role::kAttention) return {rank * num_ffn / num_attention};
    std::vector<int> peers;
    const int begin = (rank * num_attention + num_ffn - 1) / num_ffn;
    const int end = ((rank + 1) * num_attention + num_ffn - 1) / num_ffn;
    for (int a = begin; a < end; ++a) peers.push_back(a);
    return peers;
}

core::Status RawAttentionPeer::sendBytes(const void* data, size_t size) const {
    return sendAll(fd.get(), data, size, deadlineAfter(10s), nullptr, "raw attention peer");
}

core::Result<RawAttentionPeer> connectRawAttention(const tcp::TcpConnectorOptions& o, int ffn_rank) {
    RendezvousOptions r;
    r.store = HostPort{o.store_host, o.store_port};
    r.num_attention_ranks = o.num_attention_ranks;
    r.num_ffn_ranks = o.num_ffn_ranks;
    r.timeout = o.rendezvous_timeout;
    RawAttentionPeer peer;
    AFD_ASSIGN_OR_RETURN(peer.rendezvous,
                         Rendezvous::join(r, RankRecord{Role::kAttention, o.rank, kProtocolVersion, o.fingerprint}));
    AFD_ASSIGN_OR_RETURN(const std::string published,
                         peer.rendezvous->fetch(Role::kFfn, ffn_rank, tcp::kEndpointBlob, o.rendezvous_timeout));
    AFD_ASSIGN_OR_RETURN(HostPort endpoint, parseHostPort(published));
    AFD_ASSIGN_OR_RETURN(peer.fd, tcp::connectAndHello(endpoint, PeerInfo{Role::kFfn, ffn_rank, published},
                                                       {Role::kAttention, o.rank, o.fingerprint, limitsOf(o)},
                                                       deadlineAfter(o.rendezvous_timeout), nullptr));
    return peer;
}

core::Result<RawFfnPeer> acceptRawFfn(const tcp::TcpConnectorOptions& o, int socket_buffer_bytes) {
    core::UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!listener.valid()) return core::ioError("socket(): {}", errnoText(errno));
    if (socket_buffer_bytes > 0) {
        // Set on the listener so that accepted sockets start (and stay) this small.
        const socklen_t size = sizeof(socket_buffer_bytes);
        if (::setsockopt(listener.get(), SOL_SOCKET, SO_RCVBUF, &socket_buffer_bytes, size) != 0 ||
            ::setsockopt(listener.get(), SOL_SOCKET, SO_SNDBUF, &socket_buffer_bytes, size) != 0) {
            return core::ioError("raw ffn listener: setsockopt(SO_RCVBUF/SO_SNDBUF): {}", errnoText(errno));
        }
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listener.get(), 16) != 0 ||
        ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        return core::ioError("raw ffn listener: {}", errnoText(errno));
    }
    const std::string endpoint = fmt::format("127.0.0.1:{}", ntohs(addr.sin_port));
    RendezvousOptions r;
    r.store = HostPort{o.store_host, o.store_port};
    r.host_store = true;
    r.num_attention_ranks = o.num_attention_ranks;
    r.num_ffn_ranks = 1;
    r.timeout = o.rendezvous_timeout;
    RawFfnPeer peer;
    AFD_ASSIGN_OR_RETURN(peer.rendezvous,
                         Rendezvous::join(r, RankRecord{Role::kFfn, 0, kProtocolVersion, o.fingerprint},
                                          {{tcp::kEndpointBlob, endpoint}}));
    const std::vector<int> ranks = allRanks(o.num_attention_ranks);
    AFD_ASSIGN_OR_RETURN(peer.fds,
                         tcp::acceptPeers(listener.get(), endpoint, ranks, {Role::kFfn, 0, o.fingerprint, limitsOf(o)},
                                          deadlineAfter(o.rendezvous_timeout), nullptr));
    return peer;
}

core::Result<RawFrame> recvRawFrame(int fd, std::chrono::milliseconds timeout) {
    const Deadline deadline = deadlineAfter(timeout);
    HeaderBytes head{};
    AFD_RETURN_IF_ERROR(recvAll(fd, head.data(), head.size(), deadline, nullptr, "raw peer"));
    RawFrame frame;
    AFD_ASSIGN_OR_RETURN(frame.header, decodeHeader(head, {UINT32_MAX, size_t{1} << 32}, "raw peer"));
    std::vector<uint8_t> descriptors(frame.header.segment_count * kSegmentDescriptorBytes);
    AFD_RETURN_IF_ERROR(recvAll(fd, descriptors.data(), descriptors.size(), deadline, nullptr, "raw peer"));
    AFD_ASSIGN_OR_RETURN(SegmentLayout layout, decodeSegments(frame.header, descriptors, "raw peer"));
    for (uint32_t i = 0; i < layout.count; ++i) {
        frame.segments.push_back(layout.segments[i]);
        frame.payloads.emplace_back(layout.bytes[i]);
        AFD_RETURN_IF_ERROR(recvAll(fd, frame.payloads.back().data(), layout.bytes[i], deadline, nullptr, "raw peer"));
    }
    return frame;
}

core::Status sendRaw(int fd, const std::vector<uint8_t>& bytes, std::chrono::milliseconds timeout) {
    return sendAll(fd, bytes.data(), bytes.size(), deadlineAfter(timeout), nullptr, "raw peer");
}

std::vector<uint8_t> encodeStepFrame(const StepHeader& step) {
    const HeaderBytes head = encodeHeader(makeStepHeader(step));
    return std::vector<uint8_t>(head.begin(), head.end());
}

std::vector<uint8_t> encodeDataFrame(FrameKind kind, const FrameKey& key, uint32_t rows,
                                     const std::vector<core::Tensor>& segments) {
    std::vector<SegmentSpec> specs;
    for (const auto& t : segments) specs.push_back({t.dtype(), static_cast<uint32_t>(t.size(1))});
    const HeaderBytes head = encodeHeader(makeDataHeader(kind, key, rows, specs));
    std::vector<uint8_t> out(head.begin(), head.end());
    for (const auto& s : specs) {
        uint8_t d[kSegmentDescriptorBytes];
        encodeDescriptor(s, d);
        out.insert(out.end(), d, d + kSegmentDescriptorBytes);
    }
    for (const auto& t : segments) {
        const auto* p = static_cast<const uint8_t*>(t.rawData());
        out.insert(out.end(), p, p + t.nbytes());
    }
    return out;
}

}  // namespace afd::transport::testing
