"""A scripted stand-in for a capable model behind an OpenAI-compatible Chat Completions server (the "fake remote
server" the brief allows): `agentd serve` with the remote provider points at it, so a real client's whole task —
its request through agentd's API, the tool call back in the client's own shape, the client running its own tool,
the result going back, the final answer — runs without the 0.5B model's limits deciding the outcome.

What it plays, from what a request holds (nothing about any one client is written here):
- files named in the last user message ("the file NAME", "the files A and B") that no tool result after it
  answers yet: a call for each (all at once, or one per turn when the request says `parallel_tool_calls: false`)
  of the request's file-reading tool (a tool named read / read_file / view with a path-like parameter; a
  relative path is made absolute with the working directory the system prompt names, when the parameter asks
  for an absolute one), else of its shell tool (`cat FILE` in the command parameter);
- "In the file NAME change … from OLD to NEW": a read of the file, then an edit (the request's edit tool, old and
  new text as its schema names them, at the top or in an array of edits; else `sed` in its shell tool), then a
  short text saying so;
- every file answered: a final answer quoting what the results say the secret words are (or, if they say
  none, the last result's first line);
- anything else (a client's side requests, a title, a summary): a short text.

Replies stream as Chat Completions chunks with usage, as vLLM sends them (a fixed small count, or with
`estimate_usage` a count from the request's size, and then a prompt over `window` is refused as vLLM refuses it);
`/models` reports `window`. `requests` keeps every request
body.
"""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "scripted-capable"
READ_TOOLS = ("read", "read_file", "view", "readfile")
EDIT_TOOLS = ("edit", "edit_file", "str_replace")
SHELL_TOOLS = ("bash", "shell", "exec_command", "run_command", "terminal")


