/**
 * Images from the command line and the library's chat, as a user gives them: files on disk
 * (PNG, JPEG, BMP, GIF), `--image` on logits, run and chat, `/image` in a chat, `plan`'s room for
 * the tower, and a damaged file refused in one line.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { before, describe, it } from 'node:test';
import pngjs from 'pngjs';
import { convert } from '../src/convert/convert.js';
import { Model } from '../src/api/model.js';
import { expandPads } from '../src/model/media.js';
import { BIN, checkpoint, readF32, sameBits, testPicture, tmpDir } from './helpers.js';

function waste(args: string[], input?: string) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', input });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

/** A test picture written as an RGB PNG. */
function writePng(file: string, width: number, height: number, seed: number): void {
  const { rgb } = testPicture(width, height, seed);
  const data = Buffer.alloc(width * height * 4);
  for (let i = 0; i < width * height; i++) {
    data[4 * i] = rgb[3 * i];
    data[4 * i + 1] = rgb[3 * i + 1];
    data[4 * i + 2] = rgb[3 * i + 2];
    data[4 * i + 3] = 255;
  }
  fs.writeFileSync(file, pngjs.PNG.sync.write({ width, height, data } as unknown as pngjs.PNG, { colorType: 2 }));
}

describe('images from the command line and the library', () => {
  let dir = '';
  let png = '';
  let png2 = '';
  let work = '';
  before(async () => {
    const src = checkpoint({ shape: 'k3-tiny', seed: 3, shards: 1 }, 'hf-vision-cli');
    work = tmpDir('vision-cli');
    dir = path.join(work, 'k3');
    await convert(src, dir, { threads: 2 });
    png = path.join(work, 'photo.png');
    png2 = path.join(work, 'second.png');
    writePng(png, 100, 70, 4);
    writePng(png2, 50, 90, 8);
  });

  it('waste logits --image gives the bits the library gives for the same file, each placeholder expanded to its rows', async () => {
    const out = path.join(work, 'l.bin');
    const r = waste(['logits', dir, '--ids', '5,17,789,33,789,9', '--image', png, '--image', png2, '--all', '--out', out]);
    assert.equal(r.code, 0, r.err);
    const m = await Model.open(dir);
    try {
      const a = await m.encodeImage(png);
      const b = await m.encodeImage(fs.readFileSync(png2));
      const ids = expandPads([5, 17, 789, 33, 789, 9], 789, [a, b]);
      const want = await m.newSession().forward(ids, { allLogits: true, images: [a, b] });
      assert.ok(sameBits(readF32(out), want), 'the CLI and the library differ');
    } finally {
      await m.close();
    }
    const wrong = waste(['logits', dir, '--ids', '5,789,789', '--image', png, '--out', out]);
    assert.equal(wrong.code, 2, 'a usage error');
    assert.match(wrong.err, /^waste: the prompt has 2 image placeholders \(<\|media_pad\|>, id 789\) for 1 image\n$/);
  });

  it('waste run --image answers about a picture; a damaged or missing file, or a model without a tower, is one line', () => {
    const r = waste(['run', dir, 'what is in it?', '--image', png, '-n', '4', '--no-think']);
    assert.equal(r.code, 0, r.err);
    const cut = path.join(work, 'cut.png');
    fs.writeFileSync(cut, fs.readFileSync(png).subarray(0, 100));
    for (const [file, want] of [
      [cut, /truncated PNG/],
      [path.join(work, 'none.png'), /none\.png/],
      [path.join(work), /directory|not a regular file/],
    ] as [string, RegExp][]) {
      const bad = waste(['run', dir, 'hi', '--image', file, '-n', '2']);
      assert.notEqual(bad.code, 0, bad.err);
      assert.match(bad.err, want);
      assert.equal(bad.err.trim().split('\n').length, 1, bad.err);
    }
    const none = waste(['run', 'demo', 'hi', '--image', png, '-n', '2']);
    assert.notEqual(none.code, 0);
    assert.match(none.err, /takes no images/);
    const off = waste(['run', dir, 'hi', '--image', png, '-n', '2', '--no-vision']);
    assert.notEqual(off.code, 0);
    assert.match(off.err, /takes no images/);
  });

  it('waste chat: /image puts a picture with the next message, and the conversation goes on', () => {
    const r = waste(['chat', dir, '-n', '3', '--no-think'], `/image ${png}\nwhat is this?\n/image ${path.join(work, 'nothing.png')}\nand now?\n/quit\n`);
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /\(image .*photo\.png: 100 x 70, 6 rows in the prompt; it goes with your next message\)/);
    assert.match(r.err, /waste: .*nothing\.png/);
  });

  it("waste plan shows the tower's room, and --no-vision gives it to the cache", () => {
    const a = JSON.parse(waste(['plan', dir, '--json']).out);
    const v = JSON.parse(waste(['plan', dir, '--vision', '--json']).out);
    const b = JSON.parse(waste(['plan', dir, '--no-vision', '--json']).out);
    assert.ok(a.vision_bytes > 0);
    assert.equal(v.vision_bytes, a.vision_bytes);
    assert.equal(b.vision_bytes, 0);
    assert.equal(a.floor_bytes, b.floor_bytes + a.vision_bytes);
    assert.match(waste(['plan', dir]).out, /vision tower\s+\S+ \S+ \(loaded by the first image/);
  });

  it("the library's chat takes images with a message, as paths or bytes: each image's rows are fed", async () => {
    const m = await Model.open(dir);
    try {
      const run = async (images: (string | Uint8Array)[]) => {
        const chat = m.chat({ thinking: false });
        for await (const _ of chat.send({ text: 'what is in it?', images }, { maxTokens: 1 })) void _;
        const at = chat.session.position;
        chat.close();
        return at;
      };
      const none = await run([]);
      const one = await run([png]);
      const two = await run([png, fs.readFileSync(png2)]);
      const a = await m.encodeImage(png);
      const b = await m.encodeImage(png2);
      // each image adds its media block (a few markup tokens) and its rows in place of one placeholder
      assert.ok(one - none >= a.count, `${one} - ${none} < ${a.count}`);
      assert.ok(two - one >= b.count, `${two} - ${one} < ${b.count}`);
      const plain = m.chat();
      await assert.rejects(async () => {
        for await (const _ of plain.send({ text: 'x', images: [path.join(work, 'missing.png')] })) void _;
      }, /missing\.png/);
    } finally {
      await m.close();
    }
  });
});
