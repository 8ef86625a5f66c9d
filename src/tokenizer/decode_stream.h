// DecodeStream: decoding for a stream of generated ids, one at a time. Text comes out as soon as it is well-formed
// UTF-8; the bytes of a character split across tokens (an emoji, a CJK character) are held back until the token
// that completes it arrives, so no chunk ever ends in a broken character. Bytes that can never become a character
// come out as U+FFFD at once, exactly where Tokenizer::decode puts them: for any ids, the chunks step() gives
// followed by flush() join to Tokenizer::decode(ids) with the same options.
//
// Not thread-safe (one stream per sequence); the Tokenizer must outlive it.
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace afd::tokenizer {

class DecodeStream {
public:
    explicit DecodeStream(const Tokenizer& tokenizer, DecodeOptions options = {});

    // Appends to *out the text `id` completes (often nothing while a character is incomplete).
    void step(TokenId id, std::string* out);
    std::string step(TokenId id) {
        std::string out;
        step(id, &out);
        return out;
    }

    // Appends what is held back (the start of a character no token completed) as U+FFFD, and starts over.
    void flush(std::string* out);
    std::string flush() {
        std::string out;
        flush(&out);
        return out;
    }

    // Bytes held back for an incomplete character (0 to 3).
    size_t pendingBytes() const { return pending_.size(); }

private:
    const Tokenizer* tokenizer_;
    DecodeOptions options_;
    std::string pending_;
};

}  // namespace afd::tokenizer
