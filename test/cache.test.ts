import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Model } from '../src/api/model.js';
import { synth } from './helpers.js';

/** The expert cache's own rules: demand-only accounting, pinning, and what each policy keeps. */
const dir = synth({ shape: 'tiny', seed: 61, experts: 40, layers: 4, config: { num_experts_per_token: 2 } }, 'cache');

/** A model whose cache is as small as the budget allows (at least `slots` slots). */
async function withCache(slots: number, policy: 'lfru' | 'lru' | 'lfuda', fn: (m: Model) => void | Promise<void>): Promise<void> {
  const m = await Model.open(dir, { threads: 1, cacheSlots: slots, cachePolicy: policy, warm: false, ioThreads: 1 });
  try {
    assert.equal(m.cache!.slots.length, slots);
    await fn(m);
  } finally {
    await m.close();
  }
}

describe('expert cache', () => {
  it('counts demand hits and misses only; lookahead reads apart', async () => {
    await withCache(8, 'lfru', (m) => {
      const c = m.cache!;
      const a = c.request(1, [3, 4]);
      a.forEach((s) => c.release(s));
      const b = c.request(1, [3, 5]);
      b.forEach((s) => c.release(s));
      assert.deepEqual([c.stats.hits, c.stats.misses], [1, 3]);
      c.prefetch(2, [7, 8]);
      assert.equal(c.stats.speculativeReads, 2);
      assert.deepEqual([c.stats.hits, c.stats.misses], [1, 3], 'a prefetch is neither a hit nor a miss');
      const d = c.request(2, [7]);
      d.forEach((s) => c.release(s));
      assert.deepEqual([c.stats.hits, c.stats.speculativeUsed], [2, 1]);
      c.drain();
      for (const s of c.slots) if (s.key >= 0) assert.equal(c.record(s).length, c.stride);
    });
  });

  it('never evicts a pinned slot', async () => {
    await withCache(6, 'lfru', (m) => {
      const c = m.cache!;
      const pinned = c.request(1, [0, 1, 2, 3]);
      c.drain();
      assert.equal(c.available(), c.slots.length - 4);
      for (let e = 10; e < 30; e++) c.release(c.request(2, [e])[0]);
      const keys = new Set(c.slots.map((s) => s.key));
      for (const e of [0, 1, 2, 3]) assert.ok(keys.has(65536 + e), `pinned expert ${e} stayed`);
      pinned.forEach((s) => c.release(s));
      c.drain();
    });
  });

  it('LFRU and LFU-DA keep the experts used most; LRU keeps the ones used last', async () => {
    const survivors = async (policy: 'lfru' | 'lru' | 'lfuda') => {
      let kept = 0;
      // room for the hot five and fifteen more (the stream passes through those)
      await withCache(20, policy, (m) => {
        const c = m.cache!;
        // five experts used often, then a stream of one-off experts
        const use = (layer: number, e: number) => {
          const [s] = c.request(layer, [e]);
          c.record(s); // consumed, as the forward pass does, before it is released
          c.release(s);
        };
        for (let round = 0; round < 6; round++) for (let e = 0; e < 5; e++) use(1, e);
        for (let e = 0; e < 40; e++) use(2, e);
        const keys = new Set(c.slots.map((s) => s.key));
        for (let e = 0; e < 5; e++) if (keys.has(65536 + e)) kept++;
        c.drain();
      });
      return kept;
    };
    const lfru = await survivors('lfru');
    const lru = await survivors('lru');
    const lfuda = await survivors('lfuda');
    assert.ok(lfru >= 4, `LFRU kept ${lfru} of the 5 hot experts`);
    assert.ok(lfuda === 5, `LFU-DA kept ${lfuda} of the 5 hot experts`);
    assert.ok(lru <= 1, `LRU kept ${lru}`);
  });

  it('LFU-DA remembers how often an expert was asked for across its eviction', async () => {
    await withCache(6, 'lfuda', (m) => {
      const c = m.cache!;
      const use = (layer: number, e: number, times = 1) => {
        let slot;
        for (let i = 0; i < times; i++) {
          [slot] = c.request(layer, [e]);
          c.record(slot);
          c.release(slot);
        }
        return slot!;
      };
      const n = c.slots.length;
      use(1, 0, 10); // expert A: ten requests
      for (let e = 20; e < 20 + n; e++) use(2, e, 30); // fillers asked for more often push A out
      assert.ok(!c.slots.some((s) => s.key === 65536), 'A was evicted');
      const a = use(1, 0); // A comes back: eleven requests in all
      const b = use(3, 7); // B: its first request, loaded at the same aging level
      assert.equal(a.prio - b.prio, 10, 'A keeps its ten earlier requests; B starts from one');
      c.drain();
    });
  });

  it('a miss never evicts an expert its own step is about to use', async () => {
    for (const policy of ['lfru', 'lru', 'lfuda'] as const)
      await withCache(6, policy, (m) => {
        const c = m.cache!;
        const n = c.slots.length;
        const held = Array.from({ length: n }, (_, i) => 10 + i);
        c.request(3, held).forEach((s) => (c.record(s), c.release(s)));
        // the one expert the next step does not use is the one every policy would rather keep
        for (let i = 0; i < 3; i++) c.request(3, [held[n - 1]]).forEach((s) => (c.record(s), c.release(s)));
        // the new expert comes first in the step, the cached ones after it: all but one are hits
        const before = c.stats.hits;
        c.request(3, [39, ...held.slice(0, n - 1)]).forEach((s) => (c.record(s), c.release(s)));
        assert.equal(c.stats.hits - before, n - 1, policy);
        c.drain();
      });
  });
});
