import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { table } from './measure.js';

/**
 * Whether this Node's relaxed-SIMD instructions give the answers the proposal defines, under each
 * of V8's compilers: a known-answer test on random inputs inside the deterministic ranges (the
 * second operand of the int8 dots below 128, no −32768 · −32768 in q15mulr), every call checked.
 * A kernel may use one only where it is right under every compiler a call can run on, since a
 * result that depends on the tier breaks bit-identical logits (docs/LEARNED.md).
 */
export interface RelaxedProbe {
  /** The module compiled (with `--experimental-wasm-relaxed-simd` on Node 20, which needs it). */
  available: boolean;
  calls: number;
  /** Calls whose result differed from the defined one, per instruction. */
  wrong: Record<RelaxedOp, number>;
}

export type RelaxedOp = 'i32x4.relaxed_dot_i8x16_i7x16_add_s' | 'i16x8.relaxed_dot_i8x16_i7x16_s' | 'i16x8.relaxed_q15mulr_s' | 'f32x4.relaxed_madd';

/** Each op's opcode after the 0xfd prefix, and how many v128 operands it takes from memory. */
const OPS: [RelaxedOp, number, number][] = [
  ['i32x4.relaxed_dot_i8x16_i7x16_add_s', 0x113, 3],
  ['i16x8.relaxed_dot_i8x16_i7x16_s', 0x112, 2],
  ['i16x8.relaxed_q15mulr_s', 0x111, 2],
  ['f32x4.relaxed_madd', 0x105, 3],
];

const leb = (n: number): number[] => {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n) b |= 0x80;
    out.push(b);
  } while (n);
  return out;
};

/** A module exporting `mem` and one function per op: f(a, b, c, out) stores op(v128 at a, at b[, at c]) at out. */
function probeModule(): Uint8Array {
  const simd = (op: number) => [0xfd, ...leb(op)];
  const load = (local: number) => [0x20, local, ...simd(0), 4, 0];
  const section = (id: number, body: number[]) => [id, ...leb(body.length), ...body];
  const bodies = OPS.map(([, op, operands]) => {
    const code = [0, 0x20, 3];
    for (let i = 0; i < operands; i++) code.push(...load(i));
    code.push(...simd(op), ...simd(11), 4, 0, 0x0b);
    return [...leb(code.length), ...code];
  });
  const exports = OPS.flatMap(([, ], i) => [1, 0x61 + i, 0, i]);
  return new Uint8Array([
    0, 0x61, 0x73, 0x6d, 1, 0, 0, 0,
    ...section(1, [1, 0x60, 4, 0x7f, 0x7f, 0x7f, 0x7f, 0]),
    ...section(3, [OPS.length, ...OPS.map(() => 0)]),
    ...section(5, [1, 0, 1]),
    ...section(7, [OPS.length + 1, ...exports, 3, 0x6d, 0x65, 0x6d, 2, 0]),
    ...section(10, [OPS.length, ...bodies.flat()]),
  ]);
}

