// Finding the Qwen3 tokenizer.json for tests. It is not committed (11 MB): scripts/setup.sh fetches it into
// third_party/tokenizer/. Looked for, in order: $AFD_TOKENIZER_DIR, third_party/tokenizer/, the fixtures beside the
// checkout (../shared/fixtures/qwen3-tokenizer/). A test that needs it FAILS when it is nowhere (never skips).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "tokenizer/tokenizer.h"

namespace afd::tokenizer::testing {

// The path of tokenizer.json, or "" when none of the places has it.
std::string qwen3TokenizerPath();

// What a failing test says when the file is missing.
std::string qwen3TokenizerMissingMessage();

// The tokenizer, loaded once per process (nullptr when the file is missing or does not load; the reason is in
// qwen3TokenizerMissingMessage()).
const Tokenizer* qwen3Tokenizer();

// Test fixture: fails the test at SetUp when the tokenizer is missing; tok() is the tokenizer.
class Qwen3TokenizerTest : public ::testing::Test {
protected:
    void SetUp() override { ASSERT_NE(qwen3Tokenizer(), nullptr) << qwen3TokenizerMissingMessage(); }
    const Tokenizer& tok() const { return *qwen3Tokenizer(); }
};

// Reads a whole file (a test failure when it cannot).
std::string readFile(const std::string& path);

}  // namespace afd::tokenizer::testing
