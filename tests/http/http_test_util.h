// Helpers of the http layer's tests: a raw TCP client for exact bytes, and the status line of a raw reply.
#pragma once

#include <chrono>
#include <string>

#include "core/unique_fd.h"

namespace afd::http::testing {

constexpr auto kTestTimeout = std::chrono::seconds(10);  // hard bound on every wait in these tests

// A plain TCP client on 127.0.0.1:port for sending exact bytes (malformed, partial or pipelined requests).
class RawClient {
public:
    explicit RawClient(int port);
    bool connected() const { return connected_; }
    // Sends everything it can; false when the peer closed the connection.
    bool send(const std::string& bytes);
    // Reads until the server closes the connection or `timeout` passes; `closed` says which.
    std::string readToEnd(bool* closed = nullptr, std::chrono::milliseconds timeout = kTestTimeout);
    // Reads until `marker` arrived (true) or the connection closed or `timeout` passed (false); `data` gets it all.
    bool readUntil(const std::string& marker, std::string& data, std::chrono::milliseconds timeout = kTestTimeout);
    void shutdownWrite();
    void close() { fd_.reset(); }

private:
    core::UniqueFd fd_;
    bool connected_ = false;
};

// The status line of a raw reply, e.g. "HTTP/1.1 404 Not Found".
std::string statusLine(const std::string& reply);

// A TCP port on 127.0.0.1 that nobody listens on (bound without listening, for as long as the object lives).
class UnlistenedPort {
public:
    UnlistenedPort();
    int port() const { return port_; }

private:
    core::UniqueFd fd_;
    int port_ = 0;
};

}  // namespace afd::http::testing