def text_of(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def tool_name(tool) -> str:
    return (tool.get("function") or {}).get("name", "")


def tool_params(tool) -> dict:
    return (tool.get("function") or {}).get("parameters") or {}


def working_directory(messages) -> str | None:
    for m in messages:
        if m.get("role") in ("system", "developer"):
            found = re.search(r"[Ww]orking directory:\s*(/[^\s\\\"']+)", text_of(m.get("content")))
            if found:
                return found.group(1)
    return None


def path_arg(tool, file, messages):
    """(key, value) of `tool`'s path parameter for `file`, or None."""
    props = tool_params(tool).get("properties") or {}
    key = next((k for k in props if "path" in k.lower() or k.lower() in ("file", "filename")), None)
    if key is None:
        return None
    cwd = working_directory(messages)
    if "absolute" in json.dumps(props[key]).lower() and not file.startswith("/") and cwd:
        file = f"{cwd.rstrip('/')}/{file}"
    return key, file


def shell_call(tools, command):
    by_name = {tool_name(t).lower(): t for t in tools}
    for name in SHELL_TOOLS:
        if name in by_name:
            props = tool_params(by_name[name]).get("properties") or {}
            key = next((k for k in ("command", "cmd") if k in props), None)
            if key is not None:
                value = ["bash", "-lc", command] if (props[key] or {}).get("type") == "array" else command
                return tool_name(by_name[name]), {key: value}
    return None


def read_call(file, tools, messages):
    """(name, arguments) of the call that reads `file` with the request's own tools, or None."""
    by_name = {tool_name(t).lower(): t for t in tools}
    for name in READ_TOOLS:
        arg = name in by_name and path_arg(by_name[name], file, messages)
        if arg:
            return tool_name(by_name[name]), dict([arg])
    return shell_call(tools, f"cat {file}")


def old_new(props, old, new):
    """`{old key: old, new key: new}` for a schema with old- and new-text properties, or None."""
    o = next((k for k in props if "old" in k.lower()), None)
    n = next((k for k in props if "new" in k.lower()), None)
    return {o: old, n: new} if o and n else None


def edit_call(file, old, new, tools, messages):
    """(name, arguments) of the call that replaces `old` by `new` in `file`: the request's edit tool (old/new
    text at the top or in an array of edits), else its shell tool (`sed`)."""
    by_name = {tool_name(t).lower(): t for t in tools}
    for name in EDIT_TOOLS:
        arg = name in by_name and path_arg(by_name[name], file, messages)
        if not arg:
            continue
        props = tool_params(by_name[name]).get("properties") or {}
        top = old_new(props, old, new)
        if top:
            return tool_name(by_name[name]), {**dict([arg]), **top}
        for key, schema in props.items():
            inner = (schema or {}).get("type") == "array" and old_new(
                ((schema.get("items") or {}).get("properties") or {}), old, new)
            if inner:
                return tool_name(by_name[name]), {**dict([arg]), key: [inner]}
    return shell_call(tools, f"sed -i 's/{old}/{new}/' {file}")


FILE = r"[\w./-]*\w\.[A-Za-z0-9]+"


def files_asked(text: str) -> list[str]:
    """The files of "the file NAME" / "the files A and B" (clients add reminders to the user's turn that name
    other files and say "e.g.")."""
    found = re.search(rf"\bfiles?\s+`?({FILE}`?(?:(?:,\s*|,?\s+and\s+)`?{FILE}`?)*)", text)
    return re.findall(FILE, found.group(1)) if found else []


def reply_for(body):
    """("text", str) or ("calls", [(name, arguments), …]) for one request: every file at once when the request
    allows parallel calls, else one per turn."""
    messages = body.get("messages") or []
    tools = body.get("tools") or []
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    results = [text_of(m.get("content")) for m in messages[last_user + 1:] if m.get("role") == "tool"]
    asked = text_of(messages[last_user].get("content")) if last_user >= 0 else ""
    files = files_asked(asked)
    change = re.search(r"\bchange\b.*?\bfrom\s+`?([\w.-]*\w)`?\s+to\s+`?([\w.-]*\w)", asked)
    if change and files and tools:
        # Read the file, then edit it, then say so.
        old, new = change.groups()
        if len(results) < 2:
            call = (read_call(files[0], tools, messages) if not results
                    else edit_call(files[0], old, new, tools, messages))
            if call:
                return ("calls", [call])
        return ("text", f"Changed {old} to {new} in {files[0]}.")
    left = files[len(results):]
    if left and tools and body.get("tool_choice") != "none":
        if body.get("parallel_tool_calls") is False:
            left = left[:1]
        calls = [read_call(f, tools, messages) for f in left]
        if all(calls):
            return ("calls", calls)
    if results:
        words = [w.group(1) for w in (re.search(r"secret word is:?\s*([\w-]+)", r, re.IGNORECASE)
                                      for r in results) if w]
        if len(words) == 1:
            return ("text", f"The secret word is {words[0]}.")
        if words:
            return ("text", "The secret words are " + " and ".join(words) + ".")
        first = next((line for line in results[-1].splitlines() if line.strip()), "")
        return ("text", f"The file says: {first.strip()}")
    return ("text", "OK.")


def usage_for(body, reply):
    """Usage as a real server would count it, roughly: a token per three characters of the request's messages and
    tools (more than a BPE tokenizer counts, so a client compacting on these numbers compacts early enough)."""
    prompt = len(json.dumps(body.get("messages") or []) + json.dumps(body.get("tools") or [])) // 3 + 1
    completion = len(json.dumps(reply[1])) // 3 + 1
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, status, value):
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            self.send_json(200, {"object": "list", "data": [
                {"id": MODEL, "object": "model", "owned_by": "test", "max_model_len": self.server.window}]})
        else:
            self.send_json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if not self.path.endswith("/chat/completions"):
            self.send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        self.server.requests.append(body)
        reply = reply_for(body)
        if self.server.estimate_usage:
            prompt = usage_for(body, reply)["prompt_tokens"]
            if prompt > self.server.window:
                # vLLM's refusal of a prompt over its max_model_len.
                self.send_json(400, {"object": "error", "type": "BadRequestError", "code": 400, "message": (
                    f"This model's maximum context length is {self.server.window} tokens. However, your "
                    f"request has {prompt} input tokens. Please reduce the length of the input messages.")})
                return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()

        def chunk(delta, finish=None, usage=None):
            data = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0,
                    "model": MODEL, "choices": [] if usage else [
                        {"index": 0, "delta": delta, "finish_reason": finish}]}
            if usage:
                data["usage"] = usage
            self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        chunk({"role": "assistant", "content": ""})
        if reply[0] == "calls":
            for i, (name, arguments) in enumerate(reply[1]):
                args = json.dumps(arguments)
                chunk({"tool_calls": [{"index": i, "id": f"call_{len(self.server.requests)}_{i}",
                                       "type": "function", "function": {"name": name, "arguments": ""}}]})
                for piece in (args[: len(args) // 2], args[len(args) // 2:]):
                    chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
            chunk({}, "tool_calls")
        else:
            for word in re.findall(r"\S+\s*", reply[1]):
                chunk({"content": word})
            chunk({}, "stop")
        chunk({}, usage=usage_for(body, reply) if self.server.estimate_usage else
              {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


class ScriptedModel:
    """The server on a free loopback port, in a thread; `base_url` ends in /v1."""

    def __init__(self, window=32768, estimate_usage=False):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.requests = []
        self.httpd.window = window
        # Usage counted from the request (for clients that compact on it), else a fixed small count.
        self.httpd.estimate_usage = estimate_usage
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def requests(self):
        return self.httpd.requests

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
