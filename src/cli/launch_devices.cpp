#include "cli/launch_devices.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "cli/device_flags.h"

namespace afd::cli {

void addLaunchDeviceFlags(CLI::App& cmd, LaunchDeviceFlags& flags) {
    const auto devices = CLI::IsMember({"cpu", "cuda"});
    cmd.add_option("--device", flags.device, "cpu or cuda for every rank (default cpu)")->check(devices);
    cmd.add_option("--attention-device", flags.attention_device, "cpu or cuda for the attention ranks (over --device)")
        ->check(devices);
    cmd.add_option("--attention-device-ids", flags.attention_device_ids,
                   "GPUs of the attention ranks, indexed by attention rank, e.g. 0 (default: each rank's index)");
    cmd.add_option("--ffn-device", flags.ffn_device, "cpu or cuda for the FFN ranks (over --device)")->check(devices);
    cmd.add_option("--ffn-device-ids", flags.ffn_device_ids,
                   "GPUs of the FFN ranks, indexed by FFN rank, e.g. 0,1 (default: each rank's index)");
    cmd.add_option("--reference-device", flags.reference_device,
                   "cpu or cuda: where the dense reference runs (default: the attention ranks' device; on a GPU, "
                   "attention rank 0's)")
        ->check(devices);
    cmd.add_flag("--enforce-eager", flags.enforce_eager, "no CUDA graphs on the attention ranks and the reference");
    cmd.add_option("--gpu-memory-utilization", flags.gpu_memory_utilization,
                   "the GPU attention ranks' and reference's share of GPU memory (afd generate's flag)")
        ->check(CLI::Range(0.01, 1.0));
}

namespace {

std::string attentionDevice(const LaunchDeviceFlags& flags) {
    return flags.attention_device.value_or(flags.device.value_or("cpu"));
}
std::string ffnDevice(const LaunchDeviceFlags& flags) {
    return flags.ffn_device.value_or(flags.device.value_or("cpu"));
}

}  // namespace

bool everyRankOnCuda(const LaunchDeviceFlags& flags) {
    return attentionDevice(flags) == "cuda" && ffnDevice(flags) == "cuda";
}

core::Result<LaunchDevices> resolveLaunchDevices(const LaunchDeviceFlags& flags, int num_attention_ranks,
                                                 int num_ffn_ranks) {
    LaunchDevices out;
    DeviceChoice attention;
    attention.device_flag = flags.attention_device ? "--attention-device" : "--device";
    attention.device_ids_flag = "--attention-device-ids";
    attention.device = attentionDevice(flags);
    attention.device_ids = flags.attention_device_ids;
    DeviceChoice ffn;
    ffn.device_flag = flags.ffn_device ? "--ffn-device" : "--device";
    ffn.device_ids_flag = "--ffn-device-ids";
    ffn.device = ffnDevice(flags);
    ffn.device_ids = flags.ffn_device_ids;

    core::Device first_attention = core::Device::cpu();
    for (int a = 0; a < num_attention_ranks; ++a) {
        AFD_ASSIGN_OR_RETURN(const core::Device d, resolveDevice(attention, a, fmt::format("attention rank {}", a)));
        if (a == 0) first_attention = d;
        if (!d.isCpu()) out.attention_gpus.push_back(d.index);
    }
    for (int k = 0; k < num_ffn_ranks; ++k) {
        AFD_ASSIGN_OR_RETURN(const core::Device d, resolveDevice(ffn, k, fmt::format("FFN rank {}", k)));
        if (!d.isCpu()) out.ffn_gpus.push_back(d.index);
    }
    out.attention = attention.device;
    out.attention_ids = attention.device_ids;
    out.ffn = ffn.device;
    out.ffn_ids = ffn.device_ids;
    const std::string reference = flags.reference_device.value_or(attention.device);
    if (reference == attention.device) {
        out.reference = first_attention;
    } else {
        DeviceChoice choice;
        choice.device_flag = "--reference-device";
        choice.device = reference;
        AFD_ASSIGN_OR_RETURN(out.reference, resolveDevice(choice, 0, "the dense reference"));
    }
    return out;
}

std::vector<std::string> attentionDeviceArgs(const LaunchDeviceFlags& flags, const LaunchDevices& devices) {
    std::vector<std::string> args{"--device", devices.attention};
    if (!devices.attention_ids.empty()) args.insert(args.end(), {"--device-ids", devices.attention_ids});
    if (flags.enforce_eager) args.emplace_back("--enforce-eager");
    if (flags.gpu_memory_utilization) {
        args.insert(args.end(), {"--gpu-memory-utilization", fmt::format("{}", *flags.gpu_memory_utilization)});
    }
    return args;
}

std::vector<std::string> ffnDeviceArgs(const LaunchDeviceFlags& flags, const LaunchDevices& devices, bool dbo) {
    std::vector<std::string> args{"--device", devices.ffn};
    if (!devices.ffn_ids.empty()) args.insert(args.end(), {"--device-ids", devices.ffn_ids});
    // Graphs and lanes are a GPU rank's; a CPU rank has neither.
    if (devices.ffn != "cpu") {
        if (flags.enforce_eager) args.emplace_back("--enforce-eager");
        if (dbo) args.emplace_back("--enable-dbo");
    }
    return args;
}

}  // namespace afd::cli
