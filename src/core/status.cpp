#include "core/status.h"

#include "core/check.h"

namespace afd::core {

std::string_view statusCodeName(StatusCode code) {
    switch (code) {
        case StatusCode::kOk:
            return "ok";
        case StatusCode::kInvalidArgument:
            return "invalid_argument";
        case StatusCode::kNotFound:
            return "not_found";
        case StatusCode::kIoError:
            return "io_error";
        case StatusCode::kCorrupt:
            return "corrupt";
        case StatusCode::kUnsupported:
            return "unsupported";
        case StatusCode::kMismatch:
            return "mismatch";
        case StatusCode::kTimeout:
            return "timeout";
        case StatusCode::kPeerLost:
            return "peer_lost";
        case StatusCode::kCancelled:
            return "cancelled";
        case StatusCode::kInternal:
            return "internal";
    }
    return "unknown";
}

std::string Status::toString() const {
    if (isOk()) return "ok";
    return fmt::format("{}: {}", statusCodeName(code_), message_);
}

Status Status::withContext(std::string_view context) const {
    if (isOk()) return *this;
    return Status(code_, fmt::format("{}: {}", context, message_));
}

void throwBadResultAccess(const Status& status) {
    throw Error(fmt::format("value() on a failed Result: {}", status.toString()));
}

}  // namespace afd::core
