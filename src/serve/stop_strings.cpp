#include "serve/stop_strings.h"

#include <algorithm>
#include <utility>

namespace afd::serve {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) {
    for (std::string& stop : stops) {
        if (!stop.empty()) stops_.push_back(std::move(stop));
    }
}

std::string StopStringMatcher::push(std::string_view text) {
    if (matched_) return {};
    held_.append(text);
    // NOTE: the held tail never holds a whole stop string (it would have matched), so the earliest occurrence in
    // held_ is the earliest in the whole text.
    size_t first = std::string::npos;
    for (const std::string& stop : stops_) first = std::min(first, held_.find(stop));
    if (first != std::string::npos) {
        matched_ = true;
        std::string out = held_.substr(0, first);
        held_.clear();
        return out;
    }
    // The longest tail of held_ that is a proper prefix of a stop string. Stop strings and the text are well-formed
    // UTF-8, so such a tail starts at a character boundary.
    size_t keep = 0;
    for (const std::string& stop : stops_) {
        const size_t longest = std::min(stop.size() - 1, held_.size());
        for (size_t n = longest; n > keep; --n) {
            if (std::string_view(held_).substr(held_.size() - n) == std::string_view(stop).substr(0, n)) {
                keep = n;
                break;
            }
        }
    }
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string StopStringMatcher::finish() {
    if (matched_) return {};
    return std::exchange(held_, {});
}

}  // namespace afd::serve