/** The known-answer test in this process, `calls` random inputs per op. */
export function probeRelaxed(calls: number): RelaxedProbe {
  const wrong = Object.fromEntries(OPS.map(([name]) => [name, 0])) as Record<RelaxedOp, number>;
  let inst: WebAssembly.Instance;
  try {
    inst = new WebAssembly.Instance(new WebAssembly.Module(probeModule()));
  } catch {
    return { available: false, calls: 0, wrong };
  }
  const ex = inst.exports as Record<string, (a: number, b: number, c: number, out: number) => void> & { mem: WebAssembly.Memory };
  const [dotAdd, dot16, q15, madd] = OPS.map((_, i) => ex[String.fromCharCode(0x61 + i)]);
  const i8 = new Int8Array(ex.mem.buffer);
  const i16 = new Int16Array(ex.mem.buffer);
  const i32 = new Int32Array(ex.mem.buffer);
  const f32 = new Float32Array(ex.mem.buffer);
  let seed = 7;
  const rnd = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) >>> 8;
  // operands at bytes 0, 16, 32; results at 64
  for (let n = 0; n < calls; n++) {
    for (let i = 0; i < 16; i++) {
      i8[i] = (rnd() & 255) - 128;
      i8[16 + i] = rnd() & 127;
    }
    for (let l = 0; l < 4; l++) i32[8 + l] = (rnd() & 0xffff) - 32768;
    dotAdd(0, 16, 32, 64);
    for (let l = 0; l < 4; l++) {
      let s = i32[8 + l];
      for (let j = 0; j < 4; j++) s += i8[4 * l + j] * i8[16 + 4 * l + j];
      if (i32[16 + l] !== s) {
        wrong['i32x4.relaxed_dot_i8x16_i7x16_add_s']++;
        break;
      }
    }
    dot16(0, 16, 0, 64);
    for (let l = 0; l < 8; l++)
      if (i16[32 + l] !== i8[2 * l] * i8[16 + 2 * l] + i8[2 * l + 1] * i8[17 + 2 * l]) {
        wrong['i16x8.relaxed_dot_i8x16_i7x16_s']++;
        break;
      }
    for (let i = 0; i < 16; i++) i16[i] = (rnd() & 0xffff) - 32767;
    q15(0, 16, 0, 64);
    for (let l = 0; l < 8; l++)
      if (i16[32 + l] !== Math.floor((i16[l] * i16[8 + l] + 0x4000) / 32768)) {
        wrong['i16x8.relaxed_q15mulr_s']++;
        break;
      }
    for (let i = 0; i < 12; i++) f32[i] = (rnd() / 65536 - 128) * 1.1;
    madd(0, 16, 32, 64);
    // fused or not is the implementation's choice; anything else is wrong
    for (let l = 0; l < 4; l++) {
      const g = f32[16 + l];
      if (g !== Math.fround(f32[l] * f32[4 + l] + f32[8 + l]) && g !== Math.fround(Math.fround(f32[l] * f32[4 + l]) + f32[8 + l])) {
        wrong['f32x4.relaxed_madd']++;
        break;
      }
    }
  }
  return { available: true, calls, wrong };
}

export interface RelaxedBenchResult {
  node: string;
  rows: { compiler: string; flags: string[]; probe: RelaxedProbe }[];
}

/** Whether this Node compiles relaxed SIMD as it starts (Node 22 and later), or only behind a flag (Node 20). */
export function relaxedByDefault(): boolean {
  return WebAssembly.validate(probeModule());
}

/**
 * The probe in a fresh Node for each compiler setting (V8 reads these flags only at start-up).
 * `--experimental-wasm-relaxed-simd` is passed only where relaxed SIMD is not on already: Node 22
 * and later do not know the flag and refuse to start with it.
 */
export function benchRelaxed(calls = 200_000): RelaxedBenchResult {
  const self = fileURLToPath(import.meta.url);
  const on = relaxedByDefault();
  const flag = on ? [] : ['--experimental-wasm-relaxed-simd'];
  const settings: [string, string[]][] = [
    ...(on ? [] : ([['default, no flag', []]] as [string, string[]][])),
    ['default (Liftoff, then TurboFan)', flag],
    ['Liftoff only', [...flag, '--liftoff-only']],
    ['TurboFan only', [...flag, '--no-liftoff']],
  ];
  const rows = settings.map(([compiler, flags]) => {
    const r = spawnSync(process.execPath, [...flags, self, String(calls)], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`relaxed-SIMD probe (${compiler}) failed: ${r.stderr}`);
    return { compiler, flags, probe: JSON.parse(r.stdout) as RelaxedProbe };
  });
  return { node: process.version, rows };
}

export function renderRelaxedBench(r: RelaxedBenchResult): string {
  const ops = OPS.map(([name]) => name);
  return (
    `relaxed SIMD on Node ${r.node}: calls whose result differs from the defined one\n` +
    table(
      r.rows.map((x) => [x.compiler, x.probe.available ? String(x.probe.calls) : 'not available', ...ops.map((o) => (x.probe.available ? String(x.probe.wrong[o]) : '–'))]),
      ['compiler', 'calls', ...ops],
    )
  );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) process.stdout.write(JSON.stringify(probeRelaxed(Number(process.argv[2]) || 1000)));
