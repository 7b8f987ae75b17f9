import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Model, type OpenOptions } from '../src/api/model.js';
import { openModelContainer } from '../src/model/registry.js';
import { planMemory } from '../src/engine/plan.js';
import { CALM_POLLS, GROW_AFTER_MS, MemoryPressure, POLL_MS, SETTLE_MS } from '../src/memory/pressure.js';
import type { MemorySample } from '../src/memory/pressure.js';
import { startServer } from '../src/server/server.js';
import * as path from 'node:path';
import { ROOT, sameBits, synth } from './helpers.js';

const DEMO = path.join(ROOT, 'models/demo');

/**
 * The default budget's elastic cache: under (simulated) memory pressure it gives whole arenas back
 * between forward passes, never below the floor and never a pinned slot, and takes them again when
 * the pressure goes — and the logits stay bit-identical to a run that never resized.
 */
const dir = synth({ shape: 'tiny', seed: 52, experts: 24, layers: 6, config: { num_experts_per_token: 4 } }, 'elastic');
const GiB = 2 ** 30;
// a roomy machine as the plan sees it: the default holds every expert; the margin is 8 GiB
const ram = { physical: 64 * GiB, usable: 64 * GiB, available: 60 * GiB, availableFrom: 'MemAvailable' as const };
const prompt = [5, 17, 200, 3, 99, 42, 7, 7, 250, 11, 12, 13];
const decode = [33, 44, 55, 66, 77, 88, 99, 111, 122, 133, 144, 155, 166, 177, 188, 199];

/** Arenas of about `records` records each, so a small model's cache spans many. */
function smallArenas(model = dir, records = 6): number {
  const c = openModelContainer(model);
  try {
    const p = planMemory(c, { threads: 2 });
    return Math.ceil((p.expertScratchBytesPerArena + records * p.recordBytes + 2 * 65536) / 65536) * 65536;
  } finally {
    c.close();
  }
}

/** A machine whose memory the test sets, on a clock the test moves. */
function fakeMachine() {
  const m = { sample: { available: 100 * GiB, psiSome10: 0 } as MemorySample, t: 0 };
  return { m, opts: { ram, memorySample: () => m.sample, clock: () => m.t } satisfies OpenOptions };
}

async function decodeAll(model: Model, each?: (i: number) => void): Promise<Float32Array[]> {
  const s = model.newSession();
  try {
    const out = [(await s.forward(prompt)).slice()];
    for (let i = 0; i < decode.length; i++) {
      each?.(i);
      out.push((await s.forward([decode[i]])).slice());
    }
    return out;
  } finally {
    s.close();
  }
}

