// Checks of `afd bench`'s shape flags that CLI11 ranges cannot express. Each logs "<command>: <flag>: <value> <rule>"
// and returns false when the value breaks its rule (the caller exits with kExitBadConfig).
#pragma once

#include <cstdint>
#include <vector>

namespace afd::cli {

bool tokensAtLeastOne(const char* command, const std::vector<int64_t>& tokens);
bool multipleOf(const char* command, const char* flag, int64_t value, int64_t multiple);
bool topKWithinExperts(const char* command, int64_t top_k, int64_t experts);

}  // namespace afd::cli
