/**
 * Kimi's chat template shape, as a Jinja template: each turn is a role marker, the role's name,
 * `<|im_middle|>`, the content and `<|im_end|>`. Tools are declared in a `tool_declare` system turn
 * as JSON; an assistant's tool calls follow its content in Kimi's tool-call section
 * (`functions.NAME:INDEX` ids, JSON arguments); a tool result names the call it answers. With
 * `thinking`, the assistant's turn opens with `<think>`, and earlier turns keep their reasoning in
 * `<think>…</think>`. Used when a model ships no template, by synthetic models and by the demo.
 */
export const KIMI_STYLE_TEMPLATE = [
  '{%- if tools -%}<|im_system|>tool_declare<|im_middle|>{{ tools | tojson }}<|im_end|>{%- endif -%}',
  '{%- for m in messages -%}',
  "{%- if m.role == 'system' -%}<|im_system|>system<|im_middle|>{{ m.content }}",
  "{%- elif m.role == 'user' -%}<|im_user|>user<|im_middle|>{{ m.content }}",
  "{%- elif m.role == 'assistant' -%}<|im_assistant|>assistant<|im_middle|>",
  '{%- if m.reasoning_content -%}<think>{{ m.reasoning_content }}</think>{%- endif -%}',
  '{{ m.content }}',
  '{%- if m.tool_calls -%}<|tool_calls_section_begin|>',
  '{%- for c in m.tool_calls -%}<|tool_call_begin|>{{ c.id }}<|tool_call_argument_begin|>{{ c.function.arguments }}<|tool_call_end|>{%- endfor -%}',
  '<|tool_calls_section_end|>{%- endif -%}',
  "{%- else -%}<|im_system|>tool<|im_middle|>{%- if m.tool_call_id -%}{{ '## Return of ' + m.tool_call_id + '\\n' }}{%- endif -%}{{ m.content }}",
  '{%- endif -%}<|im_end|>',
  '{%- endfor -%}',
  '{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- if thinking -%}<think>{%- endif -%}{%- endif -%}',
].join('\n');
