/**
 * The child process of test/fuzz-harness.ts: runs cases one at a time with the handler named on
 * its command line, and answers each with its outcome and how much its peak resident memory grew
 * (Linux's VmHWM, reset before each case through /proc/self/clear_refs).
 */
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import { WasteError } from '../src/util/errors.js';
import { type CaseResult, type ChildReply, refusal } from './fuzz-harness.js';

type Result = CaseResult;
type Handler = (input: any) => Promise<Result> | Result;

// ---- memory ------------------------------------------------------------------------------------

function statusKb(field: string): number | undefined {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(fs.readFileSync('/proc/self/status', 'utf8'));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** Start a fresh peak; false where the kernel does not let it be reset (then the resident size after the case stands in). */
function resetPeak(): boolean {
  try {
    fs.writeFileSync('/proc/self/clear_refs', '5');
    return true;
  } catch {
    return false;
  }
}

const rss = (): number => statusKb('VmRSS') ?? process.memoryUsage().rss;

function openFds(): number {
  try {
    return fs.readdirSync('/proc/self/fd').length;
  } catch {
    return 0;
  }
}

// ---- handlers ----------------------------------------------------------------------------------

/** Cases that show the watchdog tells every outcome apart. */
const selftest: Handler = async (what: string) => {
  switch (what) {
    case 'error':
      throw new WasteError('E_FORMAT', 'fuzz: a clean refusal');
    case 'throw':
      throw new TypeError('fuzz: not a WasteError');
    case 'hang':
      for (;;);
    case 'die':
      process.abort();
    case 'memory': {
      const hog: Uint8Array[] = [];
      for (let i = 0; i < 8; i++) hog.push(new Uint8Array(32 << 20).fill(1));
      return { outcome: 'ok', detail: `held ${hog.length * 32} MiB` };
    }
    case 'heap': {
      const hog: string[][] = [];
      for (;;) hog.push(new Array(1 << 16).fill('x'.repeat(8)));
    }
  }
  return { outcome: 'ok', detail: what };
};

/** Runs `waste verify DIR -q` in this process, as bin/waste.js would: its exit code and what it wrote. */
async function wasteVerify(dir: string): Promise<{ code: number; out: string }> {
  const { main } = await import('../src/cli/main.js');
  let out = '';
  const [stdout, stderr] = [process.stdout.write, process.stderr.write];
  const capture = (chunk: string | Uint8Array): boolean => {
    out += typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString();
    return true;
  };
  process.stdout.write = capture as typeof process.stdout.write;
  process.stderr.write = capture as typeof process.stderr.write;
  try {
    return { code: await main(['node', 'waste', 'verify', dir, '-q']), out: out.trim().replace(/\s*\n\s*/g, ' | ') };
  } finally {
    process.stdout.write = stdout;
    process.stderr.write = stderr;
    process.exitCode = undefined;
  }
}

/**
 * A damaged container: the answer is the token ids of `text` and the logits after them (one
 * thread, no cache warming, so the same bytes give the same bits; the engine held to `budget`
 * bytes); `reference` is the undamaged container's, or '' to compute it.
 */
const container: Handler = async ({ dir, text, reference, budget }: { dir: string; text: string; reference: string; budget: number }) => {
  const { Model } = await import('../src/api/model.js');
  let digest: string;
  try {
    const m = await Model.open(dir, { threads: 1, ioThreads: 0, warm: false, budget });
    try {
      const ids = m.tokenize(text);
      const logits = await m.newSession({ maxContext: 64 }).forward(ids);
      digest = crypto.createHash('sha256').update(Int32Array.from(ids)).update(new Uint8Array(logits.buffer, logits.byteOffset, logits.byteLength)).digest('hex');
    } finally {
      await m.close();
    }
  } catch (e) {
    return refusal(e);
  }
  if (!reference || digest === reference) return { outcome: 'same', detail: digest };
  const v = await wasteVerify(dir);
  if (/internal error/.test(v.out)) return { outcome: 'crash', detail: `waste verify: ${v.out}` };
  return v.code === 0 ? { outcome: 'silent', detail: `the answer changed and waste verify says: ${v.out}` } : { outcome: 'flagged', detail: v.out };
};

const HANDLERS: Record<string, () => Promise<Handler>> = {
  selftest: async () => selftest,
  container: async () => container,
  image: async () => (await import('./fuzz-image-case.js')).imageCase,
  gguf: async () => (await import('./fuzz-gguf-case.js')).ggufCase,
};

const kind = process.argv[2];
const handler = await HANDLERS[kind]();

process.on('message', async ({ id, input }: { id: number; input: unknown }) => {
  const fds = openFds();
  const before = rss();
  const reset = resetPeak();
  let result: Result;
  try {
    result = await handler(input);
  } catch (e) {
    result = refusal(e);
  }
  const peak = Math.max(0, (reset ? (statusKb('VmHWM') ?? rss()) : rss()) - before);
  // a case that leaves a file open loses something each time: a server would run out of descriptors
  const leaked = openFds() - fds;
  if (leaked > 0 && result.outcome !== 'crash') result = { outcome: 'crash', detail: `${leaked} file descriptor(s) left open; the case ended as ${result.outcome}: ${result.detail}` };
  process.send!({ id, ...result, peak } satisfies ChildReply);
});
