#include "serve/output_assembler.h"

#include <utility>

#include "core/check.h"

namespace afd::serve {

OutputAssembler::OutputAssembler(const tokenizer::Tokenizer* tokenizer, bool skip_special_tokens,
                                 std::vector<std::string> stops)
    : tokenizer_(tokenizer), stop_(std::move(stops)) {
    AFD_CHECK(tokenizer != nullptr || !stop_.hasStops(), "stop strings need a tokenizer");
    if (tokenizer_ != nullptr) {
        tokenizer::DecodeOptions options;
        options.skip_special_tokens = skip_special_tokens;
        decode_.emplace(*tokenizer_, options);
    }
}

OutputAssembler::Piece OutputAssembler::add(std::span<const int32_t> ids) {
    Piece piece;
    std::string decoded;
    for (const int32_t id : ids) {
        if (stop_.matched()) break;
        ids_.push_back(id);
        piece.token_ids.push_back(id);
        if (!decode_) continue;
        decoded.clear();
        decode_->step(id, &decoded);
        if (!decoded.empty()) piece.text += stop_.push(decoded);
    }
    return piece;
}

std::string OutputAssembler::finish() {
    if (!decode_ || stop_.matched()) return {};
    std::string rest = stop_.push(decode_->flush());
    if (stop_.matched()) return rest;
    return rest + stop_.finish();
}

}  // namespace afd::serve
