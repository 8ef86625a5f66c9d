// Tokenizer::fromFile / fromJson: tokenizer.json's components, checked and built (tokenizer_parts.h).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <limits>
#include <unordered_set>

#include "core/json_fields.h"
#include "core/mapped_file.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_parts.h"

namespace afd::tokenizer {
namespace {

using core::JsonNull;
using core::JsonObjectReader;
using core::Status;
using nlohmann::json;

// Qwen3's tokenizer.json is 11 MB; the largest published ones are a few tens of MB.
constexpr size_t kMaxFileBytes = size_t{1} << 30;
// tokenizer.json nests five levels; deeper documents are refused while parsing (error messages dump values
// recursively).
constexpr int kMaxJsonDepth = 64;
constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max() - 1;

core::Result<json> parseDocument(std::string_view text) {
    bool too_deep = false;
    const json::parser_callback_t callback = [&too_deep](int depth, json::parse_event_t event, json& /*parsed*/) {
        const bool opens = event == json::parse_event_t::object_start || event == json::parse_event_t::array_start;
        if (!opens || depth < kMaxJsonDepth) return true;
        too_deep = true;
        return false;
    };
    json document;
    try {
        document = json::parse(text.begin(), text.end(), callback);
    } catch (const json::exception& e) {  // parse_error; out_of_range for a number beyond double's range
        return core::corrupt("not valid JSON: {}", e.what());
    }
    if (too_deep) return core::corrupt("objects and arrays are nested more than {} levels deep", kMaxJsonDepth);
    if (!document.is_object())
        return core::corrupt("the top level must be a JSON object, got {}", document.type_name());
    return document;
}

// The "type" of a component object: a string.
core::Result<std::string> typeOf(const JsonObjectReader& component) {
    const json* type = component.find("type");
    if (type == nullptr) return core::invalidArgument("{} is missing", component.name("type"));
    return core::jsonAs<std::string>(*type, component.name("type"));
}

// ---- normalizer ----

Status readNormalizer(const json& value, const std::string& path, std::vector<UnicodeForm>* forms) {
    AFD_ASSIGN_OR_RETURN(const JsonObjectReader n, JsonObjectReader::of(value, path));
    AFD_ASSIGN_OR_RETURN(const std::string type, typeOf(n));
    if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
        forms->push_back(type == "NFC"    ? UnicodeForm::kNfc
                         : type == "NFD"  ? UnicodeForm::kNfd
                         : type == "NFKC" ? UnicodeForm::kNfkc
                                          : UnicodeForm::kNfkd);
        return Status::ok();
    }
    if (type == "Sequence") {
        const json* list = n.find("normalizers");
        if (list == nullptr || !list->is_array()) {
            return core::jsonTypeError(list ? *list : json(), n.name("normalizers"), "a list of normalizers");
        }
        for (size_t i = 0; i < list->size(); ++i) {
            AFD_RETURN_IF_ERROR(readNormalizer((*list)[i], fmt::format("{}[{}]", n.name("normalizers"), i), forms));
        }
        return Status::ok();
    }
    return core::unsupported("{} \"{}\" is not supported (NFC, NFD, NFKC, NFKD and Sequence are)", n.name("type"),
                             type);
}

// ---- pre-tokenizer ----

core::Result<SplitBehavior> behaviorOf(const JsonObjectReader& split) {
    std::string behavior;
    AFD_RETURN_IF_ERROR(split.read("behavior", &behavior));
    if (behavior == "Removed") return SplitBehavior::kRemoved;
    if (behavior == "Isolated") return SplitBehavior::kIsolated;
    if (behavior == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
    if (behavior == "MergedWithNext") return SplitBehavior::kMergedWithNext;
    if (behavior == "Contiguous") return SplitBehavior::kContiguous;
    return core::invalidArgument(
        "{} must be Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous, "
        "got \"{}\"",
        split.name("behavior"), behavior);
}

// A literal pattern as a regex that matches exactly it: ASCII punctuation escaped (a backslash before any
// non-alphanumeric character is that character in PCRE2).
std::string escapeRegex(std::string_view literal) {
    std::string out;
    for (const char c : literal) {
        const bool punctuation = c > ' ' && c < 0x7F && !std::isalnum(static_cast<unsigned char>(c));
        if (punctuation) out += '\\';
        out += c;
    }
    return out;
}

Status readPreTokenizer(const json& value, const std::string& path, const LoadOptions& options,
                        std::vector<PreTokenizer::Step>* steps) {
    AFD_ASSIGN_OR_RETURN(const JsonObjectReader p, JsonObjectReader::of(value, path));
    AFD_ASSIGN_OR_RETURN(const std::string type, typeOf(p));
    if (type == "Sequence") {
        const json* list = p.find("pretokenizers");
        if (list == nullptr || !list->is_array()) {
            return core::jsonTypeError(list ? *list : json(), p.name("pretokenizers"), "a list of pre-tokenizers");
        }
        for (size_t i = 0; i < list->size(); ++i) {
            AFD_RETURN_IF_ERROR(
                readPreTokenizer((*list)[i], fmt::format("{}[{}]", p.name("pretokenizers"), i), options, steps));
        }
        return Status::ok();
    }
    if (!steps->empty() && std::holds_alternative<ByteLevelStep>(steps->back())) {
        return core::unsupported("{}: a {} after ByteLevel is not supported (ByteLevel must come last)", path, type);
    }
    if (type == "Split") {
        const json* pattern_value = p.find("pattern");
        if (pattern_value == nullptr) return core::invalidArgument("{} is missing", p.name("pattern"));
        AFD_ASSIGN_OR_RETURN(const JsonObjectReader pattern, JsonObjectReader::of(*pattern_value, p.name("pattern")));
        std::string regex;
        if (const json* r = pattern.find("Regex")) {
            AFD_ASSIGN_OR_RETURN(regex, core::jsonAs<std::string>(*r, pattern.name("Regex")));
        } else if (const json* s = pattern.find("String")) {
            AFD_ASSIGN_OR_RETURN(const std::string literal, core::jsonAs<std::string>(*s, pattern.name("String")));
            regex = escapeRegex(literal);
        } else {
            return core::invalidArgument("{} must hold \"Regex\" or \"String\"", pattern.path());
        }
        AFD_ASSIGN_OR_RETURN(const SplitBehavior behavior, behaviorOf(p));
        bool invert = false;
        AFD_RETURN_IF_ERROR(p.read("invert", &invert, JsonNull::kMeansAbsent));
        core::Result<Regex> compiled = Regex::compile(regex, options.use_jit);
        if (!compiled.isOk()) return compiled.status().withContext(pattern.path());
        steps->push_back(SplitStep{std::move(compiled).value(), behavior, invert});
        return Status::ok();
    }
    if (type == "ByteLevel") {
        bool add_prefix_space = true;
        bool use_regex = true;
        AFD_RETURN_IF_ERROR(p.read("add_prefix_space", &add_prefix_space, JsonNull::kMeansAbsent));
        AFD_RETURN_IF_ERROR(p.read("use_regex", &use_regex, JsonNull::kMeansAbsent));
        AFD_ASSIGN_OR_RETURN(ByteLevelStep step, makeByteLevelStep(add_prefix_space, use_regex, options.use_jit));
        steps->push_back(std::move(step));
        return Status::ok();
    }
    return core::unsupported("{} \"{}\" is not supported (Split, ByteLevel and Sequence are)", p.name("type"), type);
}

// ---- model ----

struct ModelFields {
    std::vector<std::pair<std::string, TokenId>> vocab;
    std::vector<std::pair<std::string, std::string>> merges;
    BpeOptions options;
};

Status readMerges(const json& merges, const std::string& name, ModelFields* out) {
    if (!merges.is_array()) return core::jsonTypeError(merges, name, "a list of merges");
    out->merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
        const json& m = merges[i];
        if (m.is_string()) {  // "left right"
            const std::string& line = m.get_ref<const std::string&>();
            const size_t space = line.find(' ');
            if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
                return core::invalidArgument("{}[{}] must be two tokens separated by one space, got {:?}", name, i,
                                             line);
            }
            out->merges.emplace_back(line.substr(0, space), line.substr(space + 1));
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["left", "right"]
            out->merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        } else {
            return core::jsonTypeError(m, fmt::format("{}[{}]", name, i),
                                       "a string \"left right\" or a list of two strings");
        }
    }
    return Status::ok();
}

