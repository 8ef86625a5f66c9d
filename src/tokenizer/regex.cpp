#include "tokenizer/regex.h"

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <string>

namespace afd::tokenizer {
namespace {

// Unicode White_Space, the set Oniguruma's \s matches in Unicode mode, as the body of a character class.
constexpr std::string_view kWhiteSpaceItems =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
// Oniguruma's \w in Unicode mode: Letter, Mark, Number, Connector_Punctuation.
constexpr std::string_view kWordItems = "\\p{L}\\p{M}\\p{N}\\p{Pc}";

std::string pcre2ErrorText(int code) {
    PCRE2_UCHAR buffer[256];
    const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
    if (n < 0) return "PCRE2 error " + std::to_string(code);
    return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

// Per-thread match state: match data for the overall match only (PCRE2 fills pair 0 whatever the pattern's capture
// count) and a JIT stack larger than the default 32 KiB.
struct ThreadMatchState {
    pcre2_match_data* data = nullptr;
    pcre2_match_context* context = nullptr;
    pcre2_jit_stack* jit_stack = nullptr;

    ThreadMatchState() {
        data = pcre2_match_data_create(1, nullptr);
        context = pcre2_match_context_create(nullptr);
        jit_stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
        if (context != nullptr && jit_stack != nullptr) pcre2_jit_stack_assign(context, nullptr, jit_stack);
    }
    ~ThreadMatchState() {
        pcre2_jit_stack_free(jit_stack);
        pcre2_match_context_free(context);
        pcre2_match_data_free(data);
    }
    ThreadMatchState(const ThreadMatchState&) = delete;
    ThreadMatchState& operator=(const ThreadMatchState&) = delete;
};

ThreadMatchState& threadMatchState() {
    thread_local ThreadMatchState state;
    return state;
}

}  // namespace

std::string translateOnigurumaClasses(std::string_view pattern) {
    std::string out;
    out.reserve(pattern.size() + 64);
    bool in_class = false;
    size_t class_start = 0;  // index in `pattern` just after the '[' (and '^') that opened the class
    for (size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        if (c == '\\' && i + 1 < pattern.size()) {
            const char e = pattern[i + 1];
            if (e == 's' || e == 'w') {
                const std::string_view items = e == 's' ? kWhiteSpaceItems : kWordItems;
                if (in_class) {
                    out += items;
                } else {
                    out += '[';
                    out += items;
                    out += ']';
                }
            } else if ((e == 'S' || e == 'W') && !in_class) {
                out += "[^";
                out += e == 'S' ? kWhiteSpaceItems : kWordItems;
                out += ']';
            } else {
                out += c;
                out += e;
            }
            ++i;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            out += c;
            if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
            class_start = i + 1;
            continue;
        }
        if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
            // A POSIX class such as [:alpha:]: copied up to its closing ":]".
            const size_t close = pattern.find(":]", i + 2);
            if (close != std::string_view::npos) {
                out += pattern.substr(i, close + 2 - i);
                i = close + 1;
                continue;
            }
        }
        if (in_class && c == ']' && i != class_start) in_class = false;
        out += c;
    }
    return out;
}

struct Regex::Code {
    pcre2_code* code = nullptr;
    ~Code() { pcre2_code_free(code); }
};

Regex::Regex(std::unique_ptr<Code> code, std::string pattern, bool jit)
    : code_(std::move(code)), pattern_(std::move(pattern)), jit_(jit) {}
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

core::Result<Regex> Regex::compile(std::string_view pattern, bool use_jit) {
    const std::string translated = translateOnigurumaClasses(pattern);
    int error = 0;
    PCRE2_SIZE offset = 0;
    auto code = std::make_unique<Code>();
    code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                               PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (code->code == nullptr) {
        return core::invalidArgument("the regular expression does not compile: {} (at offset {} of {:?})",
                                     pcre2ErrorText(error), offset, translated);
    }
    bool jit = false;
    if (use_jit) {
        uint32_t jit_built = 0;
        pcre2_config(PCRE2_CONFIG_JIT, &jit_built);
        // A JIT that fails to compile (no executable memory, say) leaves the interpreter, which matches the same.
        jit = jit_built != 0 && pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE) == 0;
    }
    return Regex(std::move(code), std::string(pattern), jit);
}

core::Result<bool> Regex::find(std::string_view text, size_t start, size_t* match_begin, size_t* match_end) const {
    ThreadMatchState& state = threadMatchState();
    if (state.data == nullptr || state.context == nullptr) {
        return core::internalError("out of memory for PCRE2 match data");
    }
    // NOTE: PCRE2_NO_UTF_CHECK: PCRE2 would otherwise check the whole subject again on every call.
    const auto subject = reinterpret_cast<PCRE2_SPTR>(text.empty() ? "" : text.data());
    // pcre2_jit_match skips pcre2_match's argument checks (the subject was checked once, by the caller).
    int rc = jit_
                 ? pcre2_jit_match(code_->code, subject, text.size(), start, 0, state.data, state.context)
                 : pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        rc = pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, state.data,
                         state.context);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) {
        return core::internalError("the regular expression {:?} failed at byte {} of a {}-byte text: {}", pattern_,
                                   start, text.size(), pcre2ErrorText(rc));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    *match_begin = ovector[0];
    *match_end = ovector[1];
    return true;
}

}  // namespace afd::tokenizer
