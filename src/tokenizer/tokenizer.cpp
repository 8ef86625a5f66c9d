#include "tokenizer/tokenizer.h"

#include "tokenizer/tokenizer_parts.h"
#include "tokenizer/utf8.h"

namespace afd::tokenizer {

Tokenizer::Tokenizer(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

core::Result<std::vector<TokenId>> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
    std::string repaired;
    const size_t bad = firstInvalidUtf8(text);
    if (bad != text.size()) {
        if (options.invalid_utf8 == InvalidUtf8::kReject) {
            return core::invalidArgument("the text is not valid UTF-8: an ill-formed sequence at byte {} of {}", bad,
                                         text.size());
        }
        repaired = utf8Lossy(text);
        text = repaired;
    }
    std::vector<TokenId> ids;
    ids.reserve(text.size() / 3 + 1);
    std::vector<AddedTokenSplit> pieces;
    parts_->raw_matcher.split(text, options.split_special_tokens, &pieces);

    std::vector<AddedTokenSplit> inner;
    for (const AddedTokenSplit& piece : pieces) {
        if (piece.id) {
            ids.push_back(*piece.id);
            continue;
        }
        std::string_view part = text.substr(piece.begin, piece.end - piece.begin);
        std::string normalized;
        AFD_ASSIGN_OR_RETURN(const bool changed, parts_->normalizer.normalize(part, &normalized));
        if (changed) part = normalized;
        if (parts_->normalized_matcher.empty()) {
            AFD_RETURN_IF_ERROR(encodePiece(part, &ids));
            continue;
        }
        inner.clear();
        parts_->normalized_matcher.split(part, options.split_special_tokens, &inner);
        for (const AddedTokenSplit& p : inner) {
            if (p.id) {
                ids.push_back(*p.id);
            } else {
                AFD_RETURN_IF_ERROR(encodePiece(part.substr(p.begin, p.end - p.begin), &ids));
            }
        }
    }
    return ids;
}

core::Status Tokenizer::encodePiece(std::string_view piece, std::vector<TokenId>* ids) const {
    const BpeModel& model = parts_->model;
    return parts_->pre_tokenizer.forEachWord(piece, [&](std::string_view word) { model.encodeWord(word, ids); });
}

std::string Tokenizer::decode(std::span<const TokenId> ids, const DecodeOptions& options) const {
    std::string bytes;
    for (const TokenId id : ids) {
        if (options.skip_special_tokens && isSpecial(id)) continue;
        bytes += tokenBytes(id);
    }
    if (isValidUtf8(bytes)) return bytes;
    return utf8Lossy(bytes);
}

std::string_view Tokenizer::tokenBytes(TokenId id) const {
    if (id < 0 || id >= idLimit()) return {};
    const uint32_t begin = parts_->offsets[id];
    return std::string_view(parts_->token_bytes).substr(begin, parts_->offsets[id + 1] - begin);
}

bool Tokenizer::isSpecial(TokenId id) const { return id >= 0 && id < idLimit() && parts_->special[id] != 0; }

std::optional<TokenId> Tokenizer::tokenToId(std::string_view token) const {
    const auto it = parts_->added_ids.find(std::string(token));
    if (it != parts_->added_ids.end()) return it->second;
    return parts_->model.tokenToId(token);
}

std::optional<std::string> Tokenizer::idToToken(TokenId id) const {
    for (const AddedToken& t : parts_->added_tokens) {
        if (t.id == id) return t.content;
    }
    const std::string* token = parts_->model.idToToken(id);
    if (token == nullptr) return std::nullopt;
    return *token;
}

TokenId Tokenizer::idLimit() const { return static_cast<TokenId>(parts_->special.size()); }
const std::vector<AddedToken>& Tokenizer::addedTokens() const { return parts_->added_tokens; }
bool Tokenizer::usesJit() const { return parts_->pre_tokenizer.usesJit(); }

}  // namespace afd::tokenizer
