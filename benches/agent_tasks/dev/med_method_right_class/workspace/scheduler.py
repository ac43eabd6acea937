from containers import Queue, Stack


def run_all(jobs):
    """Runs jobs in order; each job may return follow-up jobs, which run after the current ones."""
    queue = Queue()
    for job in jobs:
        queue.push(job)
    done = []
    while len(queue):
        job = queue.pop()
        done.append(job.__name__)
        for follow_up in job() or []:
            queue.push(follow_up)
    return done


def undo_order(actions):
    stack = Stack()
    for a in actions:
        stack.push(a)
    return [stack.pop() for _ in range(len(stack))]
