import { MAX_MESSAGE_CHARS, WasteError, type WasteErrorCode, excerpt } from '../util/errors.js';

/**
 * An error a request gets back: its HTTP status, a message, and OpenAI's `type` / `code` / `param`
 * (the Anthropic routes render the same error in their own shape).
 */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string = status >= 500 ? 'server_error' : 'invalid_request_error',
    readonly code: string | null = null,
    readonly param: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    // a net under any quote of the request that slipped past `quoted`
    super(excerpt(message, MAX_MESSAGE_CHARS));
  }
}

export const badRequest = (message: string, param: string | null = null, code: string | null = null) => new ApiError(400, message, 'invalid_request_error', code, param);

/**
 * What a failure becomes for the client, decided by where it came from, never by its message:
 * an ApiError is the server's verdict on the request, made where the request's input was checked
 * (see `fromClient`); anything else was thrown by the engine, the model or the server itself and is
 * a 500 — a WasteError is the engine's (`engine_error`), anything else a bug (`internal_error`). The
 * same "token id … is not in the vocabulary" is the client's fault in a prompt's ids and the
 * model's in a reply its own tokenizer cannot print.
 */
export function asApiError(e: unknown): ApiError {
  if (e instanceof ApiError) return e;
  if (e instanceof WasteError) return new ApiError(500, e.message, 'engine_error', e.code);
  return new ApiError(500, `internal error: ${(e as Error)?.message ?? String(e)}`, 'server_error', 'internal_error');
}

/**
 * Run library code on the client's input alone (a schema to compile, sampling options to check, a
 * conversation to render): the WasteErrors of the given codes it throws are about that input, so
 * they are the client's 400 naming `param`. Anything else passes through as the fault it is.
 */
export function fromClient<T>(param: string | null, run: () => T, codes: readonly WasteErrorCode[] = ['E_ARG'], prefix = ''): T {
  try {
    return run();
  } catch (e) {
    if (e instanceof WasteError && codes.includes(e.code)) throw badRequest(`${prefix}${e.message}`, param);
    throw e;
  }
}

/** fromClient for work that is awaited. */
export async function fromClientAsync<T>(param: string | null, run: () => Promise<T>, codes: readonly WasteErrorCode[] = ['E_ARG'], prefix = ''): Promise<T> {
  try {
    return await run();
  } catch (e) {
    if (e instanceof WasteError && codes.includes(e.code)) throw badRequest(`${prefix}${e.message}`, param);
    throw e;
  }
}

export function openaiErrorBody(e: ApiError): unknown {
  return { error: { message: e.message, type: e.type, param: e.param, code: e.code } };
}

/** Anthropic's error types by status. */
export function anthropicErrorBody(e: ApiError): unknown {
  const type =
    e.status === 400 || e.status === 413
      ? 'invalid_request_error'
      : e.status === 401
        ? 'authentication_error'
        : e.status === 404
          ? 'not_found_error'
          : e.status === 429
            ? 'rate_limit_error'
            : e.status === 503
              ? 'overloaded_error'
              : 'api_error';
  return { type: 'error', error: { type, message: e.message } };
}
