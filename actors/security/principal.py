"""Who a connection is: `KafkaPrincipal` ("User:alice") and Kafka's `ssl.principal.mapping.rules`.

A PLAINTEXT connection, or an SSL one without a client certificate, is User:ANONYMOUS; a SASL
connection is User:<authenticated name>; an SSL connection with a client certificate is
User:<its subject DN mapped by the rules>, as Kafka's DefaultKafkaPrincipalBuilder does.

The rules, tried in order, the first that matches wins (SslPrincipalMapper's format):

    RULE:pattern/replacement/       the pattern must match the whole DN; $1.. in the replacement
    RULE:pattern/replacement/L      name groups ($N past the last group is kept as text), and `\\`
    RULE:pattern/replacement/U      escapes the next character (`\\/` for a slash); L or U changes
    DEFAULT                         the result's case; DEFAULT keeps the DN as it is

separated by commas (empty entries ignored; a pattern may hold commas). A DN no rule maps has no
principal: Kafka fails that client's authentication. Patterns are Python regular expressions,
which agree with Java's on the constructs DN rules use.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

USER_TYPE = "User"
WILDCARD_NAME = "*"
SSL_PRINCIPAL_MAPPING_RULES = "ssl.principal.mapping.rules"
SSL_PRINCIPAL_MAPPING_RULES_DEFAULT = "DEFAULT"


@dataclass(frozen=True, order=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """"Type:name" as Kafka's SecurityUtils.parseKafkaPrincipal splits it (at the first ':')."""
        principal_type, colon, name = (text or "").partition(":")
        if not text or not colon:
            raise ValueError(f"expected a string in format principalType:principalName but got {text!r}")
        return cls(principal_type, name)

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)

    @property
    def is_wildcard(self) -> bool:
        return self.principal_type == USER_TYPE and self.name == WILDCARD_NAME


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
# Kray's own brokers (actors/security/inter_broker.py): a super user, a name no one else may take
BROKER_USER = "kray-broker"
BROKER_PRINCIPAL = KafkaPrincipal(USER_TYPE, BROKER_USER)
WILDCARD_USER = KafkaPrincipal(USER_TYPE, WILDCARD_NAME)


class NoMatchingRule(ValueError):
    """No `ssl.principal.mapping.rules` rule maps this certificate's subject."""


@dataclass(frozen=True)
class MappingRule:
    pattern: re.Pattern | None  # None for DEFAULT
    replacement: tuple[str | int, ...] = ()  # literal text and group numbers
    case: str = ""  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        name = self.pattern.sub(self._expand, dn)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name

    def _expand(self, match: re.Match) -> str:
        return "".join(part if isinstance(part, str) else (match.group(part) or "") for part in self.replacement)


def _until_slash(text: str, start: int) -> tuple[str, int] | None:
    """The text up to the next '/' not escaped by '\\', and the index after that slash."""
    i = start
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == "/":
            return text[start:i], i + 1
        else:
            i += 1
    return None


def _replacement_parts(replacement: str, group_count: int) -> tuple[str | int, ...]:
    """Java's replacement syntax: `\\x` is x, `$N` is group N taking as many digits as name a group;
    a `$N` past the last group stays literal text (Kafka escapes those), as does a lone '$'."""
    parts: list[str | int] = []
    text, i = [], 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\" and i + 1 < len(replacement):
            text.append(replacement[i + 1])
            i += 2
        elif c == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit() and \
                int(replacement[i + 1]) <= group_count:
            number, j = int(replacement[i + 1]), i + 2
            while j < len(replacement) and replacement[j].isdigit() and \
                    number * 10 + int(replacement[j]) <= group_count:
                number, j = number * 10 + int(replacement[j]), j + 1
            if text:
                parts.append("".join(text))
                text = []
            parts.append(number)
            i = j
        else:
            text.append(c)
            i += 1
    if text:
        parts.append("".join(text))
    return tuple(parts)


