#include "transport/rendezvous_store.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/logging.h"

namespace afd::transport {
namespace {

using std::chrono::milliseconds;

uint8_t ownedFlag(KeyLifetime lifetime) { return lifetime == KeyLifetime::kConnection ? kStoreFlagOwned : 0; }

}  // namespace

// ---- server ----

class StoreServer::Loop {
public:
    Loop(core::UniqueFd listener, std::string address) : listener_(std::move(listener)), address_(std::move(address)) {}

    // The thread body. Never throws: a failure of the server itself is logged and ends the loop.
    void run(std::stop_token stop, const Canceller& wake) noexcept;

private:
    struct Client {
        uint64_t id = 0;
        core::UniqueFd fd;
        std::string name;
        std::vector<uint8_t> in;
        std::string out;
        size_t out_done = 0;
        bool waiting = false;  // a get blocked until `wait_key` is set or `wait_deadline`
        std::string wait_key;
        Clock::time_point wait_deadline;
        bool closed = false;
        // Keys this client set with KeyLifetime::kConnection; those it still owns go when it does.
        std::unordered_set<std::string> owned;
    };
    struct Entry {
        std::string value;
        uint64_t owner = 0;  // the Client::id whose connection the key lives with; 0: the store's
    };

    core::Status step(const Canceller& wake, bool* stopped);
    void acceptClients();
    void readFrom(Client& client);
    void writeTo(Client& client);
    // Handles complete requests buffered by `client`; returns whether it handled any.
    bool handleRequests(Client& client);
    void reply(Client& client, uint8_t code, std::string_view value);
    void dropClient(Client& client, std::string_view why);
    void wakeWaiters(const std::string& key);
    void expireWaiters();

    core::UniqueFd listener_;
    std::string address_;
    std::vector<std::unique_ptr<Client>> clients_;
    uint64_t next_client_id_ = 1;
    std::unordered_map<std::string, Entry> data_;
    std::vector<pollfd> pollfds_;
};

void StoreServer::Loop::run(std::stop_token stop, const Canceller& wake) noexcept {
    try {
        bool stopped = false;
        while (!stop.stop_requested() && !stopped) {
            const core::Status status = step(wake, &stopped);
            if (!status.isOk()) {
                AFD_LOG_ERROR("rendezvous store at {} stopped: {}", address_, status.message());
                return;
            }
        }
    } catch (const std::exception& e) {
        AFD_LOG_ERROR("rendezvous store at {} stopped: {}", address_, e.what());
    }
}

core::Status StoreServer::Loop::step(const Canceller& wake, bool* stopped) {
    Deadline next = kNoDeadline;
    for (const auto& c : clients_) {
        if (c->waiting) next = std::min(next, c->wait_deadline);
    }
    pollfds_.clear();
    pollfds_.push_back({wake.fd(), POLLIN, 0});
    pollfds_.push_back({clients_.size() < kMaxStoreClients ? listener_.get() : -1, POLLIN, 0});
    for (const auto& c : clients_) {
        short events = 0;
        if (c->in.size() < kStoreLengthBytes + kMaxStoreRequestBody) events |= POLLIN;
        if (c->out_done < c->out.size()) events |= POLLOUT;
        pollfds_.push_back({c->fd.get(), events, 0});
    }
    const int rc = ::poll(pollfds_.data(), pollfds_.size(), pollTimeoutMs(next));
    if (rc < 0) {
        if (errno == EINTR) return core::Status::ok();
        return core::ioError("poll(): {}", errnoText(errno));
    }
    if (pollfds_[0].revents != 0) {
        *stopped = true;
        return core::Status::ok();
    }
    const size_t num_clients = clients_.size();  // clients accepted below are polled next round
    if (pollfds_[1].revents != 0) acceptClients();
    for (size_t i = 0; i < num_clients; ++i) {
        Client& c = *clients_[i];
        const short revents = pollfds_[i + 2].revents;
        if (revents & (POLLIN | POLLHUP | POLLERR)) readFrom(c);
        if (!c.closed && (revents & POLLOUT)) writeTo(c);
    }
    expireWaiters();
    // A set can release waiters of other clients, whose buffered requests then proceed: repeat until quiet.
    for (bool progress = true; progress;) {
        progress = false;
        for (auto& c : clients_) {
            if (!c->closed && handleRequests(*c)) progress = true;
        }
    }
    std::erase_if(clients_, [](const std::unique_ptr<Client>& c) { return c->closed; });
    return core::Status::ok();
}

void StoreServer::Loop::acceptClients() {
    while (clients_.size() < kMaxStoreClients) {
        core::Result<core::UniqueFd> fd = acceptTcp(listener_.get(), Clock::now(), nullptr, "rendezvous store");
        if (!fd.isOk()) {
            if (fd.status().code() != core::StatusCode::kTimeout) {
                AFD_LOG_WARN("rendezvous store at {}: {}", address_, fd.status().message());
            }
            return;
        }
        auto client = std::make_unique<Client>();
        client->id = next_client_id_++;
        client->name = peerAddress(fd->get());
        client->fd = std::move(*fd);
        clients_.push_back(std::move(client));
    }
}

void StoreServer::Loop::readFrom(Client& c) {
    uint8_t buffer[16384];
    while (c.in.size() < kStoreLengthBytes + kMaxStoreRequestBody) {
        const size_t want = std::min(sizeof(buffer), kStoreLengthBytes + kMaxStoreRequestBody - c.in.size());
        const ssize_t n = ::recv(c.fd.get(), buffer, want, 0);
        if (n > 0) {
            c.in.insert(c.in.end(), buffer, buffer + n);
            continue;
        }
        if (n == 0) return dropClient(c, "closed the connection");
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        return dropClient(c, errnoText(errno));
    }
}

void StoreServer::Loop::writeTo(Client& c) {
    while (c.out_done < c.out.size()) {
        const ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_done, c.out.size() - c.out_done, MSG_NOSIGNAL);
        if (n > 0) {
            c.out_done += static_cast<size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        return dropClient(c, n < 0 ? errnoText(errno) : "send() wrote nothing");
    }
    c.out.clear();
    c.out_done = 0;
}

bool StoreServer::Loop::handleRequests(Client& c) {
    bool handled = false;
    // NOTE: requests of one client are answered in order; a blocked get holds back the ones after it, and a
    // client that does not read its replies stops being served once one reply is pending.
    while (!c.closed && !c.waiting && c.out.size() <= kMaxStoreReplyBody) {
        core::Result<std::optional<DecodedStoreRequest>> decoded = decodeStoreRequest(c.in);
        if (!decoded.isOk()) {
            dropClient(c, decoded.status().message());
            break;
        }
        if (!decoded->has_value()) break;
        StoreRequest& request = (*decoded)->request;
        std::string& key = request.key;
        c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>((*decoded)->consumed));
        handled = true;
        if (request.op == kStoreOpSet) {
            auto it = data_.find(key);
            if (it != data_.end() && (request.flags & kStoreFlagExclusive)) {
                reply(c, kStoreReplyExists, it->second.value);
                continue;
            }
            if (it == data_.end() && data_.size() >= kMaxStoreKeys) {
                dropClient(c, fmt::format("the store holds {} keys already", kMaxStoreKeys));
                break;
            }
            // NOTE: a previous owner's `owned` set may still name the key; dropClient checks the owner before erasing.
            Entry& entry = data_[key];
            entry.value = std::move(request.value);
            entry.owner = 0;
            if (request.flags & kStoreFlagOwned) {
                entry.owner = c.id;
                c.owned.insert(key);
            }
            reply(c, kStoreReplyOk, {});
            wakeWaiters(key);
        } else {  // a get
            auto it = data_.find(key);
            if (it != data_.end()) {
                reply(c, kStoreReplyOk, it->second.value);
            } else if (request.timeout_ms == 0) {
                reply(c, kStoreReplyNotFound, {});
            } else {
                c.waiting = true;
                c.wait_key = std::move(key);
                c.wait_deadline = deadlineAfter(milliseconds(std::min(request.timeout_ms, kMaxStoreWaitMs)));
            }
        }
    }
    return handled;
}

