#include "transport/rendezvous_store.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "core/logging.h"

namespace afd::transport {
namespace {

using std::chrono::milliseconds;

constexpr uint8_t kOpSet = 1;
constexpr uint8_t kOpGet = 2;
constexpr uint8_t kFlagExclusive = 1;

constexpr uint8_t kReplyOk = 0;
constexpr uint8_t kReplyNotFound = 1;  // a get whose wait ran out
constexpr uint8_t kReplyExists = 2;    // an exclusive set of a present key; the value is the present one

constexpr size_t kRequestFixedBytes = 8;  // op, flags, key length u16, timeout u32
constexpr size_t kMaxRequestBody = kRequestFixedBytes + kMaxStoreKeyBytes + kMaxStoreValueBytes;
constexpr size_t kMaxReplyBody = 1 + kMaxStoreValueBytes;
constexpr uint32_t kMaxWaitMs = 24u * 3600u * 1000u;
// How long a client waits for a reply beyond the server-side wait it asked for.
constexpr milliseconds kReplySlack(10000);

void putU32(std::string& out, uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
uint32_t getU32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24); }

}  // namespace

// ---- server ----

class StoreServer::Loop {
public:
    Loop(core::UniqueFd listener, std::string address) : listener_(std::move(listener)), address_(std::move(address)) {}

    // The thread body. Never throws: a failure of the server itself is logged and ends the loop.
    void run(std::stop_token stop, const Canceller& wake) noexcept;

private:
    struct Client {
        core::UniqueFd fd;
        std::string name;
        std::vector<uint8_t> in;
        std::string out;
        size_t out_done = 0;
        bool waiting = false;  // a get blocked until `wait_key` is set or `wait_deadline`
        std::string wait_key;
        Clock::time_point wait_deadline;
        bool closed = false;
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
    std::unordered_map<std::string, std::string> data_;
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
        if (c->in.size() < 4 + kMaxRequestBody) events |= POLLIN;
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
        client->name = peerAddress(fd->get());
        client->fd = std::move(*fd);
        clients_.push_back(std::move(client));
    }
}

