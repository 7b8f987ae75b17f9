import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Command } from 'commander';
import { architecture, architectureOf } from '../../model/registry.js';
import { ApiError } from '../../server/errors.js';
import { ChatCompletionBody, chatTurn, parseBody } from '../../server/openai-request.js';
import { textOnly } from '../../server/image-parts.js';
import { promptOptions } from '../../server/prompt-options.js';
import { type PromptSegment, encodeSegments, loadChatFormat } from '../../chat/format.js';
import { requireTokenizer } from '../../tokenizer/load.js';
import { prompt, tokenizeXtml } from '../../chat/xtml/format.js';
import { renderXtml } from '../../chat/xtml/render.js';
import { WasteError, quoted } from '../../util/errors.js';
import { Fields, isObject } from '../../util/fields.js';
import { readInput, readJson } from '../../util/read.js';
import { modelOrDemo } from '../default-model.js';

const FIELDS = ['messages', 'tools', 'tool_choice', 'response_format', 'thinking', 'thinking_effort', 'add_generation_prompt', 'image_sizes', 'system'];
/**
 * What else an OpenAI chat-completions or an Anthropic messages body carries that does not change
 * the prompt (the model's name, sampling, limits, streaming): accepted and ignored, so a body saved
 * from a client renders as it is.
 */
const IGNORED = new Set([
  'model', 'stream', 'stream_options', 'max_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'top_k', 'min_p',
  'presence_penalty', 'frequency_penalty', 'repetition_penalty', 'seed', 'stop', 'stop_sequences', 'logit_bias', 'n',
  'logprobs', 'top_logprobs', 'user', 'metadata', 'store', 'service_tier', 'parallel_tool_calls', 'thinking_budget_tokens',
]);
/** Fields that shape the prompt on the server's path (every format but K3's XTML): taken there as the server takes them. */
const SERVER_FIELDS = ['reasoning_effort', 'reasoning', 'chat_template_kwargs'];

const HELP = `
FILE is a JSON object: "messages" (OpenAI's shape, content parts included), and optionally "tools",
"tool_choice", "response_format", "thinking" (true/false), "thinking_effort", "add_generation_prompt"
(default true) and, for K3, "image_sizes" ([[width, height], …] in pixels, one per image). An OpenAI
or Anthropic request body may be given as it is: "system" (Anthropic's) opens the messages, and the
fields that do not change the prompt ("model", "max_tokens", "temperature", "stream"…) are ignored;
for any model but K3, "reasoning_effort", "reasoning" and "chat_template_kwargs" act as on the server.
A final assistant message is continued, as the server continues it (a prefill of the reply):
rendered up to the end of its content and left open; with "add_generation_prompt": false it is
closed instead.

For a Kimi K3 model these are the release renderer's own inputs, rendered as its encoding_k3.py
renders them: thinking on unless false, and no effort note without "thinking_effort" (the server and
the CLI write "max" when thinking is on and no effort is named); --json's segments are cut exactly
as it cuts them, each tokenized on its own. For any other model the request goes through the server's
path (thinking → the template's thinking/enable_thinking, thinking_effort → reasoning_effort), and
--json's segments are the ones this engine's encoder tokenizes apart: the template's markup (markup
mode) and each message's text (plain mode). A Jinja template is rendered as Hugging Face's
apply_chat_template renders it: with the tokenizer's bos_token and eos_token, tools (or none),
add_generation_prompt and the thinking variables.`;

/** The architecture a model directory declares (its manifest's config, or a checkpoint's config.json), without opening it. */
function archOf(dir: string): string | undefined {
  const manifest = path.join(dir, 'manifest.json');
  const config = path.join(dir, 'config.json');
  if (fs.existsSync(manifest)) {
    const doc = readJson(manifest);
    return architectureOf(Fields.root(manifest, isObject(doc) ? doc.config : undefined)).id;
  }
  if (fs.existsSync(config)) return architectureOf(Fields.root(config, readJson(config))).id;
  return undefined;
}

