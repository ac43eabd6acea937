#!/usr/bin/env python3
"""Reference chat-template renders (issue 18, item 2): real model chat templates rendered by Python's Jinja2 the way
Hugging Face transformers renders them (sandboxed environment, trim_blocks, lstrip_blocks, loop controls, its
`tojson`, `raise_exception` and `strftime_now`), for a few conversations (plain, multi-turn, tools with a call and
its result, thinking off). The Rust test (tests/suite/engine/template.rs) renders the same with agentd's minijinja
environment and requires byte-identical text, or an error where Jinja2 raised one.

The templates are the ones llama.cpp keeps in models/templates/ (fetched there from the models' repositories);
they are copied to tests/data/templates/. Gemma 3's (not among llama.cpp's) was taken from its
tokenizer_config.json and is kept in tests/data/templates/ as is. Regenerate with a llama.cpp checkout (the refbench venv has jinja2):

    /path/to/refbench-venv/bin/python scripts/template_reference.py --templates /path/to/llama.cpp/models/templates
"""

import argparse
import json
import os
import shutil

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

# (file stem, family, bos, eos)
TEMPLATES = [
    ("Qwen-Qwen3-0.6B", "qwen3", "", "<|im_end|>"),
    ("Qwen3-Coder", "qwen3-coder", "", "<|im_end|>"),
    ("meta-llama-Llama-3.1-8B-Instruct", "llama3.1", "<|begin_of_text|>", "<|eot_id|>"),
    ("meta-llama-Llama-3.2-3B-Instruct", "llama3.2", "<|begin_of_text|>", "<|eot_id|>"),
    ("microsoft-Phi-3.5-mini-instruct", "phi3", "<s>", "<|endoftext|>"),
    ("mistralai-Mistral-Nemo-Instruct-2407", "mistral", "<s>", "</s>"),
    ("unsloth-mistral-Devstral-Small-2507", "devstral", "<s>", "</s>"),
    ("google-gemma-2-2b-it", "gemma", "<bos>", "<eos>"),
    ("google-gemma-3-it", "gemma3", "<bos>", "<eos>"),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek-r1", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
]

READ_TOOL = {"type": "function", "function": {
    "name": "read_file", "description": "Read a text file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "Relative path"}},
                   "required": ["path"]}}}

CASES = {
    "chat": dict(messages=[
        {"role": "system", "content": "You are a careful coding assistant."},
        {"role": "user", "content": "Write hello world in Rust, ünïcödé ✓."}]),
    "multi_turn": dict(messages=[
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello. How can I help?"},
        {"role": "user", "content": "  What is 2+3?  "}]),
    "tools": dict(tools=[READ_TOOL], messages=[
        {"role": "system", "content": "Use tools when needed."},
        {"role": "user", "content": "Show me notes.txt"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "abcDEF123", "type": "function", "function": {
            "name": "read_file", "arguments": {"path": "notes.txt"}}}]},
        {"role": "tool", "tool_call_id": "abcDEF123", "name": "read_file", "content": "buy milk\n"},
        {"role": "user", "content": "Thanks. Summarise it."}]),
    "thinking_off": dict(enable_thinking=False, messages=[
        {"role": "user", "content": "What is 2+3?"}]),
}


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    # The date a render was made on is not reproducible: the test puts its own in this marker's place.
    return "@@strftime_now(" + fmt + ")@@"


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--templates", required=True, help="llama.cpp's models/templates directory")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "templates"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    env = environment()
    renders = []
    for stem, family, bos, eos in TEMPLATES:
        # Templates llama.cpp does not keep (Gemma 3's, from its tokenizer_config.json) are already in --out.
        src = os.path.join(args.templates, stem + ".jinja")
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(args.out, stem + ".jinja"))
        source = open(os.path.join(args.out, stem + ".jinja"), encoding="utf-8").read()
        template = env.from_string(source)
        for case, spec in CASES.items():
            if "enable_thinking" in spec and "enable_thinking" not in source:
                continue
            ctx = dict(messages=spec["messages"], tools=spec.get("tools"), add_generation_prompt=True,
                       bos_token=bos, eos_token=eos)
            if "enable_thinking" in spec:
                ctx["enable_thinking"] = spec["enable_thinking"]
            entry = {"template": stem, "family": family, "case": case, "bos": bos, "eos": eos,
                     "messages": spec["messages"], "tools": spec.get("tools"),
                     "enable_thinking": spec.get("enable_thinking")}
            try:
                entry["expected"] = template.render(**ctx)
            except jinja2.exceptions.TemplateError as e:
                entry["error"] = str(e)
            renders.append(entry)
    with open(os.path.join(args.out, "renders.json"), "w", encoding="utf-8") as f:
        json.dump(renders, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(renders)} renders of {len(TEMPLATES)} templates")


if __name__ == "__main__":
    main()
