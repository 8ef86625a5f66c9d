// libFuzzer target: the tokenizer (src/tokenizer/) on arbitrary bytes, as text to encode and as ids to decode.
// Beyond "no crash, no sanitizer report, no exception":
//   - encode refuses exactly the inputs that are not well-formed UTF-8, and with InvalidUtf8::kReplace gives the
//     ids of the repaired text;
//   - decode(encode(text)) is the text itself when NFC leaves it alone (and so are the ids of the text with special
//     tokens encoded as text), and encoding the decoded text again gives the same ids otherwise;
//   - decoding any ids gives well-formed UTF-8, and a DecodeStream fed them one at a time gives the same text in
//     chunks that never end inside a character.
// A violation traps. The tokenizer is Qwen3's (found as the tests find it: $AFD_TOKENIZER_JSON, third_party/tokenizer/,
// the fixtures beside the checkout), else a small built-in byte-level one with the same pre-tokenizer.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/decode_stream.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using afd::tokenizer::DecodeStream;
using afd::tokenizer::EncodeOptions;
using afd::tokenizer::InvalidUtf8;
using afd::tokenizer::TokenId;
using afd::tokenizer::Tokenizer;

void require(bool condition) {
    if (!condition) __builtin_trap();
}

// A byte-level tokenizer with Qwen3's normalizer, pre-tokenizer and a few added tokens, for machines without the
// real file: the 256 byte characters and a handful of merges.
std::string builtInTokenizerJson() {
    return R"({"version": "1.0", "added_tokens": [
      {"id": 262, "content": "<|im_start|>", "special": true, "normalized": false},
      {"id": 263, "content": "<think>", "special": false, "normalized": false}],
     "normalizer": {"type": "NFC"},
     "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
       {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
        "behavior": "Isolated", "invert": false},
       {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
     "decoder": {"type": "ByteLevel"},
     "model": {"type": "BPE", "vocab": VOCAB, "merges": [["Ġ", "t"], ["h", "e"], ["Ġt", "he"], ["i", "n"], ["in", "g"], ["Ġ", "Ġ"]]}})";
}

std::string builtInVocab() {
    // GPT-2's alphabet: printable bytes as themselves, the others from U+0100 on.
    std::string out = "{";
    int next = 0x100;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        std::string c;
        afd::tokenizer::appendUtf8(static_cast<char32_t>(printable ? b : next++), &c);
        if (c == "\"" || c == "\\") c = "\\" + c;
        out += "\"" + c + "\": " + std::to_string(b) + ", ";
    }
    return out + "\"Ġt\": 256, \"he\": 257, \"Ġthe\": 258, \"in\": 259, \"ing\": 260, \"ĠĠ\": 261}";
}

std::unique_ptr<Tokenizer> loadTokenizer() {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("AFD_TOKENIZER_JSON"); env != nullptr && *env != '\0')
        candidates.emplace_back(env);
#ifdef AFD_FUZZ_SOURCE_DIR
    candidates.push_back(std::string(AFD_FUZZ_SOURCE_DIR) + "/third_party/tokenizer/tokenizer.json");
    candidates.push_back(std::string(AFD_FUZZ_SOURCE_DIR) + "/../shared/fixtures/qwen3-tokenizer/tokenizer.json");
#endif
    for (const std::string& path : candidates) {
        if (!std::filesystem::is_regular_file(path)) continue;
        afd::core::Result<Tokenizer> tok = Tokenizer::fromFile(path);
        if (!tok.isOk()) {
            std::fprintf(stderr, "tokenizer_fuzz: %s\n", tok.status().toString().c_str());
            std::abort();
        }
        std::fprintf(stderr, "tokenizer_fuzz: %s\n", path.c_str());
        return std::make_unique<Tokenizer>(std::move(tok).value());
    }
    std::string json = builtInTokenizerJson();
    json.replace(json.find("VOCAB"), 5, builtInVocab());
    afd::core::Result<Tokenizer> tok = Tokenizer::fromJson(json, "the built-in tokenizer");
    if (!tok.isOk()) {
        std::fprintf(stderr, "tokenizer_fuzz: %s\n", tok.status().toString().c_str());
        std::abort();
    }
    std::fprintf(stderr, "tokenizer_fuzz: no tokenizer.json found; the built-in byte-level tokenizer\n");
    return std::make_unique<Tokenizer>(std::move(tok).value());
}

const Tokenizer* g_tok = nullptr;

void checkStream(const std::vector<TokenId>& ids, bool skip_special) {
    const std::string whole = g_tok->decode(ids, {.skip_special_tokens = skip_special});
    require(afd::tokenizer::isValidUtf8(whole));
    DecodeStream stream(*g_tok, {.skip_special_tokens = skip_special});
    std::string joined;
    for (const TokenId id : ids) {
        const std::string chunk = stream.step(id);
        require(afd::tokenizer::isValidUtf8(chunk));
        require(stream.pendingBytes() <= 3);
        joined += chunk;
    }
    joined += stream.flush();
    require(joined == whole);
}

void checkText(std::string_view text) {
    const bool valid = afd::tokenizer::isValidUtf8(text);
    const afd::core::Result<std::vector<TokenId>> rejected = g_tok->encode(text);
    require(rejected.isOk() == valid);
    const afd::core::Result<std::vector<TokenId>> replaced =
        g_tok->encode(text, {.invalid_utf8 = InvalidUtf8::kReplace});
    require(replaced.isOk());
    if (!valid) {
        const afd::core::Result<std::vector<TokenId>> repaired = g_tok->encode(afd::tokenizer::utf8Lossy(text));
        require(repaired.isOk() && *repaired == *replaced);
        return;
    }
    const std::vector<TokenId>& ids = *rejected;
    for (const TokenId id : ids) require(id >= 0 && id < g_tok->idLimit());
    const std::string decoded = g_tok->decode(ids);
    const afd::core::Result<std::string> nfc =
        afd::tokenizer::normalizeUnicode(text, afd::tokenizer::UnicodeForm::kNfc);
    require(nfc.isOk());
    if (*nfc == text) {
        require(decoded == text);
        const afd::core::Result<std::vector<TokenId>> as_text = g_tok->encode(text, {.split_special_tokens = true});
        require(as_text.isOk() && g_tok->decode(*as_text) == text);
    } else {
        const afd::core::Result<std::vector<TokenId>> again = g_tok->encode(decoded);
        require(again.isOk() && *again == ids);
    }
    checkStream(ids, false);
    checkStream(ids, true);
}

void checkIds(const uint8_t* data, size_t size) {
    std::vector<TokenId> ids;
    const auto limit = static_cast<uint32_t>(g_tok->idLimit()) + 64;  // a few ids that are no tokens
    for (size_t i = 0; i + 3 < size; i += 4) {
        const uint32_t v =
            uint32_t{data[i]} | uint32_t{data[i + 1]} << 8 | uint32_t{data[i + 2]} << 16 | uint32_t{data[i + 3]} << 24;
        // Mostly the byte tokens (where characters break), sometimes anything.
        ids.push_back(static_cast<TokenId>((v & 0x80000000u) != 0 ? (v & 0x7FFFFFFFu) % limit : v % 512));
    }
    checkStream(ids, false);
    checkStream(ids, true);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
    static std::unique_ptr<Tokenizer> tokenizer = loadTokenizer();
    g_tok = tokenizer.get();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    checkText(std::string_view(reinterpret_cast<const char*>(data), size));
    checkIds(data, size);
    return 0;
}