void StoreServer::Loop::reply(Client& c, uint8_t code, std::string_view value) {
    appendStoreReply(code, value, c.out);
    writeTo(c);
}

void StoreServer::Loop::dropClient(Client& c, std::string_view why) {
    if (c.closed) return;
    size_t dropped_keys = 0;
    for (const std::string& key : c.owned) {
        auto it = data_.find(key);
        if (it == data_.end() || it->second.owner != c.id) continue;
        data_.erase(it);
        ++dropped_keys;
    }
    c.owned.clear();
    AFD_LOG_DEBUG("rendezvous store at {}: dropping client {} and the {} key(s) it owned: {}", address_, c.name,
                  dropped_keys, why);
    c.closed = true;
    c.waiting = false;
    c.fd.reset();
}

void StoreServer::Loop::wakeWaiters(const std::string& key) {
    const std::string& value = data_.at(key).value;
    for (auto& c : clients_) {
        if (c->closed || !c->waiting || c->wait_key != key) continue;
        c->waiting = false;
        reply(*c, kStoreReplyOk, value);
    }
}

void StoreServer::Loop::expireWaiters() {
    const Clock::time_point now = Clock::now();
    for (auto& c : clients_) {
        if (c->closed || !c->waiting || c->wait_deadline > now) continue;
        c->waiting = false;
        reply(*c, kStoreReplyNotFound, {});
    }
}

StoreServer::StoreServer(std::unique_ptr<Loop> loop, std::unique_ptr<Canceller> wake, int port, std::string address)
    : loop_(std::move(loop)), wake_(std::move(wake)), port_(port), address_(std::move(address)) {
    thread_ = std::jthread([this](std::stop_token stop) { loop_->run(stop, *wake_); });
}

StoreServer::~StoreServer() {
    thread_.request_stop();
    wake_->cancel();
    // ~jthread joins.
}

