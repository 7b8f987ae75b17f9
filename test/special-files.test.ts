import { openModelContainer } from '../src/model/registry.js';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Model } from '../src/api/model.js';
import { readGenerationDefaults } from '../src/checkpoint/generation-config.js';
import { Arena } from '../src/memory/arena.js';
import { openStreamFiles } from '../src/experts/io.js';
import { loadChatFormat } from '../src/chat/format.js';
import { loadTokenizer } from '../src/tokenizer/load.js';
import { WasteError } from '../src/util/errors.js';
import { readBytes } from '../src/util/read.js';
import { BIN, ROOT, checkpoint, copyContainer, synth, tmpDir } from './helpers.js';
import { SafetensorsSet } from '../src/checkpoint/safetensors.js';
import { readCheckpointConfig } from '../src/checkpoint/config.js';

/**
 * Every file the engine is given must be a regular file, read with a bound: a symlink to
 * /dev/zero used to grow memory without end, and a FIFO hung the open (the test would hang,
 * not fail, on a reader that blocks). Each is one error naming the file.
 */
const KINDS: [string, (file: string) => void, string][] = [
  ['a symlink to /dev/zero', (f) => fs.symlinkSync('/dev/zero', f), 'a character device'],
  ['a FIFO', (f) => execFileSync('mkfifo', [f]), 'a FIFO'],
  ['a directory', (f) => fs.mkdirSync(f), 'a directory'],
];

function replaceWith(dir: string, name: string, make: (file: string) => void): string {
  const f = path.join(dir, name);
  fs.rmSync(f, { force: true, recursive: true });
  make(f);
  return f;
}

function refuses(run: () => unknown, file: string, kind: string): void {
  assert.throws(run, (e: unknown) => {
    assert.ok(e instanceof WasteError, `expected a WasteError, got ${e}`);
    assert.equal(e.code, 'E_IO');
    assert.equal(e.message, `${file}: is ${kind}, expected a regular file`);
    return true;
  });
}

const good = synth({ shape: 'tiny', seed: 51 }, 'special');

