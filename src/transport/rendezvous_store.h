// A small TCP key-value store for the rendezvous and for backends that exchange setup data (TCP endpoints,
// NCCL unique ids, CUDA IPC handles). FFN rank 0 hosts it; every rank is a client.
//
// Wire: rendezvous_store_wire.h. Keys are 1..kMaxStoreKeyBytes, values up to kMaxStoreValueBytes; a malformed or
// oversized request closes that client only.
//
// A key lives until the store stops, or (KeyLifetime::kConnection) until the connection that set it last closes: a
// rank's record goes when the rank does (its process exits, is killed, or closes its client), so that the rank can
// be claimed again while a live claim stays exclusive. Setting a key again hands it to the new setter's lifetime.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "core/status.h"
#include "core/unique_fd.h"
#include "transport/rendezvous_store_wire.h"
#include "transport/socket.h"

namespace afd::transport {

inline constexpr size_t kMaxStoreKeys = 4096;
inline constexpr size_t kMaxStoreClients = 1024;

enum class KeyLifetime { kStore, kConnection };

// The server: one thread polls the listener and every client. Thread-safe to construct and destroy from any
// thread; the destructor stops and joins the thread (bounded: it only waits for the poll loop to notice).
class StoreServer {
public:
    // Binds host:port (port 0: ephemeral) and starts serving.
    static core::Result<std::unique_ptr<StoreServer>> start(const std::string& host, int port);
    ~StoreServer();
    StoreServer(const StoreServer&) = delete;
    StoreServer& operator=(const StoreServer&) = delete;

    int port() const { return port_; }
    // host:port as bound.
    const std::string& address() const { return address_; }

private:
    class Loop;
    StoreServer(std::unique_ptr<Loop> loop, std::unique_ptr<Canceller> wake, int port, std::string address);

    std::unique_ptr<Loop> loop_;
    std::unique_ptr<Canceller> wake_;  // stops the loop
    int port_ = 0;
    std::string address_;
    std::jthread thread_;  // NOTE: declared last so that it is joined before the loop state it uses is freed
};

// A client connection. Not thread-safe: one caller at a time. After a failed exchange (timeout, lost server)
// the connection is closed and every later call fails.
class StoreClient {
public:
    // Connects, retrying until `deadline` (the store may start after the client), logging every `report_every`
    // (0: never) that it still waits (connectTcp). `cancel` (may be null) interrupts this and every later wait of
    // the client; it must outlive the client. A reply may come up to `reply_slack` after the wait a call asked the
    // store for; a store that accepts and never answers (its process stopped) fails the call then.
    static core::Result<std::unique_ptr<StoreClient>> connect(
        const HostPort& address, Deadline deadline, const Canceller* cancel,
        std::chrono::milliseconds report_every = std::chrono::milliseconds(0),
        std::chrono::milliseconds reply_slack = kDefaultReplySlack);
    static constexpr std::chrono::milliseconds kDefaultReplySlack{10000};
    StoreClient(const StoreClient&) = delete;
    StoreClient& operator=(const StoreClient&) = delete;

    // Stores `value` under `key`, replacing any value.
    core::Status set(std::string_view key, std::string_view value, KeyLifetime lifetime = KeyLifetime::kStore);
    // Stores `value` unless `key` holds a value already; returns nullopt when stored, else the present value.
    core::Result<std::optional<std::string>> setIfAbsent(std::string_view key, std::string_view value,
                                                         KeyLifetime lifetime = KeyLifetime::kStore);
    // The value of `key`, waiting up to `timeout` for some rank to set it; kTimeout when it stays unset.
    core::Result<std::string> get(std::string_view key, std::chrono::milliseconds timeout);

    const HostPort& address() const { return address_; }

private:
    StoreClient(core::UniqueFd fd, HostPort address, const Canceller* cancel, std::chrono::milliseconds reply_slack)
        : fd_(std::move(fd)), address_(std::move(address)), cancel_(cancel), reply_slack_(reply_slack) {}

    core::Result<StoreReply> call(uint8_t op, uint8_t flags, std::string_view key, std::string_view value,
                                  std::chrono::milliseconds wait);

    core::UniqueFd fd_;
    HostPort address_;
    const Canceller* cancel_ = nullptr;
    std::chrono::milliseconds reply_slack_;
};

}  // namespace afd::transport
