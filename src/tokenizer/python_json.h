// JSON text as Python's json.dumps(value, ensure_ascii=False) writes it, which is what transformers' `tojson`
// template filter produces: ", " between items and ": " after keys, keys in the order the object holds them,
// non-ASCII characters as they are (only '"', '\\' and control characters escaped, the latter as \n, \t … or
// \u00XX), and floats as Python's repr writes them (shortest round-trip digits; 1e-05, 1e+16, 2.0).
// NOTE: this header brings nlohmann/json; include it from .cpp files.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace afd::tokenizer {

// ordered_json keeps keys in document order, as a Python dict parsed from the same JSON does.
std::string pythonJsonDumps(const nlohmann::ordered_json& value);

// A double as Python's repr(float) writes it.
std::string pythonFloatRepr(double value);

}  // namespace afd::tokenizer
