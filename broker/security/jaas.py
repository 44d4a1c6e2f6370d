"""Kafka's JAAS configuration text, as `sasl.jaas.config` holds it:

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

One login module, a control flag, then `key=value` options (values quoted or bare), ending in `;`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;))')


class JaasError(ValueError):
    """The text is not a JAAS login module entry."""


@dataclass(frozen=True, slots=True)
class JaasEntry:
    module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    def users(self) -> dict[str, str]:
        """PlainLoginModule's static users: `user_<name>="<password>"` options."""
        return {k[len("user_"):]: v for k, v in self.options.items() if k.startswith("user_")}


def _tokens(text: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    at = 0
    while at < len(text.rstrip()):
        m = _TOKEN.match(text, at)
        if m is None or m.end() == at:
            raise JaasError(f"cannot read {text[at:at + 20]!r}")
        quoted, bare, eq, semi = m.groups()
        if quoted is not None:
            found.append(("value", re.sub(r"\\(.)", r"\1", quoted)))
        elif bare is not None:
            found.append(("word", bare))
        else:
            found.append(("=", "=") if eq else (";", ";"))
        at = m.end()
    return found


def parse_jaas(text: str) -> JaasEntry:
    """One login module entry; JaasError says what is wrong."""
    tokens = _tokens(text)
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word" or tokens[-1][0] != ";":
        raise JaasError("expected `<LoginModule class> required key=\"value\" ... ;`")
    module, flag = tokens[0][1], tokens[1][1].lower()
    if flag not in FLAGS:
        raise JaasError(f"control flag {tokens[1][1]!r} is not one of {', '.join(FLAGS)}")
    options: dict[str, str] = {}
    body = tokens[2:-1]
    if len(body) % 3:
        raise JaasError("options must be key=value pairs")
    for i in range(0, len(body), 3):
        (kk, key), (ek, _), (vk, value) = body[i:i + 3]
        if kk != "word" or ek != "=" or vk not in ("value", "word"):
            raise JaasError(f"option {i // 3 + 1} is not key=value")
        options[key] = value
    return JaasEntry(module, flag, options)
