#include "kernels/cuda/afd_frames_launch.h"
#include "kernels/cuda/cuda_check.h"

namespace afd::kernels {

void splitRoutingCuda(const SplitRoutingParams& params, void* stream) {
    AFD_CUDA_CHECK(launchSplitRouting(params, static_cast<cudaStream_t>(stream)));
}

void sumPartialsCuda(const SumPartialsParams& params, void* stream) {
    AFD_CHECK(params.num_partials >= 1 && params.num_partials <= kMaxSummedPartials, "{} partials (1 ... {})",
              params.num_partials, kMaxSummedPartials);
    AFD_CUDA_CHECK(launchSumPartials(params, static_cast<cudaStream_t>(stream)));
}

void gatherFfnRowsCuda(const GatherFfnRowsParams& params, void* stream) {
    AFD_CHECK(params.num_peers >= 0 && params.num_peers <= kMaxGatheredPeers, "{} peers (0 ... {})", params.num_peers,
              kMaxGatheredPeers);
    int64_t total = 0;
    for (int k = 0; k < params.num_peers; ++k) total += params.rows[k];
    AFD_CHECK(total <= params.padded_rows && params.hidden > 0, "{} rows gathered into {} (hidden {})", total,
              params.padded_rows, params.hidden);
    AFD_CHECK(params.routing == GatheredRouting::kRouterHere || (params.out_ids != nullptr && params.top_k > 0),
              "a gather with routing needs ids and top_k");
    AFD_CHECK(params.routing != GatheredRouting::kFromFrames || params.bad != nullptr,
              "a gather of the frames' ids needs the record of a bad one");
    AFD_CUDA_CHECK(launchGatherFfnRows(params, static_cast<cudaStream_t>(stream)));
}

}  // namespace afd::kernels
