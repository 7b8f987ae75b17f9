/**
 * K3's vision tower: its kernels, the preprocessing's grid and layout, the tower and the rows it
 * splices into a prompt — bit-identical across threads and prefill chunks, the budget a ceiling,
 * and damaged vision configs refused in one line.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { before, describe, it } from 'node:test';
import { convert } from '../src/convert/convert.js';
import { Model } from '../src/api/model.js';
import { expandPads } from '../src/model/media.js';
import { type ImageSpec, type RgbImage, rowsFor, toPatches, wasteGrid } from '../src/image/preprocess.js';
import { erf, tsKernels } from '../src/kernels/ts/index.js';
import { WasmKernels } from '../src/kernels/wasm/index.js';
import { Arena } from '../src/memory/arena.js';
import { WasteError } from '../src/util/errors.js';
import { checkpoint, copyContainer, relErr, sameBits, testPicture, tmpDir } from './helpers.js';

const SPEC: ImageSpec = { patch: 14, maxPatches: 1024, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5], inPatchLimit: 65536, sideLimit: 512, towerLimit: 16384 };

const picture = testPicture;

function randoms(n: number, seed: number, scale = 1): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = ((s / 2 ** 32) * 2 - 1) * scale;
  }
  return out;
}

describe('the vision kernels', () => {
  it('erf matches known values to double precision, in both implementations', async () => {
    const k = await WasmKernels.create(1, [new Arena(1 << 20)]);
    try {
      const known: [number, number][] = [
        [0, 0],
        [0.5, 0.5204998778130465],
        [1, 0.8427007929497149],
        [2, 0.9953222650189527],
        [2.5, 0.999593047982555],
        [3, 0.9999779095030014],
        [-1.5, -0.9661051464753108],
        [4, 0.9999999845827421],
        [7, 1],
      ];
      for (const [x, want] of known) {
        assert.ok(Math.abs(erf(x) - want) < 1e-14, `ts erf(${x}) = ${erf(x)}`);
        assert.ok(Math.abs(k.erfAt(x) - want) < 1e-14, `wasm erf(${x}) = ${k.erfAt(x)}`);
      }
    } finally {
      await k.close();
    }
  });

  it('GELU (tanh and erf forms) and full attention agree with the reference kernels, and attention is the same bits on 1 and 3 threads', async () => {
    const arena = new Arena(32 << 20);
    const k1 = await WasmKernels.create(1, [arena]);
    const k3 = await WasmKernels.create(3, [arena]);
    try {
      const n = 5000;
      const src = randoms(n, 7, 6);
      for (const exact of [false, true]) {
        const a = arena.f32(arena.alloc(n * 4, 64), n);
        a.set(src);
        const b = Float32Array.from(src);
        k1.gelu(a, n, exact);
        tsKernels.gelu(b, n, exact);
        assert.ok(relErr(a, b) < 1e-6, `gelu exact=${exact}: ${relErr(a, b)}`);
      }
      const L = 37;
      const heads = 3;
      const hd = 12;
      const qkv = arena.f32(arena.alloc(L * 3 * heads * hd * 4, 64), L * 3 * heads * hd);
      qkv.set(randoms(qkv.length, 11, 2));
      const o1 = arena.f32(arena.alloc(L * heads * hd * 4, 64), L * heads * hd);
      const o3 = arena.f32(arena.alloc(L * heads * hd * 4, 64), L * heads * hd);
      const ref = new Float32Array(L * heads * hd);
      k1.attendAll(qkv, L, heads, hd, 0.3, o1);
      k3.attendAll(qkv, L, heads, hd, 0.3, o3);
      tsKernels.attendAll(Float32Array.from(qkv), L, heads, hd, 0.3, ref);
      assert.ok(sameBits(o1, o3), 'attention differs between 1 and 3 threads');
      assert.ok(relErr(o1, ref) < 1e-6, `attention against the reference: ${relErr(o1, ref)}`);
    } finally {
      await k1.close();
      await k3.close();
    }
  });
});

describe('image preprocessing', () => {
  it("chooses the C engine's patch grid: aspect kept, under the budget, even sides", () => {
    assert.deepEqual(wasteGrid(896, 896, 14, 1024), { gw: 32, gh: 32 });
    assert.deepEqual(wasteGrid(354, 354, 14, 1024), { gw: 24, gh: 24 });
    assert.deepEqual(wasteGrid(100, 70, 14, 1024), { gw: 6, gh: 4 });
    assert.deepEqual(wasteGrid(3, 3, 14, 1024), { gw: 2, gh: 2 });
    // a panorama: the long side is cut until the grid fits
    const g = wasteGrid(20000, 300, 14, 1024);
    assert.ok(g.gw * g.gh <= 1024 && g.gw % 2 === 0 && g.gh % 2 === 0, JSON.stringify(g));
    assert.equal(rowsFor(896, 896, SPEC), 256);
    assert.equal(rowsFor(896, 896, SPEC, 'native'), 1024);
  });

  it('an image already at the grid size passes through unresampled, laid out [patch][channel][row][col] and normalised to [-1, 1]', () => {
    const img = picture(28 * 2, 28);
    const p = toPatches(img, SPEC);
    assert.deepEqual([p.gh, p.gw, p.rows], [2, 4, 2]);
    for (const [x, y, c] of [
      [0, 0, 0],
      [13, 0, 1],
      [14, 0, 2],
      [55, 27, 0],
      [20, 17, 1],
    ]) {
      const patch = Math.floor(y / 14) * 4 + Math.floor(x / 14);
      const got = p.pixels[patch * 588 + c * 196 + (y % 14) * 14 + (x % 14)];
      const v = img.rgb[(y * img.width + x) * 3 + c];
      assert.equal(got, Math.fround(Math.fround(Math.fround(v / 255) - 0.5) / 0.5), `pixel ${x},${y},${c}`);
    }
  });

  it("the release's route never enlarges, pads with -1 to whole 2 × 2 cells, and composites transparency over its chessboard", () => {
    const img = picture(100, 60);
    const p = toPatches(img, SPEC, 'native');
    assert.deepEqual([p.gh, p.gw], [6, 8]);
    // x = 100..111 lies in the padding
    assert.equal(p.pixels[7 * 588 + 0 * 196 + 0 * 14 + 5], -1);
    // fully transparent: the backdrop, white at the top left
    const clear: RgbImage = { ...picture(28, 28), alpha: new Uint8Array(28 * 28) };
    const t = toPatches(clear, SPEC, 'native');
    assert.equal(t.pixels[0], 1);
    assert.equal(t.pixels[8], Math.fround((180 / 255 - 0.5) / 0.5));
    // the C engine's route composites too (before its resize)
    assert.equal(toPatches(clear, SPEC).pixels[0], 1);
  });

  it('refuses pixels that do not match their size', () => {
    assert.throws(() => toPatches({ width: 10, height: 10, rgb: new Uint8Array(5) }, SPEC), (e: unknown) => e instanceof WasteError && e.code === 'E_ARG');
  });
});

describe('the tower and its rows in the prompt (a converted K3 checkpoint)', () => {
  let dir = '';
  let src = '';
  before(async () => {
    src = checkpoint({ shape: 'k3-tiny', seed: 3, shards: 1 }, 'hf-vision');
    dir = path.join(tmpDir('vision'), 'k3');
    await convert(src, dir, { threads: 2 });
  });

  it("the converted tower computes what the checkpoint's does, within its 8-bit weights", async () => {
    const img = picture(100, 70);
    const conv = await encodeWith({ threads: 2 }, img);
    const m = await Model.open(src, { threads: 2 });
    try {
      const ref = await m.encodeImage(img);
      const err = relErr(conv.rows, ref.rows);
      assert.ok(err < 0.05, `converted against the checkpoint: ${err}`);
    } finally {
      await m.close();
    }
  });

  async function encodeWith(opts: Parameters<typeof Model.open>[1], img: RgbImage) {
    const m = await Model.open(dir, opts);
    try {
      return await m.encodeImage(img);
    } finally {
      await m.close();
    }
  }

  it('an image becomes (gh/2)·(gw/2) rows of the text width, the same bits on 1, 2 and 3 threads, close to the reference kernels', async () => {
    const img = picture(100, 70);
    const one = await encodeWith({ threads: 1 }, img);
    assert.deepEqual([one.gh, one.gw, one.count], [4, 6, 6]);
    assert.equal(one.rows.length, 6 * 128);
    for (const threads of [2, 3]) assert.ok(sameBits((await encodeWith({ threads }, img)).rows, one.rows), `${threads} threads`);
    // the two kernels agree to f32 rounding with exact activations (a16's rounding decisions diverge between them)
    const exact = await encodeWith({ threads: 1, activations: 'exact' }, img);
    const ts = await encodeWith({ kernels: 'typescript', activations: 'exact' }, img);
    assert.ok(relErr(ts.rows, exact.rows) < 1e-5, `typescript kernels: ${relErr(ts.rows, exact.rows)}`);
  });

  it('logits with an image spliced in are the same bits for prefill chunks of 64, 5 and 1, and differ from the placeholder alone', async () => {
    const results: Float32Array[] = [];
    let pad = 0;
    for (const chunk of [64, 5, 1]) {
      const m = await Model.open(dir, { threads: 2, chunk });
      try {
        pad = m.vision!.mediaToken;
        const img = await m.encodeImage(picture(90, 90, 2));
        const ids = expandPads([7, 300, pad, 12, 40], pad, [img]);
        const s = m.newSession();
        results.push(await s.forward(ids, { images: [img], allLogits: true }));
        s.close();
        if (chunk === 1) {
          const plain = await m.newSession().forward(ids, { allLogits: true });
          assert.ok(!sameBits(plain, results[0]), 'the image changed nothing');
        }
      } finally {
        await m.close();
      }
    }
    assert.ok(sameBits(results[0], results[1]) && sameBits(results[0], results[2]), 'prefill chunks change the logits');
  });

  it('checks the placeholder count against the images, refuses images without room for the tower, keeps the budget a ceiling', async () => {
    const m = await Model.open(dir, { threads: 2 });
    try {
      const pad = m.vision!.mediaToken;
      const before = m.stats().allocatedBytes;
      const img = await m.encodeImage(picture(60, 40));
      // the tower loaded into the room set aside at open: nothing more was charged
      assert.equal(m.stats().allocatedBytes, before);
      const s = m.newSession();
      await assert.rejects(s.forward([1, pad, 2], { images: [img] }), (e: unknown) => e instanceof WasteError && e.code === 'E_ARG' && /repeated once per row/.test(e.message));
      assert.throws(() => expandPads([1, pad, pad], pad, [img]), /2 image placeholders .* for 1 image/);
      assert.equal(s.position, 0, 'a refused forward consumed tokens');
      assert.ok(m.plan.visionBytes > 0 && m.visionLoaded);
      // rows of another width are not this model's
      const alien = { ...img, rows: new Float32Array(img.count * 64) };
      await assert.rejects(s.forward(expandPads([1, pad], pad, [alien]), { images: [alien] }), /not 128-wide rows of this model/);
    } finally {
      await m.close();
    }
    const off = await Model.open(dir, { threads: 1, vision: false });
    try {
      assert.equal(off.plan.visionBytes, 0);
      await assert.rejects(off.encodeImage(picture(30, 30)), (e: unknown) => e instanceof WasteError && e.code === 'E_UNSUPPORTED');
      // the floor with the tower's room is refused a budget that only covers the floor without it
      await assert.rejects(Model.open(dir, { threads: 1, budget: off.plan.floorBytes }), /vision tower/);
    } finally {
      await off.close();
    }
  });

  it('a session reuses a prefix only where the same image sits', async () => {
    const m = await Model.open(dir, { threads: 2 });
    try {
      const pad = m.vision!.mediaToken;
      const a = await m.encodeImage(picture(60, 60, 1));
      const b = await m.encodeImage(picture(60, 60, 9));
      const s = m.newSession();
      const ids = expandPads([5, pad, 6], pad, [a]);
      await s.forward(ids, { images: [a] });
      const longer = expandPads([5, pad, 6, 7, pad, 8], pad, [a, b]);
      const r = s.resume(longer, 1, [a, b]);
      assert.equal(r.reset, false);
      assert.deepEqual(r.images.map((i) => i.key), [b.key]);
      assert.equal(s.continues(expandPads([5, pad, 6, 9], pad, [b]), 1, [b]), false, 'a different image continued the prefix');
    } finally {
      await m.close();
    }
  });

  it("a session loaded from a file never reuses a prefix that held an image, with images or without", async () => {
    const m = await Model.open(dir, { threads: 2 });
    try {
      const pad = m.vision!.mediaToken;
      const img = await m.encodeImage(picture(60, 60, 3));
      const ids = expandPads([5, pad, 6], pad, [img]);
      const s = m.newSession();
      await s.forward(ids, { images: [img] });
      const file = path.join(tmpDir('vision-session'), 's.waste');
      s.save(file);
      s.close();
      const t = m.newSession();
      t.load(file);
      assert.equal(t.continues([...ids, 7], 1), false, 'reused without the image');
      assert.equal(t.continues([...ids, 7], 1, [img]), false, 'reused an image it cannot know');
      assert.equal(t.resume([...ids, 7], 1, [img]).reset, true);
      t.close();
    } finally {
      await m.close();
    }
  });

  it('the native route keeps more patches when the tower has room for them, and the room is what the plan reserved', async () => {
    const big = picture(420, 300, 5);
    const small = await Model.open(dir, { threads: 2 });
    const wide = await Model.open(dir, { threads: 2, imagePatches: 1200 });
    try {
      // at the default room (1024 patches) the release's route shrinks the image to fit it
      const a = await small.encodeImage(big, { route: 'native' });
      assert.ok(a.gh * a.gw <= 1024, `${a.gh} x ${a.gw}`);
      const before = wide.stats().allocatedBytes;
      const b = await wide.encodeImage(big, { route: 'native' });
      assert.deepEqual([b.gh, b.gw], [22, 30]);
      assert.equal(wide.stats().allocatedBytes, before, 'the tower grew past its reserved room');
      assert.ok(wide.plan.visionBytes > small.plan.visionBytes);
    } finally {
      await small.close();
      await wide.close();
    }
  });

  it("an abort from a timer while the tower runs ends the chat's turn as aborted, and the conversation goes on", async () => {
    const m = await Model.open(dir, { threads: 1 });
    try {
      const chat = m.chat({ thinking: false });
      const stop = new AbortController();
      setTimeout(() => stop.abort(), 5);
      const it = chat.send({ text: 'look', images: [picture(448, 448, 6)] }, { maxTokens: 2, signal: stop.signal });
      let r = await it.next();
      while (!r.done) r = await it.next();
      assert.equal(r.value.finish, 'aborted');
      assert.equal(chat.messages.length, 0, 'the aborted turn joined the conversation');
      let text = '';
      for await (const piece of chat.send('and now?', { maxTokens: 2 })) text += piece;
      assert.equal(chat.last?.finish === 'aborted', false);
    } finally {
      await m.close();
    }
  });

  it('a placeholder typed in text stays text when the conversation has images', async () => {
    const m = await Model.open(dir, { threads: 2 });
    try {
      const chat = m.chat({ thinking: false });
      for await (const _ of chat.send({ text: 'a <|kimi_image_placeholder|> typed', images: [picture(40, 40)] }, { maxTokens: 1 })) void _;
      for await (const _ of chat.send({ text: 'again', images: [picture(40, 40, 2)] }, { maxTokens: 1 })) void _;
      assert.equal(chat.messages.length, 4);
    } finally {
      await m.close();
    }
  });

  it('damaged vision configs are refused in one line naming the field', async () => {
    const cases: [string, (v: Record<string, unknown>) => void, RegExp][] = [
      ['merge', (v) => (v.merge_kernel_size = [3, 3]), /merge_kernel_size/],
      ['heads', (v) => (v.qkv_hidden_size = 50), /qkv_hidden_size/],
      ['text width', (v) => (v.text_hidden_size = 64), /text_hidden_size 64 is not the language model's hidden_size/],
      ['activation', (v) => (v.activation_func = 'relu'), /activation_func/],
      ['patches', (v) => (v.max_patches = 1e9), /max_patches/],
      ['mean', (v) => (v.image_mean = [0.5]), /image_mean/],
      ['std', (v) => (v.image_std = [1e-46, 0.5, 0.5]), /image_std/],
      ['mlp', (v) => (v.mlp_type = 'swiglu'), /mlp_type/],
    ];
    for (const [label, damage, want] of cases) {
      const d = copyContainer(dir);
      const file = path.join(d, 'vision.json');
      const v = JSON.parse(fs.readFileSync(file, 'utf8'));
      damage(v);
      fs.writeFileSync(file, JSON.stringify(v));
      await assert.rejects(Model.open(d, { threads: 1 }), (e: unknown) => e instanceof WasteError && want.test(e.message) && !e.message.includes('\n'), label);
    }
  });
});
