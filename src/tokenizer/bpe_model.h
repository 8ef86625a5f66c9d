// The BPE model of a tokenizer.json: a vocabulary (token string -> id), merge rules ranked by their order, and the
// merge loop that turns one pre-tokenized word into ids. The loop is HF tokenizers' own: a priority queue of
// candidate merges (lowest rank first, leftmost first among equal ranks) over a linked list of symbols, so a word of
// n symbols costs O(n log n). Results for words shorter than 256 bytes are kept in a cache of 65536 words.
// Thread-safe: encodeWord may run on many threads at once (the cache locks per stripe of its slots).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace afd::tokenizer {

using TokenId = int32_t;

struct BpeOptions {
    // The words are bytes to be shown in GPT-2's alphabet (byte_level.h) before lookup: a ByteLevel pre-tokenizer.
    bool byte_level = false;
    std::optional<std::string> unk_token;  // the token for symbols outside the vocabulary (none: they are dropped)
    bool fuse_unk = false;                 // consecutive unknown symbols become one unk_token
    bool byte_fallback = false;            // unknown symbols become their bytes' "<0xXX>" tokens when those exist
    bool ignore_merges = false;            // a word that is itself in the vocabulary is that one token
};

class BpeModel {
public:
    // vocab: (token, id) pairs, ids distinct and non-negative. merges: (left, right) pairs in rank order; a merge
    // whose left, right or concatenation is not in the vocabulary is an error naming its index ("merges[12]").
    // A pair listed twice keeps its last rank, as HF tokenizers does.
    static core::Result<BpeModel> build(std::vector<std::pair<std::string, TokenId>> vocab,
                                        const std::vector<std::pair<std::string, std::string>>& merges,
                                        BpeOptions options);

    BpeModel(BpeModel&&) noexcept;
    BpeModel& operator=(BpeModel&&) noexcept;
    ~BpeModel();

    // Appends the ids of one word to *out. `word` is raw bytes when byte_level, else well-formed UTF-8.
    void encodeWord(std::string_view word, std::vector<TokenId>* out) const;

    std::optional<TokenId> tokenToId(std::string_view token) const;
    // The token string of `id`, or nullptr when no vocabulary entry has that id.
    const std::string* idToToken(TokenId id) const;
    // One past the largest id of the vocabulary.
    TokenId idLimit() const;
    size_t size() const;  // entries of the vocabulary
    size_t numMerges() const;
    const BpeOptions& options() const;

private:
    struct Impl;
    explicit BpeModel(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace afd::tokenizer