Status readModel(const JsonObjectReader& root, ModelFields* out) {
    const json* model = root.find("model");
    if (model == nullptr) return core::invalidArgument("model is missing");
    AFD_ASSIGN_OR_RETURN(const JsonObjectReader m, JsonObjectReader::of(*model, "model"));
    AFD_ASSIGN_OR_RETURN(const std::string type, typeOf(m));
    if (type != "BPE") return core::unsupported("model.type \"{}\" is not supported (BPE is)", type);

    const json* vocab = m.find("vocab");
    if (vocab == nullptr || !vocab->is_object()) {
        return core::jsonTypeError(vocab ? *vocab : json(), "model.vocab", "an object of token: id");
    }
    out->vocab.reserve(vocab->size());
    for (const auto& [token, id] : vocab->items()) {
        AFD_ASSIGN_OR_RETURN(const int64_t value,
                             core::jsonIntIn(id, fmt::format("model.vocab[{:?}]", token), 0, kMaxId));
        out->vocab.emplace_back(token, static_cast<TokenId>(value));
    }
    const json* merges = m.find("merges", JsonNull::kMeansAbsent);
    if (merges != nullptr) AFD_RETURN_IF_ERROR(readMerges(*merges, "model.merges", out));

    if (const json* dropout = m.find("dropout", JsonNull::kMeansAbsent)) {
        AFD_ASSIGN_OR_RETURN(const double p, core::jsonAs<double>(*dropout, "model.dropout"));
        if (p != 0.0) return core::unsupported("model.dropout must be null or 0 (BPE dropout is random), got {}", p);
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        std::string affix;
        AFD_RETURN_IF_ERROR(m.read(key, &affix, JsonNull::kMeansAbsent));
        if (!affix.empty()) return core::unsupported("{} must be null or \"\", got {:?}", m.name(key), affix);
    }
    std::string unk;
    AFD_RETURN_IF_ERROR(m.read("unk_token", &unk, JsonNull::kMeansAbsent));
    if (m.find("unk_token", JsonNull::kMeansAbsent) != nullptr) out->options.unk_token = unk;
    AFD_RETURN_IF_ERROR(m.read("fuse_unk", &out->options.fuse_unk, JsonNull::kMeansAbsent));
    AFD_RETURN_IF_ERROR(m.read("byte_fallback", &out->options.byte_fallback, JsonNull::kMeansAbsent));
    AFD_RETURN_IF_ERROR(m.read("ignore_merges", &out->options.ignore_merges, JsonNull::kMeansAbsent));
    return Status::ok();
}

