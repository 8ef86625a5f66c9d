#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace afd::tokenizer {
namespace {

constexpr bool isPrintable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); }

struct Alphabet {
    std::array<char32_t, 256> byte_to_char{};
    std::array<int16_t, 0x144> char_to_byte{};  // every code point of the alphabet is below U+0144
    std::array<std::string, 256> byte_utf8;

    Alphabet() {
        char_to_byte.fill(-1);
        char32_t next = 0x100;
        for (int b = 0; b < 256; ++b) {
            const char32_t c = isPrintable(b) ? static_cast<char32_t>(b) : next++;
            byte_to_char[b] = c;
            char_to_byte[c] = static_cast<int16_t>(b);
            appendUtf8(c, &byte_utf8[b]);
        }
    }
};

const Alphabet& alphabet() {
    static const Alphabet kAlphabet;
    return kAlphabet;
}

}  // namespace

char32_t byteToChar(uint8_t byte) { return alphabet().byte_to_char[byte]; }

std::optional<uint8_t> charToByte(char32_t code_point) {
    if (code_point >= alphabet().char_to_byte.size()) return std::nullopt;
    const int16_t b = alphabet().char_to_byte[code_point];
    if (b < 0) return std::nullopt;
    return static_cast<uint8_t>(b);
}

std::string bytesToAlphabet(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (const char c : bytes) out += alphabet().byte_utf8[static_cast<uint8_t>(c)];
    return out;
}

std::string alphabetToBytes(std::string_view token) {
    std::string out;
    out.reserve(token.size());
    size_t pos = 0;
    while (pos < token.size()) {
        const size_t length = utf8SequenceLength(token, pos);
        if (length == 0) return std::string(token);
        const std::optional<uint8_t> b = charToByte(decodeUtf8(token, pos, length));
        if (!b) return std::string(token);
        out.push_back(static_cast<char>(*b));
        pos += length;
    }
    return out;
}

}  // namespace afd::tokenizer
