// The devices of an `afd launch` deployment: the attention ranks', the FFN ranks' and the dense reference's, from
// --device (both roles), --attention-device / --ffn-device (one role each, over --device), their --*-device-ids (GPUs
// indexed by the rank within its role, as afd ffn and afd generate map them) and --reference-device (default: the
// attention ranks' device; on a GPU, attention rank 0's). Resolved and checked in the launcher before any child starts:
// every rank's GPU must be visible (device_flags.h messages, exit code 2).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace CLI {
class App;
}

namespace afd::cli {

struct LaunchDeviceFlags {
    std::optional<std::string> device;             // --device: both roles
    std::optional<std::string> attention_device;   // --attention-device
    std::string attention_device_ids;              // --attention-device-ids
    std::optional<std::string> ffn_device;         // --ffn-device
    std::string ffn_device_ids;                    // --ffn-device-ids
    std::optional<std::string> reference_device;   // --reference-device
    bool enforce_eager = false;                    // --enforce-eager: attention ranks and a GPU reference
    std::optional<double> gpu_memory_utilization;  // --gpu-memory-utilization: passed to the attention ranks
};

void addLaunchDeviceFlags(CLI::App& cmd, LaunchDeviceFlags& flags);

struct LaunchDevices {
    std::string attention;  // cpu | cuda, as the attention children get it (--device)
    std::string attention_ids;
    std::string ffn;  // cpu | cuda, as the FFN children get it (--device)
    std::string ffn_ids;
    std::vector<int> attention_gpus;               // the GPU of each attention rank, by rank; empty on the CPU
    std::vector<int> ffn_gpus;                     // the GPU of each FFN rank, by rank; empty on the CPU
    core::Device reference = core::Device::cpu();  // where the launcher runs the dense reference
};

// Whether the flags put both roles on CUDA devices (--device cuda, or --attention-device cuda and --ffn-device cuda):
// then every rank runs on a GPU once resolveLaunchDevices succeeds.
bool everyRankOnCuda(const LaunchDeviceFlags& flags);

// Checks every rank of `num_attention_ranks` attention and `num_ffn_ranks` FFN ranks, and the reference.
core::Result<LaunchDevices> resolveLaunchDevices(const LaunchDeviceFlags& flags, int num_attention_ranks,
                                                 int num_ffn_ranks);

// The device flags of an attention child (`afd generate`: --device, --device-ids, --enforce-eager,
// --gpu-memory-utilization) and of an FFN child (`afd ffn`: --device, --device-ids; on a GPU also --enforce-eager,
// and --enable-dbo when the attention ranks run dual-batch overlap).
std::vector<std::string> attentionDeviceArgs(const LaunchDeviceFlags& flags, const LaunchDevices& devices);
std::vector<std::string> ffnDeviceArgs(const LaunchDeviceFlags& flags, const LaunchDevices& devices, bool dbo);

}  // namespace afd::cli
