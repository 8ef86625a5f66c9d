// Who is who in the nccl connector's communicators, and what the ranks tell each other through the rendezvous to get
// there. Pure host code: no CUDA, no NCCL.
//
// Global ranks: every communicator spans every rank of the deployment, the FFN ranks first (global 0 .. F-1, so FFN
// rank 0, which hosts the rendezvous, is also the root that makes the unique ids), then the attention ranks (global
// F .. F+A-1). The p2p topology joins the same communicators; its ranks only talk to their peers.
//
// Blobs: FFN rank 0 publishes the communicators' unique ids (kUniqueIdBlob: one per stage); every rank publishes the
// identity of its GPU (kGpuBlob: host boot id, GPU UUID, device index, host name), from which every rank checks, once
// all have registered, that no two ranks of a communicator share a GPU (NCCL does not support it).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "transport/role.h"

namespace afd::transport::nccl {

inline constexpr const char* kUniqueIdBlob = "nccl/unique_id";
inline constexpr const char* kGpuBlob = "nccl/gpu";
// The bytes of one ncclUniqueId (NCCL_UNIQUE_ID_BYTES; checked where nccl.h is included).
inline constexpr size_t kUniqueIdBytes = 128;

// The communicator rank of (role, rank). Precondition: 0 <= rank < the role's count (AFD_CHECK).
int globalRank(Role role, int rank, int num_attention_ranks, int num_ffn_ranks);
// Ranks in each communicator: A + F.
int worldSize(int num_attention_ranks, int num_ffn_ranks);

// The unique-id blob: a 4-byte magic, the count (u32), then `count` ids of kUniqueIdBytes each.
std::string encodeUniqueIds(std::span<const std::string> ids);
// kCorrupt naming `source` when the blob does not parse or holds other than `count` ids.
core::Result<std::vector<std::string>> decodeUniqueIds(std::string_view blob, size_t count, std::string_view source);

struct GpuIdentity {
    std::string boot_id;  // ncclHostKey(): equal on two ranks iff NCCL sees them on one host
    std::string uuid;     // the GPU's UUID as 32 lowercase hex digits (cudaDeviceProp::uuid)
    int device = 0;       // the CUDA device index the rank uses
    std::string host;     // the host's name, for messages
    bool operator==(const GpuIdentity&) const = default;
};

// This host's boot id ("unknown" when it cannot be read).
std::string hostBootId();
// The host as NCCL tells hosts apart: NCCL hashes NCCL_HOSTID in place of the host's own identity when it is set
// (two processes with different values are two nodes to it, even on one machine, and talk over its network
// transport), so the key is "hostid-" and the value's bytes in hex when `nccl_hostid` is set and not empty, else the
// boot id.
std::string ncclHostKey(const char* nccl_hostid, const std::string& boot_id);
// 16 UUID bytes as 32 lowercase hex digits.
std::string uuidHex(std::span<const unsigned char> bytes);

// "boot=<id> uuid=<hex> device=<n> host=<name>".
std::string encodeGpuIdentity(const GpuIdentity& gpu);
// kCorrupt naming `source` for a blob that does not parse.
core::Result<GpuIdentity> decodeGpuIdentity(std::string_view blob, std::string_view source);

struct RankGpu {
    Role role = Role::kAttention;
    int rank = 0;
    GpuIdentity gpu;
};

// kInvalidArgument naming the first two ranks that run on one GPU (same boot id and UUID), the rule, and the cuda_ipc
// connector as the one that serves ranks sharing a GPU; ok when every rank has a GPU of its own.
core::Status checkNoSharedGpu(std::span<const RankGpu> ranks);

}  // namespace afd::transport::nccl
