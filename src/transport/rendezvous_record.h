// The record each rank registers at the rendezvous (rendezvous.h): who it is, the protocol it speaks, the fingerprint
// of its model and topology and the session it joins, stored as a small JSON object: as the rank's claim under
// "afd/rank/<role>/<rank>" (before it knows its session) and as its registration in the session (rendezvous.h). Every
// rank reads every other rank's record off the store, so decoding it is a parser of untrusted bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "transport/role.h"

namespace afd::transport {

struct RankRecord {
    Role role = Role::kAttention;
    int rank = 0;
    uint32_t protocol_version = 0;
    std::string fingerprint;  // opaque: a hash of the model and the topology, made by the caller
    uint64_t session = 0;     // the rendezvous session the record registers in; 0: none (a claim)
};

// The store key of the record of (role, rank): "afd/rank/ffn/1".
std::string rankRecordKey(Role role, int rank);

// {"role": "ffn", "rank": 1, "protocol_version": 3, "fingerprint": "…", "session": 2} ("session" only when not 0).
// The fingerprint must be valid UTF-8.
std::string encodeRankRecord(const RankRecord& record);

// The record of (role, rank). kCorrupt ("<where>: record '<key>' …") when `text` is not a JSON object with a string
// role, an integer rank, an unsigned 32-bit protocol_version, a string fingerprint and, if present, an unsigned
// 64-bit session (absent: 0), or when it names another role or rank than the key it was read from.
core::Result<RankRecord> decodeRankRecord(std::string_view text, Role role, int rank, std::string_view where);

}  // namespace afd::transport
