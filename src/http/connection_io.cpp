#include "http/connection_io.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace afd::http::detail {

ConnectionIo::ConnectionIo(int fd, size_t max_header_bytes, std::chrono::milliseconds write_timeout)
    : fd_(fd), max_header_bytes_(max_header_bytes), write_timeout_(write_timeout) {
    socketAddress(fd, /*remote=*/true, remote_ip_, remote_port_);
    socketAddress(fd, /*remote=*/false, local_ip_, local_port_);
}

void ConnectionIo::beginRequest(Clock::time_point read_deadline) {
    deadline_ = read_deadline;
    in_head_ = true;
    head_bytes_ = 0;
    request_bytes_ = 0;
    timed_out_ = false;
    head_too_large_ = false;
}

bool ConnectionIo::readable() const {
    return !failed() && (buffered() || waitFor(fd_, POLLIN, deadline_) == WaitResult::kReady);
}

bool ConnectionIo::writable() const {
    return !failed() && waitFor(fd_, POLLOUT, Clock::now() + write_timeout_) == WaitResult::kReady &&
           !peerClosed(fd_);
}

ssize_t ConnectionIo::read(char* data, size_t size) {
    if (failed()) return -1;
    if (size == 0) return 0;
    while (!buffered()) {
        const WaitResult wait = waitFor(fd_, POLLIN, deadline_);
        if (wait == WaitResult::kTimeout) timed_out_ = true;
        if (wait != WaitResult::kReady) return -1;
        const ssize_t n = ::recv(fd_, buffer_.data(), buffer_.size(), MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
        if (n <= 0) return n;  // the end of the stream, or a failure
        begin_ = 0;
        end_ = static_cast<size_t>(n);
    }
    const size_t take = std::min(size, end_ - begin_);
    if (in_head_) {
        if (head_bytes_ + take > max_header_bytes_) {
            head_too_large_ = true;
            return -1;
        }
        head_bytes_ += take;
    }
    std::memcpy(data, buffer_.data() + begin_, take);
    begin_ += take;
    request_bytes_ += take;
    return static_cast<ssize_t>(take);
}

ssize_t ConnectionIo::write(const char* data, size_t size) {
    if (failed()) return -1;
    if (waitFor(fd_, POLLOUT, Clock::now() + write_timeout_) != WaitResult::kReady) return -1;
    const ssize_t n = ::send(fd_, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;  // the caller writes again
    return n;
}

}  // namespace afd::http::detail
