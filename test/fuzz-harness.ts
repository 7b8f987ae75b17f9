/**
 * The fuzz tests' watchdog: every case runs in a child process (test/fuzz-child.ts) that reports
 * one outcome per case, and this side adds what the child cannot say about itself — that it
 * hung, died, or grew past a memory bound. The time limit is generous and only tells a hang from
 * a slow case; it never asserts speed.
 */
import { type ChildProcess, fork } from 'node:child_process';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { WasteError } from '../src/util/errors.js';

/**
 * What one case came to. Found in the child: `error` (one clean WasteError), `same` (the answer
 * did not change), `flagged` (it changed, and `waste verify` reports the damage), `silent` (it
 * changed and verify passes), `ok` (parsed or decoded, and every value within its invariants),
 * `invalid` (parsed, but a value breaks an invariant), `crash` (any other exception, or an error
 * that is not one short line). Found here: `hang`, `crash` (the child died), `memory` (its
 * resident memory grew past the bound, or V8 ran out of heap).
 */
export type Outcome = 'error' | 'same' | 'flagged' | 'silent' | 'ok' | 'invalid' | 'hang' | 'crash' | 'memory';

export interface Verdict {
  outcome: Outcome;
  /** The error, the answer's digest, the invariant broken… */
  detail: string;
  /** Growth of the child's peak resident memory during the case, in bytes. */
  peak: number;
}

/** What the child sends back for one case. */
export interface ChildReply {
  id: number;
  outcome: Exclude<Outcome, 'hang' | 'memory'>;
  detail: string;
  peak: number;
}

/** What a child's handler returns for one case. */
export type CaseResult = Pick<ChildReply, 'outcome' | 'detail'>;

/** One WasteError of one short line is a clean refusal; anything else is a crash. */
export function refusal(e: unknown): { outcome: 'error' | 'crash'; detail: string } {
  if (e instanceof WasteError) {
    if (/[\r\n]/.test(e.message)) return { outcome: 'crash', detail: `an error of more than one line: ${e.message.slice(0, 300)}` };
    if (e.message.length > 600) return { outcome: 'crash', detail: `an error of ${e.message.length} characters: ${e.message.slice(0, 300)}…` };
    return { outcome: 'error', detail: e.message };
  }
  const err = e as Error;
  return { outcome: 'crash', detail: `${err?.name ?? typeof e}: ${String(err?.message ?? e).slice(0, 300)} ${(err?.stack ?? '').split('\n').slice(1, 3).join(' ').trim()}` };
}

/** Outcomes a fuzz test fails on. */
export const FAILURES: ReadonlySet<Outcome> = new Set(['silent', 'invalid', 'hang', 'crash', 'memory']);

export interface WatchdogOptions {
  /** Which handler the child runs the cases with (see test/fuzz-child.ts). */
  kind: string;
  /** Resident memory a case may add before it counts as runaway. */
  memoryBytes: number;
  /** A case that runs this long has hung (generous: this only classifies, it asserts no speed). */
  hangMs?: number;
  /** The child's V8 heap limit. */
  heapMb?: number;
}

const CHILD = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fuzz-child.js');

/** Runs cases one at a time in a child process, restarted after a hang or a death. */
export class Watchdog {
  private child: ChildProcess | undefined;
  private stderr = '';
  private next = 0;

  constructor(private readonly opts: WatchdogOptions) {}

  private start(): ChildProcess {
    const child = fork(CHILD, [this.opts.kind], {
      execArgv: [`--max-old-space-size=${this.opts.heapMb ?? 1024}`],
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      // structured cloning: a case's bytes travel as a Uint8Array
      serialization: 'advanced',
    });
    this.stderr = '';
    child.stderr!.on('data', (d: Buffer) => {
      // the tail is what tells an out-of-memory death from another
      this.stderr = (this.stderr + d.toString()).slice(-4000);
    });
    this.child = child;
    return child;
  }

  /** Run one case. `input` goes to the child's handler as it is (it must survive structured cloning). */
  run(input: unknown): Promise<Verdict> {
    const child = this.child && this.child.exitCode === null && this.child.signalCode === null ? this.child : this.start();
    const id = this.next++;
    return new Promise<Verdict>((resolve) => {
      const finish = (v: Verdict): void => {
        clearTimeout(timer);
        child.off('message', onMessage);
        child.off('exit', onExit);
        resolve(v);
      };
      const onMessage = (m: ChildReply): void => {
        if (m.id !== id) return;
        if (m.peak > this.opts.memoryBytes) finish({ outcome: 'memory', detail: `resident memory grew by ${mib(m.peak)} (bound ${mib(this.opts.memoryBytes)}); the case ended as ${m.outcome}: ${m.detail}`, peak: m.peak });
        else finish({ outcome: m.outcome, detail: m.detail, peak: m.peak });
      };
      const onExit = (code: number | null, signal: string | null): void => {
        this.child = undefined;
        const oom = /heap out of memory|Allocation failed|invalid array length|OOM/i.test(this.stderr);
        const tail = this.stderr.trim().split('\n').slice(-3).join(' | ').slice(0, 300);
        finish({ outcome: oom ? 'memory' : 'crash', detail: `the process died (${signal ?? `exit code ${code}`}): ${tail}`, peak: 0 });
      };
      const timer = setTimeout(() => {
        child.off('exit', onExit);
        child.kill('SIGKILL');
        this.child = undefined;
        finish({ outcome: 'hang', detail: `no answer after ${(this.opts.hangMs ?? 60_000) / 1000} s`, peak: 0 });
      }, this.opts.hangMs ?? 60_000);
      child.on('message', onMessage);
      child.on('exit', onExit);
      child.send({ id, input });
    });
  }

  close(): void {
    this.child?.kill();
    this.child = undefined;
  }
}

function mib(n: number): string {
  return `${(n / 2 ** 20).toFixed(1)} MiB`;
}

/** Counts of each outcome, and the failing cases by label. */
export class Tally {
  readonly counts: Partial<Record<Outcome, number>> = {};
  readonly failures: string[] = [];
  /** The most any case added to the child's resident memory. */
  maxPeak = 0;

  add(label: string, v: Verdict): void {
    this.counts[v.outcome] = (this.counts[v.outcome] ?? 0) + 1;
    this.maxPeak = Math.max(this.maxPeak, v.peak);
    if (FAILURES.has(v.outcome)) this.failures.push(`${label}: ${v.outcome}: ${v.detail}`);
  }

  count(o: Outcome): number {
    return this.counts[o] ?? 0;
  }

  toString(): string {
    return `${JSON.stringify(this.counts)}, at most ${mib(this.maxPeak)} more resident memory in a case`;
  }
}