// ---- added tokens ----

Status readAddedTokens(const JsonObjectReader& root, const BpeModel& model, const Normalizer& normalizer,
                       Tokenizer::Parts* parts) {
    const json* list = root.find("added_tokens", JsonNull::kMeansAbsent);
    if (list == nullptr) return Status::ok();
    if (!list->is_array()) return core::jsonTypeError(*list, "added_tokens", "a list of added tokens");
    // Ids as HF tokenizers gives them (it does not take the stated ones): a token already in the vocabulary keeps
    // its id there, the others get consecutive ids after the vocabulary.
    auto next_id = static_cast<int64_t>(model.size());
    std::vector<AddedToken> raw;
    std::vector<AddedToken> normalized;
    std::vector<std::string> normalized_contents;
    for (size_t i = 0; i < list->size(); ++i) {
        const std::string path = fmt::format("added_tokens[{}]", i);
        AFD_ASSIGN_OR_RETURN(const JsonObjectReader t, JsonObjectReader::of((*list)[i], path));
        AddedToken token;
        int64_t stated_id = -1;
        const json* id = t.find("id");
        if (id == nullptr) return core::invalidArgument("{} is missing", t.name("id"));
        AFD_ASSIGN_OR_RETURN(stated_id, core::jsonIntIn(*id, t.name("id"), 0, kMaxId));
        const json* content = t.find("content");
        if (content == nullptr) return core::invalidArgument("{} is missing", t.name("content"));
        AFD_ASSIGN_OR_RETURN(token.content, core::jsonAs<std::string>(*content, t.name("content")));
        if (token.content.empty()) return core::invalidArgument("{} must not be empty", t.name("content"));
        AFD_RETURN_IF_ERROR(t.read("single_word", &token.single_word, JsonNull::kMeansAbsent));
        AFD_RETURN_IF_ERROR(t.read("lstrip", &token.lstrip, JsonNull::kMeansAbsent));
        AFD_RETURN_IF_ERROR(t.read("rstrip", &token.rstrip, JsonNull::kMeansAbsent));
        AFD_RETURN_IF_ERROR(t.read("normalized", &token.normalized, JsonNull::kMeansAbsent));
        AFD_RETURN_IF_ERROR(t.read("special", &token.special, JsonNull::kMeansAbsent));
        if (parts->added_ids.count(token.content) != 0) {
            return core::invalidArgument("{} {:?} is listed twice", t.name("content"), token.content);
        }
        const std::optional<TokenId> in_vocab = model.tokenToId(token.content);
        const int64_t given = in_vocab ? *in_vocab : next_id++;
        if (given != stated_id) {
            return core::invalidArgument(
                "{} {:?} states id {}, but its id is {} ({})", path, token.content, stated_id, given,
                in_vocab ? "its id in model.vocab" : "the next id after model.vocab and the added tokens before it");
        }
        token.id = static_cast<TokenId>(given);
        parts->added_ids.emplace(token.content, token.id);
        parts->added_tokens.push_back(token);
        if (token.normalized) {
            std::string form = token.content;
            AFD_ASSIGN_OR_RETURN(const bool changed, normalizer.normalize(token.content, &form));
            if (!changed) form = token.content;
            normalized_contents.push_back(std::move(form));
            normalized.push_back(token);
        } else {
            raw.push_back(token);
        }
    }
    std::vector<std::string> raw_contents;
    for (const AddedToken& t : raw) raw_contents.push_back(t.content);
    parts->raw_matcher = AddedTokenMatcher(std::move(raw), std::move(raw_contents));
    parts->normalized_matcher = AddedTokenMatcher(std::move(normalized), std::move(normalized_contents));
    return Status::ok();
}

