// The safetensors file format: an 8-byte little-endian header length N, N bytes of JSON, then the data section.
// The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (byte offsets relative to
// the data section) and may hold "__metadata__", an object of string → string.
//
// parseSafetensorsHeader is a pure function of the bytes (no I/O, no logging): the readers of checkpoints and the
// fuzz target both call it, and nothing it reads is trusted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

namespace afd::model {

struct TensorInfo {
    std::string name;
    core::DType dtype = core::DType::kBf16;
    core::Shape shape;
    std::string file;         // path of the shard that holds it (the file label when parsed from bytes)
    uint64_t data_begin = 0;  // byte range [data_begin, data_end) inside that shard's data section
    uint64_t data_end = 0;

    uint64_t nbytes() const { return data_end - data_begin; }
};

struct SafetensorsHeader {
    std::vector<TensorInfo> tensors;  // ordered by data_begin, then by name
    std::map<std::string, std::string> metadata;
    uint64_t data_offset = 0;  // absolute file offset of the data section: 8 + header length
};

// The largest header accepted (the JSON part). Qwen3-30B-A3B's largest shard header is ~1 MiB.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Validates the header of the safetensors file whose `file_size` bytes are at `bytes` (`bytes` may be null when
// `file_size` is 0). Only the first 8 + N bytes are read; the data section is checked against ranges, not read.
// Rules: file ≥ 8 bytes; header length ≤ file_size - 8 and ≤ kMaxSafetensorsHeaderBytes; JSON well
// formed with no duplicate key at any level; top level an object; optional "__metadata__" an object of
// string → string; every other entry an object with exactly "dtype" (a safetensors dtype), "shape" (non-negative
// integers, element count and byte size fit in 63 bits) and "data_offsets" ([begin, end], begin ≤ end,
// end - begin == bytes the shape needs); every range inside the data section; non-empty ranges do not overlap.
// Errors are kCorrupt and start with `file_label`, then the tensor at fault, then the rule.
core::Result<SafetensorsHeader> parseSafetensorsHeader(const uint8_t* bytes, size_t file_size,
                                                       std::string_view file_label);

}  // namespace afd::model
