#include "http/httplib_adapters.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

#include "http/socket_io.h"

namespace afd::http::detail {
namespace {

// Set while the accepting thread runs a job the pool refused (every worker busy, the queue full).
thread_local bool t_refusing = false;

// Headers cpp-httplib adds to every request itself (it inserts them beside any a client sent).
bool isLibraryHeader(std::string_view lower_name) {
    return lower_name == "remote_addr" || lower_name == "remote_port" || lower_name == "local_addr" ||
           lower_name == "local_port";
}

}  // namespace

std::string_view refusalMessage(int status) {
    switch (status) {
        case 400:
            return "malformed request";
        case 404:
            return "no such path";
        case 414:
            return "the request line is too long";
        case 416:
            return "unsatisfiable range";
        case 500:
            return "internal error";
        default:
            return "request refused";
    }
}

std::string shortened(std::string_view text) {
    constexpr size_t kMaxShown = 200;
    return text.size() <= kMaxShown ? std::string(text) : std::string(text.substr(0, kMaxShown)) + "...";
}

void fillRejection(httplib::Response& response, const HttpRejection& rejection, const std::string& allow) {
    response.status = rejection.status;
    response.set_content(errorBody(rejection.status, rejection.message), "application/json");
    if (!allow.empty()) response.set_header("Allow", allow);
    response.set_header("Connection", "close");
}

HttpRequest toRequest(const httplib::Request& request) {
    HttpRequest out;
    out.method = request.method;
    out.path = request.path;
    const size_t query = request.target.find('?');
    if (query != std::string::npos) out.query = request.target.substr(query + 1);
    out.headers.reserve(request.headers.size());
    for (const auto& [name, value] : request.headers) {
        std::string lower = name;
        std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
        if (!isLibraryHeader(lower)) out.headers.emplace_back(std::move(lower), value);
    }
    out.body = request.body;
    out.remote_address = request.remote_addr;
    out.remote_port = request.remote_port;
    return out;
}

void LibraryStream::get_remote_ip_and_port(std::string& ip, int& port) const {
    ip = io_.remoteIp();
    port = io_.remotePort();
}

void LibraryStream::get_local_ip_and_port(std::string& ip, int& port) const {
    ip = io_.localIp();
    port = io_.localPort();
}

void Library::raiseBacklog(int backlog) { ::listen(svr_sock_, backlog); }

void Library::closeListener() {
    const socket_t sock = svr_sock_.exchange(INVALID_SOCKET);
    if (sock == INVALID_SOCKET) return;
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
}

void PooledQueue::enqueue(std::function<void()> job) {
    if (pool_.tryPost(job)) return;
    t_refusing = true;
    job();
    t_refusing = false;
}

bool PooledQueue::refusing() { return t_refusing; }

bool ChunkWriter::write(std::string_view bytes) {
    if (failed_) return false;
    if (bytes.empty()) return true;
    if (!sink_.write(bytes.data(), bytes.size())) failed_ = true;
    return !failed_;
}

bool ChunkWriter::connected() {
    if (failed_ || stopping_.load()) return false;
    if (peerClosed(fd_)) failed_ = true;
    return !failed_;
}

}  // namespace afd::http::detail
