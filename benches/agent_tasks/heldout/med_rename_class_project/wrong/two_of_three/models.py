"""The records the admin tool works with."""

from dataclasses import dataclass, field


@dataclass
class Account:
    name: str
    email: str
    active: bool = True
    roles: list = field(default_factory=list)

    def is_admin(self):
        return "admin" in self.roles

    def display(self):
        return "%s <%s>" % (self.name, self.email)
