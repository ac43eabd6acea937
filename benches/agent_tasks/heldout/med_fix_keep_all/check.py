import ast

tree = ast.parse(open("stats.py").read())
exported = None
for node in tree.body:
    if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
        exported = ast.literal_eval(node.value)
assert exported is not None, "stats.py has no __all__ any more"
assert sorted(exported) == ["mean", "median", "percentile", "spread"], "__all__ is now %r" % (exported,)
import dashboard
import stats

assert stats.median([1, 2, 3, 4]) == 2.5, stats.median([1, 2, 3, 4])
assert stats.median([4, 1, 3, 2]) == 2.5
assert stats.median([5, 1, 3]) == 3
assert stats.median([7]) == 7 and stats.median([2, 8]) == 5
try:
    stats.median([])
except ValueError:
    pass
else:
    raise AssertionError("median([]) no longer raises ValueError")
assert stats.mean([1, 2, 3, 4]) == 2.5 and stats.spread([3, 9, 4]) == 6
assert stats.percentile(list(range(1, 101)), 95) == 95
assert dashboard.latency_line([10, 20, 30, 40]) == "p50 25.0 ms, p95 40.0 ms, mean 25.0 ms", dashboard.latency_line([10, 20, 30, 40])
print("ok")
