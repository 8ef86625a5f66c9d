// The device a process's attention side runs on, from `--device cpu|cuda` and `--device-ids` as a user passes them
// (afd generate, afd launch's attention ranks and dense reference, afd bench generate), checked before any model is
// read: errors name the flag and the device ("--device cuda: no CUDA device is visible", "--device cuda: cuda:3 is
// not a visible CUDA device (1 visible; attention rank 0, --device-ids 3)") and are kInvalidArgument (exit code 2).
//
// GPU mapping, as `afd ffn --device-ids` maps LOCAL_RANK: `device_ids` ("2,3") indexed by the rank, or the rank itself
// when the list is empty (rank 1 with --device-ids 2,3 runs on cuda:3). A GPU may appear more than once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace afd::cli {

// Whether this afd has the GPU attention side (the CUDA backend was built).
bool cudaAttentionBuilt();
// CUDA devices visible to this process (0 without a driver, a device or the CUDA backend). Never throws.
int visibleCudaDevices();

// `text` ("0,2,2") as GPU indices; errors name `flag` and the item. Empty text gives an empty list.
core::Result<std::vector<int>> parseDeviceIds(std::string_view flag, const std::string& text);

struct DeviceChoice {
    std::string_view device_flag = "--device";          // names in messages
    std::string_view device_ids_flag = "--device-ids";  //
    std::string device = "cpu";                         // cpu | cuda
    std::string device_ids;                             // cuda only
};

// The device of rank `rank` (`rank_label` names it in messages: "attention rank 0"): cpu, or cuda:G as above, checked
// to be visible. device_ids with cpu is an error (as for afd ffn).
core::Result<core::Device> resolveDevice(const DeviceChoice& choice, int rank, std::string_view rank_label);

}  // namespace afd::cli
