import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Command } from 'commander';
import { architectureOf } from '../../model/registry.js';
import { ApiError } from '../../server/errors.js';
import { ChatCompletionBody, chatTurn, parseBody } from '../../server/openai-request.js';
import { textOnly } from '../../server/image-parts.js';
import { promptOptions } from '../../server/prompt-options.js';
import { type PromptSegment, encodeSegments, loadChatFormat } from '../../tokenizer/chat.js';
import { requireTokenizer } from '../../tokenizer/load.js';
import { prompt, tokenizeXtml } from '../../tokenizer/xtml/format.js';
import { renderXtml } from '../../tokenizer/xtml/render.js';
import { WasteError } from '../../util/errors.js';
import { Fields, isObject } from '../../util/fields.js';
import { readInput, readJson } from '../../util/read.js';
import { modelOrDemo } from '../default-model.js';

const FIELDS = ['messages', 'tools', 'tool_choice', 'response_format', 'thinking', 'thinking_effort', 'add_generation_prompt', 'image_sizes'];

const HELP = `
FILE is a JSON object: "messages" (OpenAI's shape, content parts included), and optionally "tools",
"tool_choice", "response_format", "thinking" (true/false), "thinking_effort", "add_generation_prompt"
(default true) and, for K3, "image_sizes" ([[width, height], …] in pixels, one per image). A final
assistant message is continued, as the server continues it (a prefill of the reply): rendered up to
the end of its content and left open; with "add_generation_prompt": false it is closed instead.

For a Kimi K3 model these are the release renderer's own inputs, rendered as its encoding_k3.py
renders them: thinking on unless false, and no effort note without "thinking_effort" (the server and
the CLI write "max" when thinking is on and no effort is named); --json's segments are cut exactly
as it cuts them, each tokenized on its own. For any other model the request goes through the server's
path (thinking → the template's thinking/enable_thinking, thinking_effort → reasoning_effort), and
--json's segments are the ones this engine's encoder tokenizes apart: the template's markup (markup
mode) and each message's text (plain mode).`;

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
  for (const k of Object.keys(doc)) if (!FIELDS.includes(k)) throw new WasteError('E_ARG', `${file}: unknown field "${k}" (a request has ${FIELDS.join(', ')})`);
  if (!Array.isArray(doc.messages)) throw new WasteError('E_ARG', `${file}: "messages" must be a list of messages`);
  for (const k of ['thinking', 'add_generation_prompt'])
    if (doc[k] !== undefined && doc[k] !== null && typeof doc[k] !== 'boolean') throw new WasteError('E_ARG', `${file}: "${k}" must be true or false`);
  return doc;
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
      const format = loadChatFormat(dir, { arch: archOf(dir) });
      const doc = readRequest(o.request);
      let segments: PromptSegment[];
      let ids: number[];
      try {
        if (format.syntax.tools === 'xtml') {
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
