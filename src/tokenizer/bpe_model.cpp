#include "tokenizer/bpe_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <unordered_map>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace afd::tokenizer {
namespace {

struct StringViewHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Merge rules keyed by the (left id, right id) pair: open addressing, linear probing, a power-of-two table at most
// half full.
class MergeTable {
public:
    struct Entry {
        uint64_t key = kEmpty;
        uint32_t rank = 0;
        TokenId new_id = 0;
    };

    explicit MergeTable(size_t count) {
        size_t capacity = 16;
        while (capacity < 2 * count) capacity *= 2;
        slots_.resize(capacity);
        mask_ = capacity - 1;
    }

    void insertOrAssign(TokenId left, TokenId right, uint32_t rank, TokenId new_id) {
        const uint64_t key = keyOf(left, right);
        for (size_t i = slotOf(key);; i = (i + 1) & mask_) {
            if (slots_[i].key == kEmpty || slots_[i].key == key) {
                if (slots_[i].key == kEmpty) ++size_;
                slots_[i] = {key, rank, new_id};
                return;
            }
        }
    }

    const Entry* find(TokenId left, TokenId right) const {
        const uint64_t key = keyOf(left, right);
        for (size_t i = slotOf(key);; i = (i + 1) & mask_) {
            if (slots_[i].key == key) return &slots_[i];
            if (slots_[i].key == kEmpty) return nullptr;
        }
    }

    size_t size() const { return size_; }

private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};  // never a key: ids are below 2^31
    static uint64_t keyOf(TokenId left, TokenId right) {
        return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
    }
    size_t slotOf(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ULL) >> 20) & mask_; }

    std::vector<Entry> slots_;
    size_t mask_ = 0;
    size_t size_ = 0;
};

// Words already merged: a direct-mapped table (a new word takes its slot from whatever held it, so words that keep
// coming back stay in), locked per stripe of slots. Slots keep their buffers, so a warm cache allocates nothing.
class WordCache {
public:
    static constexpr size_t kMaxWordBytes = 256;

    WordCache() : slots_(kSlots) {}

    bool lookup(std::string_view word, size_t hash, std::vector<TokenId>* out) {
        Slot& slot = slots_[hash & (kSlots - 1)];
        const std::lock_guard<std::mutex> lock(stripeOf(hash));
        if (!slot.used || slot.hash != hash || slot.word != word) return false;
        out->insert(out->end(), slot.ids.begin(), slot.ids.end());
        return true;
    }

    void insert(std::string_view word, size_t hash, const TokenId* ids, size_t count) {
        Slot& slot = slots_[hash & (kSlots - 1)];
        const std::lock_guard<std::mutex> lock(stripeOf(hash));
        slot.used = true;
        slot.hash = hash;
        slot.word.assign(word);
        slot.ids.assign(ids, ids + count);
    }

private:
    static constexpr size_t kSlots = size_t{1} << 16;
    static constexpr size_t kStripes = 64;

    struct Slot {
        bool used = false;
        size_t hash = 0;
        std::string word;
        std::vector<TokenId> ids;
    };

    std::mutex& stripeOf(size_t hash) { return stripes_[hash & (kStripes - 1)]; }

    std::vector<Slot> slots_;
    std::array<std::mutex, kStripes> stripes_;
};

// One symbol of a word being merged: a token id in a doubly linked list; len 0 once merged into its left neighbour.
struct Symbol {
    TokenId id;
    int32_t prev;
    int32_t next;
    uint32_t len;
};

struct Candidate {
    uint32_t rank;
    uint32_t pos;
    TokenId new_id;
};

// The heap's order: lowest rank first, then leftmost.
bool poppedLater(const Candidate& a, const Candidate& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; }

struct MergeScratch {
    std::vector<Symbol> symbols;
    std::vector<Candidate> heap;
    std::vector<TokenId> ids;
};

}  // namespace

struct BpeModel::Impl {
    BpeOptions options;
    std::vector<std::string> tokens;  // by id; "" where no entry has the id
    std::vector<uint8_t> present;     // by id
    std::unordered_map<std::string_view, TokenId, StringViewHash, std::equal_to<>> ids;  // views into `tokens`
    MergeTable merges{0};
    size_t num_merges = 0;
    std::array<TokenId, 256> byte_ids{};      // the token of each byte's alphabet character, -1 if none
    std::array<TokenId, 256> fallback_ids{};  // "<0xXX>" tokens, -1 if none
    std::optional<TokenId> unk_id;
    mutable WordCache cache;

