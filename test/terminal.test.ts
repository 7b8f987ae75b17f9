/**
 * The CLI where a terminal or a shell meets it: a reader that closes the pipe early, a full disk
 * behind standard output, usage errors as one line, `chat` left with Ctrl-D on a pseudo-terminal.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { describe, it } from 'node:test';
import { BIN } from './helpers.js';

/** Commands that write to standard output as a new user tries them; `input` is their standard input. */
const WRITERS: { args: string[]; input?: string }[] = [
  { args: ['run', 'demo', 'It was', '--raw', '-n', '300', '--temp', '0'] },
  { args: ['tokenize', 'demo', 'hello there'] },
  { args: ['chat', 'demo', '--temp', '0', '-n', '20'], input: 'Hello\n' },
  { args: ['--help'] },
];

/** What chat says on stderr before anything else: its banner, not a failure. */
const BANNER = /^waste chat: demo \(chat format: [^\n]*\n/;

/** The CLI with its standard output as given, standard input and error piped; resolves when it has exited. */
function run(args: string[], stdout: 'pipe' | number, input: string | undefined, closeEarly: boolean): Promise<{ code: number | null; signal: string | null; err: string }> {
  return new Promise((resolve) => {
    const c = spawn(process.execPath, [BIN, ...args], { stdio: ['pipe', stdout, 'pipe'] });
    // a reader that has gone before the first byte: the read end is closed before the child can have
    // started, so every write the command makes to standard output finds no reader
    if (closeEarly) c.stdout!.destroy();
    let err = '';
    c.stderr!.on('data', (d) => (err += d));
    c.stdin!.end(input ?? '');
    c.on('close', (code, signal) => resolve({ code, signal, err }));
  });
}

describe('standard output that goes away', () => {
  for (const w of WRITERS) {
    it(`a reader that closed the pipe ends \`waste ${w.args.join(' ')}\` quietly, exit 141 as after SIGPIPE`, async () => {
      const r = await run(w.args, 'pipe', w.input, true);
      assert.equal(r.err.replace(BANNER, ''), '', 'nothing on stderr: no stack trace, no message');
      assert.equal(r.code, 141, r.err);
    });
  }

  it('`waste run demo "It was" --raw -n 300 | head -c 20` prints the 20 bytes, nothing else, and waste exits 141', () => {
    const r = spawnSync('bash', ['-c', `"${process.execPath}" "${BIN}" run demo "It was" --raw -n 300 --temp 0 | head -c 20; echo "\${PIPESTATUS[0]}" >&2`], { encoding: 'utf8' });
    assert.equal(Buffer.byteLength(r.stdout), 20);
    assert.ok(r.stdout.startsWith('It was'), r.stdout);
    assert.equal(r.stderr, '141\n');
  });

  for (const w of WRITERS) {
    it(`a full disk under \`waste ${w.args.join(' ')} > /dev/full\` is one line, exit 1`, { skip: fs.existsSync('/dev/full') ? false : 'no /dev/full' }, async () => {
      const fd = fs.openSync('/dev/full', 'w');
      try {
        const r = await run(w.args, fd, w.input, false);
        assert.equal(r.err.replace(BANNER, ''), 'waste: standard output: no space left on the device\n');
        assert.equal(r.code, 1);
      } finally {
        fs.closeSync(fd);
      }
    });
  }
});

describe('usage errors', () => {
  const long = '7'.repeat(100_000) + 'x';
  for (const [args, want] of [
    [['frobnicate'], /^waste: unknown command 'frobnicate' \(run with --help for usage\)\n$/],
    [['rn', 'demo'], /^waste: unknown command 'rn' \(Did you mean one of rm, run\?\) \(run with --help for usage\)\n$/],
    [['run', '--bogus'], /^waste: unknown option '--bogus' \(run with --help for usage\)\n$/],
    [['run', '-n', 'abc'], /^waste: option '-n, --max-tokens <n>' argument 'abc' is invalid\. expected an integer, got "abc" \(run with --help for usage\)\n$/],
    [['convert'], /^waste: missing required argument 'hf_dir' \(run with --help for usage\)\n$/],
    // a value of 100,000 characters is quoted by its start and how much more there was
    [['run', '-n', long], /^waste: option '-n, --max-tokens <n>' argument '7{60}…\(99941 more\)' is invalid\. expected an integer, got "7{60}"…\(99941 more\) \(run with --help for usage\)\n$/],
  ] as [string[], RegExp][]) {
    it(`\`waste ${args.join(' ').slice(0, 40)}\` is one line on stderr, exit 2`, () => {
      const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8' });
      assert.equal(r.status, 2, r.stderr);
      assert.equal(r.stdout, '');
      assert.match(r.stderr, want);
    });
  }
});

const hasScript = spawnSync('script', ['--version']).status === 0;

describe('chat on a terminal', () => {
  it('Ctrl-D leaves with the cursor on a line of its own, so the shell prompt is not on the "> " line', { skip: hasScript ? false : 'no script(1) for a pseudo-terminal' }, async () => {
    // script(1) runs chat on a pseudo-terminal; Ctrl-D is typed once the prompt shows
    const cmd = `stty cols 80 rows 24; exec "${process.execPath}" "${BIN}" chat demo`;
    const out = await new Promise<string>((resolve) => {
      const c = spawn('script', ['-qfec', cmd, '/dev/null'], { stdio: ['pipe', 'pipe', 'inherit'] });
      let text = '';
      let typed = false;
      c.stdout.on('data', (d) => {
        text += d;
        if (!typed && text.includes('> ')) {
          typed = true;
          c.stdin.write('\x04');
        }
      });
      c.on('close', () => resolve(text));
    });
    const last = out.slice(out.lastIndexOf('> '));
    // readline's cursor moves after the prompt, then a line break (the terminal shows \n as \r\n)
    assert.match(last, /^> (\x1b\[\d+G)?\r\n$/, JSON.stringify(out));
  });
});
