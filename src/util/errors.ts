/**
 * The one error type the engine throws on purpose. Every fault in untrusted input (a container,
 * a checkpoint, a prompt, a request) becomes a WasteError whose message names the file, the field
 * or the record, so the CLI can print it as one line and exit non-zero without a stack trace.
 */
export type WasteErrorCode =
  | 'E_ARG' // the caller asked for something malformed
  | 'E_FORMAT' // a container or checkpoint is malformed
  | 'E_UNSUPPORTED' // well-formed, but a feature this build does not implement
  | 'E_IO' // a file is missing, short, unreadable, or fails its checksum
  | 'E_NOSPACE' // a write found the disk full (a job that stops so resumes once there is room)
  | 'E_IMAGE' // an image is malformed, truncated, too large, or of a kind this build does not decode
  | 'E_STATE'; // the engine was used out of order (e.g. context full)

const ESCAPES: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/**
 * A message quotes things it did not write (a file name, a manifest's string, JSON.parse's
 * excerpt of the text): their line breaks and control characters are shown escaped, so the
 * message stays one line and cannot move a terminal's cursor.
 */
function oneLine(message: string): string {
  return message.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, (c) => ESCAPES[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** The most characters of something rejected an error quotes (see `excerpt`). */
export const EXCERPT_CHARS = 60;
/** The most characters of a whole message: a net under any quote that slipped past `excerpt`. */
export const MAX_MESSAGE_CHARS = 2000;

/**
 * What an error quotes of input it rejects: at most `max` characters, and then how many more there
 * were — `<|aaaa…(1048520 more)` — so a megabyte of bad input is not a megabyte of error message.
 */
export function excerpt(text: string, max = EXCERPT_CHARS): string {
  if (text.length <= max) return text;
  const cut = cutAt(text, max);
  return `${text.slice(0, cut)}…(${text.length - cut} more)`;
}

/** A string as an error quotes it: JSON-quoted, its excerpt only (`"<|aaaa"…(1048520 more)`). */
export function quoted(text: string, max = EXCERPT_CHARS): string {
  if (text.length <= max) return JSON.stringify(text);
  const cut = cutAt(text, max);
  return `${JSON.stringify(text.slice(0, cut))}…(${text.length - cut} more)`;
}

/** Where to cut a string near `max`: never between the halves of a surrogate pair. */
function cutAt(text: string, max: number): number {
  const c = text.charCodeAt(max - 1);
  return c >= 0xd800 && c <= 0xdbff ? max - 1 : max;
}

export class WasteError extends Error {
  readonly code: WasteErrorCode;
  constructor(code: WasteErrorCode, message: string) {
    super(oneLine(excerpt(message, MAX_MESSAGE_CHARS)));
    this.name = 'WasteError';
    this.code = code;
  }
}

export function formatError(file: string, message: string): WasteError {
  return new WasteError('E_FORMAT', `${file}: ${message}`);
}

export function unsupported(message: string): WasteError {
  return new WasteError('E_UNSUPPORTED', `unsupported: ${message}`);
}

export function ioError(message: string): WasteError {
  return new WasteError('E_IO', message);
}

/** Wrap a Node system error (ENOENT, EACCES, …) in a one-line WasteError naming the path. */
export function fromSystemError(path: string, err: unknown): WasteError {
  if (err instanceof WasteError) return err;
  const e = err as NodeJS.ErrnoException;
  const what =
    e && e.code === 'ENOENT'
      ? 'no such file'
      : e && e.code === 'EACCES'
        ? 'permission denied'
        : e && e.code === 'EISDIR'
          ? 'is a directory, expected a file'
          : e && e.code === 'ENOTDIR'
            ? 'not a directory'
            : e && (e.code === 'ENOSPC' || e.code === 'EDQUOT')
              ? 'no space left on the device'
              : e && e.message
              ? e.message
              : String(err);
  return new WasteError(isDiskFull(e) ? 'E_NOSPACE' : 'E_IO', `${path}: ${what}`);
}

/** A write that failed for want of disk space (or quota): as a system error, or wrapped. */
export function isDiskFull(err: unknown): boolean {
  if (err instanceof WasteError) return err.code === 'E_NOSPACE';
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return code === 'ENOSPC' || code === 'EDQUOT';
}
