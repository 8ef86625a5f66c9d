// StopStringMatcher: OpenAI's `stop` strings on a stream of generated text. Text comes in as a DecodeStream gives it
// (whole UTF-8 characters, in pieces that split anywhere between characters); what is safe to show comes out at
// once, except a tail that could still grow into a stop string, which is held back until the next piece decides.
// As soon as a piece completes a stop string, the occurrence that starts earliest among those complete in the text so
// far wins: the text before it is released, the stop string and everything after it are dropped, and matched() is
// true from then on. (So the pieces matter only where a stop string holds another one: with "bc" and "abcd", "abcd"
// wins when "cd" arrives in one piece, "bc" when "c" arrives alone, as the engine's tokens decide.)
//
// Not thread-safe (one matcher per request).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace afd::serve {

class StopStringMatcher {
public:
    // Empty strings in `stops` are ignored (the request parser refuses them).
    explicit StopStringMatcher(std::vector<std::string> stops);

    // Appends `text`; returns what can be shown now. After a match, everything is dropped (returns "").
    std::string push(std::string_view text);
    // The text held back, once the stream has ended without a match (then "" ever after).
    std::string finish();

    bool matched() const { return matched_; }
    bool hasStops() const { return !stops_.empty(); }
    // Bytes held back (at most the longest stop string less one).
    size_t heldBytes() const { return held_.size(); }

private:
    std::vector<std::string> stops_;
    std::string held_;
    bool matched_ = false;
};

}  // namespace afd::serve
