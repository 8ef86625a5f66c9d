// The exit-code table (core/exit_codes.h, the README's) on every command it applies to: 0 ok, 1 a run-time failure,
// 2 bad input found before any work, 3 a lost peer (a rendezvous timeout, a child rank killed). Each case runs the
// `afd` binary as a user does, with TMPDIR pointing at a directory of the test's own, so that the run directories a
// launcher leaves behind can be counted.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "common/afd_processes.h"
#include "common/subprocess_util.h"

namespace afd::testing {
namespace {

using namespace std::chrono_literals;

const std::string kTiny = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";

// `afd ARGS…` with TMPDIR set to `tmpdir`, one thread per process, RANK unset.
ProcessResult afd(const std::vector<std::string>& args, const std::string& tmpdir,
                  const std::vector<std::string>& env = {}, std::chrono::milliseconds timeout = 120s) {
    std::vector<std::string> argv = {
        "/usr/bin/env", "-u", "RANK", "-u", "WORLD_SIZE", "-u", "LOCAL_RANK", "TMPDIR=" + tmpdir, "AFD_NUM_THREADS=1"};
    for (const auto& e : env) argv.push_back(e);
    argv.push_back(AFD_BINARY);
    for (const auto& a : args) argv.push_back(a);
    return runProcess(argv, timeout);
}

// The entries of `dir` (the run directories a launcher left in TMPDIR).
std::vector<std::string> entries(const std::string& dir) {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
    return names;
}

// A copy of the fixture whose config.json `edit` rewrites.
std::string modelWithConfig(const TempDir& dir, const std::function<void(std::string&)>& edit) {
    const std::string model = dir.file("model");
    std::filesystem::copy(kTiny, model, std::filesystem::copy_options::recursive);
    std::string text = readText(model + "/config.json");
    edit(text);
    std::filesystem::remove(model + "/config.json");
    std::ofstream(model + "/config.json") << text;
    return model;
}

// Replaces the value of `key` (a number) in config.json's text.
void replaceValue(std::string& text, const std::string& key, const std::string& value) {
    const std::string quoted = "\"" + key + "\":";
    size_t begin = text.find(quoted);
    ASSERT_NE(begin, std::string::npos) << key;
    begin += quoted.size();
    const size_t end = text.find_first_of(",}", begin);
    text.replace(begin, end - begin, " " + value);
}

// A copy of the fixture with one shard cut in half (the checkpoint does not read: a run-time failure).
std::string modelWithTruncatedShard(const TempDir& dir) {
    const std::string model = dir.file("model");
    std::filesystem::copy(kTiny, model, std::filesystem::copy_options::recursive);
    const std::string shard = model + "/model-00002-of-00003.safetensors";
    std::filesystem::resize_file(shard, std::filesystem::file_size(shard) / 2);
    return model;
}

// The three ways a model directory is bad input: missing, config.json not JSON, a field of the wrong type.
struct BadModel {
    std::string what;
    std::string dir;
    std::string needle;  // in the error
};

std::vector<BadModel> badModels(const TempDir& a, const TempDir& b) {
    return {
        {"missing directory", "/nonexistent/afd-model", "/nonexistent/afd-model"},
        {"config.json not JSON", modelWithConfig(a, [](std::string& t) { t = "{\"hidden_size\": 64,"; }),
         "config.json"},
        {"a field of the wrong type",
         modelWithConfig(b, [](std::string& t) { replaceValue(t, "hidden_size", "\"wide\""); }), "hidden_size"},
    };
}

void expectCode(const ProcessResult& r, int code, const std::string& needle, const std::string& what) {
    EXPECT_FALSE(r.timed_out) << what;
    EXPECT_EQ(r.exit_code, code) << what << ": " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << what << ": " << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << what << ": " << r.err;
}

std::string afdConfig(int port, int connect_timeout_s = 30) {
    return fmt::format(R"({{"afd":{{"num_attention_ranks":1,"num_ffn_ranks":1,"port":{},"connect_timeout_s":{}}}}})",
                       port, connect_timeout_s);
}

TEST(ExitCodes, GenerateOkRunTimeFailureBadInputAndRendezvousTimeout) {
    TempDir tmp, a, b, c;
    expectCode(afd({"generate", "--model", kTiny, "--prompt-ids", "3,17", "--max-tokens", "2"}, tmp.path()), 0, "",
               "ok");
    expectCode(afd({"generate", "--model", modelWithTruncatedShard(c), "--prompt-ids", "3"}, tmp.path()), 1,
               "model-00002-of-00003.safetensors", "truncated shard");
    for (const BadModel& m : badModels(a, b)) {
        expectCode(afd({"generate", "--model", m.dir, "--prompt-ids", "3"}, tmp.path()), 2, m.needle, m.what);
    }
    expectCode(afd({"generate", "--model", kTiny, "--max-tokens", "many", "--prompt-ids", "3"}, tmp.path()), 2,
               "--max-tokens", "a flag of the wrong type");
    // An AFD attention rank whose FFN ranks never come: the rendezvous times out, a lost peer.
    expectCode(afd({"generate", "--model", kTiny, "--prompt-ids", "3", "--additional-config", afdConfig(freePort(), 1)},
                   tmp.path()),
               3, "rendezvous", "rendezvous timeout");
}

TEST(ExitCodes, FfnRunTimeFailureBadInputAndRendezvousTimeout) {
    TempDir tmp, a, b, c;
    const std::vector<std::string> env = {"RANK=0", "WORLD_SIZE=1"};
    auto ffn = [&](const std::string& model, const std::string& config) {
        return afd({"ffn", model, "--additional-config", config, "--admin-port", "-1"}, tmp.path(), env);
    };
    expectCode(ffn(modelWithTruncatedShard(c), afdConfig(freePort())), 1, "model-00002-of-00003.safetensors",
               "truncated shard");
    for (const BadModel& m : badModels(a, b)) expectCode(ffn(m.dir, afdConfig(freePort())), 2, m.needle, m.what);
    // FFN rank 0 of one session whose attention rank never comes: the same code as on the attention side. (A pool,
    // --serve-sessions forever, waits for it until stopped.)
    expectCode(afd({"ffn", kTiny, "--additional-config", afdConfig(freePort(), 1), "--admin-port", "-1",
                    "--serve-sessions", "once"},
                   tmp.path(), env),
               3, "attention rank 0", "rendezvous timeout");
}

TEST(ExitCodes, LaunchValidatesTheModelBeforeStartingAnyRankAndLeavesNoRunDirectory) {
    TempDir tmp, a, b, c;
    for (const BadModel& m : badModels(a, b)) {
        const ProcessResult r = afd({"launch", "--model", m.dir, "--max-tokens", "2"}, tmp.path());
        expectCode(r, 2, m.needle, m.what);
        EXPECT_EQ(r.err.find("ffn rank"), std::string::npos) << "no rank may start: " << r.err;
    }
    expectCode(afd({"launch", "--model", modelWithTruncatedShard(c), "--max-tokens", "2"}, tmp.path()), 1,
               "model-00002-of-00003.safetensors", "truncated shard");
    expectCode(afd({"launch", "--additional-config", R"({"afd":{"num_ffn_ranks":"two"}})"}, tmp.path()), 2,
               "num_ffn_ranks", "a wrongly typed AFD config field");
    EXPECT_TRUE(entries(tmp.path()).empty())
        << "left behind: " << fmt::format("{}", fmt::join(entries(tmp.path()), " "));
}

TEST(ExitCodes, LaunchSucceedsAndRemovesItsRunDirectory) {
    TempDir tmp;
    const ProcessResult r = afd({"launch", "--max-tokens", "3", "--json"}, tmp.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(entries(tmp.path()).empty()) << fmt::format("{}", fmt::join(entries(tmp.path()), " "));
}

TEST(ExitCodes, ServeBadInputIsTwo) {
    TempDir tmp, a, b;
    for (const BadModel& m : badModels(a, b)) {
        expectCode(afd({"serve", m.dir, "--port", "0"}, tmp.path(), {}, 60s), 2, m.needle, m.what);
        expectCode(afd({"serve", m.dir, "--port", "0", "--additional-config", R"({"afd":{}})"}, tmp.path(), {}, 60s), 2,
                   m.needle, m.what + " (AFD)");
    }
    EXPECT_TRUE(entries(tmp.path()).empty()) << fmt::format("{}", fmt::join(entries(tmp.path()), " "));
}

TEST(ExitCodes, QuickstartWithoutTheTokenizerIsTwoAndLeavesNoRunDirectory) {
    TempDir tmp;
    const ProcessResult r = afd({"quickstart", "--tokenizer-dir", "/nonexistent/tokenizer"}, tmp.path());
    expectCode(r, 2, "/nonexistent/tokenizer", "no tokenizer");
    EXPECT_TRUE(entries(tmp.path()).empty()) << fmt::format("{}", fmt::join(entries(tmp.path()), " "));
}

TEST(ExitCodes, TokenizeWithoutATokenizerIsTwo) {
    TempDir tmp;
    expectCode(afd({"tokenize", "--tokenizer", "/nonexistent/tokenizer.json"}, tmp.path()), 2,
               "/nonexistent/tokenizer.json", "no tokenizer");
}

}  // namespace
}  // namespace afd::testing
