import type { ChatFormat, EncodeOptions } from '../chat/format.js';
import { quoted } from '../util/errors.js';
import { badRequest } from './errors.js';
import { constrainable } from '../chat/tool-grammar.js';
import type { TurnRequest } from './host.js';

/** Template variables the server sets itself; a client's chat_template_kwargs may not. */
const RESERVED_VARS = new Set(['messages', 'tools', 'add_generation_prompt', 'bos_token', 'eos_token', 'documents', 'tool_choice']);

/**
 * How a turn's conversation is rendered in `format` (a final assistant message continued, not
 * closed): the tools declared, the template variables
 * (`thinking`, `enable_thinking`, `reasoning_effort` over the client's chat_template_kwargs), and
 * for K3's format the tool_choice and response format it writes notes of. K3's format declares the
 * tools under tool_choice "none" too, with its note not to call them (as the release renders it);
 * a template is simply not offered them.
 */
export function promptOptions(req: TurnRequest, format: ChatFormat, open = true): EncodeOptions {
  for (const k of Object.keys(req.templateVars ?? {}))
    if (RESERVED_VARS.has(k)) throw badRequest(`chat_template_kwargs may not set ${quoted(k)}: the server does`, 'chat_template_kwargs');
  const vars: Record<string, unknown> = { ...req.templateVars };
  if (req.thinking !== undefined) vars.thinking = vars.enable_thinking = req.thinking;
  if (req.effort !== undefined) vars.reasoning_effort = req.effort;
  const xtml = format.syntax.tools === 'xtml';
  const declared = req.toolChoice === 'none' && !xtml ? [] : req.tools;
  const tools = declared.map((t) => ({ type: 'function', function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), parameters: t.parameters } }));
  if (tools.length && !format.syntax.tools) throw badRequest(`this model's chat format (${format.source}) does not write tool calls, so tools cannot be offered`, 'tools');
  if (tools.length && (req.toolChoice === 'required' || typeof req.toolChoice === 'object') && !constrainable(format.syntax, 'calls'))
    throw badRequest(`tool_choice: this model's tool calls (${format.syntax.tools} syntax) are read but cannot be required of it yet; use "auto"`, 'tool_choice');
  if ((req.schema !== undefined || req.responseType === 'json_object') && !constrainable(format.syntax, 'json'))
    throw badRequest(`response_format: this model's replies (${format.syntax.tools} syntax) cannot be held to JSON yet`, 'response_format');
  // a final assistant message is the reply's beginning, continued (as Anthropic's prefill): the
  // reply is what follows it
  const continueFinal = open && req.messages[req.messages.length - 1]?.role === 'assistant';
  if (continueFinal) {
    const why = req.schema !== undefined ? 'response_format' : req.toolChoice === 'required' || typeof req.toolChoice === 'object' ? 'tool_choice' : undefined;
    if (why) throw badRequest(`${why}: a final assistant message is continued as the reply's beginning, which cannot be held to ${why === 'tool_choice' ? 'a required tool call' : 'a JSON schema'}; end the conversation with a user (or tool) message`, why);
  }
  const opts: EncodeOptions = { open, tools, vars, thinking: req.thinking, effort: req.effort, ...(continueFinal ? { continueFinal } : {}) };
  if (req.tools.length) opts.toolChoice = req.toolChoice;
  if (req.responseType === 'json_object') opts.responseFormat = { type: 'json_object' };
  else if (req.responseType === 'json_schema') opts.responseFormat = { type: 'json_schema', json_schema: { schema: req.schema } };
  return opts;
}
