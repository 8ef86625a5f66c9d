// How many times slower this build runs code than a plain one, for the bounds of tests that stand for "the machine has
// done the work" (a client's patience while the CPU kernels run), never for the behaviour a test checks (a stop
// within its bound, a timeout that must fire). ThreadSanitizer runs instrumented loops 5-15x slower, AddressSanitizer
// with UndefinedBehaviorSanitizer (built at -O1) about 2-3x (docs/sanitizers.md).
#pragma once

namespace afd::testing {

#if defined(__SANITIZE_THREAD__)
inline constexpr int kBuildSlowdown = 10;
#elif defined(__SANITIZE_ADDRESS__)
inline constexpr int kBuildSlowdown = 3;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr int kBuildSlowdown = 10;
#elif __has_feature(address_sanitizer)
inline constexpr int kBuildSlowdown = 3;
#else
inline constexpr int kBuildSlowdown = 1;
#endif
#else
inline constexpr int kBuildSlowdown = 1;
#endif

}  // namespace afd::testing
