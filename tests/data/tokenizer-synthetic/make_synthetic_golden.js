#!/usr/bin/env node
// Writes golden.json beside this file: small made-up tokenizer.json files, each exercising one part of HF
// tokenizers' pipeline (Split behaviors, ByteLevel options, added-token flags, unknown tokens, byte fallback,
// ignore_merges, merges of both forms, merges that make the same token), with the ids and decodes HF tokenizers
// itself gives for a few strings (its Rust core through the official Node binding, npm package `tokenizers`;
// 0.23.2 made the committed file).
//
//   mkdir -p /tmp/hf-node && (cd /tmp/hf-node && npm install tokenizers@0.23.2)
//   NODE_PATH=/tmp/hf-node/node_modules node tests/data/tokenizer-synthetic/make_synthetic_golden.js
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

// GPT-2's byte-level alphabet: the character that shows each byte.
function byteChars() {
  const printable = [];
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b);
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b);
  for (let b = 0xae; b <= 0xff; b++) printable.push(b);
  const chars = new Array(256);
  let next = 0x100;
  for (let b = 0; b < 256; b++) chars[b] = printable.includes(b) ? String.fromCodePoint(b) : String.fromCodePoint(next++);
  return chars;
}
const BYTES = byteChars();
const show = (s) => Array.from(Buffer.from(s, 'utf8')).map((b) => BYTES[b]).join('');

// A byte-level vocabulary: the 256 byte characters, then the merges' results in order.
function byteLevelModel(merges, { pairForm = true, extra = {} } = {}) {
  const vocab = {};
  BYTES.forEach((c, b) => { vocab[c] = b; });
  const shown = merges.map(([a, b]) => [show(a), show(b)]);
  for (const [a, b] of shown) if (!(a + b in vocab)) vocab[a + b] = Object.keys(vocab).length;
  for (const [k, v] of Object.entries(extra)) vocab[k] = v;
  return {
    type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '',
    fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab,
    merges: pairForm ? shown : shown.map(([a, b]) => a + ' ' + b),
  };
}
const byteLevel = (add_prefix_space = false, use_regex = false) =>
  ({ type: 'ByteLevel', add_prefix_space, trim_offsets: false, use_regex });
const tokenizerJson = ({ model, normalizer = null, pre_tokenizer = byteLevel(), added_tokens = [] }) => ({
  version: '1.0', truncation: null, padding: null, added_tokens, normalizer, pre_tokenizer,
  post_processor: null, decoder: byteLevel(), model,
});
const added = (id, content, flags = {}) => ({
  id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: false, ...flags,
});

const WORD_MERGES = [['h', 'e'], ['l', 'l'], ['he', 'll'], ['hell', 'o'], [' ', 'w'], ['o', 'r'], [' w', 'or'],
                     ['l', 'd'], [' wor', 'ld'], ['1', '2'], ['12', '3']];
const TEXTS = ['hello world', 'hello  world 123', ' hello', 'say: 1234 12 3', 'a-b--c', '', ' ', 'héllo wörld 😀'];

const CASES = [];
const add = (name, json, texts = TEXTS) => CASES.push({ name, json, texts });

add('merges_pair_form', tokenizerJson({ model: byteLevelModel(WORD_MERGES, { pairForm: true }) }));
add('merges_string_form', tokenizerJson({ model: byteLevelModel(WORD_MERGES, { pairForm: false }) }));
add('gpt2_pre_tokenizer', tokenizerJson({ model: byteLevelModel(WORD_MERGES), pre_tokenizer: byteLevel(false, true) }));
add('gpt2_with_prefix_space', tokenizerJson({ model: byteLevelModel(WORD_MERGES), pre_tokenizer: byteLevel(true, true) }));
add('prefix_space_without_regex', tokenizerJson({ model: byteLevelModel(WORD_MERGES), pre_tokenizer: byteLevel(true, false) }));
// Merges across the delimiters, so that how pieces are joined shows in the ids.
const SPLIT_MERGES = [['a', '-'], ['-', 'b'], ['2', '-'], ['-', '3'], ['1', '2'], ['3', '4'], ['-', '-'], ['b', '-'],
                      [':', ' '], [' ', '1'], ['s', 'a']];
