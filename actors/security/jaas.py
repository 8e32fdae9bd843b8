"""Kafka's `sasl.jaas.config` strings, parsed as Kafka's JaasConfig reads them.

    <login module class> <control flag> (<option>=<value>)* ;   (one or more entries)

Values are quoted ("..." or '...', with backslash escapes) or bare words; `//` and `/* */`
comments are skipped; the control flag is required, requisite, sufficient or optional (any case).
Unlike Kafka's tokenizer, a bare value may start with a digit (Kafka refuses `key=123` unquoted).
"""
from __future__ import annotations

from dataclasses import dataclass

CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
JAAS_CONFIG_CHARS_MAX = 1_048_576  # a JAAS string in a config file; Kafka has no limit of its own
_WORD_PUNCTUATION = set("-_$.")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    control_flag: str  # lower case
    options: dict[str, str]


def _is_word_char(c: str) -> bool:
    return c.isalnum() or c in _WORD_PUNCTUATION or ord(c) >= 128


def _tokens(text: str):
    """Yield ('word', text), ('quoted', text) or ('punct', char)."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ValueError("JAAS config: a '/*' comment is not closed")
            i = end + 2
        elif c in "\"'":
            value, i = _quoted(text, i)
            yield "quoted", value
        elif _is_word_char(c):
            start = i
            while i < n and _is_word_char(text[i]):
                i += 1
            yield "word", text[start:i]
        else:
            yield "punct", c
            i += 1


def _quoted(text: str, start: int) -> tuple[str, int]:
    quote, out, i = text[start], [], start + 1
    while i < len(text):
        c = text[i]
        if c == quote:
            return "".join(out), i + 1
        if c == "\n":
            break
        if c == "\\" and i + 1 < len(text):
            i += 1
            out.append(_ESCAPES.get(text[i], text[i]))
        else:
            out.append(c)
        i += 1
    raise ValueError(f"JAAS config: a value starting with {quote} is not closed on its line")


def parse_jaas_config(text: str) -> list[JaasEntry]:
    if len(text) > JAAS_CONFIG_CHARS_MAX:
        raise ValueError(f"JAAS config: {len(text)} characters exceed {JAAS_CONFIG_CHARS_MAX}")
    tokens = list(_tokens(text))
    entries, i = [], 0
    while i < len(tokens):
        kind, module = tokens[i]
        if kind != "word":
            raise ValueError(f"JAAS config: expected a login module class name, found {module!r}")
        if i + 1 >= len(tokens):
            raise ValueError("JAAS config: login module control flag not specified")
        flag = tokens[i + 1][1].lower()
        if flag not in CONTROL_FLAGS:
            raise ValueError(f"JAAS config: invalid login module control flag {tokens[i + 1][1]!r} "
                             f"(one of {', '.join(CONTROL_FLAGS)})")
        options, i = {}, i + 2
        while i < len(tokens) and tokens[i] != ("punct", ";"):
            kind, key = tokens[i]
            if kind != "word":
                raise ValueError(f"JAAS config: expected an option name, found {key!r}")
            if i + 2 >= len(tokens) or tokens[i + 1] != ("punct", "=") or tokens[i + 2][0] == "punct":
                raise ValueError(f"JAAS config: value not specified for key {key!r}")
            options[key] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise ValueError(f"JAAS config: the entry for {module} is not terminated by a semicolon")
        entries.append(JaasEntry(module, flag, options))
        i += 1
    if not entries:
        raise ValueError("JAAS config: login module not specified")
    return entries
