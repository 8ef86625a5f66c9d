// GPT-2's byte-level alphabet: every byte is shown as one printable code point, so that a BPE vocabulary of
// strings covers arbitrary bytes. Printable bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves;
// the other 68 bytes, in increasing order, become U+0100, U+0101, … (space 0x20 is U+0120 'Ġ', '\n' is U+010A 'Ċ').
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace afd::tokenizer {

// The code point that shows `byte`.
char32_t byteToChar(uint8_t byte);

// The byte a code point shows, or nullopt when the code point is not in the alphabet.
std::optional<uint8_t> charToByte(char32_t code_point);

// `bytes` shown in the alphabet, as UTF-8 (what a byte-level vocabulary's keys look like).
std::string bytesToAlphabet(std::string_view bytes);

// The bytes a token string of the alphabet stands for: each code point mapped back, or, when any code point of
// `token` is outside the alphabet, `token`'s own UTF-8 bytes (HF tokenizers' ByteLevel decoder rule: an added token
// holding a space or a CJK character decodes as written). Precondition: `token` is well-formed UTF-8.
std::string alphabetToBytes(std::string_view token);

}  // namespace afd::tokenizer
