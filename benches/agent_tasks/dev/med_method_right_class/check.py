import containers
import scheduler
from containers import Queue, Stack

q = Queue()
for x in ("a", "b", "c"):
    q.push(x)
assert q.peek() == "a", "Queue.peek() gave %r, the front is 'a'" % q.peek()
assert q.peek() == "a" and len(q) == 3, "peek removed an item"
assert q.pop() == "a" and q.peek() == "b"
e = Queue()
try:
    e.peek()
except IndexError:
    pass
else:
    raise AssertionError("peek on an empty queue does not raise IndexError")
assert not hasattr(Stack, "peek"), "peek was added to Stack, not only to Queue"
s = Stack()
s.push(1)
s.push(2)
assert s.pop() == 2 and len(s) == 1
assert scheduler.undo_order([1, 2, 3]) == [3, 2, 1]
print("ok")
