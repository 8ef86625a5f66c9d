#include "attention/weights_loading.h"

#include <chrono>

#include "core/check.h"
#include "core/logging.h"
#if defined(AFD_HAVE_CUDA_ATTENTION)
#include "attention/cuda/device_weights.h"
#endif

namespace afd::attention {

core::Status checkWeightsDevice(const ModelSource& source, core::Device device) {
    if (device.isCpu() && source.random_weights) {
        return core::invalidArgument(
            "--random-weights draws the weights on a GPU: add --device cuda (for the CPU, write the same weights with "
            "`afd gen-model --seed {}` and pass that directory as --model)",
            source.weights_seed);
    }
    return core::Status::ok();
}

core::Result<model::ModelWeights> weightsForDevice(const ModelSource& source, const model::WeightSelection& selection,
                                                   core::Device device, uint64_t other_device_bytes,
                                                   const model::LoadProgress& progress) {
    const model::ModelConfig& config = source.config;
    AFD_RETURN_IF_ERROR(checkWeightsDevice(source, device));
    if (device.isCpu()) {
        AFD_CHECK(source.checkpoint.has_value(), "a model source without random weights has a checkpoint");
        return model::loadWeights(*source.checkpoint, config, selection, progress);
    }
#if defined(AFD_HAVE_CUDA_ATTENTION)
    const int gpu = device.index;
    const auto kind = source.random_weights ? WeightSource::kRandom : WeightSource::kHost;
    AFD_RETURN_IF_ERROR(checkDeviceWeightsFit(config, selection, gpu, kind, other_device_bytes));
    DeviceWeightsReport report;
    if (source.random_weights) {
        AFD_ASSIGN_OR_RETURN(model::ModelWeights weights,
                             randomModelWeights(config, selection, source.weights_seed, gpu, &report));
        AFD_LOG_INFO("cuda:{}: {:.2f} GB of random weights (seed {}) in {:.2f} s", gpu, report.device_bytes / 1e9,
                     source.weights_seed, report.seconds);
        return weights;
    }
    AFD_CHECK(source.checkpoint.has_value(), "a model source without random weights has a checkpoint");
    const auto start = std::chrono::steady_clock::now();
    AFD_ASSIGN_OR_RETURN(const model::ModelWeights host,
                         model::loadWeights(*source.checkpoint, config, selection, progress));
    const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    AFD_ASSIGN_OR_RETURN(model::ModelWeights weights, uploadModelWeights(config, host, gpu, {}, &report));
    AFD_LOG_INFO(
        "cuda:{}: {:.2f} GB of weights on the device: {:.2f} GB of the checkpoint read and packed in {:.2f} s, "
        "{:.2f} GB uploaded in {:.2f} s ({:.2f} GB/s)",
        gpu, report.device_bytes / 1e9, host.checkpoint_bytes / 1e9, load_seconds, report.uploaded_bytes / 1e9,
        report.seconds, report.gbPerSecond());
    return weights;
#else
    (void)selection;
    (void)other_device_bytes;
    (void)progress;
    return core::invalidArgument("{}: this afd was built without the CUDA backend", device.toString());
#endif
}

}  // namespace afd::attention
