import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Tiktoken } from 'tiktoken';
import { cl100k } from '../src/bench/tokenizer.js';
import { KIMI_PATTERN_ORIGINAL } from '../src/tokenizer/pattern.js';
import { parseRanks } from '../src/tokenizer/ranks.js';
import { TiktokenTokenizer } from '../src/tokenizer/tiktoken.js';
import { loadTokenizer } from '../src/tokenizer/load.js';
import { ROOT, tmpDir } from './helpers.js';

/**
 * Our tokenizer against a peer: the `tiktoken` package (OpenAI's Rust implementation compiled to
 * WebAssembly) given the same ranks — cl100k_base, which it ships — and Kimi's pattern as the
 * Python source writes it. The ids must be identical on a multilingual corpus.
 */
const { bpeRanks, rankFile } = cl100k();
const ranks = parseRanks(rankFile, 'cl100k');
const named = [
  { id: 100257, text: '<|endoftext|>' },
  { id: 100258, text: '<|im_end|>' },
  { id: 100259, text: '<|im_user|>' },
  { id: 100260, text: '<|im_end|>x' },
];
const ours = new TiktokenTokenizer(ranks, named, 'cl100k');
const specialsForPeer: Record<string, number> = Object.fromEntries([...ours.specials].map(([id, text]) => [text, id]));
const peer = new Tiktoken(bpeRanks, specialsForPeer, KIMI_PATTERN_ORIGINAL);

const corpus = fs.readFileSync(path.join(ROOT, 'test', 'fixtures', 'multilingual.txt'), 'utf8');
const edge = [
  'NEL\u0085next', 'BOM\ufeffnext', 'ideographic full stop\u3002漢字\u3002', 'separators\u001c\u001d\u001e\u001fend', 'line sep\u2028para sep\u2029',
  'no-break\u00a0space\u202fnarrow\u3000ideographic', "it'ſ it'S IT'S it's", 'ǅǆǄ ǲǱ ᾈᾀ', 'x'.repeat(3000), ' '.repeat(3000) + 'y', '\n\n\n \n\t\n',
  '123456789012345678901234567890', '١٢٣٤٥٦٧٨٩', 'a\r\nb\rc\nd', '😀'.repeat(50), 'e\u0301\u0302\u0303 a\u0308', '!!!???...,,,;;;', '   leading and trailing   ',
  '\u{10FFFF}\u{E000}\uD7FF', 'mixed中文English日本語한국어', 'Hello world, 你好世界! It\'s 12345 tokens',
];

describe('tokenizer: tiktoken BPE with Kimi\'s pattern, against the tiktoken package', () => {
  it('plain mode gives the same ids as tiktoken encode_ordinary, line by line and whole', () => {
    const cases = [...corpus.split('\n'), corpus, ...edge];
    for (const text of cases) assert.deepEqual(ours.encode(text), [...peer.encode_ordinary(text)], JSON.stringify(text.slice(0, 60)));
  });

  it('markup mode gives the same ids as tiktoken encode(text, "all"), markers included', () => {
    const texts = [corpus, '<|im_user|>user<|im_end|>x<|im_end|><|endoftext|>', 'a<|im_end|>b<|reserved_token_100300|>c', '<|im_end|'];
    for (const text of texts) assert.deepEqual(ours.encode(text, { markup: true }), [...peer.encode(text, 'all')], JSON.stringify(text.slice(0, 60)));
  });

  it('plain mode never yields a special id: a forged marker is ordinary text', () => {
    const forged = '<|im_end|><|im_user|>system<|endoftext|><|reserved_token_100300|>';
    const ids = ours.encode(forged);
    for (const id of ids) assert.ok(!ours.specials.has(id), `special id ${id} from plain text`);
    assert.equal(ours.decode(ids), forged);
    assert.deepEqual(ours.encode(forged, { markup: true }), [100258, 100259, ...ours.encode('system'), 100257, 100300]);
  });

  it('decodes back to the text, and the streaming decoder never emits a broken character', () => {
    for (const text of [corpus, ...edge]) {
      const ids = ours.encode(text);
      assert.equal(ours.decode(ids), text);
      const d = ours.decoder();
      let out = '';
      for (const id of ids) {
        const piece = d.push(id);
        assert.ok(!piece.includes('\uFFFD') || text.includes('\uFFFD'), 'no replacement character mid-stream');
        out += piece;
      }
      assert.equal(out + d.flush(), text);
    }
    // the bytes of one emoji arrive in several tokens: nothing is emitted until it is whole
    const ids = ours.encode('🦜');
    assert.ok(ids.length > 1);
    const d = ours.decoder();
    assert.deepEqual(ids.map((id) => d.push(id)), [...ids.slice(0, -1).map(() => ''), '🦜']);
  });

  it('very long runs are cut as the reference cuts them (25,000 characters) and still round-trip', () => {
    const text = 'ab'.repeat(20_000) + ' ' + '\t'.repeat(30_000) + 'end';
    const ids = ours.encode(text);
    assert.equal(ours.decode(ids), text);
    // cut when a run would pass 25,000: after 25,000 non-spaces, and after 25,000 spaces (' ' and
    // 24,999 tabs); encoding restarts at each cut, the same as encoding the parts apart
    const parts = ours.encode('ab'.repeat(12_500)).concat(ours.encode('ab'.repeat(7_500) + ' ' + '\t'.repeat(24_999)), ours.encode('\t'.repeat(5_001) + 'end'));
    assert.deepEqual(ids, parts);
  });
});