// a reader that blocks on a FIFO hangs rather than fails: the timeout guards against that, it measures nothing
describe('special files in place of regular ones', { timeout: 10 * 60_000 }, () => {
  describe('container files', () => {
    for (const name of ['manifest.json', 'trunk.bin', 'codebooks.bin', 'experts-L2.bin'])
      for (const [label, make, kind] of KINDS)
        it(`${name} as ${label}`, () => {
          const d = copyContainer(good);
          const f = replaceWith(d, name, make);
          refuses(() => openModelContainer(d), f, kind);
        });

    it('an expert bank swapped after the container was checked, when it is opened for streaming', () => {
      for (const [, make, kind] of KINDS) {
        const d = copyContainer(good);
        const c = openModelContainer(d);
        const arena = new Arena(1 << 20);
        try {
          const f = replaceWith(d, 'experts-L1.bin', make);
          for (const direct of [true, false]) refuses(() => openStreamFiles(c, direct, { arena, off: arena.alloc(8192, 4096) }).close(), f, kind);
        } finally {
          c.close();
        }
      }
    });

    it('info and logits give one line and exit 1', () => {
      const d = copyContainer(good);
      const f = replaceWith(d, 'codebooks.bin', (x) => execFileSync('mkfifo', [x]));
      for (const args of [['info', d], ['logits', d, '--ids', '1,2', '--out', path.join(tmpDir('o'), 'l.bin')]]) {
        const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8' });
        assert.equal(r.status, 1, r.stderr);
        assert.equal(r.stderr, `waste: ${f}: is a FIFO, expected a regular file\n`);
      }
    });
  });

  describe('a saved session', () => {
    for (const [label, make, kind] of KINDS)
      it(`as ${label}: refused, and the session is left as it was`, async () => {
        const m = await Model.open(good, { threads: 1, sessions: 2 });
        try {
          const s = m.newSession();
          await s.forward([3, 4, 5]);
          const f = replaceWith(tmpDir('sess'), 'saved.waste', make);
          refuses(() => s.load(f), f, kind);
          const after = await s.forward([6]);
          const fresh = m.newSession();
          const expect = await fresh.forward([3, 4, 5, 6]);
          assert.deepEqual(after, expect);
        } finally {
          await m.close();
        }
      });
  });

  describe('usage.waste', () => {
    it('a real one warms the cache (what the cases below do not do)', async () => {
      const d = copyContainer(good);
      const m = await Model.open(d, { threads: 1 });
      await m.newSession().forward([1, 2]);
      assert.ok(m.saveUsage() > 0);
      await m.close();
      const again = await Model.open(d, { threads: 1 });
      assert.ok(again.stats().warmed > 0);
      await again.close();
    });
    for (const [label, make] of KINDS)
      it(`as ${label}: ignored, the model opens cold`, async () => {
        const d = copyContainer(good);
        replaceWith(d, 'usage.waste', make);
        const m = await Model.open(d, { threads: 1 });
        try {
          assert.equal(m.stats().warmed, 0);
          assert.equal((await m.newSession().forward([1, 2])).length, 300);
        } finally {
          await m.close();
        }
      });
  });

  describe('tokenizer, chat format and generation defaults', () => {
    const demo = path.join(ROOT, 'models', 'demo');
    /** A folder with the demo model's small files and `extra` ones, nothing else. */
    const folder = (files: string[], extra: Record<string, string> = {}) => {
      const d = tmpDir('tok');
      for (const f of files) fs.copyFileSync(path.join(demo, f), path.join(d, f));
      for (const [f, text] of Object.entries(extra)) fs.writeFileSync(path.join(d, f), text);
      return d;
    };
    const cases: [string, () => string, (dir: string) => unknown][] = [
      ['tokenizer.model', () => folder(['tokenizer.model', 'specials.json']), (d) => loadTokenizer(d)],
      ['specials.json', () => folder(['tokenizer.model', 'specials.json']), (d) => loadTokenizer(d)],
      ['tokenizer_config.json', () => folder(['tokenizer.model'], { 'tokenizer_config.json': '{}' }), (d) => loadTokenizer(d)],
      ['tokenizer.json', () => folder([], { 'tokenizer.json': '{}' }), (d) => loadTokenizer(d)],
      ['chat.json', () => folder([], { 'chat.json': '{}' }), (d) => loadChatFormat(d)],
      ['chat_template.jinja', () => folder(['chat_template.jinja']), (d) => loadChatFormat(d)],
      ['generation_config.json', () => folder(['generation_config.json']), (d) => readGenerationDefaults(d)],
    ];
    for (const [name, setup, load] of cases)
      for (const [label, make, kind] of KINDS)
        it(`${name} as ${label}`, () => {
          const d = setup();
          const f = replaceWith(d, name, make);
          refuses(() => load(d), f, kind);
        });
  });

  describe('the bound on what is read', () => {
    const status = '/proc/self/status';
    it('reads a file to its end whatever size it reports (/proc reports 0), and refuses one past the bound', { skip: !fs.existsSync(status) && 'no /proc' }, () => {
      assert.equal(fs.statSync(status).size, 0);
      const text = readBytes(status, 1 << 20).toString('utf8');
      assert.match(text, /^Name:/);
      assert.match(text, /\nPid:\s+\d+\n/);
      assert.throws(() => readBytes(status, 16), /\/proc\/self\/status: more than 16 bytes, the most this file may hold/);
    });
    it('a regular file of exactly the bound is read; one byte more is refused', () => {
      const f = path.join(tmpDir('bound'), 'f');
      fs.writeFileSync(f, Buffer.alloc(100, 7));
      assert.equal(readBytes(f, 100).length, 100);
      assert.throws(() => readBytes(f, 99), /more than 99 bytes/);
    });
  });
  describe('a HuggingFace checkpoint (read by convert, logits and quality)', () => {
    const ck = checkpoint({ shape: 'tiny', seed: 52, shards: 2 }, 'special-ck');
    const copy = () => {
      const d = tmpDir('ck');
      for (const f of fs.readdirSync(ck)) fs.copyFileSync(path.join(ck, f), path.join(d, f));
      return d;
    };
    const shard = fs.readdirSync(ck).find((f) => f.endsWith('.safetensors'))!;
    for (const [name, read] of [
      ['config.json', (d: string) => readCheckpointConfig(d)],
      ['model.safetensors.index.json', (d: string) => SafetensorsSet.open(d)],
      [shard, (d: string) => SafetensorsSet.open(d)],
    ] as const)
      for (const [label, make, kind] of KINDS)
        it(`${name} as ${label}`, () => {
          const d = copy();
          const f = replaceWith(d, name, make);
          refuses(() => read(d), f, kind);
        });
  });
});
