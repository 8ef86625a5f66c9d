// The pre-tokenizer's regular expressions: PCRE2 (8-bit, UTF and UCP), with its JIT when the library and the
// system allow it and the interpreter otherwise (both give the same matches).
//
// HF tokenizers compiles these patterns with Oniguruma, whose Unicode classes differ from PCRE2's in two places, so
// patterns are translated before compiling: \s and \S become Unicode White_Space and its complement (PCRE2 also
// counts U+180E and leaves out nothing Oniguruma counts), and \w and \W become letters, marks, numbers and
// connector punctuation and the complement (PCRE2 10.42 leaves out marks and connector punctuation other than '_').
// Inside a character class \s and \w are translated too; \S and \W there are left to PCRE2.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace afd::tokenizer {

// `pattern` with \s, \S, \w, \W spelt out as Oniguruma (Unicode mode) defines them (see above).
std::string translateOnigurumaClasses(std::string_view pattern);

// A compiled pattern. Thread-safe: one Regex may be matched from many threads at once.
class Regex {
public:
    // Compiles `pattern` (translated first). use_jit false: always the interpreter.
    static core::Result<Regex> compile(std::string_view pattern, bool use_jit = true);

    Regex(Regex&&) noexcept;
    Regex& operator=(Regex&&) noexcept;
    ~Regex();

    // Whether matches run on PCRE2's JIT (false: JIT not built into the library, refused by the system, or off).
    bool usesJit() const { return jit_; }
    const std::string& pattern() const { return pattern_; }

    // The first match in text[start..] (lookbehinds see text before start): true and [*match_begin, *match_end),
    // or false when there is none. An error when PCRE2 gives up (a match, depth or heap limit); the JIT's stack
    // running out falls back to the interpreter first.
    // Precondition: `text` is well-formed UTF-8 and `start` is at a character boundary (neither is checked again).
    core::Result<bool> find(std::string_view text, size_t start, size_t* match_begin, size_t* match_end) const;

    // Calls on_match(begin, end) for every match from left to right, as Oniguruma's find_iter (which HF tokenizers
    // uses) does: each search starts where the previous match ended, and an empty match right at the end of the
    // previous match is skipped by one character. Same precondition as find().
    template <typename OnMatch>
    core::Status forEachMatch(std::string_view text, OnMatch&& on_match) const;

private:
    struct Code;
    Regex(std::unique_ptr<Code> code, std::string pattern, bool jit);

    std::unique_ptr<Code> code_;
    std::string pattern_;
    bool jit_ = false;
};

// Length of the UTF-8 sequence whose lead byte is `lead` (1 for bytes that are not lead bytes).
inline size_t utf8LeadLength(unsigned char lead) {
    if (lead < 0xC0) return 1;
    if (lead < 0xE0) return 2;
    if (lead < 0xF0) return 3;
    return 4;
}

template <typename OnMatch>
core::Status Regex::forEachMatch(std::string_view text, OnMatch&& on_match) const {
    size_t search_from = 0;
    size_t last_match_end = std::string_view::npos;
    while (search_from <= text.size()) {
        size_t begin = 0;
        size_t end = 0;
        core::Result<bool> found = find(text, search_from, &begin, &end);
        if (!found.isOk()) return found.status();
        if (!*found) break;
        if (begin == end && end == last_match_end) {
            if (search_from == text.size()) break;
            search_from += utf8LeadLength(static_cast<unsigned char>(text[search_from]));
            continue;
        }
        on_match(begin, end);
        search_from = end;
        last_match_end = end;
    }
    return core::Status::ok();
}

}  // namespace afd::tokenizer
