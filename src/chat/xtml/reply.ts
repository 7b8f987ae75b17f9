import type { ToolCall } from '../format.js';
import { CLOSE, OPEN, unescapeAttr } from './tags.js';
import { type CallIdMaker, type ReplyEvent, type ReplyReader, indexCallId } from '../reply.js';

/** The ids of K3's markers in the model's vocabulary. */
export interface XtmlMarkerIds {
  open: number;
  close: number;
  sep: number;
  end: number;
}

/** A tag header (what stands between `<|open|>` and `<|sep|>`): its name and attributes, read as leniently as the model may have written them. */
export function parseHeader(text: string): { name: string; attrs: Map<string, string> } {
  const attrs = new Map<string, string>();
  const t = text.trim();
  const sp = t.indexOf(' ');
  if (sp < 0) return { name: t, attrs };
  const rest = t.slice(sp + 1);
  let i = 0;
  while (i < rest.length) {
    while (i < rest.length && /\s/.test(rest[i])) i++;
    const eq = rest.indexOf('=', i);
    if (eq < 0) break;
    const key = rest.slice(i, eq).trim();
    let value: string;
    if (rest[eq + 1] === '"') {
      const end = rest.indexOf('"', eq + 2);
      value = end < 0 ? rest.slice(eq + 2) : rest.slice(eq + 2, end);
      i = end < 0 ? rest.length : end + 1;
    } else {
      const end = rest.indexOf(' ', eq + 1);
      value = end < 0 ? rest.slice(eq + 1) : rest.slice(eq + 1, end);
      i = end < 0 ? rest.length : end;
    }
    if (key) attrs.set(key, unescapeAttr(value));
  }
  return { name: t.slice(0, sp), attrs };
}

/**
 * An `argument` element's value back as JSON, by its `type` — the model's claim, so a value that
 * does not read as that type stays the text it is (a tool is better served by "3 or 4" than by a
 * number the parser made up).
 */
function typedValue(raw: string, type: string): unknown {
  if (type === 'string') return raw;
  if (type === 'null') return null;
  if (type === 'boolean') {
    const v = raw.trim().toLowerCase();
    return v === 'true' ? true : v === 'false' ? false : raw;
  }
  try {
    return JSON.parse(raw.trim());
  } catch {
    return raw;
  }
}

interface OpenCall {
  /** Which child kind carries its arguments: the first one seen (a `json` block, or `argument`s). */
  kind?: 'json' | 'args';
  args: Map<string, unknown>;
  done: boolean;
}

/**
 * Reads a K3 reply as it streams — `<|open|>think<|sep|>…`, `<|open|>response<|sep|>…`,
 * `<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|>…` — into reasoning, content and tool
 * calls. Structure is decided by token id alone: the four markers are structure when they arrive
 * as their reserved tokens, and the same characters spelled by ordinary tokens (a model quoting
 * `<|sep|>`) are text. Never throws on what the model wrote: an element closed that was never
 * opened, an argument outside a call, a reply cut mid-tag all end as text or as a dropped element;
 * an unfinished tag header is dropped, so markup never reaches the content.
 */
export class XtmlReplyReader implements ReplyReader {
  readonly byToken = true;
  readonly startsInReasoning: boolean;
  readonly calls: ToolCall[] = [];
  reasoning = '';
  content = '';
  private readonly stack: string[];
  private header: string | undefined;
  private headerKind: 'open' | 'close' = 'open';
  private arg: { key: string; type: string; text: string } | undefined;
  private inJson = false;
  private open: OpenCall | undefined;
  private done = false;
  private readonly tools: boolean;
  private readonly callId: CallIdMaker;

  constructor(
    private readonly ids: XtmlMarkerIds,
    opts: { channel: 'think' | 'response'; tools: boolean; callId?: CallIdMaker },
  ) {
    this.callId = opts.callId ?? indexCallId;
    // the generation prompt opened the message and a channel: the reply begins inside them
    this.stack = ['message', opts.channel];
    this.startsInReasoning = opts.channel === 'think';
    this.tools = opts.tools;
  }

  /** Inside the think element (its closing tag, until its separator, counts as inside). */
  get inReasoning(): boolean {
    return !this.done && this.stack[this.stack.length - 1] === 'think';
  }

  /** The message was closed by its end token (what follows is not read). */
  get finished(): boolean {
    return this.done;
  }

