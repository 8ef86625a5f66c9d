// Tokenizer: an HF tokenizer.json with a byte-level BPE model (Qwen3's, GPT-2's and their kind), giving the ids HF
// tokenizers gives with add_special_tokens=False (post-processors, truncation and padding are not applied).
//
// Encoding, as HF tokenizers does it:
//   1. added tokens whose "normalized" is false are cut out of the raw text (added_tokens.h);
//   2. each remaining piece is normalized (normalizer.h: NFC for Qwen3), and added tokens whose "normalized" is
//      true are cut out of the normalized pieces;
//   3. the pre-tokenizer cuts each piece into words (pre_tokenizer.h: Qwen3's Split regex, then ByteLevel);
//   4. BPE merges within each word (bpe_model.h).
// Decoding maps each id's token back to bytes (ByteLevel decoder), joins them and repairs ill-formed UTF-8 with
// U+FFFD (utf8.h). Ids that are not tokens are skipped, as HF tokenizers skips them.
//
// Thread-safe: a Tokenizer is immutable after loading; encode and decode may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"

namespace afd::tokenizer {

struct LoadOptions {
    bool use_jit = true;  // false: PCRE2's interpreter even where its JIT works (same ids, slower)
};

// What encode() does with input that is not well-formed UTF-8.
enum class InvalidUtf8 {
    kReject,   // an error (kInvalidArgument) naming the byte offset of the first ill-formed sequence
    kReplace,  // each maximal ill-formed subpart becomes U+FFFD first, as Python's bytes.decode("utf-8", "replace")
               // does before HF tokenizers sees the text (HF tokenizers itself takes only well-formed strings)
};

struct EncodeOptions {
    InvalidUtf8 invalid_utf8 = InvalidUtf8::kReject;
    // Special tokens' text is encoded as ordinary text (HF tokenizers' encode_special_tokens, transformers'
    // split_special_tokens): for text from users that must not inject <|im_start|>.
    bool split_special_tokens = false;
};

struct DecodeOptions {
    bool skip_special_tokens = false;
};

class Tokenizer {
public:
    // Loads a tokenizer.json. Errors name the file, the field ("model.merges[12]") and the rule it breaks;
    // kUnsupported for valid components this tokenizer does not implement (a WordPiece model, say).
    static core::Result<Tokenizer> fromFile(const std::string& path, const LoadOptions& options = {});
    // The same from the file's text; `source` names it in errors.
    static core::Result<Tokenizer> fromJson(std::string_view json_text, std::string_view source,
                                            const LoadOptions& options = {});

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    core::Result<std::vector<TokenId>> encode(std::string_view text, const EncodeOptions& options = {}) const;

    // Always well-formed UTF-8.
    std::string decode(std::span<const TokenId> ids, const DecodeOptions& options = {}) const;

    // The bytes one token stands for (a part of a UTF-8 character, possibly); empty for ids that are not tokens.
    std::string_view tokenBytes(TokenId id) const;
    // Whether decoding with skip_special_tokens drops `id`.
    bool isSpecial(TokenId id) const;

    std::optional<TokenId> tokenToId(std::string_view token) const;  // added tokens first, then the vocabulary
    std::optional<std::string> idToToken(TokenId id) const;          // the token's string as tokenizer.json has it
    // One past the largest id (vocabulary and added tokens).
    TokenId idLimit() const;
    const std::vector<AddedToken>& addedTokens() const;
    // Whether every regular expression runs on PCRE2's JIT.
    bool usesJit() const;

    struct Parts;  // defined in tokenizer_parts.h (the loader builds it)
    explicit Tokenizer(std::unique_ptr<Parts> parts);

private:
    core::Status encodePiece(std::string_view piece, std::vector<TokenId>* ids) const;

    std::unique_ptr<Parts> parts_;
};

}  // namespace afd::tokenizer
