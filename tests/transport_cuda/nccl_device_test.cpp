// The nccl connector's device side within one process, on communicators of one rank: a rank may send to itself within
// one group, which is what one process can exercise (the two roles in their processes run in the GPU AFD tests). Frames
// arrive whole on every stage, also from a replayed graph; the header check records the first mismatch only and counts
// every frame; communicators are made within a deadline and refuse after an abort; the monitor ends a step that takes
// no frame and acts on hang-ups as each role's rule says.
#include <cuda_runtime.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/check.h"
#include "kernels/cuda/device_info.h"
#include "transport/afd_wire.h"

#if AFD_HAVE_NCCL
#include "transport/nccl/nccl_comms.h"
#include "transport/nccl/nccl_device.h"
#include "transport/nccl/nccl_endpoint.h"
#include "transport/nccl/nccl_monitor.h"
#endif

namespace afd::transport::nccl {
namespace {

#if AFD_HAVE_NCCL

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

#define REQUIRE_GPU()                                                                                            \
    do {                                                                                                         \
        if (::afd::kernels::cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";                          \
        if (::afd::kernels::cuda::deviceInfo(0).compute_major != 9) GTEST_SKIP() << "built for sm_90a (Hopper)"; \
    } while (0)

void check(cudaError_t err) { ASSERT_EQ(err, cudaSuccess) << cudaGetErrorString(err); }

std::unique_ptr<NcclComms> oneRankComms() {
    auto ids = NcclComms::newUniqueIds(kMaxStages);
    AFD_CHECK_OK(ids.status());
    auto comms = NcclComms::init(*ids, 1, 0, 0, 60s, nullptr, "test rank", 30s);
    AFD_CHECK_OK(comms.status());
    return std::move(comms).value();
}

// An endpoint whose only peer is this rank (communicator rank 0), sending and receiving frames of `spec`.
std::unique_ptr<NcclEndpoint> selfEndpoint(const FrameSpec& spec, uint32_t max_rows) {
    NcclEndpointSetup setup;
    setup.gpu = 0;
    setup.max_rows = max_rows;
    setup.out_spec = spec;
    setup.in_spec = spec;
    setup.peer_ranks = {0};
    auto endpoint = NcclEndpoint::create(setup);
    AFD_CHECK_OK(endpoint.status());
    (*endpoint)->attach(oneRankComms());
    return std::move(endpoint).value();
}

struct CudaStream {
    cudaStream_t s = nullptr;
    CudaStream() { EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess); }
    ~CudaStream() { cudaStreamDestroy(s); }
};

// One frame's device source buffers with random bytes, and the payload viewing them.
struct SourceFrame {
    std::vector<std::vector<uint8_t>> host;
    std::vector<void*> device;
    FramePayload payload;

    SourceFrame(const FrameSpec& spec, uint32_t rows, std::mt19937& rng) {
        payload.rows = rows;
        for (const SegmentSpec& seg : spec.segments) {
            std::vector<uint8_t> bytes(size_t{rows} * seg.cols * core::dtypeSize(seg.dtype));
            for (auto& b : bytes) b = static_cast<uint8_t>(rng());
            void* ptr = nullptr;
            EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(bytes.size(), 1)), cudaSuccess);
            EXPECT_EQ(cudaMemcpy(ptr, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
            payload.segments.push_back(
                core::Tensor::view(ptr, seg.dtype, {static_cast<int64_t>(rows), seg.cols}, core::Device::cuda(0)));
            host.push_back(std::move(bytes));
            device.push_back(ptr);
        }
    }
    ~SourceFrame() {
        for (void* p : device) cudaFree(p);
    }
    void refill(std::mt19937& rng) {
        for (size_t s = 0; s < host.size(); ++s) {
            for (auto& b : host[s]) b = static_cast<uint8_t>(rng());
            EXPECT_EQ(cudaMemcpy(device[s], host[s].data(), host[s].size(), cudaMemcpyHostToDevice), cudaSuccess);
        }
    }
};

std::vector<uint8_t> download(const core::Tensor& t) {
    std::vector<uint8_t> out(static_cast<size_t>(t.numel()) * core::dtypeSize(t.dtype()));
    EXPECT_EQ(cudaMemcpy(out.data(), t.rawData(), out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
}

// Poisons every segment's whole slot region (max_rows rows) through the views of an earlier wait.
void poison(const std::vector<ReceivedFrame>& frames, const FrameSpec& spec, uint32_t max_rows) {
    for (size_t s = 0; s < spec.segments.size(); ++s) {
        const size_t bytes = size_t{max_rows} * spec.segments[s].cols * core::dtypeSize(spec.segments[s].dtype);
        check(cudaMemset(frames[0].segments[s].rawData(), 0xFF, bytes));
    }
}

bool waitFor(const std::function<bool()>& condition, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        if (condition()) return true;
        std::this_thread::sleep_for(5ms);
    }
    return condition();
}

struct SocketPair {
    int fds[2] = {-1, -1};
    SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0); }
    ~SocketPair() {
        for (int fd : fds) {
            if (fd >= 0) ::close(fd);
        }
    }
    void hangUp() {
        ::close(fds[1]);
        fds[1] = -1;
    }
};

std::vector<PeerInfo> onePeer() { return {PeerInfo{Role::kFfn, 0, "127.0.0.1:1"}}; }

TEST(NcclDeviceTest, TheCheckRecordsTheFirstMismatchOnlyAndCountsEveryFrame) {
    REQUIRE_GPU();
    constexpr int P = 3;
    auto headers = DeviceAllocation::zeroed(P * sizeof(NcclFrameHeader), 0);
    auto counters = DeviceAllocation::zeroed(64 + P * sizeof(uint64_t), 0);
    auto host = HostMappedAllocation::zeroed(128 + P * sizeof(uint64_t), 0);
    ASSERT_TRUE(headers.isOk() && counters.isOk() && host.isOk());
    auto* header = reinterpret_cast<NcclFrameHeader*>(headers->get());
    const auto* record = reinterpret_cast<const NcclHeaderError*>(host->host());
    const auto* progress = reinterpret_cast<const uint64_t*>(host->host() + 128);
    CudaStream stream;

    NcclHeaderWriteParams w;
    w.num_peers = P;
    w.layer = 9;
    w.stage = 1;
    for (int i = 0; i < P; ++i) {
        w.header[i] = header + i;
        w.rows[i] = 5 + i;
    }
    launchNcclHeaderWrite(w, stream.s);

    NcclHeaderCheckParams c;
    c.num_peers = P;
    c.layer = 9;
    c.stage = 1;
    c.frames = reinterpret_cast<unsigned long long*>(counters->get() + 64);
    c.progress = reinterpret_cast<uint64_t*>(host->device() + 128);
    c.claimed = reinterpret_cast<uint32_t*>(counters->get());
    c.failed = reinterpret_cast<const uint32_t*>(host->device() + 64);
    c.error = reinterpret_cast<NcclHeaderError*>(host->device());
    for (int i = 0; i < P; ++i) {
        c.header[i] = header + i;
        c.rows[i] = 5 + i;
        c.peer_index[i] = i;
    }
    launchNcclHeaderCheck(c, stream.s);  // all as expected
    check(cudaStreamSynchronize(stream.s));
    EXPECT_EQ(record->code, kNcclCheckOk);
    for (int i = 0; i < P; ++i) EXPECT_EQ(progress[i], 1u);

    c.rows[2] = 8;  // peer 2 sent 7 rows
    launchNcclHeaderCheck(c, stream.s);
    c.rows[2] = 7;
    c.rows[0] = 4;  // a second mismatch: the record keeps the first
    launchNcclHeaderCheck(c, stream.s);
    check(cudaStreamSynchronize(stream.s));
    ASSERT_EQ(record->code, kNcclCheckBadHeader);
    EXPECT_EQ(record->peer, 2u);
    EXPECT_EQ(record->expected_rows, 8u);
    EXPECT_EQ(record->got_rows, 7u);
    EXPECT_EQ(record->got_layer, 9u);
    EXPECT_EQ(record->got_stage, 1u);
    EXPECT_EQ(record->expected_layer, 9u);
    EXPECT_EQ(record->got_magic, kFrameHeaderMagic);
    for (int i = 0; i < P; ++i) EXPECT_EQ(progress[i], 3u);

    // Once the connector failed (the failed word), a mismatch is counted but not recorded.
    auto fresh_counters = DeviceAllocation::zeroed(64 + P * sizeof(uint64_t), 0);
    auto fresh_host = HostMappedAllocation::zeroed(128 + P * sizeof(uint64_t), 0);
    ASSERT_TRUE(fresh_counters.isOk() && fresh_host.isOk());
    *reinterpret_cast<uint32_t*>(fresh_host->host() + 64) = 1;
    c.frames = reinterpret_cast<unsigned long long*>(fresh_counters->get() + 64);
    c.progress = reinterpret_cast<uint64_t*>(fresh_host->device() + 128);
    c.claimed = reinterpret_cast<uint32_t*>(fresh_counters->get());
    c.failed = reinterpret_cast<const uint32_t*>(fresh_host->device() + 64);
    c.error = reinterpret_cast<NcclHeaderError*>(fresh_host->device());
    launchNcclHeaderCheck(c, stream.s);
    check(cudaStreamSynchronize(stream.s));
    EXPECT_EQ(reinterpret_cast<const NcclHeaderError*>(fresh_host->host())->code, kNcclCheckOk);
    EXPECT_EQ(reinterpret_cast<const uint64_t*>(fresh_host->host() + 128)[0], 1u);
}

TEST(NcclCommsTest, AOneRankCommunicatorCarriesWholeFramesToItselfOnEveryStage) {
    REQUIRE_GPU();
    const FrameSpec spec = deviceM2nDispatchSpec(64, 4);
    const uint32_t max_rows = 300;
    std::unique_ptr<NcclEndpoint> endpoint = selfEndpoint(spec, max_rows);
    ASSERT_TRUE(endpoint->warmUp(60s).isOk());
    CudaStream stream;
    std::mt19937 rng(11);
    const bool yes[1] = {true};
    uint64_t frames_before = endpoint->framesTaken(0);
    for (uint32_t stage = 0; stage < kMaxStages; ++stage) {
        std::vector<ReceivedFrame> frames;
        for (const uint32_t rows : {max_rows, 1u, 0u, 37u}) {
            SourceFrame source(spec, rows, rng);
            if (!frames.empty()) poison(frames, spec, max_rows);  // every byte the frame carries must be written
            const FrameKey key{5, 20 + rows, stage};
            const uint32_t want[1] = {rows};
            const NcclEndpoint::Outgoing out{{&source.payload, 1}, yes};
            const NcclEndpoint::Incoming in{&spec, yes, want, &frames};
            const core::Status posted = endpoint->post(key, &out, &in, stream.s);
            ASSERT_TRUE(posted.isOk()) << posted.toString();
            check(cudaStreamSynchronize(stream.s));
            ASSERT_TRUE(endpoint->headerStatus().isOk()) << endpoint->headerStatus().toString();
            EXPECT_EQ(endpoint->framesTaken(0), ++frames_before);
            ASSERT_EQ(frames.size(), 1u);
            ASSERT_TRUE(frames[0].active);
            EXPECT_EQ(frames[0].rows, rows);
            ASSERT_EQ(frames[0].segments.size(), spec.segments.size());
            for (size_t s = 0; s < spec.segments.size(); ++s) {
                const core::Tensor& got = frames[0].segments[s];
                EXPECT_EQ(got.dtype(), spec.segments[s].dtype);
                EXPECT_EQ(got.size(0), rows);
                EXPECT_EQ(got.size(1), spec.segments[s].cols);
                EXPECT_EQ(download(got), source.host[s]) << "stage " << stage << " rows " << rows << " segment " << s;
            }
        }
    }
}

TEST(NcclCommsTest, AnExchangeCapturedInAGraphReplaysWithItsRows) {
    REQUIRE_GPU();
    const FrameSpec spec = hiddenSpec(128);
    const uint32_t max_rows = 64;
    const uint32_t rows = 24;
    std::unique_ptr<NcclEndpoint> endpoint = selfEndpoint(spec, max_rows);
    ASSERT_TRUE(endpoint->warmUp(60s).isOk());
    CudaStream stream;
    std::mt19937 rng(5);
    SourceFrame source(spec, rows, rng);
    const bool yes[1] = {true};
    const uint32_t want[1] = {rows};
    std::vector<ReceivedFrame> frames;
    const NcclEndpoint::Outgoing out{{&source.payload, 1}, yes};
    const NcclEndpoint::Incoming in{&spec, yes, want, &frames};

    check(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
    const core::Status posted = endpoint->post({1, 3, 0}, &out, &in, stream.s);
    cudaGraph_t graph = nullptr;
    check(cudaStreamEndCapture(stream.s, &graph));
    ASSERT_TRUE(posted.isOk()) << posted.toString();
    cudaGraphExec_t exec = nullptr;
    check(cudaGraphInstantiate(&exec, graph, 0));
    const uint64_t before = endpoint->framesTaken(0);
    EXPECT_EQ(before, 0u) << "a capture runs nothing";
    for (int replay = 0; replay < 3; ++replay) {
        source.refill(rng);
        poison(frames, spec, max_rows);
        check(cudaGraphLaunch(exec, stream.s));
        check(cudaStreamSynchronize(stream.s));
        ASSERT_TRUE(endpoint->headerStatus().isOk()) << endpoint->headerStatus().toString();
        EXPECT_EQ(endpoint->framesTaken(0), before + replay + 1);
        EXPECT_EQ(download(frames[0].segments[0]), source.host[0]) << "replay " << replay;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
}

TEST(NcclCommsTest, AnAbortEndsTheCommunicatorsAndLaterPostsRefuse) {
    REQUIRE_GPU();
    const FrameSpec spec = hiddenSpec(16);
    std::unique_ptr<NcclEndpoint> endpoint = selfEndpoint(spec, 4);
    NcclComms& comms = endpoint->comms();
    EXPECT_EQ(comms.size(), 1);
    EXPECT_EQ(comms.numCommunicators(), kMaxStages);
    EXPECT_TRUE(comms.asyncError().isOk());
    comms.abort();
    comms.abort();  // idempotent
    EXPECT_TRUE(comms.aborted());
    EXPECT_TRUE(comms.asyncError().isOk());
    CudaStream stream;
    std::mt19937 rng(1);
    SourceFrame source(spec, 2, rng);
    const bool yes[1] = {true};
    const core::Status s = endpoint->postFrames({0, 0, 0}, {&source.payload, 1}, yes, stream.s);
    EXPECT_EQ(s.code(), core::StatusCode::kCancelled);
    EXPECT_THAT(s.message(), HasSubstr("aborted"));
}

TEST(NcclCommsTest, ACommunicatorNobodyElseJoinsTimesOutNamingTheRank) {
    REQUIRE_GPU();
    auto ids = NcclComms::newUniqueIds(kMaxStages);
    ASSERT_TRUE(ids.isOk());
    const auto start = std::chrono::steady_clock::now();
    auto comms = NcclComms::init(*ids, 2, 0, 0, 500ms, nullptr, "ffn rank 0", 30s);
    EXPECT_EQ(comms.status().code(), core::StatusCode::kTimeout);
    EXPECT_THAT(comms.status().message(),
                AllOf(HasSubstr("ffn rank 0 (global rank 0 of 2)"), HasSubstr("afd.connect_timeout_s")));
    EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
}

TEST(NcclCommsTest, PayloadsThatBreakTheSpecAreRefusedBeforeAnyTransfer) {
    REQUIRE_GPU();
    const FrameSpec spec = hiddenSpec(16);
    std::unique_ptr<NcclEndpoint> endpoint = selfEndpoint(spec, 4);
    CudaStream stream;
    std::mt19937 rng(2);
    SourceFrame too_many(spec, 5, rng);
    const bool yes[1] = {true};
    core::Status s = endpoint->postFrames({0, 0, 0}, {&too_many.payload, 1}, yes, stream.s);
    EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("exceeds afd.max_num_tokens 4"));
    SourceFrame other(FrameSpec{{{core::DType::kBf16, 16}}}, 2, rng);
    s = endpoint->postFrames({0, 0, 0}, {&other.payload, 1}, yes, stream.s);
    EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument);
    std::vector<ReceivedFrame> frames;
    const uint32_t rows[1] = {5};
    s = endpoint->postWaits({0, 0, 0}, spec, yes, rows, stream.s, frames);
    EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument);
    const uint32_t fine[1] = {2};
    s = endpoint->postWaits({0, 0, 0}, FrameSpec{{{core::DType::kBf16, 16}}}, yes, fine, stream.s, frames);
    EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(endpoint->framesTaken(0), 0u);
}

NcclMonitorOptions fastOptions(bool every_peer_needed) {
    NcclMonitorOptions o;
    o.every_peer_needed = every_peer_needed;
    o.step_timeout = 600ms;
    o.hangup_grace = 150ms;
    o.abort_delay = 10ms;
    o.poll_interval = 5ms;
    return o;
}

TEST(NcclMonitorTest, AStepThatTakesNoFrameForTheStepTimeoutFailsAndAbortsTheCommunicators) {
    REQUIRE_GPU();
    const FrameSpec spec = hiddenSpec(16);
    std::unique_ptr<NcclEndpoint> endpoint = selfEndpoint(spec, 4);
    SocketPair control;
    NcclMonitor monitor(fastOptions(true), *endpoint, onePeer());
    ASSERT_TRUE(monitor.start({control.fds[0]}).isOk());
    const bool yes[1] = {true};

    // A step whose frames keep coming lasts longer than the timeout without failing.
    CudaStream stream;
    std::mt19937 rng(3);
    SourceFrame source(spec, 2, rng);
    const uint32_t want[1] = {2};
    std::vector<ReceivedFrame> frames;
    const NcclEndpoint::Outgoing out{{&source.payload, 1}, yes};
    const NcclEndpoint::Incoming in{&spec, yes, want, &frames};
    monitor.beginStep(1, yes);
    for (uint32_t layer = 0; layer < 12; ++layer) {  // 12 × 80 ms, past the 600 ms timeout
        ASSERT_TRUE(endpoint->post({1, layer, 0}, &out, &in, stream.s).isOk());
        check(cudaStreamSynchronize(stream.s));
        std::this_thread::sleep_for(80ms);
    }
    EXPECT_FALSE(monitor.failed()) << monitor.failure().toString();
    monitor.endStep();
    std::this_thread::sleep_for(900ms);  // idle between steps: no timeout
    EXPECT_FALSE(monitor.failed()) << monitor.failure().toString();

    monitor.beginStep(7, yes);
    ASSERT_TRUE(waitFor([&] { return monitor.failed(); }, 10s));
    const core::Status s = monitor.failure();
    EXPECT_EQ(s.code(), core::StatusCode::kTimeout);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("in step 7"), HasSubstr("ffn rank 0 (127.0.0.1:1): 12")));
    EXPECT_TRUE(waitFor([&] { return endpoint->comms().aborted(); }, 10s));
    // The first reason stays.
    monitor.fail(core::peerLost("later"));
    EXPECT_EQ(monitor.failure().code(), core::StatusCode::kTimeout);
    monitor.stop();
}

