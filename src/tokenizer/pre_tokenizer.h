// The pre-tokenizer of a tokenizer.json: cuts normalized text into the words that BPE merges within. Steps run in
// order, each on every piece the previous one produced, as HF tokenizers' "Sequence" does:
//   Split      a regular expression (or a literal string) and what to do with its matches (SplitBehavior), optionally
//              inverted (the non-matches become the delimiters)
//   ByteLevel  GPT-2's byte-level step: an optional space in front of a piece that does not start with one, and
//              optionally GPT-2's own word pattern; the byte-to-alphabet mapping itself is left to the BPE model
//              (BpeModel with byte_level), so ByteLevel must be the last step.
// Empty pieces are dropped, as HF tokenizers drops them. Thread-safe (no state).
#pragma once

#include <functional>
#include <optional>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace afd::tokenizer {

// HF tokenizers' SplitDelimiterBehavior, applied to the list of (piece, is_delimiter) that a pattern makes.
enum class SplitBehavior {
    kRemoved,             // delimiters are dropped
    kIsolated,            // delimiters are pieces of their own
    kMergedWithPrevious,  // a delimiter joins the piece before it
    kMergedWithNext,      // a delimiter joins the piece after it
    kContiguous,          // runs of delimiters, and runs of the rest, become one piece each
};

struct SplitStep {
    Regex regex;  // a literal string pattern is compiled as an escaped regex
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
};

struct ByteLevelStep {
    bool add_prefix_space = false;
    // use_regex: GPT-2's pattern, compiled when the step is made (see makeByteLevelStep).
    std::optional<Regex> gpt2_regex;
};

// GPT-2's word pattern, which ByteLevel applies when its use_regex is true.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

core::Result<ByteLevelStep> makeByteLevelStep(bool add_prefix_space, bool use_regex, bool use_jit);

class PreTokenizer {
public:
    using Step = std::variant<SplitStep, ByteLevelStep>;
    using OnWord = std::function<void(std::string_view word)>;

    PreTokenizer() = default;  // no steps: each piece is one word
    // Precondition: a ByteLevelStep, if any, is the last step (AFD_CHECK).
    explicit PreTokenizer(std::vector<Step> steps);

    // Whether the last step is ByteLevel (the BPE model then maps bytes to GPT-2's alphabet).
    bool byteLevel() const;
    bool usesJit() const;  // every regex runs on PCRE2's JIT

    // Calls on_word for each word of `piece`, in order. `word` may point into a temporary (a piece with a space put
    // in front): it is valid during the call only. Errors come from the regex engine giving up.
    // Precondition: `piece` is well-formed UTF-8.
    core::Status forEachWord(std::string_view piece, const OnWord& on_word) const;

private:
    core::Status run(size_t step, std::string_view piece, const OnWord& on_word) const;

    std::vector<Step> steps_;
};

}  // namespace afd::tokenizer
