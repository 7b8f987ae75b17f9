import { isObject } from '../util/fields.js';
import { badRequest } from './errors.js';

/**
 * What Anthropic's API has and this server does not — documents, server tools (run on Anthropic's
 * side), MCP servers — named in a 400 of its own, before the body's schema would call it "Invalid
 * input". Checked on the body as sent, so nothing here trusts its shape.
 */

/** The content blocks the server reads, by the role whose message may hold them. */
const TAKEN: Record<string, readonly string[]> = {
  user: ['text', 'image', 'tool_result'],
  assistant: ['text', 'thinking', 'redacted_thinking', 'tool_use'],
};

const KNOWN = new Set(Object.values(TAKEN).flat());

const shown = (v: unknown) => JSON.stringify(String(v).slice(0, 40));

function blockRefusal(type: string, role: string): string {
  if (type === 'document') return 'document blocks (PDF or text sources) are not read by this server: send the text as a text block';
  if (type === 'search_result') return 'search_result blocks are not read by this server: send the results as text';
  if (/_tool_use$|_tool_result$|^container_upload$/.test(type)) return `${shown(type)} blocks belong to Anthropic's server tools, which this server does not run`;
  const taken = TAKEN[role];
  return taken ? `${role === 'assistant' ? 'an' : 'a'} ${role} message may hold ${taken.join(', ')} blocks, not ${shown(type)}` : `${shown(type)} blocks are not supported`;
}

/** A 400 naming the first block, tool or field of the body that this server cannot take, if any. */
export function refuseUnsupported(body: unknown): void {
  if (!isObject(body)) return;
  if (Array.isArray(body.mcp_servers) && body.mcp_servers.length) throw badRequest('mcp_servers: this server connects to no MCP servers; declare the tools yourself', 'mcp_servers');
  if (Array.isArray(body.tools))
    body.tools.forEach((t, i) => {
      if (isObject(t) && t.type !== undefined && t.type !== 'custom')
        throw badRequest(
          `tools[${i}]: ${shown(t.type)} is one of Anthropic's server tools (run on Anthropic's side), which this server does not have; declare client tools (name, description, input_schema) and run them yourself`,
          `tools[${i}].type`,
        );
    });
  if (!Array.isArray(body.messages)) return;
  body.messages.forEach((m, i) => {
    if (!isObject(m) || !Array.isArray(m.content)) return;
    const role = typeof m.role === 'string' ? m.role : '';
    m.content.forEach((block, j) => {
      if (!isObject(block) || typeof block.type !== 'string') return;
      const at = `messages[${i}].content[${j}]`;
      // a known block in the wrong role is the message schema's to refuse (anthropic.ts)
      if (!KNOWN.has(block.type)) throw badRequest(`${at}: ${blockRefusal(block.type, role)}`, at);
      if (block.type === 'tool_result' && Array.isArray(block.content))
        block.content.forEach((inner, k) => {
          if (isObject(inner) && inner.type !== 'text')
            throw badRequest(`${at}.content[${k}]: a tool_result is read as text here, and this block is ${shown(inner.type)}${inner.type === 'document' ? ' (send the document\'s text)' : ''}`, `${at}.content`);
        });
    });
  });
}
