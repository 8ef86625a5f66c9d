#include "core/prometheus_text.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/metrics.h"

namespace afd::core {
namespace {

TEST(PrometheusText, ReadsWhatTheRegistryRenders) {
    MetricsRegistry registry;
    registry.counter("afd_tokens_total", "Tokens.", {{"kind", "prompt"}}).inc(7);
    registry.counter("afd_tokens_total", "Tokens.", {{"kind", "generation"}}).inc(5);
    registry.gauge("afd_blocks", "Blocks with \"quotes\".", {{"pool", "a\\b\"c\nd"}}).set(0.25);
    const PrometheusText text = PrometheusText::parse(registry.render());
    EXPECT_DOUBLE_EQ(text.sum("afd_tokens_total"), 12);
    EXPECT_DOUBLE_EQ(text.sum("afd_tokens_total", {{"kind", "prompt"}}), 7);
    EXPECT_DOUBLE_EQ(text.sum("afd_tokens_total", {{"kind", "other"}}), 0);
    const auto blocks = text.series("afd_blocks");
    ASSERT_EQ(blocks.size(), 1u);
    EXPECT_EQ(blocks[0].label("pool"), "a\\b\"c\nd");
    EXPECT_DOUBLE_EQ(blocks[0].value, 0.25);
    EXPECT_EQ(blocks[0].label("absent"), "");
}

TEST(PrometheusText, SkipsCommentsMalformedLinesAndKeepsSpecialValues) {
    const PrometheusText text = PrometheusText::parse(
        "# HELP x A.\n# TYPE x gauge\nx 1\nx{a=\"1\"} 2 1700000000\n{bad} 3\ny{a=\"unterminated} 4\nz notanumber\n"
        "w +Inf\nv NaN");
    EXPECT_DOUBLE_EQ(text.sum("x"), 3);
    EXPECT_EQ(text.samples().size(), 4u);
    EXPECT_TRUE(std::isinf(text.sum("w")));
    EXPECT_TRUE(std::isnan(text.sum("v")));
    EXPECT_TRUE(text.series("y").empty());
    EXPECT_TRUE(text.series("z").empty());
}

}  // namespace
}  // namespace afd::core
