// libFuzzer target: parseSafetensorsHeader on arbitrary bytes (the whole input is the file). Beyond "no crash, no
// sanitizer report", an accepted header must satisfy what the checkpoint reader relies on; a violation traps.
#include <cstddef>
#include <cstdint>

#include "model/safetensors_format.h"

namespace {

void require(bool condition) {
    if (!condition) __builtin_trap();
}

void checkAccepted(const afd::model::SafetensorsHeader& header, size_t size) {
    require(header.data_offset >= 8 && header.data_offset <= size);
    uint64_t previous_end = 0;
    for (const afd::model::TensorInfo& info : header.tensors) {
        require(info.data_begin <= info.data_end && info.data_end <= size - header.data_offset);
        // shapeNumel must not overflow for an accepted shape.
        uint64_t numel = 1;
        bool has_zero = false;
        for (int64_t d : info.shape) {
            require(d >= 0);
            if (d == 0)
                has_zero = true;
            else
                require(!__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel));
        }
        if (has_zero) numel = 0;
        require(numel * afd::core::dtypeSize(info.dtype) == info.nbytes());
        if (info.nbytes() == 0) continue;
        require(info.data_begin >= previous_end);  // sorted and not overlapping
        previous_end = info.data_end;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto result = afd::model::parseSafetensorsHeader(data, size, "fuzz.safetensors");
    if (result.isOk()) checkAccepted(result.value(), size);
    return 0;
}
