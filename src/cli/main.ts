import { Command, CommanderError } from 'commander';
import { WasteError, excerpt } from '../util/errors.js';
import { registerBench } from './commands/bench.js';
import { registerChat } from './commands/chat.js';
import { registerEval } from './commands/eval.js';
import { registerPerplexity } from './commands/perplexity.js';
import { registerRun } from './commands/run.js';
import { registerTokenize } from './commands/tokenize.js';
import { registerConvert } from './commands/convert.js';
import { registerList } from './commands/list.js';
import { registerPull } from './commands/pull.js';
import { registerInfo } from './commands/info.js';
import { registerLogits } from './commands/logits.js';
import { registerPlan } from './commands/plan.js';
import { registerQuality } from './commands/quality.js';
import { registerServe } from './commands/serve.js';
import { registerSynth } from './commands/synth.js';
import { registerTemplate } from './commands/template.js';
import { registerVerify } from './commands/verify.js';
import { VERSION } from '../version.js';
import { guardStdio } from './stdio.js';
import { usageLine } from './args.js';

/** Exit codes: 0 success, 1 failure (a damaged container, an I/O error…), 2 usage error. */
export async function main(argv: string[]): Promise<number> {
  guardStdio();
  const program = new Command('waste')
    .description('Run mixture-of-experts language models far larger than RAM.')
    .version(VERSION, '-v, --version')
    // a usage error is one line, as every other failure (commander's own are two or three)
    .configureOutput({ outputError: (message, write) => write(usageLine(message)) })
    .configureHelp({ showGlobalOptions: true })
    .exitOverride();
  registerRun(program);
  registerChat(program);
  registerServe(program);
  registerEval(program);
  registerPerplexity(program);
  registerTokenize(program);
  registerTemplate(program);
  registerInfo(program);
  registerLogits(program);
  registerPlan(program);
  registerVerify(program);
  registerConvert(program);
  registerPull(program);
  registerList(program);
  registerQuality(program);
  registerSynth(program);
  registerBench(program);
  try {
    await program.parseAsync(argv);
    return typeof process.exitCode === 'number' ? process.exitCode : 0;
  } catch (e) {
    return report(e);
  }
}

function report(e: unknown): number {
  if (e instanceof CommanderError) {
    // commander has already printed its message (or the help/version text)
    return e.exitCode === 0 ? 0 : 2;
  }
  if (e instanceof WasteError) {
    process.stderr.write(`waste: ${e.message}\n`);
    return e.code === 'E_ARG' ? 2 : 1;
  }
  const err = e as Error;
  // a bug's message may quote anything it was handed: its excerpt, on one line
  process.stderr.write(`waste: internal error: ${excerpt(String(err && err.message ? err.message : e), 500).replace(/\s*\n\s*/g, ' ')}\n`);
  if (process.env.WASTE_DEBUG) process.stderr.write(`${err?.stack ?? ''}\n`);
  else process.stderr.write('waste: (set WASTE_DEBUG=1 for a stack trace, and please report this)\n');
  return 1;
}