for (const behavior of ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous']) {
  for (const invert of [false, true]) {
    add(`split_regex_${behavior}${invert ? '_inverted' : ''}`, tokenizerJson({
      model: byteLevelModel(SPLIT_MERGES),
      pre_tokenizer: { type: 'Sequence', pretokenizers: [
        { type: 'Split', pattern: { Regex: '\\d+|-' }, behavior, invert }, byteLevel()] },
    }), ['say: 1234 12 3', 'a-b--c', '12-34', '-', 'no digits', '--12--', '1-2-3-4']);
  }
}
add('split_string_pattern', tokenizerJson({
  model: byteLevelModel(WORD_MERGES),
  pre_tokenizer: { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { String: '.*' }, behavior: 'Isolated', invert: false }, byteLevel()] },
}), ['a.*b.*', '.*.*', 'ab.c*d']);
add('split_regex_empty_matches', tokenizerJson({
  model: byteLevelModel(WORD_MERGES),
  pre_tokenizer: { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { Regex: 'x*' }, behavior: 'MergedWithNext', invert: false }, byteLevel()] },
}), ['axxbx', 'xx', 'abc', 'éxé']);
// Added tokens: flags, normalized content under NFKC, specials. Ids as HF gives them: after the 256 bytes and the
// 11 merges.
add('added_token_flags', tokenizerJson({
  model: byteLevelModel(WORD_MERGES),
  normalizer: { type: 'NFKC' },
  pre_tokenizer: { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { Regex: '\\s+|\\w+|[^\\s\\w]+' }, behavior: 'Isolated', invert: false }, byteLevel()] },
  added_tokens: [
    added(267, '<s>', { special: true }),
    added(268, '[L]', { lstrip: true }),
    added(269, '[R]', { rstrip: true }),
    added(270, 'word', { single_word: true, normalized: true }),
    added(271, 'ﬁx', { normalized: true }),
    added(272, '<s><s>', { special: true }),
    added(273, '[LR]', { lstrip: true, rstrip: true }),
  ],
}), ['a <s> b', 'a<s><s><s>b', 'x   [L]y', 'x[R]   y', 'a word b', 'awordb', 'word', 'swords word.', 'fix ﬁx',
     '  [LR]  [L]  ', '[R][R]  [L]', 'éword wordé']);
// A vocabulary that is not byte-level: characters, an unknown token, fusing, byte fallback, ignore_merges.
function charModel(options) {
  const vocab = { '<unk>': 0, a: 1, b: 2, c: 3, ab: 4, abc: 5, bc: 6 };
  for (let b = 0; b < 256; b++) vocab['<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>'] = 10 + b;
  return { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null,
           fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges: ['a b', 'ab c'], ...options };
}
const whitespaceSplit = { type: 'Split', pattern: { Regex: '\\s+' }, behavior: 'Removed', invert: false };
const charTexts = ['abc', 'abxyc', 'xyz a', 'aé', 'bc', 'cab', 'abcabc'];
add('unknown_tokens', tokenizerJson({ model: charModel({}), pre_tokenizer: whitespaceSplit }), charTexts);
add('unknown_tokens_fused', tokenizerJson({ model: charModel({ fuse_unk: true }), pre_tokenizer: whitespaceSplit }), charTexts);
add('byte_fallback', tokenizerJson({ model: charModel({ byte_fallback: true }), pre_tokenizer: whitespaceSplit }), charTexts);
add('ignore_merges', tokenizerJson({ model: charModel({ ignore_merges: true, merges: ['a b'] }),
                                    pre_tokenizer: whitespaceSplit }), charTexts);
// Two merges that make the same token (queued candidates of the same result stay valid).
add('merges_with_the_same_result', tokenizerJson({
  model: charModel({ merges: ['b c', 'a b', 'a bc', 'ab c'] }), pre_tokenizer: whitespaceSplit,
}), ['abc', 'abcbc', 'aabbcc', 'ababc']);

(async () => {
  const out = { tokenizers_version: require('tokenizers/package.json').version, cases: [] };
  for (const c of CASES) {
    const tok = Tokenizer.fromString(JSON.stringify(c.json));
    const results = [];
    for (const text of c.texts) {
      const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      results.push({ text, ids, decoded: await tok.decode(ids, false), decoded_skip_special: await tok.decode(ids, true) });
    }
    out.cases.push({ name: c.name, tokenizer: c.json, results });
  }
  fs.writeFileSync(path.join(__dirname, 'golden.json'), JSON.stringify(out) + '\n');
  console.log(`wrote ${out.cases.length} tokenizers`);
})();
