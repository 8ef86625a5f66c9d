// One A2F + F2A round trip through the tcp connectors over loopback (hidden 2048 f32, as in Qwen3-30B-A3B's
// residual stream on the CPU path), next to a raw-socket round trip of the same bytes measured in the same
// iterations. The primary time is the connector's; counters give the raw time and the ratio (connector
// overhead). A table of all token counts is printed at the end.
//
//   connector_roundtrip_bench [--benchmark_min_time=…]
#include <benchmark/benchmark.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/logging.h"
#include "core/tensor.h"
#include "transport/connector.h"
#include "transport/socket.h"
#include "transport/tcp/tcp_connector.h"

namespace {

using namespace afd;
using namespace afd::transport;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kHidden = 2048;
constexpr uint32_t kMaxTokens = 1024;
constexpr size_t kRowBytes = kHidden * sizeof(float);
const FrameSpec kSpec{{{core::DType::kF32, kHidden}}};

// The FFN side of the connector pair: echoes every A2F frame back as the F2A frame of the same key.
void ffnEcho(FfnConnector& ffn) {
    if (!ffn.receiveStep().isOk()) return;
    for (uint32_t layer = 0;; ++layer) {
        auto frames = ffn.receive({0, layer, 0}, kSpec);
        if (!frames.isOk()) return;  // cancelled at teardown
        const ReceivedFrame& in = (*frames)[0];
        FramePayload out{in.rows, {in.segments[0]}};
        if (!ffn.send({0, layer, 0}, std::span(&out, 1)).isOk()) return;
    }
}

// Writes a u64 length and `size` bytes with one gathered write per wakeup, as the connector writes a frame.
bool sendMessage(int fd, const void* data, uint64_t size) {
    iovec iov[2] = {{&size, sizeof(size)}, {const_cast<void*>(data), size}};
    size_t index = 0;
    while (index < 2) {
        msghdr msg{};
        msg.msg_iov = &iov[index];
        msg.msg_iovlen = 2 - index;
        const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR) return false;
            if (!waitFd(fd, POLLOUT, kNoDeadline, nullptr, "raw peer").isOk()) return false;
            continue;
        }
        size_t left = static_cast<size_t>(n);
        while (index < 2 && left >= iov[index].iov_len) left -= iov[index++].iov_len;
        if (index < 2) {
            iov[index].iov_base = static_cast<uint8_t*>(iov[index].iov_base) + left;
            iov[index].iov_len -= left;
        }
    }
    return true;
}

// The server side of the raw pair: reads a u64 length and that many bytes, writes them back.
void rawEcho(int fd) {
    std::vector<uint8_t> buffer(kMaxTokens * kRowBytes);
    while (true) {
        uint64_t size = 0;
        if (!recvAll(fd, &size, sizeof(size), kNoDeadline, nullptr, "raw client").isOk()) return;
        if (size > buffer.size()) return;
        if (!recvAll(fd, buffer.data(), size, kNoDeadline, nullptr, "raw client").isOk()) return;
        if (!sendMessage(fd, buffer.data(), size)) return;
    }
}

class Fixture {
public:
    Fixture() {
        core::Result<Listener> probe = listenTcp("127.0.0.1", 0);
        AFD_CHECK(probe.isOk(), "{}", probe.status().toString());
        const int store_port = probe->port;
        probe->fd.reset();
        tcp::TcpConnectorOptions o;
        o.num_attention_ranks = 1;
        o.num_ffn_ranks = 1;
        o.peers = {0};
        o.store_host = "127.0.0.1";
        o.store_port = store_port;
        o.fingerprint = "connector-roundtrip-bench";
        o.rendezvous_timeout = 30s;
        o.step_timeout = 30s;
        o.max_rows = kMaxTokens;
        o.max_frame_bytes = kMaxTokens * kRowBytes;
        tcp::TcpConnectorOptions ffn_options = o;
        ffn_options.role = Role::kFfn;
        auto ffn_future =
            std::async(std::launch::async, [ffn_options] { return tcp::createFfnConnector(ffn_options); });
        o.role = Role::kAttention;
        auto attention = tcp::createAttentionConnector(o);
        AFD_CHECK(attention.isOk(), "{}", attention.status().toString());
        attention_ = std::move(*attention);
        auto ffn = ffn_future.get();
        AFD_CHECK(ffn.isOk(), "{}", ffn.status().toString());
        ffn_ = std::move(*ffn);
        ffn_thread_ = std::jthread([this] { ffnEcho(*ffn_); });
        AFD_CHECK_OK(attention_->sendStep(StepHeader{}));

        core::Result<Listener> listener = listenTcp("127.0.0.1", 0);
        AFD_CHECK(listener.isOk(), "{}", listener.status().toString());
        auto client = std::async(std::launch::async, [port = listener->port] {
            return connectTcp({"127.0.0.1", port}, deadlineAfter(10s), nullptr, "raw echo");
        });
        auto server = acceptTcp(listener->fd.get(), deadlineAfter(10s), nullptr, "raw echo");
        AFD_CHECK(server.isOk(), "{}", server.status().toString());
        auto conn = client.get();
        AFD_CHECK(conn.isOk(), "{}", conn.status().toString());
        raw_server_ = std::move(*server);
        raw_client_ = std::move(*conn);
        raw_thread_ = std::jthread([fd = raw_server_.get()] { rawEcho(fd); });
        raw_in_.resize(kMaxTokens * kRowBytes);
    }