core::Result<std::unique_ptr<StoreServer>> StoreServer::start(const std::string& host, int port) {
    core::Result<Listener> listener = listenTcp(host, port);
    if (!listener.isOk()) return listener.status().withContext("hosting the rendezvous store");
    AFD_ASSIGN_OR_RETURN(std::unique_ptr<Canceller> wake, Canceller::create());
    const int bound = listener->port;
    std::string address = HostPort{host, bound}.toString();
    auto loop = std::make_unique<Loop>(std::move(listener->fd), address);
    AFD_LOG_INFO("rendezvous store listening on {}", address);
    return std::unique_ptr<StoreServer>(new StoreServer(std::move(loop), std::move(wake), bound, std::move(address)));
}

// ---- client ----

core::Result<std::unique_ptr<StoreClient>> StoreClient::connect(const HostPort& address, Deadline deadline,
                                                                const Canceller* cancel, milliseconds report_every,
                                                                milliseconds reply_slack) {
    AFD_ASSIGN_OR_RETURN(core::UniqueFd fd, connectTcp(address, deadline, cancel,
                                                       "the rendezvous store (ffn rank 0 hosts it)", report_every));
    return std::unique_ptr<StoreClient>(new StoreClient(std::move(fd), address, cancel, reply_slack));
}

core::Result<StoreReply> StoreClient::call(uint8_t op, uint8_t flags, std::string_view key, std::string_view value,
                                           milliseconds wait) {
    const std::string where = fmt::format("rendezvous store at {}", address_.toString());
    if (!fd_.valid()) return core::peerLost("{}: the connection was closed after an earlier failure", where);
    if (key.empty() || key.size() > kMaxStoreKeyBytes) {
        return core::invalidArgument("{}: key '{}' must have 1..{} bytes", where, key, kMaxStoreKeyBytes);
    }
    if (value.size() > kMaxStoreValueBytes) {
        return core::invalidArgument("{}: value of key '{}' has {} bytes, at most {}", where, key, value.size(),
                                     kMaxStoreValueBytes);
    }
    const auto wait_ms = static_cast<uint32_t>(std::clamp<int64_t>(wait.count(), 0, kMaxStoreWaitMs));
    std::string request;
    appendStoreRequest({op, flags, wait_ms, std::string(key), std::string(value)}, request);

    const Deadline deadline = deadlineAfter(milliseconds(wait_ms) + reply_slack_);
    core::Status status = sendAll(fd_.get(), request.data(), request.size(), deadline, cancel_, where);
    uint8_t length[kStoreLengthBytes];
    if (status.isOk()) status = recvAll(fd_.get(), length, sizeof(length), deadline, cancel_, where);
    StoreReply reply;
    if (status.isOk()) {
        const core::Result<uint32_t> body = decodeStoreReplyLength(length, where);
        if (!body.isOk()) {
            status = body.status();
        } else {
            std::vector<uint8_t> bytes(*body);
            status = recvAll(fd_.get(), bytes.data(), bytes.size(), deadline, cancel_, where);
            if (status.isOk()) reply = decodeStoreReplyBody(bytes);
        }
    }
    if (!status.isOk()) {
        fd_.reset();  // the stream is out of step with the server now
        return status;
    }
    return reply;
}

core::Status StoreClient::set(std::string_view key, std::string_view value, KeyLifetime lifetime) {
    AFD_ASSIGN_OR_RETURN(StoreReply reply, call(kStoreOpSet, ownedFlag(lifetime), key, value, milliseconds(0)));
    if (reply.code != kStoreReplyOk) {
        return core::corrupt("rendezvous store at {}: unexpected reply {} to set '{}'", address_.toString(), reply.code,
                             key);
    }
    return core::Status::ok();
}

core::Result<std::optional<std::string>> StoreClient::setIfAbsent(std::string_view key, std::string_view value,
                                                                  KeyLifetime lifetime) {
    AFD_ASSIGN_OR_RETURN(StoreReply reply,
                         call(kStoreOpSet, kStoreFlagExclusive | ownedFlag(lifetime), key, value, milliseconds(0)));
    if (reply.code == kStoreReplyOk) return std::optional<std::string>();
    if (reply.code == kStoreReplyExists) return std::optional<std::string>(std::move(reply.value));
    return core::corrupt("rendezvous store at {}: unexpected reply {} to set '{}'", address_.toString(), reply.code,
                         key);
}

core::Result<std::string> StoreClient::get(std::string_view key, milliseconds timeout) {
    AFD_ASSIGN_OR_RETURN(StoreReply reply, call(kStoreOpGet, 0, key, {}, timeout));
    if (reply.code == kStoreReplyOk) return std::move(reply.value);
    if (reply.code == kStoreReplyNotFound) {
        return core::timeoutError("rendezvous store at {}: key '{}' not set within {}", address_.toString(), key,
                                  formatDuration(timeout));
    }
    return core::corrupt("rendezvous store at {}: unexpected reply {} to get '{}'", address_.toString(), reply.code,
                         key);
}

}  // namespace afd::transport
