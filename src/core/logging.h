// Process-wide logging to stderr. Thread-safe. The backend (spdlog) stays out of this header.
#pragma once

#include <fmt/core.h>

#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace afd::core {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void setLogLevel(LogLevel level);
LogLevel logLevel();
// Parses "debug", "info", "warn", "error", "off"; returns false for anything else.
bool parseLogLevel(std::string_view text, LogLevel* level);
// Adds a tag to every line of this process (e.g. "ffn:1"), so interleaved logs of several ranks stay readable.
void setLogTag(std::string_view tag);
void logMessage(LogLevel level, std::string_view message);

// Collects the messages logged (at the current level or above, from any thread) while it lives, besides printing
// them: tests check what a process says, e.g. that a long wait names whom it waits for. Thread-safe.
class LogCapture {
public:
    LogCapture();
    ~LogCapture();
    LogCapture(const LogCapture&) = delete;
    LogCapture& operator=(const LogCapture&) = delete;

    // The messages so far, in order, without time, level or tag.
    std::vector<std::string> lines() const;

private:
    friend void logMessage(LogLevel level, std::string_view message);
    void append(std::string_view message);

    mutable std::mutex mutex_;
    std::vector<std::string> lines_;
};

}  // namespace afd::core

#define AFD_LOG_AT(level, ...)                                                      \
    do {                                                                            \
        if (static_cast<int>(level) >= static_cast<int>(::afd::core::logLevel())) { \
            ::afd::core::logMessage(level, ::fmt::format(__VA_ARGS__));             \
        }                                                                           \
    } while (0)
#define AFD_LOG_DEBUG(...) AFD_LOG_AT(::afd::core::LogLevel::kDebug, __VA_ARGS__)
#define AFD_LOG_INFO(...) AFD_LOG_AT(::afd::core::LogLevel::kInfo, __VA_ARGS__)
#define AFD_LOG_WARN(...) AFD_LOG_AT(::afd::core::LogLevel::kWarn, __VA_ARGS__)
#define AFD_LOG_ERROR(...) AFD_LOG_AT(::afd::core::LogLevel::kError, __VA_ARGS__)
