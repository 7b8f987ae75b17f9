import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import { type CheckpointOptions, writeSyntheticCheckpoint } from '../src/synth/checkpoint.js';
import { synthShapes, writeSyntheticContainer, type SynthOptions } from '../src/synth/synth.js';
import { k3Specials } from '../src/model/kimi/synth.js';
import { synthVocabulary } from '../src/synth/tokenizer.js';
import { parseRanks, rankFileText } from '../src/tokenizer/ranks.js';
import { TiktokenTokenizer } from '../src/tokenizer/tiktoken.js';
import { WasmKernels } from '../src/kernels/wasm/index.js';
import type { Arena } from '../src/memory/arena.js';
import { Rng } from '../src/util/prng.js';

/** The repository root (tests run from dist/test/). */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const BIN = path.join(ROOT, 'bin', 'waste.js');

const base = fs.mkdtempSync(path.join(os.tmpdir(), 'waste-test-'));
process.on('exit', () => fs.rmSync(base, { recursive: true, force: true }));

let counter = 0;
/** A fresh empty directory, removed when the test process exits. */
export function tmpDir(label = 'd'): string {
  const d = path.join(base, `${label}-${counter++}`);
  fs.mkdirSync(d);
  return d;
}

/** The files under `dir` this process (any of its threads) holds open, from /proc/self/fd. */
export function openFilesUnder(dir: string): string[] {
  const open: string[] = [];
  // Linux's view of the descriptors; elsewhere there is none to read, and nothing is checked
  if (!fs.existsSync('/proc/self/fd')) return open;
  for (const fd of fs.readdirSync('/proc/self/fd')) {
    let target: string;
    try {
      target = fs.readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      continue; // the descriptor of the listing itself, closed by now
    }
    if (target === dir || target.startsWith(dir + path.sep)) open.push(target);
  }
  return open.sort();
}

/** A synthetic container in a fresh directory. */
export function synth(opts: SynthOptions = {}, label = 'model'): string {
  const dir = tmpDir(label);
  writeSyntheticContainer(dir, opts);
  return dir;
}

/** A synthetic HuggingFace checkpoint in a fresh directory. */
export function checkpoint(opts: CheckpointOptions = {}, label = 'checkpoint'): string {
  const dir = tmpDir(label);
  writeSyntheticCheckpoint(dir, opts);
  return dir;
}

/** The directory a golden case runs on: its container or its checkpoint, written fresh. */
export function goldenDir(c: { name: string; synth?: SynthOptions; checkpoint?: CheckpointOptions }): string {
  return c.checkpoint ? checkpoint(c.checkpoint, c.name) : synth(c.synth, c.name);
}

/** Copy a container so a test can damage it. */
export function copyContainer(src: string): string {
  const dst = tmpDir('copy');
  for (const f of fs.readdirSync(src)) fs.copyFileSync(path.join(src, f), path.join(dst, f));
  return dst;
}

/** sha256 over every file of a container, in name order. */
export function containerDigest(dir: string): string {
  const h = crypto.createHash('sha256');
  for (const f of fs.readdirSync(dir).sort()) {
    h.update(f);
    h.update(fs.readFileSync(path.join(dir, f)));
  }
  return h.digest('hex');
}

export function readF32(file: string): Float32Array {
  const b = fs.readFileSync(file);
  return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
}

/** max |a − b| / max |b|, the agreement measure used against every reference. */
export function relErr(a: Float32Array, ref: Float32Array): number {
  if (a.length !== ref.length) throw new Error(`length ${a.length} vs ${ref.length}`);
  let d = 0;
  let m = 0;
  for (let i = 0; i < ref.length; i++) {
    d = Math.max(d, Math.abs(a[i] - ref[i]));
    m = Math.max(m, Math.abs(ref[i]));
  }
  return d === 0 ? 0 : d / m;
}

export function sameBits(a: Float32Array, b: Float32Array): boolean {
  if (a.length !== b.length) return false;
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
  return true;
}

/** The tokenizer `synth --shape k3-tiny` writes (1024 ids, K3's 256 specials at the top), without writing a container. */
export function k3Tokenizer(): TiktokenTokenizer {
  const voc = synthVocabulary(1024, k3Specials());
  return new TiktokenTokenizer(parseRanks(new TextEncoder().encode(rankFileText(voc.ranks)), 'k3-tiny'), voc.specials, 'k3-tiny', 1024);
}

/** A deterministic picture with structure in both directions (8-bit RGB [height][width][3]). */
export function testPicture(width: number, height: number, seed = 1): { width: number; height: number; rgb: Uint8Array } {
  const rgb = new Uint8Array(width * height * 3);
  for (let y = 0; y < height; y++)
    for (let x = 0; x < width; x++)
      for (let c = 0; c < 3; c++) rgb[(y * width + x) * 3 + c] = (x * (3 + c) + y * (5 + seed) + ((x * y) >> 4) * (c + 1) + seed * 17) & 255;
  return { width, height, rgb };
}

/**
 * A seed for fresh random inputs every run: printed under `label`, so a failure can be replayed
 * with WASTE_TEST_SEED=N.
 */
export function testSeed(label: string): number {
  const s = process.env.WASTE_TEST_SEED;
  let seed: number;
  if (s === undefined || s === '') seed = new Rng(Date.now() >>> 0).u32();
  else if (!/^\d+$/.test(s) || Number(s) > 0xffffffff) throw new Error(`WASTE_TEST_SEED must be an integer in 0..4294967295 (got ${s})`);
  else seed = Number(s);
  console.log(`${label}: random inputs from seed ${seed} (replay with WASTE_TEST_SEED=${seed})`);
  return seed;
}

/** WebAssembly kernels on 1, 2 and 3 threads over `arena`, made before the file's tests and closed after. */
export function kernelsOn1To3Threads(arena: Arena): { w1: WasmKernels; w2: WasmKernels; w3: WasmKernels } {
  const k = {} as { w1: WasmKernels; w2: WasmKernels; w3: WasmKernels };
  before(async () => {
    k.w1 = await WasmKernels.create(1, [arena]);
    // every call split over the helpers, however small, so the tests' small inputs cross the pool
    k.w2 = await WasmKernels.create(2, [arena], { splitAll: true });
    k.w3 = await WasmKernels.create(3, [arena], { splitAll: true });
  });
  after(async () => {
    await Promise.all([k.w1.close(), k.w2.close(), k.w3.close()]);
  });
  return k;
}

/** The small synthetic shape of every family beyond Kimi (its `*-tiny`), for the tests every family must pass. */
export function familyTinyShapes(): string[] {
  return synthShapes()
    .filter((f) => !f.families.some((a) => a.startsWith('kimi')))
    .flatMap((f) => f.shapes.filter((s) => s.endsWith('-tiny')));
}
