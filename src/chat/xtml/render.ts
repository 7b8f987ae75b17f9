import { WasteError, excerpt } from '../../util/errors.js';
import { isObject } from '../../util/fields.js';
import { normalizeArguments, resortToolResults } from './normalize.js';
import { pyDumps, pyStrip } from './pyjson.js';
import { END_OF_MSG, IMAGE_PLACEHOLDER, type Segment, closeTag, imagePrompt, openTag, push } from './tags.js';

/**
 * Kimi K3's prompt renderer: a conversation in OpenAI's shape to XTML segments, as the release's
 * `encoding_k3.py` renders it (K3 ships no Jinja template). Written from the published description
 * of that program; where it is surprising (an effort the prose lists and the code refuses, tool
 * results re-sorted, no note for a named tool choice) this does the same, because a prompt other
 * than the one the model was trained on is wrong in ways no test sees. One deliberate difference:
 * a message of a role the format does not have is an error here, where the release drops it.
 */
export interface XtmlRequest {
  /** OpenAI-shaped messages: role, content (text or parts), name, reasoning_content, tool_calls, tool_call_id. */
  messages: readonly unknown[];
  /** Tool declarations (OpenAI's shape), written as JSON Schema in a system message. */
  tools?: unknown;
  /** "required" and "none" add a system note; "auto" and a named function add nothing. */
  toolChoice?: unknown;
  /** `{type: "json_object"}` or `{type: "json_schema", json_schema: {schema}}`: a system note (the format enforces nothing). */
  responseFormat?: unknown;
  /** The think channel: on by default, as in the release. */
  thinking?: boolean;
  /** "low", "high" or "max" (with thinking on): a system note. */
  thinkingEffort?: string | null;
  /** End with the assistant's unclosed turn (default true). */
  addGenerationPrompt?: boolean;
  /**
   * The final message is the assistant's and is continued (a prefill of the reply): rendered after
   * the notes, where the generation prompt would be, with its response element left open after its
   * content. Not the release's: its renderer closes every message.
   */
  continueFinal?: boolean;
  /** The source size of each image, in order. Without it, an image part is the placeholder and a placeholder in text stays text. */
  images?: readonly { width: number; height: number }[];
  /**
   * Whether the image placeholder written in text stands for an image (the release's rule, the
   * default) or stays text: a caller whose images are all explicit parts keeps what someone typed
   * from taking an image's place.
   */
  placeholdersInText?: boolean;
}

/** The efforts the release accepts; its note names `medium` too and its code refuses it, so it is refused here. */
export const THINKING_EFFORTS = ['low', 'high', 'max'] as const;

type Obj = Record<string, unknown>;

const fail = (message: string) => new WasteError('E_FORMAT', message);

/** Hands out one media block per image, in order. */
class Images {
  private used = 0;
  constructor(
    private readonly prompts: string[] | undefined,
    readonly inText = true,
  ) {}
  get known(): boolean {
    return this.prompts !== undefined;
  }
  next(at: string): string {
    if (!this.prompts) return IMAGE_PLACEHOLDER;
    if (this.used >= this.prompts.length) throw fail(`${at}: more images than the ${this.prompts.length} whose size was given`);
    return this.prompts[this.used++];
  }
  done(): void {
    if (this.prompts && this.used !== this.prompts.length) throw fail(`${this.prompts.length} image sizes were given for ${this.used} images`);
  }
}

/** Python's truth: what `if x:` lets through (an empty list, object or string does not). */
function truthy(v: unknown): boolean {
  if (Array.isArray(v)) return v.length > 0;
  if (isObject(v)) return Object.keys(v).length > 0;
  return Boolean(v);
}

function str(v: unknown, at: string): string {
  if (typeof v !== 'string') throw fail(`${at} must be a string`);
  return v;
}

/** Text a caller wrote: plain, with a media block where each image placeholder is (when sizes were given). */
function appendText(out: Segment[], text: string, images: Images, at: string): void {
  if (!images.known || !images.inText || !text.includes(IMAGE_PLACEHOLDER)) return push(out, text);
  const parts = text.split(IMAGE_PLACEHOLDER);
  parts.forEach((part, i) => {
    push(out, part);
    if (i < parts.length - 1) push(out, images.next(at), true);
  });
}

function appendContent(out: Segment[], content: unknown, images: Images, at: string): void {
  if (content === null || content === undefined) return;
  if (typeof content === 'string') return appendText(out, content, images, at);
  if (!Array.isArray(content)) throw fail(`${at} must be a string, a list of parts or null`);
  content.forEach((part, i) => {
    const where = `${at}[${i}]`;
    if (!isObject(part) || typeof part.type !== 'string') throw fail(`${where} must be an object with a "type"`);
    if (part.type === 'image' || part.type === 'image_url') push(out, images.next(where), true);
    else appendText(out, str(part.text, `${where}.text`), images, where);
  });
}

