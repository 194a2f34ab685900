"""Shell words of a command line as a POSIX shell (and Python's shlex) reads them, for the
environment reader of shell scripts (harness.parsers.env_script): comments, quotes, escapes,
`;&|` as words, `$(...)` kept whole. Regex-based (shlex reads one character at a time in Python,
most of a script's reading time); tests/test_parsers_env.py compares it with shlex."""

from __future__ import annotations

import re
import shlex

__all__ = ["shell_words", "shlex_words", "strip_comment"]

_COMMENT = re.compile(r"#(?<!\S#)")


def strip_comment(line: str) -> str:
    """`line` up to an unquoted `#` that starts a word (as the shell reads it)."""
    if "#" not in line:
        return line
    if _UNQUOTED.fullmatch(line):  # no quote or escape: the first `#` that starts a word
        m = _COMMENT.search(line)
        return line if m is None else line[:m.start()]
    quote = ""
    escaped = False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


_PLAIN_WORDS = re.compile(r"[^\"'\\;&|]*")
_BLANKS = re.compile(r"[ \t\r\n]+")
# The words of a line as Python's shlex reads them (posix, whitespace_split, punctuation_chars
# ";&|", no comments): runs of unquoted characters, "double-quoted" (backslash escapes only `"`
# and `\`), 'single-quoted' and \-escaped pieces glued into one word; runs of ;&| on their own.
# shlex itself reads one character at a time in Python (half the time of a script); these
# patterns find the same words (tests/test_parsers_env.py compares them with shlex on every
# sample line and on fuzzed ones). Each piece is unambiguous, so the scan is linear.
_PIECE = r"[^ \t\r\n\"'\\;&|]+|\"(?:[^\"\\]|\\[\s\S])*\"|'[^']*'|\\[\s\S]"
_TOKEN = re.compile(rf"(?P<word>(?:{_PIECE})+)|(?P<punct>[;&|]+)|[ \t\r\n]+")
_PART = re.compile(_PIECE)
_UNQUOTED = re.compile(r"[^\"'\\]*")
_ANY_TOKEN = re.compile(rf"(?:{_PIECE})+|[;&|]+|[ \t\r\n]+")
_ESCAPED_IN_DOUBLE = re.compile(r"\\([\"\\])")


def shell_words(text: str) -> list[str]:
    """Shell words, with `;`, `&&`, `||`, `|` and `&` as words of their own; ValueError for an
    unclosed quote, `$(` or a trailing backslash (as shlex). A `$(...)` command substitution
    is kept as written, its own quotes included (see _substitutions)."""
    if _PLAIN_WORDS.fullmatch(text):  # nothing for the shell to interpret: split at blanks
        return [w for w in _BLANKS.split(text) if w]
    if "$(" in text and "\x00" not in text and (spans := _substitutions(text)):
        # Each `$(...)` stands in as a placeholder no rule reads, and comes back in its word.
        held = [text[a:b] for a, b in spans]
        for i, (a, b) in reversed(list(enumerate(spans))):
            text = f"{text[:a]}\x00{i}\x00{text[b:]}"
        return [_HELD.sub(lambda m: held[int(m[1])], w) for w in shell_words(text)]
    # One findall for all the tokens; when they cover the text (no unclosed quote, no trailing
    # backslash) they are the ones the loop below finds one match at a time.
    tokens = _ANY_TOKEN.findall(text)
    if sum(map(len, tokens)) == len(text):
        return [(t if _UNQUOTED.fullmatch(t) else "".join(map(_unquote, _PART.findall(t))))
                for t in tokens if t[0] not in " \t\r\n"]
    words = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError("No closing quotation" if text[pos] in "\"'" else "No escaped character")
        pos = m.end()
        if m["punct"]:
            words.append(m["punct"])
        elif m["word"] is not None:
            words.append("".join(_unquote(p) for p in _PART.findall(m["word"])))
    return words


_HELD = re.compile("\x00([0-9]+)\x00")


def _substitutions(text: str) -> list[tuple[int, int]]:
    """The (start, end) of each outermost `$(...)` of `text` outside single quotes. Bash reads a
    command substitution as a new quoting context, inside double quotes too (bash manual, Command
    Substitution: `"$(python3 -c 'print("x")')"` is one word), where shlex ends the word at the
    first inner `"`. ValueError when one is not closed (its command goes on in the next line).
    (The scan jumps from one character that matters to the next with a regex search.)"""
    spans = []
    i, quote = 0, ""
    while True:
        if quote == "'":  # nothing is special up to the closing quote
            i = text.find("'", i) + 1
            if not i:
                return spans
            quote = ""
            continue
        m = _SUB_STOP.search(text, i)
        if m is None:
            return spans
        i, ch = m.start(), m[0][0]
        if ch == "\\":
            i += 2
        elif ch == "$":
            end = _substitution_end(text, i + 2)
            spans.append((i, end))
            i = end
        elif ch == quote:
            quote, i = "", i + 1
        elif not quote:
            quote, i = ch, i + 1
        else:  # a `'` inside double quotes
            i += 1


_SUB_STOP = re.compile(r"[\\'\"]|\$\(")
_END_STOP = re.compile(r"[\\'\"()]|\$\(")
_DOUBLE_STOP = re.compile(r"[\\\"]|\$\(")


def _substitution_end(text: str, i: int) -> int:
    """The index after the `)` that closes the `$(` before text[i] (quotes, escapes and
    parentheses inside it balanced)."""
    depth, quote = 1, ""
    while True:
        if quote == "'":
            i = text.find("'", i) + 1
            if not i:
                break
            quote = ""
            continue
        m = (_DOUBLE_STOP if quote else _END_STOP).search(text, i)
        if m is None:
            break
        i, ch = m.start(), m[0][0]
        if ch == "\\":
            i += 2
        elif quote:  # `"` closes the double quotes; a `$(` inside them is read whole
            if ch == '"':
                quote, i = "", i + 1
            else:
                i = _substitution_end(text, i + 2)
        elif ch in "\"'":
            quote, i = ch, i + 1
        elif ch == ")":
            depth -= 1
            if not depth:
                return i + 1
            i += 1
        else:  # `(` or `$(`
            depth += 1
            i += len(m[0])
    raise ValueError("No closing parenthesis")


def _unquote(piece: str) -> str:
    if piece[0] == '"':
        return _ESCAPED_IN_DOUBLE.sub(r"\1", piece[1:-1])
    if piece[0] == "'":
        return piece[1:-1]
    if piece[0] == "\\":
        return piece[1]
    return piece


def shlex_words(text: str) -> list[str]:
    """The same words by Python's shlex (the reference shell_words is tested against)."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)
