// AFD_CHECK and friends: throw afd::core::Error for bugs and broken invariants inside a process.
// Untrusted input (files, sockets, configs) is reported with Status instead (status.h).
#pragma once

#include <fmt/core.h>

#include <stdexcept>
#include <string>

namespace afd::core {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

[[noreturn]] void throwCheckFailure(const char* file, int line, const char* condition, const std::string& message);

}  // namespace afd::core

// AFD_CHECK(cond, "format {}", args…): the message is formatted only when the check fails.
#define AFD_CHECK(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) [[unlikely]] {                                                                \
            ::afd::core::throwCheckFailure(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
        }                                                                                          \
    } while (0)

#define AFD_FAIL(...) ::afd::core::throwCheckFailure(__FILE__, __LINE__, "unreachable", ::fmt::format(__VA_ARGS__))

// Throws when a Status-returning call fails where failure is a bug (e.g. writing a file we just created).
#define AFD_CHECK_OK(expr)                                                                           \
    do {                                                                                             \
        const ::afd::core::Status afd_check_status_ = (expr);                                        \
        if (!afd_check_status_.isOk()) [[unlikely]] {                                                \
            ::afd::core::throwCheckFailure(__FILE__, __LINE__, #expr, afd_check_status_.toString()); \
        }                                                                                            \
    } while (0)
