// Checks of `afd bench`'s shape flags (bench_flag_checks.h).
#include "cli/bench_flag_checks.h"

#include "core/logging.h"

namespace afd::cli {

bool tokensAtLeastOne(const char* command, const std::vector<int64_t>& tokens) {
    for (const int64_t t : tokens) {
        if (t < 1) {
            AFD_LOG_ERROR("{}: --tokens: {} must be >= 1", command, t);
            return false;
        }
    }
    return true;
}

bool multipleOf(const char* command, const char* flag, int64_t value, int64_t multiple) {
    if (value % multiple != 0) {
        AFD_LOG_ERROR("{}: {}: {} must be a multiple of {}", command, flag, value, multiple);
        return false;
    }
    return true;
}

bool topKWithinExperts(const char* command, int64_t top_k, int64_t experts) {
    if (top_k > experts) {
        AFD_LOG_ERROR("{}: --top-k: {} exceeds --experts {}", command, top_k, experts);
        return false;
    }
    return true;
}

}  // namespace afd::cli
