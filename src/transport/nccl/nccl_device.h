// The device half of the nccl connector: the in-band header every frame carries and the two small kernels around the
// NCCL transfers, as launch calls g++ can include (no CUDA headers; streams are `void*` cudaStream_t).
//
// A frame travels as its 16-byte header followed by its segments, each one ncclSend / ncclRecv of bytes, in the order
// both ends derive from the frame spec. Plain send/recv cannot see two ends disagree on a frame's rows (each passes its
// own byte count), so the sender writes (magic, layer, stage, rows) into the header just before the group, and the
// receiver checks the header once the group has delivered it. The first mismatch is claimed in device memory and
// recorded in host-mapped memory for deviceStatus(); every check also counts the frames taken from each peer, mirrored
// into host-mapped words that the connector's monitor reads to see that a step still moves.
#pragma once

#include <cstdint>

namespace afd::transport::nccl {

inline constexpr uint32_t kFrameHeaderMagic = 0x4e444641;  // "AFDN" in little-endian byte order
// Peers one launch covers (a post with more peers launches several).
inline constexpr int kMaxLaunchPeers = 32;

struct NcclFrameHeader {
    uint32_t magic;
    uint32_t layer;
    uint32_t stage;
    uint32_t rows;
};
static_assert(sizeof(NcclFrameHeader) == 16);

enum NcclCheckCode : uint32_t {
    kNcclCheckOk = 0,
    kNcclCheckBadHeader = 1,  // a received header is not the expected (magic, layer, stage, rows)
};

// The first mismatch, in host-mapped memory; written once by the check that claims it (`code` last).
struct NcclHeaderError {
    uint32_t code;  // NcclCheckCode
    uint32_t peer;  // index into the connector's peers()
    uint32_t expected_layer;
    uint32_t expected_stage;
    uint32_t expected_rows;
    uint32_t got_magic;
    uint32_t got_layer;
    uint32_t got_stage;
    uint32_t got_rows;
    uint32_t pad;
};

// Writes one header per peer: (kFrameHeaderMagic, layer, stage, rows[i]) into header[i].
struct NcclHeaderWriteParams {
    int num_peers = 0;
    NcclFrameHeader* header[kMaxLaunchPeers] = {};  // device memory: the send headers
    uint32_t rows[kMaxLaunchPeers] = {};
    uint32_t layer = 0;
    uint32_t stage = 0;
};

// Asynchronous on `stream`; capturable (the values are the launch's, so a graph replays the rows it was captured with).
void launchNcclHeaderWrite(const NcclHeaderWriteParams& params, void* stream);

// Checks one received header per peer against (kFrameHeaderMagic, layer, stage, rows[i]) and counts the frame.
struct NcclHeaderCheckParams {
    int num_peers = 0;
    const NcclFrameHeader* header[kMaxLaunchPeers] = {};  // device memory: the received headers
    uint32_t rows[kMaxLaunchPeers] = {};                  // rows each frame must carry
    uint32_t peer_index[kMaxLaunchPeers] = {};            // for the error record and the counters below
    uint32_t layer = 0;
    uint32_t stage = 0;
    unsigned long long* frames = nullptr;  // [peers] device memory: frames checked per peer index
    uint64_t* progress = nullptr;          // [peers] host-mapped: a copy of `frames` the host reads
    uint32_t* claimed = nullptr;           // [1] device memory: 0 until a check claims the error record
    const uint32_t* failed = nullptr;      // [1] host-mapped: nonzero once the connector failed (headers may then be
                                           // garbage from aborted transfers: nothing more is recorded)
    NcclHeaderError* error = nullptr;      // host-mapped
};

// One warp on `stream`, after the group that received the headers. Asynchronous; capturable.
void launchNcclHeaderCheck(const NcclHeaderCheckParams& params, void* stream);

}  // namespace afd::transport::nccl
