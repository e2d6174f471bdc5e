"""Load-time errors with their location: file, policy, rule, field and CEL position."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PolicyError:
    """One problem that keeps a policy (or a file) from loading.

    Rendered as `policies/org.yaml: policy org-wide-policy, rule multi-zone-ha, condition: <input>:1:12: ...`
    so that `placer lint`, the server log and policy status all say where to look.
    """

    source: str
    message: str
    policy: str | None = None
    rule: str | None = None
    field: str | None = None

    def __str__(self) -> str:
        parts = [f"policy {self.policy}" if self.policy else None, f"rule {self.rule}" if self.rule else None]
        where = ", ".join(part for part in parts if part)
        location = f"{where}, {self.field}" if where and self.field else (where or self.field or "")
        return f"{self.source}: {location}: {self.message}" if location else f"{self.source}: {self.message}"
