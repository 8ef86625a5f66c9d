// `afd tokenize --tokenizer FILE`: a JSON array of strings on stdin, a JSON array of id arrays on stdout (the ids of
// HF tokenizers with add_special_tokens=False). `--decode` goes the other way: id arrays in, strings out.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>
#include <iterator>

#include "cli/commands.h"
#include "core/exit_codes.h"
#include "core/logging.h"
#include "tokenizer/tokenizer.h"

namespace afd::cli {
namespace {

using nlohmann::json;

struct TokenizeOptions {
    std::string tokenizer_path;
    bool decode = false;
    bool skip_special_tokens = false;
    bool split_special_tokens = false;
};

// The parsed stdin, or an error message.
core::Result<json> readStdinJson() {
    const std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    try {
        return json::parse(text);
    } catch (const json::exception& e) {
        return core::invalidArgument("stdin is not valid JSON: {}", e.what());
    }
}

int runEncode(const tokenizer::Tokenizer& tok, const json& input, const TokenizeOptions& options) {
    if (!input.is_array()) {
        AFD_LOG_ERROR("stdin must be a JSON array of strings, got {}", input.type_name());
        return core::kExitBadConfig;
    }
    json out = json::array();
    tokenizer::EncodeOptions encode;
    encode.split_special_tokens = options.split_special_tokens;
    for (size_t i = 0; i < input.size(); ++i) {
        if (!input[i].is_string()) {
            AFD_LOG_ERROR("stdin[{}] must be a string, got {}", i, input[i].type_name());
            return core::kExitBadConfig;
        }
        core::Result<std::vector<tokenizer::TokenId>> ids = tok.encode(input[i].get_ref<const std::string&>(), encode);
        if (!ids.isOk()) {
            AFD_LOG_ERROR("stdin[{}]: {}", i, ids.status().message());
            return core::kExitFailure;
        }
        out.push_back(*ids);
    }
    std::cout << out.dump() << "\n";
    return core::kExitOk;
}

int runDecode(const tokenizer::Tokenizer& tok, const json& input, const TokenizeOptions& options) {
    const auto bad = [](const std::string& where, const json& value) {
        AFD_LOG_ERROR("{} must be an array of token ids (integers), got {}", where, value.type_name());
        return core::kExitBadConfig;
    };
    if (!input.is_array()) return bad("stdin", input);
    json out = json::array();
    for (size_t i = 0; i < input.size(); ++i) {
        if (!input[i].is_array()) return bad(fmt::format("stdin[{}]", i), input[i]);
        std::vector<tokenizer::TokenId> ids;
        for (const json& id : input[i]) {
            if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
                return bad(fmt::format("stdin[{}]", i), id);
            }
            ids.push_back(static_cast<tokenizer::TokenId>(id.get<int64_t>()));
        }
        out.push_back(tok.decode(ids, {.skip_special_tokens = options.skip_special_tokens}));
    }
    std::cout << out.dump() << "\n";
    return core::kExitOk;
}

}  // namespace

void addTokenizeCommand(CLI::App& app, int& exit_code) {
    auto options = std::make_shared<TokenizeOptions>();
    CLI::App* cmd = app.add_subcommand("tokenize", "Encode a JSON array of strings from stdin into id arrays");
    cmd->add_option("--tokenizer", options->tokenizer_path, "an HF tokenizer.json")->required();
    cmd->add_flag("--decode", options->decode, "decode: a JSON array of id arrays in, an array of strings out");
    cmd->add_flag("--skip-special-tokens", options->skip_special_tokens, "with --decode: leave special tokens out");
    cmd->add_flag("--split-special-tokens", options->split_special_tokens,
                  "encode special tokens' text as ordinary text");
    cmd->callback([options, &exit_code] {
        core::Result<tokenizer::Tokenizer> tok = tokenizer::Tokenizer::fromFile(options->tokenizer_path);
        if (!tok.isOk()) {
            AFD_LOG_ERROR("{}", tok.status().message());
            exit_code = core::kExitBadConfig;  // a tokenizer that does not load is bad input, found before any work
            return;
        }
        core::Result<json> input = readStdinJson();
        if (!input.isOk()) {
            AFD_LOG_ERROR("{}", input.status().message());
            exit_code = core::kExitBadConfig;
            return;
        }
        exit_code = options->decode ? runDecode(*tok, *input, *options) : runEncode(*tok, *input, *options);
    });
}

}  // namespace afd::cli