function readRequest(file: string): Record<string, unknown> {
  const bytes = readInput(file === '-' ? 0 : file);
  let doc: unknown;
  try {
    doc = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch (e) {
    throw new WasteError('E_ARG', `${file}: not a JSON request (${(e as Error).message})`);
  }
  if (!isObject(doc)) throw new WasteError('E_ARG', `${file}: the request must be a JSON object`);
  const known = [...FIELDS, ...SERVER_FIELDS];
  for (const k of Object.keys(doc))
    if (!known.includes(k) && !IGNORED.has(k)) throw new WasteError('E_ARG', `${file}: unknown field ${quoted(k)} (a request has ${FIELDS.join(', ')}, and ${SERVER_FIELDS.join(', ')} for formats other than K3's)`);
  if (!Array.isArray(doc.messages)) throw new WasteError('E_ARG', `${file}: "messages" must be a list of messages`);
  const out: Record<string, unknown> = {};
  for (const k of known) if (doc[k] !== undefined) out[k] = doc[k];
  // Anthropic's form of thinking: {"type": "enabled" | "disabled", …}
  if (isObject(out.thinking) && (out.thinking.type === 'enabled' || out.thinking.type === 'disabled')) out.thinking = out.thinking.type === 'enabled';
  for (const k of ['thinking', 'add_generation_prompt'])
    if (out[k] !== undefined && out[k] !== null && typeof out[k] !== 'boolean') throw new WasteError('E_ARG', `${file}: "${k}" must be true or false`);
  // Anthropic's system prompt, as the server's Messages route takes it: the first message
  if (out.system !== undefined && out.system !== null) out.messages = [{ role: 'system', content: systemText(out.system, file) }, ...(doc.messages as unknown[])];
  delete out.system;
  return out;
}

/** Anthropic's `system`: a string or a list of text blocks (joined by line breaks, as the server joins them). */
function systemText(v: unknown, file: string): string {
  if (typeof v === 'string') return v;
  if (Array.isArray(v) && v.every((b) => isObject(b) && b.type === 'text' && typeof b.text === 'string')) return v.map((b) => b.text as string).join('\n');
  throw new WasteError('E_ARG', `${file}: "system" must be a string or a list of text blocks`);
}

/** The request in K3's format: the release renderer's inputs as they are. */
function xtmlSegments(doc: Record<string, unknown>): PromptSegment[] {
  const sizes = doc.image_sizes;
  if (sizes !== undefined && !(Array.isArray(sizes) && sizes.every((s) => Array.isArray(s) && s.length === 2)))
    throw new WasteError('E_FORMAT', '"image_sizes" must be a list of [width, height] pairs');
  return renderXtml({
    messages: doc.messages as unknown[],
    tools: doc.tools,
    toolChoice: doc.tool_choice,
    responseFormat: doc.response_format,
    thinking: (doc.thinking as boolean | null) ?? undefined,
    thinkingEffort: doc.thinking_effort as string | null | undefined,
    addGenerationPrompt: (doc.add_generation_prompt as boolean | null) ?? undefined,
    // a final assistant message is continued, as the server does (a prefill of the reply)
    continueFinal: (doc.add_generation_prompt ?? true) !== false && (doc.messages as { role?: unknown }[]).at(-1)?.role === 'assistant',
    images: (sizes as [number, number][] | undefined)?.map(([width, height]) => ({ width, height })),
  }).map(prompt);
}

export function registerTemplate(program: Command): void {
  program
    .command('template')
    .description("print the prompt a request renders to in a model's chat format (K3's XTML, a Jinja template, chat.json), without loading weights")
    .argument('[model]', 'a model (directory or name; default: the demo model)')
    .requiredOption('--request <file>', 'the request, a JSON file (- for standard input)')
    .option('--json', 'print {"segments": [[text, is_markup], …], "ids": […]}', false)
    .addHelpText('after', HELP)
    .action((model: string | undefined, o: { request: string; json: boolean }) => {
      const dir = modelOrDemo(model);
      const tok = requireTokenizer(dir);
      const arch = archOf(dir);
      const format = loadChatFormat(dir, { native: arch ? architecture(arch).chatFormat : undefined });
      const doc = readRequest(o.request);
      let segments: PromptSegment[];
      let ids: number[];
      try {
        if (format.syntax.tools === 'xtml') {
          // K3's renderer takes its own inputs: the server's names for them would be silently lost
          const other = SERVER_FIELDS.find((k) => doc[k] !== undefined);
          if (other) throw new WasteError('E_FORMAT', `"${other}" is the server's; K3's format takes "thinking" and "thinking_effort" (its renderer's own inputs)`);
          segments = xtmlSegments(doc);
          ids = tokenizeXtml(tok, segments);
        } else {
          if (doc.image_sizes !== undefined) throw new WasteError('E_FORMAT', `"image_sizes": this model's format (${format.source}) has no images`);
          const { thinking_effort, add_generation_prompt, ...rest } = doc;
          const req = textOnly(chatTurn(parseBody(ChatCompletionBody, { ...rest, ...(thinking_effort !== undefined ? { reasoning_effort: thinking_effort } : {}) })), `this model's format (${format.source}) has no images`);
          segments = format.render(req.messages, promptOptions(req, format, (add_generation_prompt as boolean | null) ?? true), tok);
          ids = encodeSegments(tok, segments);
        }
      } catch (e) {
        // whatever the request gets wrong is the request's: one line naming the file
        if (e instanceof ApiError || (e instanceof WasteError && (e.code === 'E_FORMAT' || e.code === 'E_UNSUPPORTED'))) throw new WasteError('E_ARG', `${o.request}: ${e.message}`);
        throw e;
      }
      const text = (s: PromptSegment) => (s.kind === 'ids' ? tok.decode(s.ids) : s.text);
      if (o.json) process.stdout.write(JSON.stringify({ segments: segments.map((s) => [text(s), s.kind === 'markup']), ids }) + '\n');
      else process.stdout.write(segments.map(text).join('') + '\n');
    });
}
