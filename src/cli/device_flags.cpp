#include "cli/device_flags.h"

#include <fmt/format.h>

#include <charconv>

#if defined(AFD_HAVE_CUDA_ATTENTION)
#include "kernels/cuda/device_info.h"
#endif

namespace afd::cli {

bool cudaAttentionBuilt() {
#if defined(AFD_HAVE_CUDA_ATTENTION)
    return true;
#else
    return false;
#endif
}

int visibleCudaDevices() {
#if defined(AFD_HAVE_CUDA_ATTENTION)
    return kernels::cuda::deviceCount();
#else
    return 0;
#endif
}

core::Result<std::vector<int>> parseDeviceIds(std::string_view flag, const std::string& text) {
    std::vector<int> ids;
    if (text.empty()) return ids;
    size_t pos = 0;
    while (pos <= text.size()) {
        const size_t comma = std::min(text.find(',', pos), text.size());
        const std::string_view item(text.data() + pos, comma - pos);
        int id = -1;
        auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
        if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || id < 0) {
            return core::invalidArgument("{} {:?}: {:?} is not a GPU index", flag, text, item);
        }
        ids.push_back(id);
        pos = comma + 1;
    }
    return ids;
}

core::Result<core::Device> resolveDevice(const DeviceChoice& choice, int rank, std::string_view rank_label) {
    if (choice.device == "cpu") {
        if (!choice.device_ids.empty()) {
            return core::invalidArgument("{} {:?} needs {} cuda", choice.device_ids_flag, choice.device_ids,
                                         choice.device_flag);
        }
        return core::Device::cpu();
    }
    if (choice.device != "cuda") {
        return core::invalidArgument("{} {:?} must be cpu or cuda", choice.device_flag, choice.device);
    }
    AFD_ASSIGN_OR_RETURN(const std::vector<int> ids, parseDeviceIds(choice.device_ids_flag, choice.device_ids));
    if (rank < 0 || (!ids.empty() && rank >= static_cast<int>(ids.size()))) {
        return core::invalidArgument("{} {:?} lists {} GPU(s), so it has none for {}", choice.device_ids_flag,
                                     choice.device_ids, ids.size(), rank_label);
    }
    const int gpu = ids.empty() ? rank : ids[static_cast<size_t>(rank)];
    if (!cudaAttentionBuilt()) {
        return core::invalidArgument("{} cuda: this afd was built without the CUDA backend (no nvcc at build time)",
                                     choice.device_flag);
    }
    const int visible = visibleCudaDevices();
    if (visible == 0) return core::invalidArgument("{} cuda: no CUDA device is visible", choice.device_flag);
    if (gpu >= visible) {
        const std::string mapping =
            choice.device_ids.empty()
                ? fmt::format("{} runs on cuda:{} without {}", rank_label, gpu, choice.device_ids_flag)
                : fmt::format("{}, {} {}", rank_label, choice.device_ids_flag, choice.device_ids);
        return core::invalidArgument("{} cuda: cuda:{} is not a visible CUDA device ({} visible; {})",
                                     choice.device_flag, gpu, visible, mapping);
    }
    return core::Device::cuda(gpu);
}

}  // namespace afd::cli
