// The text of `afd bench moe --timeline`: the stamps each traced CTA of the two grouped GEMM kernels wrote
// (MoeCudaOptions::trace, MoeTraceEvent in kernels/moe_cuda.h) summarised per kernel. g++-includable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace afd::kernels::cuda {

// stamps: the trace buffer read back (kMoeTraceWords: [2 kernels: gate-up, down][kMoeTraceMaxCtas][kMoeTraceSlots],
// then the permute and combine kernels' MoeTraceLayerWord); layer_us: the traced replay's time. First the permute's
// first entry and last end, the combine's first entry, first CTA past its wait and last end, and how much of the
// replay lies outside the kernels; then for each GEMM kernel: the CTAs that ran and their item counts; each event's
// min / median / max over the CTAs that reached it, in us from the first stamp of any kernel (the permute's first
// entry where one ran); then, from the per-item log (each CTA's
// first item left out: it holds the pipeline's fill), the items of experts with one token tile apart from those of
// experts with several: how many, the median time an item took on its SM (from the CTA's previous item's end to its
// own), and the weight bytes it streamed over that time, GB/s per SM (median, p10, p90). Throws core::Error when
// stamps is not of that size.
std::string summariseMoeTrace(const std::vector<uint64_t>& stamps, double layer_us);

}  // namespace afd::kernels::cuda
