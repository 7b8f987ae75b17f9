/**
 * Which markup a model's reply is written in — decided here, once, from the chat template the model
 * ships (its own markers tell), so every front end (the server, `run`, `chat`, the library's Chat)
 * reads replies the same way: each gets the format's `syntax` and hands it to `replyReader`.
 *
 * | tools         | families (releases)                                             | calls look like |
 * |---------------|-----------------------------------------------------------------|-----------------|
 * | `kimi`        | Kimi K2, K2-Thinking, Kimi-Linear; the default template          | `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{…}<|tool_call_end|>…` |
 * | `hermes`      | Qwen3 MoE, Qwen3-Next, Qwen3-2507                               | `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>` |
 * | `qwen-xml`    | Qwen3-Coder, Qwen3.5                                             | `<tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n</function>\n</tool_call>` |
 * | `glm`         | GLM-4.5, 4.6, 4.7 (glm4-moe)                                     | `<tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n</tool_call>` |
 * | `deepseek`    | DeepSeek-V3, R1, V3.1, V3.2's template                           | `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜><｜tool▁calls▁end｜>` |
 * | `harmony`     | gpt-oss                                                          | `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>` |
 * | `mistral`     | Mixtral 8x22B Instruct (8x7B's template writes no tools)        | `[TOOL_CALLS] [{"name": …, "arguments": {…}}]` |
 * | `xtml`        | Kimi K3 (its native format; read by token id)                    | `<|open|>call tool="NAME"<|sep|>…` |
 *
 * Mixtral 8x7B's and OLMoE's releases write no tool calls (and no reasoning): their templates carry
 * none of these markers, so their syntax is empty and tools are refused for them.
 */
export type ToolSyntax = 'kimi' | 'hermes' | 'qwen-xml' | 'glm' | 'deepseek' | 'harmony' | 'mistral' | 'xtml';

/**
 * How a model marks up its reply: the reasoning block (`<think>…</think>`, which a template may
 * open in the prompt) and the tool-call syntax.
 */
export interface ReplySyntax {
  think?: { open: string; close: string };
  tools?: ToolSyntax;
}

/** gpt-oss's harmony: reasoning is the analysis channel, not a block. */
export const HARMONY_SYNTAX: ReplySyntax = { tools: 'harmony' };

/** The tool-call syntax a chat template's text writes (undefined: it writes no tool calls). */
export function toolSyntaxOf(template: string): ToolSyntax | undefined {
  const has = (s: string) => template.includes(s);
  if (has('<|channel|>') && has('<|message|>')) return 'harmony';
  if (has('tool_call_begin')) return 'kimi';
  if (has('tool▁call▁begin') || has('tool▁calls▁begin')) return 'deepseek';
  if (has('<arg_key>')) return 'glm';
  if (has('<function=') && has('<parameter=')) return 'qwen-xml';
  if (has('<tool_call>')) return 'hermes';
  if (has('[TOOL_CALLS]')) return 'mistral';
  return undefined;
}

/** What a chat template's text says about the reply's markup. */
export function replySyntaxOf(template: string): ReplySyntax {
  const tools = toolSyntaxOf(template);
  // harmony has channels, not a think block (its templates may still mention <think> in no role)
  const think = tools !== 'harmony' && template.includes('<think>') && template.includes('</think>');
  return { ...(think ? { think: { open: '<think>', close: '</think>' } } : {}), ...(tools ? { tools } : {}) };
}
