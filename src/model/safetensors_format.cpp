#include "model/safetensors_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

namespace afd::model {
namespace {

using Json = nlohmann::json;

// A valid header nests three levels (top object → entry object → shape array); anything much deeper is rejected
// before the JSON parser builds it, so that a hostile "[[[[…" cannot cost memory proportional to its depth.
constexpr int kMaxNesting = 16;
constexpr uint64_t kMaxInt63 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
constexpr size_t kMaxShownText = 200;

uint64_t readU64Le(const uint8_t* bytes) {
    uint64_t value = 0;
    for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
    return value;
}

// Deepest nesting of objects and arrays in `text`, skipping string contents. Stops counting at kMaxNesting + 1.
int maxNesting(const uint8_t* text, size_t size) {
    int depth = 0;
    int deepest = 0;
    bool in_string = false;
    for (size_t i = 0; i < size; ++i) {
        const uint8_t c = text[i];
        if (in_string) {
            if (c == '\\') {
                ++i;
            } else if (c == '"') {
                in_string = false;
            }
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            deepest = std::max(deepest, ++depth);
            if (deepest > kMaxNesting) break;
        } else if (c == '}' || c == ']') {
            --depth;
        }
    }
    return deepest;
}

// Shortens text quoted from a header in an error message (at a UTF-8 character boundary), so that a hostile header
// cannot make the message huge.
std::string clipped(std::string_view text, size_t limit = kMaxShownText) {
    if (text.size() <= limit) return std::string(text);
    size_t end = limit;
    while (end > 0 && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) --end;
    return fmt::format("{}…", text.substr(0, end));
}

std::string shown(const Json& value) { return clipped(value.dump(-1, ' ', false, Json::error_handler_t::replace)); }

std::string_view typeName(const Json& value) {
    if (value.is_number_unsigned()) return "non-negative integer";
    if (value.is_number_integer()) return value.get<int64_t>() < 0 ? "negative integer" : "signed zero";
    if (value.is_number_float()) return "non-integer number";
    return value.type_name();
}

// Parses `text` and records the first key repeated inside one object (nlohmann would silently keep the last).
struct DuplicateKey {
    std::string key;
    std::string entry;  // the top-level entry it sits in; empty when the key itself is top-level
};

Json parseJsonRejectingDuplicates(const uint8_t* text, size_t size, std::optional<DuplicateKey>* duplicate) {
    std::vector<std::set<std::string>> open_objects;
    std::string entry;
    Json::parser_callback_t callback = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
        switch (event) {
            case Json::parse_event_t::object_start:
                open_objects.emplace_back();
                break;
            case Json::parse_event_t::object_end:
                open_objects.pop_back();
                break;
            case Json::parse_event_t::key: {
                const auto& key = parsed.get_ref<const std::string&>();
                if (open_objects.size() == 1) entry = key;
                if (!open_objects.back().insert(key).second && !duplicate->has_value()) {
                    *duplicate = DuplicateKey{key, open_objects.size() == 1 ? std::string() : entry};
                }
                break;
            }
            default:
                break;
        }
        return true;
    };
    return Json::parse(text, text + size, callback, /*allow_exceptions=*/true, /*ignore_comments=*/false);
}

class HeaderValidator {
public:
    HeaderValidator(std::string_view label, uint64_t data_size) : label_(label), data_size_(data_size) {}

    core::Status metadata(const Json& value, std::map<std::string, std::string>* out) const {
        if (!value.is_object()) {
            return core::corrupt("{}: __metadata__ must be an object of string → string, got {}", label_,
                                 value.type_name());
        }
        for (const auto& [key, item] : value.items()) {
            if (!item.is_string()) {
                return core::corrupt("{}: __metadata__ key '{}' must map to a string, got {} {}", label_, clipped(key),
                                     typeName(item), shown(item));
            }
            out->emplace(key, item.get<std::string>());
        }
        return core::Status::ok();
    }

