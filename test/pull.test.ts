import { SafetensorsSet } from '../src/checkpoint/safetensors.js';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Conversion, convert } from '../src/convert/convert.js';
import { pull } from '../src/pull/pull.js';
import { resolveModel } from '../src/store/names.js';
import { WasteError } from '../src/util/errors.js';
import { BIN, checkpoint, openFilesUnder, tmpDir } from './helpers.js';
import { HubServer } from './hub-server.js';

const REPO = 'test-org/tiny-moe';
const KL = {
  shape: 'tiny' as const,
  config: { hidden_size: 256, vocab_size: 512, intermediate_size: 384, moe_intermediate_size: 64, kv_lora_rank: 64, linear_attn_config: { num_heads: 4, head_dim: 64 } },
};
const FAST = { threads: 2, stallMs: 2000, retryMs: 10, attempts: 4 };

/** Every file of two containers byte for byte, convert.json included (only the store's record is a pull's own). */
function assertSameContainer(a: string, b: string): void {
  const files = (d: string) => fs.readdirSync(d).filter((f) => f !== 'store.json').sort();
  assert.deepEqual(files(a), files(b));
  for (const f of files(a)) assert.ok(fs.readFileSync(path.join(a, f)).equals(fs.readFileSync(path.join(b, f))), `${f} differs`);
  assert.ok(!fs.existsSync(`${a}.partial.identity`) && !fs.existsSync(`${b}.partial.identity`), 'no identity left beside either');
}

function withHome<T>(home: string, f: () => Promise<T>): Promise<T> {
  const old = process.env.WASTE_HOME;
  process.env.WASTE_HOME = home;
  return f().finally(() => {
    if (old === undefined) delete process.env.WASTE_HOME;
    else process.env.WASTE_HOME = old;
  });
}

/** The CLI, run without blocking this process (whose event loop serves the hub). */
function waste(args: string[], env: NodeJS.ProcessEnv): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const c = spawn(process.execPath, [BIN, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    c.stdout.on('data', (d) => (stdout += d));
    c.stderr.on('data', (d) => (stderr += d));
    c.on('close', (status) => resolve({ status, stdout, stderr }));
  });
}

const shardName = (i: number, n: number) => `model-${String(i).padStart(5, '0')}-of-${String(n).padStart(5, '0')}.safetensors`;