    ~Fixture() {
        ffn_->cancel();
        ffn_thread_.join();
        raw_client_.reset();  // the echo thread sees EOF
        raw_thread_.join();
        attention_->close();
        ffn_->close();
    }

    void connectorRoundTrip(const FramePayload& payload) {
        const FrameKey key{0, layer_++, 0};
        AFD_CHECK_OK(attention_->dispatch(key, std::span(&payload, 1)));
        auto frames = attention_->combine(key, kSpec);
        AFD_CHECK(frames.isOk(), "{}", frames.status().toString());
        benchmark::DoNotOptimize((*frames)[0].segments[0].rawData());
    }

    void rawRoundTrip(const void* data, uint64_t size) {
        const Deadline deadline = deadlineAfter(30s);
        AFD_CHECK(sendMessage(raw_client_.get(), data, size), "raw echo: send failed");
        uint64_t back = 0;
        AFD_CHECK_OK(recvAll(raw_client_.get(), &back, sizeof(back), deadline, nullptr, "raw echo"));
        AFD_CHECK(back == size, "raw echo returned {} bytes for {}", back, size);
        AFD_CHECK_OK(recvAll(raw_client_.get(), raw_in_.data(), size, deadline, nullptr, "raw echo"));
        benchmark::DoNotOptimize(raw_in_.data());
    }

private:
    std::unique_ptr<AttentionConnector> attention_;
    std::unique_ptr<FfnConnector> ffn_;
    std::jthread ffn_thread_;
    uint32_t layer_ = 0;
    core::UniqueFd raw_server_;
    core::UniqueFd raw_client_;
    std::jthread raw_thread_;
    std::vector<uint8_t> raw_in_;
};

Fixture* g_fixture = nullptr;

struct Run {
    double connector_us = 0;
    double raw_us = 0;
};
struct Row {
    double bytes = 0;
    std::vector<Run> runs;  // one per repetition
};
std::map<int64_t, Row> g_rows;  // by token count

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

void BM_ConnectorRoundTrip(benchmark::State& state) {
    const auto tokens = static_cast<uint32_t>(state.range(0));
    core::Tensor hidden = core::Tensor::empty(core::DType::kF32, {tokens, kHidden});
    std::mt19937 rng(tokens);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int64_t i = 0; i < hidden.numel(); ++i) hidden.data<float>()[i] = dist(rng);
    const FramePayload payload{tokens, {hidden}};
    const size_t bytes = hidden.nbytes();
    // One untimed round trip of each kind so that first-touch costs stay out.
    g_fixture->connectorRoundTrip(payload);
    g_fixture->rawRoundTrip(hidden.rawData(), bytes);

    double connector_seconds = 0, raw_seconds = 0;
    for (auto _ : state) {
        const auto t0 = Clock::now();
        g_fixture->connectorRoundTrip(payload);
        const auto t1 = Clock::now();
        g_fixture->rawRoundTrip(hidden.rawData(), bytes);
        const auto t2 = Clock::now();
        const double c = std::chrono::duration<double>(t1 - t0).count();
        connector_seconds += c;
        raw_seconds += std::chrono::duration<double>(t2 - t1).count();
        state.SetIterationTime(c);
    }
    const double n = static_cast<double>(state.iterations());
    // Bytes moved per round trip: the frame out and back.
    state.SetBytesProcessed(static_cast<int64_t>(2 * bytes) * state.iterations());
    state.counters["connector_us"] = connector_seconds / n * 1e6;
    state.counters["raw_us"] = raw_seconds / n * 1e6;
    state.counters["raw_bytes_per_second"] =
        benchmark::Counter(2.0 * bytes * n / raw_seconds, benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
    state.counters["overhead"] = connector_seconds / raw_seconds;
    Row& row = g_rows[tokens];
    row.bytes = static_cast<double>(bytes);
    row.runs.push_back({connector_seconds / n * 1e6, raw_seconds / n * 1e6});
}
BENCHMARK(BM_ConnectorRoundTrip)
    ->Arg(1)
    ->Arg(8)
    ->Arg(64)
    ->Arg(256)
    ->Arg(1024)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
    afd::core::setLogLevel(afd::core::LogLevel::kWarn);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    {
        Fixture fixture;
        g_fixture = &fixture;
        benchmark::RunSpecifiedBenchmarks();
        g_fixture = nullptr;
    }
    benchmark::Shutdown();
    std::printf(
        "\nA2F + F2A round trip, hidden %u f32, loopback TCP: bytes of one frame; medians over repetitions;\n"
        "ratio = median over repetitions of connector time / raw time of the same iterations\n",
        kHidden);
    std::printf("%8s %12s %14s %12s %10s %14s %12s\n", "tokens", "bytes", "connector_us", "raw_us", "ratio",
                "connector_GB/s", "raw_GB/s");
    for (const auto& [tokens, row] : g_rows) {
        std::vector<double> connector, raw, ratio;
        for (const Run& r : row.runs) {
            connector.push_back(r.connector_us);
            raw.push_back(r.raw_us);
            ratio.push_back(r.connector_us / r.raw_us);
        }
        const double c = median(connector), r = median(raw);
        std::printf("%8lld %12.0f %14.1f %12.1f %10.2f %14.2f %12.2f\n", static_cast<long long>(tokens), row.bytes, c,
                    r, median(ratio), 2.0 * row.bytes / (c * 1e-6) / 1e9, 2.0 * row.bytes / (r * 1e-6) / 1e9);
    }
    return 0;
}