    core::Result<TensorInfo> tensor(const std::string& name, const Json& entry) const {
        if (!entry.is_object()) {
            return error(name, fmt::format("entry must be an object with dtype, shape and data_offsets, got {}",
                                           entry.type_name()));
        }
        for (const auto& [key, item] : entry.items()) {
            if (key != "dtype" && key != "shape" && key != "data_offsets") {
                return error(name, fmt::format("unknown key '{}' (allowed: dtype, shape, data_offsets)", clipped(key)));
            }
        }
        for (const char* key : {"dtype", "shape", "data_offsets"}) {
            if (!entry.contains(key)) return error(name, fmt::format("missing '{}'", key));
        }
        TensorInfo info;
        info.name = name;
        info.file = std::string(label_);

        const Json& dtype = entry["dtype"];
        if (!dtype.is_string()) return error(name, fmt::format("dtype must be a string, got {}", shown(dtype)));
        const auto parsed_dtype = core::parseDType(dtype.get_ref<const std::string&>());
        if (!parsed_dtype) return error(name, fmt::format("unknown dtype {}", shown(dtype)));
        info.dtype = *parsed_dtype;

        const Json& shape = entry["shape"];
        if (!shape.is_array()) return error(name, fmt::format("shape must be an array, got {}", shown(shape)));
        uint64_t nonzero_product = 1;
        bool has_zero = false;
        for (const Json& dim : shape) {
            if (!dim.is_number_unsigned()) {
                return error(name, fmt::format("shape {} holds a {}; dimensions must be non-negative integers",
                                               shown(shape), typeName(dim)));
            }
            const uint64_t d = dim.get<uint64_t>();
            if (d == 0) {
                has_zero = true;
            } else if (__builtin_mul_overflow(nonzero_product, d, &nonzero_product) || nonzero_product > kMaxInt63) {
                return error(name, fmt::format("shape {} has more than 2^63 elements", shown(shape)));
            }
            info.shape.push_back(static_cast<int64_t>(d));
        }
        const uint64_t numel = has_zero ? 0 : nonzero_product;
        uint64_t needed = 0;
        if (__builtin_mul_overflow(numel, core::dtypeSize(info.dtype), &needed) || needed > kMaxInt63) {
            return error(name, fmt::format("shape {} of {} needs more than 2^63 bytes", shown(shape),
                                           core::dtypeName(info.dtype)));
        }

        const Json& offsets = entry["data_offsets"];
        if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
            !offsets[1].is_number_unsigned()) {
            return error(name, fmt::format("data_offsets must be [begin, end] of non-negative integers, got {}",
                                           shown(offsets)));
        }
        info.data_begin = offsets[0].get<uint64_t>();
        info.data_end = offsets[1].get<uint64_t>();
        if (info.data_begin > info.data_end) {
            return error(name,
                         fmt::format("data_offsets [{}, {}] end before they begin", info.data_begin, info.data_end));
        }
        if (info.nbytes() != needed) {
            return error(name, fmt::format("data_offsets [{}, {}] hold {} bytes but shape {} of {} needs {}",
                                           info.data_begin, info.data_end, info.nbytes(),
                                           core::shapeToString(info.shape), core::dtypeName(info.dtype), needed));
        }
        if (info.data_end > data_size_) {
            return error(name, fmt::format("data_offsets [{}, {}] reach past the end of the data section ({} bytes; "
                                           "is the file truncated?)",
                                           info.data_begin, info.data_end, data_size_));
        }
        return info;
    }

