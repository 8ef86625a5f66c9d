// The result every device benchmark (`afd bench moe`, `afd bench router`) returns: the device, the two rates its
// floors are stated against (measured in the same run, bench_timing.h), and its rows. g++-includable.
#pragma once

#include <string>
#include <vector>

namespace afd::kernels::cuda {

template <class Row>
struct BenchResult {
    std::string device;
    double copy_tbps = 0;    // TB/s, bytes read + written (a 2 GiB device-to-device copy)
    double gemm_tflops = 0;  // cuBLAS BF16 8192^3 in the steady state (bench_timing.h): the compute floors'
    double gemm_burst_tflops = 0;  // the same in a burst of 10 runs after idle, for reference
    std::vector<Row> rows;
};

}  // namespace afd::kernels::cuda
