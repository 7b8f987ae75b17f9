import assert from 'node:assert/strict';
import * as zlib from 'node:zlib';
import { describe, it } from 'node:test';
import { crc32, crc32Portable } from '../src/util/crc32.js';
import { WasteError } from '../src/util/errors.js';
import { decodeF16, encodeF16, f16 } from '../src/util/f16.js';
import { Rng } from '../src/util/prng.js';

describe('f16', () => {
  it('decodes normals, subnormals, zeros, infinities and NaN', () => {
    assert.equal(decodeF16(0x3c00), 1);
    assert.equal(decodeF16(0xc000), -2);
    assert.equal(decodeF16(0x7bff), 65504);
    assert.equal(decodeF16(0x0400), 2 ** -14); // smallest normal
    assert.equal(decodeF16(0x0001), 2 ** -24); // smallest subnormal, not flushed to zero
    assert.equal(decodeF16(0x03ff), 1023 * 2 ** -24); // largest subnormal
    assert.equal(decodeF16(0x8001), -(2 ** -24));
    assert.ok(Object.is(decodeF16(0x8000), -0));
    assert.equal(decodeF16(0x7c00), Infinity);
    assert.ok(Number.isNaN(decodeF16(0x7e00)));
  });
  it('the table agrees with the formula for all 65536 values', () => {
    for (let h = 0; h < 65536; h++) {
      const a = f16(h);
      const b = Math.fround(decodeF16(h));
      assert.ok(Object.is(a, b) || (Number.isNaN(a) && Number.isNaN(b)), `0x${h.toString(16)}`);
    }
  });
  it('encode round-trips every finite half exactly', () => {
    for (let h = 0; h < 65536; h++) {
      if (((h >> 10) & 31) === 31) continue;
      assert.equal(encodeF16(decodeF16(h)), h, `0x${h.toString(16)}`);
    }
  });
  it('encode rounds to nearest even and saturates to infinity', () => {
    assert.equal(encodeF16(1 + 2 ** -11), 0x3c00); // halfway: ties to even (down)
    assert.equal(encodeF16(1 + 3 * 2 ** -11), 0x3c02); // halfway: ties to even (up)
    assert.equal(encodeF16(1e6), 0x7c00);
    assert.equal(encodeF16(2 ** -26), 0);
    assert.equal(encodeF16(3 * 2 ** -26), 0x0001);
  });
});

describe('crc32 (zlib polynomial)', () => {
  it('known check value', () => {
    const s = new TextEncoder().encode('123456789');
    assert.equal(crc32Portable(s), 0xcbf43926);
    assert.equal(crc32(s), 0xcbf43926);
  });
  it('portable and native agree on random data of awkward lengths', () => {
    const rng = new Rng(5);
    for (const n of [0, 1, 7, 8, 9, 63, 4097, 100003]) {
      const b = new Uint8Array(n);
      rng.fillBytes(b);
      assert.equal(crc32Portable(b), crc32(b), `n=${n}`);
      const z = (zlib as unknown as { crc32?: (d: Uint8Array) => number }).crc32;
      if (z) assert.equal(crc32Portable(b), z(b) >>> 0);
    }
  });
});

describe('seeded generator', () => {
  it('is deterministic per seed and differs across seeds', () => {
    const a = new Rng(42);
    const b = new Rng(42);
    const c = new Rng(43);
    const xa = Array.from({ length: 16 }, () => a.u32());
    assert.deepEqual(xa, Array.from({ length: 16 }, () => b.u32()));
    assert.notDeepEqual(xa, Array.from({ length: 16 }, () => c.u32()));
  });
  it('first values of seed 0 are pinned (the synthetic containers and goldens depend on them)', () => {
    const r = new Rng(0);
    assert.deepEqual(
      Array.from({ length: 3 }, () => r.u32()),
      PINNED,
    );
  });
});
const PINNED = [3809008728, 1133695204, 53579671];

describe('WasteError', () => {
  it('is one line whatever it quotes: line breaks and control characters are shown escaped', () => {
    const e = new WasteError('E_FORMAT', 'x.json: bad ("a\nb\r\nc\td\u001b[2J\u2028e\u0085")');
    assert.equal(e.message, 'x.json: bad ("a\\nb\\r\\nc\\td\\u001b[2J\\u2028e\\u0085")');
    assert.equal(new WasteError('E_IO', 'plain — text, ünïcode').message, 'plain — text, ünïcode');
  });
});
