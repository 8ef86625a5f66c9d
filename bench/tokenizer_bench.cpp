// Encode throughput of the Qwen3 tokenizer (src/tokenizer/) on a mixed corpus: English prose, code, CJK, emoji and
// whitespace runs, each a list of prompt-sized strings made from fixed snippets with a fixed seed. Reports MB/s
// (10^6 bytes of UTF-8 input per second) and tokens/s, one thread and several, and prints a summary table that
// bench/peers/hf_tokenize.py prints too for HF tokenizers on the same strings:
//
//   T=third_party/tokenizer/tokenizer.json
//   build/bench/tokenizer_bench --tokenizer=$T --write-corpus=/tmp/corpus.json --write-ids=/tmp/afd_ids.json
//   python3 bench/peers/hf_tokenize.py --tokenizer $T --corpus /tmp/corpus.json --check-ids /tmp/afd_ids.json
//
// The tokenizer is found through --tokenizer=, $AFD_TOKENIZER_JSON, third_party/tokenizer/ or the fixtures beside
// the checkout. Google Benchmark's own flags (--benchmark_filter=…) work as usual.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <thread>

#include "tokenizer/tokenizer.h"

namespace {

using afd::tokenizer::Tokenizer;

const std::vector<std::string_view> kEnglish = {
    "The quick brown fox jumps over the lazy dog. ",
    "In 1905, Albert Einstein published four papers that changed physics forever; ",
    "It's not that we can't do it, it's that we won't. ",
    "Large language models are trained on trillions of tokens of text, ",
    "and their tokenizers decide how that text is cut into pieces. ",
    "Mixture-of-Experts layers route each token to a few experts out of many. ",
    "\"Well,\" she said, \"I'd rather they'd asked first.\" ",
    "Section 3.2 describes the results (see Table 4 and Figure 7). ",
    "Please summarize the following document in three bullet points:\n\n",
    "Q: What is the capital of Australia?\nA: Canberra.\n",
};
const std::vector<std::string_view> kCode = {
    "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - "
    "2)\n\n",
    "template <typename T>\nstruct Span {\n    T* data = nullptr;  // [size]\n    size_t size = 0;\n};\n\n",
    "for (int i = 0; i < num_tokens; ++i) {\n\tout[i] = static_cast<float>(in[i]) * scale;\n}\n",
    "SELECT name, COUNT(*) AS n FROM users WHERE created_at > '2024-01-01' GROUP BY name;\n",
    "{\"model\": \"qwen3\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"stream\": true}\n",
    "const sum = (xs) => xs.reduce((a, b) => a + b, 0); // arrow functions\n",
    "    #[inline]\n    fn len(&self) -> usize { self.items.len() }\n",
    "<div class=\"row\"><span id=\"x-1\">&nbsp;</span></div>\n",
};
const std::vector<std::string_view> kCjk = {
    "人工智能正在改变我们的生活方式，",
    "大规模语言模型需要大量的计算资源。",
    "東京は日本の首都で、人口は約千四百万人です。",
    "カタカナとひらがなと漢字が混ざった文章。",
    "안녕하세요, 오늘 날씨가 정말 좋네요. ",
    "深度学习框架支持自动微分和分布式训练。",
    "「こんにちは」と彼女は言った。",
    "这是一个测试句子，包含标点符号！",
};
const std::vector<std::string_view> kEmoji = {
    "😀",    "😂🤣",      "👍🏽", "👨‍👩‍👧‍👦", "🇯🇵🇺🇸", "❤️", "🎉🎊",
    "🦜", " great job 🚀 ", "✨✨✨",      "🙏🏻 thanks! ",         "😅\n",
};
const std::vector<std::string_view> kWhitespace = {
    "    ", "\n\n\n", "\t\t", "  \n  ", "word", " word", "\r\n", "        indented", "\n    \n", "x   y", "   ", "\n",
};

// Strings of about `string_bytes` each, `total_bytes` in all, from `snippets` in random order.
std::vector<std::string> makeStrings(const std::vector<std::string_view>& snippets, size_t string_bytes,
                                     size_t total_bytes, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<std::string> out;
    size_t total = 0;
    while (total < total_bytes) {
        std::string s;
        while (s.size() < string_bytes) s += snippets[rng() % snippets.size()];
        total += s.size();
        out.push_back(std::move(s));
    }
    return out;
}

std::map<std::string, std::vector<std::string>> makeCorpus() {
    constexpr size_t kBytes = 256 * 1024;
    std::map<std::string, std::vector<std::string>> corpus;
    corpus["english"] = makeStrings(kEnglish, 2048, kBytes, 1);
    corpus["code"] = makeStrings(kCode, 2048, kBytes, 2);
    corpus["cjk"] = makeStrings(kCjk, 2048, kBytes, 3);
    corpus["emoji"] = makeStrings(kEmoji, 1024, kBytes, 4);
    corpus["whitespace"] = makeStrings(kWhitespace, 1024, kBytes, 5);
    std::vector<std::string_view> all;
    for (const auto* list : {&kEnglish, &kCode, &kCjk, &kEmoji, &kWhitespace})
        all.insert(all.end(), list->begin(), list->end());
    corpus["mixed"] = makeStrings(all, 2048, kBytes, 6);
    return corpus;
}

std::string findTokenizer(const std::string& flag) {
    if (!flag.empty()) return flag;
    if (const char* env = std::getenv("AFD_TOKENIZER_JSON"); env != nullptr && *env != '\0') return env;
    for (const std::string& dir : {std::string(AFD_SOURCE_DIR) + "/third_party/tokenizer",
                                   std::string(AFD_SOURCE_DIR) + "/../shared/fixtures/qwen3-tokenizer"}) {
        if (std::filesystem::is_regular_file(dir + "/tokenizer.json")) return dir + "/tokenizer.json";
    }
    return "";
}

const Tokenizer* g_tokenizer = nullptr;
std::map<std::string, std::vector<std::string>> g_corpus;

struct Totals {
    size_t bytes = 0;
    size_t tokens = 0;
};

Totals encodeAll(const std::vector<std::string>& strings) {
    Totals t;
    for (const std::string& s : strings) {
        afd::core::Result<std::vector<afd::tokenizer::TokenId>> ids = g_tokenizer->encode(s);
        if (!ids.isOk()) std::abort();
        t.bytes += s.size();
        t.tokens += ids->size();
        benchmark::DoNotOptimize(ids->data());
    }
    return t;
}

// One thread encodes the whole corpus of one kind, string by string.
void BM_Encode(benchmark::State& state, const std::string& kind) {
    const std::vector<std::string>& strings = g_corpus.at(kind);
    Totals per_pass;
    for (auto _ : state) per_pass = encodeAll(strings);
    const double passes = static_cast<double>(state.iterations());
    state.SetBytesProcessed(static_cast<int64_t>(per_pass.bytes * state.iterations()));
    state.counters["MB/s"] = benchmark::Counter(per_pass.bytes * passes * 1e-6, benchmark::Counter::kIsRate);
    state.counters["tokens/s"] = benchmark::Counter(per_pass.tokens * passes, benchmark::Counter::kIsRate);
    state.counters["bytes/token"] = static_cast<double>(per_pass.bytes) / static_cast<double>(per_pass.tokens);
}

// Several threads share one Tokenizer, each encoding the mixed corpus (the serve path's many requests).
void BM_EncodeThreads(benchmark::State& state) {
    const std::vector<std::string>& strings = g_corpus.at("mixed");
    Totals per_pass;
    for (auto _ : state) per_pass = encodeAll(strings);
    const double passes = static_cast<double>(state.iterations());
    state.counters["MB/s"] = benchmark::Counter(per_pass.bytes * passes * 1e-6, benchmark::Counter::kIsRate);
}

void BM_Decode(benchmark::State& state) {
    std::vector<std::vector<afd::tokenizer::TokenId>> encoded;
    size_t bytes = 0;
    for (const std::string& s : g_corpus.at("mixed")) {
        encoded.push_back(*g_tokenizer->encode(s));
        bytes += s.size();
    }
    for (auto _ : state) {
        for (const auto& ids : encoded) benchmark::DoNotOptimize(g_tokenizer->decode(ids).data());
    }
    state.counters["MB/s"] =
        benchmark::Counter(bytes * static_cast<double>(state.iterations()) * 1e-6, benchmark::Counter::kIsRate);
}

// Keeps each run's MB/s for the summary table.
class SummaryReporter : public benchmark::ConsoleReporter {
public:
    void ReportRuns(const std::vector<Run>& runs) override {
        ConsoleReporter::ReportRuns(runs);
        for (const Run& run : runs) {
            const auto it = run.counters.find("MB/s");
            if (it != run.counters.end()) rates_.emplace_back(run.benchmark_name(), it->second.value);
        }
    }
    const std::vector<std::pair<std::string, double>>& rates() const { return rates_; }

private:
    std::vector<std::pair<std::string, double>> rates_;
};

}  // namespace

