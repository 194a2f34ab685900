"""A place that keeps small records across runs and nodes: a folder or an `s3://` prefix
(PREFLIGHT_CERT_STORE, PREFLIGHT_LEDGER). Whole objects are written so that a reader never sees
half of one; JSON lines are appended so that concurrent writers never lose or mix a line:
in a folder under an exclusive `flock` on the one file, on S3 as one new object per append
(S3 has no append; a unique key per writer is what makes it safe)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

# The one AWS client with bounded timeouts and retries (publish.py's): a store never hangs a run.
from harness.report.publish import aws_client, parse_s3_uri

if TYPE_CHECKING:  # boto3 is optional
    from botocore.response import StreamingBody

__all__ = ["Store", "StoreError"]

#: Parallel GETs reading an S3 ledger (one object per line).
_S3_READERS = 16


class StoreError(Exception):
    """The store could not be read or written; str() names the place and the reason."""


@dataclass(frozen=True, slots=True)
class Store:
    """A folder (`root`) or an S3 bucket and prefix (`bucket`, `prefix`)."""

    where: str
    root: Path | None = None
    bucket: str = ""
    prefix: str = ""

    @classmethod
    def of(cls, where: str) -> Store:
        """`s3://bucket/prefix` or a folder path; ValueError for a malformed S3 URI."""
        if where.startswith("s3://"):
            loc = parse_s3_uri(where)
            return cls(where, bucket=loc.bucket, prefix=loc.prefix)
        return cls(where, root=Path(where))

    def __str__(self) -> str:
        return self.where

    def _fail(self, what: str, exc: BaseException) -> StoreError:
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return StoreError(f"{what} {self.where}: {why}")

    def put(self, name: str, data: bytes) -> None:
        """Write object `name` whole (a folder: temp file and rename)."""
        try:
            if self.root is None:
                aws_client("s3").put_object(Bucket=self.bucket, Key=self.prefix + name, Body=data)
                return
            path = self.root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except Exception as exc:
            raise self._fail(f"cannot write {name} to", exc) from None

    def get(self, name: str) -> bytes | None:
        """Object `name`, or None when there is none."""
        try:
            if self.root is None:
                return self._s3_get(self.prefix + name)
            return (self.root / name).read_bytes()
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._fail(f"cannot read {name} from", exc) from None

    def _s3_get(self, key: str) -> bytes | None:
        client = aws_client("s3")
        try:
            body: StreamingBody = client.get_object(Bucket=self.bucket, Key=key)["Body"]
        except client.exceptions.NoSuchKey:
            return None
        return bytes(body.read())

    def append_line(self, name: str, line: str, *, writer: str) -> None:
        """Append one JSON line (no newline in it) to the lines of `name`; `writer` (a host
        name) goes into the S3 key, for people reading the bucket."""
        if "\n" in line:
            raise ValueError("a JSON line holds no newline")
        data = (line + "\n").encode()
        try:
            if self.root is None:
                key = (f"{self.prefix}{name}.d/{time.time_ns():020d}-{_safe(writer)}-"
                       f"{secrets.token_hex(6)}.jsonl")
                aws_client("s3").put_object(Bucket=self.bucket, Key=key, Body=data)
                return
            path = self.root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # a line never interleaves with another's
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)  # closing drops the lock
        except Exception as exc:
            raise self._fail(f"cannot append to {name} in", exc) from None

    def read_lines(self, name: str) -> list[str]:
        """Every complete line of `name`, in the order written (S3: by key, which starts with
        the writer's clock); [] when there are none. A last line without its newline (a writer
        killed mid-write) is left out."""
        try:
            if self.root is None:
                return self._s3_lines(f"{self.prefix}{name}.d/")
            fd = os.open(self.root / name, os.O_RDONLY)
        except FileNotFoundError:
            return []
        except Exception as exc:
            raise self._fail(f"cannot read {name} from", exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            with os.fdopen(fd, "rb", closefd=False) as fh:
                text = fh.read().decode("utf-8", errors="replace")
        except OSError as exc:
            raise self._fail(f"cannot read {name} from", exc) from None
        finally:
            os.close(fd)
        return _complete_lines(text)

    def _s3_lines(self, prefix: str) -> list[str]:
        client = aws_client("s3")
        keys: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                      Prefix=prefix):
            keys += [obj["Key"] for obj in page.get("Contents", [])]

        def fetch(key: str) -> list[str]:
            with contextlib.suppress(client.exceptions.NoSuchKey):  # deleted since listed
                body = client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
                return _complete_lines(body.decode("utf-8", errors="replace"))
            return []

        # One GET per line: in parallel (boto3 clients are thread-safe), in key order.
        with ThreadPoolExecutor(max_workers=_S3_READERS) as pool:
            return [line for got in pool.map(fetch, sorted(keys)) for line in got]


def _complete_lines(text: str) -> list[str]:
    lines = text.split("\n")
    return [line for line in lines[:-1] if line.strip()]


def _safe(name: str) -> str:
    """`name` as one S3 key segment."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:100] or "unknown"
