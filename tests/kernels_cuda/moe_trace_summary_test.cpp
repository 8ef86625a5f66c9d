// The text of `afd bench moe --timeline` (kernels/cuda/moe_trace_summary.h) from stamps made up here, so that each
// figure it prints can be checked against its definition: event times from the first CTA entry, and per item class
// the count, the median time per item and the weight rate per SM, each CTA's first item left out. Runs everywhere.
#include "kernels/cuda/moe_trace_summary.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"
#include "kernels/moe_cuda.h"

namespace afd::kernels::cuda {
namespace {

class TraceBuilder {
public:
    TraceBuilder() : stamps_(kMoeTraceWords, 0) {}
    uint64_t& layer(int word) { return stamps_[kMoeTraceLayerOffset + word]; }
    uint64_t& at(int kernel, int cta, int slot) {
        return stamps_[static_cast<size_t>((kernel * kMoeTraceMaxCtas + cta) * kMoeTraceSlots + slot)];
    }
    // Item n of a CTA: finished at `end_ns`, of an expert with `tiles` token tiles, having streamed `bytes` of weights.
    void item(int kernel, int cta, int n, uint64_t end_ns, uint64_t tiles, uint64_t bytes) {
        const int word = kTraceItemLog + n * kMoeTraceItemWords;
        at(kernel, cta, word) = end_ns;
        at(kernel, cta, word + 1) = 7u | (uint64_t{100} << 16) | (tiles << 32);
        at(kernel, cta, word + 2) = bytes;
        at(kernel, cta, kTraceItems) = static_cast<uint64_t>(n + 1);
    }
    const std::vector<uint64_t>& stamps() const { return stamps_; }

private:
    std::vector<uint64_t> stamps_;
};

std::string lineWith(const std::string& text, const std::string& words) {
    const size_t at = text.find(words);
    if (at == std::string::npos) {
        return "";
    }
    const size_t begin = text.rfind('\n', at) + 1;
    return text.substr(begin, text.find('\n', at) - begin);
}

TEST(MoeTraceSummaryTest, ReportsEventsAndItemRatesByClass) {
    TraceBuilder t;
    // Gate-up CTA 0 enters first (t0 = 1000 ns); CTA 1 at 3000. First data at 5000 and 9000 ns.
    t.at(0, 0, kTraceEntry) = 1000;
    t.at(0, 1, kTraceEntry) = 3000;
    t.at(0, 0, kTraceFirstData) = 5000;
    t.at(0, 1, kTraceFirstData) = 9000;
    // CTA 0: three items of one-tile experts, 1 MB each, ending 10 us apart (the first is left out): 100 GB/s.
    t.item(0, 0, 0, 20000, 1, 1000000);
    t.item(0, 0, 1, 30000, 1, 1000000);
    t.item(0, 0, 2, 40000, 1, 1000000);
    // CTA 1: a first item, then two of an expert of several tiles, 20 and 40 us after the previous: 50 and 25 GB/s.
    t.item(0, 1, 0, 21000, 1, 1000000);
    t.item(0, 1, 1, 41000, 3, 1000000);
    t.item(0, 1, 2, 81000, 3, 1000000);
    const std::string text = summariseMoeTrace(t.stamps(), 123.4);

    EXPECT_NE(text.find("traced replay 123.4 us"), std::string::npos) << text;
    EXPECT_NE(text.find("gate-up  2 CTAs, 2 with items (3..3 each)"), std::string::npos) << text;
    EXPECT_EQ(text.find("down"), std::string::npos) << "no down CTA ran:\n" << text;
    // first-data: 4 and 8 us from t0; the median of two is the upper one.
    EXPECT_NE(lineWith(text, "first-data").find("4.00     8.00     8.00   (2 CTAs)"), std::string::npos) << text;
    const std::string once = lineWith(text, "expert of one tile");
    EXPECT_NE(once.find("2 items,   10.00 us each, weights 100.0 GB/s per SM"), std::string::npos) << text;
    const std::string several = lineWith(text, "expert of several");
    // Durations 20 and 40 us: median (upper) 40; rates 50 and 25 GB/s: median 50, p10 25, p90 50.
    EXPECT_NE(several.find("2 items,   40.00 us each, weights  50.0 GB/s per SM (p10 25.0, p90 50.0)"),
              std::string::npos)
        << text;
}

TEST(MoeTraceSummaryTest, SaysNothingOfItemsWithoutALog) {
    TraceBuilder t;
    t.at(1, 0, kTraceEntry) = 500;
    t.at(1, 0, kTraceLastMma) = 2500;
    const std::string text = summariseMoeTrace(t.stamps(), 10.0);
    EXPECT_NE(text.find("down     1 CTAs, 0 with items (0..0 each)"), std::string::npos) << text;
    EXPECT_NE(lineWith(text, "last-mma").find("2.00     2.00     2.00   (1 CTAs)"), std::string::npos) << text;
    EXPECT_EQ(text.find("items,"), std::string::npos) << text;
}

TEST(MoeTraceSummaryTest, PlacesThePermuteAndCombineAndWhatLiesOutsideTheKernels) {
    TraceBuilder t;
    // The permute enters first (t0 = 2000 ns; the earliest kept as its complement) and ends at 7000; the gate-up CTA
    // enters at 4000; the combine enters at 300000, passes its wait at 302000 and ends at 310000.
    t.layer(kTraceLayerPermuteEntry) = ~uint64_t{2000};
    t.layer(kTraceLayerPermuteEnd) = 7000;
    t.at(0, 0, kTraceEntry) = 4000;
    t.at(0, 0, kTraceFirstData) = 6000;
    t.layer(kTraceLayerCombineEntry) = ~uint64_t{300000};
    t.layer(kTraceLayerCombineStart) = ~uint64_t{302000};
    t.layer(kTraceLayerCombineEnd) = 310000;
    const std::string text = summariseMoeTrace(t.stamps(), 320.0);

    EXPECT_NE(lineWith(text, "permute").find("first entry 0.00, last end 5.00"), std::string::npos) << text;
    EXPECT_NE(lineWith(text, "combine").find("first entry 298.00, first past its wait 300.00, last end 308.00"),
              std::string::npos)
        << text;
    EXPECT_NE(lineWith(text, "kernels span")
                  .find("308.00 us from the first stamp to the combine's end; the "
                        "replay's other 12.00 us"),
              std::string::npos)
        << text;
    // The GEMM kernels' events count from the permute's entry too.
    EXPECT_NE(lineWith(text, "first-data").find("4.00     4.00     4.00   (1 CTAs)"), std::string::npos) << text;
}

TEST(MoeTraceSummaryTest, ReportsEachProducersWaitForTokenRowsAsADuration) {
    TraceBuilder t;
    // Three down CTAs whose producers finished, having waited 1, 4 and 9 us in all; a fourth never finished.
    const uint64_t waits_ns[3] = {1000, 4000, 9000};
    for (int cta = 0; cta < 3; ++cta) {
        t.at(1, cta, kTraceEntry) = 100;
        t.at(1, cta, kTraceProducerDone) = 50000;
        t.at(1, cta, kTraceWaited) = waits_ns[cta];
    }
    t.at(1, 3, kTraceEntry) = 100;
    t.at(1, 3, kTraceWaited) = 777000;
    const std::string text = summariseMoeTrace(t.stamps(), 60.0);
    EXPECT_NE(lineWith(text, "waited").find("1.00     4.00     9.00   us per CTA"), std::string::npos) << text;
}

TEST(MoeTraceSummaryTest, RefusesABufferOfAnotherSize) {
    const std::vector<uint64_t> short_buffer(100, 0);
    try {
        summariseMoeTrace(short_buffer, 1.0);
        FAIL() << "accepted 100 stamps";
    } catch (const core::Error& e) {
        EXPECT_NE(std::string(e.what()).find("100 stamps, expected"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace afd::kernels::cuda
