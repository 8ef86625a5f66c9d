// The normalizer of a tokenizer.json: Unicode normalization forms (NFC, NFD, NFKC, NFKD) through utf8proc, one
// after another as a "Sequence" lists them. Thread-safe (no state).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace afd::tokenizer {

enum class UnicodeForm { kNfc, kNfd, kNfkc, kNfkd };

// `text` in Unicode normalization form `form`. Precondition: `text` is well-formed UTF-8.
// An error only when utf8proc cannot allocate.
core::Result<std::string> normalizeUnicode(std::string_view text, UnicodeForm form);

// Whether NFC leaves the code point as it is in any string and never combines or reorders anything across it:
// below U+0300, or a starter (canonical combining class 0) that no composition takes as its second part (so not a
// Hangul vowel or trailing consonant jamo) whose canonical decomposition, if any, starts with a starter and composes
// back (で, é). normalize() runs utf8proc only on the runs between such code points that hold others.
bool isNfcInert(char32_t code_point);

class Normalizer {
public:
    Normalizer() = default;  // no normalization
    explicit Normalizer(std::vector<UnicodeForm> steps) : steps_(std::move(steps)) {}

    bool empty() const { return steps_.empty(); }
    const std::vector<UnicodeForm>& steps() const { return steps_; }

    // Normalizes `text`: true with the result in *out, or false when the result is `text` itself (*out untouched).
    // Precondition: `text` is well-formed UTF-8.
    core::Result<bool> normalize(std::string_view text, std::string* out) const;

private:
    std::vector<UnicodeForm> steps_;
};

}  // namespace afd::tokenizer
