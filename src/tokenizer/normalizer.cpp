#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace afd::tokenizer {
namespace {

utf8proc_option_t optionsOf(UnicodeForm form) {
    switch (form) {
        case UnicodeForm::kNfc:
            return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        case UnicodeForm::kNfd:
            return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
        case UnicodeForm::kNfkc:
            return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
        case UnicodeForm::kNfkd:
            return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
    }
    return static_cast<utf8proc_option_t>(0);
}

bool isAscii(std::string_view text) {
    for (const char c : text) {
        if (static_cast<unsigned char>(c) >= 0x80) return false;
    }
    return true;
}

// Which code points are NFC-inert (isNfcInert), one bit each, computed once from utf8proc's tables.
class InertTable {
public:
    InertTable() : bits_((0x110000 + 63) / 64, 0) {
        for (char32_t cp = 0; cp < 0x110000; ++cp) {
            if (compute(cp)) bits_[cp / 64] |= uint64_t{1} << (cp % 64);
        }
    }
    bool inert(char32_t cp) const { return cp < 0x110000 && ((bits_[cp / 64] >> (cp % 64)) & 1) != 0; }

private:
    static bool compute(char32_t cp) {
        if (cp < 0x300) return true;
        if (cp >= 0xD800 && cp < 0xE000) return false;
        if (cp >= 0x1100 && cp < 0x1200) return false;  // Hangul jamo: vowels and trailing consonants compose
        const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
        if (p->combining_class != 0) return false;
        if (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) return false;  // the second of a composition
        if (p->decomp_seqindex == UINT16_MAX || p->decomp_type != 0) return true;  // no canonical decomposition
        // A canonical decomposition: inert when it starts with a starter and NFC composes it back (で, é, …).
        std::string one;
        appendUtf8(cp, &one);
        const core::Result<std::string> composed = normalizeUnicode(one, UnicodeForm::kNfc);
        const core::Result<std::string> decomposed = normalizeUnicode(one, UnicodeForm::kNfd);
        if (!composed.isOk() || !decomposed.isOk() || *composed != one || decomposed->empty()) return false;
        const size_t length = utf8SequenceLength(*decomposed, 0);
        const char32_t first = decodeUtf8(*decomposed, 0, length == 0 ? 1 : length);
        return utf8proc_get_property(static_cast<utf8proc_int32_t>(first))->combining_class == 0;
    }

    std::vector<uint64_t> bits_;
};

const InertTable& inertTable() {
    static const InertTable kTable;
    return kTable;
}

// NFC of `text`, normalizing only the runs that hold a code point that is not NFC-inert, each from the inert code
// point before it to the next inert one (the NFC of a string is the NFC of such runs joined: an inert code point
// blocks every composition and reordering across it). True with the result in *out, false when nothing changes.
core::Result<bool> nfcByRuns(std::string_view text, std::string* out) {
    const InertTable& table = inertTable();
    const auto inertAt = [&](size_t pos, size_t* length) {
        const auto lead = static_cast<uint8_t>(text[pos]);
        if (lead < 0xCC) {  // U+0000..U+02FF
            *length = utf8LeadLength(lead);
            return true;
        }
        *length = utf8SequenceLength(text, pos);
        if (*length == 0) *length = 1;
        return table.inert(decodeUtf8(text, pos, *length));
    };
    std::string result;
    bool changed = false;
    size_t copied = 0;      // text before this offset is in `result` already (once changed)
    size_t last_inert = 0;  // where the last inert code point starts
    size_t pos = 0;
    while (pos < text.size()) {
        size_t length = 0;
        if (inertAt(pos, &length)) {
            last_inert = pos;
            pos += length;
            continue;
        }
        size_t end = pos + length;
        while (end < text.size() && !inertAt(end, &length)) end += length;
        const std::string_view run = text.substr(last_inert, end - last_inert);
        AFD_ASSIGN_OR_RETURN(std::string normalized, normalizeUnicode(run, UnicodeForm::kNfc));
        if (normalized != run) {
            result.append(text.substr(copied, last_inert - copied));
            result += normalized;
            copied = end;
            changed = true;
        }
        pos = end;
        last_inert = end;
    }
    if (!changed) return false;
    result.append(text.substr(copied));
    *out = std::move(result);
    return true;
}

}  // namespace

bool isNfcInert(char32_t cp) { return inertTable().inert(cp); }

core::Result<std::string> normalizeUnicode(std::string_view text, UnicodeForm form) {
    if (text.empty()) return std::string();
    utf8proc_uint8_t* mapped = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                            static_cast<utf8proc_ssize_t>(text.size()), &mapped, optionsOf(form));
    const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owner(mapped, &std::free);
    if (n < 0) return core::internalError("Unicode normalization failed: {}", utf8proc_errmsg(n));
    return std::string(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
}

core::Result<bool> Normalizer::normalize(std::string_view text, std::string* out) const {
    bool changed = false;
    std::string current;
    for (const UnicodeForm form : steps_) {
        const std::string_view input = changed ? std::string_view(current) : text;
        if (isAscii(input)) continue;  // every form leaves ASCII as it is
        std::string result;
        if (form == UnicodeForm::kNfc) {
            AFD_ASSIGN_OR_RETURN(const bool nfc_changed, nfcByRuns(input, &result));
            if (!nfc_changed) continue;
        } else {
            AFD_ASSIGN_OR_RETURN(result, normalizeUnicode(input, form));
            if (result == input) continue;
        }
        current = std::move(result);
        changed = true;
    }
    if (!changed || current == text) return false;  // NFD then NFC, say, can end where it started
    *out = std::move(current);
    return true;
}

}  // namespace afd::tokenizer
