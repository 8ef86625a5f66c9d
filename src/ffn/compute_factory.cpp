#include "ffn/compute_factory.h"

#include <charconv>

#include "ffn/cpu_ffn_compute.h"

#if defined(AFD_HAVE_CUDA_FFN)
#include "ffn/cuda/cuda_ffn_compute.h"
#include "kernels/cuda/device_info.h"
#endif

namespace afd::ffn {

core::Result<int> mapLocalRankToGpu(const std::string& device_ids, int local_rank) {
    std::vector<int> ids;
    if (!device_ids.empty()) {
        size_t pos = 0;
        while (pos <= device_ids.size()) {
            const size_t comma = std::min(device_ids.find(',', pos), device_ids.size());
            const std::string_view item(device_ids.data() + pos, comma - pos);
            int id = -1;
            auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
            if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || id < 0) {
                return core::invalidArgument("--device-ids {:?}: {:?} is not a GPU index", device_ids, item);
            }
            ids.push_back(id);
            pos = comma + 1;
        }
        if (local_rank >= static_cast<int>(ids.size())) {
            return core::invalidArgument("LOCAL_RANK={} but --device-ids {:?} lists {} GPU(s)", local_rank, device_ids,
                                         ids.size());
        }
    }
    return ids.empty() ? local_rank : ids[static_cast<size_t>(local_rank)];
}

core::Result<int> resolveDevice(const std::string& device, const std::string& device_ids, int local_rank) {
    if (device == "cpu") {
        if (!device_ids.empty()) return core::invalidArgument("--device-ids {:?} needs --device cuda", device_ids);
        return -1;
    }
    if (device != "cuda") return core::invalidArgument("--device {:?} must be cpu or cuda", device);
    AFD_ASSIGN_OR_RETURN(const int gpu, mapLocalRankToGpu(device_ids, local_rank));
#if defined(AFD_HAVE_CUDA_FFN)
    const int count = kernels::cuda::deviceCount();
    if (gpu >= count) {
        return core::invalidArgument("GPU {} (LOCAL_RANK={}{}) does not exist: this machine has {} CUDA device(s)", gpu,
                                     local_rank, device_ids.empty() ? "" : ", --device-ids " + device_ids, count);
    }
    return gpu;
#else
    (void)gpu;
    return core::invalidArgument("--device cuda: this afd was built without the CUDA backend (no nvcc at build time)");
#endif
}

core::Status checkFfnComputeFits(const std::string& device, int gpu, const model::ModelConfig& config,
                                 const model::WeightSelection& selection, int64_t max_rows) {
    if (device == "cpu") return core::Status::ok();
#if defined(AFD_HAVE_CUDA_FFN)
    return checkCudaFfnFits(config, selection, gpu, max_rows);
#else
    (void)gpu;
    (void)config;
    (void)selection;
    (void)max_rows;
    return core::invalidArgument("--device {:?} is not available in this build", device);
#endif
}

core::Result<std::unique_ptr<FfnCompute>> createFfnCompute(const std::string& device, int gpu,
                                                           const model::ModelConfig& config,
                                                           model::ModelWeights weights, int64_t max_rows,
                                                           int num_device_lanes, bool enforce_eager) {
    if (device == "cpu") return std::unique_ptr<FfnCompute>(new CpuFfnCompute(config, std::move(weights)));
#if defined(AFD_HAVE_CUDA_FFN)
    return createCudaFfnCompute(config, std::move(weights), gpu, max_rows, num_device_lanes, enforce_eager);
#else
    (void)gpu;
    (void)max_rows;
    (void)num_device_lanes;
    (void)enforce_eager;
    return core::invalidArgument("--device {:?} is not available in this build", device);
#endif
}

core::Result<std::unique_ptr<FfnCompute>> createRandomFfnCompute(const std::string& device, int gpu,
                                                                 const model::ModelConfig& config,
                                                                 const model::WeightSelection& selection, uint64_t seed,
                                                                 int64_t max_rows, int num_device_lanes,
                                                                 bool enforce_eager) {
    if (device == "cpu") {
        return core::invalidArgument("--random-weights draws the weights on a GPU: add --device cuda");
    }
#if defined(AFD_HAVE_CUDA_FFN)
    return createRandomCudaFfnCompute(config, selection, seed, gpu, max_rows, num_device_lanes, enforce_eager);
#else
    (void)gpu;
    (void)config;
    (void)selection;
    (void)seed;
    (void)max_rows;
    (void)num_device_lanes;
    (void)enforce_eager;
    return core::invalidArgument("--device {:?} is not available in this build", device);
#endif
}

}  // namespace afd::ffn