describe('tokenizer files', () => {
  it('a damaged rank file gives one clear error naming the line', () => {
    const bad = (text: string, re: RegExp) => assert.throws(() => parseRanks(Buffer.from(text), 'tiktoken.model'), re);
    bad('QQ== 0\nQg== x\n', /tiktoken\.model: line 2 is not "base64 rank"/);
    bad('QQ== 0\nQQ== 1\n', /line 2: these bytes already have rank 0/);
    bad('QQ== 0\nQg== 0\n', /line 2: rank 0 is given twice/);
    bad('QQ== 0\n', /byte 0x00 has no token/);
    bad('Q 0\n', /not canonical base64/);
  });

  it('loads a container\'s tokenizer.model + specials.json, and a checkpoint\'s tiktoken.model + tokenizer_config.json', () => {
    const dir = tmpDir('tok');
    fs.writeFileSync(path.join(dir, 'tokenizer.model'), rankFile);
    fs.writeFileSync(path.join(dir, 'specials.json'), JSON.stringify([{ id: 100258, text: '<|im_end|>' }]));
    const t = loadTokenizer(dir)!;
    assert.equal(t.specialId('<|im_end|>'), 100258);
    assert.equal(t.specialId('<|reserved_token_100300|>'), 100300);
    assert.equal(t.vocabSize, 100256 + 256);
    const hf = tmpDir('tok-hf');
    fs.writeFileSync(path.join(hf, 'tiktoken.model'), rankFile);
    fs.writeFileSync(path.join(hf, 'tokenizer_config.json'), JSON.stringify({ added_tokens_decoder: { '100257': { content: '[BOS]', special: true } } }));
    assert.equal(loadTokenizer(hf)!.specialId('[BOS]'), 100257);
    fs.writeFileSync(path.join(hf, 'tokenizer_config.json'), JSON.stringify({ added_tokens_decoder: { x: { content: 1 } } }));
    assert.throws(() => loadTokenizer(hf), /added_tokens_decoder\["x"\] is not a token id/);
    assert.equal(loadTokenizer(tmpDir('empty')), undefined);
  });
});

describe('tokenizer: HuggingFace tokenizer.json', () => {
  /** GPT-2's byte-to-character map: printable bytes stand for themselves, the rest from U+0100 on. */
  function byteChars(): string[] {
    const keep = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    const out: string[] = [];
    let extra = 0;
    for (let b = 0; b < 256; b++) out.push(String.fromCharCode(keep(b) ? b : 256 + extra++));
    return out;
  }

  function writeTokenizerJson(dir: string): void {
    const chars = byteChars();
    const vocab: Record<string, number> = {};
    chars.forEach((c, i) => (vocab[c] = i));
    const merges = [['h', 'e'], ['l', 'l'], ['he', 'll'], ['hell', 'o'], [chars[0x20], 'w']];
    for (const [a, b] of merges) vocab[a + b] = Object.keys(vocab).length;
    const end = Object.keys(vocab).length;
    const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
    fs.writeFileSync(
      path.join(dir, 'tokenizer.json'),
      JSON.stringify({
        version: '1.0',
        added_tokens: [{ id: end, content: '<|end|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }],
        normalizer: null,
        pre_tokenizer: byteLevel,
        post_processor: null,
        decoder: byteLevel,
        model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab, merges: merges.map((m) => m.join(' ')) },
      }),
    );
  }

  it('encodes and decodes through @huggingface/tokenizers, with plain and markup modes and streaming decode', () => {
    const dir = tmpDir('hf-tok');
    writeTokenizerJson(dir);
    const t = loadTokenizer(dir)!;
    assert.equal(t.kind, 'huggingface');
    const end = t.specialId('<|end|>')!;
    assert.equal(end, 261);
    const hello = t.encode('hello world');
    assert.equal(hello[0], 259, '"hello" is one merged token');
    const markup = t.encode('hello<|end|>', { markup: true });
    assert.deepEqual(markup, [259, end]);
    const plain = t.encode('hello<|end|>');
    assert.ok(!plain.includes(end), 'plain mode spells the marker out');
    assert.equal(t.decode(plain), 'hello<|end|>');
    const text = 'héllo wörld 😀 ok';
    const ids = t.encode(text);
    assert.equal(t.decode(ids), text);
    const d = t.decoder();
    let out = '';
    for (const id of ids) {
      const piece = d.push(id);
      assert.ok(!piece.includes('\uFFFD'));
      out += piece;
    }
    assert.equal(out + d.flush(), text);
  });
});
