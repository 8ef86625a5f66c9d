#include "core/env.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>

namespace afd::core {

std::optional<std::string> envString(const char* name) {
    const char* value = std::getenv(name);
    if (value == nullptr) return std::nullopt;
    return std::string(value);
}

Result<int64_t> envInt(const char* name, int64_t fallback, int64_t min, int64_t max) {
    auto text = envString(name);
    if (!text) return fallback;
    int64_t value = 0;
    const char* begin = text->data();
    const char* end = begin + text->size();
    auto [ptr, ec] = std::from_chars(begin, end, value);
    if (ec != std::errc() || ptr != end) return invalidArgument("{}={:?} is not an integer", name, *text);
    if (value < min || value > max) return invalidArgument("{}={} must be in [{}, {}]", name, value, min, max);
    return value;
}

Result<bool> envBool(const char* name, bool fallback) {
    auto text = envString(name);
    if (!text) return fallback;
    std::string lower = *text;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") return true;
    if (lower == "0" || lower == "false" || lower == "no" || lower == "off") return false;
    return invalidArgument("{}={:?} is not a boolean (use 1/0, true/false, yes/no, on/off)", name, *text);
}

}  // namespace afd::core
