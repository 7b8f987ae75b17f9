import type { Command } from 'commander';
import { requireTokenizerFiles } from '../../tokenizer/load.js';
import { Model } from '../../api/model.js';
import { topLogprobs } from '../../generate/sampler.js';
import { intArg } from '../args.js';
import { type EngineFlags, addEngineOptions, openOptions } from '../engine-options.js';
import { readPrompt } from './run.js';
import { WasteError } from '../../util/errors.js';
import { modelAndPrompt } from '../default-model.js';

export function registerEval(program: Command): void {
  addEngineOptions(
    program
      .command('eval')
      .description('run a prompt and print the most likely next tokens with their probabilities (no chat format unless --chat)')
      .argument('[model]', 'container directory (default: the demo model that ships with waste)')
      .argument('[prompt]', 'the prompt (or --file F, or standard input)')
      .option('--file <file>', 'read the prompt from a file (- for standard input)')
      .option('--top <n>', 'how many tokens to list', intArg(1, 1000), 10)
      .option('--markup', 'control-token strings in the prompt become control tokens', false)
      .option('--chat', "the prompt as a user message in the model's chat format, handed over to the assistant: the reply's first token", false)
      .option('--json', 'print JSON', false),
  ).action(async (first: string | undefined, second: string | undefined, o: EngineFlags & { file?: string; top: number; markup: boolean; chat: boolean; json: boolean }) => {
    const { model, prompt: promptArg } = modelAndPrompt(first, second);
    const prompt = readPrompt(promptArg, o.file);
    if (o.chat && o.markup) throw new WasteError('E_ARG', '--markup and --chat do not go together: in a chat the prompt is always plain text');
    requireTokenizerFiles(model);
    const m = await Model.open(model, openOptions(o));
    try {
      const ids = o.chat ? m.chatFormat().encode(m.tokenizer(), [{ role: 'user', content: prompt }]) : m.tokenize(prompt, { markup: o.markup });
      const logits = await m.session().forward(ids);
      const tok = m.tokenizer();
      const top = topLogprobs(logits, o.top).map((t) => ({ id: t.token, logit: logits[t.token], prob: Math.exp(t.logprob), piece: tok.decode([t.token]) }));
      if (o.json) process.stdout.write(JSON.stringify({ promptTokens: ids.length, vocab: logits.length, top }, null, 2) + '\n');
      else
        process.stdout.write(
          `${ids.length} prompt tokens; the ${o.top} most likely next tokens:\n` +
            top.map((t) => `${String(t.id).padStart(7)}  ${t.logit.toFixed(4).padStart(10)}  ${(100 * t.prob).toFixed(2).padStart(6)} %  ${JSON.stringify(t.piece)}`).join('\n') +
            '\n',
        );
    } finally {
      await m.close();
    }
  });
}
