// PrometheusText: a reader of the Prometheus text exposition format (what core/metrics.h renders and /metrics
// serves), for clients that show or check a few figures: `afd quickstart`, tests. Comment lines are skipped; each
// sample line is `name{label="value",…} value [timestamp]`. Lines that do not parse are skipped (a reader, not a
// validator).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace afd::core {

struct PrometheusSample {
    std::string name;
    std::vector<std::pair<std::string, std::string>> labels;  // in the order given, values unescaped
    double value = 0.0;

    // The value of label `name`, empty when absent.
    std::string label(std::string_view name) const;
};

class PrometheusText {
public:
    static PrometheusText parse(std::string_view text);

    // Every sample called `name`.
    std::vector<PrometheusSample> series(std::string_view name) const;
    // The sum of every sample called `name` (0 when there is none).
    double sum(std::string_view name) const;
    // The sample called `name` whose labels include every pair of `labels`, summed; 0 when none matches.
    double sum(std::string_view name, const std::vector<std::pair<std::string, std::string>>& labels) const;
    const std::vector<PrometheusSample>& samples() const { return samples_; }

private:
    std::vector<PrometheusSample> samples_;
};

}  // namespace afd::core
