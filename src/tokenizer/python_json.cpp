#include "tokenizer/python_json.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace afd::tokenizer {
namespace {

void appendString(const std::string& s, std::string* out) {
    out->push_back('"');
    for (const char c : s) {
        switch (c) {
            case '"':
                *out += "\\\"";
                break;
            case '\\':
                *out += "\\\\";
                break;
            case '\n':
                *out += "\\n";
                break;
            case '\r':
                *out += "\\r";
                break;
            case '\t':
                *out += "\\t";
                break;
            case '\b':
                *out += "\\b";
                break;
            case '\f':
                *out += "\\f";
                break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    *out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
                } else {
                    out->push_back(c);
                }
        }
    }
    out->push_back('"');
}

void appendValue(const nlohmann::ordered_json& v, std::string* out) {
    switch (v.type()) {
        case nlohmann::json::value_t::null:
            *out += "null";
            return;
        case nlohmann::json::value_t::boolean:
            *out += v.get<bool>() ? "true" : "false";
            return;
        case nlohmann::json::value_t::number_integer:
            *out += std::to_string(v.get<int64_t>());
            return;
        case nlohmann::json::value_t::number_unsigned:
            *out += std::to_string(v.get<uint64_t>());
            return;
        case nlohmann::json::value_t::number_float:
            *out += pythonFloatRepr(v.get<double>());
            return;
        case nlohmann::json::value_t::string:
            appendString(v.get_ref<const std::string&>(), out);
            return;
        case nlohmann::json::value_t::array: {
            out->push_back('[');
            bool first = true;
            for (const auto& item : v) {
                if (!first) *out += ", ";
                first = false;
                appendValue(item, out);
            }
            out->push_back(']');
            return;
        }
        case nlohmann::json::value_t::object: {
            out->push_back('{');
            bool first = true;
            for (const auto& [key, item] : v.items()) {
                if (!first) *out += ", ";
                first = false;
                appendString(key, out);
                *out += ": ";
                appendValue(item, out);
            }
            out->push_back('}');
            return;
        }
        case nlohmann::json::value_t::binary:
        case nlohmann::json::value_t::discarded:
            *out += "null";
            return;
    }
}

}  // namespace

std::string pythonFloatRepr(double value) {
    if (std::isnan(value)) return "NaN";
    if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
    // Shortest round-trip digits in scientific form: "-d.ddde±XX".
    char buffer[64];
    const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
    const std::string sci(buffer, result.ptr);
    const size_t e = sci.find('e');
    std::string mantissa = sci.substr(0, e);
    const int exponent = std::atoi(sci.c_str() + e + 1);
    const bool negative = !mantissa.empty() && mantissa[0] == '-';
    if (negative) mantissa.erase(0, 1);
    std::string digits;
    for (const char c : mantissa) {
        if (c != '.') digits.push_back(c);
    }
    std::string out = negative ? "-" : "";
    if (exponent >= -4 && exponent < 16) {  // Python's repr: fixed notation for 1e-4 <= |x| < 1e16
        if (exponent < 0) {
            out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
        } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
            out += digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
        } else {
            out += digits.substr(0, static_cast<size_t>(exponent) + 1) + "." +
                   digits.substr(static_cast<size_t>(exponent) + 1);
        }
        return out;
    }
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out;
}

std::string pythonJsonDumps(const nlohmann::ordered_json& value) {
    std::string out;
    appendValue(value, &out);
    return out;
}

}  // namespace afd::tokenizer
