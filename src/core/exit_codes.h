// Process exit codes shared by every `afd` subcommand, so launchers, scripts and tests can tell failures apart.
// The README's table is this one; tests/cli/exit_codes_test.cpp checks each code on each command it applies to.
//
//   0  ok
//   1  a failure at run time: a checkpoint whose tensors do not read, I/O, a handshake mismatch, results that differ
//      from the dense reference, a child rank that failed for one of these reasons
//   2  bad input found before any work: a flag, the AFD config, the model directory or its config.json (missing,
//      not JSON, a field of the wrong type or out of range), a device, a port already in use
//   3  a peer was lost: a connection closed, a rendezvous or step timed out, a child rank died or was killed
//   4  an internal error (a bug: an invariant broke)
#pragma once

#include "core/status.h"

namespace afd::core {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadConfig = 2;
inline constexpr int kExitPeerLost = 3;
inline constexpr int kExitInternal = 4;

// The exit code for a failed Status: kInvalidArgument and kUnsupported (a flag, config or model the engine refuses)
// are 2, kPeerLost and kTimeout 3, kInternal 4, every other code 1. Callers that read the model's config.json report
// its problems as kInvalidArgument (cli/model_loading.h), so that they are 2 like any other bad input.
inline int exitCodeFor(const Status& status) {
    switch (status.code()) {
        case StatusCode::kOk:
            return kExitOk;
        case StatusCode::kInvalidArgument:
        case StatusCode::kUnsupported:
            return kExitBadConfig;
        case StatusCode::kPeerLost:
        case StatusCode::kTimeout:
            return kExitPeerLost;
        case StatusCode::kInternal:
            return kExitInternal;
        default:
            return kExitFailure;
    }
}

// The exit code a launcher reports for a child rank that exited with `child_code` (ChildProcess: 128 + signal for a
// signal): the child's own code when it is one of the table's, kExitPeerLost for a child killed by a signal or one
// that exited with a code outside the table (the launcher lost that peer).
inline int exitCodeForChild(int child_code) {
    return child_code >= kExitOk && child_code <= kExitInternal ? child_code : kExitPeerLost;
}

}  // namespace afd::core
