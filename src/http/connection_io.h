// The bytes of one server connection (internal to the http layer): buffered reads under the request's deadline and
// the head's byte limit, writes under the write timeout. http_server.cpp hands it to cpp-httplib as its Stream.
// Used by the one worker thread serving the connection.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <string>

#include "http/socket_io.h"

namespace afd::http::detail {

class ConnectionIo {
public:
    // `fd` stays owned by the caller.
    ConnectionIo(int fd, size_t max_header_bytes, std::chrono::milliseconds write_timeout);

    // A new request: reads fail once `read_deadline` passes (timedOut()), and the head may take max_header_bytes.
    void beginRequest(Clock::time_point read_deadline);
    // The head is complete (its parser says so): later reads are body bytes, not counted against the head limit.
    void endHead() { in_head_ = false; }

    // Bytes received and not read yet (a pipelined request).
    bool buffered() const { return begin_ < end_; }
    bool timedOut() const { return timed_out_; }
    bool headTooLarge() const { return head_too_large_; }
    // Bytes of the current request read so far.
    size_t requestBytes() const { return request_bytes_; }

    // The Stream operations (cpp-httplib's meaning): -1 for a failure, 0 from read() at the end of the stream.
    // Once the deadline passed or the head outgrew its limit, every read and write fails: the server answers such a
    // request itself (408, 431).
    bool readable() const;
    bool writable() const;  // within the write timeout, and the peer has not closed its end
    ssize_t read(char* data, size_t size);
    ssize_t write(const char* data, size_t size);

    int fd() const { return fd_; }
    const std::string& remoteIp() const { return remote_ip_; }
    int remotePort() const { return remote_port_; }
    const std::string& localIp() const { return local_ip_; }
    int localPort() const { return local_port_; }

private:
    bool failed() const { return timed_out_ || head_too_large_; }

    const int fd_;
    const size_t max_header_bytes_;
    const std::chrono::milliseconds write_timeout_;
    std::array<char, 16 * 1024> buffer_{};
    size_t begin_ = 0;  // unread bytes are buffer_[begin_, end_)
    size_t end_ = 0;
    Clock::time_point deadline_{};
    bool in_head_ = true;
    size_t head_bytes_ = 0;
    size_t request_bytes_ = 0;
    bool timed_out_ = false;
    bool head_too_large_ = false;
    std::string remote_ip_;
    int remote_port_ = 0;
    std::string local_ip_;
    int local_port_ = 0;
};

}  // namespace afd::http::detail
