import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { KIMI_PATTERN_ORIGINAL } from '../tokenizer/pattern.js';
import { parseRanks } from '../tokenizer/ranks.js';
import { TiktokenTokenizer } from '../tokenizer/tiktoken.js';
import { table } from './measure.js';

export interface TokenizerBenchResult {
  textBytes: number;
  tokens: number;
  /** Best of three, milliseconds. */
  loadMs: number;
  encodeMs: number;
  decodeMs: number;
  /** The tiktoken package (Rust → WebAssembly) on the same ranks, pattern and text. */
  peerEncodeMs: number;
  sameIds: boolean;
}

/**
 * Tokenizer speed on 1 MB of the multilingual test corpus with the cl100k_base ranks (100k ranks,
 * about Kimi's 160k) and Kimi's pattern, next to the tiktoken package doing the same work.
 */
export function benchTokenizer(): TokenizerBenchResult {
  const require = createRequire(import.meta.url);
  const { Tiktoken } = require('tiktoken') as typeof import('tiktoken');
  const { bpeRanks, rankFile } = cl100k();
  const corpus = fs.readFileSync(fileURLToPath(new URL('../../../test/fixtures/multilingual.txt', import.meta.url)), 'utf8');
  let text = corpus.repeat(Math.ceil(1e6 / Buffer.byteLength(corpus)));
  while (Buffer.byteLength(text) > 1e6) text = text.slice(0, text.length - 1000);
  // Kimi's tokenizer cuts texts longer than 400,000 characters where tiktoken does not, so both
  // encode the megabyte as the same pieces of about 200,000 characters, cut after a newline
  const pieces: string[] = [];
  for (let at = 0; at < text.length; ) {
    const nl = text.indexOf('\n', at + 200_000);
    const end = nl < 0 ? text.length : nl + 1;
    pieces.push(text.slice(at, end));
    at = end;
  }

  const best = (fn: () => void) => {
    let ms = Infinity;
    for (let i = 0; i < 3; i++) {
      const t0 = performance.now();
      fn();
      ms = Math.min(ms, performance.now() - t0);
    }
    return ms;
  };
  let tok!: TiktokenTokenizer;
  const loadMs = best(() => {
    tok = new TiktokenTokenizer(parseRanks(rankFile, 'cl100k'), [], 'cl100k');
  });
  let ids: number[] = [];
  const encodeMs = best(() => {
    ids = pieces.flatMap((p) => tok.encode(p));
  });
  const decodeMs = best(() => {
    tok.decode(ids);
  });
  const peer = new Tiktoken(bpeRanks, {}, KIMI_PATTERN_ORIGINAL);
  let peerIds: number[] = [];
  const peerEncodeMs = best(() => {
    peerIds = pieces.flatMap((p) => [...peer.encode_ordinary(p)]);
  });
  peer.free();
  const sameIds = peerIds.length === ids.length && ids.every((t, i) => t === peerIds[i]);
  return { textBytes: Buffer.byteLength(text), tokens: ids.length, loadMs, encodeMs, decodeMs, peerEncodeMs, sameIds };
}

/**
 * The cl100k_base ranks the tiktoken package ships (a devDependency): its compact
 * "! offset tok tok …" form, and the same ranks as a tiktoken.model file ("base64 rank" per line).
 */
export function cl100k(): { bpeRanks: string; rankFile: Uint8Array } {
  const require = createRequire(import.meta.url);
  const { bpe_ranks }: { bpe_ranks: string } = require('tiktoken/encoders/cl100k_base.json');
  const fields = bpe_ranks.split('\n')[0].split(' ');
  const offset = Number(fields[1]);
  return { bpeRanks: bpe_ranks, rankFile: Buffer.from(fields.slice(2).map((b64, i) => `${b64} ${offset + i}`).join('\n') + '\n') };
}

export function renderTokenizerBench(r: TokenizerBenchResult): string {
  return (
    `tokenizer: ${(r.textBytes / 1e6).toFixed(2)} MB multilingual text → ${r.tokens} tokens (cl100k ranks, Kimi's pattern)\n` +
    table(
      [
        ['load ranks', r.loadMs.toFixed(0), ''],
        ['encode', r.encodeMs.toFixed(0), `${(r.textBytes / 1e6 / (r.encodeMs / 1000)).toFixed(2)} MB/s`],
        ['decode', r.decodeMs.toFixed(0), `${(r.textBytes / 1e6 / (r.decodeMs / 1000)).toFixed(1)} MB/s`],
        ['tiktoken (WASM) encode', r.peerEncodeMs.toFixed(0), `${(r.textBytes / 1e6 / (r.peerEncodeMs / 1000)).toFixed(2)} MB/s`],
      ],
      ['', 'ms', 'rate'],
    ) +
    `encode time over tiktoken's: ${(r.encodeMs / r.peerEncodeMs).toFixed(2)}; identical ids: ${r.sameIds ? 'yes' : 'NO'}\n`
  );
}
