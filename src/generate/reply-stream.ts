import type { ReplyEvent, ReplyReader } from '../chat/reply.js';
import { StopMatcher } from './stop.js';

/**
 * A reply's pieces with the caller's stop strings matched on the text a person reads — the
 * reasoning and the content, each apart — rather than on the markup, for readers that decide
 * structure by token id (`byToken`). When a stop string appears the text before it goes out, the
 * rest is dropped and `stopped` names it; the caller then ends the generation. Tool-call
 * arguments are never matched (a stop string is about prose). Held-back text goes out before a
 * call starts, since the content cannot continue past it.
 */
export class ReplyStream {
  private readonly matchers: Record<'reasoning' | 'content', StopMatcher>;
  /** The stop string that ended the reply, once one has. */
  stopped: string | undefined;
  reasoning = '';
  content = '';

  constructor(
    readonly reader: ReplyReader,
    stops: readonly string[],
  ) {
    this.matchers = { reasoning: new StopMatcher(stops), content: new StopMatcher(stops) };
  }

  push(token: number, text: string): ReplyEvent[] {
    return this.pass(this.reader.push(token, text));
  }

  flush(): ReplyEvent[] {
    const out = this.pass(this.reader.flush());
    if (this.stopped === undefined) for (const kind of ['reasoning', 'content'] as const) this.emit(kind, this.matchers[kind].flush(), out);
    return out;
  }

  private pass(events: ReplyEvent[]): ReplyEvent[] {
    const out: ReplyEvent[] = [];
    for (const e of events) {
      if (this.stopped !== undefined) break;
      if (e.kind === 'reasoning' || e.kind === 'content') {
        const m = this.matchers[e.kind];
        this.emit(e.kind, m.push(e.text), out);
        if (m.done) this.stopped = m.matched;
      } else {
        if (e.kind === 'call') this.emit('content', this.matchers.content.flush(), out);
        out.push(e);
      }
    }
    return out;
  }

  private emit(kind: 'reasoning' | 'content', text: string, out: ReplyEvent[]): void {
    if (!text) return;
    this[kind] += text;
    const last = out[out.length - 1];
    if (last && last.kind === kind) last.text += text;
    else out.push({ kind, text });
  }
}
