import nums
assert nums.average([2, 4]) == 3, nums.average([2, 4])
assert nums.total([1, 2]) == 3
print("ok")
