// Typed accessors for AFD_* environment knobs. Each knob is read once and cached by its accessor
// (see e.g. numThreads() in thread_pool.cpp); a malformed value is a startup error naming the variable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"

namespace afd::core {

std::optional<std::string> envString(const char* name);
// Unset → fallback; set but not an integer in [min, max] → an error naming the variable and the rule.
Result<int64_t> envInt(const char* name, int64_t fallback, int64_t min, int64_t max);
// Accepts 1/0, true/false, yes/no, on/off (case-insensitive).
Result<bool> envBool(const char* name, bool fallback);

}  // namespace afd::core
