#include "tokenizer/utf8.h"

namespace afd::tokenizer {
namespace {

// The sequence length a lead byte announces (0: not a lead byte) and the range its second byte must lie in
// (Unicode Table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF).
struct LeadRule {
    uint8_t length;
    uint8_t second_min;
    uint8_t second_max;
};

constexpr LeadRule leadRule(uint8_t b) {
    if (b < 0x80) return {1, 0, 0};
    if (b < 0xC2) return {0, 0, 0};
    if (b < 0xE0) return {2, 0x80, 0xBF};
    if (b == 0xE0) return {3, 0xA0, 0xBF};
    if (b == 0xED) return {3, 0x80, 0x9F};
    if (b < 0xF0) return {3, 0x80, 0xBF};
    if (b == 0xF0) return {4, 0x90, 0xBF};
    if (b < 0xF4) return {4, 0x80, 0xBF};
    if (b == 0xF4) return {4, 0x80, 0x8F};
    return {0, 0, 0};
}

constexpr bool isContinuation(uint8_t b) { return b >= 0x80 && b <= 0xBF; }

// How many bytes from text[pos] (at most `rule.length`) follow the rule: the lead and the continuation bytes
// that are in range.
size_t wellFormedPrefix(std::string_view text, size_t pos, const LeadRule& rule) {
    size_t n = 1;
    while (n < rule.length && pos + n < text.size()) {
        const auto b = static_cast<uint8_t>(text[pos + n]);
        const bool ok = n == 1 ? (b >= rule.second_min && b <= rule.second_max) : isContinuation(b);
        if (!ok) break;
        ++n;
    }
    return n;
}

}  // namespace

size_t utf8SequenceLength(std::string_view text, size_t pos, size_t* subpart) {
    const auto lead = static_cast<uint8_t>(text[pos]);
    if (lead < 0x80) return 1;
    const LeadRule rule = leadRule(lead);
    if (rule.length == 0) {
        if (subpart != nullptr) *subpart = 1;
        return 0;
    }
    const size_t n = wellFormedPrefix(text, pos, rule);
    if (n == rule.length) return n;
    if (subpart != nullptr) *subpart = n;
    return 0;
}

size_t firstInvalidUtf8(std::string_view text) {
    size_t pos = 0;
    while (pos < text.size()) {
        // ASCII runs eight bytes at a time.
        while (pos + 8 <= text.size()) {
            uint64_t word = 0;
            for (int i = 0; i < 8; ++i) word |= uint64_t{static_cast<uint8_t>(text[pos + i])} << (8 * i);
            if ((word & 0x8080808080808080ULL) != 0) break;
            pos += 8;
        }
        if (pos >= text.size()) break;
        const size_t length = utf8SequenceLength(text, pos);
        if (length == 0) return pos;
        pos += length;
    }
    return text.size();
}

void appendUtf8Lossy(std::string_view bytes, std::string* out) {
    size_t pos = 0;
    size_t run_start = 0;  // start of the well-formed run not yet appended
    while (pos < bytes.size()) {
        size_t subpart = 0;
        const size_t length = utf8SequenceLength(bytes, pos, &subpart);
        if (length != 0) {
            pos += length;
            continue;
        }
        out->append(bytes.substr(run_start, pos - run_start));
        out->append(kReplacementCharacter);
        pos += subpart;
        run_start = pos;
    }
    out->append(bytes.substr(run_start));
}

size_t incompleteUtf8Tail(std::string_view bytes) {
    const size_t n = bytes.size();
    // The last byte that is not a continuation byte starts the last unit of the left-to-right parse.
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
        const auto b = static_cast<uint8_t>(bytes[n - back]);
        if (isContinuation(b)) continue;
        const LeadRule rule = leadRule(b);
        if (rule.length <= back) return 0;  // complete, ASCII, or not a lead byte
        return wellFormedPrefix(bytes, n - back, rule) == back ? back : 0;
    }
    return 0;
}

char32_t decodeUtf8(std::string_view text, size_t pos, size_t length) {
    const auto b0 = static_cast<uint8_t>(text[pos]);
    if (length == 1) return b0;
    char32_t cp = b0 & (0x7F >> length);
    for (size_t i = 1; i < length; ++i) cp = (cp << 6) | (static_cast<uint8_t>(text[pos + i]) & 0x3F);
    return cp;
}

void appendUtf8(char32_t cp, std::string* out) {
    if (cp < 0x80) {
        out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

bool isUnicodeWhiteSpace(char32_t c) {
    if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
    if (c < 0x85) return false;
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace afd::tokenizer
