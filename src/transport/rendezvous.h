// The rendezvous: every rank of a deployment registers {role, rank, protocol version, fingerprint, endpoint} in
// the store hosted by FFN rank 0 and waits, bounded, until every expected rank has registered. Each rank then
// compares every peer's protocol version and fingerprint with its own; a difference fails the rendezvous on
// every rank that sees it, with both values in the message.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "transport/rendezvous_store.h"
#include "transport/role.h"
#include "transport/socket.h"

namespace afd::transport {

// "ffn rank 1", "attention rank 0".
std::string describeRank(Role role, int rank);

struct RankRecord {
    Role role = Role::kAttention;
    int rank = 0;
    uint32_t protocol_version = 0;
    std::string fingerprint;  // opaque: a hash of the model and the topology, made by the caller
    std::string endpoint;     // "host:port" of the rank's data listener; empty when it has none
};

struct RendezvousOptions {
    HostPort store;           // afd.host:afd.port
    bool host_store = false;  // true on the one rank that serves the store (FFN rank 0)
    int num_attention_ranks = 0;
    int num_ffn_ranks = 0;
    std::chrono::milliseconds timeout{30000};
    const Canceller* cancel = nullptr;  // may be null; must outlive the Rendezvous
};

class Rendezvous {
public:
    // Hosts the store when asked, connects to it (retrying until the timeout), registers `self`, waits for
    // everyone, checks versions and fingerprints. Errors: kTimeout naming the ranks that never registered;
    // kMismatch naming who holds which version or fingerprint, or a rank registered twice; kCorrupt for a
    // record that does not parse. The hosting rank keeps the store up until every rank has read the records
    // (bounded by the timeout), so that a mismatch is reported on both sides.
    static core::Result<std::unique_ptr<Rendezvous>> join(const RendezvousOptions& options, RankRecord self);
    ~Rendezvous();
    Rendezvous(const Rendezvous&) = delete;
    Rendezvous& operator=(const Rendezvous&) = delete;

    const RankRecord& self() const { return self_; }
    // Every registered rank of `role`, indexed by rank.
    const std::vector<RankRecord>& ranks(Role role) const { return role == Role::kAttention ? attention_ : ffn_; }
    // The store, for backends that exchange more (NCCL ids, IPC handles) after the rendezvous.
    StoreClient& store() { return *client_; }
    const std::string& storeAddress() const { return store_address_; }

private:
    Rendezvous() = default;

    std::unique_ptr<StoreServer> server_;  // NOTE: declared before client_: the client closes first
    std::unique_ptr<StoreClient> client_;
    std::string store_address_;
    RankRecord self_;
    std::vector<RankRecord> attention_;
    std::vector<RankRecord> ffn_;
};

}  // namespace afd::transport
