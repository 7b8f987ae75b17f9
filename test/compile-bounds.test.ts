/**
 * What compiling a JSON Schema may cost, and that it gives way: a compile counts its size and the
 * states it makes on a meter and stops where it passes a bound (not after building the whole), it
 * gives the event loop a turn every slice of its work, and what it builds in slices is what it
 * builds at once. The server's body walk and its gate of parses and compiles, likewise.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { COMPILE_SLICE, CompileBoundError, CompileMeter, runNow, runSliced } from '../src/constrain/compile-meter.js';
import { type SchemaNode, compileSchema, compileSchemaSteps } from '../src/constrain/schema-compile.js';
import { Gate } from '../src/server/gate.js';
import { WALK_SLICE, nestedDeeperThan } from '../src/server/request-body.js';

/** The 7.8 MB schema of issue 32: an enum of 230,000 strings. */
const hugeEnum = () => ({ type: 'string', enum: Array.from({ length: 230_000 }, (_, i) => `value-${i}-${'x'.repeat(20)}`) });
/** An object of many properties: much work, every unit small. */
const wide = (n: number) => ({ type: 'object', properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: i % 2 ? 'string' : ['integer', 'null'] }])), required: ['p1', 'p2'] });

/** A node graph as plain data, to compare two compiles. */
function shape(top: SchemaNode): unknown {
  const seen = new Map<SchemaNode, number>();
  const out: unknown[] = [];
  const visit = (n: SchemaNode): number => {
    let i = seen.get(n);
    if (i !== undefined) return i;
    seen.set(n, (i = seen.size));
    const entry: unknown[] = [n.sat];
    out[i] = entry;
    for (const a of n.alts)
      entry.push([a.types, a.sat, a.satTypes, a.texts, a.minLength, a.maxLength, a.minItems, a.maxItems, a.required, a.prefix.map(visit), visit(a.items), [...a.props].map(([k, v]) => [k, visit(v)]), visit(a.additional)]);
    return i;
  };
  visit(top);
  return out;
}

