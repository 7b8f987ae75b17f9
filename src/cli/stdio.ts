import { fromSystemError } from '../util/errors.js';

/**
 * Exit code of a command whose reader went away (`waste run … | head`): what a shell reports for a
 * program killed by SIGPIPE (128 + 13), as `cat` or `seq` give in the same place. Node ignores
 * SIGPIPE and reports the failed write as an EPIPE error instead, so the code is given by hand.
 */
export const EXIT_PIPE = 141;

let guarded = false;

/**
 * Failed writes to standard output or error, for every command at once: a reader that closed the
 * pipe ends the command quietly (nothing can be said to it), any other failure (a full disk,
 * `> /dev/full`, an I/O error) is one line on stderr and exit 1 — never Node's stack trace for an
 * unhandled 'error' event. The command stops where it is: what it had written stays written, and a
 * job that is stopped mid-way (pull, convert) resumes as after Ctrl-C.
 */
export function guardStdio(): void {
  if (guarded) return;
  guarded = true;
  process.stdout.on('error', (e) => failedWrite('standard output', e));
  process.stderr.on('error', (e) => failedWrite('standard error', e));
}

function failedWrite(stream: string, e: NodeJS.ErrnoException): void {
  if (e.code === 'EPIPE') process.exit(EXIT_PIPE);
  if (stream !== 'standard error') {
    try {
      process.stderr.write(`waste: ${fromSystemError(stream, e).message}\n`);
    } catch {
      // stderr is gone too: the exit code alone tells
    }
  }
  process.exit(1);
}
