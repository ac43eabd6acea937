"""Text reports over the store."""

from typing import List

from models import Account
from store import Store


def active_users(store: Store) -> List[Account]:
    return [r for r in store.all() if r.active]


def admin_report(store: Store) -> str:
    lines = []
    for record in active_users(store):
        if record.is_admin():
            lines.append(record.display())
    return "\n".join(lines)


def describe(record: Account) -> str:
    state = "active" if record.active else "inactive"
    return "Account %s (%s)" % (record.display(), state)