// The bytes each id decodes to, and which ids skip_special_tokens drops (by the string decoding starts from, as
// HF tokenizers checks it).
Status buildDecodingTables(const Normalizer& normalizer, Tokenizer::Parts* parts) {
    TokenId limit = parts->model.idLimit();
    std::unordered_map<TokenId, std::string> added_strings;
    std::unordered_set<std::string> special_contents;
    for (const AddedToken& t : parts->added_tokens) {
        limit = std::max(limit, t.id + 1);
        std::string form = t.content;
        if (t.normalized) {
            AFD_ASSIGN_OR_RETURN(const bool changed, normalizer.normalize(t.content, &form));
            if (!changed) form = t.content;
        }
        added_strings[t.id] = std::move(form);
        if (t.special) special_contents.insert(t.content);
    }
    parts->offsets.assign(static_cast<size_t>(limit) + 1, 0);
    parts->special.assign(static_cast<size_t>(limit), 0);
    for (TokenId id = 0; id < limit; ++id) {
        parts->offsets[id] = static_cast<uint32_t>(parts->token_bytes.size());
        const auto added = added_strings.find(id);
        const std::string* token = added != added_strings.end() ? &added->second : parts->model.idToToken(id);
        if (token == nullptr) continue;
        parts->token_bytes += alphabetToBytes(*token);
        parts->special[id] = special_contents.count(*token) != 0 ? 1 : 0;
        if (parts->token_bytes.size() > std::numeric_limits<uint32_t>::max()) {
            return core::unsupported("the tokens add up to more than 4 GiB");
        }
    }
    parts->offsets[limit] = static_cast<uint32_t>(parts->token_bytes.size());
    return Status::ok();
}

