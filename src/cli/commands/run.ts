import * as fs from 'node:fs';
import { requireTokenizerFiles } from '../../tokenizer/load.js';
import type { Command } from 'commander';
import { Model } from '../../api/model.js';
import type { GenerationResult } from '../../generate/generate.js';
import { WasteError, fromSystemError } from '../../util/errors.js';
import { intArg } from '../args.js';
import { type EngineFlags, addEngineOptions, addLearnOption, openOptions } from '../engine-options.js';
import { type GenerateFlags, addGenerateOptions, generateOptions, statsLine } from '../generate-options.js';
import { modelAndPrompt } from '../default-model.js';
import { readInput } from '../../util/read.js';
import { ReplyPrinter, type ThinkingFlags, addThinkingOptions, thinkingOptions } from '../thinking-options.js';
import { type ImageFlags, addImageOptions } from '../image-options.js';

interface RunFlags extends EngineFlags, GenerateFlags, ThinkingFlags, ImageFlags {
  file?: string;
  raw: boolean;
  markup: boolean;
  system?: string;
  quiet: boolean;
  json: boolean;
  logprobs?: number;
}

export function registerRun(program: Command): void {
  const cmd = addThinkingOptions(
    addGenerateOptions(
      addEngineOptions(
        program
          .command('run')
          .description("generate a reply to a prompt (in the model's chat format; --raw continues the text as written), streaming it to stdout (the reasoning, if any, to stderr)")
          .argument('[model]', 'container directory (default: the demo model that ships with waste)')
          .argument('[prompt]', 'the prompt (or --file F, or standard input)')
          .option('--file <file>', 'read the prompt from a file (- for standard input)')
          .option('--raw', 'no chat format: continue the prompt as written (it is echoed first)', false)
          .option('--markup', 'with --raw: control-token strings in the prompt become control tokens', false)
          .option('--system <text>', 'a system message (chat format only)')
          .option('--json', 'print the reply and its statistics as JSON instead of streaming', false)
          .option('--logprobs <n>', 'with --json: each token with its log-probability and the n most likely alternatives (0..20)', intArg(0, 20))
          .option('-q, --quiet', 'print only the reply (no statistics line)', false),
      ),
    ),
  );
  addImageOptions(cmd, 'an image shown with the prompt');
  addLearnOption(cmd);
  cmd.action(async (first: string | undefined, second: string | undefined, o: RunFlags, cmd: Command) => {
    if (o.raw && o.image.length) throw new WasteError('E_ARG', '--image goes with the chat format, not --raw');
    if (o.logprobs !== undefined && !o.json) throw new WasteError('E_ARG', '--logprobs goes with --json');
    if (o.raw && (o.think !== undefined || o.effort !== undefined)) throw new WasteError('E_ARG', '--think, --no-think and --effort go with the chat format, not --raw');
    const { model, prompt: promptArg } = modelAndPrompt(first, second);
    const prompt = readPrompt(promptArg, o.file);
    requireTokenizerFiles(model);
    const m = await Model.open(model, openOptions(o, model));
    try {
      const ac = new AbortController();
      const onInt = () => ac.abort();
      process.on('SIGINT', onInt);
      const before = m.stats();
      const t0 = performance.now();
      const gen = { ...generateOptions(o, cmd), ...(o.logprobs !== undefined ? { logprobs: true, topLogprobs: o.logprobs } : {}) };
      let result: GenerationResult;
      const out = (s: string) => {
        if (!o.json) process.stdout.write(s);
      };
      let reply: { reasoning?: string; content: string } | undefined;
      try {
        if (o.raw) {
          out(prompt);
          const session = m.session();
          const it = session.generate(prompt, { ...gen, markup: o.markup, signal: ac.signal });
          for (;;) {
            const r = await it.next();
            if (r.done) {
              result = r.value;
              break;
            }
            out(r.value.text);
          }
        } else {
          const chat = m.chat({ system: o.system, ...thinkingOptions(o), imageRoute: o.imageRoute });
          const printer = new ReplyPrinter(out);
          const it = chat.reply(o.image.length ? { text: prompt, images: o.image } : prompt, { ...gen, signal: ac.signal });
          for (;;) {
            const r = await it.next();
            if (r.done) {
              result = r.value;
              break;
            }
            if (!o.json) printer.write(r.value);
          }
          printer.end();
          const last = chat.messages[chat.messages.length - 1];
          reply = { content: last.content, ...(last.reasoning ? { reasoning: last.reasoning } : {}) };
        }
      } finally {
        process.off('SIGINT', onInt);
      }
      const seconds = (performance.now() - t0) / 1000;
      if (o.json) {
        const s = m.stats();
        const piece = (id: number) => m.detokenize([id]);
        const logprobs = result.logprobs?.filter((t) => t.token >= 0).map((t) => ({
          id: t.token,
          piece: piece(t.token),
          logprob: t.logprob,
          ...(t.top ? { top: t.top.map((a) => ({ id: a.token, piece: piece(a.token), logprob: a.logprob })) } : {}),
        }));
        const doc = {
          text: result.text,
          ...(reply && reply.content !== result.text ? reply : {}),
          tokens: result.tokens,
          finish: result.finish,
          promptTokens: result.promptTokens,
          seconds,
          stats: { hits: s.hits - before.hits, misses: s.misses - before.misses, bytesRead: s.bytesRead - before.bytesRead },
          ...(logprobs ? { logprobs } : {}),
        };
        process.stdout.write(JSON.stringify(doc, null, 2) + '\n');
      } else {
        process.stdout.write('\n');
        if (!o.quiet) process.stderr.write(`${statsLine(m, before, result.tokens.length, seconds)}${result.finish === 'context' ? ' (stopped: the context is full; use a larger --ctx)' : ''}\n`);
      }
    } finally {
      await m.close();
    }
  });
}

/** The prompt: the argument, else --file (- = stdin), else standard input when it is not a terminal. */
/**
 * The text of an argument, a file (`-`: standard input) or standard input. A prompt loses its
 * trailing newlines (what `echo` and editors add); `exact` keeps every byte (tokenize).
 */
export function readPrompt(arg: string | undefined, file: string | undefined, opts: { exact?: boolean } = {}): string {
  if (arg !== undefined && file !== undefined) throw new WasteError('E_ARG', 'give the prompt as an argument or with --file, not both');
  if (arg !== undefined) return arg;
  if (file === undefined && process.stdin.isTTY) throw new WasteError('E_ARG', 'no prompt: give one as an argument, with --file F, or on standard input');
  const from = file === undefined || file === '-' ? 0 : file;
  const name = file === undefined || file === '-' ? 'standard input' : file;
  const bytes = readInput(from);
  let text: string;
  try {
    // not replaced silently: a U+FFFD in place of bad bytes would be a different text
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: opts.exact }).decode(bytes);
  } catch {
    throw new WasteError('E_ARG', `${name} is not UTF-8 text`);
  }
  return opts.exact ? text : text.replace(/\n+$/, '');
}
