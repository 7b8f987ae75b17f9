import { openModelContainer } from '../src/model/registry.js';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { before, describe, it } from 'node:test';
import { Model, type OpenOptions } from '../src/api/model.js';
import { planMemory, PROCESS_ALLOWANCE_BYTES } from '../src/engine/plan.js';
import { availableRam, cgroupLimit, memoryPressure, usableRam } from '../src/engine/ram.js';
import { WasmKernels } from '../src/kernels/wasm/index.js';
import { WasteError } from '../src/util/errors.js';
import { parseSize } from '../src/util/size.js';
import { copyContainer, sameBits, synth, tmpDir } from './helpers.js';

/**
 * The streaming runtime never changes an answer: budgets from the floor up, cold or warm caches,
 * either eviction policy, lookahead on or off, any number of reader threads, --verify. And the
 * budget is a ceiling: the engine refuses to open below the floor, and never allocates past it.
 */
const dir = synth({ shape: 'tiny', seed: 51, experts: 24, layers: 6, config: { num_experts_per_token: 4 } }, 'runtime');
const prompt = [5, 17, 200, 3, 99, 42, 7, 7, 250, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21];
const decode = [33, 44, 55, 66, 77, 88, 99, 111, 122, 133];

async function run(opts: OpenOptions, sequential = false) {
  const m = await Model.open(dir, { threads: 2, ...opts });
  try {
    const s = m.newSession();
    const rows: Float32Array[] = [];
    if (sequential) {
      let last: Float32Array = new Float32Array(0);
      for (const id of prompt) last = await s.forward([id]);
      rows.push(last);
    } else rows.push(await s.forward(prompt));
    for (const id of decode) rows.push(await s.forward([id]));
    const out = new Float32Array(rows.reduce((n, r) => n + r.length, 0));
    let o = 0;
    for (const r of rows) {
      out.set(r.subarray(r.length - m.config.vocab), o);
      o += m.config.vocab;
    }
    const stats = m.stats();
    assert.ok(stats.allocatedBytes <= stats.budgetBytes, `allocated ${stats.allocatedBytes} > budget ${stats.budgetBytes}`);
    return { logits: out.subarray(0, o), stats, plan: m.plan };
  } finally {
    await m.close();
  }
}

