// UTF-8 as the tokenizer reads and writes it: validation, code points, and the lossy repair that HF tokenizers'
// decoder (Rust's String::from_utf8_lossy) and Python's bytes.decode("utf-8", "replace") both apply: each maximal
// subpart of an ill-formed sequence (Unicode's "substitution of maximal subparts") becomes one U+FFFD.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace afd::tokenizer {

inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// The length of the well-formed sequence at text[pos], or 0 when the bytes there do not start one. A return of 0
// with *subpart set: the maximal subpart to replace (1 to 3 bytes, never past the end).
// Precondition: pos < text.size().
size_t utf8SequenceLength(std::string_view text, size_t pos, size_t* subpart = nullptr);

// The byte offset of the first ill-formed sequence, or text.size() when all of `text` is well-formed UTF-8.
size_t firstInvalidUtf8(std::string_view text);

inline bool isValidUtf8(std::string_view text) { return firstInvalidUtf8(text) == text.size(); }

// Appends `bytes` to *out with every maximal ill-formed subpart replaced by U+FFFD.
void appendUtf8Lossy(std::string_view bytes, std::string* out);

inline std::string utf8Lossy(std::string_view bytes) {
    std::string out;
    appendUtf8Lossy(bytes, &out);
    return out;
}

// How many trailing bytes of `bytes` are the start of a well-formed sequence that more bytes could complete (0 to 3):
// what a stream must hold back instead of replacing. 0 when the tail is complete or already ill-formed.
size_t incompleteUtf8Tail(std::string_view bytes);

// Decodes the well-formed sequence of `length` bytes at text[pos] (from utf8SequenceLength).
char32_t decodeUtf8(std::string_view text, size_t pos, size_t length);

// Appends the UTF-8 encoding of `code_point` (a Unicode scalar value) to *out.
void appendUtf8(char32_t code_point, std::string* out);

// Unicode White_Space (the set that HF tokenizers' regular expressions call \s): U+0009..U+000D, U+0020, U+0085,
// U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
bool isUnicodeWhiteSpace(char32_t code_point);

}  // namespace afd::tokenizer
