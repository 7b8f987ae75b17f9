import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { loadTokenizer } from '../src/tokenizer/load.js';
import { kimiPattern } from '../src/tokenizer/pattern.js';
import { parseRanks, rankFileText } from '../src/tokenizer/ranks.js';
import { TiktokenTokenizer } from '../src/tokenizer/tiktoken.js';
import { trainBpe } from '../src/tokenizer/train.js';
import { tmpDir } from './helpers.js';

/**
 * BPE training on a small fixed corpus: sentences drawn by a fixed generator from a word list with
 * Zipf-like weights (so some words are clearly frequent), plus a few lines in other scripts so that
 * multi-byte merges are learned too.
 */
function corpus(): string[] {
  const words = ['the', 'whale', 'ship', 'of', 'and', 'sea', 'captain', 'Congress', 'people', 'nation', 'harpoon', 'years', 'treaty', 'boat', 'white'];
  let seed = 12345;
  const next = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0);
  const docs: string[] = [];
  for (let d = 0; d < 6; d++) {
    const sentences: string[] = [];
    for (let s = 0; s < 40; s++) {
      const n = 4 + (next() % 8);
      const ws: string[] = [];
      for (let i = 0; i < n; i++) ws.push(words[Math.floor(words.length * ((next() % 1000) / 1000) ** 2)]);
      sentences.push(ws.join(' ').replace(/^./, (c) => c.toUpperCase()) + (next() % 5 ? '.' : ', 1851!'));
    }
    docs.push(sentences.join(' ') + '\n白鲸记 是 一部 小说。Моби Дик — роман. 🐋🐋 ¡Ballena blanca!');
  }
  return docs;
}

/** The definition, done slowly: recount every pair after every merge. */
function naiveBpe(texts: string[], ranks: number): Uint8Array[] {
  const counts = new Map<string, number>();
  for (const t of texts) for (const m of t.matchAll(kimiPattern())) counts.set(m[0], (counts.get(m[0]) ?? 0) + 1);
  const words = [...counts].map(([w, n]) => ({ syms: [...Buffer.from(w, 'utf8')], n }));
  const tokens: Uint8Array[] = [];
  for (let b = 0; b < 256; b++) tokens.push(Uint8Array.of(b));
  while (tokens.length < ranks) {
    const pairs = new Map<string, { a: number; b: number; n: number }>();
    for (const w of words)
      for (let i = 0; i + 1 < w.syms.length; i++) {
        const k = `${w.syms[i]},${w.syms[i + 1]}`;
        const e = pairs.get(k) ?? { a: w.syms[i], b: w.syms[i + 1], n: 0 };
        e.n += w.n;
        pairs.set(k, e);
      }
    const best = [...pairs.values()].sort((x, y) => y.n - x.n || x.a - y.a || x.b - y.b)[0];
    if (!best) break;
    const bytes = Buffer.concat([tokens[best.a], tokens[best.b]]);
    let c = tokens.findIndex((t) => Buffer.from(t).equals(bytes));
    if (c < 0) c = tokens.push(new Uint8Array(bytes)) - 1;
    for (const w of words) {
      const out: number[] = [];
      for (let i = 0; i < w.syms.length; i++)
        if (w.syms[i] === best.a && w.syms[i + 1] === best.b) {
          out.push(c);
          i++;
        } else out.push(w.syms[i]);
      w.syms = out;
    }
  }
  return tokens;
}

const texts = corpus();
const trained = trainBpe(texts, { ranks: 400 });
const tokenizer = new TiktokenTokenizer(parseRanks(Buffer.from(rankFileText(trained)), 'trained'), [], 'trained');
const str = (b: Uint8Array) => Buffer.from(b).toString('utf8');

describe('BPE training', () => {
  it('starts with the 256 single bytes in byte order, and never gives two ranks the same bytes', () => {
    assert.equal(trained.length, 400);
    for (let b = 0; b < 256; b++) assert.deepEqual([...trained[b]], [b]);
    assert.equal(new Set(trained.map((t) => Buffer.from(t).toString('latin1'))).size, trained.length);
  });

  it('is deterministic: the same texts, in any order, give the same ranks', () => {
    assert.deepEqual(trainBpe(texts, { ranks: 400 }), trained);
    assert.deepEqual(trainBpe([...texts].reverse(), { ranks: 400 }), trained);
  });

  it('learns the same merges as the slow definition (most frequent pair, lowest ranks on a tie)', () => {
    const slow = naiveBpe(texts, 400);
    assert.deepEqual(trained.map(str), slow.map(str));
    // the first merge on its own: spaces before lower-case words make " t"/"he"-like pairs common
    assert.equal(str(trained[256]), str(slow[256]));
  });

  it('rank files round-trip through parseRanks, and encoding round-trips any text', () => {
    const parsed = parseRanks(Buffer.from(rankFileText(trained)), 'trained');
    assert.equal(parsed.size, 400);
    trained.forEach((t, i) => assert.deepEqual(parsed.bytes[i], t));
    const samples = [...texts, 'Unseen words: zebra quokka', '日本語のテキスト、한국어 텍스트', 'emoji 🦜👩‍👩‍👧 flags 🇯🇵', 'tabs\tand\r\nnewlines\n\n', 'ǅ e\u0301 \u{10FFFF}', ''];
    for (const s of samples) assert.equal(tokenizer.decode(tokenizer.encode(s)), s);
  });

  it('makes the corpus\'s frequent words single tokens when encoding', () => {
    for (const w of [' the', ' whale', ' of', ' and', ' sea', ' ship']) assert.equal(tokenizer.encode(w).length, 1, JSON.stringify(w));
    // and encodes the corpus in far fewer tokens than bytes
    const all = texts.join('\n');
    assert.ok(tokenizer.encode(all).length * 3 < Buffer.byteLength(all));
  });

  it('stops early when the text runs out of pairs, reports progress, and refuses fewer than 256 ranks', () => {
    const seen: [number, number][] = [];
    const few = trainBpe(['ab ab ab'], { ranks: 300, onProgress: (d, t) => seen.push([d, t]) });
    assert.deepEqual(few.slice(256).map(str), ['ab', ' ab']);
    assert.deepEqual(seen.at(-1), [258, 300]);
    assert.equal(trainBpe([], { ranks: 256 }).length, 256);
    assert.throws(() => trainBpe(texts, { ranks: 255 }), /at least 256 ranks/);
    assert.throws(() => trainBpe(texts, { ranks: 300.5 }), /at least 256 ranks/);
  });

  it('a folder with the rank file and tokenizer_config.json loads with its specials after the ranks', () => {
    const dir = tmpDir('bpe');
    fs.writeFileSync(path.join(dir, 'tiktoken.model'), rankFileText(trained));
    fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify({ added_tokens_decoder: { '400': { content: '[EOS]', special: true } } }));
    const t = loadTokenizer(dir)!;
    assert.equal(t.specialId('[EOS]'), 400);
    assert.deepEqual(t.encode('the whale[EOS]', { markup: true }).at(-1), 400);
    assert.deepEqual(t.encode(texts[0]), tokenizer.encode(texts[0]));
  });
});