describe('runtime: placement decides speed, never the answer', () => {
  let reference: Float32Array;
  let floor = 0;

  let preloadMisses = -1;
  // in a hook, not a test, so that any one test can run alone (--test-name-pattern)
  before(async () => {
    const r = await run({ preloadExperts: true });
    reference = r.logits;
    floor = r.plan.floorBytes;
    preloadMisses = r.stats.misses;
  });

  it('the reference run (unlimited budget, everything preloaded) reads nothing while it runs', () => {
    assert.equal(preloadMisses, 0, 'preloaded: every request is a hit');
  });

  it('budgets from the floor to unlimited', async () => {
    for (const budget of [floor, floor + 300_000, floor + 1_000_000, 1 << 30]) {
      const r = await run({ budget });
      assert.ok(sameBits(r.logits, reference), `budget ${budget}`);
      assert.ok(r.stats.misses > 0);
    }
  });

  it('the floor really is small: the cache thrashes there and still answers right', async () => {
    const r = await run({ budget: floor, lookahead: 0 });
    assert.ok(r.stats.hitRate < 0.9, `hit rate ${r.stats.hitRate}`);
    assert.ok(sameBits(r.logits, reference));
  });

  it('LFRU and LRU', async () => {
    for (const cachePolicy of ['lfru', 'lru', 'lfuda'] as const) assert.ok(sameBits((await run({ budget: floor + 200_000, cachePolicy })).logits, reference), cachePolicy);
  });

  it('lookahead on and off', async () => {
    const on = await run({ budget: floor + 200_000, lookahead: 8 });
    const off = await run({ budget: floor + 200_000, lookahead: 0 });
    assert.ok(sameBits(on.logits, reference) && sameBits(off.logits, reference));
    assert.ok(on.stats.lookaheadPredicted > 0 && on.stats.speculativeReads > 0, 'lookahead ran');
    assert.equal(off.stats.speculativeReads, 0);
  });

  it('lookahead 0, 1, 2 and 3 layers ahead: the same logits, each depth scored, never over the budget', async () => {
    for (const budget of [floor, floor + 200_000]) {
      for (const lookaheadLayers of [0, 1, 2, 3]) {
        const r = await run({ budget, lookahead: 4, lookaheadLayers });
        assert.ok(sameBits(r.logits, reference), `budget ${budget}, ${lookaheadLayers} layers ahead`);
        assert.equal(r.stats.lookaheadLayers, lookaheadLayers);
        // every depth asked for guessed (the model has more MoE layers than that), and none beyond
        assert.equal(r.stats.lookaheadByDepth.length, lookaheadLayers);
        for (const d of r.stats.lookaheadByDepth) assert.ok(d.predicted > 0 && d.correct <= d.predicted && d.correct <= d.asked, JSON.stringify(d));
        if (lookaheadLayers === 0) assert.equal(r.stats.speculativeReads, 0);
        else assert.ok(r.stats.speculativeReads > 0);
      }
    }
  });

  it('0, 1 and 8 reader threads', async () => {
    for (const ioThreads of [0, 1, 8]) assert.ok(sameBits((await run({ budget: floor + 200_000, ioThreads })).logits, reference), `${ioThreads} readers`);
  });

  it('chunked and sequential prefill', async () => {
    assert.ok(sameBits((await run({ budget: floor + 200_000 }, true)).logits, reference));
    assert.ok(sameBits((await run({ budget: floor + 200_000, chunk: 5 })).logits, reference));
  });

  it('--verify, and the page cache instead of O_DIRECT', async () => {
    assert.ok(sameBits((await run({ budget: floor, verify: true })).logits, reference));
    assert.ok(sameBits((await run({ budget: floor, direct: false })).logits, reference));
  });

  it('cold and warm: a learned hotlist loads at open and changes only the hit rate', async () => {
    const d = copyContainer(dir);
    const budget = floor + 400_000;
    const cold = await Model.open(d, { budget, threads: 2 });
    let coldStats;
    try {
      const s = cold.newSession();
      await s.forward(prompt);
      for (const id of decode) await s.forward([id]);
      coldStats = cold.stats();
      assert.ok(cold.saveUsage() > 0);
    } finally {
      await cold.close();
    }
    assert.ok(fs.existsSync(path.join(d, 'usage.waste')));
    const m = await Model.open(d, { budget, threads: 2 });
    try {
      assert.ok(m.stats().warmed > 0, 'warmed from usage.waste');
      const s = m.newSession();
      const rows: Float32Array[] = [await s.forward(prompt)];
      for (const id of decode) rows.push(await s.forward([id]));
      const warmStats = m.stats();
      assert.ok(warmStats.hits > coldStats.hits, `warm ${warmStats.hits} hits vs cold ${coldStats.hits}`);
      const V = m.config.vocab;
      rows.forEach((r, i) => assert.ok(sameBits(r, reference.subarray(i * V, (i + 1) * V)), `row ${i}`));
    } finally {
      await m.close();
    }
    // a damaged hotlist is ignored, not trusted
    fs.writeFileSync(path.join(d, 'usage.waste'), Buffer.from('WUSG garbage that is not a hotlist'));
    const again = await Model.open(d, { budget, threads: 1 });
    assert.equal(again.stats().warmed, 0);
    await again.close();
  });
});

