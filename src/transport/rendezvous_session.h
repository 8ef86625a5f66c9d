// Sessions of the rendezvous (rendezvous.h). An FFN pool (the `afd ffn` ranks; FFN rank 0 hosts the store) outlives
// its attention ranks and serves one session after another; each session is a whole rendezvous of every rank of the
// deployment, numbered 1, 2, … on the store that FFN rank 0 hosts, so that no record or blob of one session is read
// in another.
//
// The store's keys:
//   afd/open_session                           "N": the session ranks register in now. Only the leader (the rank that
//                                              hosts the store: FFN rank 0) sets it.
//   afd/rank/<role>/<rank>                     the rank's claim: its record without a session, set exclusively
//   afd/session/<N>/rank/<role>/<rank>         its record in session N
//   afd/session/<N>/seen/<role>/<rank>         it has read session N's records
//   afd/session/<N>/blob/<role>/<rank>/<key>   its blobs (rendezvous.h)
// Every key but afd/open_session lives as long as the store connection of the rank that set it
// (KeyLifetime::kConnection), which the rank keeps for as long as its connector lives: a rank that exits, is killed
// or closes its connector leaves nothing behind, so its rank can be claimed again, while two live processes that claim
// one rank still collide on the claim.
//
// The leader opens session 1 on a new store. When its own join of session N ends (every rank has registered and read
// the records, or the join failed), it opens N + 1: ranks that arrive while N runs register for the next session.
// Every other rank registers in the session open when it arrives. An FFN rank waiting for its next session
// (SessionOptions::idle_until_attention) waits without a deadline until attention rank 0 registers in that session,
// and leaves a session that the leader has closed meanwhile for the open one; the rendezvous timeout counts from
// attention rank 0's arrival.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "transport/role.h"

namespace afd::transport {

struct SessionOptions {
    // An FFN rank of a pool between sessions: no deadline (only the canceller) until attention rank 0 registers.
    bool idle_until_attention = false;
    // Called with the session's number once it is chosen, before the rank registers in it; may be empty.
    std::function<void(uint64_t session)> on_session;
};

inline constexpr std::string_view kOpenSessionKey = "afd/open_session";

// "afd/session/3/rank/ffn/1", "afd/session/3/seen/ffn/1", "afd/session/3/blob/ffn/1/tcp/endpoint".
std::string sessionRankKey(uint64_t session, Role role, int rank);
std::string sessionSeenKey(uint64_t session, Role role, int rank);
std::string sessionBlobKey(uint64_t session, Role role, int rank, std::string_view key);

// The value of afd/open_session: a decimal number ≥ 1. kCorrupt ("<where>: …") for anything else.
std::string encodeSessionNumber(uint64_t session);
core::Result<uint64_t> decodeSessionNumber(std::string_view text, std::string_view where);

}  // namespace afd::transport