for (const [label, opts] of [
  ['Kimi-Linear', { ...KL, seed: 31, shards: 3 }],
  ['K3', { shape: 'k3-tiny' as const, seed: 5, shards: 3 }],
  // experts stacked per layer in MXFP4 (gpt-oss's release), the layers' stacks over three shards
  ['gpt-oss', { shape: 'gpt-oss-tiny' as const, seed: 9, shards: 3 }],
  ['DeepSeek-V3 (FP8, an MTP layer)', { shape: 'deepseek-v3-tiny' as const, seed: 6, shards: 3 }],
  ['Qwen3.5 (its release layout: stacked experts under model.language_model.)', { shape: 'qwen3.5-moe-tiny' as const, seed: 6, shards: 3 }],
] as const) {
  describe(`waste pull: a sharded ${label} checkpoint from a local hub`, () => {
    const src = checkpoint(opts, 'hub-src');
    const ref = path.join(tmpDir('ref'), 'model');
    let hub: HubServer;
    before(async () => {
      hub = await new HubServer(REPO, src).start();
      await convert(src, ref, { threads: 2 });
    });
    after(() => hub.stop());

    it('streams the conversion into the store, byte-identical to waste convert on the full download, and deletes the shards', async () => {
      const home = tmpDir('home');
      const seen: number[] = [];
      // at every step, the source bytes on disk (shards, their .part files, the trunk copies): never past the plan's peak
      const dl = path.join(home, 'downloads', 'tiny-moe');
      let most = 0;
      const onDisk = () => {
        let n = 0;
        for (const f of fs.existsSync(dl) ? fs.readdirSync(dl) : []) if (/\.safetensors(\.part)?$/.test(f)) n += fs.statSync(path.join(dl, f)).size;
        return n;
      };
      const r = await withHome(home, () =>
        pull(REPO, {
          ...FAST,
          hub: { endpoint: hub.url },
          onProgress: (d) => {
            seen.push(d);
            most = Math.max(most, onDisk());
          },
        }),
      );
      assert.ok(most > 0 && most <= r.plan.peakStreaming - r.plan.containerBytes, `on disk at most ${most} bytes, the plan allows ${r.plan.peakStreaming - r.plan.containerBytes}`);
      assert.equal(r.dir, path.join(home, 'models', 'tiny-moe'));
      assertSameContainer(r.dir, ref);
      const rec = JSON.parse(fs.readFileSync(path.join(r.dir, 'store.json'), 'utf8'));
      assert.deepEqual([rec.repo, rec.revision, rec.commit], [REPO, 'main', hub.commit]);
      assert.ok(!fs.existsSync(path.join(home, 'downloads', 'tiny-moe')), 'the downloaded shards are gone');
      // the peaks as planned: the container and everything downloaded, or the container and what the schedule keeps at once
      assert.equal(r.plan.peakFull, r.plan.containerBytes + r.plan.downloadBytes);
      const shardBytes = r.plan.files.filter((f) => f.path.endsWith('.safetensors')).map((f) => f.size);
      assert.ok(r.plan.peakStreaming >= r.plan.containerBytes + Math.max(...shardBytes));
      assert.ok(r.plan.peakStreaming <= r.plan.containerBytes + shardBytes.reduce((a, b) => a + b, 0) + r.plan.trunkSourceBytes);
      assert.ok(seen.length > 0 && seen.every((d, i) => i === 0 || d >= seen[i - 1]), 'progress only grows');
      // an MTP layer (model.layers.N past num_hidden_layers) is never copied aside: it is never run
      const cfgJson = JSON.parse(fs.readFileSync(path.join(src, 'config.json'), 'utf8'));
      if (cfgJson.num_nextn_predict_layers) {
        const st = SafetensorsSet.open(src);
        const expert = /\.mlp\.experts\.\d+\./;
        const mtpAt = `model.layers.${cfgJson.num_hidden_layers}.`;
        const trunkAll = st.names().filter((n) => !expert.test(n)).reduce((a, n) => a + st.info(n).bytes, 0);
        const mtp = st.names().filter((n) => n.startsWith(mtpAt) && !expert.test(n)).reduce((a, n) => a + st.info(n).bytes, 0);
        st.close();
        assert.ok(mtp > 0 && r.plan.trunkSourceBytes < trunkAll - mtp / 2, `${r.plan.trunkSourceBytes} bytes copied aside of ${trunkAll}, ${mtp} of them the MTP layer's`);
      }
      await withHome(home, async () => assert.equal(resolveModel('tiny-moe'), r.dir));
    });

    it('keeps the checkpoint with keepSource, which waste convert then converts to the same container', async () => {
      const home = tmpDir('home');
      const r = await withHome(home, () => pull(`${REPO}@main`, { ...FAST, name: 'kept', keepSource: true, hub: { endpoint: hub.url } }));
      assert.ok(r.source && fs.existsSync(path.join(r.source, shardName(1, 3))));
      assertSameContainer(r.dir, ref);
    });
  });
}

