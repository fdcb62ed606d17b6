"""Keep secret values out of everything a task returns.

The values masked for a task are those of the provider fields its plugin declares
`sensitive`, wherever they came from, plus every value of the provisioner's secrets file for
that provider that the descriptor does not declare as non-sensitive. Values shorter than
`MIN_SECRET_LENGTH` are not masked (masking "0" would mangle all output; such a value is no
secret anyway).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from contracts.tasks import TaskOutcome

MASK = "********"
MIN_SECRET_LENGTH = 4


def _scalars(value: Any) -> Iterable[str]:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _scalars(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _scalars(item)
    else:
        yield str(value)


class Masker:
    def __init__(self, secrets: Iterable[Any] = ()) -> None:
        values = {text for value in secrets for text in _scalars(value) if len(text) >= MIN_SECRET_LENGTH}
        # Longest first, so that a secret containing another is masked whole.
        self._values = sorted(values, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._values)

    def text(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, MASK)
        return text

    def value(self, value: Any) -> Any:
        if not self._values:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(v) for v in value]
        if isinstance(value, (int, float)) and not isinstance(value, bool) and str(value) in self._values:
            return MASK
        return value

    def outcome(self, outcome: TaskOutcome) -> TaskOutcome:
        if not self._values:
            return outcome
        # A copy, so that what holds no text (ok, may_have_made, permanent) passes as it is.
        return outcome.model_copy(update={
            "result": self.value(outcome.result),
            "ipaddresses": self.value(outcome.ipaddresses),
            "hostname": self.text(outcome.hostname),
            "stdout": self.text(outcome.stdout),
            "stderr": self.text(outcome.stderr),
            "error": self.text(outcome.error),
        })
