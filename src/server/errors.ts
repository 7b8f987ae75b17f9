import { WasteError, type WasteErrorCode } from '../util/errors.js';

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
    super(message);
  }
}

export const badRequest = (message: string, param: string | null = null, code: string | null = null) => new ApiError(400, message, 'invalid_request_error', code, param);

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