describe('elastic expert cache', () => {
  const cacheArenaBytes = smallArenas();

  it('shrinks under pressure and grows back, never below the floor, with logits bit-identical to a run that never resized', async () => {
    const ref = await Model.open(dir, { threads: 2, cacheArenaBytes, ...fakeMachine().opts });
    let want: Float32Array[];
    try {
      assert.ok(ref.elastic, 'the default budget has an elastic cache');
      want = await decodeAll(ref);
      assert.equal(ref.stats().resizes.length, 0, 'no pressure, no resize');
    } finally {
      await ref.close();
    }

    const { m, opts } = fakeMachine();
    const model = await Model.open(dir, { threads: 2, cacheArenaBytes, ...opts });
    try {
      const e = model.elastic!;
      const full = { bytes: e.bytes, slots: e.slots, arenas: e.arenas, used: model.budget.used };
      assert.ok(full.arenas >= 4, `the cache spans ${full.arenas} arenas`);
      assert.equal(full.slots, model.plan.totalExperts);
      const step = Math.max(...[e.maxBytes / full.arenas]);
      const seen: { slots: number; arenas: number }[] = [];
      const got = await decodeAll(model, (i) => {
        m.t += Math.max(POLL_MS, SETTLE_MS, GROW_AFTER_MS / CALM_POLLS) + 1;
        // tokens 2–3: short by 1.5 arenas' worth, then by far more than the cache holds; from token 6 on, plenty again
        if (i === 2) m.sample = { available: model.plan.osMarginBytes - 1.5 * step, psiSome10: 0 };
        if (i === 4) m.sample = { available: 1 * GiB, psiSome10: 40 };
        if (i === 6) m.sample = { available: 100 * GiB, psiSome10: 0 };
        seen.push({ slots: e.slots, arenas: e.arenas });
      });
      // the poll before token i's forward pass acts on the sample set at i - 1
      assert.equal(seen[3].arenas, full.arenas - 2, 'a shortfall of 1.5 arenas gives back 2');
      assert.ok(model.stats().allocatedBytes < full.used || e.arenas === full.arenas);
      const least = Math.min(...seen.map((x) => x.slots));
      assert.ok(least >= model.plan.floorRecords, `never below the floor's ${model.plan.floorRecords} slots (got ${least})`);
      assert.equal(Math.min(...seen.map((x) => x.arenas)), 1, 'deep pressure leaves only the floor arena');
      // growth: one arena at a time, after calm polls
      const arenasSeen = seen.map((x) => x.arenas);
      for (let i = 1; i < arenasSeen.length; i++) assert.ok(arenasSeen[i] - arenasSeen[i - 1] <= 1, `grew by one at a time: ${arenasSeen}`);
      for (const [i, w] of want.entries()) assert.ok(sameBits(got[i], w), `logits of step ${i} bit-identical to the unresized run`);
      const r = model.stats().resizes;
      assert.ok(r.some((x) => x.toBytes < x.fromBytes && /under the .* margin/.test(x.why)), 'the shrink is reported with why');
      assert.ok(r.some((x) => x.toBytes > x.fromBytes && /available again/.test(x.why)), 'the growth is reported');
      // keep polling with room: it grows back to all of it, and no further
      for (let i = 0; i < 40 && e.arenas < full.arenas; i++) {
        m.t += GROW_AFTER_MS + 1;
        e.poll();
      }
      assert.equal(e.arenas, full.arenas);
      assert.equal(e.slots, full.slots);
      assert.equal(model.budget.used, full.used, 'growing back takes exactly what was given back');
      const more = await model.newSession().forward(prompt);
      assert.ok(sameBits(more, want[0]), 'a new session on the regrown cache gives the same logits');
    } finally {
      await model.close();
    }
  });

  it('a dropped arena leaves no handle on this thread, and a pinned slot is never taken', async () => {
    const { opts } = fakeMachine();
    const model = await Model.open(dir, { threads: 2, cacheArenaBytes, ...opts });
    try {
      const s0 = model.newSession();
      await s0.forward(prompt);
      s0.close();
      const e = model.elastic!;
      const cache = model.cache!;
      // pin one record in the last arena (as a computation would hold it)
      const layer = [...model.container!.banks.keys()][0];
      const pinned = cache.request(layer, [0])[0];
      assert.ok(pinned.pins > 0);
      const pinnedArena = pinned.arena;
      const refs = model.arenas.filter((a) => a !== pinnedArena && cache.slots.some((s) => s.arena === a)).map((a) => new WeakRef(a.memory));
      const before = e.arenas;
      // a WeakRef keeps its target alive to the end of the job that made it
      await new Promise((r) => setImmediate(r));
      e.shrink(1000, 'test');
      assert.ok(e.arenas >= 1 && e.arenas < before);
      assert.ok(cache.slots.includes(pinned), 'the pinned slot is still in the cache');
      assert.ok(model.arenas.includes(pinnedArena), "the pinned slot's arena was kept");
      assert.equal(cache.record(pinned).length, cache.stride, 'and its record is still readable');
      cache.release(pinned);
      // every other dropped memory was collected by the shrink itself: no JavaScript handle on this thread is left
      await new Promise((r) => setImmediate(r));
      const dropped = refs.filter((w) => !model.arenas.some((a) => a.memory === w.deref()));
      assert.ok(dropped.length > 0);
      for (const w of dropped) assert.equal(w.deref(), undefined, 'a dropped memory was collected');
      // and the cache still answers as before
      await model.newSession().forward(prompt);
    } finally {
      await model.close();
    }
  });

  it('an explicit budget is fixed: no elastic cache, never resized', async () => {
    const { m, opts } = fakeMachine();
    const model = await Model.open(dir, { threads: 2, cacheArenaBytes, ...opts, budget: 64 * GiB });
    try {
      assert.equal(model.elastic, undefined);
      m.sample = { available: 1, psiSome10: 90 };
      m.t += 10 * GROW_AFTER_MS;
      const slots = model.stats().slots;
      await model.newSession().forward(prompt);
      assert.equal(model.stats().slots, slots);
      assert.deepEqual(model.stats().resizes, []);
    } finally {
      await model.close();
    }
  });

  it('the pressure rule: shrink at once below the margin or on PSI stalls, settle, grow one arena after calm polls with room to spare', () => {
    const MiB = 2 ** 20;
    const p = new MemoryPressure(1000 * MiB, 100 * MiB);
    const both = { canShrink: true, canGrow: true };
    let t = 0;
    assert.equal(p.decide(t, { available: 5000 * MiB, psiSome10: 0 }, both), undefined);
    assert.equal(p.due(t + POLL_MS - 1), false);
    assert.equal(p.due(t + POLL_MS), true);
    t += POLL_MS;
    assert.deepEqual(p.decide(t, { available: 750 * MiB }, both), { shrink: 3, why: '750.0 MiB available, under the 1000.0 MiB margin' });
    // still short right after: it waits for the freed memory to show…
    t += POLL_MS;
    assert.equal(p.decide(t, { available: 900 * MiB }, both), undefined);
    // …unless less than half the margin is left
    assert.ok(p.decide(t + POLL_MS, { available: 400 * MiB }, both));
    t += SETTLE_MS + POLL_MS;
    assert.deepEqual(p.decide(t, { available: 5000 * MiB, psiSome10: 25 }, both), { shrink: 1, why: 'memory pressure (PSI some avg10 25.0%)' });
    // room, but not yet calm for long enough; then one arena
    let grew = 0;
    for (let i = 0; i < 30; i++) {
      t += POLL_MS;
      const d = p.decide(t, { available: 5000 * MiB, psiSome10: 0 }, both);
      if (d && 'grow' in d) {
        grew++;
        assert.ok(t >= GROW_AFTER_MS);
      }
    }
    assert.ok(grew >= 1 && grew <= Math.ceil((30 * POLL_MS) / GROW_AFTER_MS));
    // within the hysteresis band (margin … margin + 1¼ arenas) nothing moves: a shrink of one arena
    // from just under the margin lands here, and must not grow straight back
    for (const a of [1000, 1050, 1100, 1120]) for (let i = 0; i < 8; i++) assert.equal(p.decide((t += GROW_AFTER_MS), { available: a * MiB, psiSome10: 0 }, both), undefined, `${a} MiB`);
    let back = false;
    for (let i = 0; i < 8 && !back; i++) back = !!p.decide((t += GROW_AFTER_MS), { available: 1130 * MiB, psiSome10: 0 }, both);
    assert.ok(back, 'above the band it grows again');
    // nothing to give back, or no reading at all: nothing happens
    assert.equal(p.decide((t += GROW_AFTER_MS), { available: 10 * MiB }, { canShrink: false, canGrow: true }), undefined);
    assert.equal(p.decide((t += GROW_AFTER_MS), {}, both), undefined);
  });

  it('/health reports the elastic cache: its size, target and resizes', async () => {
    const { m, opts } = fakeMachine();
    const server = await startServer({ model: DEMO, port: 0, log: () => {}, open: { ...opts, cacheArenaBytes: smallArenas(DEMO, 40) } });
    try {
      const h0: any = await (await fetch(`${server.url}/health`)).json();
      assert.equal(h0.cache.elastic, true);
      assert.ok(h0.cache.bytes > 0 && h0.cache.bytes === h0.cache.target_bytes);
      assert.deepEqual(h0.cache.resizes, []);
      // pressure, then a request: the poll before its forward pass gives arenas back
      m.sample = { available: 1, psiSome10: 50 };
      m.t += GROW_AFTER_MS;
      const r = await fetch(`${server.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'demo', prompt: 'hello', max_tokens: 2 }) });
      assert.equal(r.status, 200);
      await r.text();
      const h1: any = await (await fetch(`${server.url}/health`)).json();
      if (h0.cache.target_bytes > h1.cache.bytes) {
        assert.ok(h1.cache.resizes.length >= 1);
        assert.ok(h1.cache.resizes[0].to_bytes < h1.cache.resizes[0].from_bytes);
        assert.match(h1.cache.resizes[0].why, /margin/);
      } else assert.fail(`the demo's cache did not shrink: ${JSON.stringify(h1.cache)}`);
    } finally {
      await server.close();
    }
  });
});
