#include "core/json_fields.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

#include "core/check.h"

namespace afd::core {
namespace {

using nlohmann::json;

constexpr size_t kMaxShownChars = 64;

constexpr std::string_view kIntegerRule = "an integer";

// The text of a string value without surrounding whitespace, lower-cased when `lower`.
std::string trimmed(const json& value, bool lower) {
    const auto& text = value.get_ref<const std::string&>();
    size_t begin = 0;
    size_t end = text.size();
    while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
    while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
    std::string out = text.substr(begin, end - begin);
    if (lower) {
        for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return out;
}

Result<int64_t> toInt(const json& value, std::string_view name) {
    if (value.is_number_unsigned()) {
        const auto v = value.get<uint64_t>();
        if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            return jsonTypeError(value, name, "an integer in the 64-bit signed range");
        }
        return static_cast<int64_t>(v);
    }
    if (value.is_number_integer()) return value.get<int64_t>();
    if (value.is_string()) {
        // A decimal integer with one optional sign, surrounded by optional whitespace.
        std::string text = trimmed(value, false);
        const char* begin = text.data();
        const char* end = begin + text.size();
        const bool plus = begin != end && *begin == '+';
        if (plus) ++begin;
        int64_t v = 0;
        const auto [ptr, ec] = std::from_chars(begin, end, v);
        const bool sign_ok =
            begin != end && (std::isdigit(static_cast<unsigned char>(*begin)) || (!plus && *begin == '-'));
        if (sign_ok && ptr == end) {
            if (ec == std::errc::result_out_of_range) {
                return jsonTypeError(value, name, "an integer in the 64-bit signed range");
            }
            if (ec == std::errc()) return v;
        }
    }
    return jsonTypeError(value, name, kIntegerRule);
}

template <typename T>
Result<std::vector<T>> toList(const json& value, std::string_view name, std::string_view rule) {
    if (!value.is_array()) return jsonTypeError(value, name, rule);
    std::vector<T> out;
    out.reserve(value.size());
    for (size_t i = 0; i < value.size(); ++i) {
        Result<T> entry = jsonAs<T>(value[i], fmt::format("{}[{}]", name, i));
        if (!entry.isOk()) return entry.status();
        out.push_back(std::move(entry).value());
    }
    return out;
}

}  // namespace

std::string jsonShown(const json& value) {
    if (value.is_null()) return "null";
    std::string text = value.dump();
    if (text.size() > kMaxShownChars) text = text.substr(0, kMaxShownChars) + "...";
    return fmt::format("{} {}", value.type_name(), text);
}

Status jsonTypeError(const json& value, std::string_view name, std::string_view rule) {
    return invalidArgument("{} must be {}, got {}", name, rule, jsonShown(value));
}

Status checkInRange(std::string_view name, int64_t value, int64_t min, int64_t max) {
    if (value < min || value > max) return invalidArgument("{} must be in [{}, {}], got {}", name, min, max, value);
    return Status::ok();
}

template <>
Result<bool> jsonAs<bool>(const json& value, std::string_view name) {
    if (value.is_boolean()) return value.get<bool>();
    if (value.is_number_integer() || value.is_number_unsigned()) {
        const bool zero_or_one = value.is_number_unsigned() ? value.get<uint64_t>() <= 1
                                                            : (value.get<int64_t>() == 0 || value.get<int64_t>() == 1);
        if (zero_or_one) return value.get<int64_t>() == 1;
    }
    if (value.is_string()) {
        const std::string text = trimmed(value, true);
        if (text == "1" || text == "true" || text == "yes" || text == "on") return true;
        if (text == "0" || text == "false" || text == "no" || text == "off") return false;
    }
    return jsonTypeError(value, name,
                         "a boolean (true, false, 0, 1, or one of the strings true/false, yes/no, on/off)");
}

template <>
Result<int64_t> jsonAs<int64_t>(const json& value, std::string_view name) {
    return toInt(value, name);
}

template <>
Result<double> jsonAs<double>(const json& value, std::string_view name) {
    if (value.is_number()) return value.get<double>();
    if (value.is_string()) {
        const std::string text = trimmed(value, false);
        char* end = nullptr;
        const double v = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
        if (!text.empty() && end == text.c_str() + text.size() && std::isfinite(v)) return v;
    }
    return jsonTypeError(value, name, "a number");
}

template <>
Result<std::string> jsonAs<std::string>(const json& value, std::string_view name) {
    if (!value.is_string()) return jsonTypeError(value, name, "a string");
    return value.get<std::string>();
}

template <>
Result<std::vector<int64_t>> jsonAs<std::vector<int64_t>>(const json& value, std::string_view name) {
    return toList<int64_t>(value, name, "a list of integers");
}

template <>
Result<std::vector<std::string>> jsonAs<std::vector<std::string>>(const json& value, std::string_view name) {
    return toList<std::string>(value, name, "a list of strings");
}

Result<int64_t> jsonIntIn(const json& value, std::string_view name, int64_t min, int64_t max) {
    AFD_ASSIGN_OR_RETURN(const int64_t v, toInt(value, name));
    AFD_RETURN_IF_ERROR(checkInRange(name, v, min, max));
    return v;
}

JsonObjectReader::JsonObjectReader(const json& object, std::string path) : object_(&object), path_(std::move(path)) {
    AFD_CHECK(object.is_object(), "JsonObjectReader of {} ({})", path_.empty() ? "the top level" : path_,
              object.type_name());
}

Result<JsonObjectReader> JsonObjectReader::of(const json& value, std::string path) {
    if (!value.is_object()) return jsonTypeError(value, path, "an object");
    return JsonObjectReader(value, std::move(path));
}

std::string JsonObjectReader::name(std::string_view key) const {
    return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

const json* JsonObjectReader::find(std::string_view key, JsonNull null) const {
    const auto it = object_->find(std::string(key));
    if (it == object_->end() || (null == JsonNull::kMeansAbsent && it->is_null())) return nullptr;
    return &*it;
}

}  // namespace afd::core
