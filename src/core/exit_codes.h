// Process exit codes shared by every `afd` subcommand, so launchers and tests can tell failures apart.
#pragma once

namespace afd::core {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;    // an error at run time (bad checkpoint, I/O …)
inline constexpr int kExitBadConfig = 2;  // invalid flags or configuration, found before any work
inline constexpr int kExitPeerLost = 3;   // a connector peer went away
inline constexpr int kExitInternal = 4;   // a bug: an invariant broke

}  // namespace afd::core
