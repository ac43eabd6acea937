# The examples a Python function's docstring gives (`>>> f(2)` with its output, or `f(2) == 4` in a sentence),
# run against the file as it is now. A function the file had before the change keeps the examples it had then: a
# change that rewrites an example to match what the code now returns does not pass. argv: the file, its text
# before the change in base64 (`-`: none), then the names of the functions to check. Prints one line per example
# that does not hold and exits 1; exits 0 when all hold or nothing can be told.
import ast
import base64
import doctest
import io
import os
import sys

path, original, names = sys.argv[1], sys.argv[2], set(sys.argv[3:])
try:
    with open(path) as f:
        tree = ast.parse(f.read(), path)
except (OSError, SyntaxError, ValueError):
    sys.exit(0)


def docstrings(tree):
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
            doc = ast.get_docstring(node)
            if doc:
                found.setdefault(node.name, doc)
    return found


now = docstrings(tree)
try:
    before = docstrings(ast.parse(base64.b64decode(original).decode())) if original != "-" else {}
except (SyntaxError, ValueError):
    before = {}
# A function the file still defines keeps its old examples, even when the change dropped its docstring.
defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
docs = [(name, before.get(name) or now.get(name)) for name in sorted(defined & names)]
docs = [(name, doc) for name, doc in docs if doc]
if not docs:
    sys.exit(0)
# Definitions only: the module's own top-level statements (a script's main work) do not run.
kept = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)
tree.body = [n for n in tree.body if isinstance(n, kept)]
sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
scope = {"__name__": "__examples__", "__file__": path}
try:
    exec(compile(tree, path, "exec"), scope)
except BaseException:
    sys.exit(0)


def sentence_examples(name, doc):
    """`name(...) == value` written in the docstring's text: the longest such expression at each call."""
    for line in doc.splitlines():
        at = line.find(name + "(")
        while at >= 0:
            before = line[at - 1] if at > 0 else " "
            if not (before.isalnum() or before in "_."):
                rest = line[at:].rstrip()
                for end in range(len(rest), len(name) + 1, -1):
                    text = rest[:end]
                    try:
                        expr = ast.parse(text, mode="eval").body
                    except SyntaxError:
                        continue
                    if (
                        isinstance(expr, ast.Compare)
                        and len(expr.ops) == 1
                        and isinstance(expr.ops[0], ast.Eq)
                        and isinstance(expr.left, ast.Call)
                        and isinstance(expr.left.func, ast.Name)
                        and expr.left.func.id == name
                    ):
                        yield text, expr
                        break
            at = line.find(name + "(", at + 1)


def value(node):
    return eval(compile(ast.Expression(node), path, "eval"), dict(scope))


failures = []
for name, doc in docs:
    if ">>>" in doc:
        out = io.StringIO()
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        test = doctest.DocTestParser().get_doctest(doc, dict(scope), name, path, 0)
        try:
            result = runner.run(test, out=out.write)
        except BaseException:
            continue
        if result.failed:
            report = [l for l in out.getvalue().strip().splitlines() if l.strip("*")]
            failures.append("the examples in the docstring of %s() fail:\n%s" % (name, "\n".join(report)))
        continue
    for text, expr in sentence_examples(name, doc):
        try:
            want = value(expr.comparators[0])
        except BaseException:
            continue
        call = expr.left
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            continue
        try:
            args = [value(a) for a in call.args]
            kwargs = {k.arg: value(k.value) for k in call.keywords}
        except BaseException:
            continue
        try:
            got = scope[name](*args, **kwargs)
        except BaseException as e:
            failures.append("the docstring of %s() says %s, but it raises %s: %s" % (name, text, type(e).__name__, e))
            continue
        if got != want:
            failures.append("the docstring of %s() says %s, but it returns %r" % (name, text, got))
for failure in failures:
    print(failure)
sys.exit(1 if failures else 0)
