import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import type { GenerateOptions } from '../generate/generate.js';
import type { Model } from '../api/model.js';
import { intArg } from './args.js';

/** The sampling and stopping options of `run` and `chat`. */
export interface GenerateFlags {
  maxTokens: number;
  temp: number;
  topK: number;
  topP: number;
  minP: number;
  repeatPenalty: number;
  presencePenalty: number;
  frequencyPenalty: number;
  seed: number;
  stop: string[];
  logitBias: Record<number, number>;
}

function floatArg(min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!/^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i.test(value.trim()) || !(n >= min && n <= max)) throw new InvalidArgumentError(`expected a number between ${min} and ${max}`);
    return n;
  };
}

export function addGenerateOptions(cmd: Command): Command {
  return cmd
    .addHelpText('after', "\nThe model's generation_config.json, when it has one, replaces the defaults of -n, --temp, --top-k, --top-p, --min-p and --repeat-penalty.")
    .option('-n, --max-tokens <n>', 'most tokens to generate per reply', intArg(1, 1 << 24), 256)
    .option('--temp <t>', 'temperature (0 = greedy: always the most likely token)', floatArg(0, 100), 0)
    .option('--top-k <k>', 'sample from the k most likely tokens (0 = off)', intArg(0, 1 << 24), 0)
    .option('--top-p <p>', 'sample from the smallest set of tokens whose probability reaches p (1 = off)', floatArg(1e-9, 1), 1)
    .option('--min-p <p>', 'drop tokens less likely than p × the most likely one (0 = off)', floatArg(0, 1), 0)
    .option('--repeat-penalty <x>', 'divide the logits of tokens already in the context by x (1 = off)', floatArg(0.01, 100), 1)
    .option('--presence-penalty <x>', "subtract x from the logits of tokens already in the reply (OpenAI's presence_penalty)", floatArg(-2, 2), 0)
    .option('--frequency-penalty <x>', 'subtract x × count from the logits of tokens already in the reply', floatArg(-2, 2), 0)
    .option('--seed <n>', 'random seed (the same seed, prompt and model give the same text)', intArg(0, 2 ** 32 - 1), 0)
    .option('--stop <text>', 'stop when the reply produces this text (repeatable)', (v: string, prev: string[]) => [...prev, v], [] as string[])
    .option('--logit-bias <id=bias>', 'add bias (-100..100) to token id\'s logit: -100 all but bans it, 100 all but forces it (repeatable)', biasArg, {} as Record<number, number>);
}

function biasArg(value: string, prev: Record<number, number>): Record<number, number> {
  const m = /^(\d{1,9})=(.+)$/.exec(value.trim());
  const bias = m ? floatArg(-100, 100)(m[2]) : NaN;
  if (!m) throw new InvalidArgumentError('expected ID=BIAS, a token id and a number between -100 and 100');
  return { ...prev, [Number(m[1])]: bias };
}

/** Which flag sets each option (the model's generation_config.json fills the ones left at their default). */
const FLAG_OF: Record<string, string> = {
  maxTokens: 'maxTokens',
  temperature: 'temp',
  topK: 'topK',
  topP: 'topP',
  minP: 'minP',
  repetitionPenalty: 'repeatPenalty',
};

/**
 * The options as given. Sampling options left at their default are left out when `cmd` is given,
 * so the model's own recommendation (generation_config.json) applies; without one the defaults
 * shown in the help are the library's.
 */
export function generateOptions(f: GenerateFlags, cmd?: Command): GenerateOptions {
  const all: GenerateOptions = {
    maxTokens: f.maxTokens,
    temperature: f.temp,
    topK: f.topK,
    topP: f.topP,
    minP: f.minP,
    repetitionPenalty: f.repeatPenalty,
    presencePenalty: f.presencePenalty,
    frequencyPenalty: f.frequencyPenalty,
    seed: f.seed,
    stop: f.stop,
    ...(Object.keys(f.logitBias ?? {}).length ? { logitBias: f.logitBias } : {}),
  };
  if (cmd) for (const [key, flag] of Object.entries(FLAG_OF)) if (cmd.getOptionValueSource(flag) === 'default') delete (all as Record<string, unknown>)[key];
  return all;
}

/** "[12 tokens, 3.1 s, 3.9 tok/s | experts 80 hit / 20 miss = 80.0 % | 420 MB read]" from stats before and after. */
export function statsLine(model: Model, before: ReturnType<Model['stats']>, tokens: number, seconds: number): string {
  const after = model.stats();
  const hits = after.hits - before.hits;
  const misses = after.misses - before.misses;
  const rate = seconds > 0 ? tokens / seconds : 0;
  const experts = hits + misses ? ` | experts ${hits} hit / ${misses} miss = ${((100 * hits) / (hits + misses)).toFixed(1)} % | ${readAmount(after.bytesRead - before.bytesRead)} read` : '';
  return `[${tokens} tokens, ${seconds.toFixed(1)} s, ${rate.toFixed(2)} tok/s${experts}]`;
}

/** Bytes read in decimal units, as disks are sold: "3.3 MB", "0.42 GB". */
export function readAmount(bytes: number): string {
  return bytes >= 1e9 ? `${(bytes / 1e9).toFixed(2)} GB` : `${(bytes / 1e6).toFixed(1)} MB`;
}
