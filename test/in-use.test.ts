/**
 * `waste rm` used to delete a stored model that a running `serve` (or `run`, `chat`) had open,
 * without a word. A process with a stored model open keeps a marker in the store; rm refuses while a
 * live process holds one, naming it, unless --force.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Model } from '../src/api/model.js';
import { usersOf } from '../src/store/in-use.js';
import { BIN, ROOT, tmpDir } from './helpers.js';

const demo = path.join(ROOT, 'models', 'demo');

/** A store ($WASTE_HOME) holding the demo model as `name`. */
function store(name: string): { home: string; env: NodeJS.ProcessEnv; dir: string } {
  const home = tmpDir('home');
  const dir = path.join(home, 'models', name);
  fs.mkdirSync(dir, { recursive: true });
  for (const f of fs.readdirSync(demo)) fs.copyFileSync(path.join(demo, f), path.join(dir, f));
  return { home, env: { ...process.env, WASTE_HOME: home }, dir };
}

function waste(args: string[], env: NodeJS.ProcessEnv) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', env });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

/** Resolves once `child` has written `what` on stderr. */
function waitFor(child: ChildProcess, what: RegExp): Promise<void> {
  let err = '';
  return new Promise((resolve, reject) => {
    child.stderr!.on('data', (b) => {
      err += b;
      if (what.test(err)) resolve();
    });
    child.on('exit', () => reject(new Error(`exited before ${what}: ${err}`)));
  });
}

function stop(child: ChildProcess): Promise<number | null> {
  return new Promise((resolve) => {
    child.on('exit', (code) => resolve(code));
    child.kill('SIGTERM');
  });
}

describe('waste rm and a model in use', () => {
  it('a running waste serve: rm refuses naming the process, --force removes it anyway', async () => {
    const { env, dir } = store('tiny');
    const serve = spawn(process.execPath, [BIN, 'serve', 'tiny', '--port', '0', '-q'], { env, stdio: ['ignore', 'ignore', 'pipe'] });
    try {
      await waitFor(serve, /listening on/);
      const r = waste(['rm', 'tiny'], env);
      assert.equal(r.code, 1);
      assert.equal(r.err, `waste: tiny is in use by process ${serve.pid} (waste serve tiny --port 0 -q); stop it first, or remove it anyway with --force\n`);
      assert.ok(fs.existsSync(path.join(dir, 'manifest.json')), 'still there');
      const forced = waste(['rm', 'tiny', '--force'], env);
      assert.equal(forced.code, 0, forced.err);
      assert.equal(forced.out, 'removed tiny: the model\n');
      assert.ok(!fs.existsSync(dir));
    } finally {
      assert.equal(await stop(serve), 0);
    }
  });

  it('a chat waiting for input holds it too; once it ends, rm goes ahead', async () => {
    const { env, dir } = store('talk');
    const chat = spawn(process.execPath, [BIN, 'chat', 'talk', '-n', '2'], { env, stdio: ['pipe', 'ignore', 'pipe'] });
    const ended = new Promise((resolve) => chat.on('exit', resolve));
    try {
      await waitFor(chat, /\/help for commands/);
      const r = waste(['rm', 'talk'], env);
      assert.equal(r.code, 1);
      assert.match(r.err, new RegExp(`^waste: talk is in use by process ${chat.pid} \\(waste chat talk -n 2\\); stop it first`));
    } finally {
      chat.stdin!.end('/quit\n');
    }
    assert.equal(await ended, 0);
    const after = waste(['rm', 'talk'], env);
    assert.equal(after.code, 0, after.err);
    assert.ok(!fs.existsSync(dir));
  });

  it('a marker left by a process that is gone is ignored', () => {
    const { home, env } = store('old');
    const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
    const users = path.join(home, 'models', '.old.in-use');
    fs.mkdirSync(users);
    fs.writeFileSync(path.join(users, gone.stdout), 'waste serve old');
    const r = waste(['rm', 'old'], env);
    assert.equal(r.code, 0, r.err);
    assert.ok(!fs.existsSync(path.join(home, 'models', 'old')));
  });

  it('the library marks a stored model while it is open (twice open, one marker, gone at the last close), and nothing outside the store', async () => {
    const { home, dir } = store('lib');
    const saved = process.env.WASTE_HOME;
    process.env.WASTE_HOME = home;
    try {
      const marker = path.join(home, 'models', '.lib.in-use', String(process.pid));
      const a = await Model.open('lib', { threads: 1 });
      const b = await Model.open(dir, { threads: 1 });
      assert.match(fs.readFileSync(marker, 'utf8'), /\S/);
      await a.close();
      assert.ok(fs.existsSync(marker), 'the second is still open');
      await b.close();
      assert.ok(!fs.existsSync(path.dirname(marker)));
      const outside = await Model.open(demo, { threads: 1 });
      await outside.close();
      assert.deepEqual(fs.readdirSync(path.join(home, 'models')), ['lib']);
      assert.deepEqual(usersOf('lib'), []);
    } finally {
      if (saved === undefined) delete process.env.WASTE_HOME;
      else process.env.WASTE_HOME = saved;
    }
  });
});