void StoreServer::Loop::readFrom(Client& c) {
    uint8_t buffer[16384];
    while (c.in.size() < 4 + kMaxRequestBody) {
        const size_t want = std::min(sizeof(buffer), 4 + kMaxRequestBody - c.in.size());
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
    while (!c.closed && !c.waiting && c.out.size() <= kMaxReplyBody && c.in.size() >= 4) {
        const uint32_t body = getU32(c.in.data());
        if (body < kRequestFixedBytes || body > kMaxRequestBody) {
            dropClient(c,
                       fmt::format("request of {} bytes (expected {}..{})", body, kRequestFixedBytes, kMaxRequestBody));
            break;
        }
        if (c.in.size() < 4 + body) break;
        const uint8_t* p = c.in.data() + 4;
        const uint8_t op = p[0];
        const uint8_t flags = p[1];
        const size_t key_len = p[2] | (p[3] << 8);
        const uint32_t timeout_ms = getU32(p + 4);
        if (key_len == 0 || key_len > kMaxStoreKeyBytes || kRequestFixedBytes + key_len > body) {
            dropClient(c, fmt::format("key of {} bytes (expected 1..{})", key_len, kMaxStoreKeyBytes));
            break;
        }
        std::string key(reinterpret_cast<const char*>(p + kRequestFixedBytes), key_len);
        std::string value(reinterpret_cast<const char*>(p + kRequestFixedBytes + key_len),
                          body - kRequestFixedBytes - key_len);
        c.in.erase(c.in.begin(), c.in.begin() + 4 + body);
        handled = true;
        if (op == kOpSet && (flags & ~kFlagExclusive) == 0) {
            auto it = data_.find(key);
            if (it != data_.end() && (flags & kFlagExclusive)) {
                reply(c, kReplyExists, it->second);
                continue;
            }
            if (it == data_.end() && data_.size() >= kMaxStoreKeys) {
                dropClient(c, fmt::format("the store holds {} keys already", kMaxStoreKeys));
                break;
            }
            data_[key] = std::move(value);
            reply(c, kReplyOk, {});
            wakeWaiters(key);
        } else if (op == kOpGet && flags == 0 && value.empty()) {
            auto it = data_.find(key);
            if (it != data_.end()) {
                reply(c, kReplyOk, it->second);
            } else if (timeout_ms == 0) {
                reply(c, kReplyNotFound, {});
            } else {
                c.waiting = true;
                c.wait_key = std::move(key);
                c.wait_deadline = deadlineAfter(milliseconds(std::min(timeout_ms, kMaxWaitMs)));
            }
        } else {
            dropClient(c, fmt::format("malformed request (op {}, flags {})", op, flags));
            break;
        }
    }
    return handled;
}

void StoreServer::Loop::reply(Client& c, uint8_t code, std::string_view value) {
    putU32(c.out, static_cast<uint32_t>(1 + value.size()));
    c.out.push_back(static_cast<char>(code));
    c.out.append(value);
    writeTo(c);
}

void StoreServer::Loop::dropClient(Client& c, std::string_view why) {
    if (c.closed) return;
    AFD_LOG_DEBUG("rendezvous store at {}: dropping client {}: {}", address_, c.name, why);
    c.closed = true;
    c.waiting = false;
    c.fd.reset();
}

void StoreServer::Loop::wakeWaiters(const std::string& key) {
    const std::string& value = data_.at(key);
    for (auto& c : clients_) {
        if (c->closed || !c->waiting || c->wait_key != key) continue;
        c->waiting = false;
        reply(*c, kReplyOk, value);
    }
}

void StoreServer::Loop::expireWaiters() {
    const Clock::time_point now = Clock::now();
    for (auto& c : clients_) {
        if (c->closed || !c->waiting || c->wait_deadline > now) continue;
        c->waiting = false;
        reply(*c, kReplyNotFound, {});
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
                                                                const Canceller* cancel, milliseconds report_every) {
    AFD_ASSIGN_OR_RETURN(core::UniqueFd fd, connectTcp(address, deadline, cancel,
                                                       "the rendezvous store (ffn rank 0 hosts it)", report_every));
    return std::unique_ptr<StoreClient>(new StoreClient(std::move(fd), address, cancel));
}

core::Result<StoreClient::Reply> StoreClient::call(uint8_t op, uint8_t flags, std::string_view key,
                                                   std::string_view value, milliseconds wait) {
    const std::string where = fmt::format("rendezvous store at {}", address_.toString());
    if (!fd_.valid()) return core::peerLost("{}: the connection was closed after an earlier failure", where);
    if (key.empty() || key.size() > kMaxStoreKeyBytes) {
        return core::invalidArgument("{}: key '{}' must have 1..{} bytes", where, key, kMaxStoreKeyBytes);
    }
    if (value.size() > kMaxStoreValueBytes) {
        return core::invalidArgument("{}: value of key '{}' has {} bytes, at most {}", where, key, value.size(),
                                     kMaxStoreValueBytes);
    }
    const auto wait_ms = static_cast<uint32_t>(std::clamp<int64_t>(wait.count(), 0, kMaxWaitMs));
    std::string request;
    putU32(request, static_cast<uint32_t>(kRequestFixedBytes + key.size() + value.size()));
    request.push_back(static_cast<char>(op));
    request.push_back(static_cast<char>(flags));
    request.push_back(static_cast<char>(key.size() & 0xff));
    request.push_back(static_cast<char>(key.size() >> 8));
    putU32(request, wait_ms);
    request.append(key);
    request.append(value);

    const Deadline deadline = deadlineAfter(milliseconds(wait_ms) + kReplySlack);
    core::Status status = sendAll(fd_.get(), request.data(), request.size(), deadline, cancel_, where);
    uint8_t length[4];
    if (status.isOk()) status = recvAll(fd_.get(), length, sizeof(length), deadline, cancel_, where);
    Reply reply;
    if (status.isOk()) {
        const uint32_t body = getU32(length);
        if (body < 1 || body > kMaxReplyBody) {
            status = core::corrupt("{}: reply of {} bytes (expected 1..{})", where, body, kMaxReplyBody);
        } else {
            std::string bytes(body, '\0');
            status = recvAll(fd_.get(), bytes.data(), body, deadline, cancel_, where);
            reply.code = static_cast<uint8_t>(bytes[0]);
            reply.value = bytes.substr(1);
        }
    }
    if (!status.isOk()) {
        fd_.reset();  // the stream is out of step with the server now
        return status;
    }
    return reply;
}

core::Status StoreClient::set(std::string_view key, std::string_view value) {
    AFD_ASSIGN_OR_RETURN(Reply reply, call(kOpSet, 0, key, value, milliseconds(0)));
    if (reply.code != kReplyOk) {
        return core::corrupt("rendezvous store at {}: unexpected reply {} to set '{}'", address_.toString(), reply.code,
                             key);
    }
    return core::Status::ok();
}

core::Result<std::optional<std::string>> StoreClient::setIfAbsent(std::string_view key, std::string_view value) {
    AFD_ASSIGN_OR_RETURN(Reply reply, call(kOpSet, kFlagExclusive, key, value, milliseconds(0)));
    if (reply.code == kReplyOk) return std::optional<std::string>();
    if (reply.code == kReplyExists) return std::optional<std::string>(std::move(reply.value));
    return core::corrupt("rendezvous store at {}: unexpected reply {} to set '{}'", address_.toString(), reply.code,
                         key);
}

core::Result<std::string> StoreClient::get(std::string_view key, milliseconds timeout) {
    AFD_ASSIGN_OR_RETURN(Reply reply, call(kOpGet, 0, key, {}, timeout));
    if (reply.code == kReplyOk) return std::move(reply.value);
    if (reply.code == kReplyNotFound) {
        return core::timeoutError("rendezvous store at {}: key '{}' not set within {}", address_.toString(), key,
                                  formatDuration(timeout));
    }
    return core::corrupt("rendezvous store at {}: unexpected reply {} to get '{}'", address_.toString(), reply.code,
                         key);
}

}  // namespace afd::transport
