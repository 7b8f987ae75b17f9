/**
 * `/save PATH` in `waste chat` (and Session.save under it) replaces only a regular file, or writes a
 * new one: a symlink, a FIFO or a directory at PATH is refused with one line and left as it was,
 * where a rename used to put a regular file in its place and say "saved".
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Model } from '../src/api/model.js';
import { WasteError } from '../src/util/errors.js';
import { BIN, synth, tmpDir } from './helpers.js';

/** `waste chat MODEL` fed `lines` on standard input, as a person would type them. */
function chat(model: string, lines: string[]) {
  const r = spawnSync(process.execPath, [BIN, 'chat', model, '-n', '3'], { encoding: 'utf8', input: lines.join('\n') + '\n' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

describe('what /save may replace', () => {
  const model = synth({ shape: 'tiny', seed: 61, tokenizer: true }, 'save-target');

  it('a symlink is refused and left pointing where it did; its target is untouched', () => {
    const d = tmpDir('save-link');
    const target = path.join(d, 'precious.txt');
    fs.writeFileSync(target, 'keep me\n');
    const link = path.join(d, 'c.waste');
    fs.symlinkSync(target, link);
    const r = chat(model, ['hello', `/save ${link}`, '/quit']);
    assert.equal(r.code, 0, r.err);
    assert.match(r.err, new RegExp(`^waste: ${link.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}: is a symlink; only a regular file is replaced \\(or a new one written\\)$`, 'm'));
    assert.doesNotMatch(r.out, /\(saved/);
    assert.ok(fs.lstatSync(link).isSymbolicLink());
    assert.equal(fs.readlinkSync(link), target);
    assert.equal(fs.readFileSync(target, 'utf8'), 'keep me\n');
    assert.deepEqual(fs.readdirSync(d).sort(), ['c.waste', 'precious.txt'], 'no temporary left beside it');
  });

  it('a FIFO and a directory are refused, and stay what they were', () => {
    const d = tmpDir('save-special');
    const fifo = path.join(d, 'fifo');
    execFileSync('mkfifo', [fifo]);
    const dir = path.join(d, 'dir');
    fs.mkdirSync(dir);
    const r = chat(model, ['hello', `/save ${fifo}`, `/save ${dir}`, '/quit']);
    assert.equal(r.code, 0, r.err);
    assert.match(r.err, /fifo: is a FIFO; only a regular file is replaced/);
    assert.match(r.err, /dir: is a directory; only a regular file is replaced/);
    assert.doesNotMatch(r.out, /\(saved/);
    assert.ok(fs.lstatSync(fifo).isFIFO());
    assert.ok(fs.lstatSync(dir).isDirectory());
  });

  it('a new name is written, and a regular file replaced; both load back', () => {
    const d = tmpDir('save-ok');
    const fresh = path.join(d, 'new.waste');
    const old = path.join(d, 'old.waste');
    fs.writeFileSync(old, 'an older save');
    const r = chat(model, ['hello', `/save ${fresh}`, `/save ${old}`, `/load ${old}`, '/quit']);
    assert.equal(r.code, 0, r.err);
    assert.equal(r.out.match(/\(saved \d+ tokens to /g)?.length, 2, r.err);
    assert.match(r.out, /\(loaded 2 messages/);
    assert.deepEqual(fs.readFileSync(fresh), fs.readFileSync(old));
  });

  it('the library refuses the same way, and a link planted at the temporary name is not followed', async () => {
    const m = await Model.open(model, { threads: 1 });
    try {
      const s = m.newSession();
      await s.forward([3, 4, 5]);
      const d = tmpDir('save-lib');
      const victim = path.join(d, 'victim');
      fs.writeFileSync(victim, 'untouched');
      fs.symlinkSync(victim, path.join(d, 'link.waste'));
      assert.throws(() => s.save(path.join(d, 'link.waste')), (e: unknown) => e instanceof WasteError && e.code === 'E_IO' && /is a symlink/.test(e.message));
      // the temporary's name is known (it has our pid): a link there is removed, never written through
      const file = path.join(d, 's.waste');
      fs.symlinkSync(victim, path.join(d, `.s.waste.tmp-${process.pid}`));
      s.save(file);
      assert.equal(fs.readFileSync(victim, 'utf8'), 'untouched');
      assert.ok(fs.lstatSync(file).isFile());
      assert.ok(!fs.existsSync(path.join(d, `.s.waste.tmp-${process.pid}`)));
    } finally {
      await m.close();
    }
  });
});
