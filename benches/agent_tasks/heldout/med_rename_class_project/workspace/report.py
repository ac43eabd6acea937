"""Text reports over the store."""

from typing import List

from models import UserRecord
from store import Store


def active_users(store: Store) -> List[UserRecord]:
    return [r for r in store.all() if r.active]


def admin_report(store: Store) -> str:
    lines = []
    for record in active_users(store):
        if record.is_admin():
            lines.append(record.display())
    return "\n".join(lines)


def describe(record: UserRecord) -> str:
    state = "active" if record.active else "inactive"
    return "UserRecord %s (%s)" % (record.display(), state)
