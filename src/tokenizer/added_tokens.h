// Added tokens (tokenizer.json's "added_tokens": special tokens such as <|im_start|>, and others such as <think>):
// found in the text before anything else and given their id directly, as HF tokenizers' AddedVocabulary does.
// Matching is leftmost-longest over all contents; then each token's flags apply:
//   single_word  only when no word character (\w) touches it on either side
//   lstrip       the white space before it becomes part of it (but not text an earlier token already took)
//   rstrip       the white space after it becomes part of it
// Thread-safe (no state after construction).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe_model.h"

namespace afd::tokenizer {

struct AddedToken {
    TokenId id = 0;
    std::string content;
    bool single_word = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = true;  // matched in the normalized text (true) or in the raw text (false)
    bool special = false;    // skipped by decoding with skip_special_tokens
};

// One piece of a text cut at added tokens: [begin, end), with the token's id or none for text in between.
struct AddedTokenSplit {
    size_t begin = 0;
    size_t end = 0;
    std::optional<TokenId> id;
    bool special = false;
};

class AddedTokenMatcher {
public:
    AddedTokenMatcher() = default;  // matches nothing
    // `tokens` are the tokens to find, `contents` the strings to find them by (the content, or its normalized form).
    // Precondition: contents non-empty, as many as tokens.
    AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> contents);

    bool empty() const { return tokens_.empty(); }

    // Appends the pieces of `text` to *out, in order, covering it whole (nothing for an empty text).
    // skip_special: special tokens are not looked for (HF tokenizers' encode_special_tokens).
    // Precondition: `text` is well-formed UTF-8.
    void split(std::string_view text, bool skip_special, std::vector<AddedTokenSplit>* out) const;

private:
    struct Node {
        std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
        int32_t token = -1;                                 // index into tokens_ when a content ends here
    };
    // The longest content starting at text[pos]: its token index and length, or -1.
    int32_t longestAt(std::string_view text, size_t pos, size_t* length) const;

    std::vector<AddedToken> tokens_;
    std::vector<Node> nodes_;
    bool first_byte_[256] = {};
};

// \w as HF tokenizers' single_word rule means it (Rust's regex crate): Alphabetic, marks, decimal numbers,
// connector punctuation, and the joiners U+200C, U+200D.
bool isWordCharacter(char32_t code_point);

}  // namespace afd::tokenizer
