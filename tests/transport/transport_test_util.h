// Helpers shared by the transport tests: ports, option sets, deterministic payloads, threaded deployments and a
// raw peer that speaks the wire format by hand.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "core/unique_fd.h"
#include "transport/connector.h"
#include "transport/frame.h"
#include "transport/rendezvous.h"
#include "transport/tcp/tcp_connector.h"

namespace afd::transport::testing {

using namespace std::chrono_literals;

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released).
int pickFreePort();

// Options for one rank of a loopback deployment; peers are set by the caller.
tcp::TcpConnectorOptions baseOptions(Role role, int rank, int num_attention, int num_ffn, int store_port);

// The frame limits of `o`, as its handshake announces them.
FrameLimits limitsOf(const tcp::TcpConnectorOptions& o);

// Fills `bytes` deterministically from `seed` (independent of the code under test).
void fillBytes(void* data, size_t bytes, uint64_t seed);
// A seed from the identity of a piece of data.
uint64_t seedOf(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f);
// A CPU tensor [rows, cols] of `dtype` filled from `seed`.
core::Tensor makeTensor(core::DType dtype, int64_t rows, int64_t cols, uint64_t seed);
// "" when `t` is [rows, cols] of `dtype` and holds exactly the bytes makeTensor(dtype, rows, cols, seed) holds;
// else a description of the first difference.
std::string compareTensor(const core::Tensor& t, core::DType dtype, int64_t rows, int64_t cols, uint64_t seed);

// Connectors of a whole deployment, each created on its own thread (they block until everyone has arrived).
struct Deployment {
    std::vector<std::unique_ptr<AttentionConnector>> attention;
    std::vector<std::unique_ptr<FfnConnector>> ffn;
};
// `options[i]` for every rank, attention or FFN. Returns the first failure.
core::Result<Deployment> connectAll(const std::vector<tcp::TcpConnectorOptions>& options);

// The peers of the m2n topology (everyone talks to everyone) and of the p2p block mapping (attention a talks to
// FFN a·F/A; FFN k to attention ranks ceil(k·A/F) .. ceil((k+1)·A/F) - 1).
std::vector<int> allRanks(int count);
std::vector<int> p2pPeers(Role role, int rank, int num_attention, int num_ffn);

// Runs `fn` on a new thread; the future holds its result.
template <typename Fn>
auto runAsync(Fn fn) {
    return std::async(std::launch::async, std::move(fn));
}

// An attention rank that registers in the rendezvous and completes the hello to FFN peer `ffn_rank` by hand
// (announcing the limits of `attention_options`, which must be the FFN's), then writes whatever bytes a test wants on
// the data connection.
struct RawAttentionPeer {
    std::unique_ptr<Rendezvous> rendezvous;
    core::UniqueFd fd;
    core::Status sendBytes(const void* data, size_t size) const;
};
core::Result<RawAttentionPeer> connectRawAttention(const tcp::TcpConnectorOptions& attention_options, int ffn_rank);

// FFN rank 0 of a one-FFN deployment played by hand: hosts the store, listens with socket buffers of
// `socket_buffer_bytes` (0: the kernel's defaults), completes the hello of every attention rank, and then
// reads and writes frames with plain blocking calls.
struct RawFfnPeer {
    std::unique_ptr<Rendezvous> rendezvous;
    std::vector<core::UniqueFd> fds;  // by attention rank
};
core::Result<RawFfnPeer> acceptRawFfn(const tcp::TcpConnectorOptions& ffn_options, int socket_buffer_bytes);

// A whole frame read by a raw peer.
struct RawFrame {
    FrameHeader header;
    std::vector<SegmentSpec> segments;
    std::vector<std::vector<uint8_t>> payloads;  // per segment
};
core::Result<RawFrame> recvRawFrame(int fd, std::chrono::milliseconds timeout);
core::Status sendRaw(int fd, const std::vector<uint8_t>& bytes, std::chrono::milliseconds timeout);

// Whole encoded frames for raw peers.
std::vector<uint8_t> encodeStepFrame(const StepHeader& step);
std::vector<uint8_t> encodeDataFrame(FrameKind kind, const FrameKey& key, uint32_t rows,
                                     const std::vector<core::Tensor>& segments);

}  // namespace afd::transport::testing
