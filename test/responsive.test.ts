/**
 * The event loop gets a turn while the engine computes: an abort from a timer or a signal, a
 * keypress, a /health probe and a client that leaves are all served within a token or a prefill
 * chunk — in the library itself, whatever front end drives it. These tests assert the order of
 * events (the abort landed before the reply ended), never a duration.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Model } from '../src/api/model.js';
import { open } from '../src/index.js';
import { type RunningServer, startServer } from '../src/server/server.js';
import { BIN, ROOT } from './helpers.js';

const DEMO = path.join(ROOT, 'models/demo');
/** The demo model's [EOS] and <|im_end|>: biased away so that a reply runs until it is stopped. */
const ENDS = [4090, 4091];
const NO_END = Object.fromEntries(ENDS.map((id) => [id, -100]));
/** A guard against a hang (code that never yields waits forever); far above a working run's seconds, and no measure of speed. */
const HANG = { timeout: 10 * 60_000 };
const LONG_TEXT = 'Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, I thought I would sail about a little. ';

describe('the library stops a reply from a timer', HANG, () => {
  let model: Model;
  before(async () => {
    model = await open('demo', { threads: 2, sessions: 2 });
  });
  after(() => model.close());

  it('AbortController.abort() called by setTimeout ends chat.send within a token', async () => {
    const chat = model.chat();
    const stop = new AbortController();
    let seen = 0;
    let atAbort = -1;
    const timer = setTimeout(() => {
      atAbort = seen;
      stop.abort();
    }, 100);
    for await (const piece of chat.send('Tell me a long story.', { maxTokens: 4000, logitBias: NO_END, signal: stop.signal })) if (piece) seen++;
    clearTimeout(timer);
    const r = chat.last!;
    assert.equal(r.finish, 'aborted', `the reply ran to ${r.finish} after ${r.tokens.length} tokens: the timer never fired during it`);
    assert.ok(atAbort >= 0 && r.tokens.length < 4000);
    // at most the token being computed when the timer fired follows it
    assert.ok(seen <= atAbort + 1, `${seen - atAbort} pieces arrived after the abort`);
    chat.close();
  });

  it('AbortSignal.timeout() ends session.generate within a token, and the session goes on', async () => {
    const session = model.session();
    const gen = session.generate(LONG_TEXT, { maxTokens: 4000, logitBias: NO_END, signal: AbortSignal.timeout(100) });
    let r;
    for (;;) {
      const step = await gen.next();
      if (step.done) {
        r = step.value;
        break;
      }
    }
    assert.equal(r.finish, 'aborted');
    assert.ok(r.tokens.length < 4000);
    // the session consumed what it reported and can continue
    assert.equal(session.position, session.history.length);
    const logits = await session.forward(model.tokenize(' and'));
    assert.equal(logits.length, model.config.vocab);
    session.close();
  });

  it('a timer fires during a long Session.forward (between prefill chunks)', async () => {
    const session = model.session();
    const ids = model.tokenize(LONG_TEXT.repeat(30)).slice(0, 20 * model.net.chunk);
    let done = false;
    let firedDuring = 0;
    const tick = setInterval(() => {
      if (!done) firedDuring++;
    }, 1);
    const logits = await session.forward(ids);
    done = true;
    clearInterval(tick);
    assert.ok(firedDuring > 0, 'no timer fired while 20 prefill chunks ran');
    // chunked = all at once
    const whole = model.session();
    assert.deepEqual(logits, await whole.forward(ids));
    session.close();
    whole.close();
  });
});

/** Run `waste chat` and collect its output. */
function chatProcess(opts: { tty: boolean }): { child: ChildProcess; out: () => string; exited: Promise<number | null> } {
  const args = [BIN, 'chat', '-n', '4000', ...ENDS.flatMap((id) => ['--logit-bias', `${id}=-100`]), '--threads', '2'];
  const child = opts.tty
    ? spawn('script', ['-qfec', [process.execPath, ...args].map((a) => `'${a}'`).join(' '), '/dev/null'], { stdio: ['pipe', 'pipe', 'pipe'] })
    : spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  let text = '';
  child.stdout!.on('data', (d) => (text += d));
  child.stderr!.on('data', (d) => (text += d));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  return { child, out: () => text, exited };
}

