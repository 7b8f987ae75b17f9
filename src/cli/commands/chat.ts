import * as readline from 'node:readline';
import { requireTokenizerFiles } from '../../tokenizer/load.js';
import type { Command } from 'commander';
import { Model } from '../../api/model.js';
import type { Chat } from '../../api/chat.js';
import { WasteError } from '../../util/errors.js';
import { formatSize } from '../../util/size.js';
import { type EngineFlags, addEngineOptions, addLearnOption, openOptions } from '../engine-options.js';
import { type GenerateFlags, addGenerateOptions, generateOptions, readAmount, statsLine } from '../generate-options.js';
import { modelOrDemo } from '../default-model.js';
import { ReplyPrinter, type ThinkingFlags, addThinkingOptions, thinkingOptions } from '../thinking-options.js';
import { type ImageFlags, addImageOptions } from '../image-options.js';
import type { ImageRoute } from '../../image/preprocess.js';

const HELP = `commands: /image FILE (show an image with your next message)  /reset (forget the conversation)  /save FILE  /load FILE  /stats  /help  /quit
Ctrl-C stops a reply; Ctrl-D (or /quit) leaves.`;

export function registerChat(program: Command): void {
  const cmd = addThinkingOptions(
    addGenerateOptions(
      addEngineOptions(
        program
          .command('chat')
          .description("talk to a model in its chat format; the conversation's state carries over from turn to turn (reasoning, if any, on stderr)")
          .argument('[model]', 'container directory (default: the demo model that ships with waste)')
          .option('--system <text>', 'a system message that opens the conversation'),
      ),
    ),
  );
  addImageOptions(cmd, 'an image shown with the first message');
  addLearnOption(cmd);
  cmd.action(async (model: string | undefined, o: EngineFlags & GenerateFlags & ThinkingFlags & ImageFlags & { system?: string }, cmd: Command) => {
    const dir = modelOrDemo(model);
    requireTokenizerFiles(dir);
    const m = await Model.open(dir, openOptions(o, dir));
    if (o.image.length && !m.vision) {
      await m.close();
      throw new WasteError('E_UNSUPPORTED', `${model ?? 'demo'} takes no images (it has no vision tower, or --no-vision was given)`);
    }
    const chat = m.chat({ system: o.system, ...thinkingOptions(o), imageRoute: o.imageRoute });
    // images wait for the message they go with
    const pending: string[] = [...o.image];
    const gen = generateOptions(o, cmd);
    const tty = Boolean(process.stdin.isTTY);
    const rl = readline.createInterface({ input: process.stdin, output: process.stdout, terminal: tty, historySize: 1000 });
    let replying: AbortController | undefined;
    const interrupt = () => {
      if (replying) replying.abort();
      else if (tty) {
        process.stdout.write('\n(Ctrl-D or /quit leaves)\n');
        rl.prompt();
      } else rl.close();
    };
    rl.on('SIGINT', interrupt);
    process.on('SIGINT', interrupt);
    process.stderr.write(`waste chat: ${model ?? 'demo'} (chat format: ${chat.format.source}). /help for commands.\n`);
    let last = '';
    let quit = false;
    try {
      rl.setPrompt('> ');
      if (tty) rl.prompt();
      for await (const line of rl) {
        const text = line.trim();
        if (text.startsWith('/')) {
          if (await command(text, chat, m, last, pending, o.imageRoute)) {
            quit = true;
            break;
          }
        } else if (text) {
          const before = m.stats();
          const t0 = performance.now();
          replying = new AbortController();
          try {
            const printer = new ReplyPrinter((s) => process.stdout.write(s));
            const images = pending.splice(0);
            for await (const e of chat.reply(images.length ? { text: line, images } : line, { ...gen, signal: replying.signal })) printer.write(e);
            printer.end();
            const r = chat.last!;
            // a reply with no text would otherwise look like nothing happened
            if (!printer.shown && r.finish !== 'aborted') process.stdout.write('(empty reply)');
            last = statsLine(m, before, r.tokens.length, (performance.now() - t0) / 1000);
            process.stdout.write(r.finish === 'aborted' ? ' [stopped]\n' : '\n');
            if (r.finish === 'context') process.stderr.write('(the context is full: /reset to start over, or use a larger --ctx)\n');
          } catch (e) {
            process.stdout.write('\n');
            report(e);
          } finally {
            replying = undefined;
          }
        }
        if (tty) rl.prompt();
      }
      // Ctrl-D ends the input on the prompt's line: the shell's prompt goes on a line of its own
      if (tty && !quit) process.stdout.write('\n');
    } finally {
      process.off('SIGINT', interrupt);
      rl.close();
      await m.close();
    }
  });
}

/** A slash command; true to leave. */
async function command(text: string, chat: Chat, m: Model, last: string, pending: string[], route: ImageRoute): Promise<boolean> {
  const [cmd, ...rest] = text.split(/\s+/);
  const arg = rest.join(' ');
  try {
    switch (cmd) {
      case '/quit':
      case '/exit':
        return true;
      case '/help':
        process.stdout.write(`${HELP}\n`);
        break;
      case '/image': {
        if (!arg) throw new WasteError('E_ARG', '/image needs a file name');
        if (!m.vision) throw new WasteError('E_UNSUPPORTED', 'this model takes no images (it has no vision tower, or --no-vision was given)');
        // encoded now, so a bad file is reported here; the message reuses the result
        const img = await m.encodeImage(arg, { route });
        pending.push(arg);
        process.stdout.write(`(image ${arg}: ${img.width} x ${img.height}, ${img.count} rows in the prompt; it goes with your next message)\n`);
        break;
      }
      case '/reset':
        pending.length = 0;
        chat.reset();
        process.stdout.write('(conversation cleared)\n');
        break;
      case '/save':
        if (!arg) throw new WasteError('E_ARG', '/save needs a file name');
        chat.save(arg);
        process.stdout.write(`(saved ${chat.session.position} tokens to ${arg})\n`);
        break;
      case '/load':
        if (!arg) throw new WasteError('E_ARG', '/load needs a file name');
        chat.load(arg);
        process.stdout.write(`(loaded ${chat.messages.length} messages, ${chat.session.position} tokens, from ${arg})\n`);
        break;
      case '/stats': {
        const s = m.stats();
        process.stdout.write(
          `${chat.session.position} tokens in the conversation; last reply ${last || '(none yet)'}\n` +
            `experts: ${s.hits} hits, ${s.misses} misses (${(100 * s.hitRate).toFixed(1)} %), ${readAmount(s.bytesRead)} read; ` +
            `memory ${formatSize(s.allocatedBytes)} of a ${formatSize(s.budgetBytes)} budget\n`,
        );
        break;
      }
      default:
        throw new WasteError('E_ARG', `unknown command ${cmd} (/help lists them)`);
    }
  } catch (e) {
    report(e);
  }
  return false;
}

/** A failed turn or command is reported and the conversation goes on. */
function report(e: unknown): void {
  if (e instanceof WasteError) process.stderr.write(`waste: ${e.message}\n`);
  else throw e;
}
