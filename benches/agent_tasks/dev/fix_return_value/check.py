import stats

assert stats.max_of([3, 9, 2]) == 9, "max_of([3, 9, 2]) should be 9, got %r" % stats.max_of([3, 9, 2])
assert stats.max_of([-5, -1, -7]) == -1
assert stats.max_of([4]) == 4
assert stats.mean([1, 2, 3]) == 2
print("ok")