describe('the budget is a ceiling', () => {
  it('refuses to open below the floor, naming it', async () => {
    const c = openModelContainer(dir);
    const plan = planMemory(c, { threads: 2 });
    c.close();
    await assert.rejects(Model.open(dir, { budget: plan.floorBytes - 1, threads: 2 }), (e: unknown) => {
      return e instanceof WasteError && e.message.includes(`${plan.floorBytes} bytes`) && /below this model's floor/.test(e.message);
    });
  });

  it("at the floor, the experts kernel has its working rows: no decode step falls back to expert by expert", async () => {
    // experts wide enough that two threads' working rows (~200 KB) exceed an arena's slack
    const wide = synth({ shape: 'tiny', seed: 52, experts: 12, layers: 4, config: { moe_intermediate_size: 256 } }, 'runtime-rows');
    const c = openModelContainer(wide);
    const plan = planMemory(c, { threads: 2 });
    c.close();
    const calls = { all: 0, refused: 0 };
    const original = WasmKernels.prototype.vqExperts;
    WasmKernels.prototype.vqExperts = function (this: WasmKernels, ...args: Parameters<WasmKernels['vqExperts']>) {
      const ok = original.apply(this, args);
      calls.all++;
      if (!ok) calls.refused++;
      return ok;
    };
    try {
      const m = await Model.open(wide, { threads: 2, budget: plan.floorBytes });
      try {
        const s = m.newSession();
        await s.forward(prompt);
        for (const id of decode) await s.forward([id]);
        assert.ok(m.stats().misses > 0);
        assert.ok(m.stats().allocatedBytes <= m.stats().budgetBytes);
      } finally {
        await m.close();
      }
      assert.ok(calls.all > 0, 'decode went through the experts kernel');
      assert.equal(calls.refused, 0, `${calls.refused} of ${calls.all} calls found no room for their working rows`);
    } finally {
      WasmKernels.prototype.vqExperts = original;
    }
  });

  it('a session beyond those the budget reserved is refused, not allocated', async () => {
    const c = openModelContainer(dir);
    const plan = planMemory(c, { threads: 2 });
    c.close();
    const m = await Model.open(dir, { budget: plan.floorBytes, threads: 2 });
    try {
      const a = m.newSession();
      assert.throws(() => m.newSession(), /RAM budget .* has no room/);
      a.close();
      const b = m.newSession(); // the state of a closed session is reused
      await b.forward([1, 2]);
      assert.ok(m.stats().allocatedBytes <= m.stats().budgetBytes);
    } finally {
      await m.close();
    }
  });

  it('the plan: floor = trunk + state + scratch + two layers of experts; default = every expert, or available RAM less the margin, never below the floor', () => {
    const c = openModelContainer(dir);
    try {
      const GiB = 2 ** 30;
      const big = planMemory(c, { threads: 2, ram: { physical: 64 * GiB, usable: 64 * GiB, available: 60 * GiB, availableFrom: 'MemAvailable' } });
      assert.equal(big.workingSetRecords, 5 * 4);
      assert.equal(big.floorRecords, 2 * 4);
      // the floor's whole pages may hold a few slots more
      assert.ok(big.layout(big.floorBytes).slots >= big.floorRecords);
      assert.equal(big.layoutForSlots(big.floorRecords).bytes, big.floorBytes);
      assert.ok(big.floorBytes >= big.trunkBytes + big.stateBytes + big.scratchBytesPerArena + big.expertScratchBytesPerArena + big.floorRecords * big.recordBytes);
      // a roomy machine: every expert, capped by the container's expert bytes
      assert.equal(big.defaultFrom, 'expert bytes');
      assert.equal(big.elasticLayout(big.defaultBudget).slots, big.totalExperts);
      assert.equal(big.osMarginBytes, 8 * GiB);
      // available RAM less the margin and the process's allowance bounds it: 1 GiB margin (at least),
      // so 1 GiB + the allowance + floor + 2 records available leaves 2 records over the floor
      const avail = GiB + PROCESS_ALLOWANCE_BYTES + big.floorBytes + 2 * big.recordBytes;
      const tight = planMemory(c, { threads: 2, ram: { physical: 4 * GiB, usable: 4 * GiB, available: avail, availableFrom: 'cgroup' } });
      assert.equal(tight.osMarginBytes, GiB);
      assert.equal(tight.defaultFrom, 'cgroup');
      assert.equal(tight.defaultBudget, avail - GiB - PROCESS_ALLOWANCE_BYTES);
      const slots = tight.elasticLayout(tight.defaultBudget).slots;
      assert.ok(slots > tight.floorRecords && slots < tight.totalExperts, String(slots));
      // without MemAvailable: usable RAM less the margin
      const noInfo = planMemory(c, { threads: 2, ram: { physical: 4 * GiB, usable: GiB + PROCESS_ALLOWANCE_BYTES + big.floorBytes + 3 * big.recordBytes } });
      assert.equal(noInfo.defaultFrom, 'usable RAM');
      const none = planMemory(c, { threads: 2, ram: { physical: 1, usable: 1, available: 1 } });
      assert.equal(none.defaultBudget, none.floorBytes);
      assert.equal(none.defaultFrom, 'floor');
    } finally {
      c.close();
    }
  });
});