int main(int argc, char** argv) {
    std::string tokenizer_flag;
    std::string corpus_out;
    std::string ids_out;
    std::vector<char*> rest;
    for (int i = 0; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg.starts_with("--tokenizer=")) {
            tokenizer_flag = std::string(arg.substr(12));
        } else if (arg.starts_with("--write-corpus=")) {
            corpus_out = std::string(arg.substr(15));
        } else if (arg.starts_with("--write-ids=")) {
            ids_out = std::string(arg.substr(12));
        } else {
            rest.push_back(argv[i]);
        }
    }
    const std::string path = findTokenizer(tokenizer_flag);
    if (path.empty()) {
        std::cerr << "tokenizer_bench: no tokenizer.json (run scripts/setup.sh, or pass --tokenizer=FILE)\n";
        return 2;
    }
    afd::core::Result<Tokenizer> tokenizer = Tokenizer::fromFile(path);
    if (!tokenizer.isOk()) {
        std::cerr << "tokenizer_bench: " << tokenizer.status().toString() << "\n";
        return 2;
    }
    g_tokenizer = &*tokenizer;
    g_corpus = makeCorpus();
    if (!corpus_out.empty()) {
        std::ofstream(corpus_out) << nlohmann::json(g_corpus).dump() << "\n";
        std::cerr << "tokenizer_bench: wrote the corpus to " << corpus_out << "\n";
    }
    if (!ids_out.empty()) {
        nlohmann::json ids = nlohmann::json::object();
        for (const auto& [kind, strings] : g_corpus) {
            for (const std::string& s : strings) ids[kind].push_back(*g_tokenizer->encode(s));
        }
        std::ofstream(ids_out) << ids.dump() << "\n";
        std::cerr << "tokenizer_bench: wrote the ids to " << ids_out << "\n";
    }
    std::cerr << "tokenizer_bench: " << path << (g_tokenizer->usesJit() ? " (PCRE2 JIT)" : " (PCRE2 interpreter)")
              << "\n";

    for (const auto& [kind, strings] : g_corpus) {
        benchmark::RegisterBenchmark(("encode/" + kind).c_str(), BM_Encode, kind)->Unit(benchmark::kMillisecond);
    }
    const int max_threads = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
    benchmark::RegisterBenchmark("encode_threads/mixed", BM_EncodeThreads)
        ->ThreadRange(1, max_threads)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("decode/mixed", BM_Decode)->Unit(benchmark::kMillisecond);

    int rest_argc = static_cast<int>(rest.size());
    benchmark::Initialize(&rest_argc, rest.data());
    SummaryReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::Shutdown();

    std::cout << "\n" << fmt::format("{:<44} {:>10}\n", "afd tokenizer", "MB/s");
    for (const auto& [name, rate] : reporter.rates()) std::cout << fmt::format("{:<44} {:>10.2f}\n", name, rate);
    return 0;
}