describe('compile bounds', () => {
  it('an enum of 230,000 values is refused by the schema size as soon as its length is seen', () => {
    const meter = new CompileMeter({ schemaSize: 50_000 });
    assert.throws(
      () => runNow(compileSchemaSteps(hugeEnum(), meter)),
      (e: unknown) => e instanceof CompileBoundError && e.bound === 'schemaSize' && e.limit === 50_000 && /more than 50000 subschemas/.test(e.message),
    );
    // counted before it was looked at: nothing was built, next to nothing was done
    assert.equal(meter.states, 0);
    assert.ok(meter.work < 100, `${meter.work} units of work`);
  });

  it('a compile past its states stops there, long before it would have ended', () => {
    const schema = { type: 'object', properties: { a: { enum: Array.from({ length: 20_000 }, (_, i) => `word${i}`) }, b: wide(2_000) } };
    const all = new CompileMeter();
    runNow(compileSchemaSteps(schema, all));
    const bounded = new CompileMeter({ grammarStates: 5_000 });
    assert.throws(
      () => runNow(compileSchemaSteps(schema, bounded)),
      (e: unknown) => e instanceof CompileBoundError && e.bound === 'grammarStates' && e.limit === 5_000,
    );
    assert.ok(all.states > 100_000, `the whole compile makes ${all.states} states`);
    // stopped at the first state past the bound (an enum value's text counts its bytes at once)
    assert.ok(bounded.states > 5_000 && bounded.states <= 5_000 + 16, `${bounded.states} states`);
    assert.ok(bounded.work < all.work / 4, `${bounded.work} of ${all.work} units of work`);
  });

  it('the bounds count every schema of a request together', () => {
    // one wide(1000) holds 1 + 1,000 subschemas, 1,500 type names, 2 required names and a type
    const meter = new CompileMeter({ schemaSize: 6_000 });
    runNow(compileSchemaSteps(wide(1_000), meter));
    runNow(compileSchemaSteps(wide(1_000), meter));
    assert.equal(meter.schemaSize, 2 * 2_504);
    assert.throws(() => runNow(compileSchemaSteps(wide(1_000), meter)), CompileBoundError);
  });

  it('a compile gives the event loop a turn every slice of its work, and builds what a compile at once builds', async () => {
    for (const schema of [wide(6_000), { anyOf: [wide(500), { enum: Array.from({ length: 5_000 }, (_, i) => ({ n: i })) }, { type: 'array', items: wide(300), minItems: 1 }] }]) {
      const meter = new CompileMeter();
      let last = 0;
      let most = 0;
      let pauses = 0;
      const node = await runSliced(compileSchemaSteps(schema, meter), async () => {
        most = Math.max(most, meter.work - last);
        last = meter.work;
        pauses++;
      });
      most = Math.max(most, meter.work - last);
      // each unit is small here (a name, a value): a slice ends within a few units of COMPILE_SLICE
      assert.ok(most <= COMPILE_SLICE + 64, `${most} units between two turns`);
      assert.ok(pauses >= Math.floor(meter.work / (COMPILE_SLICE + 64)), `${pauses} turns for ${meter.work} units`);
      assert.ok(pauses > 10, `${pauses} turns`);
      assert.deepEqual(shape(node), shape(compileSchema(schema)));
    }
  });

  it('enum values are intersected as JSON values (object keys in any order), and a large intersection is linear', () => {
    const node = compileSchema({ allOf: [{ enum: [{ a: 1, b: [2, { c: 3, d: 4 }] }, [1, 2], 'x', 1, null] }, { enum: [{ b: [2, { d: 4, c: 3 }], a: 1 }, [2, 1], 'x', 1.0, false] }] });
    assert.deepEqual(node.alts[0].texts, ['{"a":1,"b":[2,{"c":3,"d":4}]}', '"x"', '1']);
    // two enums of 20,000 values each, overlapping in all but one: compared pairwise this was 4e8 comparisons
    const n = 20_000;
    const meter = new CompileMeter();
    const big = runNow(compileSchemaSteps({ allOf: [{ enum: Array.from({ length: n }, (_, i) => i) }, { enum: Array.from({ length: n }, (_, i) => i + 1) }] }, meter));
    assert.equal(big.alts[0].texts!.length, n - 1);
    assert.ok(meter.work < 20 * n, `${meter.work} units of work`);
  });

  it('an enum of arrays whose items are an enum is checked by lookup, not by comparing every pair', () => {
    const words = Array.from({ length: 3_000 }, (_, i) => `w${i}`);
    const node = compileSchema({ type: 'array', items: { enum: words }, enum: [words, [...words.slice(1), 'nope'], ['w7', 'w8']] });
    assert.deepEqual(
      node.alts[0].texts!.map((t) => JSON.parse(t).length),
      [3_000, 2],
    );
  });

  it('satisfiability follows chains and cycles of required properties', () => {
    const defs: Record<string, unknown> = {};
    for (let i = 0; i < 25; i++) defs[`d${i}`] = { type: 'object', properties: { x: { $ref: `#/$defs/d${i + 1}` } }, required: ['x'] };
    defs.d25 = { type: 'string' };
    assert.equal(compileSchema({ $defs: defs, $ref: '#/$defs/d0' }).sat, true);
    defs.d25 = { type: 'object', properties: { x: { $ref: '#/$defs/d0' } }, required: ['x'] };
    assert.equal(compileSchema({ $defs: defs, $ref: '#/$defs/d0' }).sat, false, 'a cycle of required properties has no finite value');
  });
});

describe('a parsed body walked in slices', () => {
  it('finds nesting past the limit, and gives the event loop a turn every slice of values', async () => {
    let pauses = 0;
    const count = async () => {
      pauses++;
    };
    const ids = Array.from({ length: 1_000_000 }, (_, i) => i % 7);
    assert.equal(await nestedDeeperThan({ prompt: ids }, 128, count), false);
    assert.ok(pauses >= Math.floor(1_000_000 / WALK_SLICE), `${pauses} turns`);
    let deep: unknown = 1;
    for (let i = 0; i < 128; i++) deep = [deep];
    assert.equal(await nestedDeeperThan(deep, 128, count), false);
    assert.equal(await nestedDeeperThan([deep], 128, count), true);
    assert.equal(await nestedDeeperThan({ a: { b: [{ c: deep }] } }, 128, count), true);
  });
});

describe('the gate of parses and compiles', () => {
  it('runs at most its slots at once, the rest in order; a waiter whose client left leaves the line', async () => {
    const gate = new Gate(1);
    const order: number[] = [];
    let running = 0;
    let most = 0;
    const work = (i: number) => async () => {
      running++;
      most = Math.max(most, running);
      await new Promise((r) => setImmediate(r));
      order.push(i);
      running--;
      return i;
    };
    const gone = new AbortController();
    const runs = [gate.run(undefined, work(0)), gate.run(gone.signal, work(1)), gate.run(undefined, work(2))];
    assert.equal(gate.active, 1);
    assert.equal(gate.waiting, 2);
    gone.abort();
    assert.equal(gate.waiting, 1);
    const settled = await Promise.allSettled(runs);
    assert.deepEqual(
      settled.map((s) => s.status),
      ['fulfilled', 'rejected', 'fulfilled'],
    );
    assert.equal((settled[1] as PromiseRejectedResult).reason.status, 499);
    assert.deepEqual(order, [0, 2]);
    assert.equal(most, 1);
    assert.equal(gate.active, 0);
  });
});
