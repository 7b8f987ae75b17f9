/**
 * The GGUF header reader (src/gguf/): what the writer writes reads back exactly, and each named
 * malformation — truncation, offsets past the end, huge counts and lengths, unknown types,
 * overlapping tensors, bad alignment — is refused with one line naming the file and the field,
 * after reading no more than the header.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { GGML_TYPES } from '../src/gguf/ggml-types.js';
import { type GgufHeader, readGgufHeader } from '../src/gguf/header.js';
import type { GgufValue } from '../src/gguf/values.js';
import { encodeGguf, type GgufFileSpec } from '../src/gguf/write.js';
import { WasteError } from '../src/util/errors.js';
import { tmpDir } from './helpers.js';

const dir = tmpDir('gguf');
let n = 0;
/** Write `bytes` to a fresh .gguf file and return its path. */
function file(bytes: Uint8Array, name = `m${n++}.gguf`): string {
  const f = path.join(dir, name);
  fs.writeFileSync(f, bytes);
  return f;
}

const str = (value: string): GgufValue => ({ type: 'string', value });
const u32 = (value: number): GgufValue => ({ type: 'u32', value });

/** A small model's header, every value type and a few tensor types in it. */
const SPEC: GgufFileSpec = {
  metadata: [
    ['general.architecture', str('llama')],
    ['general.name', str('tiny ünïcode 模型')],
    ['llama.block_count', u32(2)],
    ['llama.context_length', { type: 'u64', value: 4096n }],
    ['llama.rope.freq_base', { type: 'f32', value: 10000 }],
    ['llama.attention.layer_norm_rms_epsilon', { type: 'f64', value: 1e-6 }],
    ['llama.use_parallel_residual', { type: 'bool', value: true }],
    ['test.i8', { type: 'i8', value: -5 }],
    ['test.u8', { type: 'u8', value: 250 }],
    ['test.i16', { type: 'i16', value: -300 }],
    ['test.u16', { type: 'u16', value: 60000 }],
    ['test.i32', { type: 'i32', value: -70000 }],
    ['test.i64', { type: 'i64', value: -(2n ** 40n) }],
    ['tokenizer.ggml.tokens', { type: 'array', value: { of: 'string', values: ['<s>', '</s>', 'a', 'b', 'é'] } }],
    ['tokenizer.ggml.scores', { type: 'array', value: { of: 'f32', values: Float32Array.from([0, 0, -1.5, -2.5, -3]) } }],
    ['tokenizer.ggml.token_type', { type: 'array', value: { of: 'i32', values: Int32Array.from([3, 3, 1, 1, 1]) } }],
    ['test.flags', { type: 'array', value: { of: 'bool', values: [true, false, true] } }],
    ['test.big', { type: 'array', value: { of: 'u64', values: BigUint64Array.from([0n, 2n ** 63n]) } }],
    ['test.nested', { type: 'array', value: { of: 'array', values: [{ of: 'u8', values: Uint8Array.from([1, 2]) }, { of: 'string', values: ['x'] }] } }],
  ],
  tensors: [
    { name: 'token_embd.weight', dims: [64, 5], type: 'Q8_0' },
    { name: 'blk.0.attn_q.weight', dims: [256, 4], type: 'Q4_K' },
    { name: 'blk.0.attn_norm.weight', dims: [64], type: 'F32', data: Uint8Array.from({ length: 256 }, (_, i) => i) },
    { name: 'blk.0.ffn_up.weight', dims: [256, 2, 1, 1], type: 'IQ2_XXS' },
    { name: 'blk.1.ffn_gate_exps.weight', dims: [64, 3, 2], type: 'MXFP4' },
    { name: 'output.weight', dims: [64, 5], type: 'BF16' },
  ],
};
const GOOD = encodeGguf(SPEC);

/** Refused with one WasteError of one line that starts with the file and matches `re`. */
async function refused(f: string, re: RegExp, code = 'E_FORMAT'): Promise<string> {
  let err: unknown;
  try {
    await readGgufHeader(f);
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof WasteError, `not refused with a WasteError: ${String(err)}`);
  assert.equal(err.code, code, err.message);
  assert.doesNotMatch(err.message, /[\n\r]/);
  assert.ok(err.message.startsWith(`${f}: `), err.message);
  assert.match(err.message, re);
  assert.ok(err.message.length < 400, err.message);
  return err.message;
}

/** A copy of `bytes` with `put` applied to a DataView of it at `at`. */
function patched(bytes: Uint8Array, at: number, put: (v: DataView, at: number) => void): Uint8Array {
  const b = Uint8Array.from(bytes);
  put(new DataView(b.buffer), at);
  return b;
}

