#include "tokenizer/tokenizer_test_util.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace afd::tokenizer::testing {
namespace {

std::vector<std::string> candidateDirs() {
    std::vector<std::string> dirs;
    if (const char* env = std::getenv("AFD_TOKENIZER_DIR"); env != nullptr && *env != '\0') dirs.emplace_back(env);
    dirs.emplace_back(AFD_TOKENIZER_DIR);
    dirs.emplace_back(std::string(AFD_FIXTURES_DIR) + "/qwen3-tokenizer");
    return dirs;
}

std::string& loadError() {
    static std::string error;
    return error;
}

}  // namespace

std::string qwen3TokenizerPath() {
    for (const std::string& dir : candidateDirs()) {
        const std::string path = dir + "/tokenizer.json";
        if (std::filesystem::is_regular_file(path)) return path;
    }
    return "";
}

std::string qwen3TokenizerMissingMessage() {
    if (!loadError().empty()) return loadError();
    std::string looked;
    for (const std::string& dir : candidateDirs()) looked += "\n  " + dir + "/tokenizer.json";
    return "the Qwen3 tokenizer.json is missing: run scripts/setup.sh (it fetches it into third_party/tokenizer/), "
           "or point AFD_TOKENIZER_DIR at a directory holding it. Looked at:" +
           looked;
}

const Tokenizer* qwen3Tokenizer() {
    static const Tokenizer* tokenizer = []() -> const Tokenizer* {
        const std::string path = qwen3TokenizerPath();
        if (path.empty()) return nullptr;
        core::Result<Tokenizer> loaded = Tokenizer::fromFile(path);
        if (!loaded.isOk()) {
            loadError() = "the Qwen3 tokenizer does not load: " + loaded.status().toString();
            return nullptr;
        }
        return new Tokenizer(std::move(loaded).value());  // NOTE: kept for the whole test process
    }();
    return tokenizer;
}

std::string readFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in.good()) << "cannot read " << path;
    std::stringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
}

}  // namespace afd::tokenizer::testing
