import type { Server, ServerOptions } from 'node:http';
import type { Socket } from 'node:net';

/** What a client may hold of the server's connections. */
export interface ConnectionBounds {
  /** Connections open at once; one more is answered 503 and closed. */
  maxConnections: number;
  /** Milliseconds a request may take to arrive, headers and body; a slower one is answered 408. */
  requestTimeoutMs: number;
}

/** Headers must arrive within this (or the request timeout, when that is shorter). */
const HEADERS_MS = 20_000;
/** How long a refused connection stays open for its answer to be read before it is closed. */
const LINGER_MS = 2_000;

/**
 * The node server's options for the request timeout: headers and body within `requestTimeoutMs`,
 * checked often enough (node looks every connectionsCheckingInterval) that a slow request is
 * answered near its time, not up to 30 s later.
 */
export function timeoutOptions(requestTimeoutMs: number): ServerOptions {
  return {
    requestTimeout: requestTimeoutMs,
    headersTimeout: Math.min(requestTimeoutMs, HEADERS_MS),
    connectionsCheckingInterval: Math.min(5_000, Math.max(100, Math.floor(requestTimeoutMs / 4))),
  };
}

/**
 * Bound a node HTTP server's connections (call before it listens): past `maxConnections` open, a
 * new connection is answered 503 at once and closed, without its request being read — a client
 * holding many idle or slow connections cannot take the server's sockets. A request that does not
 * arrive within the timeout is answered 408. Both answers are JSON naming the bound, and the
 * connection is closed gently: what the client still sends is read and dropped for a moment, so
 * it reads the answer rather than a reset. Returns the count of open connections.
 */
export function boundConnections(server: Server, b: ConnectionBounds): { readonly open: number } {
  let open = 0;
  // the server's own handler sets up HTTP on a connection: it runs only for those within the bound
  const http = server.listeners('connection') as ((socket: Socket) => void)[];
  server.removeAllListeners('connection');
  server.on('connection', (socket: Socket) => {
    if (open >= b.maxConnections) {
      refuse(socket, 503, { message: `the server has ${open} connections open, the most it takes (--max-connections); retry shortly`, type: 'server_error', code: 'too_many_connections' }, { 'Retry-After': '1' });
      return;
    }
    open++;
    socket.once('close', () => open--);
    for (const l of http) l.call(server, socket);
  });
  const answered = new WeakSet<Socket>();
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    if (answered.has(socket)) return;
    answered.add(socket);
    // an answer already under way, or a peer that is gone, leaves nothing to say
    const pending = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (err.code === 'ECONNRESET' || !socket.writable || pending?.headersSent) {
      socket.destroy();
      return;
    }
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT')
      refuse(socket, 408, { message: `the request did not arrive within ${b.requestTimeoutMs / 1000} s (--request-timeout)`, type: 'invalid_request_error', code: 'request_timeout' });
    else if (err.code === 'HPE_HEADER_OVERFLOW') refuse(socket, 431, { message: 'the request headers are too large', type: 'invalid_request_error', code: 'headers_too_large' });
    else refuse(socket, 400, { message: 'malformed HTTP request', type: 'invalid_request_error', code: 'bad_http' });
  });
  return {
    get open() {
      return open;
    },
  };
}

const REASONS: Record<number, string> = { 400: 'Bad Request', 408: 'Request Timeout', 431: 'Request Header Fields Too Large', 503: 'Service Unavailable' };

/** Answer on the raw socket (no HTTP parser involved) and close it gently. */
function refuse(socket: Socket, status: number, error: { message: string; type: string; code: string }, headers: Record<string, string> = {}): void {
  const body = JSON.stringify({ error: { ...error, param: null } });
  const head = [`HTTP/1.1 ${status} ${REASONS[status]}`, 'Content-Type: application/json', `Content-Length: ${Buffer.byteLength(body)}`, 'Connection: close', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)];
  socket.on('error', () => {});
  socket.end(`${head.join('\r\n')}\r\n\r\n${body}`);
  // what the client is still sending is read and dropped until it closes, or for a moment
  socket.on('data', () => {});
  socket.on('end', () => socket.destroy());
  socket.resume();
  setTimeout(() => socket.destroy(), LINGER_MS).unref();
}