    std::optional<TokenId> find(std::string_view token) const {
        const auto it = ids.find(token);
        if (it == ids.end()) return std::nullopt;
        return it->second;
    }

    void addSymbol(MergeScratch& s, TokenId id, uint32_t len) const {
        const auto n = static_cast<int32_t>(s.symbols.size());
        if (n > 0) s.symbols.back().next = n;
        s.symbols.push_back({id, n - 1, -1, len});
    }

    // A symbol outside the vocabulary: its bytes' fallback tokens, or the unknown token (fused or not), or nothing.
    // *pending_unk is the length of an unknown token not yet added (0: none), kept back for fusing as HF tokenizers
    // keeps it.
    void addUnknown(MergeScratch& s, std::string_view symbol, uint32_t len, uint32_t* pending_unk) const {
        if (options.byte_fallback) {
            bool all = true;
            for (const char c : symbol) all = all && fallback_ids[static_cast<uint8_t>(c)] >= 0;
            if (all) {
                for (const char c : symbol) addSymbol(s, fallback_ids[static_cast<uint8_t>(c)], 1);
                return;
            }
        }
        if (!unk_id) return;
        if (*pending_unk != 0 && options.fuse_unk) {
            *pending_unk += len;
            return;
        }
        if (*pending_unk != 0) addSymbol(s, *unk_id, *pending_unk);
        *pending_unk = len;
    }

    void addKnown(MergeScratch& s, TokenId id, uint32_t len, uint32_t* pending_unk) const {
        if (*pending_unk != 0) {
            addSymbol(s, *unk_id, *pending_unk);
            *pending_unk = 0;
        }
        addSymbol(s, id, len);
    }

    void pushCandidate(MergeScratch& s, int32_t left, TokenId left_id, TokenId right_id) const {
        const MergeTable::Entry* m = merges.find(left_id, right_id);
        if (m == nullptr) return;
        s.heap.push_back({m->rank, static_cast<uint32_t>(left), m->new_id});
        std::push_heap(s.heap.begin(), s.heap.end(), poppedLater);
    }

    void mergeAll(MergeScratch& s) const {
        std::vector<Symbol>& sym = s.symbols;
        s.heap.clear();
        for (size_t i = 0; i + 1 < sym.size(); ++i) {
            pushCandidate(s, static_cast<int32_t>(i), sym[i].id, sym[i + 1].id);
        }
        while (!s.heap.empty()) {
            std::pop_heap(s.heap.begin(), s.heap.end(), poppedLater);
            const Candidate top = s.heap.back();
            s.heap.pop_back();
            Symbol& left = sym[top.pos];
            if (left.len == 0 || left.next == -1) continue;
            const int32_t right_pos = left.next;
            const Symbol right = sym[right_pos];
            // A candidate is stale when its pair changed since it was queued.
            const MergeTable::Entry* m = merges.find(left.id, right.id);
            if (m == nullptr || m->new_id != top.new_id) continue;
            left.id = top.new_id;
            left.len += right.len;
            left.next = right.next;
            sym[right_pos].len = 0;
            if (right.next >= 0) sym[right.next].prev = static_cast<int32_t>(top.pos);
            if (left.prev >= 0) pushCandidate(s, left.prev, sym[left.prev].id, left.id);
            if (left.next >= 0) pushCandidate(s, static_cast<int32_t>(top.pos), left.id, sym[left.next].id);
        }
    }
};

BpeModel::BpeModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

