// Element types of tensors, named as safetensors names them.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace afd::core {

enum class DType {
    kBool,
    kU8,
    kI8,
    kF8E5M2,
    kF8E4M3,
    kI16,
    kU16,
    kF16,
    kBf16,
    kI32,
    kU32,
    kF32,
    kF64,
    kI64,
    kU64,
};

size_t dtypeSize(DType dtype);
// The safetensors spelling: "BF16", "F32", "I64" …
std::string_view dtypeName(DType dtype);
// Parses the safetensors spelling; nullopt for anything else.
std::optional<DType> parseDType(std::string_view name);

}  // namespace afd::core
