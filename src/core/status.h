// Status and Result<T>: the error type at every untrusted boundary (files, sockets, HTTP, configs).
// Bugs and broken invariants inside a process throw instead (see check.h).
#pragma once

#include <fmt/core.h>

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace afd::core {

enum class StatusCode {
    kOk = 0,
    kInvalidArgument,  // a value breaks a rule (config field, CLI flag, request)
    kNotFound,         // a file, tensor or key is absent
    kIoError,          // the operating system refused (open, read, connect …)
    kCorrupt,          // bytes do not parse (file header, frame)
    kUnsupported,      // valid but not something this engine does
    kMismatch,         // two sides disagree (handshake, shapes)
    kTimeout,          // a bounded wait ran out
    kPeerLost,         // a connection closed or failed
    kCancelled,        // stopped on request
    kInternal,         // anything else
};

std::string_view statusCodeName(StatusCode code);

class [[nodiscard]] Status {
public:
    Status() = default;
    Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

    static Status ok() { return Status(); }

    bool isOk() const { return code_ == StatusCode::kOk; }
    explicit operator bool() const { return isOk(); }
    StatusCode code() const { return code_; }
    const std::string& message() const { return message_; }
    std::string toString() const;

    // Prefixes the message with context ("loading model.safetensors: " + message); keeps the code.
    Status withContext(std::string_view context) const;

private:
    StatusCode code_ = StatusCode::kOk;
    std::string message_;
};

template <typename... Args>
Status makeStatus(StatusCode code, fmt::format_string<Args...> format, Args&&... args) {
    return Status(code, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
Status invalidArgument(fmt::format_string<Args...> format, Args&&... args) {
    return makeStatus(StatusCode::kInvalidArgument, format, std::forward<Args>(args)...);
}
template <typename... Args>
Status notFound(fmt::format_string<Args...> format, Args&&... args) {
    return makeStatus(StatusCode::kNotFound, format, std::forward<Args>(args)...);
}
template <typename... Args>
Status ioError(fmt::format_string<Args...> format, Args&&... args) {
    return makeStatus(StatusCode::kIoError, format, std::forward<Args>(args)...);
}
template <typename... Args>
Status corrupt(fmt::format_string<Args...> format, Args&&... args) {
    return makeStatus(StatusCode::kCorrupt, format, std::forward<Args>(args)...);
}
template <typename... Args>
Status unsupported(fmt::format_string<Args...> format, Args&&... args) {
    return makeStatus(StatusCode::kUnsupported, format, std::forward<Args>(args)...);
}
template <typename... Args>
Status mismatch(fmt::format_string<Args...> format, Args&&... args) {
    return makeStatus(StatusCode::kMismatch, format, std::forward<Args>(args)...);
}
template <typename... Args>
Status timeoutError(fmt::format_string<Args...> format, Args&&... args) {
    return makeStatus(StatusCode::kTimeout, format, std::forward<Args>(args)...);
}
template <typename... Args>
Status peerLost(fmt::format_string<Args...> format, Args&&... args) {
    return makeStatus(StatusCode::kPeerLost, format, std::forward<Args>(args)...);
}
template <typename... Args>
Status internalError(fmt::format_string<Args...> format, Args&&... args) {
    return makeStatus(StatusCode::kInternal, format, std::forward<Args>(args)...);
}

// Holds either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
public:
    Result(T value) : data_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
    Result(Status status) : data_(std::move(status)) {  // NOLINT(google-explicit-constructor)
        if (std::get<Status>(data_).isOk()) {
            data_ = Status(StatusCode::kInternal, "Result constructed from an ok Status without a value");
        }
    }

    bool isOk() const { return std::holds_alternative<T>(data_); }
    explicit operator bool() const { return isOk(); }

    const Status& status() const {
        static const Status kOkStatus;
        return isOk() ? kOkStatus : std::get<Status>(data_);
    }
    // Precondition: isOk(). Throws afd::core::Error otherwise (a bug in the caller).
    T& value() &;
    const T& value() const&;
    T&& value() &&;

    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }

private:
    std::variant<T, Status> data_;
};

[[noreturn]] void throwBadResultAccess(const Status& status);

template <typename T>
T& Result<T>::value() & {
    if (!isOk()) throwBadResultAccess(std::get<Status>(data_));
    return std::get<T>(data_);
}
template <typename T>
const T& Result<T>::value() const& {
    if (!isOk()) throwBadResultAccess(std::get<Status>(data_));
    return std::get<T>(data_);
}
template <typename T>
T&& Result<T>::value() && {
    if (!isOk()) throwBadResultAccess(std::get<Status>(data_));
    return std::move(std::get<T>(data_));
}

}  // namespace afd::core

#define AFD_STATUS_CONCAT_INNER(a, b) a##b
#define AFD_STATUS_CONCAT(a, b) AFD_STATUS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` (a Status) is not ok.
#define AFD_RETURN_IF_ERROR(expr)                            \
    do {                                                     \
        ::afd::core::Status afd_status_tmp_ = (expr);        \
        if (!afd_status_tmp_.isOk()) return afd_status_tmp_; \
    } while (0)

// `AFD_ASSIGN_OR_RETURN(auto x, makeX())`: binds the value or returns the Status.
#define AFD_ASSIGN_OR_RETURN(lhs, expr) AFD_ASSIGN_OR_RETURN_IMPL(AFD_STATUS_CONCAT(afd_result_, __LINE__), lhs, expr)
#define AFD_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
    auto tmp = (expr);                            \
    if (!tmp.isOk()) return tmp.status();         \
    lhs = std::move(tmp).value()
