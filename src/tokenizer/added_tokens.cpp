#include "tokenizer/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>

#include "core/check.h"
#include "tokenizer/utf8.h"

namespace afd::tokenizer {
namespace {

// The code point that ends text[0, end), or nullopt at the start of the text.
std::optional<char32_t> lastCodePoint(std::string_view text, size_t end) {
    if (end == 0) return std::nullopt;
    size_t begin = end - 1;
    while (begin > 0 && (static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80) --begin;
    return decodeUtf8(text, begin, end - begin);
}

std::optional<char32_t> firstCodePoint(std::string_view text, size_t begin) {
    if (begin >= text.size()) return std::nullopt;
    const size_t length = utf8SequenceLength(text, begin);
    return decodeUtf8(text, begin, length == 0 ? 1 : length);
}

// Where the white space that ends text[0, end) begins.
size_t whiteSpaceRunBefore(std::string_view text, size_t end) {
    while (end > 0) {
        size_t begin = end - 1;
        while (begin > 0 && (static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80) --begin;
        if (!isUnicodeWhiteSpace(decodeUtf8(text, begin, end - begin))) break;
        end = begin;
    }
    return end;
}

// Where the white space that starts at text[begin] ends.
size_t whiteSpaceRunAfter(std::string_view text, size_t begin) {
    while (begin < text.size()) {
        const size_t length = utf8SequenceLength(text, begin);
        if (length == 0 || !isUnicodeWhiteSpace(decodeUtf8(text, begin, length))) break;
        begin += length;
    }
    return begin;
}

}  // namespace

bool isWordCharacter(char32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (c == 0x200C || c == 0x200D) return true;
    // Other_Alphabetic symbols: circled, parenthesized, squared and negative letters.
    if ((c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
        (c >= 0x1F170 && c <= 0x1F189)) {
        return true;
    }
    switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
        case UTF8PROC_CATEGORY_LU:
        case UTF8PROC_CATEGORY_LL:
        case UTF8PROC_CATEGORY_LT:
        case UTF8PROC_CATEGORY_LM:
        case UTF8PROC_CATEGORY_LO:
        case UTF8PROC_CATEGORY_MN:
        case UTF8PROC_CATEGORY_MC:
        case UTF8PROC_CATEGORY_ME:
        case UTF8PROC_CATEGORY_ND:
        case UTF8PROC_CATEGORY_NL:
        case UTF8PROC_CATEGORY_PC:
            return true;
        default:
            return false;
    }
}

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> contents)
    : tokens_(std::move(tokens)) {
    AFD_CHECK(tokens_.size() == contents.size(), "{} added tokens with {} contents", tokens_.size(), contents.size());
    nodes_.emplace_back();
    for (size_t t = 0; t < contents.size(); ++t) {
        AFD_CHECK(!contents[t].empty(), "added token {} has an empty content", tokens_[t].id);
        first_byte_[static_cast<uint8_t>(contents[t][0])] = true;
        int32_t node = 0;
        for (const char c : contents[t]) {
            const auto b = static_cast<uint8_t>(c);
            auto& children = nodes_[node].children;
            auto it = std::lower_bound(children.begin(), children.end(), b,
                                       [](const std::pair<uint8_t, int32_t>& p, uint8_t v) { return p.first < v; });
            if (it != children.end() && it->first == b) {
                node = it->second;
                continue;
            }
            const auto child = static_cast<int32_t>(nodes_.size());
            children.insert(it, {b, child});
            nodes_.emplace_back();
            node = child;
        }
        // The same content twice: the later token wins, as a map from content to token would keep it.
        nodes_[node].token = static_cast<int32_t>(t);
    }
}

int32_t AddedTokenMatcher::longestAt(std::string_view text, size_t pos, size_t* length) const {
    int32_t node = 0;
    int32_t found = -1;
    for (size_t i = pos; i < text.size(); ++i) {
        const auto b = static_cast<uint8_t>(text[i]);
        const auto& children = nodes_[node].children;
        auto it = std::lower_bound(children.begin(), children.end(), b,
                                   [](const std::pair<uint8_t, int32_t>& p, uint8_t v) { return p.first < v; });
        if (it == children.end() || it->first != b) break;
        node = it->second;
        if (nodes_[node].token >= 0) {
            found = nodes_[node].token;
            *length = i + 1 - pos;
        }
    }
    return found;
}

void AddedTokenMatcher::split(std::string_view text, bool skip_special, std::vector<AddedTokenSplit>* out) const {
    if (text.empty()) return;
    size_t taken = 0;  // text before this offset is in a piece already
    size_t pos = 0;
    while (pos < text.size()) {
        if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
            ++pos;
            continue;
        }
        size_t length = 0;
        const int32_t t = longestAt(text, pos, &length);
        if (t < 0) {
            ++pos;
            continue;
        }
        const AddedToken& token = tokens_[t];
        size_t begin = pos;
        size_t end = pos + length;
        pos = end;  // the search goes on after this match whether or not it is kept
        if (skip_special && token.special) continue;
        if (token.single_word) {
            const std::optional<char32_t> before = lastCodePoint(text, begin);
            const std::optional<char32_t> after = firstCodePoint(text, end);
            if ((before && isWordCharacter(*before)) || (after && isWordCharacter(*after))) continue;
        }
        if (token.lstrip) begin = std::max(whiteSpaceRunBefore(text, begin), taken);
        if (token.rstrip) end = whiteSpaceRunAfter(text, end);
        if (taken < begin) out->push_back({taken, begin, std::nullopt, false});
        out->push_back({begin, end, token.id, token.special});
        taken = end;
        pos = std::max(pos, end);
    }
    if (taken < text.size()) out->push_back({taken, text.size(), std::nullopt, false});
}

}  // namespace afd::tokenizer
