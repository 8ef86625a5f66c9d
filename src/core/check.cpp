#include "core/check.h"

namespace afd::core {

void throwCheckFailure(const char* file, int line, const char* condition, const std::string& message) {
    throw Error(fmt::format("{}:{}: check failed ({}): {}", file, line, condition, message));
}

}  // namespace afd::core