/** Where a tensor's info starts, just past its name: n_dimensions, then the dimensions, the type, the offset. */
function infoOf(bytes: Uint8Array, name: string): { nd: number; dims: number; type: (nd: number) => number; offset: (nd: number) => number } {
  const at = Buffer.from(bytes).indexOf(Buffer.from(`${name}`)) + name.length;
  assert.ok(at > name.length);
  return { nd: at, dims: at + 4, type: (nd) => at + 4 + 8 * nd, offset: (nd) => at + 8 + 8 * nd };
}

/** Where a metadata value starts: past its key and its type. */
function valueOf(bytes: Uint8Array, key: string): number {
  const at = Buffer.from(bytes).indexOf(Buffer.from(key)) + key.length;
  assert.ok(at > key.length);
  return at + 4;
}

describe('the GGUF header reader', () => {
  it('reads back every value type, the tensors, their offsets and where the data starts', async () => {
    const f = file(GOOD);
    const h: GgufHeader = await readGgufHeader(f);
    assert.equal(h.version, 3);
    assert.equal(h.fileBytes, GOOD.length);
    assert.equal(h.alignment, 32);
    assert.deepEqual([...h.metadata.keys()], SPEC.metadata!.map(([k]) => k));
    for (const [k, v] of SPEC.metadata!) assert.deepEqual(h.metadata.get(k), k === 'llama.rope.freq_base' ? { type: 'f32', value: 10000 } : v, k);
    assert.equal(h.dataStart % 32, 0);
    let offset = 0;
    for (const [i, t] of SPEC.tensors!.entries()) {
      const got = h.tensors[i];
      const type = [...GGML_TYPES.values()].find((x) => x.name === t.type)!;
      const elements = t.dims.reduce((a, b) => a * b, 1);
      assert.deepEqual(
        { name: got.name, dims: got.dims, type: got.type.name, elements: got.elements, bytes: got.bytes, offset: got.offset, start: got.start },
        { name: t.name, dims: t.dims, type: t.type, elements, bytes: (elements / type.blockElements) * type.blockBytes, offset, start: h.dataStart + offset },
      );
      offset = Math.ceil((offset + got.bytes) / 32) * 32;
    }
    // the offsets point at the tensor's own bytes
    const norm = h.tensors[2];
    assert.deepEqual([...fs.readFileSync(f).subarray(norm.start, norm.start + norm.bytes)], [...SPEC.tensors![2].data!]);
  });

  it('version 2, a wider alignment, no tensors', async () => {
    const h = await readGgufHeader(file(encodeGguf({ ...SPEC, version: 2, alignment: 64 })));
    assert.equal(h.version, 2);
    assert.equal(h.alignment, 64);
    assert.equal(h.dataStart % 64, 0);
    for (const t of h.tensors) assert.equal(t.offset % 64, 0);
    const empty = await readGgufHeader(file(encodeGguf({ metadata: [['general.architecture', str('llama')]] })));
    assert.deepEqual(empty.tensors, []);
    assert.equal(empty.metadata.size, 1);
  });

  it('the block sizes of the quantized types, as ggml-common.h states them', () => {
    const bytes = Object.fromEntries([...GGML_TYPES.values()].map((t) => [t.name, `${t.blockElements}:${t.blockBytes}`]));
    assert.deepEqual(
      { F32: bytes.F32, F16: bytes.F16, BF16: bytes.BF16, Q4_0: bytes.Q4_0, Q4_1: bytes.Q4_1, Q5_0: bytes.Q5_0, Q5_1: bytes.Q5_1, Q8_0: bytes.Q8_0, Q8_1: bytes.Q8_1 },
      { F32: '1:4', F16: '1:2', BF16: '1:2', Q4_0: '32:18', Q4_1: '32:20', Q5_0: '32:22', Q5_1: '32:24', Q8_0: '32:34', Q8_1: '32:40' },
    );
    assert.deepEqual(
      [bytes.Q2_K, bytes.Q3_K, bytes.Q4_K, bytes.Q5_K, bytes.Q6_K, bytes.Q8_K],
      ['256:84', '256:110', '256:144', '256:176', '256:210', '256:292'],
    );
    assert.deepEqual(
      [bytes.IQ2_XXS, bytes.IQ2_XS, bytes.IQ3_XXS, bytes.IQ1_S, bytes.IQ4_NL, bytes.IQ3_S, bytes.IQ2_S, bytes.IQ4_XS, bytes.IQ1_M, bytes.MXFP4],
      ['256:66', '256:74', '256:98', '256:50', '32:18', '256:110', '256:82', '256:136', '256:56', '32:17'],
    );
    assert.deepEqual([...GGML_TYPES.keys()].filter((id) => [4, 5, 31, 32, 33, 36, 37, 38].includes(id)), [], 'removed numbers are not types');
  });

  it('truncated anywhere: one line naming the file and the field that runs past the end', async () => {
    const headerEnd = (await readGgufHeader(file(GOOD))).dataStart;
    const messages = new Set<string>();
    for (let cut = 0; cut < GOOD.length; cut += cut < headerEnd + 64 ? 1 : 97) {
      const f = file(GOOD.subarray(0, cut), 'cut.gguf');
      const m = await refused(f, cut < 4 ? /is \d+ bytes, not a GGUF file/ : /runs past the end of the file|past the end of the file|bytes left for the header hold at most|more bytes than the whole file has/);
      messages.add(m.replace(/\d+/g, 'N'));
    }
    // the field is named: the header, its counts (bounded by the bytes left), a key, a value, a tensor's name, dimensions, type, its data
    for (const re of [/the header runs past/, /header\.tensor_count is N; the N bytes left/, /metadata\[N\]\.key (runs|\(its length\))/, /metadata\[N\] \("tokenizer\.ggml\.tokens"\)\.value\[N\] (runs|\(its length\))/, /tensor_infos\[N\]\.name (runs|\(its length\))/, /\.dimensions\[N\] runs/, /\.type runs/, /\.offset puts its N bytes at N\.\.N, past the end/])
      assert.ok([...messages].some((m) => re.test(m)), `${re}: ${[...messages].join(' / ').slice(0, 3000)}`);
  });

  it('not GGUF, GGUF v1, big-endian, an unknown version', async () => {
    await refused(file(Buffer.from('PK\x03\x04 not a model at all, just some bytes')), /the file does not start with GGUF's magic number "GGUF" \(it starts with bytes 504b0304\)/);
    await refused(file(patched(GOOD, 4, (v, at) => v.setUint32(at, 1, true))), /header\.version: GGUF version 1/, 'E_UNSUPPORTED');
    await refused(file(patched(GOOD, 4, (v, at) => v.setUint32(at, 3, false))), /header\.version: a big-endian GGUF file/, 'E_UNSUPPORTED');
    await refused(file(patched(GOOD, 4, (v, at) => v.setUint32(at, 77, true))), /header\.version is 77; this build reads GGUF versions 2 and 3/);
  });

  it('huge counts and lengths are refused before anything is allocated for them', async () => {
    const max = 2n ** 64n - 1n;
    await refused(file(patched(GOOD, 8, (v, at) => v.setBigUint64(at, max, true))), /header\.tensor_count is 18446744073709551615; the \d+ bytes left for the header hold at most \d+ tensor infos/);
    await refused(file(patched(GOOD, 16, (v, at) => v.setBigUint64(at, 2n ** 40n, true))), /header\.metadata_kv_count is 1099511627776; /);
    await refused(file(patched(GOOD, 24, (v, at) => v.setBigUint64(at, 2n ** 62n, true))), /metadata\[0\]\.key \(its length\) is 4611686018427387904; the \d+ bytes left for the header hold at most \d+ bytes/);
    const tokens = valueOf(GOOD, 'tokenizer.ggml.tokens');
    await refused(file(patched(GOOD, tokens + 4, (v, at) => v.setBigUint64(at, max, true))), /metadata\[13\] \("tokenizer\.ggml\.tokens"\)\.value \(its length\) is 18446744073709551615/);
    const scores = valueOf(GOOD, 'tokenizer.ggml.scores');
    await refused(file(patched(GOOD, scores + 4, (v, at) => v.setBigUint64(at, 2n ** 33n, true))), /"tokenizer\.ggml\.scores"\)\.value \(its length\) is 8589934592; the \d+ bytes left for the header hold at most \d+ elements/);
    const name = valueOf(GOOD, 'general.name');
    await refused(file(patched(GOOD, name, (v, at) => v.setBigUint64(at, 2n ** 50n, true))), /metadata\[1\] \("general\.name"\)\.value \(its length\) is 1125899906842624/);
    // a tensor name longer than the format's 64 bytes
    await refused(file(encodeGguf({ tensors: [{ name: 'x'.repeat(65), dims: [4], type: 'F32' }] })), /tensor_infos\[0\]\.name \(its length\) is 65; this reader takes at most 64 bytes/);
    // a header larger than the bound asked for
    const big = file(encodeGguf({ metadata: [['general.description', str('y'.repeat(3 << 20))]] }));
    const e = await readGgufHeader(big, { maxHeaderBytes: 1 << 20 }).catch((x: unknown) => x);
    assert.ok(e instanceof WasteError && /metadata\[0\] \("general\.description"\)\.value \(its length\) is 3145728; the \d+ bytes left for the header hold at most \d+ bytes/.test(e.message), String(e));
  });

  it('unknown and removed types, by name and number', async () => {
    const t = infoOf(GOOD, 'blk.0.attn_q.weight');
    await refused(file(patched(GOOD, t.type(2), (v, at) => v.setUint32(at, 99, true))), /tensor_infos\[1\] \("blk\.0\.attn_q\.weight"\)\.type: unknown GGML type 99/, 'E_UNSUPPORTED');
    await refused(file(patched(GOOD, t.type(2), (v, at) => v.setUint32(at, 31, true))), /\.type: GGML type 31 \(Q4_0_4_4\) was removed from GGUF files/, 'E_UNSUPPORTED');
    await refused(file(patched(GOOD, valueOf(GOOD, 'test.u8') - 4, (v, at) => v.setUint32(at, 13, true))), /metadata\[8\] \("test\.u8"\)\.value_type is 13, not a GGUF value type \(0 to 12\)/);
    const flags = valueOf(GOOD, 'test.flags');
    await refused(file(patched(GOOD, flags, (v, at) => v.setUint32(at, 4000, true))), /"test\.flags"\)\.value \(its element type\) is 4000, not a GGUF value type/);
  });

  it('offsets past the end, unaligned, overlapping', async () => {
    const h = await readGgufHeader(file(GOOD));
    const last = infoOf(GOOD, 'output.weight');
    await refused(file(patched(GOOD, last.offset(2), (v, at) => v.setBigUint64(at, BigInt(h.tensors[5].offset + 32), true))), /tensor_infos\[5\] \("output\.weight"\)\.offset puts its 640 bytes at \d+\.\.\d+, past the end of the file/);
    await refused(file(patched(GOOD, last.offset(2), (v, at) => v.setBigUint64(at, 2n ** 60n, true))), /"output\.weight"\)\.offset is 1152921504606846976, past any file/);
    await refused(file(patched(GOOD, last.offset(2), (v, at) => v.setBigUint64(at, BigInt(h.tensors[5].offset + 8), true))), /"output\.weight"\)\.offset is \d+, not a multiple of the alignment 32/);
    const q = infoOf(GOOD, 'blk.0.attn_q.weight');
    await refused(file(patched(GOOD, q.offset(2), (v, at) => v.setBigUint64(at, 0n, true))), /tensor_infos\[1\] \("blk\.0\.attn_q\.weight"\)\.offset puts it at bytes 0\.\.576 of the data, overlapping tensor_infos\[0\] \("token_embd\.weight"\) at 0\.\.340/);
    // the data section itself past the end: an alignment of 2^30 puts it at byte 2^30
    const one = encodeGguf({ alignment: 64, tensors: [{ name: 'w', dims: [8], type: 'F32' }] });
    await refused(file(patched(one, valueOf(one, 'general.alignment'), (v, at) => v.setUint32(at, 2 ** 30, true))), /the tensor data would start at byte 1073741824, past the end of the file \(\d+ bytes\)/);
  });

  it('bad alignment: zero, not a power of two, not a u32', async () => {
    for (const a of [0, 4, 12, 48, 2 ** 31]) await refused(file(encodeGguf({ ...SPEC, metadata: [['general.alignment', u32(a)], ...SPEC.metadata!] })), new RegExp(`metadata "general\\.alignment" is ${a}; the alignment is a power of two from 8 to 2\\^30`));
    await refused(file(encodeGguf({ ...SPEC, metadata: [['general.alignment', str('32')], ...SPEC.metadata!] })), /metadata "general\.alignment" is a string; it is a u32/);
  });

  it('shapes: no dimensions, five, a zero, 2^53 elements, a row that is not whole blocks', async () => {
    const t = infoOf(GOOD, 'token_embd.weight');
    await refused(file(patched(GOOD, t.nd, (v, at) => v.setUint32(at, 0, true))), /tensor_infos\[0\] \("token_embd\.weight"\)\.n_dimensions is 0; a tensor has 1 to 4/);
    await refused(file(patched(GOOD, t.nd, (v, at) => v.setUint32(at, 5, true))), /\.n_dimensions is 5; a tensor has 1 to 4/);
    await refused(file(patched(GOOD, t.dims + 8, (v, at) => v.setBigUint64(at, 0n, true))), /"token_embd\.weight"\)\.dimensions\[1\] is 0; a dimension is 1 to 2\^53 - 1/);
    await refused(file(patched(GOOD, t.dims + 8, (v, at) => v.setBigUint64(at, 2n ** 52n, true))), /"token_embd\.weight"\)\.dimensions \[64, 4503599627370496…\] make more than 2\^53 elements/);
    await refused(file(patched(GOOD, t.dims + 8, (v, at) => v.setBigUint64(at, 2n ** 40n, true))), /"token_embd\.weight"\)\.dimensions \[64, 1099511627776\] of Q8_0 need more bytes than the whole file has/);
    await refused(file(patched(GOOD, t.dims, (v, at) => v.setBigUint64(at, 33n, true))), /"token_embd\.weight"\)\.dimensions\[0\] is 33; a row of Q8_0 is whole blocks of 32 values/);
  });

  it('names and values: duplicates, an empty name, a bool of 2, invalid UTF-8, a key that is not text', async () => {
    await refused(file(encodeGguf({ metadata: [['a.b', u32(1)], ['a.b', u32(2)]] })), /metadata\[1\] \("a\.b"\) appears twice/);
    await refused(file(encodeGguf({ tensors: [{ name: 't', dims: [8], type: 'F32' }, { name: 't', dims: [8], type: 'F32' }] })), /tensor_infos\[1\] \("t"\) names a tensor twice/);
    await refused(file(encodeGguf({ tensors: [{ name: '', dims: [8], type: 'F32' }] })), /tensor_infos\[0\]\.name is empty/);
    const flag = valueOf(GOOD, 'llama.use_parallel_residual');
    await refused(file(patched(GOOD, flag, (v, at) => v.setUint8(at, 2))), /"llama\.use_parallel_residual"\)\.value is 2; a bool is 0 or 1/);
    const name = valueOf(GOOD, 'general.name');
    await refused(file(patched(GOOD, name + 8, (v, at) => v.setUint8(at, 0xff))), /"general\.name"\)\.value is not valid UTF-8/);
    await refused(file(encodeGguf({ metadata: [['bad\u0007key\nwith a line break', u32(1)]] })), /metadata\[0\]\.key "bad\\u0007key\\nwith a line break" is not a key/);
  });

  it('a FIFO or a directory in the file’s place is refused, not waited on', async () => {
    const fifo = path.join(dir, 'fifo.gguf');
    execFileSync('mkfifo', [fifo]);
    await refused(fifo, /is a FIFO, expected a regular file/, 'E_IO');
    await refused(dir, /is a directory/, 'E_IO');
  });

  it('reads the header only: a file of 4 GiB of tensor data costs a read of its first bytes', { skip: !fs.existsSync('/proc/self/io') && 'no /proc/self/io here' }, async () => {
    const header = encodeGguf({ metadata: SPEC.metadata, tensors: [{ name: 'huge', dims: [1 << 30], type: 'F32' }], headerOnly: true });
    const f = file(header);
    await refused(f, /"huge"\)\.dimensions \[1073741824\] of F32 need more bytes than the whole file has/);
    // a sparse file: the data is a hole, so the test writes nothing
    fs.truncateSync(f, header.length + 4 * 2 ** 30);
    const readBytes = () => Number(/rchar: (\d+)/.exec(fs.readFileSync('/proc/self/io', 'utf8'))![1]);
    const before = readBytes();
    const h = await readGgufHeader(f);
    const read = readBytes() - before;
    assert.equal(h.tensors[0].bytes, 4 * 2 ** 30);
    assert.ok(h.tensors[0].start + h.tensors[0].bytes <= h.fileBytes);
    assert.ok(read < 2 << 20, `read ${read} bytes`);
  });

  it('a large header is parsed a window at a time: the event loop turns while it is read', async () => {
    const tokens = Array.from({ length: 300_000 }, (_, i) => `token-${i}-${'z'.repeat(i % 17)}`);
    const f = file(encodeGguf({ metadata: [['tokenizer.ggml.tokens', { type: 'array', value: { of: 'string', values: tokens } }]] }));
    let turns = 0;
    let going = true;
    const spin = (): void => {
      turns++;
      if (going) setImmediate(spin);
    };
    setImmediate(spin);
    const h = await readGgufHeader(f);
    going = false;
    const got = h.metadata.get('tokenizer.ggml.tokens');
    assert.ok(got?.type === 'array' && got.value.of === 'string');
    assert.deepEqual(got.value.values.slice(-2), tokens.slice(-2));
    // about 7.5 MB: at least one turn for each megabyte read
    assert.ok(turns >= Math.floor(fs.statSync(f).size / (1 << 20)), `${turns} turns of the event loop`);
  });
});