TEST(NcclMonitorTest, AnAttentionRankFailsOnAnyHangupOfAnFfnPeer) {
    REQUIRE_GPU();
    std::unique_ptr<NcclEndpoint> endpoint = selfEndpoint(hiddenSpec(16), 4);
    SocketPair control;
    NcclMonitor monitor(fastOptions(true), *endpoint, onePeer());
    ASSERT_TRUE(monitor.start({control.fds[0]}).isOk());
    control.hangUp();  // between steps too
    ASSERT_TRUE(waitFor([&] { return monitor.failed(); }, 10s));
    EXPECT_EQ(monitor.failure().code(), core::StatusCode::kPeerLost);
    EXPECT_THAT(monitor.failure().message(), HasSubstr("ffn rank 0 (127.0.0.1:1): its control connection closed"));
    EXPECT_TRUE(waitFor([&] { return endpoint->comms().aborted(); }, 10s));
}

TEST(NcclMonitorTest, AnAttentionRankThatSentItsLastHeaderIgnoresHangups) {
    REQUIRE_GPU();
    std::unique_ptr<NcclEndpoint> endpoint = selfEndpoint(hiddenSpec(16), 4);
    SocketPair control;
    NcclMonitor monitor(fastOptions(true), *endpoint, onePeer());
    ASSERT_TRUE(monitor.start({control.fds[0]}).isOk());
    monitor.leaving();
    control.hangUp();
    std::this_thread::sleep_for(400ms);
    EXPECT_FALSE(monitor.failed()) << monitor.failure().toString();
}