describe('waste pull: faults', () => {
  const src = checkpoint({ ...KL, seed: 32, shards: 3 }, 'hub-src');
  const ref = path.join(tmpDir('ref'), 'model');
  let hub: HubServer;
  before(async () => {
    hub = await new HubServer(REPO, src).start();
    await convert(src, ref, { threads: 2 });
  });
  after(() => hub.stop());
  const s = (i: number) => shardName(i, 3);
  const bytesOf = (i: number) => fs.statSync(path.join(src, s(i))).size;

  it('a dropped connection is resumed with a range request, not fetched again from the start', async () => {
    const home = tmpDir('home');
    hub.arm(s(2), { kind: 'cut', at: Math.floor(bytesOf(2) / 2) });
    const before = hub.requests.length;
    const r = await withHome(home, () => pull(REPO, { ...FAST, hub: { endpoint: hub.url } }));
    assertSameContainer(r.dir, ref);
    const ranges = hub.requests.slice(before).filter((q) => q.path.endsWith(s(2)) && q.range && q.range !== 'bytes=0-0').map((q) => q.range!);
    assert.ok(ranges.some((q) => Number(/bytes=(\d+)-/.exec(q)![1]) >= Math.floor(bytesOf(2) / 2)), `resumed past the cut: ${ranges}`);
  });

  it('a server that answers ranged requests with the whole file is refused (nothing read into memory, nothing published)', async () => {
    const home = tmpDir('home');
    hub.ignoreRanges = true;
    try {
      await assert.rejects(
        withHome(home, () => pull(REPO, { ...FAST, hub: { endpoint: hub.url } })),
        (e: unknown) => e instanceof WasteError && e.code === 'E_IO' && /answered a ranged request \(bytes=[0-9-]+\) with the whole file \(HTTP 200, not 206\)/.test(e.message),
      );
    } finally {
      hub.ignoreRanges = false;
    }
    const models = path.join(home, 'models');
    assert.deepEqual(fs.existsSync(models) ? fs.readdirSync(models).filter((n) => !n.startsWith('.') && !n.endsWith('.partial')) : [], [], 'nothing published');
  });

  it('a stalled server times out and the download goes on', async () => {
    const home = tmpDir('home');
    hub.arm(s(1), { kind: 'stall', at: 1000 });
    const logs: string[] = [];
    const r = await withHome(home, () => pull(REPO, { ...FAST, stallMs: 300, hub: { endpoint: hub.url }, log: (l) => logs.push(l) }));
    assertSameContainer(r.dir, ref);
    assert.ok(logs.some((l) => l.includes('no data for 0.3 s')), logs.join('\n'));
  });

  it('a corrupted shard is refused by its hash and fetched again; twice, and nothing is published', async () => {
    const home = tmpDir('home');
    hub.arm(s(3), { kind: 'corrupt', at: bytesOf(3) - 10 });
    const logs: string[] = [];
    const r = await withHome(home, () => pull(REPO, { ...FAST, hub: { endpoint: hub.url }, log: (l) => logs.push(l) }));
    assertSameContainer(r.dir, ref);
    assert.ok(logs.some((l) => l.includes("does not match the hub's hash; fetching it again")), logs.join('\n'));

    const home2 = tmpDir('home');
    hub.arm(s(3), { kind: 'corrupt', at: 100 });
    hub.arm(s(3), { kind: 'corrupt', at: 100 });
    await assert.rejects(
      withHome(home2, () => pull(REPO, { ...FAST, hub: { endpoint: hub.url } })),
      (e: unknown) => e instanceof WasteError && e.message.includes("does not match the hub's hash twice"),
    );
    assert.ok(!fs.existsSync(path.join(home2, 'models', 'tiny-moe')));
  });

  it('a full disk is refused before anything is fetched, naming what is needed; nothing is published', async () => {
    const home = tmpDir('home');
    const before = hub.requests.length;
    await assert.rejects(
      withHome(home, () => pull(REPO, { ...FAST, hub: { endpoint: hub.url }, freeSpace: () => 4096 })),
      (e: unknown) => e instanceof WasteError && /not enough disk space .* the download and container need .* more, 4\.00 KiB is free/.test(e.message),
    );
    assert.equal(hub.requests.slice(before).filter((q) => q.path.endsWith('.safetensors') && q.range !== 'bytes=0-0' && !/^bytes=0-7$|^bytes=8-/.test(q.range ?? '')).length, 0, 'no shard was fetched');
    assert.ok(!fs.existsSync(path.join(home, 'models', 'tiny-moe')));
  });

  it('a disk that fills while a shard downloads (after the check passed): one line naming the space needed, nothing published, a later pull resumes', async () => {
    const home = tmpDir('home');
    // a real ENOSPC from the kernel on the path the pull writes: its .part file leads to /dev/full
    const dl = path.join(home, 'downloads', 'tiny-moe');
    fs.mkdirSync(dl, { recursive: true });
    fs.symlinkSync('/dev/full', path.join(dl, `${s(2)}.part`));
    const first = hub.fetchesOf(s(1));
    await assert.rejects(
      withHome(home, () => pull(REPO, { ...FAST, hub: { endpoint: hub.url } })),
      (e: unknown) =>
        e instanceof WasteError &&
        e.code === 'E_NOSPACE' &&
        new RegExp(`^not enough disk space in ${home}/models: a write failed \\(.*${s(2)}\\.part: no space left on the device\\); the download and container need \\S+ \\S+ more, .* is free now\\. Nothing was published`).test(e.message),
    );
    assert.deepEqual(fs.readdirSync(path.join(home, 'models')), ['tiny-moe.partial'], 'nothing published');
    fs.rmSync(path.join(dl, `${s(2)}.part`));
    const r = await withHome(home, () => pull(REPO, { ...FAST, hub: { endpoint: hub.url } }));
    assert.ok(r.resumed);
    assert.equal(hub.fetchesOf(s(1)) - first, 1, 'the first shard was fetched once');
    assertSameContainer(r.dir, ref);
  });

  it('a disk that fills while the converter writes (waste convert, as documented): one line, nothing published, the rerun resumes', async () => {
    const out = path.join(tmpDir('full'), 'model');
    // a partial conversion as a killed run leaves it, whose next write leads to /dev/full
    await (await Conversion.open(src, out, { threads: 2 })).close();
    fs.symlinkSync('/dev/full', path.join(`${out}.partial`, 'trunk.bin.tmp'));
    const r = spawnSync(process.execPath, [BIN, 'convert', src, out, '--threads', '2'], { encoding: 'utf8' });
    assert.equal(r.status, 1);
    assert.match(r.stderr, /^resuming \S+: trunk to do, 0 of 3 MoE layers done\nwaste: not enough disk space in \S+: a write failed \(\S+trunk\.bin\.tmp: no space left on the device\); the container needs \S+ \S+ more, .* is free now\. Nothing was published: free some space and run it again, it resumes where it stopped\n$/);
    assert.ok(!fs.existsSync(out), 'nothing published');
    fs.rmSync(path.join(`${out}.partial`, 'trunk.bin.tmp'));
    const again = spawnSync(process.execPath, [BIN, 'convert', src, out, '--threads', '2'], { encoding: 'utf8' });
    assert.equal(again.status, 0, again.stderr);
    assert.match(again.stderr + again.stdout, /resuming/);
    assertSameContainer(out, ref);
  });

  it('convert killed between setting its identity aside and publishing resumes; changed input still starts over', async () => {
    const out = path.join(tmpDir('aside'), 'model');
    await (await Conversion.open(src, out, { threads: 2 })).close();
    // the state a kill leaves after the identity is set aside, before the rename
    fs.renameSync(path.join(`${out}.partial`, 'convert.identity'), `${out}.partial.identity`);
    const logs: string[] = [];
    await convert(src, out, { threads: 2, log: (l) => logs.push(l) });
    assert.ok(logs.some((l) => l.startsWith('resuming')) && !logs.some((l) => l.includes('starting over')), logs.join('\n'));
    assert.ok(!fs.existsSync(`${out}.partial.identity`) && !fs.existsSync(`${out}.partial`));
    assertSameContainer(out, ref);

    const copy = tmpDir('changed');
    for (const f of fs.readdirSync(src)) fs.copyFileSync(path.join(src, f), path.join(copy, f));
    const out2 = path.join(tmpDir('aside'), 'model');
    await (await Conversion.open(copy, out2, { threads: 2 })).close();
    fs.utimesSync(path.join(copy, s(1)), new Date(2020, 0, 1), new Date(2020, 0, 1));
    const logs2: string[] = [];
    await convert(copy, out2, { threads: 2, log: (l) => logs2.push(l) });
    assert.ok(logs2.some((l) => l.includes('earlier conversion of other input or settings; starting over')), logs2.join('\n'));
    assertSameContainer(out2, ref);
  });

  it('two pulls into one name: the second is refused naming the first (another process, or this one); the lock of a killed one is taken over', async () => {
    const home = tmpDir('home');
    hub.arm(s(2), { kind: 'stall', at: 5000 });
    const child = spawn(process.execPath, [BIN, 'pull', REPO, '--threads', '1', '-q'], { env: { ...process.env, WASTE_HOME: home, HF_ENDPOINT: hub.url }, stdio: 'ignore' });
    try {
      for (let i = 0; i < 600 && !fs.existsSync(path.join(home, 'downloads', 'tiny-moe', `${s(2)}.part`)); i++) await new Promise((r) => setTimeout(r, 100));
      assert.ok(fs.existsSync(path.join(home, 'downloads', 'tiny-moe', `${s(2)}.part`)), 'the child reached the second shard');
      const before = hub.requests.length;
      await assert.rejects(
        withHome(home, () => pull(REPO, { ...FAST, hub: { endpoint: hub.url } })),
        (e: unknown) => e instanceof WasteError && e.code === 'E_STATE' && e.message.includes(`another pull into tiny-moe is running (process ${child.pid})`),
      );
      assert.equal(hub.requests.length, before, 'the refused pull asked the hub nothing');
      const rm = await waste(['rm', 'tiny-moe'], { ...process.env, WASTE_HOME: home });
      assert.equal(rm.status, 1);
      assert.match(rm.stderr, new RegExp(`a pull into tiny-moe is running \\(process ${child.pid}\\)`));
    } finally {
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
    }
    assert.ok(fs.existsSync(path.join(home, 'downloads', '.tiny-moe.lock')), 'the killed pull left its lock');
    // in one process: the second of two concurrent pulls is refused, the first finishes (taking over the dead pid's lock)
    const [a, b] = await withHome(home, () =>
      Promise.allSettled([pull(REPO, { ...FAST, hub: { endpoint: hub.url } }), pull(REPO, { ...FAST, hub: { endpoint: hub.url } })]),
    );
    assert.equal(a.status, 'fulfilled', a.status === 'rejected' ? String(a.reason) : '');
    assert.ok(b.status === 'rejected' && b.reason instanceof WasteError && /another pull into tiny-moe is running in this process/.test(b.reason.message));
    if (a.status === 'fulfilled') assertSameContainer(a.value.dir, ref);
    assert.ok(!fs.existsSync(path.join(home, 'downloads', '.tiny-moe.lock')), 'the lock is released');
  });

  for (const overlap of [true, false])
    it(`stopped by an AbortSignal while a shard stalls${overlap ? '' : ' (downloads in turn)'}: its reason, no file left open, the lock released, nothing published; the next pull resumes`, async () => {
      const home = tmpDir('home');
      // a stall far longer than the test: only the signal can end this pull
      hub.arm(s(2), { kind: 'stall', at: 5000 });
      const part = path.join(home, 'downloads', 'tiny-moe', `${s(2)}.part`);
      const ac = new AbortController();
      // the abort comes from a timer, as a user's would
      const poll = setInterval(() => {
        if (fs.existsSync(part)) ac.abort();
      }, 5);
      try {
        await assert.rejects(
          withHome(home, () => pull(REPO, { ...FAST, stallMs: 600_000, overlap, signal: ac.signal, hub: { endpoint: hub.url } })),
          (e: unknown) => e instanceof Error && e.name === 'AbortError',
        );
      } finally {
        clearInterval(poll);
      }
      assert.ok(ac.signal.aborted, 'the second shard was being fetched');
      assert.deepEqual(openFilesUnder(home), []);
      assert.ok(!fs.existsSync(path.join(home, 'downloads', '.tiny-moe.lock')), 'the lock is released');
      assert.ok(!fs.existsSync(path.join(home, 'models', 'tiny-moe')), 'nothing is published');
      assert.ok(fs.existsSync(part), 'the partial download is kept');
      const r = await withHome(home, () => pull(REPO, { ...FAST, hub: { endpoint: hub.url } }));
      assert.ok(r.resumed);
      assertSameContainer(r.dir, ref);
    });

  it('stopped by an AbortSignal while it plans (the listing stalls): its reason, the lock released, nothing published; the next pull resumes', async () => {
    const home = tmpDir('home');
    hub.holdListing = true;
    const listed = () => hub.requests.some((q) => q.path.includes('/tree/'));
    const before = hub.requests.length;
    const ac = new AbortController();
    // from a timer, once the listing has been asked for (a request the hub never finishes)
    const poll = setInterval(() => {
      if (hub.requests.slice(before).some((q) => q.path.includes('/tree/'))) ac.abort();
    }, 5);
    try {
      await assert.rejects(
        withHome(home, () => pull(REPO, { ...FAST, signal: ac.signal, hub: { endpoint: hub.url } })),
        (e: unknown) => e instanceof Error && e.name === 'AbortError',
      );
    } finally {
      clearInterval(poll);
      hub.holdListing = false;
    }
    assert.ok(listed() && ac.signal.aborted, 'stopped while the listing was asked for');
    assert.deepEqual(openFilesUnder(home), []);
    assert.ok(!fs.existsSync(path.join(home, 'downloads', '.tiny-moe.lock')), 'the lock is released');
    assert.ok(!fs.existsSync(path.join(home, 'models', 'tiny-moe')), 'nothing is published');
    const r = await withHome(home, () => pull(REPO, { ...FAST, hub: { endpoint: hub.url } }));
    assert.ok(r.resumed, 'the commit it began with is kept');
    assertSameContainer(r.dir, ref);
  });

  it('Ctrl-C (SIGINT) while a shard stalls stops `waste pull` at once with exit code 130 and a line saying how to resume; running it again resumes', async () => {
    const home = tmpDir('home');
    // stalled longer than the CLI's 60 s stall timeout: without the signal heard, the pull would wait it out and succeed
    hub.arm(s(2), { kind: 'stall', at: 5000 });
    const env = { ...process.env, WASTE_HOME: home, HF_ENDPOINT: hub.url };
    const child = spawn(process.execPath, [BIN, 'pull', REPO, '--threads', '1', '-q'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    const exited = new Promise<number | null>((r) => child.once('close', (code) => r(code)));
    const part = path.join(home, 'downloads', 'tiny-moe', `${s(2)}.part`);
    while (!fs.existsSync(part) && child.exitCode === null) await new Promise((r) => setTimeout(r, 20));
    assert.ok(fs.existsSync(part), 'the child reached the second shard');
    child.kill('SIGINT');
    assert.equal(await exited, 130, stderr);
    assert.match(stderr, /waste: the pull stopped; run the same command again to resume it/);
    assert.ok(!fs.existsSync(path.join(home, 'downloads', '.tiny-moe.lock')), 'the lock is released');
    assert.ok(!fs.existsSync(path.join(home, 'models', 'tiny-moe')), 'nothing is published');
    const again = await waste(['pull', REPO, '--threads', '1', '-q'], env);
    assert.equal(again.status, 0, again.stderr);
    assertSameContainer(path.join(home, 'models', 'tiny-moe'), ref);
  });

  it('killed while fetching, it resumes without fetching a finished shard again', async () => {
    const home = tmpDir('home');
    // the third shard stalls (longer than the child waits): the child is killed while it waits
    hub.arm(s(3), { kind: 'stall', at: 5000 });
    const first = hub.fetchesOf(s(1));
    const child = spawn(process.execPath, [BIN, 'pull', REPO, '--threads', '1', '-q'], { env: { ...process.env, WASTE_HOME: home, HF_ENDPOINT: hub.url }, stdio: 'ignore' });
    try {
      for (let i = 0; i < 600 && !(hub.fetchesOf(s(3)) > 0 && fs.existsSync(path.join(home, 'downloads', 'tiny-moe', `${s(3)}.part`))); i++) await new Promise((r) => setTimeout(r, 100));
      assert.ok(hub.fetchesOf(s(3)) > 0, 'the child reached the third shard');
    } finally {
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
    }
    assert.equal(hub.fetchesOf(s(1)) - first, 1);
    // killed mid-job: the conversion had begun, nothing was published
    assert.ok(fs.existsSync(path.join(home, 'models', 'tiny-moe.partial', 'convert.json')));
    assert.ok(!fs.existsSync(path.join(home, 'models', 'tiny-moe')));
    const r = await withHome(home, () => pull(REPO, { ...FAST, hub: { endpoint: hub.url } }));
    assert.ok(r.resumed);
    assert.equal(hub.fetchesOf(s(1)) - first, 1, 'the first shard was not fetched again');
    assertSameContainer(r.dir, ref);
  });
});

describe('waste list, rm, pull --dry-run', () => {
  it('lists a pulled model with its source, resolves its name, removes it', async () => {
    const src = checkpoint({ ...KL, seed: 33, shards: 2 }, 'hub-src');
    const hub = await new HubServer(REPO, src).start();
    const home = tmpDir('home');
    try {
      const env = { ...process.env, WASTE_HOME: home, HF_ENDPOINT: hub.url };
      const p = await waste(['pull', REPO, '--name', 'mini', '-q'], env);
      assert.equal(p.status, 0, p.stderr);
      assert.match(p.stdout, /stored mini in /);
      const l = spawnSync(process.execPath, [BIN, 'list', '--json'], { env, encoding: 'utf8' });
      assert.equal(l.status, 0, l.stderr);
      const rows = JSON.parse(l.stdout);
      assert.equal(rows.length, 1);
      assert.equal(rows[0].name, 'mini');
      assert.equal(rows[0].repo, REPO);
      assert.equal(rows[0].commit, hub.commit);
      assert.ok(rows[0].size_bytes > 0 && rows[0].floor_bytes > 0 && rows[0].parameters > 0);
      const t = spawnSync(process.execPath, [BIN, 'list'], { env, encoding: 'utf8' });
      assert.match(t.stdout, /^NAME\s+ARCH\s+SIZE\s+PARAMS\s+FLOOR\s+SOURCE\nmini\s+/);
      const info = spawnSync(process.execPath, [BIN, 'info', 'mini', '--json'], { env, encoding: 'utf8' });
      assert.equal(info.status, 0, info.stderr);
      const rm = spawnSync(process.execPath, [BIN, 'rm', 'mini'], { env, encoding: 'utf8' });
      assert.equal(rm.status, 0, rm.stderr);
      assert.ok(!fs.existsSync(path.join(home, 'models', 'mini')));
      const gone = spawnSync(process.execPath, [BIN, 'info', 'mini'], { env, encoding: 'utf8' });
      assert.equal(gone.status, 1);
      assert.match(gone.stderr, /no model mini: not a directory here, nor a model in /);
      // what an unfinished pull leaves (its downloads, a half-converted container) goes with rm too,
      // and what an interrupted rm renamed aside is swept
      fs.mkdirSync(path.join(home, 'downloads', 'half', 'x'), { recursive: true });
      fs.mkdirSync(path.join(home, 'models', 'half.partial'), { recursive: true });
      fs.mkdirSync(path.join(home, 'models', '.removing-old-999999999'), { recursive: true });
      const half = spawnSync(process.execPath, [BIN, 'rm', 'half'], { env, encoding: 'utf8' });
      assert.equal(half.status, 0, half.stderr);
      assert.match(half.stdout, /^removed half: an unfinished pull's conversion, an unfinished pull's downloads/);
      assert.deepEqual(fs.readdirSync(path.join(home, 'models')), []);
      assert.deepEqual(fs.readdirSync(path.join(home, 'downloads')), []);
      const none = spawnSync(process.execPath, [BIN, 'rm', 'half'], { env, encoding: 'utf8' });
      assert.equal(none.status, 2, 'a usage error');
      assert.match(none.stderr, /no model half in .*, and no pull of it in /);
      // a store that has never pulled (no downloads/ yet): the same one error
      const fresh = spawnSync(process.execPath, [BIN, 'rm', 'half'], { env: { ...env, WASTE_HOME: tmpDir('empty-home') }, encoding: 'utf8' });
      assert.equal(fresh.status, 2, fresh.stderr);
      assert.match(fresh.stderr, /no model half in .*, and no pull of it in /);
    } finally {
      await hub.stop();
    }
  });

  it('--dry-run on a short name prints sizes, floor and both peaks without the network', () => {
    for (const [name, repo] of [
      ['kimi-linear', 'moonshotai/Kimi-Linear-48B-A3B-Instruct'],
      ['kimi-k3', 'moonshotai/Kimi-K3'],
    ]) {
      // an endpoint nothing listens on: any request would fail
      const r = spawnSync(process.execPath, [BIN, 'pull', '--dry-run', name], { env: { ...process.env, WASTE_HOME: tmpDir('home'), HF_ENDPOINT: 'http://127.0.0.1:9' }, encoding: 'utf8' });
      assert.equal(r.status, 0, r.stderr);
      assert.ok(r.stdout.includes(repo));
      assert.match(r.stdout, /checkpoint\s+\S+ \S+ in \d+ shards\n\s+container\s+\S+ \S+\n\s+floor \(4K ctx\)\s+\S+ \S+ of RAM\n\s+disk at peak\s+\S+ \S+ streaming .*, \S+ \S+ downloading everything first/);
    }
  });

  it('--dry-run on a repository reads the listing and headers only', async () => {
    const src = checkpoint({ ...KL, seed: 34, shards: 2 }, 'hub-src');
    const hub = await new HubServer(REPO, src).start();
    try {
      const r = await waste(['pull', '--dry-run', REPO], { ...process.env, WASTE_HOME: tmpDir('home'), HF_ENDPOINT: hub.url });
      assert.equal(r.status, 0, r.stderr);
      assert.match(r.stdout, /disk at peak .* streaming, .* downloading everything first/);
      // the shards were read only in ranges of their headers
      for (const q of hub.requests.filter((q) => q.path.endsWith('.safetensors'))) assert.ok(q.range && /^bytes=(0-0|0-7|8-\d+)$/.test(q.range), `${q.range}`);
    } finally {
      await hub.stop();
    }
  });
});
