#!/usr/bin/env python3
"""Run the agent task set against an `agentd` binary and report, per task, whether the model's edit landed and
whether the task's check passes.

Each task is a folder next to this file holding
  task.toml    prompt = "...", check = "python3 check.py", optional tools = "read,edit,write,bash"
  workspace/   the starting files
  check.py     the check (copied into the workspace only after the agent has finished, so the model never sees it)
  solution/    hand-made fixed files, laid over workspace/ by --selftest

Python 3 standard library only. See README.md.
"""

import argparse
import difflib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"
IGNORED_DIRS = {"__pycache__", ".pytest_cache"}
CHECK_TIMEOUT_S = 120


# --- tasks -----------------------------------------------------------------------------------------------------


def parse_toml(text):
    """task.toml: tomllib where there is one (3.11+), else the `key = "string"` lines these files use."""
    try:
        import tomllib

        return tomllib.loads(text)
    except ImportError:
        out = {}
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, _, value = line.partition("=")
            out[key.strip()] = json.loads(value.strip())
        return out


def load_tasks(tasks_dir, only):
    tasks = []
    for name in sorted(os.listdir(tasks_dir)):
        path = os.path.join(tasks_dir, name)
        toml_path = os.path.join(path, "task.toml")
        if not os.path.isfile(toml_path):
            continue
        if only and name not in only:
            continue
        with open(toml_path, encoding="utf-8") as f:
            spec = parse_toml(f.read())
        for key in ("prompt", "check"):
            if not isinstance(spec.get(key), str) or not spec[key].strip():
                sys.exit(f"{toml_path}: `{key}` must be a non-empty string")
        if not os.path.isdir(os.path.join(path, "workspace")):
            sys.exit(f"{path}: no workspace/ folder")
        tasks.append({"name": name, "dir": path, **spec})
    if only:
        missing = set(only) - {t["name"] for t in tasks}
        if missing:
            sys.exit("no such task: " + ", ".join(sorted(missing)))
    return tasks


# --- workspaces ------------------------------------------------------------------------------------------------


def snapshot(root):
    """{relative path: bytes} of every file under root, skipping caches that running Python leaves behind."""
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in IGNORED_DIRS]
        for fn in filenames:
            if fn.endswith(".pyc"):
                continue
            full = os.path.join(dirpath, fn)
            rel = os.path.relpath(full, root)
            try:
                with open(full, "rb") as f:
                    files[rel] = f.read()
            except OSError:
                files[rel] = None
    return files


def changed_files(before, after):
    out = []
    for path in sorted(set(before) | set(after)):
        if path not in after:
            out.append(("deleted", path))
        elif path not in before:
            out.append(("added", path))
        elif before[path] != after[path]:
            out.append(("modified", path))
    return out


def unified_diff(before, after, changes, limit=4000):
    chunks = []
    for _, path in changes:
        a = (before.get(path) or b"").decode("utf-8", "replace").splitlines(keepends=True)
        b = (after.get(path) or b"").decode("utf-8", "replace").splitlines(keepends=True)
        chunks.extend(difflib.unified_diff(a, b, "a/" + path, "b/" + path))
    text = "".join(chunks)
    return text if len(text) <= limit else text[:limit] + "\n…(diff cut)\n"


def fresh_workspace(task, root):
    ws = os.path.join(root, task["name"])
    shutil.copytree(os.path.join(task["dir"], "workspace"), ws)
    return ws


def run_check(task, ws):
    """Copy the task's check.py into the workspace (overwriting anything the model wrote there) and run `check`."""
    check_py = os.path.join(task["dir"], "check.py")
    if os.path.isfile(check_py):
        shutil.copy(check_py, os.path.join(ws, "check.py"))
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", TASK_DIR=task["dir"])
    try:
        r = subprocess.run(
            ["bash", "-c", task["check"]],
            cwd=ws,
            env=env,
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
        )
        return r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        return False, f"check timed out after {CHECK_TIMEOUT_S} s"


# --- the agent run ---------------------------------------------------------------------------------------------


