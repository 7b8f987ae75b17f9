import { type Command, Option } from 'commander';
import type { ReplyEvent } from '../chat/reply.js';

/** The reasoning switches of `run` and `chat`. */
export interface ThinkingFlags {
  think?: boolean;
  effort?: string;
}

export function addThinkingOptions(cmd: Command): Command {
  return cmd
    .option('--think', "reason before answering, for models that do (the model's default when neither is given: on for K3)")
    .option('--no-think', 'answer without reasoning')
    .addOption(new Option('--effort <e>', 'how hard to reason (K3: low, high, max — minimal → low, medium → high; default max)').choices(['minimal', 'low', 'medium', 'high', 'max']));
}

export function thinkingOptions(o: ThinkingFlags): { thinking?: boolean; effort?: string } {
  return { ...(o.think !== undefined ? { thinking: o.think } : {}), ...(o.effort !== undefined ? { effort: o.effort } : {}) };
}

/**
 * Prints a reply as it streams: the content to `out`; the reasoning to standard error (dimmed on
 * a terminal), so a redirected stdout holds the answer alone.
 */
export class ReplyPrinter {
  private reasoning = false;
  /** Some content that is not whitespace was printed. */
  shown = false;

  constructor(private readonly out: (s: string) => void) {}

  write(e: ReplyEvent): void {
    if (e.kind === 'reasoning') {
      process.stderr.write(process.stderr.isTTY ? `\x1b[2m${e.text}\x1b[22m` : e.text);
      this.reasoning = true;
    } else if (e.kind === 'content') {
      if (this.reasoning) process.stderr.write('\n');
      this.reasoning = false;
      this.out(e.text);
      this.shown ||= e.text.trim().length > 0;
    }
  }

  /** The reply is over: end a reasoning line that nothing followed. */
  end(): void {
    if (this.reasoning) process.stderr.write('\n');
    this.reasoning = false;
  }
}
