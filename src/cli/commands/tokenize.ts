import type { Command } from 'commander';
import { requireTokenizer } from '../../tokenizer/load.js';
import { WasteError } from '../../util/errors.js';
import { readPrompt } from './run.js';
import { modelAndPrompt } from '../default-model.js';

export function registerTokenize(program: Command): void {
  program
    .command('tokenize')
    .description('text to token ids, without loading weights (plain mode: control-token strings are ordinary text)')
    .argument('[model]', 'a model (directory or name; default: the demo model), or a folder holding only a tokenizer (tokenizer.model + specials.json, tiktoken.model, or tokenizer.json)')
    .argument('[text]', 'the text (or --file F, or standard input)')
    .option('--file <file>', 'read the text from a file (- for standard input)')
    .option('--markup', 'parse control-token strings into control tokens (as chat templates are)', false)
    .option('--json', 'print the ids as a JSON array', false)
    .action((first: string | undefined, second: string | undefined, o: { file?: string; markup: boolean; json: boolean }) => {
      const { model: dir, prompt: text } = modelAndPrompt(first, second);
      const tok = requireTokenizer(dir);
      const ids = tok.encode(readPrompt(text, o.file, { exact: true }), { markup: o.markup });
      process.stdout.write(o.json ? JSON.stringify(ids) + '\n' : ids.join(' ') + '\n');
    });

  program
    .command('detokenize')
    .description('token ids to text, without loading weights (control tokens print as their text)')
    .argument('[model]', 'a model (directory or name; default: the demo model), or a folder holding only a tokenizer')
    .argument('[ids]', 'ids separated by spaces or commas, or a JSON array (or --file F, or standard input)')
    .option('--file <file>', 'read the ids from a file (- for standard input)')
    .option('--json', 'print the text as a JSON string', false)
    .action((first: string | undefined, second: string | undefined, o: { file?: string; json: boolean }) => {
      const { model: dir, prompt: ids } = modelAndPrompt(first, second);
      const tok = requireTokenizer(dir);
      const text = readPrompt(ids, o.file).trim();
      const list = text.startsWith('[') ? parseJsonIds(text) : text.split(/[\s,]+/).filter(Boolean);
      const nums = list.map((p, i) => {
        const n = typeof p === 'number' ? p : /^\d+$/.test(p) ? Number(p) : NaN;
        if (!(Number.isInteger(n) && n >= 0 && n < tok.vocabSize)) throw new WasteError('E_ARG', `item ${i + 1} (${String(p).slice(0, 20)}) is not a token id of this tokenizer (0..${tok.vocabSize - 1})`);
        return n;
      });
      const out = tok.decode(nums);
      process.stdout.write(o.json ? JSON.stringify(out) + '\n' : out + '\n');
    });
}

function parseJsonIds(text: string): (number | string)[] {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new WasteError('E_ARG', `the ids are not a valid JSON array (${(e as Error).message})`);
  }
  if (!Array.isArray(v)) throw new WasteError('E_ARG', 'the ids are not a JSON array');
  return v.map((x) => (typeof x === 'number' ? x : String(x)));
}
