#!/usr/bin/env node
// Writes hf_golden.json beside this file: Qwen3 ids and decodes from HF tokenizers itself (its Rust core through
// the official Node binding, npm package `tokenizers`, 0.23.2 made the committed file), for strings golden.json
// does not cover (multilingual text, emoji sequences, whitespace runs, contractions, added tokens, NFC, long words),
// for id sequences that do not decode to whole characters, and for the renders of chat_golden.json.
//
//   mkdir -p /tmp/hf-node && (cd /tmp/hf-node && npm install tokenizers@0.23.2)
//   NODE_PATH=/tmp/hf-node/node_modules node tests/data/qwen3-tokenizer/make_hf_golden.js \
//       third_party/tokenizer/tokenizer.json
//
// Every encode uses addSpecialTokens false (what the engine's Tokenizer implements).
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const here = __dirname;
const tokenizerPath = process.argv[2] || path.join(here, '../../../third_party/tokenizer/tokenizer.json');
const tok = Tokenizer.fromFile(tokenizerPath);

const repeat = (s, n) => s.repeat(n);
const STRINGS = [
  // multilingual
  ['chinese', '人工智能正在改变世界，我们需要负责任地发展它。'],
  ['japanese_mixed_scripts', 'カタカナとひらがな、そして漢字。ｶﾀｶﾅ半角も。'],
  ['korean', '안녕하세요, 세계! 한국어 텍스트입니다.'],
  ['thai', 'สวัสดีครับ ภาษาไทยไม่มีช่องว่างระหว่างคำ'],
  ['hindi_combining_marks', 'नमस्ते दुनिया, यह हिन्दी है।'],
  ['arabic', 'مرحبا بالعالم! هذا نص عربي مع أرقام ١٢٣٤.'],
  ['hebrew', 'שלום עולם, זה טקסט בעברית.'],
  ['russian', 'Съешь же ещё этих мягких французских булок, да выпей чаю.'],
  ['greek', 'Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.'],
  ['vietnamese', 'Tiếng Việt có rất nhiều dấu: ắ ằ ẳ ẵ ặ.'],
  ['turkish_dotted_i', 'İstanbul ıspanak İİ ıı'],
  ['german', 'Straße, Größe, ÄÖÜäöüß'],
  ['mixed_scripts_no_spaces', 'abc日本語def한국어ghiРусский123'],
  // emoji
  ['emoji_zwj_family', 'family: 👨‍👩‍👧‍👦 and 👩🏽‍💻'],
  ['emoji_flags', 'flags 🇯🇵🇫🇷🇺🇸 🏴‍☠️'],
  ['emoji_skin_tones', '👍🏻👍🏼👍🏽👍🏾👍🏿'],
  ['emoji_keycaps_and_selectors', '1️⃣ #️⃣ ❤️ ❤︎ ☺️'],
  ['emoji_run', repeat('😀', 50)],
  ['emoji_between_letters', 'a😀b🎉c'],
  // whitespace
  ['two_spaces', 'a  b'],
  ['space_runs', 'a   b    c     d'],
  ['tabs_and_spaces', '\t\t x \t y\t'],
  ['newline_runs', 'x\n\n\ny\n\n\n\nz'],
  ['crlf_runs', 'a\r\n\r\n\r\nb\r\r\nc'],
  ['spaces_before_newline', 'line   \n   next'],
  ['only_spaces', '        '],
  ['only_newlines', '\n\n\n'],
  ['trailing_space_run', 'end     '],
  ['leading_space_run', '     start'],
  ['nbsp_and_ideographic_space', 'a\u00a0\u00a0b\u3000c'],
  ['next_line_u0085', 'x\u0085y \u0085\u0085 z'],
  ['mongolian_vowel_separator', 'x\u180ey \u180e\u180e z'],
  ['unicode_spaces', 'a\u2000b\u2003c\u2009d\u200ae\u202ff\u205fg'],
  ['line_and_paragraph_separators', 'a\u2028b\u2029c'],
  ['zero_width', 'a\u200bb\u200cc\u200dd\ufeffe'],
  ['vertical_tab_form_feed', 'a\u000bb\u000cc'],
  ['file_separators', 'a\u001cb\u001dc\u001ed\u001ff'],
  // contractions
  ['contractions_upper', "I'M YOU'RE WE'VE THEY'LL HE'D IT'S DON'T"],
  ['contractions_mixed_case', "I'm It'S You'Re we'Ll"],
  ['contraction_long_s', "it'ſ"],
  ['curly_apostrophes', 'don’t can’t it’s'],
  ['quote_runs', "''s '''t 's's"],
  ['contraction_at_start', "'s 've 'd 'm"],
  ['rock_n_roll', "rock'n'roll o'clock"],
  // numbers
  ['digits_long', '12345678901234567890'],
  ['digits_other_scripts', '٣٤٥ ۷۸۹ १२३ ໑໒'],
  ['number_letters_and_fractions', 'Ⅷ ⅻ ½ ① ²³'],
  ['decimal_and_signs', '-3.14e-10 +2,500.00 0x1F'],
  // code
  ['python', 'def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n'],
  ['cpp', 'template <typename T>\nT max(T a, T b) { return a > b ? a : b; }  // max\n'],
  ['json', '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}'],
  ['html', '<div class="x"><p>Hello &amp; welcome</p></div>'],
  ['regex', '^(?:[a-z0-9!#$%&\'*+/=?^_`{|}~-]+)$'],
  ['windows_path', 'C:\\Users\\name\\file.txt'],
  ['shell', 'ls -la | grep "*.cpp" && echo $HOME > /dev/null 2>&1'],
  ['markdown', '# Title\n\n- item **bold** _it_\n\n```cpp\nint x;\n```'],
  ['indented_code_mixed', '\tif (x) {\n\t\ty();\n\t}\n    z();'],
  // added and special tokens
  ['chat_markup', '<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n'],
  ['special_glued_to_text', 'a<|im_end|>b<|endoftext|>c'],
  ['special_between_spaces', ' <|im_start|> x <|im_end|> '],
  ['special_twice', '<|im_start|><|im_start|><|im_end|>'],
  ['special_partial', '<|im_start <|im_end| <|endoftext'],
  ['special_nested_brackets', '<<|im_start|>>'],
  ['think_block', '<think>\nstep 1\nstep 2\n</think>\n\nanswer'],
  ['tool_call_markup', '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'],
  ['tool_response_markup', '<tool_response>\nresult\n</tool_response>'],
  ['fim_tokens', '<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>'],
  ['vision_tokens', '<|vision_start|><|image_pad|><|image_pad|><|vision_end|>'],
  ['all_special_content', '<|object_ref_start|>x<|object_ref_end|><|box_start|>(1,2)<|box_end|><|quad_start|><|quad_end|><|video_pad|><|vision_pad|><|fim_pad|><|repo_name|>r<|file_sep|>'],
  ['combining_after_special', '<|im_end|>\u0301x'],
  // normalization
  ['nfd_latin', 'Cafe\u0301 re\u0301sume\u0301 A\u030angstro\u0308m'],
  ['hangul_jamo', '\u1100\u1161\u11a8 \u1112\u1161\u11ab'],
  ['singletons', 'K\u212a \u2126 \u212b \u2000 \u2001 \u0340\u0341'],
  ['compatibility_left_alone', 'ﬁ ﬂ ① ㈱ ｶ ²'],
  ['combining_sequence_order', 'a\u0316\u0301 a\u0301\u0316'],
  ['isolated_combining_marks', '\u0301\u0302 x'],
  // control and edge characters
  ['nul_and_controls', 'a\u0000b\u0001\u0002c\u007fd'],
  ['private_use_and_noncharacters', '\ue000\uf8ff\ufdd0\ufffe\uffff'],
  ['astral_edges', '\u{10000}\u{1f600}\u{10ffff}\u{e0001}'],
  ['replacement_character', 'x\ufffdy'],
  // long
  ['long_word', repeat('a', 1000)],
  ['long_pairs', repeat('ab', 500)],
  ['long_spaces', repeat(' ', 300)],
  ['long_newlines', repeat('\n', 100)],
  ['long_cjk', repeat('中文字符', 100)],
  ['long_url', 'https://example.com/' + repeat('path/', 50) + '?q=' + repeat('x', 100)],
  ['base64_blob', 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=='],
  ['hex_dump', '00 01 02 03 de ad be ef ff fe'],
  ['punctuation_runs', '!!!??? ... --- *** ;;; ::: ,,,'],
  ['punctuation_then_newlines', 'end.\n\n\nNext!\r\n'],
  ['mixed_everything', 'Hello 世界! 😀 It\'s 3.14… \t<think>ok</think>\n\n   '],
  ['single_chars', 'a b c 1 2 3 . , ; 中 😀'],
];

// Token strings (byte-level alphabet) whose bytes do not make whole characters on their own.
const byId = (token) => {
  const id = tok.tokenToId(token);
  if (id === null || id === undefined) throw new Error('no token ' + token);
  return id;
};
const DECODES = [
  ['lone_lead_byte', [byId('ä')]],                                // E4
  ['lead_and_continuation', [byId('ä'), byId('½')]],              // E4 BD
  ['complete_cjk_from_bytes', [byId('ä'), byId('½'), byId('ł')]], // E4 BD A0
  ['lone_continuation', [byId('½')]],                             // BD
  ['overlong_lead', [byId('À'), byId('¯')]],                    // C0 AF
  ['invalid_byte_ff', [byId('ÿ')]],                               // FF
  ['surrogate_bytes', [byId('í'), byId('ł'), byId('Ģ')]],         // ED A0 80
  ['four_byte_lead_then_ascii', [byId('ð'), byId('Ł'), 9707]],    // F0 9F then "Hello"
  ['special_between_broken_bytes', [byId('ä'), 151645, byId('½'), byId('ł')]],
  ['specials_only', [151644, 151645, 151643]],
  ['added_not_special', [151667, 151668, 151657, 151658]],
  ['unknown_ids_skipped', [9707, 151669, 151935, 1879]],
  ['empty', []],
];

(async () => {
  const out = { tokenizers_version: require('tokenizers/package.json').version, encode: [], decode: [], chat: [] };
  for (const [name, text] of STRINGS) {
    const enc = await tok.encode(text, null, { addSpecialTokens: false });
    const ids = enc.getIds();
    out.encode.push({
      name, text, ids,
      decoded: await tok.decode(ids, false),
      decoded_skip_special: await tok.decode(ids, true),
    });
  }
  for (const [name, ids] of DECODES) {
    out.decode.push({ name, ids, decoded: await tok.decode(ids, false), decoded_skip_special: await tok.decode(ids, true) });
  }
  const chats = JSON.parse(fs.readFileSync(path.join(here, 'chat_golden.json'), 'utf8'));
  for (const c of chats) {
    const enc = await tok.encode(c.rendered, null, { addSpecialTokens: false });
    out.chat.push({ name: c.name, ids: enc.getIds() });
  }
  fs.writeFileSync(path.join(here, 'hf_golden.json'), JSON.stringify(out, null, 0).replace(/\},\{/g, '},\n{') + '\n');
  console.log(`wrote ${out.encode.length} encodes, ${out.decode.length} decodes, ${out.chat.length} chats`);
})();