def _rule_at(text: str, start: int) -> tuple[MappingRule, int]:
    if text.startswith("DEFAULT", start):
        return MappingRule(None), start + len("DEFAULT")
    if not text.startswith("RULE:", start):
        raise ValueError(f"Invalid rule: {_entry_text(text, start)!r} (a rule is RULE:pattern/replacement/[LU] "
                         f"or DEFAULT)")
    pattern_end = _until_slash(text, start + len("RULE:"))
    replacement_end = pattern_end and _until_slash(text, pattern_end[1])
    if not replacement_end:
        raise ValueError(f"Invalid rule: {_entry_text(text, start)!r} needs RULE:pattern/replacement/ with a "
                         f"closing '/'")
    (pattern_text, _), (replacement, end) = pattern_end, replacement_end
    case = text[end] if end < len(text) and text[end] in "LU" else ""
    try:
        pattern = re.compile(pattern_text)
    except re.error as e:
        raise ValueError(f"Invalid rule: pattern {pattern_text!r} is not a regular expression: {e}") from None
    return MappingRule(pattern, _replacement_parts(replacement, pattern.groups), case), end + len(case)


def _entry_text(text: str, start: int) -> str:
    comma = text.find(",", start)
    return text[start:] if comma < 0 else text[start:comma]


def parse_mapping_rules(text: str | None) -> list[MappingRule]:
    """Parse `ssl.principal.mapping.rules`; None means Kafka's default, DEFAULT."""
    text = SSL_PRINCIPAL_MAPPING_RULES_DEFAULT if text is None else text
    rules, i = [], 0
    while True:
        while i < len(text) and (text[i].isspace() or text[i] == ","):
            i += 1
        if i >= len(text):
            return rules
        rule, end = _rule_at(text, i)
        i = end
        while i < len(text) and text[i].isspace():
            i += 1
        if i < len(text) and text[i] != ",":
            raise ValueError(f"Invalid rule: {text[:end][-40:]!r}, unmatched substring: "
                             f"{_entry_text(text, i)!r}")
        rules.append(rule)


class SslPrincipalMapper:
    def __init__(self, rules_text: str | None = None):
        self.rules = parse_mapping_rules(rules_text)
        self.rules_text = rules_text

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules {self.rules_text!r}")


# --- certificate subjects -----------------------------------------------------------------------

# Python's ssl names for the attributes Java's X500Principal.getName() writes as keywords
_RFC2253_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
    "domainComponent": "DC", "userId": "UID",
}


def _escape_rfc2253(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def subject_dn(subject) -> str:
    """RFC 2253 text of a subject as `ssl.SSLSocket.getpeercert()["subject"]` gives it (a tuple of
    RDNs, each a tuple of (name, value)), most specific RDN first, as Java's getName() writes it.
    Attributes without an RFC 2253 keyword keep Python's name (Java would write the OID)."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_RFC2253_KEYWORDS.get(name, name)}={_escape_rfc2253(value)}" for name, value in rdn))
    return ",".join(rdns)


def principal_for(security_protocol: str, *, sasl_name: str | None = None, peer_subject=None,
                  mapper: SslPrincipalMapper | None = None) -> KafkaPrincipal:
    """The principal of an authenticated connection, as Kafka's DefaultKafkaPrincipalBuilder builds it.
    `security_protocol` is the listener's (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)."""
    if security_protocol.startswith("SASL_"):
        if not sasl_name:
            raise ValueError("a SASL connection has a principal only once SASL authentication completed")
        return KafkaPrincipal.user(sasl_name)
    if security_protocol == "SSL" and peer_subject:
        dn = subject_dn(peer_subject)
        name = (mapper or SslPrincipalMapper()).name(dn)
        if name == BROKER_USER:  # a super user: only Kray's own SCRAM login with its secret may be it
            raise NoMatchingRule(f"{dn} maps to User:{BROKER_USER}, the name of Kray's own broker login, which "
                                 f"no certificate may take: change ssl.principal.mapping.rules or the certificate")
        return KafkaPrincipal.user(name)
    return ANONYMOUS
