#include "core/prometheus_text.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace afd::core {
namespace {

bool isNameChar(char c, bool first) {
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    return alpha || (!first && c >= '0' && c <= '9');
}

// Parses `{a="x",b="y"}` at `pos` (just past '{'); false when malformed.
bool parseLabels(std::string_view line, size_t& pos, std::vector<std::pair<std::string, std::string>>& labels) {
    while (pos < line.size()) {
        if (line[pos] == '}') {
            ++pos;
            return true;
        }
        if (line[pos] == ',') {
            ++pos;
            continue;
        }
        const size_t eq = line.find('=', pos);
        if (eq == std::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') return false;
        std::string name(line.substr(pos, eq - pos));
        std::string value;
        size_t i = eq + 2;
        for (; i < line.size() && line[i] != '"'; ++i) {
            if (line[i] == '\\' && i + 1 < line.size()) {
                ++i;
                value.push_back(line[i] == 'n' ? '\n' : line[i]);
            } else {
                value.push_back(line[i]);
            }
        }
        if (i >= line.size()) return false;
        labels.emplace_back(std::move(name), std::move(value));
        pos = i + 1;
    }
    return false;
}

}  // namespace

std::string PrometheusSample::label(std::string_view name) const {
    for (const auto& [key, value] : labels) {
        if (key == name) return value;
    }
    return {};
}

PrometheusText PrometheusText::parse(std::string_view text) {
    PrometheusText out;
    size_t start = 0;
    while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string_view::npos) end = text.size();
        const std::string_view line = text.substr(start, end - start);
        start = end + 1;
        if (line.empty() || line[0] == '#') continue;
        size_t pos = 0;
        while (pos < line.size() && isNameChar(line[pos], pos == 0)) ++pos;
        if (pos == 0) continue;
        PrometheusSample sample;
        sample.name = std::string(line.substr(0, pos));
        if (pos < line.size() && line[pos] == '{') {
            ++pos;
            if (!parseLabels(line, pos, sample.labels)) continue;
        }
        while (pos < line.size() && line[pos] == ' ') ++pos;
        const size_t value_end = std::min(line.find(' ', pos), line.size());
        const std::string value(line.substr(pos, value_end - pos));
        if (value.empty()) continue;
        char* parsed_end = nullptr;
        sample.value = std::strtod(value.c_str(), &parsed_end);  // "+Inf", "NaN" included
        if (parsed_end != value.c_str() + value.size()) continue;
        out.samples_.push_back(std::move(sample));
    }
    return out;
}

std::vector<PrometheusSample> PrometheusText::series(std::string_view name) const {
    std::vector<PrometheusSample> out;
    for (const auto& s : samples_) {
        if (s.name == name) out.push_back(s);
    }
    return out;
}

double PrometheusText::sum(std::string_view name) const { return sum(name, {}); }

double PrometheusText::sum(std::string_view name,
                           const std::vector<std::pair<std::string, std::string>>& labels) const {
    double total = 0.0;
    for (const auto& s : samples_) {
        if (s.name != name) continue;
        const bool match = std::all_of(labels.begin(), labels.end(), [&](const auto& want) {
            return std::find(s.labels.begin(), s.labels.end(), want) != s.labels.end();
        });
        if (match) total += s.value;
    }
    return total;
}

}  // namespace afd::core