core::Result<Tokenizer> load(std::string_view text, const LoadOptions& options) {
    AFD_ASSIGN_OR_RETURN(const json document, parseDocument(text));
    const JsonObjectReader root(document, "");
    if (const json* version = root.find("version", JsonNull::kMeansAbsent)) {
        AFD_ASSIGN_OR_RETURN(const std::string v, core::jsonAs<std::string>(*version, "version"));
        if (v != "1.0") return core::unsupported("version \"{}\" is not supported (1.0 is)", v);
    }

    std::vector<UnicodeForm> forms;
    if (const json* n = root.find("normalizer", JsonNull::kMeansAbsent)) {
        AFD_RETURN_IF_ERROR(readNormalizer(*n, "normalizer", &forms));
    }
    std::vector<PreTokenizer::Step> steps;
    if (const json* p = root.find("pre_tokenizer", JsonNull::kMeansAbsent)) {
        AFD_RETURN_IF_ERROR(readPreTokenizer(*p, "pre_tokenizer", options, &steps));
    }
    const json* decoder = root.find("decoder", JsonNull::kMeansAbsent);
    if (decoder == nullptr) return core::unsupported("decoder null is not supported (ByteLevel is)");
    AFD_ASSIGN_OR_RETURN(const JsonObjectReader d, JsonObjectReader::of(*decoder, "decoder"));
    AFD_ASSIGN_OR_RETURN(const std::string decoder_type, typeOf(d));
    if (decoder_type != "ByteLevel") {
        return core::unsupported("decoder.type \"{}\" is not supported (ByteLevel is)", decoder_type);
    }
    // post_processor, truncation and padding change nothing with add_special_tokens=False as transformers sets it.

    ModelFields fields;
    AFD_RETURN_IF_ERROR(readModel(root, &fields));
    PreTokenizer pre_tokenizer(std::move(steps));
    fields.options.byte_level = pre_tokenizer.byteLevel();
    core::Result<BpeModel> model = BpeModel::build(std::move(fields.vocab), fields.merges, fields.options);
    if (!model.isOk()) return model.status().withContext("model");

    auto parts = std::make_unique<Tokenizer::Parts>(std::move(model).value());
    parts->normalizer = Normalizer(std::move(forms));
    parts->pre_tokenizer = std::move(pre_tokenizer);
    AFD_RETURN_IF_ERROR(readAddedTokens(root, parts->model, parts->normalizer, parts.get()));
    AFD_RETURN_IF_ERROR(buildDecodingTables(parts->normalizer, parts.get()));
    return Tokenizer(std::move(parts));
}

}  // namespace

core::Result<Tokenizer> Tokenizer::fromJson(std::string_view json_text, std::string_view source,
                                            const LoadOptions& options) {
    core::Result<Tokenizer> tokenizer = load(json_text, options);
    if (!tokenizer.isOk()) return tokenizer.status().withContext(source);
    return tokenizer;
}

core::Result<Tokenizer> Tokenizer::fromFile(const std::string& path, const LoadOptions& options) {
    AFD_ASSIGN_OR_RETURN(const std::shared_ptr<core::MappedFile> file, core::MappedFile::open(path));
    if (file->size() > kMaxFileBytes) {
        return core::invalidArgument("{}: {} bytes is more than a tokenizer.json may hold ({} bytes)", path,
                                     file->size(), kMaxFileBytes);
    }
    const std::string_view text(reinterpret_cast<const char*>(file->data()), file->size());
    return fromJson(text, path, options);
}

}  // namespace afd::tokenizer