/** A note the renderer adds itself as a system message with a `type` (how K3 is told tool_choice and the like). */
function note(out: Segment[], type: string, body: string): void {
  openTag(out, 'message', [
    ['role', 'system'],
    ['type', type],
  ]);
  push(out, pyStrip(body));
  closeTag(out, 'message');
  push(out, END_OF_MSG, true);
}

function toolDeclare(out: Segment[], tools: unknown, dynamic: boolean): void {
  const json = pyDumps(tools, { sort: true, compact: true });
  const body = dynamic
    ? '## New Tools Available\nThe system dynamically extends the toolset via lazy-loading.\nYou have access to all existing and extended tools.\nHere are the specs for the extended tools.\n\n'
    : '# Tools\nHere are the available tools, described in JSONSchema.\n\n';
  openTag(out, 'message', [
    ['role', 'system'],
    ['type', 'tool-declare'],
  ]);
  push(out, `${body}\`\`\`json\n${json}\n\`\`\``);
  closeTag(out, 'message');
  push(out, END_OF_MSG, true);
}

/** An `argument` element's type: what the JSON value is. */
function typeOf(v: unknown): string {
  if (typeof v === 'boolean') return 'boolean';
  if (v === null) return 'null';
  if (typeof v === 'number') return 'number';
  if (typeof v === 'string') return 'string';
  if (isObject(v)) return 'object';
  return 'array';
}

function assistant(out: Segment[], m: Obj, images: Images, thinking: boolean, at: string, open = false): void {
  // with thinking on every assistant message has the think element, empty or not; off, none at all
  if (thinking) {
    const reasoning = truthy(m.reasoning_content) ? m.reasoning_content : m.reasoning;
    openTag(out, 'think');
    if (reasoning !== undefined && reasoning !== null) {
      const r = str(reasoning, `${at}.reasoning_content`);
      if (pyStrip(r)) appendText(out, r, images, `${at}.reasoning_content`);
    }
    closeTag(out, 'think');
  }
  openTag(out, 'response');
  appendContent(out, m.content, images, `${at}.content`);
  if (open) {
    if (truthy(m.tool_calls)) throw fail(`${at}: a final assistant message is continued as the reply's beginning, and one with tool calls cannot be: send their results as tool messages`);
    return;
  }
  closeTag(out, 'response');
  const calls = m.tool_calls;
  if (!truthy(calls)) return;
  if (!Array.isArray(calls)) throw fail(`${at}.tool_calls must be a list`);
  openTag(out, 'tools');
  calls.forEach((c, i) => {
    const where = `${at}.tool_calls[${i}]`;
    if (!isObject(c)) throw fail(`${where}: a tool call must be an object`);
    const fn = 'function' in c ? c.function : c;
    if (!isObject(fn) || typeof fn.name !== 'string' || !fn.name) throw fail(`${where}: a tool call needs a non-empty function name`);
    openTag(out, 'call', [
      ['tool', fn.name],
      ['index', String(i + 1)],
    ]);
    const { args, raw } = normalizeArguments(fn.arguments, `${where}.function.arguments`);
    if (raw !== undefined) {
      openTag(out, 'json', [['type', 'object']]);
      appendText(out, raw, images, where);
      closeTag(out, 'json');
    } else
      for (const [key, value] of Object.entries(args)) {
        openTag(out, 'argument', [
          ['key', key],
          ['type', typeOf(value)],
        ]);
        // a string is written bare (the type says what it is), anything else as JSON
        appendText(out, typeof value === 'string' ? value : pyDumps(value), images, where);
        closeTag(out, 'argument');
      }
    closeTag(out, 'call');
  });
  closeTag(out, 'tools');
}

/** The schema inside a response_format, from the shapes clients send (`json_schema.schema`, `json_schema.json_schema`, or `json_schema` itself). */
function responseSchema(rf: Obj): unknown {
  const js = rf.json_schema;
  if (js === undefined || js === null) return null;
  if (!isObject(js)) return js;
  return 'schema' in js ? js.schema : 'json_schema' in js ? js.json_schema : js;
}

function responseFormatNote(out: Segment[], rf: unknown): void {
  const type = isObject(rf) ? ('type' in rf ? rf.type : rf) : rf;
  const lead = 'Your response must be raw JSON data without markdown code blocks (```json) or any additional formatting.';
  if (type === 'json_object') note(out, 'response-format', `The system is invoked with \`response_format=json_object\`.\n${lead}`);
  else if (type === 'json_schema') {
    const schema = pyDumps(isObject(rf) ? (responseSchema(rf) ?? null) : null, { sort: true, compact: true });
    note(out, 'response-format', `The system is invoked with \`response_format=json_schema\`.\n${lead}\nThe JSON data must match the following schema:\n\`\`\`json\n${schema}\n\`\`\``);
  }
}

function imagePrompts(images: XtmlRequest['images']): string[] | undefined {
  return images?.map((s, i) => {
    const ok = (n: unknown) => Number.isInteger(n) && (n as number) >= 1 && (n as number) < 1e9;
    if (!isObject(s) || !ok(s.width) || !ok(s.height)) throw fail(`images[${i}] must be {width, height} in pixels, whole numbers from 1`);
    return imagePrompt(s.width as number, s.height as number);
  });
}

