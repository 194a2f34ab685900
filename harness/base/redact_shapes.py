"""Secret-shaped text, whatever variable, key or log line holds it: provider token formats, AWS
key ids, JWTs, private-key PEM blocks, `Basic`/`Bearer` credentials (harness.base.redact uses them).

Every pattern starts at a literal that no character of its own run can precede (a lookbehind
on the class it repeats), and repeats no group whose repetitions could overlap, so that each
runs in time linear in the text however the text is built (bench/bench_redact.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["AUTH_SCHEMES", "REDACTED", "SHAPES", "Shape", "credential_end", "shortened_tokens"]

REDACTED = "***REDACTED***"

#: Not inside a longer run of token characters (`\b` would let `_ASIA...` or `x-sk-...` pass
#: and, for a `-`, start a match inside a word).
_START = r"(?<![A-Za-z0-9_-])"
#: ... and not followed by one (a 20-character AWS id inside a longer identifier is not one).
_END = r"(?![A-Za-z0-9])"


def _mixed(token: str) -> bool:
    """A generated key mixes digits, upper and lower case; a hyphenated word does not."""
    return (any(c.isdigit() for c in token) and any(c.isupper() for c in token)
            and any(c.islower() for c in token))


def _base64_credential(token: str) -> bool:
    """`Basic` + base64 of `user:password` (a multiple of 4 long), not `Basic information`."""
    body = token.split()[-1]
    return len(body) % 4 == 0 and (any(c.isdigit() or c in "+/=" for c in body)
                                   or any(c.isupper() for c in body[1:]))


@dataclass(frozen=True, slots=True)
class Shape:
    """One secret format: `hint` (a literal, or literals sharing a first character, that the
    text must hold: a fast skip, one scan), the pattern, and an optional test of a match (a
    shape too plain to tell from words by its pattern alone)."""

    name: str
    hint: re.Pattern[str]
    pattern: re.Pattern[str]
    accept: Callable[[str], bool] | None = None


def _hint(*literals: str) -> re.Pattern[str]:
    return re.compile("|".join(map(re.escape, literals)))


_AWS_PREFIXES = ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA", "ABIA", "ACCA")


def _token(lead: str, rest: str, before: str = "A-Za-z0-9_-") -> re.Pattern[str]:
    """`lead` (a literal) then `rest`, where no character of `before` precedes `lead`. The
    pattern starts with the literal (re then finds it as fast as str.find); the check of the
    character before it is a lookbehind after it (`\\b` or a lookbehind first would make re
    try the pattern at every position)."""
    lead = re.escape(lead)
    return re.compile(rf"{lead}(?<=(?<![{before}]){lead}){rest}")


#: The prefixes of the token shapes below, for a token shortened to its two ends.
_TOKEN_PREFIXES = re.compile(
    r"hf_|gh[pousr]_|github_pat_|gl(?:pat|dt|rt|ptt|cbt|ft|imt|oas|soat|agent)-|sk-"
    r"|xox[abeoprs]-|AKIA|ASIA|eyJ|AIza|npm_|pypi-")

SHAPES: tuple[Shape, ...] = (
    # AWS access key ids: AKIA (long-term), ASIA (temporary, STS), and the other unique-id kinds.
    Shape("aws-key-id", re.compile(f"A(?:{'|'.join(p[1:] for p in _AWS_PREFIXES)})"),
          _token("A", rf"(?:{'|'.join(p[1:] for p in _AWS_PREFIXES)})[0-9A-Z]{{16}}{_END}",
                 before="A-Za-z0-9")),
    Shape("hugging-face", _hint("hf_"), _token("hf_", r"[A-Za-z0-9]{30,}")),
    Shape("github", _hint("gh"), _token("gh", r"[pousr]_[A-Za-z0-9]{36,}")),
    Shape("github-fine-grained", _hint("github_pat_"),
          _token("github_pat_", r"[A-Za-z0-9_]{22,}")),
    # GitLab: personal/project/group (glpat-), deploy (gldt-), runner (glrt-), pipeline trigger
    # (glptt-), CI job (glcbt-), feed (glft-), incoming mail (glimt-), OAuth secret (gloas-).
    Shape("gitlab", _hint("gl"), _token(
        "gl", r"(?:pat|dt|rt|ptt|cbt|ft|imt|oas|soat|agent)-[A-Za-z0-9_-]{20,}")),
    Shape("slack", _hint("xox"), _token("xox", r"[abeoprs]-[A-Za-z0-9-]{10,}")),
    # OpenAI (`sk-`, `sk-proj-`, `sk-svcacct-`) and Anthropic (`sk-ant-api03-`) keys; a
    # hyphenated word after `sk-` has no digits and upper case in it.
    Shape("openai-anthropic", _hint("sk-"), _token("sk-", r"[A-Za-z0-9_-]{20,}"),
          lambda t: _mixed(t[3:])),
    Shape("google-api", _hint("AIza"), _token("AIza", r"[0-9A-Za-z_-]{35}")),
    Shape("stripe", _hint("_live_"), re.compile(rf"{_START}(?:sk|rk)_live_[0-9A-Za-z]{{16,}}")),
    Shape("pypi", _hint("pypi-"), _token("pypi-", r"AgE[A-Za-z0-9_-]{50,}")),
    Shape("npm", _hint("npm_"), _token("npm_", r"[A-Za-z0-9]{36}")),
    # A JWT (JWS compact form): base64url JSON header (`{"` is `eyJ`), payload, signature.
    Shape("jwt", _hint("eyJ"), _token(
        "eyJ", r"[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")),
    Shape("bearer", _hint("earer"),
          re.compile(r"[Bb]earer(?<=\b[Bb]earer)\s+[A-Za-z0-9._~+/=-]{8,}")),
    Shape("basic", _hint("asic"),
          re.compile(r"[Bb]asic(?<=\b[Bb]asic)[ \t]+[A-Za-z0-9+/]{8,}={0,2}(?![\w+/=])"),
          _base64_credential),
    # A PEM private key (RSA, EC, OPENSSH, ENCRYPTED, PGP ... BLOCK): up to its END line (the
    # scan stops at the next BEGIN/END, so it is linear however many headers there are), or,
    # cut short, the base64 lines after its header (real newlines or the `\n` escapes of a
    # JSON or env value). Certificates and public keys are not secrets: they stay.
    Shape("private-key", _hint("-----BEGIN "), re.compile(
        r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?:"
        r"(?:(?!-----(?:BEGIN|END) )[\s\S]){0,65536}?-----END [A-Z ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"|(?:(?:\\r)?(?:\\n)|\r?\n)?(?:[A-Za-z0-9+/=]{1,1024}(?:(?:\\r)?\\n|\r?\n)?)*)")),
)

#: Authorization schemes (IANA's HTTP Authentication Scheme Registry and common vendor ones):
#: after a credential's name (`auth: Basic ...`, `token: Bearer ...`) such a word and what
#: follows it are the credential. After `Authorization:` any scheme word is.
AUTH_SCHEMES = frozenset(s.lower() for s in (
    "Basic", "Bearer", "Digest", "DPoP", "HOBA", "Mutual", "Negotiate", "NTLM", "OAuth",
    "PrivateToken", "SCRAM-SHA-1", "SCRAM-SHA-256", "vapid", "Token", "ApiKey", "Api-Key", "Key",
    "JWT", "SharedKey", "SharedKeyLite", "SSWS", "Splunk", "GenieKey", "AWS4-HMAC-SHA256",
    "AWS", "Kerberos", "GoogleLogin", "Hawk", "EdgeGrid", "Signature", "Credential"))

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*[ \t]+")
#: The credentials after a scheme: a token68 (`dXNlcjpwYXNz==`) or an auth-param list
#: (`username="u", realm="r", response="..."`, `Credential=AKIA.../s3/aws4_request, ...`).
#: Each repetition of the list starts with a comma, so it cannot overlap the one before.
_PARAM = r"[A-Za-z0-9_-]+=(?:\\*\"[^\"\n]*\"|[^\s,\"']*)"
_CREDENTIALS = re.compile(rf"{_PARAM}(?:[ \t]*,[ \t]*{_PARAM})*|[A-Za-z0-9._~+/-]+=*")


def credential_end(text: str, start: int, *, any_scheme: bool) -> tuple[int, int] | None:
    """(start, end) of what to redact when an auth scheme word and its credential are at
    `start`, else None. A known scheme (AUTH_SCHEMES) stays readable, its credential goes.
    `any_scheme` (after `Authorization:`): an unknown first word may be a scheme or already the
    credential, so it goes with what follows it."""
    scheme = _SCHEME.match(text, start)
    if scheme is None:
        return None
    known = scheme.group(0).rstrip().lower() in AUTH_SCHEMES
    if not (known or any_scheme):
        return None
    if text.startswith(REDACTED, scheme.end()):  # redacted already (a shape): nothing left
        return scheme.end(), scheme.end()
    found = _CREDENTIALS.match(text, scheme.end())
    if found is None or found.end() == found.start():
        return None
    return (found.start() if known else start), found.end()


#: A token's characters before a shortening `...` (a run of them ends at `=`, so that the
#: prefix of `x=hf_ab...` is found), and after it.
_HEAD_RUN = re.compile(r"[A-Za-z0-9_-]+")
_TAIL_RUN = re.compile(r"[A-Za-z0-9_+/=-]*")
#: The longest head of a shortened token looked at.
_HEAD_CHARS = 128


def shortened_tokens(text: str) -> str:
    """A token shape shortened to its ends by pytest's assertion message or reprlib
    (`'ghp_abcdefgh...uvwxyz01'`), or cut (`hf_abc...`): from each `...`, the run of token
    characters before it (read reversed: one slice per `...`) starting with a token prefix."""
    parts, done, pos = [], 0, 0
    while (dots := text.find("...", pos)) >= 0:
        pos = dots + 3
        lo = max(done, dots - _HEAD_CHARS)
        run = _HEAD_RUN.match(text[lo:dots][::-1])
        if run is None:
            continue
        start = dots - run.end()
        prefix = _TOKEN_PREFIXES.match(text, start, dots)
        if prefix is None or dots - prefix.end() < 2:
            continue
        end = _TAIL_RUN.match(text, pos).end()  # type: ignore[union-attr]
        parts += [text[done:start], REDACTED]
        done = pos = end
    if not parts:
        return text
    return "".join([*parts, text[done:]])