describe('sizes and usable RAM', () => {
  it('parses budgets', () => {
    assert.equal(parseSize('1500000000'), 1500000000);
    assert.equal(parseSize('512M'), 512 * 2 ** 20);
    assert.equal(parseSize('8G'), 8 * 2 ** 30);
    assert.equal(parseSize('8GiB'), 8 * 2 ** 30);
    assert.equal(parseSize('1.5g'), 1.5 * 2 ** 30);
    assert.equal(parseSize('50%', 1000), 500);
    for (const bad of ['', 'lots', '-5G', '8X', '0', '150%']) assert.throws(() => parseSize(bad, 1000), WasteError, bad);
  });

  it('honours cgroup v2 limits up the hierarchy, and v1', () => {
    const root = tmpDir('cg');
    const proc = path.join(root, 'proc-cgroup');
    fs.mkdirSync(path.join(root, 'fs', 'a', 'b'), { recursive: true });
    fs.writeFileSync(path.join(root, 'fs', 'a', 'b', 'memory.max'), 'max\n');
    fs.writeFileSync(path.join(root, 'fs', 'a', 'memory.max'), '3000000000\n');
    fs.writeFileSync(path.join(root, 'fs', 'a', 'memory.high'), '2000000000\n');
    fs.writeFileSync(proc, '0::/a/b\n');
    assert.equal(cgroupLimit(proc, path.join(root, 'fs')), 2000000000);
    assert.equal(usableRam({ procCgroup: proc, cgroupRoot: path.join(root, 'fs'), physical: 16e9 }).usable, 2000000000);
    fs.writeFileSync(proc, '0::/../../etc\n');
    assert.equal(cgroupLimit(proc, path.join(root, 'fs')), undefined, '.. is never followed');
    fs.mkdirSync(path.join(root, 'fs', 'memory', 'x'), { recursive: true });
    fs.writeFileSync(path.join(root, 'fs', 'memory', 'x', 'memory.limit_in_bytes'), '9223372036854771712\n');
    fs.writeFileSync(path.join(root, 'fs', 'memory', 'memory.limit_in_bytes'), '1000000000\n');
    fs.writeFileSync(proc, '4:memory:/x\n');
    assert.equal(cgroupLimit(proc, path.join(root, 'fs')), 1000000000);
    assert.equal(cgroupLimit(path.join(root, 'missing'), path.join(root, 'fs')), undefined);
  });

  it('available RAM: MemAvailable, or a cgroup\'s headroom (limit − usage + inactive file pages) when less; PSI some avg10', () => {
    const root = tmpDir('avail');
    const proc = path.join(root, 'proc-cgroup');
    const meminfo = path.join(root, 'meminfo');
    const fsRoot = path.join(root, 'fs');
    fs.writeFileSync(meminfo, 'MemTotal:       24683568 kB\nMemFree:         1000000 kB\nMemAvailable:    4000000 kB\n');
    fs.writeFileSync(proc, '0::/a\n');
    fs.mkdirSync(path.join(fsRoot, 'a'), { recursive: true });
    // no limit: MemAvailable
    assert.deepEqual(availableRam({ meminfo, procCgroup: proc, cgroupRoot: fsRoot }), { bytes: 4000000 * 1024, from: 'MemAvailable' });
    // a limit with more headroom than the machine has: still MemAvailable
    fs.writeFileSync(path.join(fsRoot, 'a', 'memory.max'), '8000000000\n');
    fs.writeFileSync(path.join(fsRoot, 'a', 'memory.current'), '1000000000\n');
    assert.equal(availableRam({ meminfo, procCgroup: proc, cgroupRoot: fsRoot })!.from, 'MemAvailable');
    // a tight one: its headroom, counting inactive file pages as reclaimable
    fs.writeFileSync(path.join(fsRoot, 'a', 'memory.max'), '3000000000\n');
    fs.writeFileSync(path.join(fsRoot, 'a', 'memory.current'), '2500000000\n');
    fs.writeFileSync(path.join(fsRoot, 'a', 'memory.stat'), 'anon 2000000000\ninactive_file 400000000\nactive_file 100000000\n');
    assert.deepEqual(availableRam({ meminfo, procCgroup: proc, cgroupRoot: fsRoot }), { bytes: 900000000, from: 'cgroup' });
    const ram = usableRam({ meminfo, procCgroup: proc, cgroupRoot: fsRoot, physical: 16e9 });
    assert.equal(ram.usable, 3000000000);
    assert.equal(ram.available, 900000000);
    assert.equal(ram.availableFrom, 'cgroup');
    // nothing readable: unknown
    assert.equal(availableRam({ meminfo: path.join(root, 'none'), procCgroup: path.join(root, 'none'), cgroupRoot: fsRoot }), undefined);
    const psi = path.join(root, 'psi');
    fs.writeFileSync(psi, 'some avg10=12.50 avg60=3.00 avg300=0.50 total=1234\nfull avg10=1.00 avg60=0.00 avg300=0.00 total=10\n');
    assert.equal(memoryPressure(psi), 12.5);
    assert.equal(memoryPressure(path.join(root, 'none')), undefined);
  });
});
