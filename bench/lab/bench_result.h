// The result every device benchmark (`afd bench moe`, `afd bench router`) returns: the device, the two rates its
// floors are stated against (measured in the same run, bench_timing.h), and its rows. g++-includable.
#pragma once

#include <string>
#include <vector>

namespace afd::lab {

// Device time of the warm-up before every timed series, by default: the software power cap lowers the H200's SM clock
// within about 50-100 ms of tensor-heavy work (cuBLAS 8192^3: 793 TFLOP/s for the first 10 runs after idle, 680-690
// from about 60 ms on; the MoE layer at T = 4096 likewise, 632 us over 30 replays, 725 over 300), so every series,
// the floors' rates included, is timed in the steady state a serving process runs in.
inline constexpr double kSteadyStateWarmupMs = 300.0;

template <class Row>
struct BenchResult {
    std::string device;
    double copy_tbps = 0;          // TB/s, bytes read + written (a 2 GiB device-to-device copy)
    double gemm_tflops = 0;        // cuBLAS BF16 8192^3 after the series' warm-up (bench_timing.h): the compute floors'
    double gemm_burst_tflops = 0;  // the same in a burst of 10 runs without it, for reference
    std::vector<Row> rows;
};

}  // namespace afd::lab
