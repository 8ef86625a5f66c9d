// `afd generate --device cuda` and `afd launch --device cuda` as a user runs them, on the GPU (skipped without one):
// the dense GPU engine gives the HF fixture's greedy ids and prompt logits, graphs or not; --random-weights draws the
// weights `afd gen-model` writes for the same seed; GPU attention ranks with GPU FFN ranks over TCP give the dense GPU
// engine's ids (and the CPU reference's).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "common/subprocess_util.h"
#if defined(AFD_HAVE_CUDA)
#include "kernels/cuda/device_info.h"
#endif

namespace afd::cli {
namespace {

using namespace std::chrono_literals;
using afd::testing::ProcessResult;
using afd::testing::runProcess;
using afd::testing::TempDir;
using nlohmann::json;

const std::string kFixture = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny";
const std::string kTiny = kFixture + "/model";

int visibleGpus() {
#if defined(AFD_HAVE_CUDA)
    return kernels::cuda::deviceCount();
#else
    return 0;
#endif
}

json expected() {
    std::ifstream in(kFixture + "/expected.json");
    return json::parse(in);
}

std::string joinIds(const std::vector<int32_t>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
    return s;
}

ProcessResult afd(const std::vector<std::string>& args, std::chrono::milliseconds timeout = 180s) {
    std::vector<std::string> argv{AFD_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    return runProcess(argv, timeout);
}

class CudaCli : public ::testing::Test {
protected:
    void SetUp() override {
        if (visibleGpus() == 0) GTEST_SKIP() << "no CUDA device";
        const json e = expected();
        prompt_ = joinIds(e.at("prompt_ids").get<std::vector<int32_t>>());
        greedy_ = e.at("greedy_new_ids").get<std::vector<int32_t>>();
        logits_ = e.at("prompt_last_logits_fp32").get<std::vector<float>>();
    }
    // FFN ranks of an m2n 1A2F deployment: two GPUs when there are, else both on GPU 0.
    static std::string twoFfnGpus() { return visibleGpus() >= 2 ? "0,1" : "0,0"; }

    std::string prompt_;
    std::vector<int32_t> greedy_;
    std::vector<float> logits_;
};

TEST_F(CudaCli, DenseGpuEngineGivesTheFixturesGreedyIdsWithAndWithoutGraphs) {
    for (const bool eager : {false, true}) {
        std::vector<std::string> args{"generate", "--model",      kTiny, "--device", "cuda",           "--prompt-ids",
                                      prompt_,    "--max-tokens", "12",  "--json",   "--prompt-logits"};
        if (eager) args.push_back("--enforce-eager");
        const ProcessResult r = afd(args);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const json out = json::parse(r.out).at("results").at(0);
        EXPECT_EQ(out.at("new_ids").get<std::vector<int32_t>>(), greedy_) << (eager ? "eager" : "graphs");
        const auto got = out.at("prompt_last_logits").get<std::vector<float>>();
        ASSERT_EQ(got.size(), logits_.size());
        double num = 0, den = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            num += (double(got[i]) - logits_[i]) * (double(got[i]) - logits_[i]);
            den += double(logits_[i]) * logits_[i];
        }
        EXPECT_LT(std::sqrt(num / den), 2e-2) << "prompt logits against transformers' fp32 ones";
    }
}

TEST_F(CudaCli, RandomWeightsAreTheWeightsGenModelWrites) {
    TempDir dir;
    ASSERT_EQ(afd({"gen-model", "--preset", "tiny", "--out", dir.path(), "--seed", "5"}).exit_code, 0);
    const std::vector<std::string> job{"--device",     "cuda",  "--prompt-ids", "3,17,99,250",
                                       "--prompt-ids", "11,12", "--max-tokens", "10"};
    auto run = [&](std::vector<std::string> source) {
        std::vector<std::string> args{"generate"};
        args.insert(args.end(), source.begin(), source.end());
        args.insert(args.end(), job.begin(), job.end());
        return afd(args);
    };
    const ProcessResult checkpoint = run({"--model", dir.path()});
    ASSERT_EQ(checkpoint.exit_code, 0) << checkpoint.err;
    ASSERT_FALSE(checkpoint.out.empty());
    const ProcessResult preset = run({"--preset", "tiny", "--random-weights", "--weights-seed", "5"});
    ASSERT_EQ(preset.exit_code, 0) << preset.err;
    EXPECT_EQ(preset.out, checkpoint.out);
    // The directory's config.json alone (its safetensors are not read).
    const ProcessResult config_only = run({"--model", dir.path(), "--random-weights", "--weights-seed", "5"});
    ASSERT_EQ(config_only.exit_code, 0) << config_only.err;
    EXPECT_EQ(config_only.out, checkpoint.out);
    const ProcessResult other_seed = run({"--preset", "tiny", "--random-weights", "--weights-seed", "6"});
    ASSERT_EQ(other_seed.exit_code, 0) << other_seed.err;
    EXPECT_NE(other_seed.out, checkpoint.out);
}

// `afd launch --device cuda`: attention and FFN ranks on GPUs over TCP, the dense reference on the attention GPU.
void expectLaunchMatches(const ProcessResult& r, const std::string& reference_device,
                         const std::vector<int32_t>& greedy) {
    ASSERT_FALSE(r.timed_out);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json out = json::parse(r.out);
    EXPECT_TRUE(out["afd"]["matches_dense_reference"].get<bool>()) << out["afd"].dump();
    EXPECT_EQ(out["afd"]["reference_device"].get<std::string>(), reference_device);
    EXPECT_TRUE(out["afd"]["clean_shutdown"].get<bool>());
    EXPECT_EQ(out["results"][0]["new_ids"].get<std::vector<int32_t>>(), greedy);
}

TEST_F(CudaCli, LaunchM2n1A2FOverTcpGivesTheDenseGpuEnginesIds) {
    const ProcessResult r = afd(
        {"launch", "--model", kTiny, "--device", "cuda", "--attention-device-ids", "0", "--ffn-device-ids",
         twoFfnGpus(), "--max-tokens", "12", "--json", "--additional-config",
         R"({"afd":{"connector":"tcp","num_attention_ranks":1,"num_ffn_ranks":2,"compute_gate_on_attention":true}})",
         "--prompt-ids", prompt_, "--prompt-ids", "11,12,13"},
        300s);
    expectLaunchMatches(r, "cuda:0", greedy_);
}

TEST_F(CudaCli, LaunchP2p1A1FOverTcpGivesTheDenseGpuEnginesIds) {
    const ProcessResult r = afd(
        {"launch", "--model", kTiny, "--device", "cuda", "--ffn-device-ids", "0", "--max-tokens", "12", "--json",
         "--additional-config",
         R"({"afd":{"connector":"tcp","num_attention_ranks":1,"num_ffn_ranks":1,"compute_gate_on_attention":false}})",
         "--prompt-ids", prompt_, "--prompt-ids", "200,7"},
        300s);
    expectLaunchMatches(r, "cuda:0", greedy_);
}

// The same deployments through the cuda_ipc connector (every per-layer frame device to device), and 2A2F; on one GPU
// every rank shares it (the launcher runs them under MPS).
std::string cudaIpcConfig(int attention, int ffn, bool m2n) {
    return fmt::format(R"({{"afd":{{"connector":"cuda_ipc","num_attention_ranks":{},"num_ffn_ranks":{},)"
                       R"("compute_gate_on_attention":{}}}}})",
                       attention, ffn, m2n ? "true" : "false");
}

TEST_F(CudaCli, LaunchM2n1A2FOverCudaIpcGivesTheDenseGpuEnginesIds) {
    const ProcessResult r =
        afd({"launch", "--model", kTiny, "--device", "cuda", "--attention-device-ids", "0", "--ffn-device-ids",
             twoFfnGpus(), "--max-tokens", "12", "--json", "--additional-config", cudaIpcConfig(1, 2, true),
             "--prompt-ids", prompt_, "--prompt-ids", "11,12,13"},
            300s);
    expectLaunchMatches(r, "cuda:0", greedy_);
}

TEST_F(CudaCli, LaunchM2n1A1FOverCudaIpcGivesTheDenseGpuEnginesIds) {
    const ProcessResult r =
        afd({"launch", "--model", kTiny, "--device", "cuda", "--ffn-device-ids", "0", "--max-tokens", "12", "--json",
             "--additional-config", cudaIpcConfig(1, 1, true), "--prompt-ids", prompt_, "--prompt-ids", "5,6"},
            300s);
    expectLaunchMatches(r, "cuda:0", greedy_);
}

TEST_F(CudaCli, LaunchM2n2A2FOverCudaIpcGivesTheDenseGpuEnginesIds) {
    const std::string gpus = visibleGpus() >= 2 ? "0,1" : "0,0";
    const ProcessResult r = afd({"launch",
                                 "--model",
                                 kTiny,
                                 "--device",
                                 "cuda",
                                 "--attention-device-ids",
                                 gpus,
                                 "--ffn-device-ids",
                                 gpus,
                                 "--gpu-memory-utilization",
                                 "0.2",
                                 "--max-tokens",
                                 "12",
                                 "--json",
                                 "--additional-config",
                                 cudaIpcConfig(2, 2, true),
                                 "--prompt-ids",
                                 prompt_,
                                 "--prompt-ids",
                                 "9,8,7"},
                                300s);
    expectLaunchMatches(r, "cuda:0", greedy_);
}

TEST_F(CudaCli, LaunchP2p1A1FOverCudaIpcGivesTheDenseGpuEnginesIds) {
    const ProcessResult r =
        afd({"launch", "--model", kTiny, "--device", "cuda", "--ffn-device-ids", "0", "--max-tokens", "12", "--json",
             "--additional-config", cudaIpcConfig(1, 1, false), "--prompt-ids", prompt_, "--prompt-ids", "200,7"},
            300s);
    expectLaunchMatches(r, "cuda:0", greedy_);
}

// Eager (no graph on either role) and dual-batch overlap (two-stage steps; the FFN ranks serve them on two lanes).
TEST_F(CudaCli, LaunchOverCudaIpcEagerAndWithDboGivesTheDenseGpuEnginesIds) {
    for (const char* mode : {"--enforce-eager", "--dbo"}) {
        for (const auto& [ffn_gpus, m2n] : {std::pair{twoFfnGpus(), true}, std::pair{std::string("0"), false}}) {
            SCOPED_TRACE(std::string(mode) + (m2n ? " m2n 1A2F" : " p2p 1A1F"));
            const int F = m2n ? 2 : 1;
            const ProcessResult r = afd({"launch",
                                         "--model",
                                         kTiny,
                                         "--device",
                                         "cuda",
                                         "--attention-device-ids",
                                         "0",
                                         "--ffn-device-ids",
                                         ffn_gpus,
                                         mode,
                                         "--max-tokens",
                                         "12",
                                         "--json",
                                         "--additional-config",
                                         cudaIpcConfig(1, F, m2n),
                                         "--prompt-ids",
                                         prompt_,
                                         "--prompt-ids",
                                         "11,12,13",
                                         "--prompt-ids",
                                         "5,6",
                                         "--prompt-ids",
                                         "9"},
                                        300s);
            expectLaunchMatches(r, "cuda:0", greedy_);
        }
    }
}

TEST_F(CudaCli, LaunchOnGpusAgreesWithTheCpuReference) {
    const ProcessResult r =
        afd({"launch", "--model", kTiny, "--device", "cuda", "--ffn-device-ids", twoFfnGpus(), "--reference-device",
             "cpu", "--max-tokens", "12", "--json", "--prompt-ids", prompt_, "--prompt-ids", "42"},
            300s);
    expectLaunchMatches(r, "cpu", greedy_);
}

}  // namespace
}  // namespace afd::cli