def run_agent(cmd, cwd, timeout):
    """Run cmd in its own process group; on timeout kill that group. Returns (rc, stdout, stderr, timed_out)."""
    p = subprocess.Popen(
        cmd,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err, False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
        return p.returncode, out, err, True


def text_of(message):
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = []
    for part in content or []:
        if isinstance(part, dict) and part.get("type") == "text":
            parts.append(part.get("text", ""))
    return "".join(parts)


def looks_like_text_call(text):
    """A tool call written as text instead of made: a fenced JSON block or a bare {"name": …, "arguments": …}."""
    t = text.replace(" ", "")
    return "```json" in text or "<tool_call>" in text or ('"name":' in t and '"arguments":' in t)


def parse_events(stdout):
    """Summarise the `--mode json` event lines: tool calls made, their errors, assistant texts, output tokens."""
    info = {
        "tool_calls": 0,
        "tool_errors": 0,
        "calls": [],
        "assistant_texts": [],
        "turns": 0,
        "output_tokens": 0,
        "end_reason": None,
        "bad_lines": 0,
    }
    pending = {}
    for raw in stdout.splitlines():
        if raw.startswith(b'{"type":"message_update"'):
            continue  # each carries the whole message so far; message_end has the final one
        try:
            ev = json.loads(raw)
        except ValueError:
            info["bad_lines"] += 1
            continue
        kind = ev.get("type")
        if kind == "message_update":
            continue
        if kind == "tool_execution_start":
            info["tool_calls"] += 1
            call = {"tool": ev.get("tool_name"), "args": ev.get("args"), "is_error": None, "result": None}
            pending[ev.get("tool_call_id")] = call
            info["calls"].append(call)
        elif kind == "tool_execution_end":
            call = pending.pop(ev.get("tool_call_id"), None)
            if call is None:
                call = {"tool": ev.get("tool_name"), "args": None}
                info["calls"].append(call)
            call["is_error"] = bool(ev.get("is_error"))
            result = ev.get("result") or {}
            call["result"] = (result.get("content") if isinstance(result, dict) else str(result) or "")[:400]
            if call["is_error"]:
                info["tool_errors"] += 1
        elif kind == "message_end":
            msg = ev.get("message") or {}
            if msg.get("role") == "assistant":
                info["assistant_texts"].append(text_of(msg))
                usage = msg.get("usage") or {}
                info["output_tokens"] += int(usage.get("output") or 0)
        elif kind == "turn_end":
            info["turns"] += 1
        elif kind == "agent_end":
            info["end_reason"] = ev.get("reason")
    return info


def agent_command(args, task, ws):
    # The workspace is a throwaway copy: every tool may run (print mode would deny exec by default).
    cmd = [args.agentd, "run", "--no-session", "--model", args.model, "--mode", "json", "--allow", "all"]
    if not args.online:
        cmd.append("--offline")
    if not args.no_confine:
        cmd += ["--workspace", ws]
    if task.get("tools"):
        cmd += ["--tools", task["tools"]]
    if args.temperature is not None:
        cmd += ["--temperature", str(args.temperature)]
    if args.seed is not None:
        cmd += ["--seed", str(args.seed)]
    cmd += args.extra or []
    cmd += ["-p", task["prompt"]]
    return cmd


def run_task(args, task, root, attempt):
    ws = fresh_workspace(task, root)
    before = snapshot(ws)
    cmd = agent_command(args, task, ws)
    t0 = time.monotonic()
    rc, out, err, timed_out = run_agent(cmd, ws, args.timeout)
    seconds = time.monotonic() - t0
    after = snapshot(ws)
    changes = changed_files(before, after)
    passed, check_out = run_check(task, ws)
    ev = parse_events(out)
    texts = ev.pop("assistant_texts")
    result = {
        "task": task["name"],
        "attempt": attempt,
        "model": args.model,
        "tool_calls": ev["tool_calls"],
        "tool_errors": ev["tool_errors"],
        "tools_used": [c["tool"] for c in ev["calls"]],
        "edit_landed": bool(changes),
        "changed_files": [f"{kind} {path}" for kind, path in changes],
        "check_passed": passed,
        "seconds": round(seconds, 1),
        "rc": rc,
        "timed_out": timed_out,
        "turns": ev["turns"],
        "output_tokens": ev["output_tokens"],
        "end_reason": ev["end_reason"],
        "text_tool_call": any(looks_like_text_call(t) for t in texts),
        "calls": ev["calls"],
        "final_text": (texts[-1] if texts else "")[:1500],
        "diff": unified_diff(before, after, changes),
        "check_output": check_out,
        "stderr_tail": err.decode("utf-8", "replace")[-1500:],
        "command": cmd,
    }
    if args.logs:
        base = os.path.join(args.logs, f"{task['name']}.{attempt}")
        with open(base + ".stdout.jsonl", "wb") as f:
            f.write(out)
        with open(base + ".stderr.txt", "wb") as f:
            f.write(err)
    return result


# --- reporting -------------------------------------------------------------------------------------------------


def yes(b):
    return "yes" if b else "no"


def notes(r):
    n = []
    if r["timed_out"]:
        n.append("timed out")
    elif r["rc"] not in (0, None):
        n.append(f"rc {r['rc']}")
    if r["tools_used"]:
        n.append("calls: " + ",".join(str(t) for t in r["tools_used"]))
    if r["tool_errors"]:
        n.append(f"{r['tool_errors']} tool error(s)")
    if r["text_tool_call"]:
        n.append("call written as text")
    return "; ".join(n)


def table(results, model):
    lines = [
        f"Model: `{model}`",
        "",
        "| task | tool calls | edit landed | check passes | seconds | notes |",
        "|---|---:|:---:|:---:|---:|---|",
    ]
    for r in results:
        name = r["task"] if r["attempt"] == 1 else f"{r['task']} #{r['attempt']}"
        lines.append(
            f"| {name} | {r['tool_calls']} | {yes(r['edit_landed'])} | {yes(r['check_passed'])} "
            f"| {r['seconds']:.1f} | {notes(r)} |"
        )
    n = len(results)
    lines.append(
        f"| **total ({n} run{'' if n == 1 else 's'})** | {sum(r['tool_calls'] for r in results)} "
        f"| {sum(r['edit_landed'] for r in results)}/{n} | {sum(r['check_passed'] for r in results)}/{n} "
        f"| {sum(r['seconds'] for r in results):.1f} | |"
    )
    return "\n".join(lines)


# --- self-test -------------------------------------------------------------------------------------------------


def selftest(tasks):
    """Every check must fail on the untouched workspace and pass once solution/ is laid over it."""
    ok = True
    root = tempfile.mkdtemp(prefix="agent-tasks-selftest-")
    try:
        for task in tasks:
            problems = []
            sol = os.path.join(task["dir"], "solution")
            if not os.path.isdir(sol):
                problems.append("no solution/ folder")
            ws = fresh_workspace(task, os.path.join(root, "before"))
            passed, out = run_check(task, ws)
            if passed:
                problems.append("check PASSES on the untouched workspace")
            if os.path.isdir(sol):
                ws2 = fresh_workspace(task, os.path.join(root, "after"))
                before = snapshot(ws2)
                shutil.copytree(sol, ws2, dirs_exist_ok=True)
                if not changed_files(before, snapshot(ws2)):
                    problems.append("solution/ changes nothing")
                passed2, out2 = run_check(task, ws2)
                if not passed2:
                    problems.append("check FAILS on the solution:\n" + out2)
            status = "ok" if not problems else "FAIL"
            first = out.strip().splitlines()[-1] if out.strip() else ""
            print(f"{status:4}  {task['name']:24} untouched -> fails ({first[:70]})" if not problems else
                  f"{status:4}  {task['name']}: " + "; ".join(problems))
            ok = ok and not problems
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return ok


# --- main ------------------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agentd", default=os.environ.get("AGENTD_BIN", "agentd"),
                    help="the agentd binary (default: $AGENTD_BIN, else agentd on PATH)")
    ap.add_argument("--model", default=DEFAULT_MODEL, help=f"model name (default {DEFAULT_MODEL})")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per agent run (default 300)")
    ap.add_argument("--only", action="append", help="run only this task (repeat, or comma-separate)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per task (sampling is random unless --seed)")
    ap.add_argument("--temperature", type=float, help="pass --temperature to agentd")
    ap.add_argument("--seed", type=int, help="pass --seed to agentd")
    ap.add_argument("--extra", action="append", metavar="ARG",
                    help="one more argument for `agentd run` (repeat; e.g. --extra=--threads=2)")
    ap.add_argument("--online", action="store_true", help="do not pass --offline (allow model downloads)")
    ap.add_argument("--no-confine", action="store_true", help="do not pass --workspace <task workspace>")
    ap.add_argument("--json", metavar="FILE", help="save the full results (calls, diffs, answers) as JSON")
    ap.add_argument("--logs", metavar="DIR", help="save each run's raw stdout (events) and stderr here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary workspaces and print where")
    ap.add_argument("--tasks-dir", default=HERE, help="where the task folders are (default: next to run.py)")
    ap.add_argument("--selftest", action="store_true",
                    help="check the checks: fail on workspace/, pass with solution/; runs no model")
    args = ap.parse_args()

    only = {n.strip() for o in (args.only or []) for n in o.split(",") if n.strip()}
    tasks = load_tasks(args.tasks_dir, only)
    if not tasks:
        sys.exit("no tasks found")

    if args.selftest:
        sys.exit(0 if selftest(tasks) else 1)

    if shutil.which(args.agentd) is None and not os.access(args.agentd, os.X_OK):
        sys.exit(f"agentd binary not found: {args.agentd} (use --agentd or AGENTD_BIN)")
    if args.logs:
        os.makedirs(args.logs, exist_ok=True)

    root = tempfile.mkdtemp(prefix="agent-tasks-")
    results = []
    try:
        for attempt in range(1, args.repeat + 1):
            for task in tasks:
                r = run_task(args, task, os.path.join(root, str(attempt)), attempt)
                results.append(r)
                print(
                    f"[{task['name']}#{attempt}] calls={r['tool_calls']} landed={yes(r['edit_landed'])} "
                    f"check={yes(r['check_passed'])} {r['seconds']:.1f}s {notes(r)}",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if args.keep:
            print(f"workspaces kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)

    print(table(results, args.model))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"model": args.model, "agentd": args.agentd, "results": results}, f, indent=2)
    sys.exit(0)


if __name__ == "__main__":
    main()