/**
 * The segments of a conversation, in K3's order: tool declarations, the thinking-effort note, the
 * messages, the tool_choice and response_format notes (last, as they describe this request), then
 * the assistant's unclosed turn with its think (or response) channel open.
 */
export function renderXtml(req: XtmlRequest, trace?: { spans: [number, number][] }): Segment[] {
  const thinking = req.thinking ?? true;
  if (!Array.isArray(req.messages)) throw fail('messages must be a list');
  const messages = resortToolResults(req.messages);
  const images = new Images(imagePrompts(req.images), req.placeholdersInText ?? true);
  const out: Segment[] = [];
  if (req.tools !== undefined && req.tools !== null && !Array.isArray(req.tools)) throw fail('tools must be a list');
  if (truthy(req.tools)) toolDeclare(out, req.tools, false);
  const effort = req.thinkingEffort;
  if (thinking && effort !== undefined && effort !== null) {
    if (!(THINKING_EFFORTS as readonly unknown[]).includes(effort))
      throw fail(`thinking_effort ${excerpt(String(JSON.stringify(effort)))} is not one K3 accepts (${THINKING_EFFORTS.join(', ')})`);
    note(
      out,
      'thinking-effort',
      '`thinking_effort` guides on how much to think in your thinking channel (not including the response channel), supported values include `low`, `medium`, `high`, and `max`.\n' +
        `Now the system is invoked with \`thinking_effort=${effort}\`.`,
    );
  }
  let calls: unknown;
  let toolIndex = 0;
  const named = (m: Obj, role: string, at: string): [string, string][] => [['role', role], ...(truthy(m.name) ? ([['name', str(m.name, `${at}.name`)]] as [string, string][]) : [])];
  const last = messages.length - 1;
  const continued = req.continueFinal ? messages[last] : undefined;
  if (req.continueFinal && !(isObject(continued) && continued.role === 'assistant')) throw fail('only a final assistant message can be continued');
  messages.forEach((m, i) => {
    const at = `messages[${i}]`;
    const start = out.length;
    // the continued message comes after the notes, where the generation prompt would be
    if (continued && i === last) return;
    if (!isObject(m)) throw fail(`${at} must be an object`);
    const role = m.role;
    if (role === 'user' || (role === 'system' && !truthy(m.tools))) {
      openTag(out, 'message', named(m, role, at));
      appendContent(out, m.content, images, `${at}.content`);
      closeTag(out, 'message');
      push(out, END_OF_MSG, true);
    } else if (role === 'system') {
      if (!Array.isArray(m.tools)) throw fail(`${at}.tools must be a list`);
      toolDeclare(out, m.tools, true);
    } else if (role === 'tool') {
      toolIndex++;
      let name: unknown = 'tool' in m ? m.tool : m.name;
      if ((name === undefined || name === null) && Array.isArray(calls) && toolIndex <= calls.length) {
        const c = calls[toolIndex - 1];
        const fn = isObject(c) ? ('function' in c ? c.function : c) : undefined;
        name = isObject(fn) ? fn.name : undefined;
      }
      if (name === undefined || name === null) throw fail(`${at}: a tool message needs the name of its tool: "tool" or "name", or a tool_call_id (or position) matching the assistant's call`);
      openTag(out, 'message', [
        ['role', 'tool'],
        ['tool', str(name, `${at}.tool`)],
        ['index', String(toolIndex)],
      ]);
      appendContent(out, m.content, images, `${at}.content`);
      closeTag(out, 'message');
      push(out, END_OF_MSG, true);
    } else if (role === 'assistant') {
      calls = m.tool_calls;
      toolIndex = 0;
      openTag(out, 'message', named(m, 'assistant', at));
      assistant(out, m, images, thinking, at);
      closeTag(out, 'message');
      push(out, END_OF_MSG, true);
    } else throw fail(`${at}.role ${excerpt(String(JSON.stringify(role)))} is not one of K3's: system, user, assistant, tool`);
    // where each message's segments are (re-sorting moves tool results only within their run)
    trace?.spans.push([start, out.length]);
  });
  if (req.toolChoice === 'required') note(out, 'tool-choice', 'The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.');
  else if (req.toolChoice === 'none') note(out, 'tool-choice', 'The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.');
  responseFormatNote(out, req.responseFormat);
  if (isObject(continued)) {
    const start = out.length;
    openTag(out, 'message', named(continued, 'assistant', `messages[${last}]`));
    assistant(out, continued, images, thinking, `messages[${last}]`, true);
    trace?.spans.push([start, out.length]);
  } else if (req.addGenerationPrompt ?? true) {
    // handed over unclosed: the model continues the message, in the channel opened for it
    openTag(out, 'message', [['role', 'assistant']]);
    openTag(out, thinking ? 'think' : 'response');
  }
  images.done();
  return out;
}
