#include "http/http_test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

namespace afd::http::testing {

RawClient::RawClient(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
}

bool RawClient::send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
        const ssize_t n = ::send(fd_.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) return false;
        sent += static_cast<size_t>(n);
    }
    return true;
}

std::string RawClient::readToEnd(bool* closed, std::chrono::milliseconds timeout) {
    std::string data;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buffer[4096];
    for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        pollfd entry{fd_.get(), POLLIN, 0};
        if (left.count() <= 0 || ::poll(&entry, 1, static_cast<int>(left.count())) <= 0) break;
        const ssize_t n = ::recv(fd_.get(), buffer, sizeof(buffer), 0);
        if (n <= 0) {
            if (closed != nullptr) *closed = true;
            return data;
        }
        data.append(buffer, static_cast<size_t>(n));
    }
    if (closed != nullptr) *closed = false;
    return data;
}

bool RawClient::readUntil(const std::string& marker, std::string& data, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buffer[4096];
    while (data.find(marker) == std::string::npos) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        pollfd entry{fd_.get(), POLLIN, 0};
        if (left.count() <= 0 || ::poll(&entry, 1, static_cast<int>(left.count())) <= 0) return false;
        const ssize_t n = ::recv(fd_.get(), buffer, sizeof(buffer), 0);
        if (n <= 0) return data.find(marker) != std::string::npos;
        data.append(buffer, static_cast<size_t>(n));
    }
    return true;
}

void RawClient::shutdownWrite() { ::shutdown(fd_.get(), SHUT_WR); }

std::string statusLine(const std::string& reply) { return reply.substr(0, reply.find("\r\n")); }

UnlistenedPort::UnlistenedPort() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) return;
    socklen_t length = sizeof(address);
    if (::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&address), &length) == 0) port_ = ntohs(address.sin_port);
}

}  // namespace afd::http::testing
