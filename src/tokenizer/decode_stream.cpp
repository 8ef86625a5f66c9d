#include "tokenizer/decode_stream.h"

#include "tokenizer/utf8.h"

namespace afd::tokenizer {

DecodeStream::DecodeStream(const Tokenizer& tokenizer, DecodeOptions options)
    : tokenizer_(&tokenizer), options_(options) {}

void DecodeStream::step(TokenId id, std::string* out) {
    if (options_.skip_special_tokens && tokenizer_->isSpecial(id)) return;
    pending_ += tokenizer_->tokenBytes(id);
    const size_t held = incompleteUtf8Tail(pending_);
    appendUtf8Lossy(std::string_view(pending_).substr(0, pending_.size() - held), out);
    pending_.erase(0, pending_.size() - held);
}

void DecodeStream::flush(std::string* out) {
    appendUtf8Lossy(pending_, out);
    pending_.clear();
}

}  // namespace afd::tokenizer
