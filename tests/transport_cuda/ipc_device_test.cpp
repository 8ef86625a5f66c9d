// The cuda_ipc kernels and memory within one process (a process cannot open its own IPC handle, so the sender writes
// the inbox through its own pointer here; the processes' case runs in the GPU AFD tests): a frame's bytes and control
// block arrive and are numbered; a wait ends on its timeout, on the host's abort word and on a frame that breaks the
// schedule, recording the first failure, after which posts and waits do nothing.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/device_info.h"
#include "transport/cuda_ipc/ipc_device.h"
#include "transport/cuda_ipc/ipc_inbox.h"

namespace afd::transport::cuda_ipc {
namespace {

#define REQUIRE_GPU()                                                                                            \
    do {                                                                                                         \
        if (::afd::kernels::cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";                          \
        if (::afd::kernels::cuda::deviceInfo(0).compute_major != 9) GTEST_SKIP() << "built for sm_90a (Hopper)"; \
    } while (0)

void check(cudaError_t err) { ASSERT_EQ(err, cudaSuccess) << cudaGetErrorString(err); }

// One channel: a sender's counters and source buffers, the receiver's inbox and counters, the host signals.
struct Channel {
    std::unique_ptr<LocalInbox> inbox;
    std::unique_ptr<DeviceCounters> sender;
    std::unique_ptr<DeviceCounters> receiver;
    std::unique_ptr<HostSignals> signals;
    SlotLayout layout;
    cudaStream_t stream = nullptr;

    explicit Channel(const FrameSpec& spec, uint32_t max_rows) {
        layout = slotLayout(spec, max_rows).value();
        inbox = LocalInbox::create({1, kMaxStages, layout.bytes}, 0).value();
        sender = DeviceCounters::create(1, 0, 0).value();
        receiver = DeviceCounters::create(0, 1, 0).value();
        signals = HostSignals::create(1, 0).value();
        EXPECT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    }
    ~Channel() { cudaStreamDestroy(stream); }

    IpcPutParams put(std::vector<const void*> src, uint32_t rows, uint32_t layer) const {
        IpcPutParams p;
        p.num_segments = static_cast<int>(src.size());
        for (int s = 0; s < p.num_segments; ++s) {
            p.src[s] = src[s];
            p.dst[s] = inbox->slot(0) + layout.offsets[s];
            p.bytes[s] = layout.row_bytes[s] * rows;
        }
        p.control = inbox->control(0);
        p.sent = sender->sent(0);
        p.ctas_done = sender->ctasDone(0);
        p.failed = sender->failed();
        p.abort = signals->abortWord(0);
        p.layer = layer;
        p.rows = rows;
        return p;
    }

    IpcWaitParams wait(uint32_t rows, uint32_t layer, uint64_t timeout_ns) const {
        IpcWaitParams p;
        p.num_peers = 1;
        p.control[0] = inbox->control(0);
        p.received[0] = receiver->received(0);
        p.abort[0] = signals->abortWord(0);
        p.rows[0] = rows;
        p.peer_index[0] = 0;
        p.layer = layer;
        p.timeout_ns = timeout_ns;
        p.failed = receiver->failed();
        p.error = signals->error();
        return p;
    }
};

FrameSpec spec() { return FrameSpec{{{core::DType::kBf16, 64}, {core::DType::kI32, 3}, {core::DType::kF32, 3}}}; }

TEST(IpcLayoutTest, SegmentsSitAtAlignedOffsetsForTheMaximumRows) {
    const SlotLayout l = slotLayout(spec(), 5).value();
    ASSERT_EQ(l.count, 3);
    EXPECT_EQ(l.offsets[0], 0u);
    EXPECT_EQ(l.row_bytes[0], 128u);
    EXPECT_EQ(l.offsets[1], 768u);  // 5 × 128 = 640, rounded up to 256
    EXPECT_EQ(l.row_bytes[1], 12u);
    EXPECT_EQ(l.offsets[2], 1024u);
    EXPECT_EQ(l.bytes, 1280u);
    const InboxLayout inbox{3, 2, l.bytes};
    EXPECT_EQ(inbox.numChannels(), 6u);
    EXPECT_EQ(inbox.channel(1, 2), 5u);
    EXPECT_EQ(inbox.slotOffset(0), 512u);  // 6 control blocks of 64 bytes, rounded up
    EXPECT_EQ(inbox.totalBytes(), 512u + 6 * 1280u);
    EXPECT_FALSE(slotLayout(FrameSpec{}, 5).isOk());
}

TEST(IpcDeviceTest, FramesArriveWholeAndNumbered) {
    REQUIRE_GPU();
    const uint32_t max_rows = 300;
    Channel ch(spec(), max_rows);
    std::mt19937 rng(7);
    for (uint32_t round = 0; round < 3; ++round) {
        const uint32_t rows = round == 0 ? 1 : (round == 1 ? max_rows : 0);
        std::vector<std::vector<uint8_t>> host(3);
        std::vector<void*> dev(3, nullptr);
        std::vector<const void*> src;
        for (int s = 0; s < 3; ++s) {
            host[s].resize(std::max<uint64_t>(ch.layout.row_bytes[s] * rows, 1));
            for (auto& b : host[s]) b = static_cast<uint8_t>(rng());
            check(cudaMalloc(&dev[s], host[s].size()));
            check(cudaMemcpy(dev[s], host[s].data(), host[s].size(), cudaMemcpyHostToDevice));
            src.push_back(dev[s]);
        }
        // Poison the slot: every byte the frame carries must be written.
        check(cudaMemset(ch.inbox->slot(0), 0xAB, ch.layout.bytes));
        launchIpcPut(ch.put(src, rows, 10 + round), ch.stream);
        launchIpcWait(ch.wait(rows, 10 + round, 5'000'000'000ull), ch.stream);
        check(cudaStreamSynchronize(ch.stream));
        EXPECT_EQ(ch.signals->readError().code, kIpcOk);
        for (int s = 0; s < 3; ++s) {
            std::vector<uint8_t> got(ch.layout.row_bytes[s] * rows);
            check(cudaMemcpy(got.data(), ch.inbox->slot(0) + ch.layout.offsets[s], got.size(), cudaMemcpyDeviceToHost));
            EXPECT_TRUE(std::equal(got.begin(), got.end(), host[s].begin())) << "segment " << s << " round " << round;
        }
        SlotControl control;
        check(cudaMemcpy(&control, ch.inbox->control(0), sizeof(control), cudaMemcpyDeviceToHost));
        EXPECT_EQ(control.seq, round + 1);
        EXPECT_EQ(control.rows, rows);
        EXPECT_EQ(control.layer, 10 + round);
        uint64_t received = 0;
        check(cudaMemcpy(&received, ch.receiver->received(0), sizeof(received), cudaMemcpyDeviceToHost));
        EXPECT_EQ(received, round + 1);
        for (void* p : dev) cudaFree(p);
    }
}

TEST(IpcDeviceTest, AWaitWithoutAFrameTimesOutAndLaterWaitsDrain) {
    REQUIRE_GPU();
    Channel ch(spec(), 4);
    launchIpcWait(ch.wait(4, 3, 50'000'000ull), ch.stream);      // 50 ms
    launchIpcWait(ch.wait(4, 4, 60'000'000'000ull), ch.stream);  // would take a minute; ends at once
    check(cudaStreamSynchronize(ch.stream));
    const IpcDeviceError e = ch.signals->readError();
    EXPECT_EQ(e.code, kIpcTimeout);
    EXPECT_EQ(e.layer, 3u);
    EXPECT_EQ(e.expected_seq, 1u);
}

TEST(IpcDeviceTest, TheHostsAbortWordEndsAWaitWithItsReason) {
    REQUIRE_GPU();
    Channel ch(spec(), 4);
    launchIpcWait(ch.wait(4, 0, 60'000'000'000ull), ch.stream);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(cudaStreamQuery(ch.stream), cudaErrorNotReady);  // still waiting
    ch.signals->abort(0, kAbortPeerLost);
    ch.signals->abort(0, kAbortCancelled);  // the first reason stays
    check(cudaStreamSynchronize(ch.stream));
    const IpcDeviceError e = ch.signals->readError();
    EXPECT_EQ(e.code, kIpcAborted);
    EXPECT_EQ(e.abort_reason, kAbortPeerLost);
    EXPECT_EQ(ch.signals->abortReason(0), kAbortPeerLost);
}

TEST(IpcDeviceTest, AFrameOfOtherRowsOrLayerIsABadFrame) {
    REQUIRE_GPU();
    Channel ch(spec(), 8);
    void* src = nullptr;
    check(cudaMalloc(&src, 4096));
    launchIpcPut(ch.put({src, src, src}, 3, 7), ch.stream);
    launchIpcWait(ch.wait(4, 7, 5'000'000'000ull), ch.stream);
    check(cudaStreamSynchronize(ch.stream));
    const IpcDeviceError e = ch.signals->readError();
    EXPECT_EQ(e.code, kIpcBadFrame);
    EXPECT_EQ(e.got_rows, 3u);
    EXPECT_EQ(e.expected_rows, 4u);
    EXPECT_EQ(e.got_layer, 7u);
    cudaFree(src);
}

TEST(IpcDeviceTest, APutToAnAbortedPeerWritesNothing) {
    REQUIRE_GPU();
    Channel ch(spec(), 8);
    void* src = nullptr;
    check(cudaMalloc(&src, 4096));
    check(cudaMemset(src, 0x11, 4096));
    check(cudaMemset(ch.inbox->slot(0), 0, ch.layout.bytes));
    ch.signals->abort(0, kAbortPeerLost);
    launchIpcPut(ch.put({src, src, src}, 8, 1), ch.stream);
    check(cudaStreamSynchronize(ch.stream));
    SlotControl control;
    check(cudaMemcpy(&control, ch.inbox->control(0), sizeof(control), cudaMemcpyDeviceToHost));
    EXPECT_EQ(control.seq, 0u);
    std::vector<uint8_t> slot(ch.layout.bytes);
    check(cudaMemcpy(slot.data(), ch.inbox->slot(0), slot.size(), cudaMemcpyDeviceToHost));
    EXPECT_TRUE(std::all_of(slot.begin(), slot.end(), [](uint8_t b) { return b == 0; }));
    cudaFree(src);
}

}  // namespace
}  // namespace afd::transport::cuda_ipc