  push(token: number, text: string): ReplyEvent[] {
    const out: ReplyEvent[] = [];
    if (this.done) return out;
    const k = this.ids;
    if (token === k.end) {
      this.done = true;
      this.endCall(out);
      return out;
    }
    if (token === k.open || token === k.close) {
      // the decoder may hand a character completed just now along with the marker's text
      const own = token === k.open ? OPEN : CLOSE;
      if (text.endsWith(own)) this.literal(text.slice(0, -own.length), out);
      this.header = '';
      this.headerKind = token === k.open ? 'open' : 'close';
      return out;
    }
    if (token === k.sep) {
      // a separator with no header open: dropped, since text it became would be a marker in the content
      if (this.header === undefined) return out;
      const header = this.header;
      this.header = undefined;
      if (this.headerKind === 'open') this.openElement(header, out);
      else this.closeElement(header, out);
      return out;
    }
    this.literal(text, out);
    return out;
  }

  flush(): ReplyEvent[] {
    const out: ReplyEvent[] = [];
    this.header = undefined;
    this.endCall(out);
    return out;
  }

  private literal(text: string, out: ReplyEvent[]): void {
    if (!text) return;
    if (this.header !== undefined) {
      this.header += text;
      return;
    }
    if (this.inJson) {
      const call = this.open;
      if (!call || call.done) return;
      call.kind ??= 'json';
      if (call.kind !== 'json') return;
      const index = this.calls.length - 1;
      this.calls[index].arguments += text;
      out.push({ kind: 'arguments', index, text });
      return;
    }
    if (this.arg) {
      this.arg.text += text;
      return;
    }
    const top = this.stack[this.stack.length - 1];
    if (top === 'think') this.text('reasoning', text, out);
    // whitespace between elements, or the model talking where no channel is: not the answer
    else if (top === 'tools' || top === 'call' || top === 'argument' || top === 'json') return;
    else this.text('content', text, out);
  }

  private text(kind: 'reasoning' | 'content', text: string, out: ReplyEvent[]): void {
    if (kind === 'reasoning') this.reasoning += text;
    else this.content += text;
    const last = out[out.length - 1];
    if (last && last.kind === kind) last.text += text;
    else out.push({ kind, text });
  }

  private openElement(header: string, out: ReplyEvent[]): void {
    const { name, attrs } = parseHeader(header);
    const inCall = this.open !== undefined && !this.open.done;
    if (name === 'call' && this.tools) {
      this.endCall(out);
      const index = this.calls.length;
      const id = this.callId(index);
      const tool = attrs.get('tool') ?? '';
      this.calls.push({ id, name: tool, arguments: '' });
      this.open = { args: new Map(), done: false };
      out.push({ kind: 'call', index, id, name: tool });
    } else if (name === 'argument' && inCall) this.arg = { key: attrs.get('key') ?? '', type: attrs.get('type') ?? '', text: '' };
    else if (name === 'json' && inCall) this.inJson = true;
    this.stack.push(name);
  }

  private closeElement(header: string, out: ReplyEvent[]): void {
    const { name } = parseHeader(header);
    if (name === 'argument') this.closeArgument();
    else if (name === 'json') this.inJson = false;
    else if (name === 'call') this.endCall(out);
    // unwind to the element closed; a close for one never opened changes nothing
    const at = this.stack.lastIndexOf(name);
    if (at >= 0) this.stack.length = at;
    else if (!name && this.stack.length) this.stack.pop();
  }

  private closeArgument(): void {
    const a = this.arg;
    this.arg = undefined;
    const call = this.open;
    if (!a || !a.key || !call || call.done) return;
    call.kind ??= 'args';
    if (call.kind === 'args') call.args.set(a.key, typedValue(a.text, a.type));
  }

  /** A call's arguments are complete: typed `argument`s go out as one JSON object, in the order written. */
  private endCall(out: ReplyEvent[]): void {
    if (this.arg) this.closeArgument();
    this.inJson = false;
    const call = this.open;
    if (!call || call.done) return;
    call.done = true;
    if (call.kind === 'json') return;
    const index = this.calls.length - 1;
    const text = `{${[...call.args].map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`).join(',')}}`;
    this.calls[index].arguments = text;
    out.push({ kind: 'arguments', index, text });
  }
}
