#!/usr/bin/python3
"""Render the fixture chat templates the way Hugging Face's apply_chat_template does, into goldens.

Dev-only: needs Debian's python3-jinja2 (no transformers). Reads test/fixtures/templates/
templates.json (the templates, their bos/eos tokens, how tool-call arguments reach them) and
requests.json (a fixed set of conversations), and writes test/golden/templates/NAME.json: for
each request, the text the template renders, or the error it raises. test/template-golden.test.ts
renders the same with this engine and compares byte for byte.

The conventions copied from transformers (utils/chat_template_utils.py, _compile_jinja_template
and render_jinja_template): an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks,
the loopcontrols extension, `tojson` as json.dumps(ensure_ascii=False) with its indent/separators/
sort_keys arguments, `raise_exception`, `strftime_now`; the render gets messages, tools (None when
there are none), documents=None, add_generation_prompt, the tokenizer's special tokens that are set
(bos_token, eos_token) and the request's template variables; continue_final_message cuts the closed
rendering after the final message's content, as transformers does. strftime_now is pinned to
2026-01-15 so the goldens do not change with the day (the test pins the engine's the same way).

Messages go to the template as this engine hands them over (src/chat/format.ts): role, content
(a string, '' when empty), name (when the client gave one), tool_call_id, reasoning_content and thinking (both, when the assistant
message has reasoning), tool_calls as [{id, type: 'function', function: {name, arguments}}] with
arguments the JSON text or the parsed object, as templates.json says for the template.

Usage: /usr/bin/python3 tools/templates/render_golden.py [--check]
"""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, 'test', 'fixtures', 'templates')
GOLDEN = os.path.join(ROOT, 'test', 'golden', 'templates')
NOW = datetime(2026, 1, 15, 12, 0, 0)


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters['tojson'] = tojson
    env.globals['raise_exception'] = raise_exception
    env.globals['strftime_now'] = strftime_now
    return env


def template_message(m, arguments):
    out = {'role': m['role'], 'content': m.get('content', '')}
    if 'name' in m:
        out['name'] = m['name']
    if 'toolCallId' in m:
        out['tool_call_id'] = m['toolCallId']
    if m.get('reasoning'):
        out['reasoning_content'] = m['reasoning']
        out['thinking'] = m['reasoning']
    if m.get('toolCalls'):
        out['tool_calls'] = [
            {'id': c['id'], 'type': 'function', 'function': {'name': c['name'], 'arguments': json.loads(c['arguments']) if arguments == 'object' else c['arguments']}}
            for c in m['toolCalls']
        ]
    return out


def render(env, spec, text, request, tools):
    compiled = env.from_string(text)
    messages = [template_message(m, spec['arguments']) for m in request['messages']]
    cont = bool(request.get('continueFinal'))
    kwargs = {k: spec[k] for k in ('bos_token', 'eos_token') if spec.get(k) is not None}
    kwargs.update(request.get('vars', {}))
    rendered = compiled.render(
        messages=messages,
        tools=tools if request.get('tools') else None,
        documents=None,
        add_generation_prompt=request.get('open', True) and not cont,
        **kwargs,
    )
    if cont:
        # transformers' continue_final_message
        final = messages[-1]['content']
        if final.strip() not in rendered:
            raise ValueError('continue_final_message: the final message does not appear in the rendered chat')
        at = rendered.rindex(final.strip())
        if rendered[at:at + len(final.lstrip())] == final:
            rendered = rendered[:at + len(final.lstrip())]
        else:
            rendered = rendered[:at + len(final.strip())]
    return rendered


def main():
    check = '--check' in sys.argv[1:]
    with open(os.path.join(FIXTURES, 'templates.json'), encoding='utf-8') as f:
        specs = json.load(f)['templates']
    with open(os.path.join(FIXTURES, 'requests.json'), encoding='utf-8') as f:
        doc = json.load(f)
    env = environment()
    os.makedirs(GOLDEN, exist_ok=True)
    stale = []
    for spec in specs:
        with open(os.path.join(FIXTURES, spec['file']), encoding='utf-8') as f:
            text = f.read()
        cases = {}
        for req in doc['requests']:
            try:
                cases[req['name']] = {'text': render(env, spec, text, req, doc['tools'])}
            except Exception as e:  # the template refused the request: the engine must refuse it too
                cases[req['name']] = {'error': f'{type(e).__name__}: {e}'}
        out = json.dumps({'template': spec['file'], 'jinja2': jinja2.__version__, 'cases': cases}, ensure_ascii=False, indent=1) + '\n'
        path = os.path.join(GOLDEN, spec['name'] + '.json')
        if check:
            # the renderings, whichever Jinja2 3.x wrote them
            with open(path, encoding='utf-8') as f:
                kept = json.load(f)
            if kept['template'] != spec['file'] or kept['cases'] != cases:
                stale.append(path)
        else:
            with open(path, 'w', encoding='utf-8') as f:
                f.write(out)
        errors = [k for k, v in cases.items() if 'error' in v]
        print(f"{spec['name']}: {len(cases) - len(errors)} rendered" + (f", refused: {', '.join(errors)}" if errors else ''))
    if stale:
        sys.exit('stale goldens: ' + ', '.join(stale))


if __name__ == '__main__':
    main()
