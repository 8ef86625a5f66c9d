// OutputAssembler: a request's generated token ids turned into the text a client sees, output by output: incremental
// detokenization (tokenizer::DecodeStream: never a broken UTF-8 character) and stop strings (StopStringMatcher: the
// text ends before the first stop string, a tail that may become one is held back).
//
// Token ids after a stop string: the ids kept are those up to and including the token whose text completed the stop
// string; later ids (of the same engine output, or sampled before the engine saw the abort) are dropped, from the
// ids and from the usage count alike.
//
// Without a tokenizer (a server for token-id prompts) the text is always empty and there are no stop strings.
// Not thread-safe (one per request); the tokenizer outlives it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "serve/stop_strings.h"
#include "tokenizer/decode_stream.h"
#include "tokenizer/tokenizer.h"

namespace afd::serve {

class OutputAssembler {
public:
    // Precondition (AFD_CHECK): `stops` is empty when `tokenizer` is null.
    OutputAssembler(const tokenizer::Tokenizer* tokenizer, bool skip_special_tokens, std::vector<std::string> stops);

    struct Piece {
        std::string text;                // new text to show
        std::vector<int32_t> token_ids;  // the ids taken from this output
    };
    // Takes the ids of one output in order; after a stop string matched, nothing more (an empty piece).
    Piece add(std::span<const int32_t> ids);
    // Once the request has ended: the text still held back (an incomplete character as U+FFFD, a tail that never
    // became a stop string). Empty after a stop string.
    std::string finish();

    bool stopped() const { return stop_.matched(); }
    const std::vector<int32_t>& tokenIds() const { return ids_; }

private:
    const tokenizer::Tokenizer* tokenizer_;
    std::optional<tokenizer::DecodeStream> decode_;
    StopStringMatcher stop_;
    std::vector<int32_t> ids_;
};

}  // namespace afd::serve
