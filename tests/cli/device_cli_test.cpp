// `afd generate` and `afd launch` device and model-source flags as a user passes them, on any machine: every bad
// value ends with exit 2 and one message naming the flag (or the device), before any model is read, never a crash.
// Asking for a GPU that is not there names it: "no CUDA device is visible" on a machine without one, "cuda:N is not a
// visible CUDA device (M visible …)" past the last one, "built without the CUDA backend" in a build without CUDA.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/subprocess_util.h"
#if defined(AFD_HAVE_CUDA)
#include "kernels/cuda/device_info.h"
#endif

namespace afd::cli {
namespace {

using afd::testing::ProcessResult;
using afd::testing::runProcess;

const std::string kTiny = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";

int visibleGpus() {
#if defined(AFD_HAVE_CUDA)
    return kernels::cuda::deviceCount();
#else
    return 0;
#endif
}

ProcessResult afd(const std::vector<std::string>& args) {
    std::vector<std::string> argv{AFD_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    return runProcess(argv);
}

void expectBadConfig(const ProcessResult& r, const std::string& needle) {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_FALSE(r.timed_out);
    EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
}

// What asking for cuda:gpu must say on this machine.
std::string missingGpuMessage(const std::string& flag, int gpu) {
#if defined(AFD_HAVE_CUDA)
    const int visible = visibleGpus();
    if (visible == 0) return flag + " cuda: no CUDA device is visible";
    return flag + " cuda: cuda:" + std::to_string(gpu) + " is not a visible CUDA device (" + std::to_string(visible) +
           " visible";
#else
    (void)gpu;
    return flag + " cuda: this afd was built without the CUDA backend";
#endif
}

TEST(DeviceCli, GenerateOnAGpuThatIsNotThereNamesIt) {
    const std::vector<std::string> base{"generate", "--model", kTiny, "--prompt-ids", "3,17", "--max-tokens", "2"};
    auto with = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = base;
        args.insert(args.end(), extra.begin(), extra.end());
        return afd(args);
    };
    expectBadConfig(with({"--device", "cuda", "--device-ids", "999"}), missingGpuMessage("--device", 999));
    if (visibleGpus() == 0) expectBadConfig(with({"--device", "cuda"}), missingGpuMessage("--device", 0));
}

TEST(DeviceCli, GenerateRefusesBadDeviceFlags) {
    const std::vector<std::string> base{"generate", "--model", kTiny, "--prompt-ids", "3,17"};
    auto with = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = base;
        args.insert(args.end(), extra.begin(), extra.end());
        return afd(args);
    };
    expectBadConfig(with({"--device", "tpu"}), "--device");
    expectBadConfig(with({"--device-ids", "0"}), "--device-ids \"0\" needs --device cuda");
    expectBadConfig(with({"--device", "cuda", "--device-ids", "0,x"}), "\"x\" is not a GPU index");
    expectBadConfig(with({"--gpu-memory-utilization", "0"}), "--gpu-memory-utilization");
    expectBadConfig(with({"--gpu-memory-utilization", "1.5"}), "--gpu-memory-utilization");
    expectBadConfig(with({"--cuda-graph-max-batch-size", "-1"}), "--cuda-graph-max-batch-size");
}

TEST(DeviceCli, GenerateMapsTheAttentionRankThroughDeviceIds) {
    // Attention rank 1 of 2 with one GPU listed: refused before any GPU, model or peer is looked at.
    const ProcessResult r = afd({"generate", "--model", kTiny, "--device", "cuda", "--device-ids", "0",
                                 "--attention-rank", "1", "--additional-config",
                                 R"({"afd":{"role":"attention","num_attention_ranks":2,"num_ffn_ranks":1,)"
                                 R"("compute_gate_on_attention":true,"port":1}})"});
    expectBadConfig(r, "--device-ids \"0\" lists 1 GPU(s), so it has none for attention rank 1");
}

TEST(DeviceCli, RandomWeightsAreRefusedOnTheCpu) {
    expectBadConfig(afd({"generate", "--preset", "tiny", "--random-weights", "--prompt-ids", "3,17"}),
                    "--random-weights draws the weights on a GPU: add --device cuda");
    expectBadConfig(afd({"generate", "--model", kTiny, "--random-weights", "--weights-seed", "4", "--prompt-ids", "3"}),
                    "afd gen-model --seed 4");
}

TEST(DeviceCli, ModelSourceFlagsAreChecked) {
    expectBadConfig(afd({"generate", "--preset", "tiny", "--prompt-ids", "3"}),
                    "--preset gives a shape without weights: add --random-weights");
    expectBadConfig(afd({"generate", "--config", kTiny + "/config.json", "--prompt-ids", "3"}),
                    "--config gives a shape without weights: add --random-weights");
    expectBadConfig(afd({"generate", "--model", kTiny, "--layers", "2", "--prompt-ids", "3"}),
                    "--layers 2 needs --random-weights");
    expectBadConfig(afd({"generate", "--model", kTiny, "--preset", "tiny", "--random-weights", "--prompt-ids", "3"}),
                    "give one of --model, --config or --preset");
    expectBadConfig(afd({"generate", "--prompt-ids", "3"}), "--model is required");
    expectBadConfig(afd({"generate", "--model", kTiny, "--weights-seed", "3", "--prompt-ids", "3"}), "--weights-seed");
    // An AFD attention rank draws random weights on its GPU too (its FFN ranks with `afd ffn --random-weights`); the
    // CPU has no generator.
    expectBadConfig(afd({"generate", "--preset", "tiny", "--random-weights", "--prompt-ids", "3", "--additional-config",
                         R"({"afd":{"role":"attention","port":1}})"}),
                    "--random-weights draws the weights on a GPU");
}

TEST(DeviceCli, LaunchChecksEveryRanksDeviceBeforeStartingAny) {
    if (visibleGpus() == 0) {
        expectBadConfig(afd({"launch", "--device", "cuda"}), missingGpuMessage("--device", 0));
        expectBadConfig(afd({"launch", "--attention-device", "cuda"}), missingGpuMessage("--attention-device", 0));
        expectBadConfig(afd({"launch", "--ffn-device", "cuda"}), missingGpuMessage("--ffn-device", 0));
        expectBadConfig(afd({"launch", "--reference-device", "cuda"}), missingGpuMessage("--reference-device", 0));
    }
    expectBadConfig(afd({"launch", "--device", "cuda", "--ffn-device-ids", "0,999"}),
                    missingGpuMessage("--device", visibleGpus() == 0 ? 0 : 999));
    expectBadConfig(afd({"launch", "--attention-device-ids", "0"}), "--attention-device-ids \"0\" needs --device cuda");
    expectBadConfig(afd({"launch", "--ffn-device-ids", "0"}), "--ffn-device-ids \"0\" needs --device cuda");
    expectBadConfig(afd({"launch", "--device", "tpu"}), "--device");
    expectBadConfig(afd({"launch", "--reference-device", "tpu"}), "--reference-device");
}

TEST(DeviceCli, LaunchOnTheCpuSaysWhereTheReferenceRan) {
    const ProcessResult r = runProcess({AFD_BINARY, "launch", "--max-tokens", "3"}, std::chrono::seconds(120));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("matches the dense reference (cpu): yes"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace afd::cli
