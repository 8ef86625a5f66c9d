// `afd bench stream` (lab/stream_bench.h): bad options are refused before the device is touched (these run
// on every machine), and on a GPU a short run accounts its bytes consistently: each DRAM path's per-SM rate times the
// SMs is the aggregate rate it reports, within the spread of the CTAs' end times, and a paced path keeps its pace.
#include <gtest/gtest.h>

// The lab is a CUDA lab: without the CUDA backend there is nothing to test here.
#if defined(AFD_HAVE_CUDA)

#include <functional>
#include <string>
#include <vector>

#include "core/check.h"
#include "kernels/cuda/device_info.h"
#include "lab/stream_bench.h"

namespace afd::lab {
namespace {

StreamBenchOptions smallRun() {
    StreamBenchOptions o;
    o.sms = {2, 4};
    o.stages = {4};
    o.bytes_per_path = 2ll << 20;
    o.reps = 2;
    o.warmup_ms = 0;
    return o;
}

void expectRefused(const StreamBenchOptions& o, const std::string& words) {
    try {
        runStreamBench(o);
        FAIL() << "accepted options that should fail with: " << words;
    } catch (const core::Error& e) {
        EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
}

TEST(StreamBenchTest, RefusesBadOptionsBeforeTheDevice) {
    struct BadOptions {
        std::function<void(StreamBenchOptions&)> change;  // applied to smallRun()
        std::string words;                                // what the error says
    };
    const std::vector<BadOptions> cases = {
        {[](StreamBenchOptions& o) {
             o.modes = {"tma", "dram"};
         },
         "unknown mode 'dram'"},
        {[](StreamBenchOptions& o) { o.stage_kib = 48; }, "stage KiB 48 must divide 128"},
        {[](StreamBenchOptions& o) { o.stage_l2_kib = {3}; }, "stage L2 KiB 3 must be 0 or an even divisor"},
        {[](StreamBenchOptions& o) {
             o.modes = {"tma"};
             o.stages = {5};
             o.stage_l2_kib = {16};
         },
         "5 stages of 32 + 16 KiB exceed 200 KiB"},
        {[](StreamBenchOptions& o) {
             o.modes = {"tma+lsu-l2"};
             o.stage_l2_kib = {0};
         },
         "needs stage L2 KiB > 0"},
        {[](StreamBenchOptions& o) {
             o.modes = {"ld128"};
             o.stage_kib = 16;
         },
         "mode ld128 fills stages of 32 KiB from DRAM (stage KiB 16)"},
        {[](StreamBenchOptions& o) { o.pieces = {3}; }, "pieces 3 must be >= 1 and divide a stage of 32 KiB"},
        {[](StreamBenchOptions& o) { o.policies = {"lru"}; }, "unknown policy 'lru' (none, normal, first or layer)"},
        {[](StreamBenchOptions& o) { o.bytes_per_path = 1000; }, "bytes per path 1000 must be a positive multiple"},
        {[](StreamBenchOptions& o) { o.sms = {}; }, "need at least one value"},
    };
    for (const BadOptions& c : cases) {
        SCOPED_TRACE(c.words);
        StreamBenchOptions o = smallRun();
        c.change(o);
        expectRefused(o, c.words);
    }
}

TEST(StreamBenchTest, ReportsConsistentRatesOnTheDevice) {
    if (kernels::cuda::deviceCount() == 0) {
        GTEST_SKIP() << "no CUDA device";
    }
    StreamBenchOptions o = smallRun();
    o.modes = {"tma", "lsu", "tma-l2", "tma+lsu-l2", "tma+cp-stage", "lsu+tma-l2", "ld96", "cp128"};
    o.stage_l2_kib = {8};
    o.policies = {"none", "layer"};
    o.pieces = {1, 4};
    const StreamBenchResult r = runStreamBench(o);
    // Two policies x two SM counts per point; tma, tma+lsu-l2 and tma+cp-stage with both piece counts.
    ASSERT_EQ(r.rows.size(), 4u * (3 * 2 + 5));
    EXPECT_GT(r.copy_tbps, 0.1);
    for (const StreamBenchRow& row : r.rows) {
        SCOPED_TRACE(row.mode + " " + row.policy + " in " + std::to_string(row.pieces) + " pieces on " +
                     std::to_string(row.sms) + " SMs");
        if (row.mode == "tma" || row.mode == "lsu") {
            // The TMA path's rate counts its L2 bytes too: 8 KiB of each 32 + 8 KiB stage.
            const double per_sm = row.mode == "tma" ? row.tma_gbps_per_sm * 32.0 / 40.0 : row.lsu_gbps_per_sm;
            ASSERT_GT(per_sm, 1.0);
            // The aggregate is over the last CTA's end, the per-SM rate over each CTA's own: within 25 %.
            EXPECT_NEAR(row.dram_tbps * 1e3 / row.sms, per_sm, 0.25 * per_sm);
        }
        if (row.mode == "tma-l2") {
            EXPECT_EQ(row.dram_tbps, 0.0);  // no DRAM path
            EXPECT_GT(row.tma_gbps_per_sm, 1.0);
        }
        if (row.mode == "tma+lsu-l2") {
            EXPECT_GT(row.tma_gbps_per_sm, 1.0);
            EXPECT_GT(row.lsu_gbps_per_sm, 0.1);  // the L2 reads paced by the stages
        }
        if (row.mode == "tma+cp-stage" || row.mode == "ld96" || row.mode == "cp128") {
            // Each stage's 32 KiB from DRAM are counted in the DRAM rate, its 8 KiB from L2 in the stage rate.
            ASSERT_GT(row.tma_gbps_per_sm, 1.0);
            EXPECT_NEAR(row.dram_tbps * 1e3 / row.sms, row.tma_gbps_per_sm * 32.0 / 40.0, 0.25 * row.tma_gbps_per_sm);
        }
        if (row.mode == "lsu+tma-l2") {
            // The TMA reads of L2 are paced at half the loads' DRAM bytes: they end about when the loads do.
            ASSERT_GT(row.lsu_gbps_per_sm, 1.0);
            EXPECT_NEAR(row.tma_gbps_per_sm, 0.5 * row.lsu_gbps_per_sm, 0.25 * row.lsu_gbps_per_sm);
        }
    }
}

}  // namespace
}  // namespace afd::lab
#endif  // AFD_HAVE_CUDA
