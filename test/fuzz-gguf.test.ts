/**
 * Damaged GGUF headers, each read in a child process under the watchdog (test/fuzz-harness.ts) and
 * classified: a clean error, a header accepted with every value within the reader's invariants
 * (test/fuzz-gguf-case.ts), or a failure — an accepted header that breaks one, a crash, a hang,
 * runaway memory. Seeded mutations of valid files from src/gguf/write.ts: flipped bits and bytes,
 * truncations, counts, lengths, offsets and type numbers that lie, bytes inserted and removed.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, describe, it } from 'node:test';
import { GGML_TYPES } from '../src/gguf/ggml-types.js';
import type { GgufValue } from '../src/gguf/values.js';
import { encodeGguf, type GgufFileSpec } from '../src/gguf/write.js';
import { Rng } from '../src/util/prng.js';
import { Tally, Watchdog } from './fuzz-harness.js';
import { tmpDir } from './helpers.js';

const str = (value: string): GgufValue => ({ type: 'string', value });

/** Valid files to damage: a small model's header with every value type, version 2 with a wider alignment, every tensor type, no tensors. */
function specimens(): [string, Uint8Array, number][] {
  const rng = new Rng(3);
  const metadata: [string, GgufValue][] = [
    ['general.architecture', str('llama')],
    ['general.name', str('fuzz ünï 模型')],
    ['llama.block_count', { type: 'u32', value: 2 }],
    ['llama.context_length', { type: 'u64', value: 4096n }],
    ['llama.rope.freq_base', { type: 'f32', value: 10000 }],
    ['llama.use_parallel_residual', { type: 'bool', value: false }],
    ['test.i64', { type: 'i64', value: -7n }],
    ['test.f64', { type: 'f64', value: 0.125 }],
    ['tokenizer.ggml.tokens', { type: 'array', value: { of: 'string', values: Array.from({ length: 40 }, (_, i) => `t${i}`) } }],
    ['tokenizer.ggml.scores', { type: 'array', value: { of: 'f32', values: Float32Array.from({ length: 40 }, (_, i) => -i) } }],
    ['tokenizer.ggml.token_type', { type: 'array', value: { of: 'i32', values: new Int32Array(40).fill(1) } }],
    ['test.nested', { type: 'array', value: { of: 'array', values: [{ of: 'u16', values: Uint16Array.from([1, 2, 3]) }, { of: 'bool', values: [true] }] } }],
  ];
  const tensors = [
    { name: 'token_embd.weight', dims: [64, 40], type: 'Q8_0' },
    { name: 'blk.0.attn_q.weight', dims: [256, 2], type: 'Q4_K' },
    { name: 'blk.0.attn_norm.weight', dims: [64], type: 'F32' },
    { name: 'blk.0.ffn_gate_exps.weight', dims: [64, 2, 3], type: 'MXFP4' },
    { name: 'output.weight', dims: [64, 40], type: 'F16' },
  ];
  const every = [...GGML_TYPES.values()].map((t, i) => ({ name: `t.${i}.${t.name}`, dims: [t.blockElements * (1 + rng.int(2)), 1 + rng.int(2)], type: t.id }));
  const specs: [string, GgufFileSpec][] = [
    ['model v3', { metadata, tensors }],
    ['model v2, alignment 64', { version: 2, alignment: 64, metadata, tensors }],
    ['every tensor type', { metadata: metadata.slice(0, 2), tensors: every }],
    ['no tensors', { metadata }],
  ];
  // with where the tensor data starts: the mutations aim at the header before it
  return specs.map(([label, spec]) => [label, encodeGguf(spec), encodeGguf({ ...spec, headerOnly: true }).length]);
}

type Mutation = (b: Uint8Array, rng: Rng, header: number) => { bytes: Uint8Array; what: string };

/** Somewhere in the header most of the time, anywhere else now and then. */
const where = (rng: Rng, b: Uint8Array, header: number): number => (rng.int(5) === 0 ? rng.int(b.length) : rng.int(Math.max(1, header)));