async function until(what: string, cond: () => boolean, exited: Promise<unknown>): Promise<void> {
  let gone = false;
  void exited.then(() => (gone = true));
  while (!cond()) {
    if (gone) throw new Error(`the process ended before ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('waste chat stops a reply on Ctrl-C', HANG, () => {
  it('kill -INT during a reply stops it, and the conversation goes on', async () => {
    const { child, out, exited } = chatProcess({ tty: false });
    child.stdin!.write('Tell me a long story.\n');
    // wait until the reply is streaming (the banner is on stderr, the reply on stdout)
    const banner = () => out().indexOf('/help for commands.\n');
    await until('the reply began', () => banner() >= 0 && out().length > banner() + 40, exited);
    child.kill('SIGINT');
    await until('the reply was stopped', () => out().includes('[stopped]'), exited);
    child.stdin!.write('/quit\n');
    assert.equal(await exited, 0);
    assert.match(out(), /\[stopped\]/);
  });

  it('Ctrl-C typed on a terminal stops a reply', { skip: spawnSync('script', ['--version']).status === 0 ? false : 'no `script` to give the chat a pseudo-terminal' }, async () => {
    const { child, out, exited } = chatProcess({ tty: true });
    await until('the prompt', () => out().includes('> '), exited);
    child.stdin!.write('Tell me a long story.\r');
    const start = () => out().indexOf('Tell me a long story.');
    await until('the reply began', () => start() >= 0 && out().length > start() + 80, exited);
    const mark = out().length;
    child.stdin!.write('\x03');
    // the reply ends either way: stopped, or run to its end before the key was read (a new prompt)
    await until('the reply ended', () => out().includes('[stopped]') || /\n(\x1b\[[0-9;]*[A-Za-z])*> /.test(out().slice(mark)), exited);
    child.stdin!.write('/quit\r');
    assert.equal(await exited, 0);
    assert.match(out(), /\[stopped\]/, 'the reply ran to its end: Ctrl-C was read only afterwards');
  });
});

describe('the server stays responsive during a long prefill', HANG, () => {
  let server: RunningServer;
  const lines: string[] = [];
  before(async () => {
    server = await startServer({ model: DEMO, port: 0, log: (l) => lines.push(l), open: { threads: 2 } });
  });
  after(() => server.close());

  /** Prompt tokens the model has run since `watch()`; its hook also runs `onChunk` after the first chunk. */
  function watch(onChunk: () => void): () => number {
    const model = server.host.model;
    const first = model.config.layerKinds.findIndex((k) => k.ffn === 'moe');
    let fed = 0;
    let chunks = 0;
    model.observeRoutes((layer, _route, T) => {
      if (layer !== first) return;
      fed += T;
      if (T > 1 && ++chunks === 1) onChunk();
    });
    return () => fed;
  }

  const longPrompt = () => LONG_TEXT.repeat(60);

  it('answers /health while a long prompt is being prefilled', async () => {
    let health: Promise<{ status: number; fed: number }> | undefined;
    const fed = watch(() => {
      // asked from inside the computation; it can only be answered if the loop gets a turn
      health = fetch(`${server.url}/health`).then((r) => ({ status: r.status, fed: fed() }));
    });
    const reply = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: [{ role: 'user', content: longPrompt() }], max_tokens: 1 }) });
    const body: any = await reply.json();
    server.host.model.observeRoutes(undefined);
    assert.equal(reply.status, 200);
    const prompt = body.usage.prompt_tokens;
    assert.ok(prompt > 10 * server.host.model.net.chunk, `a prompt of ${prompt} tokens is too short for this test`);
    assert.ok(health, 'the prefill ran no chunk');
    const h = await health;
    assert.equal(h.status, 200);
    assert.ok(h.fed < prompt, `/health was answered only after the whole prefill (${h.fed} of ${prompt} tokens fed)`);
  });

  it('a client that disconnects during the prefill stops it early', async () => {
    const ac = new AbortController();
    const fed = watch(() => {
      setTimeout(() => ac.abort(), 0);
    });
    const mark = lines.length;
    const text = longPrompt();
    const pending = fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: [{ role: 'user', content: text }], max_tokens: 50 }), signal: ac.signal }).catch(() => 'aborted');
    assert.equal(await pending, 'aborted');
    while (!lines.slice(mark).some((l) => l.includes('aborted'))) await new Promise((r) => setTimeout(r, 20));
    server.host.model.observeRoutes(undefined);
    const prompt = server.host.model.tokenize(text).length;
    assert.ok(fed() < prompt, `the whole prompt (${fed()} of at least ${prompt} tokens) was fed after the client left`);
  });
});