TEST(NcclMonitorTest, AnFfnRankCountsTheHangupOfAPeerOnlyInAStepItTakesPartIn) {
    REQUIRE_GPU();
    const bool yes[1] = {true};
    const bool no[1] = {false};
    {
        // Idle, or in a step the peer does not take part in: the control plane reports the peer, not the monitor.
        std::unique_ptr<NcclEndpoint> endpoint = selfEndpoint(hiddenSpec(16), 4);
        SocketPair control;
        NcclMonitor monitor(fastOptions(false), *endpoint, onePeer());
        ASSERT_TRUE(monitor.start({control.fds[0]}).isOk());
        control.hangUp();
        std::this_thread::sleep_for(300ms);
        monitor.beginStep(2, no);
        std::this_thread::sleep_for(200ms);
        EXPECT_FALSE(monitor.failed()) << monitor.failure().toString();
        monitor.endStep();
    }
    {
        // A peer that left: its hang-up is its goodbye, even if a step lists it.
        std::unique_ptr<NcclEndpoint> endpoint = selfEndpoint(hiddenSpec(16), 4);
        SocketPair control;
        NcclMonitor monitor(fastOptions(false), *endpoint, onePeer());
        ASSERT_TRUE(monitor.start({control.fds[0]}).isOk());
        monitor.markLeft(0);
        monitor.beginStep(2, yes);
        control.hangUp();
        std::this_thread::sleep_for(250ms);  // past the grace, within the step timeout
        EXPECT_FALSE(monitor.failed()) << monitor.failure().toString();
        monitor.endStep();
    }
    {
        // A step that ends within the grace: the peer left cleanly after its last frame.
        std::unique_ptr<NcclEndpoint> endpoint = selfEndpoint(hiddenSpec(16), 4);
        SocketPair control;
        NcclMonitor monitor(fastOptions(false), *endpoint, onePeer());
        ASSERT_TRUE(monitor.start({control.fds[0]}).isOk());
        monitor.beginStep(3, yes);
        control.hangUp();
        monitor.endStep();
        std::this_thread::sleep_for(300ms);
        EXPECT_FALSE(monitor.failed()) << monitor.failure().toString();
    }
    {
        // A peer in the step in flight that hangs up and the step does not end: lost, after the grace.
        std::unique_ptr<NcclEndpoint> endpoint = selfEndpoint(hiddenSpec(16), 4);
        SocketPair control;
        NcclMonitor monitor(fastOptions(false), *endpoint, onePeer());
        ASSERT_TRUE(monitor.start({control.fds[0]}).isOk());
        monitor.beginStep(4, yes);
        const auto start = std::chrono::steady_clock::now();
        control.hangUp();
        ASSERT_TRUE(waitFor([&] { return monitor.failed(); }, 10s));
        EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);
        EXPECT_EQ(monitor.failure().code(), core::StatusCode::kPeerLost);
        EXPECT_THAT(monitor.failure().message(), HasSubstr("closed during step 4"));
    }
}

TEST(NcclMonitorTest, ACancelIsTheReasonAndEndsTheCommunicators) {
    REQUIRE_GPU();
    std::unique_ptr<NcclEndpoint> endpoint = selfEndpoint(hiddenSpec(16), 4);
    SocketPair control;
    NcclMonitor monitor(fastOptions(false), *endpoint, onePeer());
    ASSERT_TRUE(monitor.start({control.fds[0]}).isOk());
    monitor.fail(core::makeStatus(core::StatusCode::kCancelled, "stopped"));
    EXPECT_EQ(monitor.failure().code(), core::StatusCode::kCancelled);
    EXPECT_TRUE(waitFor([&] { return endpoint->comms().aborted(); }, 10s));
    monitor.stop();
    monitor.stop();  // idempotent
}

#else

TEST(NcclDeviceTest, NotBuiltWithoutNccl) { GTEST_SKIP() << "this build has no NCCL"; }

#endif

}  // namespace
}  // namespace afd::transport::nccl
