// Typed reads of JSON config fields: one rule set for every config this engine parses (a model's config.json, the
// AFD config of --additional-config / --afd-config), so that a value means the same wherever it is written.
// NOTE: include this header from .cpp files of modules that link nlohmann_json only (model, transport, tests),
// never from another header: it brings the whole JSON library with it.
//
// The rules (those of the reference AFD plugin's config, which its tests pin, applied to every config alike):
//   boolean   true or false; the integers 0 and 1; the strings 1 / true / yes / on and 0 / false / no / off, case-
//             and space-insensitive
//   integer   a JSON integer in the 64-bit signed range, or a string holding one (" +42 "); not a float (2.0 is
//             refused: a size written as a float is a mistake), not a boolean; a range [min, max] when the caller
//             gives one
//   number    a JSON number (integers included: rope_theta 1000000), or a string holding one
//   string    a JSON string
//   lists     a JSON array whose every entry follows the entry's rule; entry i of `key` is named key[i]
//   object    a JSON object
//   null      a value like any other, so refused by every rule above, except where the caller reads a field as
//             nullable (transformers' Optional fields), where null means absent and the default stays
// Which keys a config accepts is the caller's rule (config.json ignores the many keys that do not change the
// math; the AFD config refuses unknown keys).
//
// Every refusal is kInvalidArgument and reads "<name> must be <rule>, got <what is there>", e.g.
// `afd.port must be an integer, got string "1239"`, `mlp_only_layers[1] must be an integer, got number 1.5`,
// `afd.port must be in [1, 65535], got 0`. <name> is the key path; the caller adds the source (file or flag) in
// front with Status::withContext.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace afd::core {

// How a field that is present with the value null is read.
enum class JsonNull {
    kIsAValue,     // null is checked against the field's rule like any value (and refused by every rule)
    kMeansAbsent,  // null is the same as an absent field (transformers' Optional fields)
};

// The value as messages show it: its JSON type and text, e.g. `string "64"`, `number 4.5`, `null`; the text is cut
// after 64 characters. NOTE: dump() recurses once per nesting level; parse documents with a depth limit.
std::string jsonShown(const nlohmann::json& value);

// "<name> must be <rule>, got <jsonShown(value)>" (kInvalidArgument): for rules a caller adds (e.g. "an integer or a
// list of integers"), so that their messages read like the accessors' own.
Status jsonTypeError(const nlohmann::json& value, std::string_view name, std::string_view rule);

// "<name> must be in [min, max], got <value>" when value is outside [min, max]. For range rules checked both on
// parsed values and in validate() of a struct built in code, so that both say the same.
Status checkInRange(std::string_view name, int64_t value, int64_t min, int64_t max);

// `value` converted by T's rule (see the top of this file); `name` is its key path in messages. T is one of bool,
// int64_t, double, std::string, std::vector<int64_t>, std::vector<std::string>.
template <typename T>
Result<T> jsonAs(const nlohmann::json& value, std::string_view name);
template <>
Result<bool> jsonAs<bool>(const nlohmann::json& value, std::string_view name);
template <>
Result<int64_t> jsonAs<int64_t>(const nlohmann::json& value, std::string_view name);
template <>
Result<double> jsonAs<double>(const nlohmann::json& value, std::string_view name);
template <>
Result<std::string> jsonAs<std::string>(const nlohmann::json& value, std::string_view name);
template <>
Result<std::vector<int64_t>> jsonAs<std::vector<int64_t>>(const nlohmann::json& value, std::string_view name);
template <>
Result<std::vector<std::string>> jsonAs<std::vector<std::string>>(const nlohmann::json& value, std::string_view name);

// An integer in [min, max].
Result<int64_t> jsonIntIn(const nlohmann::json& value, std::string_view name, int64_t min, int64_t max);

// A JSON object of a config, read field by field. `path` names the object in messages ("" for the top level of a
// file, "afd", "rope_parameters"): its field `key` is named "path.key", or "key" at the top level.
// NOTE: holds a reference; the object must outlive the reader.
class JsonObjectReader {
public:
    // Precondition: object.is_object() (AFD_CHECK). For a value of unknown type use of().
    JsonObjectReader(const nlohmann::json& object, std::string path);

    // The reader of `value`, or "<path> must be an object, got …".
    static Result<JsonObjectReader> of(const nlohmann::json& value, std::string path);

    const nlohmann::json& object() const { return *object_; }
    const std::string& path() const { return path_; }
    // The name of field `key` in messages.
    std::string name(std::string_view key) const;

    // The field `key`; nullptr when absent, or when null and `null` is kMeansAbsent.
    const nlohmann::json* find(std::string_view key, JsonNull null = JsonNull::kIsAValue) const;

    // An optional field: *out becomes the field's value by T's rule, and keeps its value (the default) when the
    // field is absent. T as for jsonAs.
    template <typename T>
    Status read(std::string_view key, T* out, JsonNull null = JsonNull::kIsAValue) const {
        const nlohmann::json* value = find(key, null);
        if (value == nullptr) return Status::ok();
        Result<T> converted = jsonAs<T>(*value, name(key));
        if (!converted.isOk()) return converted.status();
        *out = std::move(converted).value();
        return Status::ok();
    }

private:
    const nlohmann::json* object_;
    std::string path_;
};

}  // namespace afd::core
