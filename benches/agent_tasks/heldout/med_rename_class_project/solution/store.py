"""An in-memory store of user records, keyed by email."""

from models import Account


class Store:
    def __init__(self):
        self._by_email = {}

    def add(self, name, email, roles=()):
        record = Account(name=name, email=email, roles=list(roles))
        self._by_email[email.lower()] = record
        return record

    def get(self, email):
        return self._by_email.get(email.lower())

    def deactivate(self, email):
        record = self.get(email)
        if record is not None:
            record.active = False

    def all(self):
        return sorted(self._by_email.values(), key=lambda r: r.email)
