// Socket waits and writes the server needs around cpp-httplib (internal to the http layer): every wait has a
// deadline, every send uses MSG_NOSIGNAL, nothing throws.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

namespace afd::http::detail {

using Clock = std::chrono::steady_clock;

enum class WaitResult { kReady, kTimeout, kFailed };

// Waits until `fd` reports `events` (POLLIN, POLLOUT), an error or a hang-up (kReady: the next call says which),
// or `deadline` passes (kTimeout). EINTR is retried; kFailed when poll itself fails.
WaitResult waitFor(int fd, short events, Clock::time_point deadline);

// Without blocking: whether the peer has closed, reset or half-closed the connection. Bytes it sent and nobody read
// yet (a pipelined request) do not count as closing.
bool peerClosed(int fd);

// Sends all of `bytes` unless the peer stops taking them before `deadline`; false then.
bool sendAll(int fd, std::string_view bytes, Clock::time_point deadline);

// Half-closes the sending side, then reads and drops what the peer still sends until it closes, `max_linger`
// passes or `max_bytes` arrived; the caller closes `fd` after. Used after a reply that left request bytes unread:
// closing at once would reset the connection, and a reset can destroy the reply before the client read it.
void drainBeforeClose(int fd, std::chrono::milliseconds max_linger, size_t max_bytes);

// A complete reply of the server itself (no handler): status line, JSON error body (http_message.h's errorBody),
// Content-Length, Connection: close.
std::string serverErrorReply(int status, std::string_view message);

// "IP" of the local or remote end of a connected socket ("" when unknown), and its port (0 when unknown).
void socketAddress(int fd, bool remote, std::string& ip, int& port);

}  // namespace afd::http::detail
