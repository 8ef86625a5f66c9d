// The parts of a loaded Tokenizer (internal to src/tokenizer/: the loader builds them, tokenizer.cpp uses them).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace afd::tokenizer {

struct Tokenizer::Parts {
    explicit Parts(BpeModel bpe) : model(std::move(bpe)) {}

    Normalizer normalizer;
    PreTokenizer pre_tokenizer;
    BpeModel model;

    std::vector<AddedToken> added_tokens;  // in tokenizer.json's order
    AddedTokenMatcher raw_matcher;         // added tokens with normalized false, found in the raw text
    AddedTokenMatcher normalized_matcher;  // added tokens with normalized true, found in normalized pieces
    std::unordered_map<std::string, TokenId> added_ids;  // content -> id

    // Decoding: token_bytes[offsets[id], offsets[id + 1]) are the bytes of `id`; special[id] marks what
    // skip_special_tokens drops.
    std::string token_bytes;
    std::vector<uint32_t> offsets;
    std::vector<uint8_t> special;
};

}  // namespace afd::tokenizer
