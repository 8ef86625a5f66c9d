// The device half of the cuda_ipc connector: the layout of a receive slot's control block and the two kernels that
// move a frame, as launch calls g++ can include (no CUDA headers; streams are `void*` cudaStream_t).
//
// A channel is one (direction, stage, sender) lane into one receiver's inbox (ipc_inbox.h): a control block and a
// data slot in the receiver's device memory, mapped into the sender through CUDA IPC. Frames on a channel are
// numbered 1, 2, ...: the sender copies the frame's segments into the slot, writes the control fields, and then, with
// release semantics at system scope, the frame's number (`seq`); the receiver's wait acquires `seq` and checks the
// fields against what it expects. Both ends keep their count of frames in their own device memory (`sent`,
// `received`), so a CUDA graph that posts the same frames replays with the right numbers.
//
// No wait is unbounded: a wait ends on its frame, on the device-side timeout, on the host's abort word for that peer
// (set by the connector's watchdog when the peer's control connection drops, or by cancel(), and mirrored into
// device memory, ipc_inbox.h HostSignals), or at
// once when an earlier wait of the connector failed. The first failure is recorded in `failed` (device memory: later
// posts and waits do nothing) and in the host-mapped IpcDeviceError that deviceStatus() reads after a sync.
#pragma once

#include <cstdint>

namespace afd::transport::cuda_ipc {

inline constexpr int kMaxIpcSegments = 4;
// Peers one wait launch watches (a connector with more peers launches several).
inline constexpr int kMaxWaitPeers = 16;

// The control block of one channel (64 bytes, at the start of the receiver's inbox). `seq` is written last.
struct alignas(64) SlotControl {
    uint64_t seq;  // the number of the last frame delivered on this channel (0: none yet)
    uint32_t layer;
    uint32_t stage;
    uint32_t rows;
    uint32_t pad[11];
};
static_assert(sizeof(SlotControl) == 64);

enum IpcErrorCode : uint32_t {
    kIpcOk = 0,
    kIpcTimeout = 1,   // the frame did not come within the step timeout
    kIpcAborted = 2,   // the host aborted the wait (IpcDeviceError::abort_reason: an IpcAbortReason)
    kIpcBadFrame = 3,  // the frame's number, layer, stage or rows are not the expected ones
};

// Why the host aborts a peer's waits (the value of its abort word).
enum IpcAbortReason : uint32_t {
    kAbortNone = 0,
    kAbortPeerLost = 1,   // the peer's control connection closed
    kAbortCancelled = 2,  // cancel() on an FFN rank
    kAbortHostError = 3,  // the connector failed on the host side
};

// The first failure, in host-mapped memory; written once by the failing kernel (code last).
struct IpcDeviceError {
    uint32_t code;  // IpcErrorCode; kIpcOk while nothing failed
    uint32_t peer;  // index into the connector's peers()
    uint32_t layer;
    uint32_t stage;
    uint32_t abort_reason;
    uint32_t got_layer, got_stage, got_rows;
    uint32_t expected_rows;
    uint32_t pad;
    uint64_t got_seq;
    uint64_t expected_seq;
};

// One frame to one peer: the segments' bytes go to the peer's slot, then the control block.
struct IpcPutParams {
    const void* src[kMaxIpcSegments] = {};  // this GPU's memory
    void* dst[kMaxIpcSegments] = {};        // in the peer's slot (mapped)
    uint64_t bytes[kMaxIpcSegments] = {};
    int num_segments = 0;
    SlotControl* control = nullptr;     // the channel's, in the peer's inbox (mapped)
    uint64_t* sent = nullptr;           // [1] this rank's device memory: frames sent on the channel
    unsigned int* ctas_done = nullptr;  // [1] this rank's device memory, 0 between launches
    const uint32_t* failed = nullptr;   // [1] this rank's device memory: nonzero → the put does nothing
    const uint32_t* abort = nullptr;    // [1] the peer's abort word (device mirror); nonzero → nothing
    uint32_t layer = 0;
    uint32_t stage = 0;
    uint32_t rows = 0;
    // The peer's memory is on another GPU: fences and the release at system scope; on this GPU, GPU scope suffices.
    bool system_scope = true;
};

// Asynchronous on `stream`; capturable. With no segments it only publishes the control block (the caller copied the
// frame before it on the stream); with segments it is launched with programmatic dependent launch and reads them once
// the kernel before it has finished.
void launchIpcPut(const IpcPutParams& params, void* stream);

// Waits for one frame from each of `num_peers` peers on their channels.
struct IpcWaitParams {
    int num_peers = 0;
    const SlotControl* control[kMaxWaitPeers] = {};  // this rank's inbox
    uint64_t* received[kMaxWaitPeers] = {};          // this rank's device memory: frames taken on the channel
    const uint32_t* abort[kMaxWaitPeers] = {};       // the peers' abort words (device mirror)
    uint32_t rows[kMaxWaitPeers] = {};               // rows each frame must carry
    uint32_t peer_index[kMaxWaitPeers] = {};         // for the error record
    bool system_scope[kMaxWaitPeers] = {};           // the sender is on another GPU: acquire at system scope
    uint32_t layer = 0;
    uint32_t stage = 0;
    uint64_t timeout_ns = 0;
    uint32_t* failed = nullptr;       // [1] this rank's device memory
    IpcDeviceError* error = nullptr;  // host-mapped
};

// One warp on `stream`; the work enqueued after it sees the frames' bytes. Launched with programmatic dependent launch:
// it spins while the kernel before it (this rank's put) still runs. Asynchronous; capturable.
void launchIpcWait(const IpcWaitParams& params, void* stream);

}  // namespace afd::transport::cuda_ipc
