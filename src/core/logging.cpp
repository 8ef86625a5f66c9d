#include "core/logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace afd::core {
namespace {

LogLevel initialLevel() {
    LogLevel level = LogLevel::kInfo;
    if (const char* env = std::getenv("AFD_LOG_LEVEL")) parseLogLevel(env, &level);
    return level;
}

std::atomic<int>& levelStorage() {
    static std::atomic<int> level{static_cast<int>(initialLevel())};
    return level;
}

struct Sink {
    std::mutex mutex;
    std::shared_ptr<spdlog::logger> logger;
    std::string tag;
    std::vector<LogCapture*> captures;  // guarded by mutex
};

Sink& sink() {
    static Sink* instance = [] {
        auto* s = new Sink();  // NOTE: leaked on purpose so logging works during static destruction.
        s->logger = std::make_shared<spdlog::logger>("afd", std::make_shared<spdlog::sinks::stderr_sink_mt>());
        s->logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ %v");
        s->logger->set_level(spdlog::level::trace);
        return s;
    }();
    return *instance;
}

}  // namespace

void setLogLevel(LogLevel level) { levelStorage().store(static_cast<int>(level)); }
LogLevel logLevel() { return static_cast<LogLevel>(levelStorage().load(std::memory_order_relaxed)); }

bool parseLogLevel(std::string_view text, LogLevel* level) {
    if (text == "debug")
        *level = LogLevel::kDebug;
    else if (text == "info")
        *level = LogLevel::kInfo;
    else if (text == "warn" || text == "warning")
        *level = LogLevel::kWarn;
    else if (text == "error")
        *level = LogLevel::kError;
    else if (text == "off")
        *level = LogLevel::kOff;
    else
        return false;
    return true;
}

void setLogTag(std::string_view tag) {
    Sink& s = sink();
    std::lock_guard lock(s.mutex);
    s.tag = tag.empty() ? std::string() : fmt::format("[{}] ", tag);
}

void logMessage(LogLevel level, std::string_view message) {
    Sink& s = sink();
    spdlog::level::level_enum spd = spdlog::level::info;
    switch (level) {
        case LogLevel::kDebug:
            spd = spdlog::level::debug;
            break;
        case LogLevel::kInfo:
            spd = spdlog::level::info;
            break;
        case LogLevel::kWarn:
            spd = spdlog::level::warn;
            break;
        case LogLevel::kError:
            spd = spdlog::level::err;
            break;
        case LogLevel::kOff:
            return;
    }
    std::string tag;
    {
        std::lock_guard lock(s.mutex);
        tag = s.tag;
        for (LogCapture* capture : s.captures) capture->append(message);
    }
    s.logger->log(spd, "{}{}", tag, message);
}

LogCapture::LogCapture() {
    Sink& s = sink();
    std::lock_guard lock(s.mutex);
    s.captures.push_back(this);
}

LogCapture::~LogCapture() {
    Sink& s = sink();
    std::lock_guard lock(s.mutex);
    std::erase(s.captures, this);
}

std::vector<std::string> LogCapture::lines() const {
    std::lock_guard lock(mutex_);
    return lines_;
}

void LogCapture::append(std::string_view message) {
    std::lock_guard lock(mutex_);
    lines_.emplace_back(message);
}

}  // namespace afd::core
