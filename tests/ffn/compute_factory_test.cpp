#include "ffn/compute_factory.h"

#include <gtest/gtest.h>

namespace afd::ffn {
namespace {

TEST(DeviceMapping, LocalRankIndexesDeviceIds) {
    EXPECT_EQ(mapLocalRankToGpu("2,3", 1).value(), 3);
    EXPECT_EQ(mapLocalRankToGpu("2,3", 0).value(), 2);
    EXPECT_EQ(mapLocalRankToGpu("", 5).value(), 5);
    EXPECT_EQ(mapLocalRankToGpu("0,0", 1).value(), 0);  // two ranks sharing one GPU
}

TEST(DeviceMapping, BadListsAreErrorsNamingTheFlag) {
    for (const auto& [ids, rank, needle] :
         std::vector<std::tuple<std::string, int, std::string>>{{"2,x", 0, "--device-ids"},
                                                                {"2,,3", 0, "--device-ids"},
                                                                {"-1", 0, "--device-ids"},
                                                                {"2,3", 2, "LOCAL_RANK=2"}}) {
        auto r = mapLocalRankToGpu(ids, rank);
        ASSERT_FALSE(r.isOk()) << ids;
        EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    }
}

TEST(DeviceMapping, CpuTakesNoDeviceIdsAndUnknownDevicesAreRefused) {
    EXPECT_EQ(resolveDevice("cpu", "", 0).value(), -1);
    EXPECT_FALSE(resolveDevice("cpu", "0", 0).isOk());
    auto bad = resolveDevice("tpu", "", 0);
    ASSERT_FALSE(bad.isOk());
    EXPECT_NE(bad.status().message().find("--device"), std::string::npos);
}

}  // namespace
}  // namespace afd::ffn
