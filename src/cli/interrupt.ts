/**
 * Ctrl-C during a resumable job (pull, convert): it stops at its next step — the handler runs when
 * the job gives the event loop its turn, within a second or so — with its files closed and its work
 * kept. Once that is under way the handler is gone, so another Ctrl-C kills at once (which is safe
 * too: the job resumes either way). Returns undefined when stopped, with exit code 130.
 */
export async function stoppable<T>(what: string, run: (signal: AbortSignal) => Promise<T>): Promise<T | undefined> {
  const ac = new AbortController();
  const onInt = () => {
    process.off('SIGINT', onInt);
    process.stderr.write(`\nstopping the ${what} (Ctrl-C again to quit at once)\n`);
    ac.abort();
  };
  process.on('SIGINT', onInt);
  try {
    return await run(ac.signal);
  } catch (e) {
    // only the stop itself: a real failure of the step that was running is reported as it is
    if (!ac.signal.aborted || e !== ac.signal.reason) throw e;
    process.stderr.write(`waste: the ${what} stopped; run the same command again to resume it\n`);
    process.exitCode = 130;
    return undefined;
  } finally {
    process.off('SIGINT', onInt);
  }
}