core::Result<BpeModel> BpeModel::build(std::vector<std::pair<std::string, TokenId>> vocab,
                                       const std::vector<std::pair<std::string, std::string>>& merges,
                                       BpeOptions options) {
    auto impl = std::make_unique<Impl>();
    impl->options = std::move(options);
    TokenId limit = 0;
    for (const auto& [token, id] : vocab) {
        if (id < 0) return core::invalidArgument("vocab[{:?}] is {}, and ids must not be negative", token, id);
        limit = std::max(limit, id + 1);
    }
    impl->tokens.resize(static_cast<size_t>(limit));
    impl->present.assign(static_cast<size_t>(limit), 0);
    for (auto& [token, id] : vocab) {
        if (impl->present[id]) {
            return core::invalidArgument("vocab[{:?}] and vocab[{:?}] are both {}, and ids must be distinct",
                                         impl->tokens[id], token, id);
        }
        impl->present[id] = 1;
        impl->tokens[id] = std::move(token);
    }
    impl->ids.reserve(vocab.size());
    for (size_t id = 0; id < impl->tokens.size(); ++id) {
        if (impl->present[id]) impl->ids.emplace(impl->tokens[id], static_cast<TokenId>(id));
    }

    impl->merges = MergeTable(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const auto& [left, right] = merges[rank];
        const std::optional<TokenId> left_id = impl->find(left);
        const std::optional<TokenId> right_id = impl->find(right);
        const std::optional<TokenId> new_id = impl->find(left + right);
        const std::string_view missing = !left_id ? "its left token" : !right_id ? "its right token" : "their join";
        if (!left_id || !right_id || !new_id) {
            return core::invalidArgument("merges[{}] ({:?}, {:?}): {} is not in the vocab", rank, left, right, missing);
        }
        impl->merges.insertOrAssign(*left_id, *right_id, static_cast<uint32_t>(rank), *new_id);
    }
    impl->num_merges = merges.size();

    for (int b = 0; b < 256; ++b) {
        const std::string alphabet_char = bytesToAlphabet(std::string(1, static_cast<char>(b)));
        impl->byte_ids[b] = impl->find(alphabet_char).value_or(-1);
        impl->fallback_ids[b] = impl->find(fmt::format("<0x{:02X}>", b)).value_or(-1);
    }
    if (impl->options.unk_token) {
        impl->unk_id = impl->find(*impl->options.unk_token);
        if (!impl->unk_id) return core::invalidArgument("unk_token {:?} is not in the vocab", *impl->options.unk_token);
    }
    return BpeModel(std::move(impl));
}

void BpeModel::encodeWord(std::string_view word, std::vector<TokenId>* out) const {
    const Impl& m = *impl_;
    if (word.empty()) return;
    if (m.options.ignore_merges) {
        const std::optional<TokenId> whole = m.find(m.options.byte_level ? bytesToAlphabet(word) : std::string(word));
        if (whole) {
            out->push_back(*whole);
            return;
        }
    }
    const bool cacheable = word.size() < WordCache::kMaxWordBytes;
    const size_t hash = cacheable ? StringViewHash{}(word) : 0;
    if (cacheable && m.cache.lookup(word, hash, out)) return;

    thread_local MergeScratch s;
    s.symbols.clear();
    uint32_t pending_unk = 0;
    if (m.options.byte_level) {
        for (const char c : word) {
            const auto b = static_cast<uint8_t>(c);
            if (m.byte_ids[b] >= 0) {
                m.addKnown(s, m.byte_ids[b], 1, &pending_unk);
            } else {
                m.addUnknown(s, bytesToAlphabet(word.substr(&c - word.data(), 1)), 1, &pending_unk);
            }
        }
    } else {
        for (size_t pos = 0; pos < word.size();) {
            size_t length = utf8SequenceLength(word, pos);
            if (length == 0) length = 1;  // unreachable for well-formed input; one byte keeps the loop going
            const std::string_view symbol = word.substr(pos, length);
            const std::optional<TokenId> id = m.find(symbol);
            if (id) {
                m.addKnown(s, *id, static_cast<uint32_t>(length), &pending_unk);
            } else {
                m.addUnknown(s, symbol, static_cast<uint32_t>(length), &pending_unk);
            }
            pos += length;
        }
    }
    if (pending_unk != 0) m.addSymbol(s, *m.unk_id, pending_unk);
    m.mergeAll(s);

    const size_t first = out->size();
    for (const Symbol& symbol : s.symbols) {
        if (symbol.len != 0) out->push_back(symbol.id);
    }
    if (cacheable) m.cache.insert(word, hash, out->data() + first, out->size() - first);
}

std::optional<TokenId> BpeModel::tokenToId(std::string_view token) const { return impl_->find(token); }

const std::string* BpeModel::idToToken(TokenId id) const {
    if (id < 0 || static_cast<size_t>(id) >= impl_->tokens.size() || !impl_->present[id]) return nullptr;
    return &impl_->tokens[id];
}

TokenId BpeModel::idLimit() const { return static_cast<TokenId>(impl_->tokens.size()); }
size_t BpeModel::size() const { return impl_->ids.size(); }
size_t BpeModel::numMerges() const { return impl_->num_merges; }
const BpeOptions& BpeModel::options() const { return impl_->options; }

}  // namespace afd::tokenizer
