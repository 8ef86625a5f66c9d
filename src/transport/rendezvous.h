// The rendezvous, shared by every connector backend: each rank of a deployment registers {role, rank, protocol
// version, fingerprint} in the store hosted by FFN rank 0 and waits, bounded, until every expected rank has
// registered. Each rank then compares every peer's protocol version and fingerprint with its own; a difference
// fails the rendezvous on every rank that sees it, with both values in the message.
//
// Beside its record, a rank publishes what its backend needs the others to know as named blobs (bytes): tcp its
// data listener's address, cuda_ipc its IPC handles, nccl (on one rank) the unique id. Blob keys are
// "<connector>/<name>" (kMaxBlobKeyBytes, letters, digits and "_-./"), values up to kMaxBlobValueBytes, at most
// kMaxBlobsPerRank per rank, each published once; every rank reads any rank's blob by (role, rank, key).
//
// Sessions (rendezvous_session.h): a rank first claims its rank on the store for as long as its connection lives (a
// second live process claiming it fails at once), then registers in the session the store's host has open; records
// and blobs are the session's, and live as long as the connection of the rank that set them. The Rendezvous object
// holds that connection: a connector keeps it for its whole life.
#pragma once

#include <chrono>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "transport/rendezvous_record.h"
#include "transport/rendezvous_session.h"
#include "transport/rendezvous_store.h"
#include "transport/role.h"
#include "transport/socket.h"
#include "transport/wait_progress.h"

namespace afd::transport {

// "ffn rank 1", "attention rank 0".
std::string describeRank(Role role, int rank);
// "ffn rank 1", "attention ranks 0, 2": ranks of one role in one phrase.
std::string describeRanks(Role role, std::span<const int> ranks);

inline constexpr size_t kMaxBlobKeyBytes = 128;
inline constexpr size_t kMaxBlobValueBytes = kMaxStoreValueBytes;
inline constexpr size_t kMaxBlobsPerRank = 64;

// One named value a rank publishes (binary-safe).
struct RendezvousBlob {
    std::string key;
    std::string value;
};

// Checks a blob key against the rules above (kInvalidArgument naming the key and the rule).
core::Status checkBlobKey(std::string_view key);

struct RendezvousOptions {
    HostPort store;           // afd.host:afd.port
    bool host_store = false;  // true on the one rank that serves the store (FFN rank 0)
    // With host_store: the caller started the StoreServer at `store` already (so that a taken port is found before
    // any weight is read) and keeps it up for as long as the Rendezvous lives; join() then starts none.
    bool store_started = false;
    int num_attention_ranks = 0;
    int num_ffn_ranks = 0;
    std::chrono::milliseconds timeout{30000};
    // While waiting (for the store to accept, for ranks to register), one INFO line this often names who is still
    // awaited; 0: never.
    std::chrono::milliseconds report_interval = kWaitReportInterval;
    const Canceller* cancel = nullptr;  // may be null; must outlive the Rendezvous
    SessionOptions session;
    // While a rank with session.idle_until_attention waits for attention rank 0, one INFO line this often; 0: never.
    std::chrono::milliseconds idle_report_interval{60000};
};

class Rendezvous {
public:
    // Hosts the store when asked, connects to it (retrying until the timeout), claims self's rank, joins a session
    // (the hosting rank opens it), publishes `blobs` (so that they are readable once the record is), registers
    // `self` (its session set to the one joined), waits for everyone, checks versions and fingerprints.
    // Every report_interval of waiting logs who is still awaited: "waiting for ffn ranks 0, 1 (of 2) to register at
    // <store> (5 s of 120 s)".
    // Errors: kInvalidArgument for a blob that breaks the rules; kTimeout naming the ranks that never
    // registered; kMismatch naming who holds which version or fingerprint, or a rank claimed by a live process
    // already; kCorrupt for a record that does not parse or names another session; kCancelled through `cancel`.
    // Every rank, the hosting one too, stays until every other rank has read the records or left (bounded by the
    // timeout), so that a mismatch is reported on every side and no record leaves before its peers have read it;
    // the hosting rank keeps the store up after that for as long as its Rendezvous lives.
    static core::Result<std::unique_ptr<Rendezvous>> join(const RendezvousOptions& options, RankRecord self,
                                                          std::vector<RendezvousBlob> blobs = {});
    ~Rendezvous();
    Rendezvous(const Rendezvous&) = delete;
    Rendezvous& operator=(const Rendezvous&) = delete;

    const RankRecord& self() const { return self_; }
    // The session joined (self().session).
    uint64_t session() const { return self_.session; }
    // Every registered rank of `role`, indexed by rank.
    const std::vector<RankRecord>& ranks(Role role) const { return role == Role::kAttention ? attention_ : ffn_; }
    const std::string& storeAddress() const { return store_address_; }

    // Publishes a blob of this rank after the join (a second round: e.g. handles made once the peers are known).
    // Each key once; kInvalidArgument for a key or value that breaks the rules, a key published already, or one
    // blob more than kMaxBlobsPerRank.
    core::Status publish(std::string_view key, std::string_view value);
    // The blob `key` of (role, rank), waiting up to `timeout` for it to be published (logging every report_interval
    // that it still waits). kTimeout names the rank and the key; kInvalidArgument for a bad key or a rank outside the
    // deployment.
    core::Result<std::string> fetch(Role role, int rank, std::string_view key, std::chrono::milliseconds timeout);

private:
    Rendezvous() = default;
    // One attempt; *moved when the session closed before attention rank 0 came (idle_until_attention): join again.
    static core::Result<std::unique_ptr<Rendezvous>> joinSession(const RendezvousOptions& options, RankRecord self,
                                                                 const std::vector<RendezvousBlob>& blobs, bool* moved);
    // Idle: waits, without a deadline, until attention rank 0 registers in the session (ok), or the open session is
    // another (ok, *moved), or an error (kCancelled through the canceller).
    core::Status awaitAttention(const RendezvousOptions& options, bool* moved);
    core::Status publishBlob(std::string_view key, std::string_view value, std::string_view where);

    std::unique_ptr<StoreServer> server_;  // NOTE: declared before client_: the client closes first
    std::unique_ptr<StoreClient> client_;
    std::string store_address_;
    RankRecord self_;
    std::vector<RankRecord> attention_;
    std::vector<RankRecord> ffn_;
    int num_attention_ranks_ = 0;
    int num_ffn_ranks_ = 0;
    std::chrono::milliseconds report_interval_{0};  // RendezvousOptions::report_interval, for fetch()
    std::set<std::string, std::less<>> published_;  // this rank's blob keys
};

}  // namespace afd::transport