    // `tensors` sorted by (data_begin, data_end, name). Empty ranges may sit anywhere, even inside another range.
    core::Status noOverlap(const std::vector<TensorInfo>& tensors) const {
        const TensorInfo* previous = nullptr;
        for (const TensorInfo& info : tensors) {
            if (info.nbytes() == 0) continue;
            if (previous != nullptr && info.data_begin < previous->data_end) {
                return error(info.name, fmt::format("data_offsets [{}, {}] overlap those of tensor '{}' [{}, {}]",
                                                    info.data_begin, info.data_end, clipped(previous->name),
                                                    previous->data_begin, previous->data_end));
            }
            previous = &info;
        }
        return core::Status::ok();
    }

private:
    core::Status error(std::string_view tensor, std::string_view rule) const {
        return core::corrupt("{}: tensor '{}': {}", label_, clipped(tensor), rule);
    }

    std::string_view label_;
    uint64_t data_size_;
};

}  // namespace

core::Result<SafetensorsHeader> parseSafetensorsHeader(const uint8_t* bytes, size_t file_size,
                                                       std::string_view file_label) {
    if (file_size == 0) {
        return core::corrupt("{}: file is empty (a safetensors file starts with an 8-byte header length)", file_label);
    }
    if (file_size < 8) {
        return core::corrupt("{}: file is {} bytes, shorter than the 8-byte header length", file_label, file_size);
    }
    const uint64_t header_len = readU64Le(bytes);
    if (header_len > file_size - 8) {
        return core::corrupt("{}: header length {} reaches past the end of the file ({} bytes after the length)",
                             file_label, header_len, file_size - 8);
    }
    if (header_len > kMaxSafetensorsHeaderBytes) {
        return core::corrupt("{}: header length {} exceeds the limit of {} bytes", file_label, header_len,
                             kMaxSafetensorsHeaderBytes);
    }
    const uint8_t* text = bytes + 8;
    const size_t text_size = static_cast<size_t>(header_len);
    // NOTE: nlohmann's lexer takes a NUL byte for the end of its input and would ignore what follows; JSON never
    // holds a raw NUL (not even inside a string), so any NUL makes the header invalid.
    if (const void* nul = std::memchr(text, 0, text_size); nul != nullptr) {
        return core::corrupt("{}: header is not valid JSON: NUL byte at header offset {}", file_label,
                             static_cast<const uint8_t*>(nul) - text);
    }
    if (maxNesting(text, text_size) > kMaxNesting) {
        return core::corrupt("{}: header nests objects or arrays deeper than {} levels", file_label, kMaxNesting);
    }

    Json root;
    std::optional<DuplicateKey> duplicate;
    try {
        root = parseJsonRejectingDuplicates(text, text_size, &duplicate);
    } catch (const Json::exception& e) {
        return core::corrupt("{}: header is not valid JSON: {}", file_label, e.what());
    }
    if (duplicate) {
        if (duplicate->entry.empty()) {
            return core::corrupt("{}: tensor '{}' appears more than once in the header", file_label,
                                 clipped(duplicate->key));
        }
        return core::corrupt("{}: tensor '{}': key '{}' appears more than once", file_label, clipped(duplicate->entry),
                             clipped(duplicate->key));
    }
    if (!root.is_object()) {
        return core::corrupt("{}: header must be a JSON object, got {}", file_label, root.type_name());
    }

    SafetensorsHeader header;
    header.data_offset = 8 + header_len;
    const HeaderValidator validator(file_label, file_size - header.data_offset);
    header.tensors.reserve(root.size());
    for (const auto& [name, entry] : root.items()) {
        if (name == "__metadata__") {
            AFD_RETURN_IF_ERROR(validator.metadata(entry, &header.metadata));
            continue;
        }
        AFD_ASSIGN_OR_RETURN(TensorInfo info, validator.tensor(name, entry));
        header.tensors.push_back(std::move(info));
    }
    std::sort(header.tensors.begin(), header.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
        if (a.data_begin != b.data_begin) return a.data_begin < b.data_begin;
        if (a.data_end != b.data_end) return a.data_end < b.data_end;
        return a.name < b.name;
    });
    AFD_RETURN_IF_ERROR(validator.noOverlap(header.tensors));
    return header;
}

}  // namespace afd::model
