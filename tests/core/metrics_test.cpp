#include "core/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "core/check.h"

namespace afd::core {
namespace {

TEST(Metrics, EmptyRegistryRendersNothing) {
    MetricsRegistry registry;
    EXPECT_EQ(registry.render(), "");
}

TEST(Metrics, RendersCountersAndGaugesInTheTextFormat) {
    MetricsRegistry registry;
    Counter& steps = registry.counter("afd_ffn_steps_total", "Engine steps served.");
    Counter& layer3 =
        registry.counter("afd_ffn_layer_compute_seconds_total", "Time computing a layer.", {{"layer", "3"}});
    Counter& layer10 =
        registry.counter("afd_ffn_layer_compute_seconds_total", "Time computing a layer.", {{"layer", "10"}});
    Gauge& peers = registry.gauge("afd_ffn_connected_peers", "Attention ranks connected.");
    steps.inc();
    steps.inc(2);
    layer3.inc(0.25);
    layer10.inc(1.5);
    peers.set(4);
    peers.add(-1);
    EXPECT_EQ(registry.render(),
              "# HELP afd_ffn_steps_total Engine steps served.\n"
              "# TYPE afd_ffn_steps_total counter\n"
              "afd_ffn_steps_total 3\n"
              "# HELP afd_ffn_layer_compute_seconds_total Time computing a layer.\n"
              "# TYPE afd_ffn_layer_compute_seconds_total counter\n"
              "afd_ffn_layer_compute_seconds_total{layer=\"3\"} 0.25\n"
              "afd_ffn_layer_compute_seconds_total{layer=\"10\"} 1.5\n"
              "# HELP afd_ffn_connected_peers Attention ranks connected.\n"
              "# TYPE afd_ffn_connected_peers gauge\n"
              "afd_ffn_connected_peers 3\n");
}

TEST(Metrics, SameNameAndLabelsGiveTheSameObject) {
    MetricsRegistry registry;
    Counter& a = registry.counter("afd_bytes_total", "Bytes.", {{"peer", "0"}, {"dir", "a2f"}});
    Counter& b = registry.counter("afd_bytes_total", "Bytes.", {{"dir", "a2f"}, {"peer", "0"}});
    Counter& other = registry.counter("afd_bytes_total", "Bytes.", {{"dir", "f2a"}, {"peer", "0"}});
    EXPECT_EQ(&a, &b);
    EXPECT_NE(&a, &other);
    a.inc(7);
    EXPECT_EQ(b.value(), 7);
    // Labels render sorted by name.
    EXPECT_EQ(registry.render(),
              "# HELP afd_bytes_total Bytes.\n"
              "# TYPE afd_bytes_total counter\n"
              "afd_bytes_total{dir=\"a2f\",peer=\"0\"} 7\n"
              "afd_bytes_total{dir=\"f2a\",peer=\"0\"} 0\n");
}

TEST(Metrics, EscapesLabelValuesAndHelp) {
    MetricsRegistry registry;
    registry.gauge("afd_info", "A \"quoted\" help\\text\nsecond line.", {{"host", "a\"b\\c\nd"}}).set(1);
    EXPECT_EQ(registry.render(),
              "# HELP afd_info A \"quoted\" help\\\\text\\nsecond line.\n"
              "# TYPE afd_info gauge\n"
              "afd_info{host=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST(Metrics, ValuesUseTheShortestExactForm) {
    MetricsRegistry registry;
    registry.gauge("g", "h", {{"v", "a"}}).set(0);
    registry.gauge("g", "h", {{"v", "b"}}).set(-2.5);
    registry.gauge("g", "h", {{"v", "c"}}).set(1e-7);
    registry.gauge("g", "h", {{"v", "d"}}).set(123456789012);
    registry.gauge("g", "h", {{"v", "e"}}).set(std::numeric_limits<double>::infinity());
    registry.gauge("g", "h", {{"v", "f"}}).set(-std::numeric_limits<double>::infinity());
    registry.gauge("g", "h", {{"v", "g"}}).set(std::nan(""));
    EXPECT_EQ(registry.render(),
              "# HELP g h\n"
              "# TYPE g gauge\n"
              "g{v=\"a\"} 0\n"
              "g{v=\"b\"} -2.5\n"
              "g{v=\"c\"} 1e-07\n"
              "g{v=\"d\"} 123456789012\n"
              "g{v=\"e\"} +Inf\n"
              "g{v=\"f\"} -Inf\n"
              "g{v=\"g\"} NaN\n");
}

TEST(Metrics, ConcurrentUpdatesAreNotLost) {
    MetricsRegistry registry;
    constexpr int kThreads = 8;
    constexpr int kIncrements = 100000;
    {
        std::vector<std::jthread> threads;
        for (int t = 0; t < kThreads; ++t) {
            threads.emplace_back([&registry, t] {
                // Registration from many threads at once, then lock-free updates.
                Counter& shared = registry.counter("afd_shared_total", "Shared.");
                Gauge& level = registry.gauge("afd_level", "Level.");
                Counter& own = registry.counter("afd_own_total", "Own.", {{"thread", std::to_string(t)}});
                for (int i = 0; i < kIncrements; ++i) {
                    shared.inc();
                    own.inc(0.5);
                    level.add(i % 2 == 0 ? 1 : -1);
                }
                (void)registry.render();
            });
        }
    }
    EXPECT_EQ(registry.counter("afd_shared_total", "Shared.").value(), double{kThreads} * kIncrements);
    EXPECT_EQ(registry.gauge("afd_level", "Level.").value(), 0);
    for (int t = 0; t < kThreads; ++t) {
        EXPECT_EQ(registry.counter("afd_own_total", "Own.", {{"thread", std::to_string(t)}}).value(),
                  kIncrements * 0.5);
    }
}

TEST(Metrics, MisuseIsABug) {
    MetricsRegistry registry;
    registry.counter("afd_x_total", "X.", {{"layer", "1"}});
    EXPECT_THROW(registry.gauge("afd_x_total", "X."), Error);                               // type conflict
    EXPECT_THROW(registry.counter("afd_x_total", "Other help.", {{"layer", "2"}}), Error);  // help conflict
    EXPECT_THROW(registry.counter("afd_x_total", "X.", {{"stage", "0"}}), Error);           // label names differ
    EXPECT_THROW(registry.counter("afd_x_total", "X."), Error);                             // label names differ
    EXPECT_THROW(registry.counter("9starts_with_digit", "h"), Error);
    EXPECT_THROW(registry.counter("has-dash", "h"), Error);
    EXPECT_THROW(registry.counter("", "h"), Error);
    EXPECT_THROW(registry.counter("ok", "h", {{"bad-label", "v"}}), Error);
    EXPECT_THROW(registry.counter("ok2", "h", {{"__reserved", "v"}}), Error);
    EXPECT_THROW(registry.counter("ok3", "h", {{"a", "1"}, {"a", "2"}}), Error);
    EXPECT_THROW(registry.counter("afd_x_total", "X.", {{"layer", "1"}}).inc(-1), Error);
    // Colons are allowed in metric names, not in label names.
    registry.gauge("afd:recorded", "h");
    EXPECT_THROW(registry.gauge("afd_y", "h", {{"a:b", "v"}}), Error);
}

TEST(Metrics, HistogramsRenderCumulativeBucketsSumAndCount) {
    MetricsRegistry registry;
    Histogram& ttft =
        registry.histogram("afd_ttft_seconds", "Time to first token.", {0.1, 0.5, 2.5}, {{"endpoint", "chat"}});
    Histogram& bare = registry.histogram("afd_bare_seconds", "No labels.", {1});
    for (double v : {0.05, 0.1, 0.3, 0.5, 0.6, 3.0, 100.0}) ttft.observe(v);
    bare.observe(std::nan(""));  // not counted
    EXPECT_EQ(registry.render(),
              "# HELP afd_ttft_seconds Time to first token.\n"
              "# TYPE afd_ttft_seconds histogram\n"
              "afd_ttft_seconds_bucket{endpoint=\"chat\",le=\"0.1\"} 2\n"
              "afd_ttft_seconds_bucket{endpoint=\"chat\",le=\"0.5\"} 4\n"
              "afd_ttft_seconds_bucket{endpoint=\"chat\",le=\"2.5\"} 5\n"
              "afd_ttft_seconds_bucket{endpoint=\"chat\",le=\"+Inf\"} 7\n"
              "afd_ttft_seconds_sum{endpoint=\"chat\"} 104.55\n"
              "afd_ttft_seconds_count{endpoint=\"chat\"} 7\n"
              "# HELP afd_bare_seconds No labels.\n"
              "# TYPE afd_bare_seconds histogram\n"
              "afd_bare_seconds_bucket{le=\"1\"} 0\n"
              "afd_bare_seconds_bucket{le=\"+Inf\"} 0\n"
              "afd_bare_seconds_sum 0\n"
              "afd_bare_seconds_count 0\n");
    const Histogram::Snapshot snap = ttft.snapshot();
    EXPECT_EQ(snap.cumulative, (std::vector<uint64_t>{2, 4, 5, 7}));
    EXPECT_EQ(snap.count(), 7u);
    EXPECT_DOUBLE_EQ(snap.sum, 104.55);
}

TEST(Metrics, HistogramSeriesShareTheirFamilysBounds) {
    MetricsRegistry registry;
    Histogram& a = registry.histogram("afd_h", "H.", {1, 2}, {{"layer", "0"}});
    Histogram& again = registry.histogram("afd_h", "H.", {1, 2}, {{"layer", "0"}});
    Histogram& b = registry.histogram("afd_h", "H.", {1, 2}, {{"layer", "1"}});
    EXPECT_EQ(&a, &again);
    EXPECT_NE(&a, &b);
    EXPECT_EQ(b.upperBounds(), (std::vector<double>{1, 2}));
    EXPECT_THROW(registry.histogram("afd_h", "H.", {1, 3}, {{"layer", "2"}}), Error);  // other bounds
    EXPECT_THROW(registry.counter("afd_h", "H.", {{"layer", "0"}}), Error);            // other type
    EXPECT_THROW(registry.histogram("afd_h2", "h", {2, 1}), Error);                    // not increasing
    EXPECT_THROW(registry.histogram("afd_h3", "h", {1, 1}), Error);                    // not strictly
    EXPECT_THROW(registry.histogram("afd_h4", "h", {1, std::numeric_limits<double>::infinity()}), Error);
    EXPECT_THROW(registry.histogram("afd_h5", "h", {1}, {{"le", "x"}}), Error);  // reserved label
    // A refused first registration leaves no family behind.
    EXPECT_EQ(registry.render().find("afd_h2"), std::string::npos);
    registry.gauge("afd_g", "h", {{"le", "fine on a gauge"}});
}

TEST(Metrics, ExponentialBuckets) {
    EXPECT_EQ(exponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
    EXPECT_TRUE(exponentialBuckets(1, 2, 0).empty());
    EXPECT_THROW(exponentialBuckets(0, 2, 3), Error);
    EXPECT_THROW(exponentialBuckets(1, 1, 3), Error);
}

TEST(Metrics, ConcurrentObservationsAreNotLost) {
    MetricsRegistry registry;
    Histogram& h = registry.histogram("afd_h_seconds", "H.", {0.5, 1.5});
    constexpr int kThreads = 8;
    constexpr int kObservations = 50000;
    {
        std::vector<std::jthread> threads;
        for (int t = 0; t < kThreads; ++t) {
            threads.emplace_back([&] {
                for (int i = 0; i < kObservations; ++i) h.observe(i % 3);  // 0, 1, 2: one in each bucket
                (void)registry.render();
            });
        }
    }
    const Histogram::Snapshot snap = h.snapshot();
    const uint64_t third = uint64_t{kThreads} * kObservations / 3;
    EXPECT_EQ(snap.count(), uint64_t{kThreads} * kObservations);
    EXPECT_NEAR(static_cast<double>(snap.cumulative[0]), static_cast<double>(third), kThreads);
    EXPECT_NEAR(static_cast<double>(snap.cumulative[1]), 2.0 * static_cast<double>(third), 2.0 * kThreads);
    EXPECT_DOUBLE_EQ(snap.sum, static_cast<double>(snap.cumulative[1] - snap.cumulative[0]) +
                                   2.0 * static_cast<double>(snap.count() - snap.cumulative[1]));
}

TEST(Metrics, CollectorsRunBeforeEachRenderUntilTheirHandleGoes) {
    MetricsRegistry registry;
    int calls = 0;
    Gauge& level = registry.gauge("afd_level", "Level.");
    auto handle = registry.addCollector([&] {
        ++calls;
        level.set(calls * 10);
        registry.counter("afd_lazy_total", "Registered by the collector.").inc();
    });
    EXPECT_NE(registry.render().find("afd_level 10\n"), std::string::npos);
    const std::string second = registry.render();
    EXPECT_NE(second.find("afd_level 20\n"), std::string::npos) << second;
    EXPECT_NE(second.find("afd_lazy_total 2\n"), std::string::npos) << second;
    MetricsRegistry::CollectorHandle moved = std::move(handle);
    (void)registry.render();
    EXPECT_EQ(calls, 3);
    moved.reset();
    (void)registry.render();
    EXPECT_EQ(calls, 3);
    {
        MetricsRegistry::CollectorHandle scoped = registry.addCollector([&] { ++calls; });
        (void)registry.render();
    }
    (void)registry.render();
    EXPECT_EQ(calls, 4);
}

TEST(Metrics, GlobalRegistryIsOneInstance) { EXPECT_EQ(&globalMetrics(), &globalMetrics()); }

}  // namespace
}  // namespace afd::core