const LIES_64 = [0n, 1n, 2n, 7n, 8n, 31n, 32n, 33n, 64n, 255n, 4096n, 2n ** 31n, 2n ** 32n - 1n, 2n ** 32n, 2n ** 53n, 2n ** 63n, 2n ** 64n - 1n];
const LIES_32 = [0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 24, 31, 36, 39, 41, 42, 99, 2 ** 31, 2 ** 32 - 1];

const flips: Mutation = (b, rng, header) => {
  const what: string[] = [];
  for (let k = 1 + rng.int(4); k > 0; k--) {
    const at = where(rng, b, header);
    b[at] = rng.int(2) ? b[at] ^ (1 << rng.int(8)) : rng.int(256);
    what.push(`byte ${at} = ${b[at]}`);
  }
  return { bytes: b, what: what.join(', ') };
};

const truncation: Mutation = (b, rng, header) => {
  const n = rng.int(3) === 0 ? rng.int(b.length) : rng.int(header + 8);
  return { bytes: b.subarray(0, n), what: `cut to ${n} of ${b.length} bytes` };
};

const lying64: Mutation = (b, rng, header) => {
  const at = Math.min(b.length - 8, where(rng, b, header));
  const v = rng.int(3) === 0 ? (BigInt(rng.u32()) << 32n) | BigInt(rng.u32()) : LIES_64[rng.int(LIES_64.length)];
  new DataView(b.buffer, b.byteOffset).setBigUint64(at, v, true);
  return { bytes: b, what: `u64 ${v} at ${at}` };
};

const lying32: Mutation = (b, rng, header) => {
  const at = Math.min(b.length - 4, where(rng, b, header));
  const v = rng.int(4) === 0 ? rng.u32() : LIES_32[rng.int(LIES_32.length)];
  new DataView(b.buffer, b.byteOffset).setUint32(at, v, true);
  return { bytes: b, what: `u32 ${v} at ${at}` };
};

const shifted: Mutation = (b, rng, header) => {
  const at = where(rng, b, header);
  if (rng.int(2)) {
    const n = 1 + rng.int(16);
    return { bytes: Buffer.concat([b.subarray(0, at), b.subarray(at + n)]), what: `${n} bytes removed at ${at}` };
  }
  const extra = b.subarray(where(rng, b, header)).subarray(0, 1 + rng.int(24));
  return { bytes: Buffer.concat([b.subarray(0, at), extra, b.subarray(at)]), what: `${extra.length} bytes inserted at ${at}` };
};

describe('fuzz: damaged GGUF headers', () => {
  const dog = new Watchdog({ kind: 'gguf', memoryBytes: 64 << 20 });
  after(() => dog.close());
  const dir = tmpDir('fuzz-gguf');
  const all = specimens();
  let n = 0;

  async function run(bytes: Uint8Array) {
    const file = path.join(dir, `case-${n++}.gguf`);
    fs.writeFileSync(file, bytes);
    try {
      return await dog.run({ file });
    } finally {
      fs.rmSync(file);
    }
  }

  it('every specimen reads as it is', async () => {
    for (const [label, bytes] of all) assert.deepEqual((await run(bytes)).outcome, 'ok', label);
  });

  for (const [name, seed, perSpecimen, mutate] of [
    ['flipped bits and bytes', 21, 250, flips],
    ['truncations', 22, 80, truncation],
    ['counts, lengths and offsets that lie', 23, 250, lying64],
    ['type numbers, dimension counts and alignments that lie', 24, 200, lying32],
    ['bytes inserted and removed', 25, 120, shifted],
  ] as const)
    it(name, async (t) => {
      const rng = new Rng(seed);
      const tally = new Tally();
      for (const [label, good, header] of all)
        for (let i = 0; i < perSpecimen; i++) {
          const { bytes, what } = mutate(Uint8Array.from(good), rng, header);
          tally.add(`${label}: ${what}`, await run(bytes));
        }
      t.diagnostic(String(tally));
      assert.deepEqual(tally.failures, [], String(tally));
      assert.ok(tally.count('error') > (all.length * perSpecimen) / 4, `most are refused: ${tally}`);
    });
});
